"""The same estimators on dask arrays, on a real ``distributed.LocalCluster``.

In-process workers (``processes=False``, one module-scoped cluster of two
workers) for speed; one test starts worker processes to catch pickling
problems. Reference answers are the single-machine fits on the same NumPy data.
"""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from xpml.base import clone  # noqa: E402
from xpml.cluster import KMeans  # noqa: E402
from xpml.decomposition import PCA  # noqa: E402
from xpml.discriminant_analysis import LinearDiscriminantAnalysis as LDA  # noqa: E402
from xpml.discriminant_analysis import QuadraticDiscriminantAnalysis as QDA  # noqa: E402
from xpml.ensemble import BaggingRegressor, RandomForestClassifier  # noqa: E402
from xpml.kernel_approximation import Nystroem, RandomFourierFeatures  # noqa: E402
from xpml.kernel_ridge import KernelRidge  # noqa: E402
from xpml.linear_model import (  # noqa: E402
    Lasso,
    LinearRegression,
    LogisticRegression,
    Ridge,
)
from xpml.naive_bayes import BernoulliNB, GaussianNB, MultinomialNB  # noqa: E402
from xpml.neighbors import (  # noqa: E402
    KNeighborsClassifier,
    KNeighborsRegressor,
    NearestNeighbors,
)
from xpml.svm import SVC  # noqa: E402
from xpml.tree import DecisionTreeClassifier  # noqa: E402

N, D = 403, 5
CHUNKINGS = {
    "uneven": (100, 150, 153),
    "single": (N,),
    "tiny": (3, 3, 1, 3, 393),  # blocks shorter than d + 1 rows
}


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def _data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, D)) + 3.0
    y = X @ np.arange(1.0, D + 1) + rng.standard_normal(N)
    c2 = (X[:, 0] + rng.standard_normal(N) > 3).astype(np.int64)
    c3 = np.digitize(X[:, 1] + rng.standard_normal(N), [2.5, 3.5])
    w = rng.uniform(0.5, 2.0, N)
    return X, y, c2, c3, w


def _dask(a, rows):
    return da.from_array(a, chunks=(rows,) + a.shape[1:])


X, Y, C2, C3, W = _data()
CASES = [
    (LinearRegression(), "y"),
    (LinearRegression(fit_intercept=False), "y"),
    (Ridge(alpha=2.0), "y"),
    (Ridge(alpha=2.0, solver="svd"), "y"),
    (PCA(n_components=3), None),
    (PCA(svd_solver="full"), None),
    (GaussianNB(), "c2"),
    (MultinomialNB(), "c3"),
    (BernoulliNB(binarize=3.0), "c3"),
    (LogisticRegression(), "c2"),
    (LogisticRegression(C=0.5), "c3"),
    (LogisticRegression(penalty=None, fit_intercept=False), "c2"),
    (KMeans(n_clusters=3, init=X[[0, 200, 400]]), None),
    (KMeans(n_clusters=4, init="forgy", n_init=2, max_iter=4, random_state=0), None),
    (Nystroem(n_components=30, gamma=0.2, random_state=0), None),
    (RandomFourierFeatures(n_components=30, gamma="scale", random_state=0), None),
    (Lasso(alpha=0.1), "y"),
    (Lasso(alpha=0.5, fit_intercept=False, positive=True), "y"),
    (Lasso(alpha=0.05, selection="random", random_state=0, tol=1e-8), "y"),
]
OTHER_CHUNKINGS = (
    0,
    3,
    4,
    6,
    8,
    12,
    16,
    18,
)  # one per family, KMeans the only iterative one
TARGETS = {"y": Y, "c2": C2, "c3": C3, None: None}
EXACT = ("labels_", "n_iter_", "classes_", "n_components_", "rank_", "converged_")


def _fitted_attributes(est):
    return {k: v for k, v in vars(est).items() if k.endswith("_") and k[0] != "_"}


def _fit_both(est, target, rows, weighted=False):
    Xf = np.abs(X) if isinstance(est, MultinomialNB) else X
    y = TARGETS[target]
    args = () if y is None else (y,)
    kw = {"sample_weight": W} if weighted else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = clone(est).fit(Xf, *args, **kw)
        dargs = tuple(_dask(a, rows) for a in args)
        dkw = {k: _dask(v, rows) for k, v in kw.items()}
        got = clone(est).fit(_dask(Xf, rows), *dargs, **dkw)
    return ref, got


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", range(len(CASES)), ids=lambda i: repr(CASES[i][0]))
def test_fit_matches_single_machine(client, case, chunking):
    est, target = CASES[case]
    if chunking != "uneven" and case not in OTHER_CHUNKINGS:
        pytest.skip("single-chunk and tiny-block fits: one case per estimator family")
    ref, got = _fit_both(est, target, CHUNKINGS[chunking])
    want, have = _fitted_attributes(ref), _fitted_attributes(got)
    assert set(have) == set(want)
    for name, value in want.items():
        assert not type(have[name]).__module__.startswith("dask"), name
        if name in EXACT or np.asarray(value).dtype.kind not in "fc":
            np.testing.assert_array_equal(have[name], value, err_msg=name)
        else:
            scale = max(1.0, float(np.max(np.abs(value), initial=0.0)))
            np.testing.assert_allclose(
                have[name], value, rtol=0, atol=1e-10 * scale, err_msg=name
            )
    assert len(pickle.dumps(got)) < 2**20


@pytest.mark.parametrize(
    "est,target",
    [
        (LinearRegression(), "y"),
        (Ridge(alpha=1.0), "y"),
        (GaussianNB(), "c2"),
        (LogisticRegression(), "c3"),
        (KMeans(n_clusters=3, init=X[[0, 200, 400]]), None),
        (Lasso(alpha=0.1), "y"),
    ],
    ids=repr,
)
def test_sample_weight(client, est, target):
    ref, got = _fit_both(est, target, CHUNKINGS["uneven"], weighted=True)
    for name, value in _fitted_attributes(ref).items():
        got_value = getattr(got, name)
        if np.asarray(value).dtype.kind == "f":
            np.testing.assert_allclose(got_value, value, rtol=0, atol=1e-10 * 100)
        else:
            np.testing.assert_array_equal(got_value, value)


DISCRIMINANT = [
    LDA(),
    LDA(store_covariance=True, n_components=1),
    LDA(priors=[0.2, 0.3, 0.5]),
    LDA(solver="lsqr"),
    LDA(solver="lsqr", shrinkage=0.3),
    LDA(solver="eigen"),
    LDA(solver="eigen", shrinkage=0.2),
    QDA(),
    QDA(reg_param=0.1, store_covariance=True),
    QDA(solver="eigen"),
    QDA(solver="eigen", shrinkage=0.3),
]
# singular vectors: equal up to the sign of each column (LDA "svd", QDA
# "svd"); LDA "eigen" only on its K - 1 discriminant directions (the others
# span the null space of the between-class scatter, any basis of it is valid)
SIGNED = ("scalings_", "rotations_")


def _up_to_sign(got, want, cols, err_msg):
    got, want = np.asarray(got)[:, :cols], np.asarray(want)[:, :cols]
    signs = np.where(np.sum(got * want, axis=0) < 0, -1.0, 1.0)
    np.testing.assert_allclose(got * signs, want, rtol=0, atol=1e-10, err_msg=err_msg)


def _check_discriminant(got, ref, K):
    want, have = _fitted_attributes(ref), _fitted_attributes(got)
    assert set(have) == set(want)
    for name, value in want.items():
        cols = K - 1 if getattr(ref, "solver", "") == "eigen" else None
        assert not type(have[name]).__module__.startswith("dask"), name
        pairs = zip(have[name], value) if isinstance(value, list) else None
        if name == "rotations_" and got.solver == "svd":
            for g, v in pairs:
                _up_to_sign(g, v, None, name)
        elif name in SIGNED and isinstance(got, LDA):
            _up_to_sign(have[name], value, cols, name)
        elif pairs is not None:
            for g, v in pairs:
                np.testing.assert_allclose(g, v, rtol=0, atol=1e-10, err_msg=name)
        elif name == "classes_":
            np.testing.assert_array_equal(have[name], value)
        else:  # as the other fits: 1e-10 relative to the attribute's scale
            scale = max(1.0, float(np.max(np.abs(value), initial=0.0)))
            np.testing.assert_allclose(
                have[name], value, rtol=0, atol=1e-10 * scale, err_msg=name
            )
    assert len(pickle.dumps(got)) < 2**20


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("est", DISCRIMINANT, ids=repr)
def test_discriminant_analysis(client, est, chunking, weighted):
    """Every fitted attribute of each solver, within 1e-10 of the single-machine
    fit (singular vectors up to sign); the same predictions on dask queries."""
    if weighted and isinstance(est, QDA):
        pytest.skip("QDA.fit takes no sample_weight")
    if (weighted or chunking == "tiny") and DISCRIMINANT.index(est) not in (0, 3, 5, 7):
        if not (chunking == "tiny" and DISCRIMINANT.index(est) == 9):
            pytest.skip("weights and tiny blocks: one case per solver")
    for y in (C2, C3):
        if est.get_params().get("priors") is not None and y is C2:
            continue
        rows = CHUNKINGS[chunking]
        kw = {"sample_weight": W} if weighted else {}
        dkw = {"sample_weight": _dask(W, rows)} if weighted else {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = clone(est).fit(X, y, **kw)
            got = clone(est).fit(_dask(X, rows), _dask(y, rows), **dkw)
        _check_discriminant(got, ref, int(np.unique(y).shape[0]))
        Xd = _dask(X, rows)
        np.testing.assert_array_equal(got.predict(Xd).compute(), ref.predict(X))
        np.testing.assert_allclose(
            got.predict_proba(Xd).compute(), ref.predict_proba(X), atol=1e-10
        )


@pytest.mark.parametrize(
    "est",
    [
        LDA(solver="lsqr", shrinkage="auto"),
        LDA(solver="eigen", shrinkage="auto"),
        QDA(solver="eigen", shrinkage="auto"),
    ],
    ids=repr,
)
def test_discriminant_ledoit_wolf(client, est):
    """shrinkage="auto" from the fourth moments, on correlated features where
    the Ledoit-Wolf shrinkage is strictly between 0 and 1."""
    import array_api_compat.numpy as xnp

    from xpml.discriminant_analysis import _ledoit_wolf_shrinkage, _weighted_cov

    rng = np.random.default_rng(4)
    Xc = rng.standard_normal((N, D)) @ (np.eye(D) + 0.3 * rng.standard_normal((D, D)))
    yc = np.digitize(
        Xc[:, 1] + rng.standard_normal(N), np.quantile(Xc[:, 1], [0.3, 0.6])
    )
    for k in range(3):  # the reference's shrinkage is interior: the test can fail
        S, Z = _weighted_cov(Xc[yc == k], np.ones(int(np.sum(yc == k))), xp=xnp)
        s = _ledoit_wolf_shrinkage(Z / np.sqrt(np.diag(S)), np.ones(len(Z)), xp=xnp)
        assert 0.01 < s < 0.9, s
    weights = [None] if isinstance(est, QDA) else [None, W]
    for w in weights:
        kw = {} if w is None else {"sample_weight": w}
        rows = CHUNKINGS["uneven"]
        dkw = {} if w is None else {"sample_weight": _dask(w, rows)}
        ref = clone(est).fit(Xc, yc, **kw)
        got = clone(est).fit(_dask(Xc, rows), _dask(yc, rows), **dkw)
        _check_discriminant(got, ref, 3)


def test_discriminant_refusals(client):
    Xd, yd = _dask(X, 100), _dask(C3, 100)
    with pytest.raises(TypeError, match="covariance_estimator"):
        LDA(solver="lsqr", covariance_estimator=QDA()).fit(Xd, yd)
    with pytest.raises(TypeError, match="covariance_estimator"):
        QDA(solver="eigen", covariance_estimator=LDA()).fit(Xd, yd)
    with pytest.raises(NotImplementedError, match="shrinkage not supported"):
        LDA(shrinkage=0.5).fit(Xd, yd)
    with pytest.raises(ValueError, match="only 1 sample in class 2"):
        QDA().fit(Xd, _dask(np.r_[C2[:-1], 2], 100))


def test_lasso_several_targets(client):
    Y2 = np.stack([Y, X[:, 0] - 2 * X[:, 3]], axis=1)
    ref = Lasso(alpha=0.2).fit(X, Y2)
    got = Lasso(alpha=0.2).fit(_dask(X, (100, 150, 153)), _dask(Y2, (100, 150, 153)))
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=0, atol=1e-10)
    np.testing.assert_allclose(got.intercept_, ref.intercept_, rtol=0, atol=1e-10)
    assert got.n_iter_ == ref.n_iter_
    warm = Lasso(alpha=0.1, warm_start=True)
    warm.coef_ = ref.coef_[0]
    wref = Lasso(alpha=0.1, warm_start=True)
    wref.coef_ = ref.coef_[0]
    warm.fit(_dask(X, 100), _dask(Y, 100))
    wref.fit(X, Y)
    np.testing.assert_allclose(warm.coef_, wref.coef_, rtol=0, atol=1e-10)
    assert warm.n_iter_ == wref.n_iter_


NEIGHBORS = [
    (NearestNeighbors(n_neighbors=4), None),
    (KNeighborsClassifier(n_neighbors=5), "c3"),
    (KNeighborsClassifier(n_neighbors=6, weights="distance", metric="manhattan"), "c3"),
    (KNeighborsClassifier(n_neighbors=4, algorithm="kd_tree"), "c2"),
    (KNeighborsRegressor(n_neighbors=3), "y"),
]


@pytest.mark.parametrize("chunking", list(CHUNKINGS))
@pytest.mark.parametrize("case", NEIGHBORS, ids=lambda c: repr(c[0]))
def test_neighbors_fitted_on_dask(client, case, chunking):
    """Exact k-NN fitted on dask: the same neighbour indices (ties by index),
    distances and predictions as the NumPy fit, for NumPy and dask queries and
    for X=None (each training point without itself)."""
    est, target = case
    rows = CHUNKINGS[chunking]
    y = TARGETS[target]
    args = () if y is None else (y,)
    ref = clone(est).fit(X, *args)
    got = clone(est).fit(_dask(X, rows), *(_dask(a, rows) for a in args))
    want, have = _fitted_attributes(ref), _fitted_attributes(got)
    assert set(have) == set(want)
    for name, value in want.items():
        assert not type(have[name]).__module__.startswith("dask"), name
        np.testing.assert_array_equal(have[name], value, err_msg=name)
    Q = np.random.default_rng(3).standard_normal((57, D)) + 3.0
    ref_dist, ref_ind = ref.kneighbors(Q)
    dist, ind = got.kneighbors(Q)
    assert isinstance(ind, np.ndarray)
    np.testing.assert_array_equal(ind, ref_ind)
    np.testing.assert_allclose(dist, ref_dist, rtol=0, atol=1e-12)
    lazy = got.kneighbors(_dask(Q, (20, 37)), return_distance=False)
    assert isinstance(lazy, da.Array)
    np.testing.assert_array_equal(lazy.compute(), ref_ind)
    np.testing.assert_array_equal(
        got.kneighbors(n_neighbors=3, return_distance=False),
        ref.kneighbors(n_neighbors=3, return_distance=False),
    )
    if y is not None:
        np.testing.assert_array_equal(got.predict(Q), ref.predict(Q))
        pred = got.predict(_dask(Q, (20, 37)))
        assert isinstance(pred, da.Array)
        np.testing.assert_array_equal(pred.compute(), ref.predict(Q))
    if target in ("c2", "c3"):
        np.testing.assert_allclose(
            got.predict_proba(Q), ref.predict_proba(Q), rtol=0, atol=1e-12
        )
    assert len(pickle.dumps(got)) < 2**20


def test_neighbors_on_dask_keep_x_on_the_cluster(client):
    """Queries move candidate rows between workers, and only the answers to
    the client; a NumPy refit forgets the dask data."""
    n, d = 20_000, 8
    Xd = da.random.default_rng(0).standard_normal((n, d), chunks=(5_000, d)).persist()
    distributed.wait(Xd)
    knn = NearestNeighbors(n_neighbors=5).fit(Xd)
    Q = np.random.default_rng(1).standard_normal((40, d))
    workers = list(client.cluster.workers.values())
    since = [len(w.transfer_outgoing_log) for w in workers]
    _, ind = knn.kneighbors(Q)
    _, to_client = _sent(workers, since)
    assert to_client < 0.05 * Xd.nbytes, (to_client, Xd.nbytes)
    ref = NearestNeighbors(n_neighbors=5).fit(Xd.compute())
    np.testing.assert_array_equal(ind, ref.kneighbors(Q, return_distance=False))
    knn.fit(X[:50])
    assert knn.kneighbors(
        X[:2], n_neighbors=1, return_distance=False
    ).ravel().tolist() == [0, 1]


def test_forest_members_fitted_on_the_workers(client):
    """Under joblib's dask backend the trees are fitted on the cluster's
    workers (the scheduler's task stream) and equal the threaded fit with the
    same random_state; n_jobs=None follows the active backend too."""
    import joblib

    ref = RandomForestClassifier(n_estimators=40, random_state=0, n_jobs=2).fit(X, C3)
    for n_jobs in (2, None):
        est = RandomForestClassifier(n_estimators=40, random_state=0, n_jobs=n_jobs)
        with distributed.get_task_stream(client) as stream:
            with joblib.parallel_backend("dask"):
                est.fit(X, C3)
        workers = {t["worker"] for t in stream.data}
        assert workers and workers <= set(client.scheduler_info()["workers"]), workers
        np.testing.assert_array_equal(est.predict_proba(X), ref.predict_proba(X))
    bag = BaggingRegressor(n_estimators=6, random_state=0)
    with joblib.parallel_backend("dask"):
        got = clone(bag).fit(X, Y)
    np.testing.assert_array_equal(got.predict(X), bag.fit(X, Y).predict(X))


def test_forest_on_dask_arrays_within_the_memory_budget(client, monkeypatch):
    est = RandomForestClassifier(n_estimators=5, random_state=0)
    got = clone(est).fit(_dask(X, 100), _dask(C2, 100))
    np.testing.assert_array_equal(got.predict(X), clone(est).fit(X, C2).predict(X))
    monkeypatch.setenv("XPML_MEMORY_BUDGET", "1000")
    with pytest.raises(TypeError, match="memory budget of 1000 bytes"):
        clone(est).fit(_dask(X, 100), _dask(C2, 100))


ROW_METHODS = [
    (SVC(), "c2", "decision_function"),
    (KernelRidge(alpha=0.1, kernel="rbf"), "y", "predict"),
    (KNeighborsClassifier(n_neighbors=4), "c3", "predict_proba"),
    (PCA(n_components=2), None, "transform"),
    (GaussianNB(), "c3", "predict_log_proba"),
    (DecisionTreeClassifier(max_depth=3), "c3", "predict"),
    (LogisticRegression(), "c3", "predict"),
]


@pytest.mark.parametrize("case", ROW_METHODS, ids=lambda c: f"{c[0]!r}.{c[2]}")
def test_fitted_estimator_maps_over_row_blocks(client, case):
    est, target, method = case
    args = () if target is None else (TARGETS[target],)
    est = clone(est).fit(X, *args)
    Xd = _dask(X, CHUNKINGS["uneven"])
    out = getattr(est, method)(Xd)
    assert isinstance(out, da.Array)
    assert out.chunks[0] == Xd.chunks[0]
    np.testing.assert_allclose(out.compute(), getattr(est, method)(X), atol=1e-12)


def test_kneighbors_and_score(client):
    knn = KNeighborsClassifier(n_neighbors=3).fit(X, C3)
    Xd = _dask(X[:50], (20, 30))
    dist, ind = knn.kneighbors(Xd)
    ref_dist, ref_ind = knn.kneighbors(X[:50])
    np.testing.assert_array_equal(ind.compute(), ref_ind)
    np.testing.assert_allclose(dist.compute(), ref_dist, atol=1e-12)
    assert knn.score(Xd, _dask(C3[:50], (20, 30))) == knn.score(X[:50], C3[:50])
    reg = Ridge().fit(X, Y)
    got = reg.score(_dask(X, 100), _dask(Y, 100))
    assert got == pytest.approx(reg.score(X, Y), abs=1e-12)


def test_unsupported_fit_names_the_supported_estimators(client):
    names = (
        r"SVC\.fit .*BaggingClassifier.*KMeans.*KNeighborsClassifier.*Lasso.*"
        r"LinearDiscriminantAnalysis.*LogisticRegression.*NearestNeighbors.*"
        r"QuadraticDiscriminantAnalysis.*RandomForestRegressor"
    )
    with pytest.raises(TypeError, match=names):
        SVC().fit(_dask(X, 100), _dask(C2, 100))
    with pytest.raises(TypeError, match="solver='newton'"):
        LogisticRegression(solver="gd").fit(_dask(X, 100), _dask(C2, 100))
    with pytest.raises(ValueError, match="NaN"):
        Ridge().fit(_dask(np.where(X > 5, np.nan, X), 100), _dask(Y, 100))


def test_fit_transform_and_pipeline(client):
    from sklearn.pipeline import make_pipeline

    Xd, yd = _dask(X, 100), _dask(Y, 100)
    Z = PCA(n_components=2).fit_transform(Xd)
    assert isinstance(Z, da.Array)
    np.testing.assert_allclose(Z.compute(), PCA(n_components=2).fit_transform(X))
    ref = make_pipeline(Nystroem(n_components=40, random_state=0), Ridge(alpha=1e-2))
    got = clone(ref).fit(Xd, yd)
    np.testing.assert_allclose(got.predict(Xd).compute(), ref.fit(X, Y).predict(X))


class _GraphCounter(distributed.diagnostics.plugin.SchedulerPlugin):
    """Counts graph submissions (one per compute or persist call)."""

    name = "xpml-graph-counter"

    def __init__(self):
        self.count = 0

    def update_graph(self, scheduler, **kwargs):
        self.count += 1


def _count_graphs(client, fn):
    scheduler = client.cluster.scheduler
    counter = _GraphCounter()
    scheduler.add_plugin(counter)
    try:
        out = fn()
    finally:
        scheduler.remove_plugin(name=counter.name)
    return out, counter.count


def test_at_most_two_computes_per_iteration(client):
    rng = np.random.default_rng(1)
    Xk = np.concatenate([rng.standard_normal((200, 3)) + 4 * i for i in range(3)])
    Xd = _dask(Xk, 150).persist()
    distributed.wait(Xd)  # its own graph, submitted before counting starts
    init = Xk[[0, 1, 2]]  # a poor start: several iterations
    km, graphs = _count_graphs(
        client, lambda: KMeans(n_clusters=3, init=init, tol=0.0).fit(Xd)
    )
    assert km.n_iter_ >= 3
    # prologue, persist X, variance, final labels + inertia; then 2 per iteration
    assert graphs <= 2 * km.n_iter_ + 4, (graphs, km.n_iter_)
    yd = _dask((Xk[:, 0] > 4).astype(int), 150)
    lr, graphs = _count_graphs(client, lambda: LogisticRegression().fit(Xd, yd))
    n_iter = int(lr.n_iter_[0])
    assert n_iter >= 3
    # prologue, persist X and y; per iteration one Newton system and one line
    # search; the system that finds convergence
    assert graphs <= 2 * n_iter + 3, (graphs, n_iter)


def _sent(workers, since):
    """Bytes the workers sent since ``since`` (log lengths): to other workers,
    and to anyone else (the client's gathers)."""
    peers = {w.address for w in workers}
    to_peers = to_client = 0
    for w, start in zip(workers, since):
        for entry in list(w.transfer_outgoing_log)[start:]:
            if entry["who"] in peers:
                to_peers += entry["total"]
            else:
                to_client += entry["total"]
    return to_peers, to_client


def test_kmeans_moves_little_between_workers(client):
    """Bytes sent between workers during a k-means|| + Lloyd fit, against the
    size of ``X`` (generated on the workers and persisted before counting).
    With in-process workers the transfers still go through distributed's comms
    (``inproc://``) and are logged per peer as in a real cluster."""
    n, d = 40_000, 8
    rng = da.random.default_rng(0)
    Xd = rng.standard_normal((n, d), chunks=(10_000, d)).persist()
    distributed.wait(Xd)
    workers = list(client.cluster.workers.values())
    since = [len(w.transfer_outgoing_log) for w in workers]
    km = KMeans(n_clusters=8, random_state=0, max_iter=10).fit(Xd)
    to_peers, to_client = _sent(workers, since)
    assert km.cluster_centers_.shape == (8, d)
    assert to_peers < 0.05 * Xd.nbytes, (to_peers, Xd.nbytes)
    # to the client: labels_ (n int64, a concrete attribute) and small sums
    assert to_client < 1.25 * n * 8 + 0.02 * Xd.nbytes, to_client


def test_kmeans_parallel_init_is_sound(client):
    rng = np.random.default_rng(2)
    centres = rng.standard_normal((4, 2)) * 20
    Xk = np.concatenate([centres[i] + rng.standard_normal((100, 2)) for i in range(4)])
    km = KMeans(n_clusters=4, random_state=0).fit(_dask(Xk, 90))
    found = np.sort(np.round(km.cluster_centers_ / 20).ravel())
    np.testing.assert_array_equal(found, np.sort(np.round(centres / 20).ravel()))
    ref = KMeans(n_clusters=4, random_state=0).fit(Xk)
    assert km.inertia_ == pytest.approx(ref.inertia_, rel=1e-9)


def test_without_a_client_the_threaded_scheduler_works():
    import dask

    with dask.config.set(scheduler="threads"):
        got = LinearRegression().fit(_dask(X, 100), _dask(Y, 100))
    np.testing.assert_allclose(got.coef_, LinearRegression().fit(X, Y).coef_)


def test_worker_processes():
    """Estimators and block functions pickle to real worker processes."""
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        Xd = _dask(X, CHUNKINGS["uneven"])
        km = KMeans(n_clusters=3, init=X[[0, 200, 400]]).fit(Xd)
        ref = KMeans(n_clusters=3, init=X[[0, 200, 400]]).fit(X)
        np.testing.assert_array_equal(km.labels_, ref.labels_)
        lr = LogisticRegression().fit(Xd, _dask(C3, CHUNKINGS["uneven"]))
        np.testing.assert_array_equal(lr.predict(Xd).compute(), lr.predict(X))
        svc = SVC().fit(X, C2)
        np.testing.assert_array_equal(svc.predict(Xd).compute(), svc.predict(X))
        cd = _dask(C3, CHUNKINGS["uneven"])
        knn = KNeighborsClassifier(n_neighbors=3).fit(Xd, cd)
        ref = KNeighborsClassifier(n_neighbors=3).fit(X, C3)
        np.testing.assert_array_equal(knn.predict(X[:30]), ref.predict(X[:30]))
        lda = LDA().fit(Xd, cd)
        np.testing.assert_allclose(lda.coef_, LDA().fit(X, C3).coef_, atol=1e-10)
