"""Decision trees against scikit-learn, pruning, and backend parity.

Tolerances: the root split's feature is equal, its threshold equal to 1e-6
relative (scikit-learn stores X as float32, xpml computes in float64) and its
impurity decrease to 1e-9 relative; test accuracies within 2 points of
scikit-learn's tree, averaged over three stratified splits (70/30) because
scikit-learn breaks exact ties between features by a random order.
"""

import pickle

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier as SkTree
from sklearn.tree import DecisionTreeRegressor as SkReg
from sklearn.tree import export_text as sk_export_text

from xpml._backend import to_numpy
from xpml.exceptions import InvalidParameterError
from xpml.tree import DecisionTreeClassifier, DecisionTreeRegressor, export_text

LOADERS = {
    "breast_cancer": load_breast_cancer,
    "wine": load_wine,
    "digits": load_digits,
}
_CACHE = {}


def _data(name):
    if name not in _CACHE:
        _CACHE[name] = LOADERS[name](return_X_y=True)
    return _CACHE[name]


def _root_decrease(t, i=0):
    """Weighted impurity decrease of node i, scikit-learn's definition."""
    W, imp = np.asarray(t.weighted_n_node_samples), np.asarray(t.impurity)
    left, right = np.asarray(t.children_left)[i], np.asarray(t.children_right)[i]
    return (W[i] * imp[i] - W[left] * imp[left] - W[right] * imp[right]) / W[0]


@pytest.mark.parametrize("name", list(LOADERS))
@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_root_split_equals_sklearn(name, criterion):
    X, y = _data(name)
    ours = DecisionTreeClassifier(criterion=criterion, max_depth=1).fit(X, y)
    ref = SkTree(criterion=criterion, max_depth=1, random_state=0).fit(X, y)
    assert int(ours.tree_feature_[0]) == int(ref.tree_.feature[0])
    np.testing.assert_allclose(
        ours.tree_threshold_[0], ref.tree_.threshold[0], rtol=1e-6
    )
    np.testing.assert_allclose(
        ours.tree_impurity_[0], ref.tree_.impurity[0], rtol=1e-12
    )
    np.testing.assert_allclose(
        _root_decrease(ours.tree_), _root_decrease(ref.tree_), rtol=1e-9
    )
    np.testing.assert_allclose(ours.tree_value_, ref.tree_.value[:, 0, :], rtol=1e-12)


@pytest.mark.parametrize("name", list(LOADERS))
def test_fully_grown_tree_fits_distinct_points(name):
    X, y = _data(name)
    _, idx = np.unique(X, axis=0, return_index=True)
    X, y = X[idx], y[idx]
    clf = DecisionTreeClassifier().fit(X, y)
    assert np.array_equal(clf.predict(X), y)
    leaves = clf.apply(X)
    assert np.all(clf.tree_feature_[leaves] == -2)
    target = X[:, 0] + 2 * y
    reg = DecisionTreeRegressor().fit(X, target)
    np.testing.assert_allclose(reg.predict(X), target, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", list(LOADERS))
def test_test_accuracy_close_to_sklearn(name):
    X, y = _data(name)
    ours, ref = [], []
    for seed in range(3):
        Xtr, Xte, ytr, yte = train_test_split(
            X, y, test_size=0.3, random_state=seed, stratify=y
        )
        for crit in ("gini", "entropy"):
            ours.append(
                DecisionTreeClassifier(criterion=crit).fit(Xtr, ytr).score(Xte, yte)
            )
            ref.append(
                SkTree(criterion=crit, random_state=seed).fit(Xtr, ytr).score(Xte, yte)
            )
    assert abs(np.mean(ours) - np.mean(ref)) <= 0.02, (np.mean(ours), np.mean(ref))


def _one_of_sklearns(ours, make_ref, X, seeds=range(100)):
    """scikit-learn breaks exact ties between features by a random feature
    order; xpml takes the lowest feature index. ``ours`` must equal
    scikit-learn's tree for one of its random_states."""
    text = export_text(ours)
    for s in seeds:
        ref = make_ref(s)
        if sk_export_text(ref) == text:
            return ref
    raise AssertionError("the tree differs from scikit-learn's for every random_state")


def test_stopping_rules_give_sklearn_tree():
    """The whole tree (structure, thresholds, values, importances) is one of
    scikit-learn's."""
    X, y = _data("breast_cancer")
    kw = dict(min_samples_leaf=5, min_samples_split=12, min_impurity_decrease=0.002)
    for depth in (2, 4):
        ours = DecisionTreeClassifier(max_depth=depth, **kw).fit(X, y)
        ref = _one_of_sklearns(
            ours, lambda s: SkTree(max_depth=depth, random_state=s, **kw).fit(X, y), X
        )
        assert ours.node_count_ == ref.tree_.node_count
        assert (
            ours.max_depth_ == ref.get_depth() and ours.n_leaves_ == ref.get_n_leaves()
        )
        np.testing.assert_array_equal(ours.predict_proba(X), ref.predict_proba(X))
        np.testing.assert_allclose(
            ours.feature_importances_, ref.feature_importances_, rtol=1e-9, atol=1e-12
        )
        # same nodes, numbered breadth-first here and depth-first by scikit-learn
        np.testing.assert_allclose(
            np.sort(ours.tree_impurity_), np.sort(ref.tree_.impurity), rtol=1e-12
        )


def test_regressor_matches_sklearn():
    X, y = _data("wine")
    target = X[:, 0] * 0.5 + y
    for kw in ({"max_depth": 3}, {"min_samples_leaf": 4}):
        ours = DecisionTreeRegressor(**kw).fit(X, target)
        ref = SkReg(random_state=0, **kw).fit(X, target)
        assert int(ours.tree_feature_[0]) == int(ref.tree_.feature[0])
        np.testing.assert_allclose(
            ours.tree_threshold_[0], ref.tree_.threshold[0], rtol=1e-6
        )
        np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-10)


def test_purity_threshold_stops_mixed_but_mostly_pure_nodes():
    X, y = _data("breast_cancer")
    clf = DecisionTreeClassifier(purity_threshold=0.9).fit(X, y)
    inner = np.asarray(clf.tree_children_left_) >= 0
    majority = np.asarray(clf.tree_value_).max(axis=1)
    assert np.all(majority[inner] < 0.9)
    assert clf.node_count_ < DecisionTreeClassifier().fit(X, y).node_count_


def test_integer_weights_equal_repeated_rows():
    X, y = _data("wine")
    w = np.random.default_rng(0).integers(0, 3, len(y))
    a = DecisionTreeClassifier().fit(X, y, sample_weight=w)
    b = DecisionTreeClassifier().fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_array_equal(a.predict_proba(X), b.predict_proba(X))
    np.testing.assert_array_equal(a.tree_threshold_, b.tree_threshold_)


def _noisy(seed, n=600):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
    flip = rng.random(n) < 0.25
    return X, np.where(flip, 1 - y, y)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pruning_never_raises_validation_error_and_shrinks(seed):
    X, y = _noisy(seed)
    Xtr, ytr, Xv, yv = X[:400], y[:400], X[400:], y[400:]
    clf = DecisionTreeClassifier(random_state=0).fit(Xtr, ytr)
    before_err = np.mean(clf.predict(Xv) != yv)
    before_nodes = clf.node_count_
    clf.prune(Xv, yv)
    after_err = np.mean(clf.predict(Xv) != yv)
    assert after_err <= before_err
    assert clf.node_count_ < 0.7 * before_nodes  # noise-fitting branches are removed
    assert clf.n_pruned_nodes_ == before_nodes - clf.node_count_
    # the pruned tree is a valid tree: leaves loop nowhere, importances sum to one
    left = np.asarray(clf.tree_children_left_)
    assert np.all(np.asarray(clf.tree_feature_)[left < 0] == -2)
    np.testing.assert_allclose(np.sum(clf.feature_importances_), 1.0)


def test_regression_pruning_never_raises_validation_sse():
    rng = np.random.default_rng(3)
    X = rng.uniform(-3, 3, size=(500, 2))
    y = np.sin(X[:, 0]) + rng.normal(scale=0.5, size=500)
    reg = DecisionTreeRegressor().fit(X[:300], y[:300])
    sse = np.sum((reg.predict(X[300:]) - y[300:]) ** 2)
    n0 = reg.node_count_
    reg.prune(X[300:], y[300:])
    assert np.sum((reg.predict(X[300:]) - y[300:]) ** 2) <= sse
    assert reg.node_count_ < 0.7 * n0


def test_backends_give_numpy_results(xp):
    """Fit, predict, apply and prune on every library give NumPy's numbers."""
    X, y = _noisy(5, n=300)
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    kw = dict(max_features=3, random_state=4, min_samples_leaf=2)
    ref = DecisionTreeClassifier(criterion="entropy", **kw).fit(
        X[:200], y[:200], sample_weight=w[:200]
    )
    got = DecisionTreeClassifier(criterion="entropy", **kw).fit(
        xp.asarray(X[:200]), xp.asarray(y[:200]), sample_weight=xp.asarray(w[:200])
    )
    P = got.predict_proba(xp.asarray(X))
    assert xp.is_native(P)
    np.testing.assert_allclose(
        xp.to_numpy(P), ref.predict_proba(X), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_array_equal(xp.to_numpy(got.apply(xp.asarray(X))), ref.apply(X))
    np.testing.assert_array_equal(xp.to_numpy(got.tree_threshold_), ref.tree_threshold_)
    ref.prune(X[200:], y[200:])
    got.prune(xp.asarray(X[200:]), xp.asarray(y[200:]))
    assert got.node_count_ == ref.node_count_
    np.testing.assert_array_equal(
        xp.to_numpy(got.predict(xp.asarray(X))), ref.predict(X)
    )
    t = X[:, 0] ** 2 + X[:, 1]
    r1 = DecisionTreeRegressor(max_features=0.5, random_state=0).fit(X, t)
    r2 = DecisionTreeRegressor(max_features=0.5, random_state=0).fit(
        xp.asarray(X), xp.asarray(t)
    )
    np.testing.assert_allclose(
        xp.to_numpy(r2.predict(xp.asarray(X))), r1.predict(X), rtol=1e-12
    )


def test_random_feature_subsets_are_seeded():
    X, y = _data("wine")
    a = DecisionTreeClassifier(max_features="sqrt", random_state=3).fit(X, y)
    b = DecisionTreeClassifier(max_features="sqrt", random_state=3).fit(X, y)
    np.testing.assert_array_equal(a.tree_feature_, b.tree_feature_)
    c = [
        DecisionTreeClassifier(max_features=1, random_state=s)
        .fit(X, y)
        .tree_feature_[0]
        for s in range(8)
    ]
    assert len(set(np.asarray(c).tolist())) > 1


def test_errors_name_the_argument():
    X, y = _data("wine")
    with pytest.raises(InvalidParameterError, match="criterion"):
        DecisionTreeClassifier(criterion="mse").fit(X, y)
    with pytest.raises(InvalidParameterError, match="purity_threshold"):
        DecisionTreeClassifier(purity_threshold=1.5).fit(X, y)
    with pytest.raises(ValueError, match="max_features"):
        DecisionTreeClassifier(max_features=100).fit(X, y)
    clf = DecisionTreeClassifier(max_depth=2).fit(X, y)
    with pytest.raises(ValueError, match="y_val"):
        clf.prune(X, np.full(len(y), 7))
    with pytest.raises(ValueError, match="feature_names"):
        export_text(clf, feature_names=["a"])


def test_export_text_truncates():
    X, y = _data("breast_cancer")
    clf = DecisionTreeClassifier().fit(X, y)
    names = [f"f{i}" for i in range(X.shape[1])]
    text = export_text(clf, max_depth=1, feature_names=names)
    assert text.startswith("|--- f20 <= 16.80")
    assert "truncated branch of depth" in text
    refs = [
        sk_export_text(
            SkTree(random_state=s).fit(X, y), max_depth=1, feature_names=names
        )
        for s in range(10)
    ]
    assert text in refs


# ------------------------------------------------------------------ issue 13
def _check_fit_and_predict_budget(est, X, target):
    """Under the torch backend: the fit's syncs stay within one per node block
    (plus a handful per fit), syncs and uploads within three per block, and a
    second prediction neither syncs nor uploads."""
    from xpml.testing import count_syncs

    with count_syncs() as c:
        est.fit(X, target)
    blocks = est._grow_stats["node_blocks"] + est._grow_stats["redraws"]
    assert blocks >= est.max_depth_
    assert c.syncs <= blocks + 3, (dict(c.by_kind), blocks)
    assert c.syncs + c.uploads <= 3 * blocks + 3, (dict(c.by_kind), blocks)
    est.predict(X)
    with count_syncs() as c:
        est.predict(X)
    assert c.syncs == 0 and c.uploads == 0, dict(c.by_kind)


def test_fit_syncs_per_node_block_and_predict_uploads_nothing():
    """Under torch: one upload and one download per block of nodes searched
    together (two uploads for regression: the node means), a handful more per
    fit; prediction reuses the tree kept on the device."""
    pytest.importorskip("torch")
    import xpml

    X, y = _data("breast_cancer")
    with xpml.backend("torch"):
        for est, target in (
            (DecisionTreeClassifier(), y),
            (DecisionTreeRegressor(), X[:, 0] + y),
            (DecisionTreeRegressor(criterion="absolute_error", max_depth=6), X[:, 0]),
            (DecisionTreeClassifier(max_features=5, random_state=0), y),
        ):
            _check_fit_and_predict_budget(est, X, target)


def test_block_size_does_not_change_the_tree():
    """The work budget only regroups nodes into blocks: the tree is the same."""
    from xpml.tree import _grow

    X, y = _data("digits")
    ref = DecisionTreeClassifier(max_features=8, random_state=0).fit(X, y)
    small = _grow.work_elements
    _grow.work_elements = lambda dtype, xp: 1 << 12
    try:
        got = DecisionTreeClassifier(max_features=8, random_state=0).fit(X, y)
    finally:
        _grow.work_elements = small
    assert got._grow_stats["node_blocks"] > ref._grow_stats["node_blocks"]
    for k in ("feature", "threshold", "children_left", "value"):
        np.testing.assert_array_equal(
            getattr(got, f"tree_{k}_"), getattr(ref, f"tree_{k}_")
        )


def test_pruning_counts_validation_errors_on_every_path_node():
    """The per-node validation errors that drive pruning equal a direct count:
    points whose path passes through the node, misclassified by its majority."""
    X, y = _noisy(3)
    clf = DecisionTreeClassifier(max_depth=6).fit(X[:400], y[:400])
    Xv, yv = X[400:], y[400:]
    from xpml._backend import enter

    ctx, (Xd,) = enter(Xv)
    t = clf._host_tree()
    err = clf._errors_as_leaf(ctx, Xd, np.asarray(yv, dtype=np.int64), t)
    leaves = clf.apply(Xv)
    parent = {int(c): i for i, c in enumerate(t["children_left"]) if c >= 0}
    parent.update({int(c): i for i, c in enumerate(t["children_right"]) if c >= 0})
    direct = np.zeros(len(t["feature"]))
    for leaf, label in zip(leaves, yv):
        v = int(leaf)
        while True:
            direct[v] += np.argmax(t["value"][v]) != label
            if v == 0:
                break
            v = parent[v]
    np.testing.assert_array_equal(err, direct)


def test_unfitted_feature_importances_raise_not_fitted():
    from xpml.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        _ = DecisionTreeRegressor().feature_importances_


def _tie_free(seed=0, n=300, d=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, rng


def test_log_loss_criterion_is_sklearns_entropy_tree():
    X, rng = _tie_free(1)
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=len(X)) > 0.4).astype(int)
    y[X[:, 2] > 1.2] = 2
    for depth in (3, 4):
        ours = DecisionTreeClassifier(criterion="log_loss", max_depth=depth).fit(X, y)
        ent = DecisionTreeClassifier(criterion="entropy", max_depth=depth).fit(X, y)
        ref = SkTree(criterion="log_loss", max_depth=depth, random_state=0).fit(X, y)
        assert export_text(ours) == sk_export_text(ref) == export_text(ent)
        np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X))


def test_friedman_mse_gives_sklearns_tree():
    X, rng = _tie_free(2)
    target = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2] + 0.1 * rng.normal(size=len(X))
    # deeper, scikit-learn's uncentred sums break near-ties between features
    # differently (as for "squared_error"); friedman_mse is squared_error here
    for kw in ({"max_depth": 3}, {"max_depth": 2, "min_impurity_decrease": 0.05}):
        ours = DecisionTreeRegressor(criterion="friedman_mse", **kw).fit(X, target)
        mse = DecisionTreeRegressor(**{**kw, "max_depth": 4}).fit(X, target)
        deep = DecisionTreeRegressor(criterion="friedman_mse", **{**kw, "max_depth": 4})
        assert export_text(deep.fit(X, target)) == export_text(mse)
        with pytest.warns(FutureWarning):  # scikit-learn 1.9 deprecates the name
            ref = SkReg(criterion="friedman_mse", random_state=0, **kw)
            ref.fit(X, target)
        assert ours.node_count_ == ref.tree_.node_count
        assert export_text(ours, decimals=6) == sk_export_text(ref, decimals=6)
        np.testing.assert_allclose(ours.predict(X), ref.predict(X), rtol=1e-10)
        np.testing.assert_allclose(
            ours.feature_importances_, ref.feature_importances_, rtol=1e-9
        )


def test_new_criteria_are_validated_by_name():
    with pytest.raises(InvalidParameterError, match="criterion"):
        DecisionTreeClassifier(criterion="friedman_mse").fit([[0.0], [1.0]], [0, 1])
    with pytest.raises(InvalidParameterError, match="criterion"):
        DecisionTreeRegressor(criterion="log_loss").fit([[0.0], [1.0]], [0.0, 1.0])


def test_random_splitter_is_seeded_and_backend_independent():
    import array_api_strict as xps

    X, y = _data("breast_cancer")
    kw = dict(splitter="random", max_features=7, random_state=3)
    a = DecisionTreeClassifier(**kw).fit(X, y)
    b = DecisionTreeClassifier(**kw).fit(X, y)
    c = DecisionTreeClassifier(**kw).fit(xps.asarray(X), xps.asarray(y))
    other = DecisionTreeClassifier(**{**kw, "random_state": 4}).fit(X, y)
    assert export_text(a, decimals=8) == export_text(b, decimals=8)
    assert export_text(a, decimals=8) == export_text(c, decimals=8)
    assert export_text(a, decimals=8) != export_text(other, decimals=8)
    # thresholds are drawn, not midpoints: strictly inside the node's range
    best = DecisionTreeClassifier(max_features=7, random_state=3).fit(X, y)
    assert export_text(a) != export_text(best)


@pytest.mark.parametrize("name", ["breast_cancer", "digits"])
def test_random_splitter_accuracy_close_to_sklearn(name):
    """Exact equality is impossible (different random streams): test
    accuracy averaged over five stratified splits within 4 points."""
    X, y = _data(name)
    ours, ref = [], []
    for s in range(5):
        Xa, Xb, ya, yb = train_test_split(X, y, random_state=s, stratify=y)
        m = DecisionTreeClassifier(splitter="random", random_state=s).fit(Xa, ya)
        r = SkTree(splitter="random", random_state=s).fit(Xa, ya)
        ours.append(m.score(Xb, yb))
        ref.append(r.score(Xb, yb))
    assert np.mean(ours) > np.mean(ref) - 0.04
    Xr = X[:, 1:]
    reg = DecisionTreeRegressor(splitter="random", random_state=0, max_depth=6)
    sk = SkReg(splitter="random", random_state=0, max_depth=6)
    assert (
        reg.fit(Xr, X[:, 0]).score(Xr, X[:, 0])
        > sk.fit(Xr, X[:, 0]).score(Xr, X[:, 0]) - 0.1
    )


def test_splitter_is_validated_by_name():
    with pytest.raises(InvalidParameterError, match="splitter"):
        DecisionTreeClassifier(splitter="worst").fit([[0.0], [1.0]], [0, 1])


def test_max_leaf_nodes_gives_sklearns_best_first_tree():
    """Small limits: exactly scikit-learn's best-first tree on tie-free data
    (float32-exact X). Larger trees reach nodes where scikit-learn's
    uncentred sums break near-ties differently, as without the limit."""
    X, rng = _tie_free(0, n=400)
    X = X.astype(np.float32).astype(np.float64)
    y = (X[:, 0] + X[:, 1] ** 2 + 0.3 * rng.normal(size=len(X)) > 0.5).astype(int)
    t = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2]
    for k in (2, 5, 9):
        a = DecisionTreeClassifier(max_leaf_nodes=k).fit(X, y)
        b = SkTree(max_leaf_nodes=k, random_state=0).fit(X, y)
        assert export_text(a, decimals=6) == sk_export_text(b, decimals=6)
        np.testing.assert_allclose(
            a.feature_importances_, b.feature_importances_, rtol=1e-9
        )
        c = DecisionTreeRegressor(max_leaf_nodes=k, max_depth=5).fit(X, t)
        d = SkReg(max_leaf_nodes=k, max_depth=5, random_state=0).fit(X, t)
        assert export_text(c, decimals=6) == sk_export_text(d, decimals=6)
    big = DecisionTreeClassifier(max_leaf_nodes=20).fit(X, y)
    assert big.n_leaves_ == 20 and big.node_count_ == 39
    with pytest.raises(InvalidParameterError, match="max_leaf_nodes"):
        DecisionTreeClassifier(max_leaf_nodes=1).fit(X, y)


@pytest.mark.parametrize("frac", [0.01, 0.05, 0.2, 0.5])
def test_min_weight_fraction_leaf_as_sklearn(frac, xp):
    """Every leaf keeps at least ``frac`` of the total sample weight; on data
    without tied splits the trees predict as scikit-learn's (weighted)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 5))
    yr = X[:, 0] - 2 * X[:, 1] ** 2 + 0.1 * rng.normal(size=300)
    yc = (yr > np.median(yr)).astype(np.int64)
    w = rng.integers(1, 4, 300).astype(float)
    for ours, ref, y in (
        (DecisionTreeRegressor, SkReg, yr),
        (DecisionTreeClassifier, SkTree, yc),
    ):
        sk = ref(min_weight_fraction_leaf=frac, random_state=0)
        sk.fit(X, y, sample_weight=w)
        est = ours(min_weight_fraction_leaf=frac)
        est.fit(xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w))
        leaf = xp.to_numpy(est.tree_children_left_) == -1
        W = xp.to_numpy(est.tree_weighted_n_node_samples_)
        assert np.all(W[leaf] >= frac * w.sum() - 1e-9)
        assert est.node_count_ == sk.tree_.node_count
        got = xp.to_numpy(est.predict(xp.asarray(X)))
        np.testing.assert_allclose(got, sk.predict(X), rtol=1e-12)
    with pytest.raises(InvalidParameterError, match="min_weight_fraction_leaf"):
        DecisionTreeClassifier(min_weight_fraction_leaf=0.6).fit(X, yc)


def _path_rows(P):
    """Per row, the visited node ids (ascending = root to leaf in both
    xpml's and scikit-learn's numbering), from a CSR or dense indicator."""
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P)
    return [np.nonzero(row)[0] for row in P]


@pytest.mark.parametrize(
    "Est,Ref", [(DecisionTreeClassifier, SkTree), (DecisionTreeRegressor, SkReg)]
)
def test_decision_path_as_sklearn(Est, Ref, xp):
    """Same paths as scikit-learn's tree: per row the visited nodes (root to
    leaf, ending in ``apply``'s leaf) hold the same training samples (counts
    equal, values to 1e-12; equal partitions stand for ties between features
    that the two libraries may break differently; depth 4 keeps clear of
    deeper nodes' ties between different partitions); SciPy CSR (intp ones) on
    NumPy, a dense 0/1 array in the input's library elsewhere."""
    X, y = _noisy(3, n=300)
    y = y if Est is DecisionTreeClassifier else X[:, 0] - 2 * X[:, 1] ** 2 + 0.1 * y
    sk = Ref(max_depth=4, random_state=0).fit(X, y)
    est = Est(max_depth=4).fit(xp.asarray(X), xp.asarray(y))
    P = est.decision_path(xp.asarray(X))
    if xp.name.startswith("numpy"):
        assert P.format == "csr" and P.dtype == np.intp
    else:
        assert xp.is_native(P)
        P = xp.to_numpy(P)
        assert set(np.unique(P)) <= {0, 1}
    assert P.shape == (300, est.node_count_) == (300, sk.tree_.node_count)
    ours, ref = _path_rows(P), _path_rows(sk.decision_path(X))
    count = xp.to_numpy(est.tree_n_node_samples_)
    value = xp.to_numpy(est.tree_value_).reshape(est.node_count_, -1)
    sk_value = sk.tree_.value.reshape(sk.tree_.node_count, -1)
    leaves = xp.to_numpy(est.apply(xp.asarray(X)))
    for i, (a, b) in enumerate(zip(ours, ref)):
        assert a[0] == 0 and a[-1] == leaves[i] and len(a) == len(b)
        np.testing.assert_array_equal(count[a], sk.tree_.n_node_samples[b])
        np.testing.assert_allclose(value[a], sk_value[b], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "Est,Ref,crit",
    [
        (DecisionTreeClassifier, SkTree, "gini"),
        (DecisionTreeClassifier, SkTree, "entropy"),
        (DecisionTreeRegressor, SkReg, "squared_error"),
    ],
)
def test_cost_complexity_pruning_path_as_sklearn(Est, Ref, crit, xp):
    """scikit-learn's weakest-link sequence: same alphas (1e-9 relative to the
    largest, 1e-15 absolute) and subtree impurities (1e-9 relative), weighted
    samples, on data without tied splits; alphas start at 0 and never
    decrease, the last impurity is the root's."""
    X, y = _noisy(4, n=300)
    y = y if Est is DecisionTreeClassifier else X[:, 0] * X[:, 1] + y
    w = np.random.default_rng(2).integers(1, 4, len(y)).astype(float)
    kw = dict(criterion=crit, min_samples_leaf=3)
    ref = Ref(random_state=0, **kw).cost_complexity_pruning_path(X, y, w)
    got = Est(**kw).cost_complexity_pruning_path(
        xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w)
    )
    assert got.ccp_alphas is got["ccp_alphas"]
    assert got.ccp_alphas.shape == ref.ccp_alphas.shape and len(ref.ccp_alphas) > 5
    assert got.ccp_alphas[0] == 0 and np.all(np.diff(got.ccp_alphas) >= -1e-15)
    scale = ref.ccp_alphas.max()
    np.testing.assert_allclose(
        got.ccp_alphas, ref.ccp_alphas, rtol=1e-9, atol=1e-9 * scale
    )
    np.testing.assert_allclose(got.impurities, ref.impurities, rtol=1e-9)


@pytest.mark.parametrize(
    "kw", [dict(max_depth=3), dict(max_depth=6, min_samples_leaf=5)]
)
def test_poisson_criterion_as_sklearn(kw, xp):
    """criterion="poisson": the same tree as scikit-learn's on count data
    with weights (node count equal, predictions and node impurities, the
    half Poisson deviance, to 1e-12 / 1e-10 relative); deeper unlimited
    trees meet ties between equal integer-target splits, left out."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 5))
    y = rng.poisson(np.exp(0.5 * X[:, 0] - 0.3 * X[:, 1])).astype(float)
    w = rng.integers(1, 4, 400).astype(float)
    sk = SkReg(criterion="poisson", random_state=0, **kw).fit(X, y, w)
    est = DecisionTreeRegressor(criterion="poisson", **kw)
    est.fit(xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w))
    assert est.node_count_ == sk.tree_.node_count
    got = xp.to_numpy(est.predict(xp.asarray(X)))
    np.testing.assert_allclose(got, sk.predict(X), rtol=1e-12)
    imp = np.sort(xp.to_numpy(est.tree_impurity_))
    np.testing.assert_allclose(imp, np.sort(sk.tree_.impurity), rtol=1e-10, atol=1e-12)
    ref = SkReg(criterion="poisson", random_state=0, **kw)
    path = DecisionTreeRegressor(criterion="poisson", **kw)
    a, b = (
        ref.cost_complexity_pruning_path(X, y),
        path.cost_complexity_pruning_path(X, y),
    )
    np.testing.assert_allclose(b.impurities, a.impurities, rtol=1e-9)


def test_poisson_rejects_what_sklearn_rejects():
    X = np.arange(8.0).reshape(-1, 1)
    y = np.array([0.0, 1.0, 2.0, 0.0, 3.0, 1.0, 0.0, 2.0])
    with pytest.raises(ValueError, match="Some value\\(s\\) of y are negative"):
        DecisionTreeRegressor(criterion="poisson").fit(X, y - 1)
    with pytest.raises(ValueError, match="Sum of y is not positive"):
        DecisionTreeRegressor(criterion="poisson").fit(X, np.zeros(8))
    # a child of mean 0 is never made (its deviance would be infinite)
    est = DecisionTreeRegressor(criterion="poisson").fit(X, y)
    leaf = est.tree_children_left_ < 0
    assert np.all(est.tree_value_[leaf] > 0)
    sk = SkReg(criterion="poisson", random_state=0).fit(X, y)
    np.testing.assert_allclose(est.predict(X), sk.predict(X), rtol=1e-12)


def _assert_same_tree(sk, est, X, xp, *, tol=1e-12):
    """Walk both trees from the root (scikit-learn numbers nodes depth-first,
    xpml breadth-first) with the training rows ``X``: every split sends the
    same rows left, on the same feature and threshold (``tol``) unless
    another feature splits those rows alike (a tie scikit-learn breaks by
    its random feature order); same values (``tol`` relative) and
    impurities (1e-10 relative, 1e-12 absolute)."""
    t = sk.tree_
    got = {
        k: xp.to_numpy(getattr(est, f"tree_{k}_"))
        for k in ("feature", "threshold", "value", "impurity")
    }
    kids = [xp.to_numpy(getattr(est, f"tree_children_{s}_")) for s in ("left", "right")]
    assert est.node_count_ == t.node_count
    stack = [(0, 0, np.arange(len(X)))]
    while stack:
        i, j, rows = stack.pop()
        f, g = t.feature[i], got["feature"][j]
        assert (f < 0) == (g < 0), (i, j)
        np.testing.assert_allclose(got["value"][j], t.value[i, 0, 0], rtol=tol)
        np.testing.assert_allclose(
            got["impurity"][j], t.impurity[i], rtol=1e-10, atol=1e-12
        )
        if f < 0:
            continue
        go = X[rows, f] <= t.threshold[i]
        np.testing.assert_array_equal(X[rows, g] <= got["threshold"][j], go)
        if g == f:
            assert abs(got["threshold"][j] - t.threshold[i]) <= tol, (i, j)
        stack.append((t.children_left[i], kids[0][j], rows[go]))
        stack.append((t.children_right[i], kids[1][j], rows[~go]))


@pytest.mark.parametrize(
    "kw",
    [dict(max_depth=3), dict(max_depth=5, min_samples_leaf=3)],
)
def test_absolute_error_criterion_as_sklearn(kw, xp):
    """criterion="absolute_error", weighted: scikit-learn's tree node by node
    (features, thresholds to 1e-12, leaf weighted medians to 1e-12 relative,
    impurities, the weighted mean absolute error about the median, to 1e-10)
    and its predictions. Continuous weights: no two splits tie (unweighted
    absolute errors tie exactly between neighbouring positions, and each
    library then keeps the one its rounding favours); X float32-exact, as
    scikit-learn casts it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(160, 5)).astype(np.float32).astype(np.float64)
    y = X[:, 0] - 2 * X[:, 1] ** 2 + 0.3 * rng.normal(size=160)
    w = rng.uniform(0.5, 2.0, 160)
    sk = SkReg(criterion="absolute_error", random_state=0, **kw).fit(X, y, w)
    est = DecisionTreeRegressor(criterion="absolute_error", **kw)
    est.fit(xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w))
    _assert_same_tree(sk, est, X, xp)
    got = xp.to_numpy(est.predict(xp.asarray(X)))
    np.testing.assert_allclose(got, sk.predict(X), rtol=1e-12)


def test_absolute_error_unweighted_steps_as_sklearn(xp):
    """Unweighted, on steps that make every split of a depth-3 tree
    unambiguous: scikit-learn's tree, including its median of an even number
    of samples (the mean of the two middle ones)."""
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(64, 3)).astype(np.float32).astype(np.float64)
    y = 8.0 * (X[:, 0] > 0) + 3.0 * (X[:, 1] > 0.3) + 0.1 * rng.normal(size=64)
    sk = SkReg(criterion="absolute_error", max_depth=2).fit(X, y)
    est = DecisionTreeRegressor(criterion="absolute_error", max_depth=2)
    est.fit(xp.asarray(X), xp.asarray(y))
    _assert_same_tree(sk, est, X, xp)
    assert np.any(sk.tree_.n_node_samples[sk.tree_.children_left < 0] % 2 == 0)


@pytest.mark.parametrize(
    "y,w",
    [
        ([1, 2, 3, 4], None),
        ([1, 2, 3, 4], [1, 2, 2, 1]),
        ([1, 2, 3, 4], [1, 1, 1, 3]),
        ([4, 1, 3, 2], [1, 1, 2, 0.5]),
        ([1, 1, 2, 2], None),
        ([2, 1, 2, 3], None),
        ([5.0], None),
    ],
)
def test_absolute_error_leaf_is_sklearns_weighted_median(y, w, xp):
    """A single leaf: scikit-learn's weighted median (the midpoint when the
    lower values weigh exactly half) and mean absolute error about it."""
    y = np.asarray(y, dtype=float)
    X = np.zeros((len(y), 1))
    sk = SkReg(criterion="absolute_error").fit(X, y, w)
    est = DecisionTreeRegressor(criterion="absolute_error")
    ws = None if w is None else xp.asarray(np.asarray(w, dtype=float))
    est.fit(xp.asarray(X), xp.asarray(y), sample_weight=ws)
    assert est.node_count_ == 1
    assert float(xp.to_numpy(est.tree_value_)[0]) == sk.tree_.value[0, 0, 0]
    np.testing.assert_allclose(
        xp.to_numpy(est.tree_impurity_), sk.tree_.impurity, rtol=1e-15
    )


def test_absolute_error_keeps_the_first_of_tied_splits():
    """scikit-learn's toy (its test_mae): two splits with equal weighted
    absolute errors up to rounding; the first is kept, as scikit-learn."""
    X, y = [[3], [5], [3], [8], [5]], [6, 7, 3, 4, 3]
    est = DecisionTreeRegressor(criterion="absolute_error", max_leaf_nodes=2)
    est.fit(X, y, sample_weight=[0.6, 0.3, 0.1, 1.0, 0.3])
    np.testing.assert_allclose(est.tree_impurity_, [2.5 / 2.3, 0.3 / 0.7, 1.2 / 1.6])
    np.testing.assert_array_equal(est.tree_value_, [4.0, 6.0, 4.0])
    est.fit(X, y)
    np.testing.assert_array_equal(est.tree_impurity_, [1.4, 1.5, 4.0 / 3.0])
    np.testing.assert_array_equal(est.tree_value_, [4.0, 4.5, 4.0])


def test_absolute_error_pruning_as_sklearn():
    """cost_complexity_pruning_path and ccp_alpha with absolute_error: the
    path of the absolute-error impurities (1e-9 relative) and the pruned
    tree (weighted data as above)."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 4)).astype(np.float32).astype(np.float64)
    y = X[:, 0] * X[:, 1] + 0.5 * rng.normal(size=120)
    w = rng.uniform(0.5, 2.0, 120)
    kw = dict(criterion="absolute_error", min_samples_leaf=3)
    ref = SkReg(random_state=0, **kw).cost_complexity_pruning_path(X, y, w)
    got = DecisionTreeRegressor(**kw).cost_complexity_pruning_path(X, y, w)
    assert len(ref.ccp_alphas) > 5
    scale = ref.ccp_alphas.max()
    np.testing.assert_allclose(
        got.ccp_alphas, ref.ccp_alphas, rtol=1e-9, atol=1e-9 * scale
    )
    np.testing.assert_allclose(got.impurities, ref.impurities, rtol=1e-9)
    a = (ref.ccp_alphas[-3] + ref.ccp_alphas[-2]) / 2
    sk = SkReg(random_state=0, ccp_alpha=a, **kw).fit(X, y, w)
    est = DecisionTreeRegressor(ccp_alpha=a, **kw).fit(X, y, w)
    assert 1 < est.node_count_ == sk.tree_.node_count
    np.testing.assert_allclose(est.predict(X), sk.predict(X), rtol=1e-12)


@pytest.mark.parametrize(
    "Est,Ref", [(DecisionTreeClassifier, SkTree), (DecisionTreeRegressor, SkReg)]
)
def test_ccp_alpha_prunes_as_sklearn(Est, Ref, xp):
    """(Weighted data, as the path test: same unpruned trees.) ccp_alpha between two consecutive alphas of the path gives
    scikit-learn's pruned tree (node count and sorted node impurities equal
    to 1e-12; not predictions: equal-score splits on different features,
    tied, send a few points to other leaves in both libraries' trees);
    alphas exactly on the path are left out (equal up to rounding, either
    side of scikit-learn's ``ccp_alpha < alpha_eff`` test); 0 prunes nothing."""
    X, y = _noisy(4, n=300)
    y = y if Est is DecisionTreeClassifier else X[:, 0] - 2 * X[:, 1] ** 2 + 0.1 * y
    w = np.random.default_rng(2).integers(1, 4, len(y)).astype(float)
    path = Ref(random_state=0, min_samples_leaf=3).cost_complexity_pruning_path(X, y, w)
    lo, hi = path.ccp_alphas[:-1], path.ccp_alphas[1:]
    mid = ((lo + hi) / 2)[hi - lo > 1e-9 * hi.max()]  # off the path's (tied) alphas
    for a in mid[:: max(1, len(mid) // 6)]:
        sk = Ref(random_state=0, min_samples_leaf=3, ccp_alpha=a).fit(X, y, w)
        est = Est(min_samples_leaf=3, ccp_alpha=a)
        est.fit(xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w))
        assert est.node_count_ == sk.tree_.node_count
        imp = np.sort(xp.to_numpy(est.tree_impurity_))
        np.testing.assert_allclose(imp, np.sort(sk.tree_.impurity), atol=1e-12)
    full = Est(min_samples_leaf=3).fit(X, y)
    assert (
        Est(min_samples_leaf=3, ccp_alpha=0.0).fit(X, y).node_count_ == full.node_count_
    )
    with pytest.raises(InvalidParameterError, match="ccp_alpha"):
        Est(ccp_alpha=-1.0).fit(X, y)


def test_tree_namespace_routes_like_the_estimator():
    """``tree_.apply`` / ``tree_.decision_path`` (scikit-learn's Tree
    methods) give the estimator's own results."""
    X, y = _noisy(6, n=120)
    est = DecisionTreeClassifier(max_depth=3).fit(X, y)
    np.testing.assert_array_equal(est.tree_.apply(X), est.apply(X))
    assert (est.tree_.decision_path(X) != est.decision_path(X)).nnz == 0
    assert est.tree_.decision_path(X).nnz > len(X)


# ------------------------------------------------------------- multi-output
def _multi_output_data(seed=1, n=300):
    """X (float32-exact, as scikit-learn stores it, so thresholds agree to
    the last bit), three noisy class outputs with 2, 3 and 4 classes (codes
    0..K-1), two real outputs, integer weights. Noise keeps the shallow
    trees free of tied splits."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32).astype(np.float64)
    e = 0.5 * rng.normal(size=(n, 3))
    Y = np.stack(
        [
            (X[:, 0] + 0.5 * X[:, 1] ** 2 + e[:, 0] > 0.4).astype(np.int64),
            np.digitize(X[:, 2] - 0.5 * X[:, 3] + e[:, 1], [-0.5, 0.5]),
            np.digitize(X[:, 4] + X[:, 0] + e[:, 2], [-1.0, 0.0, 1.0]),
        ],
        axis=1,
    )
    R = np.stack([2 * X[:, 0] + X[:, 1] ** 2, np.sin(X[:, 2]) + X[:, 3]], axis=1)
    R = R + 0.1 * rng.normal(size=(n, 2))
    w = rng.integers(1, 4, n).astype(float)
    return X, Y, R, w


def _same_splits(est, ref):
    """Same internal nodes: (feature, threshold) pairs equal, thresholds to
    1e-12 (node numbering differs: breadth- versus depth-first)."""
    f = np.asarray(to_numpy(est.tree_feature_))
    t = np.asarray(to_numpy(est.tree_threshold_))
    ours = sorted(zip(f[f >= 0].tolist(), t[f >= 0].tolist()))
    rf, rt = ref.tree_.feature, ref.tree_.threshold
    theirs = sorted(zip(rf[rf >= 0].tolist(), rt[rf >= 0].tolist()))
    assert [a for a, _ in ours] == [a for a, _ in theirs]
    np.testing.assert_allclose([b for _, b in ours], [b for _, b in theirs], atol=1e-12)


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
@pytest.mark.parametrize("outputs", [[0, 1], [0, 1, 2]])
def test_multi_output_classifier_as_sklearn(criterion, outputs, xp):
    """2-D y: the same tree as scikit-learn's (impurity the mean of the
    outputs' impurities), with and without weights; classes_ a list,
    n_classes_ an array, predict_proba a list of (n, K_o) arrays, predict
    (n, n_outputs), tree_value_ (node_count, n_outputs, max K)."""
    X, Y, _, w = _multi_output_data()
    Y = Y[:, outputs]
    for sw in (None, w):
        ref = SkTree(criterion=criterion, max_depth=3, random_state=0)
        ref.fit(X, Y, sample_weight=sw)
        est = DecisionTreeClassifier(criterion=criterion, max_depth=3).fit(
            xp.asarray(X),
            xp.asarray(Y),
            sample_weight=None if sw is None else xp.asarray(sw),
        )
        assert (
            est.n_outputs_ == len(outputs) and est.node_count_ == ref.tree_.node_count
        )
        np.testing.assert_array_equal(est.n_classes_, ref.n_classes_)
        for c, rc in zip(est.classes_, ref.classes_):
            np.testing.assert_array_equal(xp.to_numpy(c), rc)
        _same_splits(est, ref)
        assert tuple(est.tree_value_.shape) == ref.tree_.value.shape
        np.testing.assert_allclose(
            np.sort(xp.to_numpy(est.tree_impurity_)),
            np.sort(ref.tree_.impurity),
            rtol=1e-12,
            atol=1e-15,
        )
        pred = est.predict(xp.asarray(X))
        assert xp.is_native(pred)
        np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(X))
        P, RP = est.predict_proba(xp.asarray(X)), ref.predict_proba(X)
        assert isinstance(P, list) and len(P) == len(RP)
        for p, rp in zip(P, RP):
            np.testing.assert_allclose(xp.to_numpy(p), rp, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(
            xp.to_numpy(est.feature_importances_),
            ref.feature_importances_,
            rtol=1e-10,
        )


def test_multi_output_string_labels_and_tree_tools():
    """String labels per output; predict_log_proba a list; apply,
    decision_path, max_leaf_nodes, ccp_alpha and the pruning path as
    scikit-learn's; score as scikit-learn's accuracy_score (0/1 outputs:
    subset accuracy; other multi-output labels refused); prune and
    export_text refuse a multi-output tree by name."""
    X, Y, _, _ = _multi_output_data(2)
    S = np.stack(
        [np.array(["no", "yes"])[Y[:, 0]], np.array(["a", "b", "c"])[Y[:, 1]]], axis=1
    )
    est = DecisionTreeClassifier(max_depth=3).fit(X, S)
    ref = SkTree(max_depth=3, random_state=0).fit(X, S)
    np.testing.assert_array_equal(est.predict(X), ref.predict(X))
    with np.errstate(divide="ignore"):  # log(0) = -inf, as scikit-learn
        logs = est.predict_log_proba(X)
    for p, rp in zip(logs, ref.predict_proba(X)):
        np.testing.assert_allclose(np.exp(p), rp, rtol=1e-12)
    leaf_value = est.tree_value_[est.apply(X)]
    np.testing.assert_allclose(leaf_value, ref.tree_.value[ref.apply(X)], rtol=1e-12)
    assert est.decision_path(X).sum() == ref.decision_path(X).sum()
    for kw in ({"max_leaf_nodes": 6}, {"ccp_alpha": 0.01}):
        a = DecisionTreeClassifier(**kw).fit(X, S)
        b = SkTree(random_state=0, **kw).fit(X, S)
        assert a.node_count_ == b.tree_.node_count
        np.testing.assert_array_equal(a.predict(X), b.predict(X))
    got = DecisionTreeClassifier(max_depth=4).cost_complexity_pruning_path(X, S)
    want = SkTree(max_depth=4, random_state=0).cost_complexity_pruning_path(X, S)
    np.testing.assert_allclose(got.ccp_alphas, want.ccp_alphas, atol=1e-12)
    np.testing.assert_allclose(got.impurities, want.impurities, atol=1e-12)
    B = np.concatenate([Y[:, :1], (X[:, 1:2] > 0).astype(int)], axis=1)
    sb = SkTree(max_depth=3, random_state=0).fit(X, B)
    assert DecisionTreeClassifier(max_depth=3).fit(X, B).score(X, B) == sb.score(X, B)
    with pytest.raises(ValueError, match="multiclass-multioutput"):
        est.score(X, S)
    with pytest.raises(ValueError, match="prune supports single-output"):
        est.prune(X, S)
    with pytest.raises(ValueError, match="export_text supports single-output"):
        export_text(est)


@pytest.mark.parametrize("criterion", ["squared_error", "poisson"])
def test_multi_output_regressor_as_sklearn(criterion, xp):
    """2-D y: impurity the mean of the outputs' (weighted) variances or half
    Poisson deviances, leaf values per-output weighted means; predict
    (n, n_outputs); score the uniformly averaged R²; the same tree as
    scikit-learn's."""
    X, _, R, w = _multi_output_data(3)
    y = np.exp(R / 3) if criterion == "poisson" else R
    for sw in (None, w):
        # children of 5 samples or more: no tied splits of tiny nodes
        kw = dict(criterion=criterion, max_depth=3, min_samples_leaf=5)
        ref = SkReg(random_state=0, **kw).fit(X, y, sample_weight=sw)
        est = DecisionTreeRegressor(**kw).fit(
            xp.asarray(X),
            xp.asarray(y),
            sample_weight=None if sw is None else xp.asarray(sw),
        )
        assert est.n_outputs_ == 2 and est.node_count_ == ref.tree_.node_count
        _same_splits(est, ref)
        assert tuple(est.tree_value_.shape) == ref.tree_.value.shape
        got = est.predict(xp.asarray(X))
        assert xp.is_native(got) and tuple(got.shape) == (len(X), 2)
        np.testing.assert_allclose(xp.to_numpy(got), ref.predict(X), rtol=1e-12)
        np.testing.assert_allclose(
            np.sort(xp.to_numpy(est.tree_impurity_)),
            np.sort(ref.tree_.impurity),
            rtol=1e-10,
            atol=1e-14,
        )
        np.testing.assert_allclose(
            xp.to_numpy(est.feature_importances_), ref.feature_importances_, rtol=1e-9
        )
    score = est.score(xp.asarray(X), xp.asarray(y))
    assert score == pytest.approx(ref.score(X, y), rel=1e-12)


def test_column_y_is_one_output_without_warning():
    """y of shape (n, 1): one output, as scikit-learn's trees (no warning,
    1-D predictions, the 1-D fit's arrays)."""
    import warnings

    X, Y, R, _ = _multi_output_data(4, n=120)
    for Est, y in ((DecisionTreeClassifier, Y[:, 1]), (DecisionTreeRegressor, R[:, 0])):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            col = Est(max_depth=3).fit(X, y[:, None])
        flat = Est(max_depth=3).fit(X, y)
        assert col.n_outputs_ == flat.n_outputs_ == 1
        assert col.predict(X).shape == (len(X),)
        np.testing.assert_array_equal(col.tree_value_, flat.tree_value_)
        np.testing.assert_array_equal(col.tree_threshold_, flat.tree_threshold_)
    assert DecisionTreeClassifier().fit(X, Y[:, 1]).n_classes_ == 3


def test_multi_output_fit_syncs_per_node_block():
    """Multi-output adds channels to the same node-block passes: under torch
    the fit keeps the single-output budget (one upload and one download per
    block, a handful more per fit) and prediction uploads nothing."""
    pytest.importorskip("torch")
    import xpml

    X, Y, R, _ = _multi_output_data(5, n=200)
    with xpml.backend("torch"):
        for est, target in (
            (DecisionTreeClassifier(), Y),
            (DecisionTreeRegressor(), R),
            (DecisionTreeClassifier(max_features=2, random_state=0), Y),
        ):
            _check_fit_and_predict_budget(est, X, target)


def test_absolute_error_with_2d_y_is_refused_clearly():
    """absolute_error grows single-output trees only: a 2-D y gets an error
    naming the criterion, the shape and the alternatives."""
    X = np.arange(20.0).reshape(10, 2)
    y = np.stack([np.arange(10.0), np.arange(10.0)[::-1]], axis=1)
    with pytest.raises(ValueError, match=r"absolute_error.*\(10, 2\)"):
        DecisionTreeRegressor(criterion="absolute_error").fit(X, y)


# ------------------------------------------------------------ missing values
def _missing_data(seed, n=120, frac=0.2, d=3):
    """Distinct multiples of 1/8 per feature (float32-exact, as scikit-learn
    stores X, so thresholds compare to 1e-12), NaN at ``frac`` of the
    entries; a classification and a regression target that use the
    missingness too."""
    rng = np.random.default_rng(seed)
    X = np.stack([rng.permutation(n) / 8.0 for _ in range(d)], axis=1)
    score = X[:, 0] - 0.5 * X[:, 1]
    nan = rng.random(X.shape) < frac
    X[nan] = np.nan
    score = np.where(nan[:, 0], 4.0, score) + 2.0 * nan[:, 1]
    yc = (score > np.median(score)).astype(np.int64)
    yr = score + 0.25 * rng.normal(size=n)
    return X, yc, yr


def _same_tree(est, sk, xp):
    """Walk xpml's (breadth-first numbered) and scikit-learn's (depth-first)
    trees together: same node counts, values (1e-12), split features,
    thresholds (1e-12) and missing-value directions at every node."""
    t = {
        k: xp.to_numpy(getattr(est.tree_, k))
        for k in (
            "feature",
            "threshold",
            "children_left",
            "children_right",
            "missing_go_to_left",
            "n_node_samples",
            "value",
        )
    }
    s = sk.tree_
    assert est.node_count_ == s.node_count
    value = t["value"].reshape(est.node_count_, -1)
    sv = s.value.reshape(s.node_count, -1)
    stack = [(0, 0)]
    while stack:
        a, b = stack.pop()
        assert t["n_node_samples"][a] == s.n_node_samples[b]
        np.testing.assert_allclose(value[a], sv[b], rtol=1e-12, atol=1e-12)
        assert (t["children_left"][a] < 0) == (s.children_left[b] < 0)
        if s.children_left[b] < 0:
            continue
        assert t["feature"][a] == s.feature[b]
        np.testing.assert_allclose(t["threshold"][a], s.threshold[b], atol=1e-12)
        assert bool(t["missing_go_to_left"][a]) == bool(s.missing_go_to_left[b])
        stack += [(t["children_left"][a], s.children_left[b])]
        stack += [(t["children_right"][a], s.children_right[b])]


@pytest.mark.parametrize(
    "Est,Ref", [(DecisionTreeClassifier, SkTree), (DecisionTreeRegressor, SkReg)]
)
@pytest.mark.parametrize("weighted", [False, True])
def test_missing_values_give_sklearns_tree(Est, Ref, weighted, xp):
    """NaN in X at fit and predict: scikit-learn's tree (see _same_tree:
    both placements of the missing values scored at every threshold, and the
    "non-missing | missing" split of threshold +inf) and predictions (1e-12);
    depth 4 and leaves of 5 keep clear of ties between features (equal
    partitions of small nodes), that the two libraries break differently."""
    X, yc, yr = _missing_data(2)
    y = yc if Est is DecisionTreeClassifier else yr
    w = np.random.default_rng(1).integers(1, 4, len(y)).astype(float)
    w = w if weighted else None
    sk = Ref(max_depth=4, min_samples_leaf=5, random_state=0)
    sk.fit(X, y, sample_weight=w)
    est = Est(max_depth=4, min_samples_leaf=5).fit(
        xp.asarray(X), xp.asarray(y), sample_weight=None if w is None else xp.asarray(w)
    )
    _same_tree(est, sk, xp)
    assert 0 < sk.tree_.missing_go_to_left.sum()  # the test sees both directions
    Xt, _, _ = _missing_data(5, n=200, frac=0.3)
    got = est.predict_proba if Est is DecisionTreeClassifier else est.predict
    ref = sk.predict_proba if Est is DecisionTreeClassifier else sk.predict
    np.testing.assert_allclose(xp.to_numpy(got(xp.asarray(Xt))), ref(Xt), rtol=1e-12)
    assert xp.is_native(got(xp.asarray(Xt)))


def test_nan_only_at_predict_goes_to_the_larger_child(xp):
    """A tree fitted without NaN sends a NaN to the child that held more
    training samples (scikit-learn's rule): the same directions, leaves'
    values and predictions as scikit-learn's."""
    X, yc, yr = _missing_data(2, frac=0.0)
    Xt, _, _ = _missing_data(3, n=200, frac=0.4)
    for Est, Ref, y in (
        (DecisionTreeClassifier, SkTree, yc),
        (DecisionTreeRegressor, SkReg, yr),
    ):
        sk = Ref(max_depth=4, random_state=0).fit(X, y)
        est = Est(max_depth=4).fit(xp.asarray(X), xp.asarray(y))
        _same_tree(est, sk, xp)
        got = xp.to_numpy(est.predict(xp.asarray(Xt)))
        np.testing.assert_allclose(got, sk.predict(Xt), rtol=1e-12)
        t = est.tree_
        inner = xp.to_numpy(t.children_left) >= 0
        n = xp.to_numpy(t.n_node_samples)
        left = n[xp.to_numpy(t.children_left)[inner]]
        right = n[xp.to_numpy(t.children_right)[inner]]
        mgl = xp.to_numpy(t.missing_go_to_left)[inner].astype(bool)
        np.testing.assert_array_equal(mgl, left > right)
        assert mgl.any() and not mgl.all()


def test_missing_versus_non_missing_split_and_all_nan_features():
    """The split "non-missing | missing" (threshold +inf, NaN right); a
    column entirely NaN is never split on; in the node where the other
    column is all NaN, only the remaining one splits. As scikit-learn."""
    n = 64
    x = np.arange(n) / 8.0
    X = np.stack([x, np.full(n, np.nan), x[::-1].copy()], axis=1)
    y = np.zeros(n, dtype=np.int64)
    X[::4, 0] = np.nan
    y[::4] = 1  # the missingness of column 0 alone decides the class
    sk = SkTree(random_state=0).fit(X, y)
    est = DecisionTreeClassifier().fit(X, y)
    _same_tree(est, sk, _NP)
    assert est.tree_feature_[0] == 0 and np.isinf(est.tree_threshold_[0])
    assert est.tree_missing_go_to_left_[0] == 0 and est.node_count_ == 3
    Xt = np.array([[np.nan, 0.0, 1.0], [1e6, 0.0, 1.0], [-1e6, np.nan, np.nan]])
    np.testing.assert_array_equal(est.predict(Xt), [1, 0, 0])
    # column 0 all NaN where column 2 is large: the right child splits on column 2
    X2 = np.stack([x, np.full(n, np.nan), x[::-1].copy()], axis=1)
    X2[x > 4, 0] = np.nan
    y2 = ((x > 2) & (x < 6)).astype(np.int64)
    sk = SkTree(random_state=0).fit(X2, y2)
    est = DecisionTreeClassifier().fit(X2, y2)
    _same_tree(est, sk, _NP)
    assert 1 not in set(est.tree_feature_.tolist())


class _NumpyLib:
    name = "numpy"

    @staticmethod
    def to_numpy(a):
        return np.asarray(a)


_NP = _NumpyLib()


def test_random_splitter_with_missing_values_routes_them_by_the_flag(xp):
    """splitter="random" with NaN: the structure follows xpml's own draws
    (not scikit-learn's generator), the same on every backend; every row,
    NaN or not, lands in the leaf a walk by (feature, threshold,
    missing_go_to_left) reaches, the training rows the leaves they were grown
    in; both directions are drawn."""
    X, yc, _ = _missing_data(4, n=200, frac=0.3)
    est = DecisionTreeClassifier(splitter="random", random_state=0)
    est.fit(xp.asarray(X), xp.asarray(yc))
    ref = DecisionTreeClassifier(splitter="random", random_state=0).fit(X, yc)
    t = {
        k: xp.to_numpy(getattr(est.tree_, k))
        for k in (
            "feature",
            "threshold",
            "children_left",
            "children_right",
            "missing_go_to_left",
        )
    }
    np.testing.assert_array_equal(t["feature"], ref.tree_feature_)
    np.testing.assert_array_equal(t["missing_go_to_left"], ref.tree_missing_go_to_left_)
    inner = t["children_left"] >= 0
    assert 0 < t["missing_go_to_left"][inner].sum() < inner.sum()
    Xt, _, _ = _missing_data(6, n=150, frac=0.4)
    want = np.zeros(len(Xt), dtype=np.int64)
    for i, row in enumerate(Xt):
        v = 0
        while t["children_left"][v] >= 0:
            x = row[t["feature"][v]]
            go_left = (
                t["missing_go_to_left"][v] if np.isnan(x) else x <= t["threshold"][v]
            )
            v = t["children_left"][v] if go_left else t["children_right"][v]
        want[i] = v
    np.testing.assert_array_equal(xp.to_numpy(est.apply(xp.asarray(Xt))), want)
    # the training rows (NaN included) reach the leaves the growth put them in
    seen = np.bincount(xp.to_numpy(est.apply(xp.asarray(X))), minlength=len(inner))
    n = xp.to_numpy(est.tree_.n_node_samples)
    np.testing.assert_array_equal(seen[~inner], n[~inner])


def test_missing_value_routing_fast_path_agrees_with_portable():
    """The NumPy routing fast path and the portable walk send NaN alike."""
    from xpml.tree._route import _route, _route_numpy, routing_table

    X, yc, _ = _missing_data(7, n=300, frac=0.3)
    t = DecisionTreeClassifier(max_depth=12).fit(X, yc)._host_tree()
    table = routing_table(
        t["feature"],
        t["threshold"],
        t["children_left"],
        t["children_right"],
        [t["max_depth"]],
        xp=np,
        missing_left=t["missing_go_to_left"].astype(bool),
    )
    a = _route(X, table, xp=np, missing=True, compact_every=2)
    b = _route_numpy(X, table, xp=np, missing=True, compact_every=2)
    np.testing.assert_array_equal(a, b)
    c = _route(X, table, xp=np)  # without the flag NaN always goes left
    assert (a != c).any()


def test_missing_values_accept_nan_refuse_inf(xp):
    """NaN is accepted in X (fit, predict, prune's X_val); infinity is
    refused with a message naming X; sample_weight stays finite-only."""
    X, yc, _ = _missing_data(8)
    est = DecisionTreeClassifier(max_depth=3).fit(xp.asarray(X), xp.asarray(yc))
    Xi = np.nan_to_num(X, nan=0.0)
    Xi[3, 1] = np.inf
    with pytest.raises(ValueError, match="X contains infinity.*NaN .*but not infinity"):
        DecisionTreeClassifier().fit(xp.asarray(Xi), xp.asarray(yc))
    with pytest.raises(ValueError, match="X contains infinity"):
        est.predict(xp.asarray(-Xi))
    with pytest.raises(ValueError, match="X_val contains infinity"):
        est.prune(xp.asarray(Xi), xp.asarray(yc))
    w = np.ones(len(yc))
    w[0] = np.nan
    with pytest.raises(ValueError, match="sample_weight"):
        DecisionTreeClassifier().fit(X, yc, sample_weight=w)
    import scipy.sparse as sp  # sparse X stays finite-only, as scikit-learn's

    with pytest.raises(ValueError, match="X contains NaN"):
        DecisionTreeRegressor().fit(sp.csr_matrix(X), yc * 1.0)


@pytest.mark.parametrize("criterion", ["gini", "entropy"])
def test_mirrored_missing_placements_tie_to_the_right(criterion):
    """One NaN in each class: sending the missing values left or right
    scores exactly the same; the right placement wins (scikit-learn searches
    it first), so a NaN predicts the right child's class."""
    X = np.array([[1, 2, 3, 5, np.nan, 10, 20, 30, 60, np.nan]]).T
    y = np.array([0] * 5 + [1] * 5)
    est = DecisionTreeClassifier(max_depth=1, criterion=criterion).fit(X, y)
    assert est.tree_missing_go_to_left_[0] == 0
    Xt = np.array([[np.nan, 2.3, 34.2]]).T
    np.testing.assert_array_equal(est.predict(Xt), [1, 0, 1])


def test_pruning_and_importances_with_missing_values():
    """With NaN in X: cost_complexity_pruning_path, ccp_alpha,
    max_leaf_nodes and feature_importances_ as scikit-learn's (1e-9 / 1e-12);
    prune never raises the validation error."""
    X, _, yr = _missing_data(9, n=160)
    sk = SkReg(random_state=0, min_samples_leaf=4)
    est = DecisionTreeRegressor(min_samples_leaf=4)
    a, b = (
        sk.cost_complexity_pruning_path(X, yr),
        est.cost_complexity_pruning_path(X, yr),
    )
    np.testing.assert_allclose(b.impurities, a.impurities, rtol=1e-9)
    np.testing.assert_allclose(b.ccp_alphas, a.ccp_alphas, rtol=1e-9, atol=1e-12)
    mid = (a.ccp_alphas[-4] + a.ccp_alphas[-3]) / 2
    for kw in (dict(ccp_alpha=mid), dict(max_leaf_nodes=6), dict(max_depth=3)):
        s = SkReg(random_state=0, min_samples_leaf=4, **kw).fit(X, yr)
        e = DecisionTreeRegressor(min_samples_leaf=4, **kw).fit(X, yr)
        _same_tree(e, s, _NP)
        np.testing.assert_allclose(
            e.feature_importances_, s.feature_importances_, rtol=1e-12, atol=1e-15
        )
    Xv, _, yv = _missing_data(10, n=100)
    full = DecisionTreeRegressor().fit(X, yr)
    before = np.sum((full.predict(Xv) - yv) ** 2)
    full.prune(Xv, yv)
    assert full.n_pruned_nodes_ > 0
    assert np.sum((full.predict(Xv) - yv) ** 2) <= before + 1e-9


def test_absolute_error_with_missing_values_is_refused_clearly():
    """absolute_error does not take NaN in X (the other criteria do): the
    error names the criterion and what to do."""
    X = np.arange(20.0).reshape(10, 2)
    X[3, 0] = np.nan
    with pytest.raises(ValueError, match="absolute_error.*missing values"):
        DecisionTreeRegressor(criterion="absolute_error").fit(X, np.arange(10.0))


def test_tree_fitted_before_missing_values_still_predicts_and_shows_tree_():
    """A tree fitted before ``tree_missing_go_to_left_`` existed (an older
    pickle: the attribute absent) still predicts, with NaN too, and its
    ``tree_`` view reports no missing-value directions."""
    rng = np.random.default_rng(0)
    X = rng.random((60, 3))
    y = (X[:, 0] > 0.5).astype(np.int64)
    old = DecisionTreeClassifier(random_state=0).fit(X, y)
    expected = old.predict(X)
    del old.tree_missing_go_to_left_
    old = pickle.loads(pickle.dumps(old))  # drops the cached device stack
    np.testing.assert_array_equal(old.predict(X), expected)
    assert not np.asarray(old.tree_.missing_go_to_left).any()
    assert old.tree_.node_count == old.node_count_


def test_split_search_fast_paths_are_bit_for_bit():
    """The NumPy split-search fast paths (Gini scores in reused buffers, the
    in-place masking and argmax) return the portable twins' values exactly,
    ties and weightless positions included, so trees do not depend on them."""
    import xpml.tree._grow as G

    rng = np.random.default_rng(3)
    for K in (2, 3, 5):
        y = rng.integers(0, K, (4, 3, 50))
        w = rng.uniform(0.1, 3.0, (4, 3, 50))
        w[..., :2] = 0.0  # weightless first entries: W_L = 0 there
        w[..., -5:] = 0.0  # padding
        cum = np.cumsum(np.stack([w * (y == k) for k in range(K - 1)]), axis=-1)
        wl = np.cumsum(w, axis=-1)
        wr = wl[..., -1:] - wl
        kw = dict(n_classes=K, gini=True, missing=False, xp=np)
        fast = G._class_scores_numpy(cum, wl, wr, **kw)
        slow = G._class_scores_portable(cum, wl, wr, **kw)
        np.testing.assert_array_equal(fast, slow)
        keys = np.sort(np.round(rng.random((4, 3, 50)), 1), axis=-1)
        lens = np.array([50, 45, 3, 1])
        score = np.round(fast, 1)  # many ties
        pick = dict(msl=2, gap=G.FEATURE_THRESHOLD, xp=np)
        want = G._best_position_portable(score.copy(), keys, lens, **pick)
        got = G._best_position_numpy(score.copy(), keys, lens, **pick)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)


def test_block_lengths_do_not_change_forest_trees(monkeypatch):
    """Nodes draw their feature subsets and join the table in one fixed order
    per level, so padding nodes to other block lengths changes no tree of a
    forest (nor its node numbering)."""
    from xpml.ensemble import RandomForestClassifier
    from xpml.tree import _grow

    X, y = _noisy(3, n=600)
    kw = dict(n_estimators=3, max_features=2, random_state=0)
    ref = RandomForestClassifier(**kw).fit(X, y)
    # every node padded to one length: blocks no longer follow the classes
    monkeypatch.setattr(_grow, "_block_len", lambda n: np.full_like(n, 1024))
    got = RandomForestClassifier(**kw).fit(X, y)
    for a, b in zip(ref.estimators_, got.estimators_, strict=True):
        for k in ("feature", "threshold", "children_left", "value"):
            np.testing.assert_array_equal(
                getattr(b, f"tree_{k}_"), getattr(a, f"tree_{k}_")
            )
