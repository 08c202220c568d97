"""SVC fit on several data shapes against ``sklearn.svm.SVC`` (LIBSVM), one
BLAS thread on both sides (run when named: ``xpml bench svm-shapes``).

The shapes stress different parts of the solver:

``d20``      ``make_classification(n, 20 features, 10 informative)``: about a
             third of the points are support vectors, two thirds of those at
             the bound C.
``noisy``    the same with 30 % of the labels flipped: most points are support
             vectors, most at the bound (many bounded SVs, long solves).
``d2``       two informative features: few support vectors, most variables
             leave the problem early (shrinking and small working sets).
``d500``     500 features, 10 informative: kernel rows are expensive
             (``q² d`` and ``n d`` flops per row), almost every point a
             support vector.

Everything standardized; RBF kernel with ``gamma="scale"``, ``C=1``,
``tol=1e-3`` on both sides, each library with its own default cache
(scikit-learn 200 MB of float32 kernel columns; xpml ``cache_size=200`` MB of
float64 rows, allocated as they are needed). The note gives the support
vector counts of both.
"""

import numpy as np

SUITE = "svm-shapes"
DEFAULT = False  # several minutes: only when asked for by name

SHAPES = {
    "d20": {"n_features": 20, "n_informative": 10, "flip_y": 0.01},
    "noisy": {"n_features": 20, "n_informative": 10, "flip_y": 0.3},
    "d2": {"n_features": 2, "n_informative": 2, "flip_y": 0.01},
    "d500": {"n_features": 500, "n_informative": 10, "flip_y": 0.01},
}


def shape_data(name, n, seed=0):
    """Standardized ``(X, y)`` of the shape ``name`` with ``n`` samples."""
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler

    kw = dict(SHAPES[name])
    kw["n_redundant"] = 0 if kw["n_features"] < 4 else 2
    X, y = make_classification(n_samples=n, random_state=seed, **kw)
    return StandardScaler().fit_transform(X), y


def run(bench):
    from xpml.bench.svm import _blas_threads

    with _blas_threads():
        _run(bench)


def _run(bench):
    from sklearn.svm import SVC as SkSVC

    from xpml.svm import SVC

    for shape in SHAPES:
        sizes = [2000, 5000] if shape == "d500" else [2000, 5000, 10000, 20000]
        for n in bench.sizes(sizes, [1000, 2000]):
            X, y = shape_data(shape, n)
            Xb, yb = bench.to_backend(X, y)
            ours, ref = SVC(), SkSVC()
            r = bench.compare(
                SUITE,
                f"SVC.fit rbf {shape}",
                n,
                lambda ours=ours, Xb=Xb, yb=yb: ours.fit(Xb, yb),
                lambda ref=ref, X=X, y=y: ref.fit(X, y),
                params={"shape": shape, **SHAPES[shape]},
                repeats=3 if n <= 5000 else 1,
            )
            r.note = _sv_note(ours, ref)


def _sv_note(ours, ref):
    """Support-vector counts of both, from the fits made in this process (a
    side timed only cold, past the bench's once-over limit, has none)."""
    counts = []
    for est in (ours, ref):
        n_sv = getattr(est, "n_support_", None)
        counts.append("-" if n_sv is None else str(int(np.sum(np.asarray(n_sv)))))
    return f"SVs {counts[0]} vs {counts[1]}"
