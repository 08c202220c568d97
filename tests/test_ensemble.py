"""Bagging, random forests and AdaBoost against scikit-learn and the maths.

Stated tolerances:
* Bagging: out-of-bag accuracy within 3 points of held-out accuracy
  (breast_cancer and digits, 50 trees; wine's 124 training points make the
  OOB estimate too noisy for 3 points).
* RandomForest(100 trees): test accuracy within 1.5 points of scikit-learn's
  RandomForestClassifier(n_estimators=100), each averaged over three
  stratified 70/30 splits with seeds 0, 1, 2.
* AdaBoost with stumps: the exponential loss falls every round and equals
  Π_t 2√(err_t(1−err_t)); the training error stays below it; β_t follows
  ½ ln((1−err_t)/err_t) exactly; test accuracy within 2 points of
  scikit-learn's AdaBoost (SAMME) with stumps.
"""

import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.ensemble import AdaBoostClassifier as SkAda
from sklearn.ensemble import RandomForestClassifier as SkForest
from sklearn.ensemble import RandomForestRegressor as SkForestReg
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier as SkTree

from xpml.ensemble import (
    AdaBoostClassifier,
    BaggingClassifier,
    BaggingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from xpml.linear_model import LinearRegression
from xpml.tree import DecisionTreeClassifier

LOADERS = {
    "breast_cancer": load_breast_cancer,
    "wine": load_wine,
    "digits": load_digits,
}
_CACHE = {}


def _split(name, seed):
    if name not in _CACHE:
        _CACHE[name] = LOADERS[name](return_X_y=True)
    X, y = _CACHE[name]
    return train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)


@pytest.mark.parametrize("name", ["breast_cancer", "digits"])
def test_bagging_oob_close_to_held_out(name):
    Xtr, Xte, ytr, yte = _split(name, 0)
    bag = BaggingClassifier(n_estimators=50, oob_score=True, random_state=0).fit(
        Xtr, ytr
    )
    assert abs(bag.oob_score_ - bag.score(Xte, yte)) <= 0.03
    P = bag.oob_decision_function_
    assert P.shape == (len(ytr), len(np.unique(ytr)))
    seen = ~np.isnan(P[:, 0])
    np.testing.assert_allclose(P[seen].sum(axis=1), 1.0)


@pytest.mark.parametrize("name", list(LOADERS))
def test_random_forest_accuracy_close_to_sklearn(name):
    ours, ref = [], []
    for seed in range(3):
        Xtr, Xte, ytr, yte = _split(name, seed)
        ours.append(
            RandomForestClassifier(100, random_state=seed).fit(Xtr, ytr).score(Xte, yte)
        )
        ref.append(SkForest(100, random_state=seed).fit(Xtr, ytr).score(Xte, yte))
    assert abs(np.mean(ours) - np.mean(ref)) <= 0.015, (np.mean(ours), np.mean(ref))


def test_random_forest_regressor_close_to_sklearn():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(600, 6))
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.normal(size=600)
    ours = RandomForestRegressor(
        50, max_features=1 / 3, random_state=0, oob_score=True
    ).fit(X[:400], y[:400])
    ref = SkForestReg(50, max_features=1 / 3, random_state=0).fit(X[:400], y[:400])
    r2, r2_ref = ours.score(X[400:], y[400:]), ref.score(X[400:], y[400:])
    assert abs(r2 - r2_ref) <= 0.03, (r2, r2_ref)
    assert abs(ours.oob_score_ - r2) <= 0.05
    assert all(t.max_features == 1 / 3 for t in ours.estimators_)
    # the default searches every feature, as scikit-learn's
    assert RandomForestRegressor().max_features == SkForestReg().max_features == 1.0
    full = RandomForestRegressor(50, random_state=0).fit(X[:400], y[:400])
    ref = SkForestReg(50, random_state=0).fit(X[:400], y[:400])
    assert abs(full.score(X[400:], y[400:]) - ref.score(X[400:], y[400:])) <= 0.03


def test_forest_uses_a_fresh_feature_subset_per_node():
    Xtr, _, ytr, _ = _split("breast_cancer", 0)
    rf = RandomForestClassifier(5, max_features=1, random_state=0).fit(Xtr, ytr)
    roots = {int(t.tree_feature_[0]) for t in rf.estimators_}
    inner = [
        np.asarray(t.tree_feature_)[np.asarray(t.tree_feature_) >= 0]
        for t in rf.estimators_
    ]
    assert len(roots) > 1 and all(len(set(f.tolist())) > 5 for f in inner)
    np.testing.assert_allclose(np.sum(rf.feature_importances_), 1.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda n_jobs: RandomForestClassifier(30, random_state=5, n_jobs=n_jobs),
        # the random splitter's draws follow the node blocks: its groups of
        # trees must not change with n_jobs
        lambda n_jobs: BaggingClassifier(
            DecisionTreeClassifier(splitter="random", max_features=2),
            n_estimators=30,
            random_state=5,
            n_jobs=n_jobs,
        ),
    ],
)
def test_forest_is_reproducible_and_independent_of_n_jobs(make):
    Xtr, Xte, ytr, _ = _split("wine", 1)
    a = make(None).fit(Xtr, ytr)
    b = make(4).fit(Xtr, ytr)
    np.testing.assert_array_equal(a.predict_proba(Xte), b.predict_proba(Xte))
    for ta, tb in zip(a.estimators_, b.estimators_):
        np.testing.assert_array_equal(ta.tree_threshold_, tb.tree_threshold_)


def test_members_are_usable_trees():
    Xtr, Xte, ytr, _ = _split("wine", 0)
    rf = RandomForestClassifier(7, random_state=0).fit(Xtr, ytr)
    P = np.mean([t.predict_proba(Xte) for t in rf.estimators_], axis=0)
    np.testing.assert_allclose(rf.predict_proba(Xte), P, rtol=1e-12)


def test_generic_members_through_sample_weight():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=200)
    bag = BaggingRegressor(
        LinearRegression(), n_estimators=8, oob_score=True, random_state=0
    ).fit(X, y)
    assert len(bag.estimators_) == 8 and bag.oob_score_ > 0.99
    coefs = np.stack([m.coef_ for m in bag.estimators_])
    np.testing.assert_allclose(coefs.mean(0), [1.0, -2.0, 0.5], atol=0.05)
    assert np.ptp(coefs[:, 0]) > 0  # different bootstrap samples


def test_ensembles_on_every_backend_give_numpy_results(xp):
    Xtr, Xte, ytr, _ = _split("wine", 2)
    for est in (
        RandomForestClassifier(10, random_state=0, oob_score=True),
        BaggingClassifier(n_estimators=5, random_state=1),
        AdaBoostClassifier(n_estimators=15),
    ):
        ref = est.fit(Xtr, ytr).predict_proba(Xte)
        got = type(est)(**est.get_params()).fit(xp.asarray(Xtr), xp.asarray(ytr))
        P = got.predict_proba(xp.asarray(Xte))
        assert xp.is_native(P)
        np.testing.assert_allclose(xp.to_numpy(P), ref, rtol=1e-10, atol=1e-12)
    yr = Xtr[:, 0] + ytr
    r1 = RandomForestRegressor(10, random_state=0).fit(Xtr, yr)
    r2 = RandomForestRegressor(10, random_state=0).fit(xp.asarray(Xtr), xp.asarray(yr))
    np.testing.assert_allclose(
        xp.to_numpy(r2.predict(xp.asarray(Xte))), r1.predict(Xte), rtol=1e-10
    )


def _binary_sign(y):
    return np.where(y == 1, 1.0, -1.0)


def test_adaboost_follows_the_formulas_and_lowers_the_exponential_loss():
    Xtr, _, ytr, _ = _split("breast_cancer", 0)
    ada = AdaBoostClassifier(n_estimators=40).fit(Xtr, ytr)
    err, beta = np.asarray(ada.estimator_errors_), np.asarray(ada.estimator_weights_)
    np.testing.assert_allclose(beta, 0.5 * np.log((1 - err) / err), rtol=1e-12)
    # replay the weights: err_t is member t's weighted error under them
    w = np.full(len(ytr), 1.0 / len(ytr))
    F = np.zeros(len(ytr))
    s = _binary_sign(ytr)
    losses, train_err = [], []
    for t, m in enumerate(ada.estimators_):
        miss = m.predict(Xtr) != ytr
        np.testing.assert_allclose(np.sum(w[miss]), err[t], rtol=1e-9)
        w = w * np.exp(np.where(miss, beta[t], -beta[t]))
        w /= w.sum()
        F += beta[t] * _binary_sign(m.predict(Xtr))
        losses.append(np.mean(np.exp(-s * F)))
        train_err.append(np.mean(np.sign(F) != s))
    Z = 2 * np.sqrt(err * (1 - err))
    np.testing.assert_allclose(losses, np.cumprod(Z), rtol=1e-9)
    assert np.all(np.diff(losses) < 0)  # the exponential-loss bound falls every round
    assert np.all(np.asarray(train_err) <= np.asarray(losses))
    staged = [np.mean(p != ytr) for p in ada.staged_predict(Xtr)]
    np.testing.assert_allclose(staged, train_err)
    assert staged[-1] < staged[0]


@pytest.mark.parametrize("name", list(LOADERS))
def test_adaboost_accuracy_close_to_sklearn(name):
    Xtr, Xte, ytr, yte = _split(name, 0)
    ours = AdaBoostClassifier(n_estimators=50).fit(Xtr, ytr)
    ref = SkAda(SkTree(max_depth=1), n_estimators=50, random_state=0).fit(Xtr, ytr)
    assert abs(ours.score(Xte, yte) - ref.score(Xte, yte)) <= 0.02
    if name == "breast_cancer":  # two classes: sklearn's SAMME vote is α = 2β
        n = len(ours.estimator_weights_)
        np.testing.assert_allclose(
            2 * np.asarray(ours.estimator_weights_),
            ref.estimator_weights_[:n],
            rtol=1e-8,
        )


def test_adaboost_edge_cases():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    ada = AdaBoostClassifier(n_estimators=10).fit(X, np.array([0, 0, 1, 1]))
    assert (
        len(ada.estimators_) == 1 and ada.estimator_errors_[0] == 0.0
    )  # err = 0: stop
    assert np.isfinite(ada.estimator_weights_[0])
    Xx = np.array([[0.0, 0.0], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="chance"):  # XOR: every stump has err = 1/2
        AdaBoostClassifier().fit(Xx, np.array([0, 0, 1, 1]))
    with pytest.raises(ValueError, match="bootstrap"):
        BaggingClassifier(bootstrap=False, oob_score=True).fit(
            X, np.array([0, 0, 1, 1])
        )


def test_progress_bar_option(capsys):
    Xtr, _, ytr, _ = _split("wine", 0)
    RandomForestClassifier(30, random_state=0, progress=True).fit(Xtr, ytr)
    AdaBoostClassifier(n_estimators=5, progress=True).fit(Xtr, ytr)
    err = capsys.readouterr().err
    assert "RandomForestClassifier" in err and "AdaBoostClassifier" in err


def test_trees_demo_runs(tmp_path, capsys):
    from xpml.demos import trees

    assert trees.main(["--quick", "--n-train", "200", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "reduced-error pruning" in out and "variance" in out


def test_without_joblib_fitting_is_sequential_and_identical(monkeypatch):
    Xtr, Xte, ytr, _ = _split("wine", 0)
    ref = (
        RandomForestClassifier(12, random_state=2, n_jobs=2)
        .fit(Xtr, ytr)
        .predict_proba(Xte)
    )
    monkeypatch.setitem(
        sys.modules, "joblib", None
    )  # import joblib now raises ImportError
    got = (
        RandomForestClassifier(12, random_state=2, n_jobs=2)
        .fit(Xtr, ytr)
        .predict_proba(Xte)
    )
    np.testing.assert_array_equal(got, ref)


def test_adaboost_with_shallow_trees_and_multiclass_votes():
    Xtr, Xte, ytr, yte = _split("wine", 0)
    ada = AdaBoostClassifier(DecisionTreeClassifier(max_depth=2), n_estimators=20).fit(
        Xtr, ytr
    )
    err, beta = np.asarray(ada.estimator_errors_), np.asarray(ada.estimator_weights_)
    # K = 3: SAMME's vote, which reduces to ½ ln((1−err)/err) for two classes
    np.testing.assert_allclose(
        beta, 0.5 * (np.log((1 - err) / err) + np.log(2.0)), rtol=1e-12
    )
    assert np.all(err < 2 / 3) and ada.score(Xte, yte) > 0.9
    P = ada.predict_proba(Xte)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_array_equal(ada.classes_[P.argmax(axis=1)], ada.predict(Xte))


# ------------------------------------------------------------------ issue 13
def _torch_backend():
    pytest.importorskip("torch")
    import xpml

    return xpml.backend("torch")


def test_forest_fit_syncs_per_node_block_and_predict_uploads_nothing():
    """Under torch: <= 3 host syncs + uploads per block of nodes searched
    together (forest fit), and prediction re-uploads no fitted array; all
    trees are walked in one batched traversal."""
    from xpml.testing import count_syncs
    from xpml.tree import _stack

    Xtr, Xte, ytr, _ = _split("breast_cancer", 0)
    with _torch_backend():
        with count_syncs() as c:
            rf = RandomForestClassifier(20, random_state=0).fit(Xtr, ytr)
        blocks = rf._grow_stats["node_blocks"]
        assert blocks >= max(t.max_depth_ for t in rf.estimators_)
        assert c.syncs + c.uploads <= 3 * blocks + 10, (dict(c.by_kind), blocks)
        calls = []
        walk = _stack.route
        _stack.route = lambda *a, **k: calls.append(1) or walk(*a, **k)
        try:
            with count_syncs() as c:
                P = rf.predict_proba(Xte)
        finally:
            _stack.route = walk
    assert c.syncs == 0 and c.uploads == 0, dict(c.by_kind)
    assert len(calls) == 1  # one walk for all 20 trees
    ref = np.mean([t.predict_proba(Xte) for t in rf.estimators_], axis=0)
    np.testing.assert_allclose(P, ref, rtol=1e-12)


@pytest.mark.parametrize("make", [BaggingRegressor, AdaBoostClassifier])
def test_ensemble_predict_uploads_no_fitted_array(make):
    from xpml.testing import count_syncs

    Xtr, Xte, ytr, _ = _split("wine", 0)
    with _torch_backend():
        est = make(n_estimators=6, random_state=0).fit(Xtr, ytr)
        est.predict(Xte)  # the first call may stack the trees on the device
        with count_syncs() as c:
            est.predict(Xte)
    assert c.uploads == 0 and c.by_kind["upload_fitted"] == 0, dict(c.by_kind)


# ------------------------------------------------------------------ issue 12
def test_forest_importances_sum_to_one_with_trees_without_a_split():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    y = np.zeros(60, dtype=int)
    y[:2] = 1  # most bootstrap samples hold one class: trees without a split
    rf = RandomForestClassifier(30, random_state=0).fit(X, y)
    split = [t.feature_importances_ for t in rf.estimators_ if t.node_count_ > 1]
    assert 0 < len(split) < 30
    ref = np.mean(split, axis=0)
    np.testing.assert_allclose(rf.feature_importances_, ref / ref.sum(), rtol=1e-12)
    np.testing.assert_allclose(np.sum(rf.feature_importances_), 1.0)


@pytest.mark.parametrize(
    "est", [RandomForestClassifier(3), BaggingRegressor(), AdaBoostClassifier()]
)
def test_unfitted_feature_importances_raise_not_fitted(est):
    from xpml.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        _ = est.feature_importances_
    assert not hasattr(DecisionTreeClassifier(), "feature_importances_")


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
def test_adaboost_decision_function_is_sklearns_samme(name):
    """Same stumps as scikit-learn (checked through the votes), hence the same
    SAMME scores (rows summing to 0) and probabilities, to 1e-8."""
    Xtr, Xte, ytr, _ = _split(name, 0)
    ours = AdaBoostClassifier(n_estimators=8).fit(Xtr, ytr)
    ref = SkAda(SkTree(max_depth=1), n_estimators=8, random_state=0).fit(Xtr, ytr)
    T = len(ours.estimators_)
    assert T == len(ref.estimators_)
    for m, r in zip(ours.estimators_, ref.estimators_):
        np.testing.assert_array_equal(m.predict(Xte), r.predict(Xte))
    np.testing.assert_allclose(
        ours.decision_function(Xte), ref.decision_function(Xte), rtol=1e-8, atol=1e-12
    )
    np.testing.assert_allclose(
        ours.predict_proba(Xte), ref.predict_proba(Xte), rtol=1e-8, atol=1e-12
    )
    if name == "wine":
        np.testing.assert_allclose(
            ours.decision_function(Xte).sum(axis=1), 0, atol=1e-12
        )


def test_any_estimator_with_fit_and_predict_is_a_member():
    """scikit-learn estimators and Pipelines: sample weights routed where
    ``fit`` takes them (LogisticRegression), drawn rows otherwise (Pipeline)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    Xtr, Xte, ytr, yte = _split("breast_cancer", 0)
    pipe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    for est in (LogisticRegression(max_iter=5000), pipe):
        ref = est.fit(Xtr, ytr).score(Xte, yte)
        bag = BaggingClassifier(est, n_estimators=5, random_state=0).fit(Xtr, ytr)
        assert type(bag.estimators_[0]) is type(est)
        assert abs(bag.score(Xte, yte) - ref) <= 0.04
    ours = AdaBoostClassifier(n_estimators=20).fit(Xtr, ytr)
    for member in (SkTree(max_depth=1), make_pipeline(SkTree(max_depth=1))):
        ada = AdaBoostClassifier(member, n_estimators=20, random_state=0).fit(Xtr, ytr)
        assert abs(ada.score(Xte, yte) - ours.score(Xte, yte)) <= 0.03
    w = np.ones(len(ytr))
    with pytest.raises(ValueError, match="sample_weight"):
        BaggingClassifier(pipe, n_estimators=2).fit(Xtr, ytr, sample_weight=w)


@pytest.mark.parametrize(
    "kw", [{"max_features": 0.3}, {"max_features": 5, "bootstrap_features": True}]
)
def test_bagging_max_features_as_sklearn(kw):
    """Each member sees a column subset of scikit-learn's size (the same
    subsets at prediction); accuracy within 4 points of scikit-learn's
    bagging averaged over three splits (the random draws differ)."""
    import warnings

    from sklearn.ensemble import BaggingClassifier as SkBag

    X, y = load_breast_cancer(return_X_y=True)
    ours, ref = [], []
    for s in range(3):
        Xa, Xb, ya, yb = train_test_split(X, y, random_state=s, stratify=y)
        m = BaggingClassifier(n_estimators=15, random_state=s, **kw).fit(Xa, ya)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = SkBag(n_estimators=15, random_state=s, **kw).fit(Xa, ya)
        sizes = {len(f) for f in m.estimators_features_}
        assert sizes == {len(f) for f in r.estimators_features_}
        assert all(
            0 <= f.min() and f.max() < X.shape[1] for f in m.estimators_features_
        )
        if not kw.get("bootstrap_features"):
            assert all(len(set(f.tolist())) == len(f) for f in m.estimators_features_)
        assert len({tuple(f) for f in m.estimators_features_}) > 1
        # a member predicts from its own columns
        t = m.estimators_[0]
        assert t.n_features_in_ == len(m.estimators_features_[0])
        ours.append(m.score(Xb, yb))
        ref.append(r.score(Xb, yb))
    assert np.mean(ours) > np.mean(ref) - 0.04
    assert m.feature_importances_.shape == (X.shape[1],)


def test_bagging_max_features_default_and_errors():
    X, y = load_wine(return_X_y=True)
    m = BaggingClassifier(n_estimators=3, random_state=0).fit(X, y)
    assert all(np.array_equal(f, np.arange(X.shape[1])) for f in m.estimators_features_)
    reg = BaggingRegressor(n_estimators=3, max_features=4, random_state=0)
    assert reg.fit(X, y.astype(float)).score(X, y.astype(float)) > 0.5
    with pytest.raises(ValueError, match="max_features"):
        BaggingClassifier(max_features=X.shape[1] + 1).fit(X, y)
    with pytest.raises(ValueError, match="max_features"):
        BaggingClassifier(max_features=0.0).fit(X, y)


def test_bagged_trees_keep_max_leaf_nodes():
    X, y = load_wine(return_X_y=True)
    tree = DecisionTreeClassifier(max_leaf_nodes=4)
    bag = BaggingClassifier(tree, n_estimators=5, random_state=0).fit(X, y)
    assert all(m.n_leaves_ <= 4 for m in bag.estimators_)
    assert bag.score(X, y) > 0.8


def test_forest_apply_is_each_trees_leaf(xp):
    """scikit-learn's contract: ``forest.apply(X)[:, t] == estimators_[t].apply(X)``,
    every entry a leaf of its tree (children -1), shape (n, n_estimators)."""
    Xtr, Xte, ytr, _ = _split("wine", 3)
    yr = Xtr[:, 0] + ytr
    for est, y in (
        (RandomForestClassifier(6, random_state=0), ytr),
        (RandomForestRegressor(4, max_depth=5, random_state=1), yr),
    ):
        ref = est.fit(Xtr, y).apply(Xte)
        assert ref.shape == (len(Xte), est.n_estimators)
        for t, m in enumerate(est.estimators_):
            np.testing.assert_array_equal(ref[:, t], m.apply(Xte))
            assert np.all(m.tree_children_left_[ref[:, t]] == -1)
        assert len(np.unique(ref[:, 0])) > 1
        got = type(est)(**est.get_params()).fit(xp.asarray(Xtr), xp.asarray(y))
        A = got.apply(xp.asarray(Xte))
        assert xp.is_native(A)
        np.testing.assert_array_equal(xp.to_numpy(A), ref)


def test_forest_min_weight_fraction_leaf_per_tree():
    """Each tree's leaves keep ``min_weight_fraction_leaf`` of that tree's
    weight (its bootstrap counts), as scikit-learn passes them to the tree."""
    Xtr, _, ytr, _ = _split("breast_cancer", 1)
    for est, y in (
        (RandomForestClassifier(5, min_weight_fraction_leaf=0.1, random_state=0), ytr),
        (
            RandomForestRegressor(3, min_weight_fraction_leaf=0.2, random_state=0),
            Xtr[:, 0],
        ),
    ):
        est.fit(Xtr, y)
        free = type(est)(est.n_estimators, random_state=0).fit(Xtr, y)
        frac = est.min_weight_fraction_leaf
        for m, f in zip(est.estimators_, free.estimators_):
            W = m.tree_weighted_n_node_samples_
            assert np.all(W[m.tree_children_left_ == -1] >= frac * W[0] - 1e-9)
            assert 1 < m.node_count_ < f.node_count_


# ------------------------------------------------------------- multi-output
def _multi_output_problem(n=600, seed=0):
    """Easy multi-output data: X float32-exact (scikit-learn's precision),
    three axis-aligned class outputs (2, 3 and 2 classes), two real outputs."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 5)).astype(np.float32).astype(np.float64)
    Y = np.stack(
        [
            (X[:, 0] > 0).astype(np.int64),
            np.digitize(X[:, 1], [-0.5, 0.5]),
            (X[:, 2] > 0.3).astype(np.int64),
        ],
        axis=1,
    )
    R = np.stack([X[:, 0] + X[:, 1] ** 2, np.sin(X[:, 2])], axis=1)
    return X, Y, R


def test_multi_output_forest_equals_sklearn_without_randomness(xp):
    """bootstrap=False, max_features=None: every tree is the deterministic
    tree, so predictions and probabilities equal scikit-learn's (shallow
    trees, no tied splits); classes_/n_classes_ lists, predict_proba a list
    of (n, K_o), predict (n, n_outputs), regression (n, n_outputs)."""
    X, Y, R = _multi_output_problem(300)
    kw = dict(bootstrap=False, max_features=None, max_depth=3, random_state=0)
    ref = SkForest(5, **kw).fit(X, Y)
    est = RandomForestClassifier(5, **kw).fit(xp.asarray(X), xp.asarray(Y))
    assert est.n_outputs_ == 3 and est.n_classes_ == [2, 3, 2] == ref.n_classes_
    pred = est.predict(xp.asarray(X))
    assert xp.is_native(pred)
    np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(X))
    P = est.predict_proba(xp.asarray(X))
    assert [tuple(p.shape) for p in P] == [p.shape for p in ref.predict_proba(X)]
    for p, rp in zip(P, ref.predict_proba(X)):
        np.testing.assert_allclose(xp.to_numpy(p), rp, rtol=1e-12, atol=1e-15)
    kw["min_samples_leaf"] = 5
    ref = SkForestReg(5, **kw).fit(X, R)
    est = RandomForestRegressor(5, **kw).fit(xp.asarray(X), xp.asarray(R))
    got = est.predict(xp.asarray(X))
    assert tuple(got.shape) == (len(X), 2) and est.n_outputs_ == 2
    np.testing.assert_allclose(xp.to_numpy(got), ref.predict(X), rtol=1e-12)
    # full-depth bootstrap trees meet exact ties between features (tiny
    # nodes): the same forest on every library all the same
    full = RandomForestRegressor(5, random_state=0, oob_score=True)
    one = full.fit(X, R).predict(X)
    other = RandomForestRegressor(5, random_state=0, oob_score=True)
    other.fit(xp.asarray(X), xp.asarray(R))
    np.testing.assert_allclose(
        xp.to_numpy(other.predict(xp.asarray(X))), one, atol=1e-12
    )
    assert other.oob_score_ == pytest.approx(full.oob_score_, rel=1e-12)


def test_multi_output_forest_close_to_sklearn_with_oob():
    """Bootstrap and feature subsets: per-output test accuracy within 0.02
    of scikit-learn's forest, R² within 0.03; out-of-bag attributes in
    scikit-learn's shapes ((n, 2, n_outputs) for 0/1 outputs, (n, n_outputs)
    for regression), scores within 0.03; multiclass outputs refuse
    oob_score as scikit-learn does."""
    X, Y, R = _multi_output_problem(900)
    tr, te = slice(0, 600), slice(600, None)
    est = RandomForestClassifier(30, random_state=0).fit(X[tr], Y[tr])
    ref = SkForest(30, random_state=0).fit(X[tr], Y[tr])
    acc = (est.predict(X[te]) == Y[te]).mean(axis=0)
    np.testing.assert_allclose(
        acc, (ref.predict(X[te]) == Y[te]).mean(axis=0), atol=0.02
    )
    B = Y[:, [0, 2]]
    est = RandomForestClassifier(30, random_state=0, oob_score=True).fit(X[tr], B[tr])
    ref = SkForest(30, random_state=0, oob_score=True).fit(X[tr], B[tr])
    assert est.oob_decision_function_.shape == ref.oob_decision_function_.shape
    assert est.oob_score_ == pytest.approx(ref.oob_score_, abs=0.03)
    assert est.score(X[te], B[te]) == pytest.approx(ref.score(X[te], B[te]), abs=0.03)
    with pytest.raises(ValueError, match="multiclass-multioutput"):
        RandomForestClassifier(5, oob_score=True, random_state=0).fit(X, Y)
    est = RandomForestRegressor(30, random_state=0, oob_score=True).fit(X[tr], R[tr])
    ref = SkForestReg(30, random_state=0, oob_score=True).fit(X[tr], R[tr])
    assert est.oob_prediction_.shape == ref.oob_prediction_.shape == (600, 2)
    assert est.oob_score_ == pytest.approx(ref.oob_score_, abs=0.03)
    assert est.score(X[te], R[te]) == pytest.approx(ref.score(X[te], R[te]), abs=0.03)


def test_multi_output_y_in_bagging_is_refused_and_column_y_warns():
    """Bagging keeps 1-D targets (a clear error names y's shape); a forest
    given y of shape (n, 1) warns as scikit-learn (DataConversionWarning)
    and fits one output."""
    from xpml.exceptions import data_conversion_warning

    X, Y, R = _multi_output_problem(100)
    with pytest.raises(ValueError, match="1-D"):
        BaggingClassifier(n_estimators=2).fit(X, Y)
    with pytest.raises(ValueError, match="1-D"):
        BaggingRegressor(n_estimators=2).fit(X, R)
    with pytest.raises(ValueError, match="1-D"):
        AdaBoostClassifier(n_estimators=2).fit(X, Y)
    with pytest.warns(data_conversion_warning()):
        rf = RandomForestClassifier(3, random_state=0).fit(X, Y[:, :1])
    assert rf.n_outputs_ == 1 and rf.predict(X).shape == (100,)


def test_absolute_error_forest_as_sklearn(xp):
    """criterion="absolute_error": without bootstrap and with every feature
    each tree is scikit-learn's weighted-median tree, so the forest predicts
    as scikit-learn's (1e-12 relative; continuous weights, so no two splits
    tie); with bootstrap and feature subsets, held-out R² within 0.06 of
    scikit-learn's (different random draws)."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, size=(300, 4)).astype(np.float32).astype(np.float64)
    y = np.sin(2 * X[:, 0]) + X[:, 1] ** 2 + 0.3 * rng.standard_t(2, size=300)
    w = rng.uniform(0.5, 2.0, 300)
    kw = dict(criterion="absolute_error", max_depth=4, random_state=0)
    exact = dict(n_estimators=2, bootstrap=False, max_features=None, **kw)
    ref = SkForestReg(**exact).fit(X[:150], y[:150], w[:150])
    ours = RandomForestRegressor(**exact).fit(
        xp.asarray(X[:150]), xp.asarray(y[:150]), sample_weight=xp.asarray(w[:150])
    )
    got = xp.to_numpy(ours.predict(xp.asarray(X[150:])))
    np.testing.assert_allclose(got, ref.predict(X[150:]), rtol=1e-12)
    if xp.name != "numpy":
        return
    boot = dict(n_estimators=20, max_features=0.5, **kw)
    ref = SkForestReg(**boot).fit(X[:200], y[:200])
    ours = RandomForestRegressor(**boot).fit(X[:200], y[:200])
    r2, r2_ref = ours.score(X[200:], y[200:]), ref.score(X[200:], y[200:])
    assert r2 > 0.5 and abs(r2 - r2_ref) <= 0.06, (r2, r2_ref)


# ------------------------------------------------------------ missing values
def _nan_problem(seed, n, frac=0.2):
    """An easy problem (two informative of four features) with NaN at
    ``frac`` of the entries of X."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    yr = 2 * X[:, 0] - X[:, 1] + 0.2 * rng.normal(size=n)
    X[rng.random(X.shape) < frac] = np.nan
    return X, (yr > 0).astype(np.int64), yr


def test_forests_with_missing_values_close_to_sklearn(xp):
    """20% NaN in X at fit and predict: RandomForestClassifier's test accuracy
    within 4 points of scikit-learn's (20 trees each, 300 training and 300
    test points; seeds 0-3 gave differences up to 1.3 points), the two agree
    on at least 88% of the test points (seen: 92-95%); RandomForestRegressor's
    test R² within 0.05 of scikit-learn's (seen: up to 0.02); apply is each
    tree's own leaf, NaN rows included; out-of-bag scores are computed."""
    from sklearn.metrics import r2_score

    X, yc, yr = _nan_problem(0, 300)
    Xt, yct, yrt = _nan_problem(1, 300)
    sk = SkForest(n_estimators=20, random_state=0).fit(X, yc)
    rf = RandomForestClassifier(n_estimators=20, random_state=0, oob_score=True)
    rf.fit(xp.asarray(X), xp.asarray(yc))
    ours = xp.to_numpy(rf.predict(xp.asarray(Xt)))
    ref = sk.predict(Xt)
    assert abs(np.mean(ours == yct) - np.mean(ref == yct)) <= 0.04
    assert np.mean(ours == ref) >= 0.88
    assert 0.7 < rf.oob_score_ <= 1.0
    assert rf.oob_decision_function_.shape == (300, 2)
    leaves = xp.to_numpy(rf.apply(xp.asarray(Xt[:50])))
    for t in (0, 7):
        member = rf.estimators_[t].apply(xp.asarray(Xt[:50]))
        np.testing.assert_array_equal(leaves[:, t], xp.to_numpy(member))
    skr = SkForestReg(n_estimators=20, random_state=0).fit(X, yr)
    rr = RandomForestRegressor(n_estimators=20, random_state=0)
    rr.fit(xp.asarray(X), xp.asarray(yr))
    got = r2_score(yrt, xp.to_numpy(rr.predict(xp.asarray(Xt))))
    assert abs(got - r2_score(yrt, skr.predict(Xt))) <= 0.05
    assert got > 0.5


def test_forests_refuse_inf_and_other_ensembles_refuse_nan():
    """Infinity is refused by forests (NaN is not); bagging keeps refusing
    NaN as every estimator without missing-value support."""
    X, yc, _ = _nan_problem(2, 80)
    Xi = np.nan_to_num(X, nan=0.0)
    Xi[5, 2] = -np.inf
    with pytest.raises(ValueError, match="X contains infinity.*not infinity"):
        RandomForestClassifier(n_estimators=3).fit(Xi, yc)
    rf = RandomForestRegressor(n_estimators=3, random_state=0).fit(X, yc * 1.0)
    with pytest.raises(ValueError, match="X contains infinity"):
        rf.predict(Xi)
    assert np.all(np.isfinite(rf.predict(X)))
    with pytest.raises(ValueError, match="NaN"):
        BaggingClassifier(n_estimators=3).fit(X, yc)
    with pytest.raises(ValueError, match="NaN"):
        AdaBoostClassifier(n_estimators=3).fit(X, yc)


# ------------------------------------------------------------------ issue 16
_FIT_WITHOUT_JOBLIB = """
import sys
import numpy as np
from xpml.ensemble import BaggingClassifier, RandomForestClassifier
rng = np.random.default_rng(0)
X = rng.standard_normal((80, 4))
y = (X[:, 0] > 0).astype(int)
P = RandomForestClassifier(8, random_state=0).fit(X, y).predict_proba(X)
BaggingClassifier(n_estimators=4, random_state=0).fit(X, y).predict(X)
assert "joblib" not in sys.modules, "a fit with n_jobs=None imported joblib"
P2 = RandomForestClassifier(8, random_state=0, n_jobs=2).fit(X, y).predict_proba(X)
assert "joblib" in sys.modules
np.testing.assert_array_equal(P, P2)
print("ok")
"""


def test_a_fit_on_one_job_does_not_import_joblib():
    """n_jobs=None before anything imported joblib: no backend can be active,
    so the members are fitted here without importing it (34-44 ms of a
    forest's first fit); n_jobs=2 then imports it, with the same forest."""
    pytest.importorskip("joblib")
    res = subprocess.run(
        [sys.executable, "-c", _FIT_WITHOUT_JOBLIB],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "ok"


def test_joblib_for_defers_to_an_active_backend(monkeypatch):
    """Once joblib is imported, n_jobs=None goes through it (an active
    backend decides the jobs: here two threads, whose Parallel is called);
    n_jobs=1 never does; without joblib installed, nothing does."""
    joblib = pytest.importorskip("joblib")
    from xpml.ensemble._base import joblib_for, parallel_map

    assert joblib_for(1) is None
    assert joblib_for(None) is joblib and joblib_for(2) is joblib
    made = []

    class Spy(joblib.Parallel):
        def __init__(self, *args, **kwargs):
            made.append(kwargs.get("n_jobs"))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(joblib, "Parallel", Spy)
    with joblib.parallel_backend("threading", n_jobs=2):
        assert parallel_map(lambda t: t * t, [1, 2, 3]) == [1, 4, 9]
    assert made == [None]
    assert parallel_map(lambda t: -t, [1, 2], n_jobs=1) == [-1, -2]
    assert made == [None]
    monkeypatch.setitem(sys.modules, "joblib", None)  # import joblib raises
    assert joblib_for(None) is None and joblib_for(4) is None
