"""KMeans against scikit-learn's Lloyd, AgglomerativeClustering against SciPy's
linkage, and both across array libraries."""

import warnings

import numpy as np
import pytest

from xpml.cluster import AgglomerativeClustering, KMeans, linkage_labels
from xpml.cluster._kmeans import _assign


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # small matrix products on a loaded 2-core machine are much slower with two
    # BLAS threads fighting for the cores; results do not depend on it
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(1):
        yield


@pytest.fixture(scope="module")
def digits():
    from sklearn.datasets import load_digits

    return load_digits().data


def _same_partition(a, b):
    a, b = np.asarray(a), np.asarray(b)
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# ---------------------------------------------------------------------- k-means
@pytest.mark.parametrize("seed", [0, 1])
def test_kmeans_from_given_centres_equals_sklearn_lloyd(digits, seed):
    from sklearn.cluster import KMeans as SK

    init = digits[np.random.default_rng(seed).choice(len(digits), 10, replace=False)]
    ours = KMeans(10, init=init).fit(digits)
    ref = SK(10, init=init, n_init=1, algorithm="lloyd").fit(digits)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-10)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    assert abs(ours.n_iter_ - ref.n_iter_) <= 1
    np.testing.assert_array_equal(ours.predict(digits[:300]), ref.predict(digits[:300]))
    np.testing.assert_allclose(
        ours.transform(digits[:300]), ref.transform(digits[:300]), rtol=1e-9
    )
    np.testing.assert_allclose(ours.score(digits), ref.score(digits), rtol=1e-10)


def test_kmeans_weights_and_empty_cluster_equal_sklearn(rng):
    from sklearn.cluster import KMeans as SK

    X = np.concatenate([rng.normal(size=(50, 2)), rng.normal(size=(50, 2)) + 6])
    w = rng.uniform(0.5, 2.0, size=100)
    init = np.array([[0.0, 0.0], [6.0, 6.0], [100.0, 100.0]])  # the third starts empty
    ours = KMeans(3, init=init).fit(X, sample_weight=w)
    ref = SK(3, init=init, n_init=1, algorithm="lloyd").fit(X, sample_weight=w)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-10)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    assert len(np.unique(ours.labels_)) == 3


@pytest.mark.parametrize("init", ["k-means++", "random", "forgy", "random-partition"])
def test_restarts_reach_sklearn_inertia_on_digits(digits, init):
    from sklearn.cluster import KMeans as SK

    ours = KMeans(10, init=init, n_init=10, random_state=0).fit(digits)
    ref = SK(10, n_init=10, random_state=0).fit(digits)
    print(
        f"{init}: inertia {ours.inertia_:.1f} vs sklearn k-means++ {ref.inertia_:.1f}"
    )
    assert ours.inertia_ <= 1.01 * ref.inertia_
    # inertia_ is the objective of the returned labels and centres
    resid = digits - ours.cluster_centers_[ours.labels_]
    np.testing.assert_allclose(ours.inertia_, np.sum(resid**2), rtol=1e-10)


def test_random_init_draws_rows_by_weight_as_sklearn(rng):
    """init="random" (scikit-learn's): k distinct rows, drawn ∝ weight. With only
    k rows of positive weight those rows are the centres, in both libraries."""
    from sklearn.cluster import KMeans as SK

    X = rng.normal(size=(60, 3))
    w = np.zeros(60)
    w[[4, 17, 40]] = [1.0, 2.0, 0.5]
    for seed in (0, 1, 2):
        ours = KMeans(3, init="random", n_init=1, random_state=seed)
        ours.fit(X, sample_weight=w)
        ref = SK(3, init="random", n_init=1, random_state=seed).fit(X, sample_weight=w)
        order = np.lexsort(ours.cluster_centers_.T)
        ref_order = np.lexsort(ref.cluster_centers_.T)
        np.testing.assert_allclose(
            ours.cluster_centers_[order], X[[4, 17, 40]][np.lexsort(X[[4, 17, 40]].T)]
        )
        np.testing.assert_allclose(
            ours.cluster_centers_[order], ref.cluster_centers_[ref_order], atol=1e-12
        )
    assert KMeans(3, init="random")._n_runs(False) == 10  # scikit-learn's "auto"


def test_callable_init_equals_sklearn(digits):
    from sklearn.cluster import KMeans as SK

    seen = []

    def first_rows(X, n_clusters, random_state):
        seen.append((type(X), type(random_state)))
        return X[5 : 5 + n_clusters] + 0.5

    ours = KMeans(6, init=first_rows, n_init=2, random_state=0).fit(digits)
    ref = SK(6, init=first_rows, n_init=2, random_state=0).fit(digits)
    np.testing.assert_array_equal(ours.labels_, ref.labels_)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-10)
    np.testing.assert_allclose(ours.inertia_, ref.inertia_, rtol=1e-10)
    # called once per run with the NumPy data and the fit's Generator
    assert seen[:2] == [(np.ndarray, np.random.Generator)] * 2
    with pytest.raises(
        ValueError, match=r"\(2, 64\) does not .* centres init returned"
    ):
        KMeans(6, init=lambda X, k, random_state: X[:2]).fit(digits)


def test_fewer_distinct_points_than_clusters_warns_as_sklearn():
    """Three distinct points, four clusters: scikit-learn's ConvergenceWarning,
    and the cluster that relocation cannot fill keeps a finite centre."""
    import warnings

    from xpml.exceptions import ConvergenceWarning

    X = np.array([[0.0, 0.0], [0.0, 1.0], [1.0, 0.0], [1.0, 0.0]])
    for seed in (0, 42):
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no 0/0 centres
            with pytest.warns(
                ConvergenceWarning, match=r"distinct clusters \(3\) .* \(4\)"
            ):
                km = KMeans(4, random_state=seed).fit(X)
        assert set(km.labels_.tolist()) == {0, 1, 2}
        assert np.isfinite(km.cluster_centers_).all() and km.inertia_ == 0.0
    # scikit-learn's non-regression case (its issue 28055): centres on the
    # points, two of them duplicates; the empty cluster takes a duplicate, so no
    # centre moves and the fit stops after one iteration
    X = np.array([[0.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    with pytest.warns(ConvergenceWarning, match=r"distinct clusters \(4\)"):
        km = KMeans(5, init=X).fit(X)
    assert km.n_iter_ == 1
    np.testing.assert_array_equal(km.cluster_centers_, X)


def test_sklearn_only_parameters_and_feature_names(rng):
    from sklearn.cluster import KMeans as SkKMeans

    X = rng.standard_normal((40, 3))
    X_before = X.copy()
    km = KMeans(3, n_init=2, random_state=0, verbose=1, copy_x=False).fit(X)
    np.testing.assert_array_equal(X, X_before)  # copy_x=False: X still untouched
    sk = SkKMeans(3, n_init=2, random_state=0).fit(X)
    assert km.get_feature_names_out().tolist() == sk.get_feature_names_out().tolist()
    assert km.get_feature_names_out().dtype == object
    with pytest.warns(RuntimeWarning, match="performing only one init"):
        km = KMeans(3, init=X[:3], n_init=4).fit(X)
    assert km.n_iter_ >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        KMeans(3, init=X[:3]).fit(X)  # n_init="auto": one run, no warning
    with pytest.warns(RuntimeWarning, match="single cluster"):
        KMeans(1, algorithm="elkan", n_init=1).fit(X)


def test_tie_keeps_previous_cluster():
    X = np.array([[0.0], [0.0]])
    C = np.array([[-1.0], [1.0]])  # both points are equally far from both centres
    labels = _assign(X, C, None, xp=np)
    assert labels.tolist() == [0, 0]  # first assignment: smallest index
    labels = _assign(X, C, np.array([1, 0]), xp=np)
    assert labels.tolist() == [1, 0]  # later: keep the previous cluster
    assert KMeans(2, init=C).fit(np.array([[0.0], [0.0], [-2.0], [2.0]])).predict(
        X
    ).tolist() == [0, 0]


def test_kmeans_errors(rng):
    X = rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="n_samples=5 should be >= n_clusters=6"):
        KMeans(6).fit(X)
    with pytest.raises(
        ValueError,
        match=r"\(2, 2\) does not match the number of clu.*3.*init array.*\(3, 2\)",
    ):
        KMeans(3, init=np.zeros((2, 2))).fit(X)
    with pytest.raises(
        ValueError, match=r"\(2, 3\) does not match the number of feat.*2"
    ):
        KMeans(2, init=np.zeros((2, 3))).fit(X)
    from xpml.exceptions import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="init.*'forgy'"):
        KMeans(2, init="kmeans").fit(X)


@pytest.mark.parametrize("init", ["k-means++", "random", "forgy", "random-partition"])
def test_kmeans_backends_give_numpy_results(xp, digits, init):
    X = digits[:400]
    ref = KMeans(5, init=init, n_init=2, random_state=0).fit(X)
    est = KMeans(5, init=init, n_init=2, random_state=0).fit(xp.asarray(X))
    assert xp.is_native(est.labels_) and xp.is_native(est.cluster_centers_)
    np.testing.assert_array_equal(xp.to_numpy(est.labels_), ref.labels_)
    np.testing.assert_allclose(
        xp.to_numpy(est.cluster_centers_), ref.cluster_centers_, atol=1e-10
    )
    np.testing.assert_allclose(est.inertia_, ref.inertia_, rtol=1e-10)
    np.testing.assert_array_equal(
        xp.to_numpy(est.predict(xp.asarray(X))), ref.predict(X)
    )


def test_elkan_is_lloyd_and_sums_agree(xp, digits):
    from xpml.cluster._kmeans import cluster_sums
    from xpml.utils._array_api import dispatch

    init = digits[:6]
    a = KMeans(6, init=init).fit(digits)
    b = KMeans(6, init=init, algorithm="elkan").fit(digits)
    np.testing.assert_array_equal(a.labels_, b.labels_)
    # the library's scatter-add (bincount / index_add) equals the one-hot product
    labels = xp.asarray(a.labels_)
    Xw, w = xp.asarray(digits), xp.asarray(np.ones(len(digits)))
    fast = dispatch("cluster_sums", xp.xp)(labels, Xw, w, xp=xp.xp, k=7)
    slow = cluster_sums(labels, Xw, w, xp=xp.xp, k=7)
    for f, s in zip(fast, slow):
        np.testing.assert_allclose(xp.to_numpy(f), xp.to_numpy(s), rtol=1e-12)


@pytest.mark.parametrize("init", ["k-means++", "given"])
def test_kmeans_one_host_sync_per_lloyd_iteration(init):
    pytest.importorskip("torch")
    import xpml
    from xpml.testing import count_syncs

    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(300, 4)) + c for c in (0, 5, 10)])
    start = X[[0, 300, 600, 1, 2]] if init == "given" else init
    with xpml.backend("torch", output="backend"), count_syncs() as c:
        km = KMeans(5, init=start, random_state=0).fit(X)
    # one read-back per iteration; tol, inertia and the k-means++ weights per fit
    assert c.syncs <= km.n_iter_ + 3, c.summary()


# ----------------------------------------------------------------- agglomerative
LINKAGES = ["ward", "single", "complete", "average", "centroid"]


@pytest.fixture(scope="module")
def points():
    return np.random.default_rng(42).normal(size=(200, 4))


@pytest.mark.parametrize("linkage", LINKAGES)
def test_linkage_matrix_equals_scipy(points, linkage):
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    Z = (
        AgglomerativeClustering(n_clusters=1, linkage=linkage)
        .fit(points)
        .linkage_matrix_
    )
    R = scipy_linkage(points, method=linkage)
    assert Z.shape == (199, 4)
    np.testing.assert_allclose(Z[:, 2], R[:, 2], rtol=0, atol=1e-10)
    np.testing.assert_array_equal(Z[:, [0, 1, 3]], R[:, [0, 1, 3]])


@pytest.mark.parametrize("linkage", LINKAGES)
@pytest.mark.parametrize("n_clusters", [2, 5, 17])
def test_cut_into_n_clusters(points, linkage, n_clusters):
    from scipy.cluster.hierarchy import cut_tree
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    est = AgglomerativeClustering(n_clusters=n_clusters, linkage=linkage).fit(points)
    assert est.n_clusters_ == n_clusters
    assert est.labels_[0] == 0 and set(est.labels_.tolist()) == set(range(n_clusters))
    # the partition after the first n - n_clusters merges of the linkage matrix
    n = len(points)
    members = {i: {i} for i in range(n)}
    for step, (a, b) in enumerate(
        est.linkage_matrix_[: n - n_clusters, :2].astype(int)
    ):
        members[n + step] = members.pop(a) | members.pop(b)
    ref = np.empty(n, dtype=int)
    for lab, group in enumerate(members.values()):
        ref[list(group)] = lab
    assert _same_partition(est.labels_, ref)
    if linkage != "centroid":  # scipy's cut_tree assumes monotone heights
        assert _same_partition(
            est.labels_,
            cut_tree(scipy_linkage(points, method=linkage), n_clusters=n_clusters)[
                :, 0
            ],
        )


@pytest.mark.parametrize("linkage", ["ward", "single", "complete", "average"])
def test_labels_equal_sklearn(points, linkage):
    from sklearn.cluster import AgglomerativeClustering as SK

    for kw in ({"n_clusters": 4}, {"n_clusters": None, "distance_threshold": 1.5}):
        ours = AgglomerativeClustering(linkage=linkage, **kw).fit(points)
        ref = SK(linkage=linkage, **kw).fit(points)
        assert ours.n_clusters_ == ref.n_clusters_
        assert _same_partition(ours.labels_, ref.labels_)
        assert np.array_equal(ours.fit_predict(points), ours.labels_)


@pytest.mark.parametrize("linkage", LINKAGES)
def test_portable_linkage_equals_scipy(linkage):
    # the array-API algorithm (what torch, CuPy and array-api-strict run) against
    # SciPy, which the NumPy backend calls; larger than the other tests so that
    # merged clusters get big (rows re-scanned in bulk, stale rows)
    from scipy.cluster.hierarchy import linkage as scipy_linkage

    from xpml.cluster._agglomerative import linkage_matrix

    X = np.random.default_rng(1).standard_normal((600, 5))
    Z = linkage_matrix(X, xp=np, method=linkage)
    R = scipy_linkage(X, method=linkage)
    np.testing.assert_allclose(Z[:, 2], R[:, 2], rtol=0, atol=1e-10)
    np.testing.assert_array_equal(Z[:, [0, 1, 3]], R[:, [0, 1, 3]])


def test_default_linkage_is_ward_as_sklearn(points):
    from sklearn.cluster import AgglomerativeClustering as SK

    assert AgglomerativeClustering().linkage == SK().linkage == "ward"
    ours, ref = AgglomerativeClustering(4).fit(points), SK(4).fit(points)
    assert _same_partition(ours.labels_, ref.labels_)


@pytest.mark.parametrize("linkage", LINKAGES)
def test_agglomerative_one_host_sync_per_merge(points, linkage):
    pytest.importorskip("torch")
    import xpml
    from xpml.testing import count_syncs

    with xpml.backend("torch", output="backend"), count_syncs() as c:
        AgglomerativeClustering(3, linkage=linkage).fit(points)
    assert c.syncs <= len(points) - 1 + 2, c.summary()


def test_connectivity_one_host_sync_per_merge(points):
    pytest.importorskip("torch")
    from sklearn.neighbors import kneighbors_graph

    import xpml
    from xpml.testing import count_syncs

    C = kneighbors_graph(points, 4, include_self=False)
    with xpml.backend("torch", output="backend"), count_syncs() as c:
        AgglomerativeClustering(3, connectivity=C, compute_full_tree=True).fit(points)
    assert c.syncs <= len(points) - 1 + 3, c.summary()


def test_dendrogram_draws_from_linkage_matrix(points):
    from scipy.cluster.hierarchy import dendrogram

    Z = AgglomerativeClustering(linkage="average").fit(points[:30]).linkage_matrix_
    tree = dendrogram(Z, no_plot=True)
    assert sorted(tree["leaves"]) == list(range(30))


def test_linkage_labels_and_errors(points):
    Z = np.array([[0, 1, 1.0, 2], [2, 4, 1.5, 3], [3, 5, 4.0, 4]])
    assert linkage_labels(Z, 0).tolist() == [0, 1, 2, 3]
    assert linkage_labels(Z, 2).tolist() == [0, 0, 0, 1]
    with pytest.raises(
        ValueError, match="Exactly one of n_clusters and distance_threshold"
    ):
        AgglomerativeClustering(n_clusters=None).fit(points)
    with pytest.raises(
        ValueError, match="Exactly one of n_clusters and distance_threshold"
    ):
        AgglomerativeClustering(n_clusters=2, distance_threshold=1.0).fit(points)
    with pytest.raises(
        ValueError, match="n_clusters=300 must be at most n_samples=200"
    ):
        AgglomerativeClustering(n_clusters=300).fit(points)


@pytest.mark.parametrize("linkage", LINKAGES)
def test_agglomerative_backends_give_numpy_results(xp, points, linkage):
    X = points[:80]
    ref = AgglomerativeClustering(n_clusters=3, linkage=linkage).fit(X)
    est = AgglomerativeClustering(n_clusters=3, linkage=linkage).fit(xp.asarray(X))
    assert xp.is_native(est.linkage_matrix_) and xp.is_native(est.labels_)
    Z = xp.to_numpy(est.linkage_matrix_)
    np.testing.assert_array_equal(Z[:, [0, 1, 3]], ref.linkage_matrix_[:, [0, 1, 3]])
    np.testing.assert_allclose(Z[:, 2], ref.linkage_matrix_[:, 2], atol=1e-10)
    np.testing.assert_array_equal(xp.to_numpy(est.labels_), ref.labels_)


@pytest.mark.parametrize("linkage", ["ward", "average", "complete", "single"])
def test_connectivity_equals_sklearn(xp, linkage):
    from sklearn.cluster import AgglomerativeClustering as SkAC
    from sklearn.neighbors import kneighbors_graph

    X = np.random.default_rng(1).standard_normal((50, 3))
    C = kneighbors_graph(X, 5, include_self=False)
    for n_clusters in (2, 6):
        sk = SkAC(n_clusters, linkage=linkage, connectivity=C, compute_distances=True)
        sk.fit(X)
        ac = AgglomerativeClustering(
            n_clusters, linkage=linkage, connectivity=C, compute_distances=True
        )
        ac.fit(xp.asarray(X))
        np.testing.assert_array_equal(
            xp.to_numpy(ac.labels_), _relabel(sk.labels_), err_msg=linkage
        )
        np.testing.assert_allclose(
            xp.to_numpy(ac.distances_), sk.distances_, rtol=1e-9, atol=1e-12
        )
    dense = AgglomerativeClustering(6, linkage=linkage, connectivity=C.toarray()).fit(X)
    np.testing.assert_array_equal(dense.labels_, _relabel(sk.labels_))


def _relabel(labels):
    """Labels numbered by first appearance."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[inverse]


def test_connectivity_components_callable_and_partial_tree():
    from sklearn.cluster import AgglomerativeClustering as SkAC

    rng = np.random.default_rng(2)
    X = np.concatenate([rng.standard_normal((10, 2)), rng.standard_normal((10, 2)) + 8])
    C = np.zeros((20, 20))
    C[np.arange(9), np.arange(1, 10)] = 1  # a chain in each half: 2 components
    C[np.arange(10, 19), np.arange(11, 20)] = 1
    with pytest.warns(UserWarning, match="connected components"):
        sk = SkAC(3, connectivity=C).fit(X)
    with pytest.warns(UserWarning, match="connected components"):
        ac = AgglomerativeClustering(3, connectivity=lambda Z: C).fit(X)
    np.testing.assert_array_equal(ac.labels_, _relabel(sk.labels_))
    assert ac.children_.shape == sk.children_.shape == (19, 2)
    with pytest.warns(UserWarning):
        part = AgglomerativeClustering(3, connectivity=C, compute_full_tree=False)
        part.fit(X)
    assert part.children_.shape == (17, 2)
    np.testing.assert_array_equal(part.labels_, ac.labels_)
    with pytest.raises(ValueError, match="Wrong shape for connectivity"):
        AgglomerativeClustering(3, connectivity=C[:5]).fit(X)
    with pytest.raises(ValueError, match="compute_full_tree must be True"):
        AgglomerativeClustering(
            None, distance_threshold=1.0, connectivity=C, compute_full_tree=False
        ).fit(X)


def test_distances_and_threshold_as_sklearn():
    from sklearn.cluster import AgglomerativeClustering as SkAC
    from sklearn.neighbors import kneighbors_graph

    X = np.random.default_rng(3).standard_normal((40, 4))
    assert not hasattr(AgglomerativeClustering(3).fit(X), "distances_")
    assert AgglomerativeClustering(3, compute_distances=True).fit(
        X
    ).distances_.shape == (39,)
    C = kneighbors_graph(X, 4, include_self=False)
    for linkage in ("average", "complete", "ward"):
        for conn in (None, C):
            kw = dict(n_clusters=None, distance_threshold=2.5, linkage=linkage)
            sk = SkAC(connectivity=conn, **kw).fit(X)
            ac = AgglomerativeClustering(connectivity=conn, **kw).fit(X)
            assert ac.n_clusters_ == sk.n_clusters_
            np.testing.assert_array_equal(ac.labels_, _relabel(sk.labels_))
    assert AgglomerativeClustering(3, metric="l2").fit(X).n_clusters_ == 3
    with pytest.raises(ValueError, match="'metric' parameter"):
        AgglomerativeClustering(3, connectivity=C, metric="manhattan").fit(X)
    with pytest.raises(ValueError, match="compute_full_tree must be True"):
        AgglomerativeClustering(
            None, distance_threshold=1.0, compute_full_tree=False
        ).fit(X)


def _kmeans_portable_fit(monkeypatch, est, X, w):
    """``est.fit`` with every k-means operation on its portable twin."""
    import functools

    import xpml.cluster._kmeans as km
    from xpml.utils._array_api import dispatch

    with monkeypatch.context() as m:
        m.setattr(km, "dispatch", functools.partial(dispatch, fast=False))
        return est.fit(X, sample_weight=w)


@pytest.mark.parametrize("one_thread", [True, False])
def test_kmeans_numpy_fast_paths_agree_with_portable_lloyd(monkeypatch, one_thread):
    """The NumPy Lloyd (centre-major scores, changed rows only in the sums,
    row blocks one after the other under a one-thread BLAS limit, else on a
    thread pool) gives the portable run's labels and iterations, centres and
    inertia to 1e-12."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(5)
    X = 2.0 * rng.standard_normal((6, 4))[rng.integers(0, 6, 3000)]
    X += rng.standard_normal((3000, 4))
    w = rng.uniform(0.5, 2.0, 3000)
    init = np.concatenate([X[:5], [[40.0, 40.0, 40.0, 40.0]]])  # one empties
    with threadpool_limits(1 if one_thread else 2):
        for weights in (None, w):
            kw = dict(init=init, max_iter=60, tol=0.0, memory_budget=6 * 8 * 3 * 700)
            fast = KMeans(6, **kw).fit(X, sample_weight=weights)
            slow = _kmeans_portable_fit(monkeypatch, KMeans(6, **kw), X, weights)
            assert fast.n_iter_ == slow.n_iter_ > 5
            np.testing.assert_array_equal(fast.labels_, slow.labels_)
            np.testing.assert_allclose(
                fast.cluster_centers_, slow.cluster_centers_, rtol=1e-12, atol=1e-12
            )
            assert fast.inertia_ == pytest.approx(slow.inertia_, rel=1e-12)


def test_kmeans_one_blas_thread_starts_no_threads(monkeypatch):
    """Under ``threadpool_limits(1)`` the row blocks run one after the other
    (no thread pool), with the answer of the pooled run (two BLAS threads; this
    module's fixture limits BLAS to one)."""
    from threadpoolctl import threadpool_limits

    import xpml.cluster._kmeans as km

    X = np.random.default_rng(6).standard_normal((2000, 3))
    kw = dict(n_clusters=4, random_state=0, memory_budget=4 * 8 * 3 * 300)
    with threadpool_limits(2):
        pooled = KMeans(**kw).fit(X)

    def refuse(*args, **kwargs):
        raise AssertionError("a thread pool under a one-thread BLAS limit")

    monkeypatch.setattr(km, "map_row_blocks", refuse)
    monkeypatch.setattr(km, "thread_pool", refuse)  # the Lloyd run's pool
    with threadpool_limits(1):
        alone = KMeans(**kw).fit(X)
    np.testing.assert_array_equal(alone.labels_, pooled.labels_)
    np.testing.assert_allclose(alone.cluster_centers_, pooled.cluster_centers_)
    with threadpool_limits(2), pytest.raises(AssertionError, match="thread pool"):
        KMeans(**kw).fit(X)


@pytest.mark.parametrize("bounded", [False, True])
@pytest.mark.parametrize("one_thread", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_kmeans_numpy_step_equals_portable_step_bit_for_bit(
    monkeypatch, one_thread, weighted, bounded
):
    """The NumPy Lloyd step (labels written block by block, one shard of
    blocks per thread of a pool held for the run, changed rows taken from the
    assignment, counts moved with them when all weights are 1; with Hamerly's
    bounds, only the rows they cannot keep scored) gives the portable step's
    labels, sums and weights bit for bit at every iteration, empty clusters
    included."""
    from threadpoolctl import threadpool_limits

    import xpml.cluster._kmeans as km
    from xpml.utils._array_api import dispatch

    rng = np.random.default_rng(7)
    X = 3.0 * rng.standard_normal((8, 5))[rng.integers(0, 8, 4000)]
    X += rng.standard_normal((4000, 5))
    w = rng.uniform(0.5, 2.0, 4000) if weighted else np.ones(4000)
    C = np.concatenate([X[:7], [[60.0] * 5]])  # centre 7 takes no point
    data = km._Data.make(X, w, 8, xp=np, memory_budget=8 * 8 * 3 * 300)
    assert data.rows < 1000 and (data.Xw is data.X) == (not weighted)
    fast_step = dispatch("kmeans.lloyd_step", np)
    slow_step = dispatch("kmeans.lloyd_step", np, fast=False)
    assert fast_step is km._lloyd_step_numpy and slow_step is km._lloyd_step
    labels = sums = None
    changed, scored = [], []
    # the candidates split over the shards from POOLED_CANDIDATES rows: every
    # bounded step here, so the threaded bounded path runs too
    monkeypatch.setattr(km, "POOLED_CANDIDATES", 0)
    candidates = km._Bounds.candidates
    monkeypatch.setattr(
        km._Bounds,
        "candidates",
        lambda self, C, B: scored.append(candidates(self, C, B)) or scored[-1],
    )
    with threadpool_limits(1 if one_thread else 2), km._shard_runner(np) as shards:
        assert (shards is None) == one_thread
        bounds = km._bounds_for(data, 12, np) if bounded else None
        run = km.dataclasses.replace(data, shards=shards, bounds=bounds)
        for _ in range(12):
            fast = fast_step(run, C, labels, xp=np, previous_sums=sums)
            slow = slow_step(data, C, labels, xp=np, previous_sums=sums)
            for f, s in zip(fast, slow, strict=True):
                np.testing.assert_array_equal(f, s)
                assert f.dtype == s.dtype
            if labels is not None:
                changed.append(int(np.sum(fast[0] != labels)))
            labels, sums = fast[0], fast[1:]
            C = km._means(*sums, C, xp=np)
    assert sums[1][7] == 0 and changed[0] > 0  # an empty cluster; rows moved
    if bounded:  # most rows kept by their bounds once the centres settle
        assert len(scored) == 10 and 0 < scored[-1].size < 400


def _bounds_always_on(monkeypatch):
    """Every step after the first with Hamerly's bounds, whatever the steps
    take (the run's switch otherwise turns them off when they do not pay)."""
    import xpml.cluster._kmeans as km

    def timed(self, data, seconds):
        self.fresh, self.plain_s = False, float("inf")

    monkeypatch.setattr(km._BoundsSwitch, "timed", timed)


def test_kmeans_bounds_keep_every_answer_on_ties_and_duplicates(monkeypatch):
    """Lloyd runs with Hamerly's bounds (NumPy, float64) and without them give
    the same labels, centres, inertia and iterations bit for bit, on data with
    exact distance ties (integer grid points, duplicated rows) and on blobs;
    the bounds keep most rows from being scored."""
    import xpml.cluster._kmeans as km

    rng = np.random.default_rng(11)
    grid = rng.integers(0, 5, size=(3000, 3)).astype(float)
    blobs = 3.0 * rng.standard_normal((10, 6))[rng.integers(0, 10, 4000)]
    blobs += rng.standard_normal((4000, 6))
    scored = []
    candidates = km._Bounds.candidates
    _bounds_always_on(monkeypatch)
    for X, k in ((grid, 7), (blobs, 6), (blobs, 25)):
        kw = dict(n_clusters=k, n_init=3, random_state=0, memory_budget=2**16)
        with monkeypatch.context() as m:
            m.setattr(
                km._Bounds,
                "candidates",
                lambda self, C, B: scored.append(n := candidates(self, C, B)) or n,
            )
            bounded = KMeans(init="random", **kw).fit(X)
        with monkeypatch.context() as m:
            m.setattr(km, "_bounds_for", lambda *args: None)
            full = KMeans(init="random", **kw).fit(X)
        assert bounded.n_iter_ == full.n_iter_ > 2
        np.testing.assert_array_equal(bounded.labels_, full.labels_)
        np.testing.assert_array_equal(bounded.cluster_centers_, full.cluster_centers_)
        assert bounded.inertia_ == full.inertia_
    assert min(c.size for c in scored) < 0.05 * len(grid)


def test_kmeans_bounds_rescore_every_row_near_a_boundary():
    """Rows within 1e-15 … 1e-3 of the bisector of two centres, centres then
    moved by 1e-13 … 1e-3: at every step the bounded NumPy step's labels are
    the full assignment's (prev kept on ties), i.e. no row its bounds keep
    could have changed cluster, rounding included."""
    import xpml.cluster._kmeans as km
    from xpml.kernels import point_factor

    rng = np.random.default_rng(12)
    n, d = 3000, 4
    c0, c1 = rng.standard_normal(d), rng.standard_normal(d)
    normal = (c1 - c0) / np.linalg.norm(c1 - c0)
    base = rng.standard_normal((n, d))
    base -= np.outer(base @ normal, normal) - (c0 + c1) / 2
    offsets = rng.choice([-1.0, 1.0], n) * 10.0 ** rng.uniform(-15, -3, n)
    X = base + offsets[:, None] * normal
    C = np.stack([c0, c1, c0 + 8.0])
    data = km._Data.make(X, np.ones(n), 3, xp=np)
    run = km.dataclasses.replace(data, bounds=km._bounds_for(data, 40, np))
    labels = km._nearest_numpy(data.A, point_factor(C, xp=np), None, xp=np)
    sums = km._cluster_sums_numpy(labels, data.Xw, data.w, xp=np, k=3)
    flips = 0
    for step in range(40):
        C = C + 10.0 ** -(3 + step % 11) * rng.standard_normal(C.shape)
        full = km._nearest_numpy(data.A, point_factor(C, xp=np), labels, xp=np)
        got, *sums = km._lloyd_step_numpy(run, C, labels, xp=np, previous_sums=sums)
        np.testing.assert_array_equal(got, full)
        flips += int(np.sum(got != labels))
        labels = got
    assert flips > 100


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_kmeans_moved_rows_sum_as_ufunc_at(dtype):
    """The NumPy Lloyd step's incremental sums (rows added to their new
    cluster in order, then taken from their old one) equal ``np.add.at`` then
    ``np.subtract.at`` bit for bit, repeated clusters included."""
    from xpml.cluster._kmeans import _move_rows

    rng = np.random.default_rng(13)
    sums = (100.0 * rng.standard_normal((6, 9))).astype(dtype)
    rows = rng.standard_normal((500, 9)).astype(dtype)
    to, back = rng.integers(0, 6, 500), rng.integers(0, 6, 500)
    expected = sums.copy()
    np.add.at(expected, to, rows)
    np.subtract.at(expected, back, rows)
    _move_rows(sums, rows, to, back)
    np.testing.assert_array_equal(sums, expected)


def test_kmeans_bounds_switch_follows_the_steps_times():
    """The bounds stay on while a bounded step is no slower than the last
    plain one; a slower one turns them off for PROBE_EVERY plain steps, then
    they are tried again (that try, which measures every row's bounds, is not
    compared). Without bounds (other libraries, float32) nothing changes."""
    import xpml.cluster._kmeans as km

    data = km._Data.make(np.ones((10, 2)), np.ones(10), 2, xp=np)
    bounds = object()
    sw = km._BoundsSwitch(bounds)
    used = []

    def step(seconds, first=False):
        d = sw.data(data, first)
        used.append(d.bounds is bounds)
        sw.timed(d, seconds)

    step(3.0, first=True)  # the first assignment: plain, not a baseline
    step(1.0)  # a plain step from labels: the baseline
    step(5.0)  # the bounds measured: not compared
    step(0.9)  # cheaper than the plain step: kept
    step(1.2)  # dearer: off
    wait = sw.PROBE_EVERY
    for _ in range(wait):
        step(1.0)
    step(3.0)  # tried again, measured anew: not compared
    step(1.1)  # dearer at once: off, twice as long
    for _ in range(2 * wait):
        step(1.0)
    step(3.0)
    step(0.5)  # cheaper: kept, and the wait starts again from PROBE_EVERY
    plain = [False] * wait
    assert used == (
        [False, False, True, True, True]
        + plain
        + [True, True]
        + 2 * plain
        + [True, True]
    )
    assert sw.off == 0 and sw.plain_s == 1.0 and sw.wait == wait
    none = km._BoundsSwitch(None)
    for first in (True, False):
        d = none.data(data, first)
        none.timed(d, 1.0)
        assert d.bounds is None


def test_kmeans_bounds_switched_on_and_off_keep_the_answer(monkeypatch):
    """A run whose bounds go off and on again every two steps (each time back
    on, every row's bounds are measured anew) gives the labels, centres,
    inertia and iterations of a run without them, bit for bit."""
    import xpml.cluster._kmeans as km

    rng = np.random.default_rng(3)
    X = 3.0 * rng.standard_normal((12, 4))[rng.integers(0, 12, 3000)]
    X += rng.standard_normal((3000, 4))
    kw = dict(n_clusters=9, n_init=2, random_state=1, memory_budget=2**16, tol=0.0)
    steps, scored = [], []
    candidates = km._Bounds.candidates

    def data(self, d, first):
        steps.append(not first and (len(steps) // 2) % 2 == 1)
        return km.dataclasses.replace(d, bounds=self.bounds if steps[-1] else None)

    with monkeypatch.context() as m:
        m.setattr(km._BoundsSwitch, "data", data)
        m.setattr(
            km._Bounds,
            "candidates",
            lambda self, C, B: scored.append(n := candidates(self, C, B)) or n,
        )
        switched = KMeans(init="random", **kw).fit(X)
    with monkeypatch.context() as m:
        m.setattr(km, "_bounds_for", lambda *args: None)
        full = KMeans(init="random", **kw).fit(X)
    assert switched.n_iter_ == full.n_iter_ > 6
    assert steps.count(True) >= 4 and steps.count(False) >= 4
    # the bounds really ran: each stretch on, after its first step, pruned rows
    assert len(scored) >= 2 and min(c.size for c in scored) < 3000
    np.testing.assert_array_equal(switched.labels_, full.labels_)
    np.testing.assert_array_equal(switched.cluster_centers_, full.cluster_centers_)
    assert switched.inertia_ == full.inertia_
