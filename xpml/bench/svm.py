"""SVC fit and decision_function against ``sklearn.svm.SVC`` (LIBSVM).

Data: ``make_classification(n, 20 features)``, standardized; RBF kernel,
``gamma=0.05``, ``C=1``, ``tol=1e-3`` on both sides. Each library runs with its
own default kernel cache (scikit-learn 200 MB of float32 columns, xpml
``cache_size=200`` MB of float64 rows, allocated as needed). decision_function is timed on the
training points with models fitted outside the timed region.

Threads: LIBSVM is single-threaded, so the suite runs xpml with one BLAS thread
as well (``threadpoolctl``; set ``XPML_BENCH_SVM_BLAS_THREADS`` to change it).
On a loaded machine multi-threaded OpenBLAS busy-waits: a 256×64 by 64×360
product measured 56 ms with two threads against 0.25 ms with one.
"""

import contextlib
import os

import numpy as np

SUITE = "svm"


def _data(n):
    from sklearn.datasets import make_classification
    from sklearn.preprocessing import StandardScaler

    X, y = make_classification(n_samples=n, n_features=20, random_state=0)
    return StandardScaler().fit_transform(X), y


def _blas_threads():
    n = int(os.environ.get("XPML_BENCH_SVM_BLAS_THREADS", "1"))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


def run(bench):
    with _blas_threads():
        _run(bench)


def _run(bench):
    from sklearn.svm import SVC as SkSVC

    from xpml.svm import SVC

    params = {"kernel": "rbf", "gamma": 0.05, "C": 1.0, "d": 20}
    for n in bench.sizes([2000, 5000, 10000, 20000], [1000, 2000]):
        X, y = _data(n)
        Xb, yb = bench.to_backend(X, y)
        reps = 3 if n <= 5000 else 1
        ours = SVC(gamma=0.05, C=1.0)
        ref = SkSVC(gamma=0.05, C=1.0)
        r = bench.compare(
            "svm",
            "SVC.fit rbf",
            n,
            lambda: ours.fit(Xb, yb),
            lambda: ref.fit(X, y),
            params=params,
            repeats=reps,
        )
        r.note = f"SVs {int(ours.support_.shape[0])} vs {int(np.sum(ref.n_support_))}"
        bench.compare(
            "svm",
            "SVC.decision_function rbf",
            n,
            lambda: ours.decision_function(Xb),
            lambda: ref.decision_function(X),
            params=params,
            repeats=reps,
        )
