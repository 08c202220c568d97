"""k-NN: scikit-learn brute-force parity on digits, tiling, ties, the k-d tree and
the approximate mode's recall, on every array library."""

import math

import numpy as np
import pytest

from xpml.neighbors import (
    KNeighborsClassifier,
    KNeighborsRegressor,
    NearestNeighbors,
    recall_at_k,
)
from xpml.neighbors._search import exhaustive_kneighbors, topk_smallest


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:1200], y[:1200], X[1200:], y[1200:]


@pytest.mark.parametrize("k", [1, 5, 15])
@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_classifier_equals_sklearn_brute_on_digits(digits, k, weights):
    from sklearn.neighbors import KNeighborsClassifier as SK

    Xtr, ytr, Xte, _ = digits
    ours = KNeighborsClassifier(n_neighbors=k, weights=weights).fit(Xtr, ytr)
    ref = SK(n_neighbors=k, weights=weights, algorithm="brute").fit(Xtr, ytr)
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    P, R = ours.predict_proba(Xte), ref.predict_proba(Xte)
    rows = np.nonzero(np.abs(P - R).max(axis=1) > 1e-12)[0]
    # probabilities differ only where the k-th distance is tied (see the tie rule)
    for r in rows:
        dist = np.sum((Xtr - Xte[r]) ** 2, axis=1)
        assert np.sum(dist == np.sort(dist)[k - 1]) > 1
    assert len(rows) <= 2


def test_kneighbors_distances_equal_sklearn_on_digits(digits):
    from sklearn.neighbors import NearestNeighbors as SN

    Xtr, _, Xte, _ = digits
    d, i = NearestNeighbors(n_neighbors=15).fit(Xtr).kneighbors(Xte)
    sd, si = SN(n_neighbors=15, algorithm="brute").fit(Xtr).kneighbors(Xte)
    np.testing.assert_allclose(d, sd, rtol=1e-12)
    # same neighbour sets except where the k-th distance is tied (sklearn may keep
    # a larger index there; we keep the smaller one)
    differ = [r for r in range(len(i)) if set(i[r]) != set(si[r])]
    for r in differ:
        dist = np.sum((Xtr - Xte[r]) ** 2, axis=1)
        assert np.sum(dist == np.sort(dist)[14]) > 1
    assert len(differ) < 0.02 * len(i)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_regressor_equals_sklearn(weights, rng):
    from sklearn.neighbors import KNeighborsRegressor as SK

    X = rng.normal(size=(300, 4))
    y = np.stack([X[:, 0] - X[:, 1] ** 2, X[:, 2]], axis=1)
    Q = np.concatenate([rng.normal(size=(50, 4)), X[:5]])  # X[:5]: zero distances
    for yy in (y[:, 0], y):
        ours = KNeighborsRegressor(n_neighbors=7, weights=weights).fit(X, yy).predict(Q)
        # the reference measures distances directly (kd_tree): its brute
        # search's ||q||^2 - 2 q.x + ||x||^2 can leave an exact duplicate at
        # ~1e-8 (seen on one CPU), which "distance" then weighs as 1/d
        # instead of as a zero distance; xpml measures its candidates exactly
        ref = SK(n_neighbors=7, weights=weights, algorithm="kd_tree")
        ref = ref.fit(X, yy).predict(Q)
        np.testing.assert_allclose(ours, ref, rtol=1e-12, atol=1e-12)


def test_tie_rule_smaller_index_first():
    X = np.array([[1.0], [-1.0], [1.0], [-1.0], [3.0]])
    d, i = NearestNeighbors(n_neighbors=3).fit(X).kneighbors(np.array([[0.0]]))
    assert i.tolist() == [[0, 1, 2]]
    assert d.tolist() == [[1.0, 1.0, 1.0]]
    # vote tie between classes 0 and 1 goes to the smaller label
    y = np.array([1, 0, 1, 0, 1])
    assert KNeighborsClassifier(n_neighbors=4).fit(X, y).predict(
        np.array([[0.0]])
    ).tolist() == [0]


def test_k_greater_than_n_raises():
    X = np.arange(6.0).reshape(3, 2)
    est = NearestNeighbors(n_neighbors=4).fit(X)
    with pytest.raises(ValueError, match="n_neighbors = 4, n_samples_fit = 3"):
        est.kneighbors(X)
    with pytest.raises(ValueError, match="X is None"):
        NearestNeighbors(n_neighbors=3).fit(X).kneighbors()
    with pytest.raises(ValueError, match="n_neighbors"):
        est.kneighbors(X, n_neighbors=0)


def test_kneighbors_without_X_excludes_self(digits):
    from sklearn.neighbors import NearestNeighbors as SN

    X = np.array([[0.0], [0.0], [1.0], [5.0]])  # 0 and 1 are duplicates
    d, i = NearestNeighbors(n_neighbors=2).fit(X).kneighbors()
    assert i.tolist() == [[1, 2], [0, 2], [0, 1], [2, 0]]
    Xtr = digits[0][:300]
    d, _ = NearestNeighbors(n_neighbors=5).fit(Xtr).kneighbors()
    sd, _ = SN(n_neighbors=5, algorithm="brute").fit(Xtr).kneighbors()
    np.testing.assert_allclose(d, sd, rtol=1e-12)


@pytest.mark.parametrize("shape", [(40, 50), (30, 700)])
def test_topk_methods_agree_with_stable_sort(xp, rng, shape):
    # integer data: many exact ties, including at the k-th value
    D = rng.integers(0, 6, size=shape).astype(np.float64)
    D2 = rng.normal(size=shape)
    for data in (D, D2):
        ref = np.lexsort((np.broadcast_to(np.arange(shape[1]), shape), data), axis=-1)
        for k in (1, 3, 7, shape[1]):
            for method in ("auto", "threshold", "partition", "sort"):
                v, p = topk_smallest(xp.asarray(data), k, xp=xp.xp, method=method)
                np.testing.assert_array_equal(
                    xp.to_numpy(p), ref[:, :k], err_msg=method
                )
                np.testing.assert_array_equal(
                    xp.to_numpy(v), np.take_along_axis(data, ref[:, :k], axis=1)
                )


def test_tiled_search_equals_one_block(xp, rng):
    X = np.round(2 * rng.normal(size=(97, 3))) / 2  # halves: exact arithmetic, ties
    Q = np.round(2 * rng.normal(size=(31, 3))) / 2
    Xb, Qb = xp.asarray(X), xp.asarray(Q)
    d0, i0 = exhaustive_kneighbors(Qb, Xb, 6, xp=xp.xp)
    d1, i1 = exhaustive_kneighbors(Qb, Xb, 6, xp=xp.xp, block_rows=4, block_cols=10)
    d2, i2 = exhaustive_kneighbors(Qb, Xb, 6, xp=xp.xp, block_rows=7, block_cols=3)
    for d, i in ((d1, i1), (d2, i2)):
        np.testing.assert_array_equal(xp.to_numpy(i), xp.to_numpy(i0))
        np.testing.assert_array_equal(xp.to_numpy(d), xp.to_numpy(d0))
    # the memory budget drives the tiling too
    d3, i3 = exhaustive_kneighbors(Qb, Xb, 6, xp=xp.xp, memory_budget=2000)
    np.testing.assert_array_equal(xp.to_numpy(i3), xp.to_numpy(i0))
    for topk in ("threshold", "partition", "sort"):
        _, i4 = exhaustive_kneighbors(Qb, Xb, 6, xp=xp.xp, block_rows=8, topk=topk)
        np.testing.assert_array_equal(xp.to_numpy(i4), xp.to_numpy(i0))


@pytest.mark.parametrize("d", [2, 3, 5])
def test_kd_tree_equals_exhaustive(d, rng):
    X = rng.normal(size=(2000, d))
    Q = rng.normal(size=(300, d))
    de, ie = NearestNeighbors(n_neighbors=7).fit(X).kneighbors(Q)
    for leaf_size in (1, 30):
        dk, ik = (
            NearestNeighbors(n_neighbors=7, algorithm="kd_tree", leaf_size=leaf_size)
            .fit(X)
            .kneighbors(Q)
        )
        np.testing.assert_array_equal(ik, ie)
        np.testing.assert_array_equal(dk, de)


def test_kd_tree_equals_exhaustive_with_ties(digits, rng):
    # integer grid points: exact ties everywhere, and duplicates
    X = rng.integers(0, 5, size=(500, 3)).astype(float)
    Q = rng.integers(0, 5, size=(100, 3)).astype(float)
    for Xt, Qt in ((X, Q), (digits[0], digits[2][:200])):
        de, ie = NearestNeighbors(n_neighbors=15).fit(Xt).kneighbors(Qt)
        dk, ik = (
            NearestNeighbors(n_neighbors=15, algorithm="kd_tree").fit(Xt).kneighbors(Qt)
        )
        np.testing.assert_array_equal(ik, ie)
        np.testing.assert_array_equal(dk, de)
    y = rng.integers(0, 3, size=500)
    a = KNeighborsClassifier(n_neighbors=9, algorithm="kd_tree").fit(X, y).predict(Q)
    b = KNeighborsClassifier(n_neighbors=9).fit(X, y).predict(Q)
    np.testing.assert_array_equal(a, b)


def test_approximate_recall_at_default_setting(rng):
    """Recall@5 of approx_kd_tree at max_leaves=16, leaf_size=64 (the defaults), as
    documented: 1.000 in 3-D, 0.954 in 8-D."""
    recalls = {}
    for d in (3, 8):
        X = rng.normal(size=(5000, d))
        Q = rng.normal(size=(1000, d))
        _, exact = NearestNeighbors(n_neighbors=5).fit(X).kneighbors(Q)
        est = NearestNeighbors(n_neighbors=5, algorithm="approx_kd_tree").fit(X)
        assert (est.max_leaves, est.leaf_size) == (16, 64)
        _, approx = est.kneighbors(Q)
        recalls[d] = recall_at_k(approx, exact)
        # more leaves never hurts; max_leaves >= n_leaves is exact
        _, more = (
            NearestNeighbors(n_neighbors=5, algorithm="approx_kd_tree", max_leaves=64)
            .fit(X)
            .kneighbors(Q)
        )
        assert recall_at_k(more, exact) >= recalls[d]
        _, full = (
            NearestNeighbors(
                n_neighbors=5, algorithm="approx_kd_tree", max_leaves=10**6
            )
            .fit(X)
            .kneighbors(Q)
        )
        np.testing.assert_array_equal(full, exact)
    print(f"approx_kd_tree recall@5 at max_leaves=16: {recalls}")
    assert recalls[3] >= 0.995
    assert recalls[8] >= 0.94


def test_approximate_returns_k_even_with_tiny_budget(rng):
    X = rng.normal(size=(200, 2))
    d, i = (
        NearestNeighbors(
            n_neighbors=20, algorithm="approx_kd_tree", leaf_size=3, max_leaves=1
        )
        .fit(X)
        .kneighbors(X[:10])
    )
    assert i.shape == (10, 20) and np.all(i < 200) and np.all(np.isfinite(d))


@pytest.mark.parametrize("algorithm", ["brute", "kd_tree"])
def test_backends_give_numpy_results(xp, digits, algorithm):
    Xtr, ytr, Xte, _ = digits
    Xtr, ytr, Xte = Xtr[:400], ytr[:400], Xte[:100]
    ref = KNeighborsClassifier(n_neighbors=5, algorithm=algorithm).fit(Xtr, ytr)
    est = KNeighborsClassifier(n_neighbors=5, algorithm=algorithm).fit(
        xp.asarray(Xtr), xp.asarray(ytr)
    )
    pred = est.predict(xp.asarray(Xte))
    assert xp.is_native(pred)
    np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(Xte))
    d, i = est.kneighbors(xp.asarray(Xte))
    rd, ri = ref.kneighbors(Xte)
    assert xp.is_native(d) and xp.is_native(i)
    np.testing.assert_array_equal(xp.to_numpy(i), ri)
    np.testing.assert_allclose(xp.to_numpy(d), rd, rtol=1e-12)
    y = Xtr[:, 10]
    r = KNeighborsRegressor(n_neighbors=5, weights="distance", algorithm=algorithm)
    got = r.fit(xp.asarray(Xtr), xp.asarray(y)).predict(xp.asarray(Xte))
    want = (
        KNeighborsRegressor(n_neighbors=5, weights="distance", algorithm=algorithm)
        .fit(Xtr, y)
        .predict(Xte)
    )
    np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-12)


def test_callable_weights_and_bad_parameters(rng):
    from xpml.exceptions import InvalidParameterError

    X = rng.normal(size=(50, 2))
    y = (X[:, 0] > 0).astype(int)
    a = KNeighborsClassifier(weights=lambda dist, **kw: 1.0 / (dist + 1.0)).fit(X, y)
    b = KNeighborsClassifier(weights=lambda dist: 1.0 / (dist + 1.0)).fit(X, y)
    np.testing.assert_allclose(a.predict_proba(X), b.predict_proba(X))
    with pytest.raises(InvalidParameterError, match="algorithm.*'brute'"):
        KNeighborsClassifier(algorithm="octree").fit(X, y)
    with pytest.raises(InvalidParameterError, match="weights"):
        KNeighborsClassifier(weights="gaussian").fit(X, y)


def test_n_neighbors_is_positional_as_sklearn():
    from xpml.neighbors import KNeighborsRegressor

    for Est in (NearestNeighbors, KNeighborsClassifier, KNeighborsRegressor):
        assert Est(3).n_neighbors == 3


METRIC_CASES = [
    ("euclidean", 2),
    ("sqeuclidean", 2),
    ("manhattan", 2),
    ("cityblock", 2),
    ("l1", 2),
    ("chebyshev", 2),
    ("minkowski", 1),
    ("minkowski", 2),
    ("minkowski", 3),
    ("minkowski", 1.5),
    ("minkowski", np.inf),
    ("cosine", 2),
]


@pytest.fixture(scope="module")
def tie_free():
    r = np.random.default_rng(7)
    return r.standard_normal((400, 5)), r.standard_normal((60, 5))


@pytest.mark.parametrize("metric,p", METRIC_CASES)
def test_metrics_equal_sklearn(xp, tie_free, metric, p):
    # indices exactly on tie-free data, distances (metric units) to rtol 1e-10
    from sklearn.neighbors import NearestNeighbors as SK

    X, Q = tie_free
    ref = SK(n_neighbors=6, metric=metric, p=p, algorithm="brute").fit(X)
    want_d, want_i = ref.kneighbors(Q)
    algorithms = ["brute", "kd_tree"] if xp.name == "numpy" else ["brute"]
    for algorithm in algorithms:
        est = NearestNeighbors(n_neighbors=6, metric=metric, p=p, algorithm=algorithm)
        d, i = est.fit(xp.asarray(X)).kneighbors(xp.asarray(Q))
        np.testing.assert_array_equal(xp.to_numpy(i), want_i, err_msg=algorithm)
        np.testing.assert_allclose(xp.to_numpy(d), want_d, rtol=1e-10, atol=1e-14)
    r = float(np.median(want_d))
    got_d, got_i = est.radius_neighbors(xp.asarray(Q), r, sort_results=True)
    ref_d, ref_i = ref.radius_neighbors(Q, r, sort_results=True)
    for a, b, c, e in zip(got_i, ref_i, got_d, ref_d):
        np.testing.assert_array_equal(xp.to_numpy(a), b)
        np.testing.assert_allclose(xp.to_numpy(c), e, rtol=1e-10, atol=1e-14)


def test_metric_aliases_params_and_classifier(tie_free):
    from sklearn.neighbors import KNeighborsClassifier as SKC
    from sklearn.neighbors import KNeighborsRegressor as SKR

    X, Q = tie_free
    y = (X[:, 0] > 0).astype(int)
    a = NearestNeighbors(n_neighbors=4, metric="infinity").fit(X).kneighbors(Q)
    b = NearestNeighbors(n_neighbors=4, metric="chebyshev").fit(X).kneighbors(Q)
    np.testing.assert_array_equal(a[1], b[1])
    # metric_params' p overrides p (as scikit-learn)
    c = NearestNeighbors(n_neighbors=4, p=2, metric_params={"p": 1}).fit(X)
    np.testing.assert_array_equal(
        c.kneighbors(Q)[1], NearestNeighbors(n_neighbors=4, p=1).fit(X).kneighbors(Q)[1]
    )
    with pytest.raises(ValueError, match="metric_params has unsupported keys"):
        NearestNeighbors(metric_params={"V": 1}).fit(X)
    for metric in ("manhattan", "cosine"):
        kw = {"n_neighbors": 5, "weights": "distance", "metric": metric}
        got = KNeighborsClassifier(**kw).fit(X, y).predict_proba(Q)
        want = SKC(algorithm="brute", **kw).fit(X, y).predict_proba(Q)
        np.testing.assert_allclose(got, want, rtol=1e-10)
        got = KNeighborsRegressor(**kw).fit(X, X[:, 1]).predict(Q)
        want = SKR(algorithm="brute", **kw).fit(X, X[:, 1]).predict(Q)
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_radius_neighbors_as_sklearn(xp, tie_free):
    from sklearn.neighbors import NearestNeighbors as SK

    X, Q = tie_free
    ours = NearestNeighbors(radius=1.5).fit(xp.asarray(X))
    ref = SK(radius=1.5).fit(X)
    # default radius, unsorted (by index), X=None excludes each point itself
    for q, qr in ((xp.asarray(Q), Q), (None, None)):
        d, i = ours.radius_neighbors(q)
        dr, ir = ref.radius_neighbors(qr)
        assert i.dtype == object and len(i) == len(ir)
        for a, b, c, e in zip(i, ir, d, dr):
            np.testing.assert_array_equal(xp.to_numpy(a), np.sort(b))
            np.testing.assert_allclose(xp.to_numpy(c), e[np.argsort(b)], rtol=1e-10)
    ind = ours.radius_neighbors(xp.asarray(Q), 0.5, return_distance=False)
    assert sum(a.shape[0] for a in ind) == sum(
        len(a) for a in ref.radius_neighbors(Q, 0.5)[1]
    )
    with pytest.raises(ValueError, match="return_distance must be True"):
        ours.radius_neighbors(xp.asarray(Q), return_distance=False, sort_results=True)
    with pytest.raises(ValueError, match="radius must be a non-negative"):
        ours.radius_neighbors(xp.asarray(Q), -1.0)


def test_all_zero_weights_raise_as_sklearn(rng):
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] > 0).astype(int)
    est = KNeighborsClassifier(3, weights=lambda d: np.zeros_like(d)).fit(X, y)
    for method in (est.predict, est.predict_proba):
        with pytest.raises(
            ValueError, match="All neighbors of some sample is getting zero weights"
        ):
            method(X)


# ------------------------------------------- scikit-learn's metrics (issue 12)
_R = np.random.default_rng(11)
_VI = (lambda A: A @ A.T + 5 * np.eye(5))(_R.standard_normal((5, 5)))
MAPPED_AND_BLOCK_CASES = [
    ("seuclidean", {"V": _R.uniform(0.5, 2.0, 5)}),
    ("mahalanobis", {"VI": _VI}),
    ("mahalanobis", {"V": np.linalg.inv(_VI)}),
    ("correlation", {}),
    ("canberra", {}),
    ("braycurtis", {}),
    ("hamming", {}),
    ("minkowski", {"p": 1.5, "w": _R.uniform(0.5, 2.0, 5)}),
    ("minkowski", {"p": 3, "w": _R.uniform(0.5, 2.0, 5)}),
    ("nan_euclidean", {}),
]


@pytest.mark.parametrize("metric,params", MAPPED_AND_BLOCK_CASES)
def test_more_metrics_equal_sklearn(xp, tie_free, metric, params):
    # indices exactly on tie-free data, distances to rtol 1e-10, for brute and
    # ball_tree (answered by the exhaustive search), kneighbors and radius
    from sklearn.neighbors import NearestNeighbors as SK

    X, Q = tie_free
    X, Q = np.abs(X), np.abs(Q)  # braycurtis: Σ|q + x| away from 0
    if metric == "hamming":  # few values, so that rows differ in some features
        X, Q = np.round(X), np.round(Q)
    if metric == "nan_euclidean":
        X, Q = X.copy(), Q.copy()
        X[_R.random(X.shape) < 0.1] = np.nan
        Q[_R.random(Q.shape) < 0.1] = np.nan
    ref_params = params
    if metric == "mahalanobis" and "V" in params:  # scikit-learn's brute needs VI
        ref_params = {"VI": np.linalg.inv(params["V"])}
    ref = SK(n_neighbors=6, metric=metric, metric_params=ref_params, algorithm="brute")
    ref.fit(X)
    want_d, want_i = ref.kneighbors(Q)
    # nan_euclidean: the Gram form ‖q‖² + ‖x‖² − 2q·x over present coordinates
    # (as scikit-learn), summed in another order on other libraries
    rtol = 1e-8 if metric == "nan_euclidean" else 1e-10
    for algorithm in ("brute", "ball_tree"):
        est = NearestNeighbors(
            n_neighbors=6, metric=metric, metric_params=params, algorithm=algorithm
        )
        d, i = est.fit(xp.asarray(X)).kneighbors(xp.asarray(Q))
        np.testing.assert_allclose(xp.to_numpy(d), want_d, rtol=rtol, atol=1e-13)
        if metric != "hamming":  # hamming has ties: compared by distance only
            np.testing.assert_array_equal(xp.to_numpy(i), want_i, err_msg=algorithm)
    r = float(np.median(want_d))
    got_d, got_i = est.radius_neighbors(xp.asarray(Q), r, sort_results=True)
    ref_d, ref_i = ref.radius_neighbors(Q, r, sort_results=True)
    for a, b, c, e in zip(got_i, ref_i, got_d, ref_d):
        np.testing.assert_allclose(xp.to_numpy(c), e, rtol=rtol, atol=1e-13)
        np.testing.assert_array_equal(np.sort(xp.to_numpy(a)), np.sort(b))


def test_haversine_equals_sklearn(xp):
    from sklearn.neighbors import NearestNeighbors as SK

    r = np.random.default_rng(3)
    X = np.column_stack([r.uniform(-1.5, 1.5, 300), r.uniform(-3.1, 3.1, 300)])
    Q = np.column_stack([r.uniform(-1.5, 1.5, 40), r.uniform(-3.1, 3.1, 40)])
    want_d, want_i = SK(n_neighbors=5, metric="haversine").fit(X).kneighbors(Q)
    est = NearestNeighbors(n_neighbors=5, metric="haversine", algorithm="ball_tree")
    d, i = est.fit(xp.asarray(X)).kneighbors(xp.asarray(Q))
    np.testing.assert_array_equal(xp.to_numpy(i), want_i)
    np.testing.assert_allclose(xp.to_numpy(d), want_d, rtol=1e-9, atol=1e-12)
    with pytest.raises(ValueError, match="haversine.*2 features"):
        NearestNeighbors(metric="haversine").fit(xp.asarray(np.ones((4, 3))))


BOOLEAN = ["jaccard", "dice", "rogerstanimoto", "russellrao", "sokalsneath", "yule"]


@pytest.mark.parametrize("metric", BOOLEAN)
def test_boolean_metrics_equal_pairwise_distances(xp, metric):
    # many ties: the reference order is a stable sort of SciPy's distances,
    # i.e. (distance, index), the tie rule
    from sklearn.metrics import pairwise_distances

    r = np.random.default_rng(5)
    X, Q = r.random((200, 12)) > 0.5, r.random((30, 12)) > 0.5
    D = pairwise_distances(Q, X, metric=metric)
    want_i = np.argsort(D, axis=1, kind="stable")[:, :7]
    est = NearestNeighbors(n_neighbors=7, metric=metric)
    d, i = est.fit(xp.asarray(X, dtype=float)).kneighbors(xp.asarray(Q, dtype=float))
    np.testing.assert_array_equal(xp.to_numpy(i), want_i)
    np.testing.assert_allclose(
        xp.to_numpy(d), np.take_along_axis(D, want_i, axis=1), rtol=1e-12
    )


def test_precomputed_equals_feature_matrix(xp, tie_free):
    from sklearn.metrics import pairwise_distances

    X, Q = tie_free
    y = (X[:, 0] > 0).astype(int)
    DXX, DQX = pairwise_distances(X), pairwise_distances(Q, X)
    feat = NearestNeighbors(n_neighbors=5).fit(X)
    pre = NearestNeighbors(n_neighbors=5, metric="precomputed", radius=1.5)
    pre.fit(xp.asarray(DXX))
    for q, fq in ((xp.asarray(DQX), Q), (None, None)):
        d, i = pre.kneighbors(q)
        fd, fi = feat.kneighbors(fq)
        np.testing.assert_array_equal(xp.to_numpy(i), fi)
        np.testing.assert_allclose(xp.to_numpy(d), fd, rtol=1e-10)
    got = pre.radius_neighbors(xp.asarray(DQX), return_distance=False)
    want = feat.radius_neighbors(Q, 1.5, return_distance=False)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(xp.to_numpy(a), b)
    clf = KNeighborsClassifier(metric="precomputed").fit(xp.asarray(DXX), xp.asarray(y))
    want_y = KNeighborsClassifier().fit(X, y).predict(Q)
    np.testing.assert_array_equal(xp.to_numpy(clf.predict(xp.asarray(DQX))), want_y)
    with pytest.raises(ValueError, match="features"):
        pre.kneighbors(xp.asarray(Q))
    with pytest.raises(ValueError, match="Negative values"):
        pre.kneighbors(xp.asarray(-DQX))
    with pytest.raises(ValueError, match="square"):
        NearestNeighbors(metric="precomputed").fit(xp.asarray(DQX))


def test_callable_and_distance_metric_objects(xp, tie_free):
    from sklearn.metrics import DistanceMetric

    X, Q = tie_free[0][:80], tie_free[1][:10]
    want_d, want_i = (
        NearestNeighbors(n_neighbors=4, metric="manhattan").fit(X).kneighbors(Q)
    )
    for metric in (
        lambda a, b: np.abs(a - b).sum(),
        DistanceMetric.get_metric("manhattan"),
    ):
        for algorithm in ("auto", "kd_tree", "ball_tree"):
            est = NearestNeighbors(n_neighbors=4, metric=metric, algorithm=algorithm)
            d, i = est.fit(xp.asarray(X)).kneighbors(xp.asarray(Q))
            np.testing.assert_array_equal(xp.to_numpy(i), want_i)
            np.testing.assert_allclose(xp.to_numpy(d), want_d, rtol=1e-12)


def test_neighbor_graphs_equal_sklearn(xp, tie_free):
    import scipy.sparse
    from sklearn.neighbors import NearestNeighbors as SK

    X, Q = tie_free
    ours = NearestNeighbors(n_neighbors=4, radius=1.2).fit(xp.asarray(X))
    ref = SK(n_neighbors=4, radius=1.2).fit(X)
    for q, rq in ((xp.asarray(Q), Q), (None, None)):
        for mode in ("connectivity", "distance"):
            for name in ("kneighbors_graph", "radius_neighbors_graph"):
                got = getattr(ours, name)(q, mode=mode)
                want = getattr(ref, name)(rq, mode=mode).toarray()
                if xp.name.startswith("numpy"):
                    assert scipy.sparse.issparse(got) and got.format == "csr"
                    got = got.toarray()
                np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-12)
    with pytest.raises(ValueError, match="Unsupported mode"):
        ours.kneighbors_graph(xp.asarray(Q), mode="blah")


def test_radius_per_query_array(xp, tie_free):
    from sklearn.neighbors import NearestNeighbors as SK

    X, Q = tie_free
    radii = np.linspace(0.5, 2.0, Q.shape[0])
    for metric in ("euclidean", "canberra"):
        got = NearestNeighbors(metric=metric).fit(xp.asarray(X))
        got = got.radius_neighbors(xp.asarray(Q), radius=radii, return_distance=False)
        want = SK(metric=metric, algorithm="ball_tree").fit(X)  # its brute: floats only
        want = want.radius_neighbors(Q, radius=radii, return_distance=False)
        assert sum(len(w) for w in want) > 0
        for a, b in zip(got, want):
            np.testing.assert_array_equal(np.sort(xp.to_numpy(a)), np.sort(b))
    with pytest.raises(ValueError, match="one non-negative radius per query"):
        NearestNeighbors().fit(X).radius_neighbors(Q, radius=radii[:3])


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_multi_output_classifier_equals_sklearn(xp, tie_free, weights):
    from sklearn.neighbors import KNeighborsClassifier as SK

    X, Q = tie_free
    Y = np.random.default_rng(2).integers(0, 3, (X.shape[0], 3))
    Y[:, 1] = Y[:, 1] * 10 + 5  # a different label set per output
    ours = KNeighborsClassifier(weights=weights).fit(xp.asarray(X), xp.asarray(Y))
    ref = SK(weights=weights).fit(X, Y)
    np.testing.assert_array_equal(
        xp.to_numpy(ours.predict(xp.asarray(Q))), ref.predict(Q)
    )
    got, want = ours.predict_proba(xp.asarray(Q)), ref.predict_proba(Q)
    assert isinstance(got, list) and len(got) == 3
    for a, b in zip(got, want):
        np.testing.assert_allclose(xp.to_numpy(a), b, rtol=1e-12)


def test_algorithms_and_refusals_as_sklearn(tie_free):
    X, Q = tie_free
    brute = NearestNeighbors(n_neighbors=5, algorithm="brute").fit(X).kneighbors(Q)
    ball = NearestNeighbors(
        n_neighbors=5, algorithm="ball_tree", leaf_size=30, n_jobs=2
    )
    ball = ball.fit(X).kneighbors(Q)
    np.testing.assert_array_equal(ball[1], brute[1])
    np.testing.assert_array_equal(ball[0], brute[0])
    with pytest.raises(ValueError, match="not supported by algorithm='kd_tree'"):
        NearestNeighbors(
            algorithm="kd_tree", metric="seuclidean", metric_params={"V": np.ones(5)}
        ).fit(X)
    with pytest.raises(ValueError, match="not supported by algorithm='kd_tree'"):
        NearestNeighbors(algorithm="kd_tree", metric_params={"w": np.ones(5)}).fit(X)
    with pytest.raises(ValueError, match="does not support 0 < p < 1"):
        NearestNeighbors(algorithm="ball_tree", p=0.5).fit(X)
    with pytest.warns(UserWarning, match="0 < p < 1"):
        NearestNeighbors(algorithm="brute", p=0.5).fit(X)
    with pytest.warns(SyntaxWarning, match="p is found in metric_params"):
        NearestNeighbors(metric_params={"p": 3}).fit(X)
    with pytest.raises(ValueError, match="mahalanobis.*VI"):
        NearestNeighbors(metric="mahalanobis").fit(X)
    with pytest.raises(ValueError, match="seuclidean.*5 features|coordinates"):
        NearestNeighbors(metric="seuclidean", metric_params={"V": np.ones(3)}).fit(X)


# ------------------------------------------- the vectorised k-d tree (issue 14)
@pytest.mark.parametrize("p", [1, 1.5, 2, np.inf])
def test_kd_tree_search_is_exact_in_chunks_and_far_queries(p, rng):
    # leaf groups of every size, queries far outside the data (loose home
    # bounds), duplicates, several chunks: the same neighbours and the same
    # rank measures as the exhaustive search, bit for bit
    from xpml.neighbors._search import (
        _exact_kd_search,
        build_kd_tree,
        exhaustive_kneighbors,
    )

    X = np.concatenate([rng.normal(size=(1500, 3)), np.zeros((40, 3))])
    Q = np.concatenate([rng.normal(size=(200, 3)), 6 * rng.normal(size=(50, 3))])
    Q = np.concatenate([Q, np.zeros((5, 3))])
    for leaf_size, k in ((8, 1), (30, 5), (64, 20)):
        tree = build_kd_tree(X, leaf_size)
        want_d, want_i = exhaustive_kneighbors(Q, X, k, xp=np, p=p)
        for chunk in (2**10, 2**22):
            d, i = _exact_kd_search(tree, X, Q, k, p=p, chunk_elements=chunk)
            np.testing.assert_array_equal(i, want_i)
            np.testing.assert_array_equal(d, want_d)
        # a tree saved before node boxes were stored: boxes merged from leaves
        old = {key: v for key, v in tree.items() if not key.startswith("node_")}
        d, i = _exact_kd_search(old, X, Q, k, p=p)
        np.testing.assert_array_equal(i, want_i)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
def test_single_class_as_sklearn(xp, rng, weights):
    from sklearn.neighbors import KNeighborsClassifier as SkKNN

    X = rng.standard_normal((12, 2))
    Q = rng.standard_normal((5, 2))
    y = np.full(12, 7)
    sk = SkKNN(3, weights=weights).fit(X, y)
    clf = KNeighborsClassifier(3, weights=weights).fit(xp.asarray(X), xp.asarray(y))
    np.testing.assert_array_equal(xp.to_numpy(clf.classes_), sk.classes_)
    np.testing.assert_array_equal(
        xp.to_numpy(clf.predict(xp.asarray(Q))), sk.predict(Q)
    )
    proba = xp.to_numpy(clf.predict_proba(xp.asarray(Q)))
    np.testing.assert_allclose(proba, sk.predict_proba(Q))
    assert proba.shape == (5, 1)


@pytest.mark.parametrize("p", [1, 1.5, 2, np.inf])
def test_kd_tree_scipy_fast_path_is_exact(p, rng):
    # SciPy's cKDTree proposes the neighbours (more of them where the k-th is
    # tied, then the portable search): both paths give, bit for bit, the
    # direct ranks' k smallest by (rank, index) on grid ties, duplicates (past
    # 16 k of them), far queries, float32, and k = n
    from xpml.neighbors._search import (
        _direct_rank,
        _exact_kd_portable,
        _exact_kd_scipy,
        build_kd_tree,
    )

    grid = rng.integers(0, 3, size=(90, 3)).astype(float)
    X = np.concatenate([rng.normal(size=(400, 3)), np.zeros((10, 3)), grid])
    Q = np.concatenate(
        [rng.normal(size=(60, 3)), 5 * rng.normal(size=(10, 3)), np.zeros((3, 3))]
    )
    Q = np.concatenate([Q, rng.integers(0, 3, size=(30, 3)).astype(float)])
    X32, Q32 = X.astype(np.float32), Q.astype(np.float32)
    Xdup = np.concatenate([X, np.repeat(Q[:1], 150, axis=0)])  # past 16 k ties
    cases = ((X, Q, 1), (X, Q, 7), (X[:9], Q, 9), (X32, Q32, 5), (Xdup, Q, 5))
    for Xt, Qt, k in cases:
        tree = build_kd_tree(Xt, 16)
        # the tie rule by its definition: direct ranks, a stable sort by index
        # (the exhaustive search preselects by Gram scores, whose rounding
        # can differ between exact duplicates)
        R = _direct_rank(Qt, np.broadcast_to(Xt, (len(Qt),) + Xt.shape), p, xp=np)
        want_i = np.argsort(R, axis=1, kind="stable")[:, :k]
        want_d = np.take_along_axis(R, want_i, axis=1)
        for search in (_exact_kd_scipy, _exact_kd_portable):
            d, i = search(tree, Xt, Qt, k, xp=np, p=p)
            np.testing.assert_array_equal(i, want_i)
            np.testing.assert_array_equal(d, want_d)


def _many_duplicates():
    """More than k exact copies of one point (3k + 2 of them, two at the end of
    the training set, where a product's edge kernel rounds them differently),
    queries at it, beside it, and elsewhere; k = 5. Before issue 14's fix the
    exhaustive search kept a larger index here (its Gram scores preselected)."""
    rng = np.random.default_rng(37)
    n, d, k = 334, 3, 5
    X = rng.normal(size=(n, d))
    point = 3 * rng.normal(size=d)
    copies = np.concatenate(
        [rng.choice(n - 2, size=3 * k, replace=False), [n - 2, n - 1]]
    )
    X[copies] = point
    Q = np.concatenate([np.repeat(point[None], 9, 0), rng.normal(size=(40, d))])
    far = X[np.argmax(((X - point) ** 2).sum(axis=1))]
    Q = np.concatenate([Q, [(point + far) / 2, point + 1e-9]])
    return X, Q, k


def test_many_exact_duplicates_follow_the_tie_rule(xp):
    # brute force (NumPy's chunked fast path; the portable search on the other
    # backends), the k-d tree and its portable search all return the k
    # smallest by (direct squared distance, index)
    from xpml.neighbors._search import _exact_kd_portable, build_kd_tree

    X, Q, k = _many_duplicates()
    R = ((X[None, :, :] - Q[:, None, :]) ** 2).sum(axis=2)
    want_i = np.argsort(R, axis=1, kind="stable")[:, :k]
    want_d = np.sqrt(np.take_along_axis(R, want_i, axis=1))
    nn = NearestNeighbors(n_neighbors=k, algorithm="brute").fit(xp.asarray(X))
    d, i = nn.kneighbors(xp.asarray(Q))
    np.testing.assert_array_equal(xp.to_numpy(i), want_i)
    np.testing.assert_allclose(xp.to_numpy(d), want_d, rtol=1e-12, atol=1e-12)
    d, i = NearestNeighbors(n_neighbors=k, algorithm="kd_tree").fit(X).kneighbors(Q)
    np.testing.assert_array_equal(i, want_i)
    _, i = _exact_kd_portable(build_kd_tree(X, 16), X, Q, k, xp=np)
    np.testing.assert_array_equal(i, want_i)


def test_kd_tree_scipy_proposer_built_at_fit_pickled_not_saved(rng, tmp_path):
    # SciPy's tree is built at fit (not by the first query), reused by every
    # query, carried by a pickle (as scikit-learn's tree is), not written by
    # xpml.save (the first query after a load builds it); same answers throughout
    import pickle

    import xpml

    X, Q = rng.normal(size=(300, 3)), rng.normal(size=(20, 3))
    nn = NearestNeighbors(n_neighbors=4, algorithm="kd_tree").fit(X)
    proposer = nn._cache_kd_search["ckdtree"]
    d0, i0 = nn.kneighbors(Q)
    d1, i1 = nn.kneighbors(Q)
    assert nn._cache_kd_search["ckdtree"] is proposer  # reused, not rebuilt
    np.testing.assert_array_equal(i1, i0)
    loaded = pickle.loads(pickle.dumps(nn))
    assert "ckdtree" in loaded._cache_kd_search
    d2, i2 = loaded.kneighbors(Q)
    np.testing.assert_array_equal(i2, i0)
    np.testing.assert_array_equal(d2, d0)
    nn.save(tmp_path / "nn.zip")
    restored = xpml.load(tmp_path / "nn.zip")
    assert "_cache_kd_search" not in restored.__dict__
    d3, i3 = restored.kneighbors(Q)
    assert "ckdtree" in restored._cache_kd_search
    np.testing.assert_array_equal(i3, i0)
    np.testing.assert_array_equal(d3, d0)
    # a refit on other data builds a new tree; the approximate search needs none
    nn.fit(X[::-1])
    assert nn._cache_kd_search["ckdtree"] is not proposer
    _, i4 = nn.kneighbors(Q)
    np.testing.assert_array_equal(i4, 299 - i0)
    approx = NearestNeighbors(n_neighbors=4, algorithm="approx_kd_tree").fit(X)
    assert "_cache_kd_search" not in approx.__dict__


def test_kd_tree_scipy_one_worker_under_one_blas_thread(monkeypatch, rng):
    # under threadpool_limits(1) SciPy's tree is queried with one worker (the
    # caller asks for one core, as the brute search honours); the same answer
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import xpml.neighbors._search as S

    X, Q = rng.normal(size=(400, 3)), rng.normal(size=(50, 3))
    nn = NearestNeighbors(n_neighbors=5, algorithm="kd_tree").fit(X)
    want_d, want_i = nn.kneighbors(Q)
    seen = []
    proposer = S._proposer

    class Spy:
        def __init__(self, tree):
            self.tree = tree

        def query(self, *args, **kwargs):
            seen.append(kwargs.get("workers"))
            return self.tree.query(*args, **kwargs)

    monkeypatch.setattr(S, "_proposer", lambda X, cache: Spy(proposer(X, cache)))
    with threadpoolctl.threadpool_limits(1):
        d, i = nn.kneighbors(Q)
    assert seen and set(seen) == {1}
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d)


def test_exhaustive_search_honours_one_blas_thread(monkeypatch, rng):
    # under threadpool_limits(1) the row blocks run one after the other (no
    # thread pool), as the k-means assignment does; the same answer
    threadpoolctl = pytest.importorskip("threadpoolctl")
    import xpml.neighbors._search as S

    if S.host_threads(np) < 2:
        pytest.skip("one CPU: the thread pool is never used")
    X, Q = rng.normal(size=(200, 4)), rng.normal(size=(300, 4))
    want_d, want_i = S.exhaustive_kneighbors(Q, X, 3, xp=np, block_rows=64)

    def no_pool(*args, **kwargs):
        raise AssertionError("thread pool used under threadpool_limits(1)")

    monkeypatch.setattr(S, "map_row_blocks", no_pool)
    with threadpoolctl.threadpool_limits(1):
        d, i = S.exhaustive_kneighbors(Q, X, 3, xp=np, block_rows=64)
    np.testing.assert_array_equal(i, want_i)
    np.testing.assert_array_equal(d, want_d)
    if not S.one_blas_thread(np):  # BLAS not limited by the environment
        with pytest.raises(AssertionError, match="thread pool"):
            S.exhaustive_kneighbors(Q, X, 3, xp=np, block_rows=64)


@pytest.mark.parametrize("d", [2, 3, 9])
@pytest.mark.parametrize("p", [1, 2, math.inf])
def test_best_bin_first_steps_equal_the_all_leaves_reference(d, p):
    """The approximate search that finds only the leaves a query can visit and
    steps all queries together returns what the reference that ranks every
    leaf box for every query returns: the same indices and rank measures, for
    small and large leaf budgets, with duplicated points (ties broken by
    index), queries off the data, and k above some leaves' sizes (those
    queries take the reference path)."""
    from xpml.neighbors import _search

    rng = np.random.default_rng(d)
    X = np.round(rng.normal(size=(700, d)), 1)  # many exact ties
    X[600:] = X[:100]  # duplicated points
    Q = np.concatenate(
        [rng.normal(size=(150, d)), X[:30], 4 + rng.normal(size=(20, d))]
    )
    for leaf_size, k, max_leaves in [(16, 5, 1), (16, 5, 4), (8, 3, 16), (5, 7, 3)]:
        tree = _search.build_kd_tree(X, leaf_size)
        got = _search._best_bin_first(tree, X, Q, k, max_leaves, p=p, chunk=64)
        want = _search._best_bin_first_all(tree, X, Q, k, max_leaves, p=p)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])
