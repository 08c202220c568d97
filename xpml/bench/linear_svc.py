"""LinearSVC fits against ``sklearn.svm.LinearSVC`` (LIBLINEAR), both losses.

Data: a standard-normal ``X (n, d)``, labels from a random linear rule through
a logistic link (about 10 % of the labels against the rule, so the problem is
not separable), the same arrays for both libraries. Both sides run with their
defaults apart from the loss: ``C=1``, ``tol=1e-4``, ``max_iter=1000``,
``dual="auto"`` (for the squared hinge with ``n > d`` that is LIBLINEAR's
primal trust-region Newton solver; the hinge has only the dual, coordinate
descent in LIBLINEAR). A LIBLINEAR fit that stops at ``max_iter`` is noted.

The "dcd" cases run ``solver="dcd"`` (blocked dual coordinate descent)
against LIBLINEAR's dual coordinate descent, ``dual=True`` on both sides, same
``C``, ``tol`` and ``max_iter``; the note gives both epoch counts.

LIBLINEAR is single-threaded, so the suite runs xpml with one BLAS thread too
(``threadpoolctl``; ``XPML_BENCH_LINEAR_SVC_BLAS_THREADS`` changes it).
``DEFAULT = False``: the hinge cases at n = 100 000 take minutes.

``XPML_BENCH_LINEAR_SVC_SOLVERS`` (comma-separated, default ``newton,dcd``)
picks the solvers timed: the "dcd" cases run a Python loop per block on the
host and take several times LIBLINEAR's minutes (``newton`` alone keeps the
suite to the default solver's rows).
"""

import contextlib
import os
import warnings

import numpy as np

SUITE = "linear_svc"
DEFAULT = False
DIMS = (50, 500)


def _data(n, d, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    w = rng.standard_normal(d) / np.sqrt(d)
    z = 4.0 * (X @ w) + 0.2
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(np.int64)
    return X, y


def _blas_threads():
    n = int(os.environ.get("XPML_BENCH_LINEAR_SVC_BLAS_THREADS", "1"))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")


def _ref_fit(loss, X, y, notes, *, dual="auto", max_iter=1000):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC as SkLinearSVC

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        est = SkLinearSVC(loss=loss, dual=dual, max_iter=max_iter).fit(X, y)
    if any(issubclass(w.category, ConvergenceWarning) for w in caught):
        notes.add("LIBLINEAR stopped at max_iter")
    return est


def _solvers():
    names = os.environ.get("XPML_BENCH_LINEAR_SVC_SOLVERS", "newton,dcd")
    chosen = {s.strip() for s in names.split(",") if s.strip()}
    unknown = chosen - {"newton", "dcd"}
    if unknown or not chosen:
        raise ValueError(
            "XPML_BENCH_LINEAR_SVC_SOLVERS must list 'newton' and/or 'dcd' "
            f"(comma-separated); got {names!r}"
        )
    return chosen


def run(bench):
    with _blas_threads():
        _run(bench)


def _run(bench):
    solvers = _solvers()
    for n in bench.sizes([20_000, 100_000], [2_000]):
        for d in DIMS if not bench.quick else DIMS[:1]:
            X, y = _data(n, d)
            Xb, yb = bench.to_backend(X, y)
            for loss in ("squared_hinge", "hinge"):
                if "newton" in solvers:
                    _newton_case(bench, n, d, loss, (X, y, Xb, yb))
                if "dcd" in solvers:
                    _dcd_case(bench, n, d, loss, (X, y, Xb, yb))


def _newton_case(bench, n, d, loss, data):
    """The default solver against LIBLINEAR's default for the loss."""
    from xpml.svm import LinearSVC

    X, y, Xb, yb = data
    notes = set()
    r = bench.compare(
        SUITE,
        f"LinearSVC.fit {loss} d={d}",
        n,
        lambda: LinearSVC(loss=loss).fit(Xb, yb),
        lambda: _ref_fit(loss, X, y, notes),
        params={"d": d, "loss": loss, "C": 1.0, "tol": 1e-4},
        repeats=3,
        once=n > 20_000,  # the long cases: one cold call each
    )
    r.note = "; ".join(sorted(notes))  # known once the reference ran


def _dcd_case(bench, n, d, loss, data):
    """solver="dcd" against LIBLINEAR's dual coordinate descent (``dual=True``
    both sides, same C, tol and max_iter); the epochs of both in the note."""
    from xpml.svm import LinearSVC

    X, y, Xb, yb = data
    iters = {}
    max_iter = 20 if bench.quick else 1000  # both sides: a smoke run stays short

    def ours():
        est = LinearSVC(
            loss=loss, solver="dcd", dual=True, random_state=0, max_iter=max_iter
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            iters["xpml"] = est.fit(Xb, yb).n_iter_
        return est

    def ref():
        notes = set()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = _ref_fit(loss, X, y, notes, dual=True, max_iter=max_iter)
        iters["liblinear"] = int(np.max(est.n_iter_))
        return est

    r = bench.compare(
        SUITE,
        f"LinearSVC.fit dcd {loss} d={d}",
        n,
        ours,
        ref,
        params={
            "d": d,
            "loss": loss,
            "tol": 1e-4,
            "max_iter": max_iter,
            "solver": "dcd",
        },
        repeats=3,
        once=n > 20_000,
    )
    r.note = f"epochs xpml {iters.get('xpml')}, liblinear {iters.get('liblinear')}"
