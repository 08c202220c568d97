"""The same fits on a Dask cluster (1 and 2 worker processes) beside dask-ml
and beside single-machine xpml.

For each estimator (KMeans with k-means|| initialisation, PCA, Newton
LogisticRegression, LinearRegression, LDA, QDA, Lasso, and exact k-NN fitted
on dask then queried) and each cluster size, xpml's dask fit is
timed against dask-ml's estimator on the same persisted dask array (where
dask-ml has one and is installed; otherwise the case says so), and once against
xpml on the same data as one NumPy array in this process. The note gives the
bytes the workers sent to each other during one xpml fit (from their transfer
logs), against the size of ``X``.

The data are generated on the workers and persisted before timing. Cold
(fresh-process) calls are switched off for this suite: a fit on a cluster
cannot be replayed in a fresh process without it. Scaling needs more cores than
workers: on a small machine the 2-worker times show the engine's overhead, not
its speed-up.
"""

from __future__ import annotations

import importlib.util

SUITE = "dask"
DEFAULT = False  # starts clusters of worker processes: only when named
REQUIRES = ("dask", "distributed")
D = 20


def _cluster(n_workers):
    """A local cluster of worker processes (``XPML_BENCH_DASK_PROCESSES=0``:
    in-process workers, for a machine too busy to start processes quickly)."""
    import os

    import dask
    import distributed

    # the transfer logs the byte counts come from keep 1000 entries by default:
    # a long fit would push the first ones out (and the difference negative)
    dask.config.set({"distributed.admin.low-level-log-length": 10**7})
    cluster = distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=os.environ.get("XPML_BENCH_DASK_PROCESSES", "1") != "0",
        dashboard_address=None,
    )
    return cluster, distributed.Client(cluster)


def _data(n, rows):
    import dask.array as da
    import distributed

    rng = da.random.default_rng(0)
    X = rng.standard_normal((n, D), chunks=(rows, D))
    w = rng.standard_normal(D, chunks=D)
    y = (X @ w + 0.5 * rng.standard_normal(n, chunks=rows) > 0).astype("int64")
    y_reg = X @ w + 0.1 * rng.standard_normal(n, chunks=rows)
    X, y, y_reg = (a.persist() for a in (X, y, y_reg))
    distributed.wait([X, y, y_reg])
    return X, y, y_reg


def _peer_bytes(client):
    """Bytes sent worker-to-worker so far, from every worker's transfer log."""

    def sent(dask_worker):
        return [(e["who"], e["total"]) for e in dask_worker.transfer_outgoing_log]

    workers = set(client.scheduler_info()["workers"])
    logs = client.run(sent)
    return sum(total for log in logs.values() for who, total in log if who in workers)


def _moved(client, fit, X):
    """Bytes moved between workers by one call of ``fit``, as a note."""
    before = _peer_bytes(client)
    fit()
    moved = _peer_bytes(client) - before
    return (
        f"{moved / 2**20:.2f} MiB between workers ({100 * moved / X.nbytes:.1f}% of X)"
    )


class _FitQuery:
    """Fit, then answer ``Q`` (NumPy, 1000 queries): a k-NN fit on dask keeps
    the data on the cluster, so its work is in the queries."""

    def __init__(self, est, Q):
        self.est, self.Q = est, Q

    def fit(self, X, y):
        return self.est.fit(X, y).predict(self.Q)


def _queries():
    import numpy as np

    return np.random.default_rng(1).standard_normal((1000, D))


def _cases():
    from xpml.cluster import KMeans
    from xpml.decomposition import PCA
    from xpml.discriminant_analysis import (
        LinearDiscriminantAnalysis,
        QuadraticDiscriminantAnalysis,
    )
    from xpml.linear_model import Lasso, LinearRegression, LogisticRegression
    from xpml.neighbors import KNeighborsClassifier

    Q = _queries()

    def dml(module, name, **kw):
        def make():
            return getattr(importlib.import_module(f"dask_ml.{module}"), name)(**kw)

        return make

    return [
        (
            "KMeans k=8 (k-means||)",
            lambda: KMeans(n_clusters=8, random_state=0, max_iter=30),
            dml("cluster", "KMeans", n_clusters=8, random_state=0, max_iter=30),
            None,
        ),
        (
            "PCA 10 components",
            lambda: PCA(n_components=10, svd_solver="covariance_eigh"),
            dml("decomposition", "PCA", n_components=10, svd_solver="tsqr"),
            None,
        ),
        (
            "LogisticRegression newton C=1",
            lambda: LogisticRegression(C=1.0),
            dml("linear_model", "LogisticRegression", C=1.0, solver="newton"),
            "y",
        ),
        ("LinearRegression", lambda: LinearRegression(), None, "y_reg"),
        ("LDA svd", lambda: LinearDiscriminantAnalysis(), None, "y"),
        ("QDA svd", lambda: QuadraticDiscriminantAnalysis(), None, "y"),
        ("Lasso alpha=0.01", lambda: Lasso(alpha=0.01), None, "y_reg"),
        (
            "KNeighborsClassifier k=5 fit + 1000 queries",
            lambda: _FitQuery(KNeighborsClassifier(n_neighbors=5), Q),
            None,
            "y",
        ),
    ]


def _run_size(bench, n, n_workers, have_dml):
    rows = max(n // 16, 500)
    cluster, client = _cluster(n_workers)
    with cluster, client:
        X, y, y_reg = _data(n, rows)
        targets = {"y": y, "y_reg": y_reg, None: None}
        local = {
            k: (v.compute() if v is not None else None) for k, v in targets.items()
        }
        X_np = X.compute() if n_workers == 2 else None
        for case, make, make_ref, target in _cases():
            args = () if target is None else (targets[target],)
            note = _moved(client, lambda: make().fit(X, *args), X)
            ref = None
            if make_ref is not None and have_dml:
                ref = lambda: make_ref().fit(X, *args)  # noqa: E731
            elif make_ref is not None:
                note += "; dask-ml not installed: no reference"
            params = {"d": D, "workers": n_workers, "chunk_rows": rows}
            bench.compare(
                SUITE,
                f"{case} · {n_workers} worker(s)",
                n,
                lambda: make().fit(X, *args),
                ref,
                ref_name="dask-ml",
                params=params,
                note=note,
            )
            if X_np is not None:
                largs = () if target is None else (local[target],)
                bench.compare(
                    SUITE,
                    f"{case} · dask (2 workers) vs one process",
                    n,
                    lambda: make().fit(X, *args),
                    lambda: make().fit(X_np, *largs),
                    ref_name="xpml (NumPy, one process)",
                    params=params,
                )


def run(bench):
    have_dml = importlib.util.find_spec("dask_ml") is not None
    if not have_dml:
        bench.echo("dask: dask-ml is not installed; its reference cases are skipped")
    cold = bench.cold
    bench.cold = "off"  # a cluster fit has no fresh-process replay
    try:
        for n in bench.sizes([1_000_000], [200_000], [5_000]):
            for n_workers in (1, 2):
                _run_size(bench, n, n_workers, have_dml)
    finally:
        bench.cold = cold
