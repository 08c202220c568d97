"""Large n on the CPU beside scikit-learn, with peak memory (``xpml bench --large``;
run by hand, never in the default run: the references alone take a long time).

Cases: SVC fit (RBF, the ``svm`` suite's data and settings) at n = 50,000 and
100,000, with the default float64 row cache and with ``cache_dtype="float32"``
(LIBSVM's storage: twice the rows in the same 200 MB); KernelRidge fit (RBF,
d = 20, ``compute_dof=False``) at n = 20,000;
k-NN predict (brute force, k = 5, d = 20) with 200,000 points and 20,000
queries; KMeans fit (k = 64, d = 20, the same initial centres on both sides) at
n = 1,000,000.

Each side is timed by one call in a fresh process (the cold call; ``--large``
starts a new interpreter for it unless ``--cold`` says otherwise), whose peak
resident memory (``VmHWM``) is the memory column: the interpreter, its
libraries and the data count in it, and the table shows in brackets what the
call added. ``--case-timeout SECONDS`` stops a side that runs longer (LIBSVM at
n = 100,000 can take an hour on two cores); the table then shows the bound.
"""

import numpy as np

SUITE = "large"
DEFAULT = False  # long: only with --large (or by name)


def _svc(bench):
    from sklearn.svm import SVC as SkSVC

    from xpml.bench.svm import _blas_threads, _data
    from xpml.svm import SVC

    params = {"kernel": "rbf", "gamma": 0.05, "C": 1.0, "d": 20}
    for n in bench.sizes([50_000, 100_000], [2000], [400]):
        X, y = _data(n)
        Xb, yb = bench.to_backend(X, y)
        for dtype in ("float64", "float32"):
            with _blas_threads():  # LIBSVM is single-threaded: so is xpml here
                bench.compare(
                    SUITE,
                    "SVC.fit rbf" + ("" if dtype == "float64" else " cache float32"),
                    n,
                    lambda dt=dtype: SVC(gamma=0.05, C=1.0, cache_dtype=dt).fit(Xb, yb),
                    lambda: SkSVC(gamma=0.05, C=1.0).fit(X, y),
                    params={**params, "cache_dtype": dtype},
                    once=True,
                    note="1 BLAS thread (as LIBSVM)",
                )


def _kernel_ridge(bench):
    from sklearn.kernel_ridge import KernelRidge as SK

    from xpml.kernel_ridge import KernelRidge

    d, gamma, alpha = 20, 0.05, 1.0
    for n in bench.sizes([20_000], [1000], [300]):
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, d))
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
        Xb, yb = bench.to_backend(X, y)
        bench.compare(
            SUITE,
            "KernelRidge fit rbf d=20",
            n,
            lambda: KernelRidge(
                alpha=alpha, kernel="rbf", gamma=gamma, compute_dof=False
            ).fit(Xb, yb),
            lambda: SK(alpha=alpha, kernel="rbf", gamma=gamma).fit(X, y),
            params={"d": d, "gamma": gamma, "alpha": alpha},
            once=True,
            note="compute_dof=False",
        )


def _neighbors(bench):
    from sklearn.neighbors import KNeighborsClassifier as SK

    from xpml.neighbors import KNeighborsClassifier

    d, k = 20, 5
    for n, m in bench.sizes([(200_000, 20_000)], [(5000, 1000)], [(1000, 200)]):
        rng = np.random.default_rng(0)
        X, Q = rng.standard_normal((n, d)), rng.standard_normal((m, d))
        y = rng.integers(0, 5, size=n)
        Xb, yb, Qb = bench.to_backend(X, y, Q)
        ours = KNeighborsClassifier(n_neighbors=k).fit(Xb, yb)
        ref = SK(n_neighbors=k, algorithm="brute").fit(X, y)
        bench.compare(
            SUITE,
            f"kNN predict brute k={k} d={d}",
            n,
            lambda: ours.predict(Qb),
            lambda: ref.predict(Q),
            params={"d": d, "k": k, "n_queries": m},
            once=True,
            note=f"{m} queries",
        )


def _kmeans(bench):
    from sklearn.cluster import KMeans as SK

    from xpml.cluster import KMeans

    d, k = 20, 64
    for n in bench.sizes([1_000_000], [20_000], [2000]):
        rng = np.random.default_rng(0)
        centres = 3.0 * rng.standard_normal((k, d))
        X = centres[rng.integers(0, k, size=n)] + rng.standard_normal((n, d))
        init = X[rng.choice(n, size=k, replace=False)]
        Xb, initb = bench.to_backend(X, init)
        bench.compare(
            SUITE,
            f"KMeans fit k={k} d={d}",
            n,
            lambda: KMeans(k, init=initb, max_iter=100).fit(Xb),
            lambda: SK(k, init=init, n_init=1, max_iter=100, algorithm="lloyd").fit(X),
            params={"d": d, "k": k, "max_iter": 100},
            once=True,
            note="same init, max_iter=100",
        )


def run(bench):
    _svc(bench)
    _kernel_ridge(bench)
    _neighbors(bench)
    _kmeans(bench)
