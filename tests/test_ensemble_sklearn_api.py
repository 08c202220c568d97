"""Forests, bagging and AdaBoost as scikit-learn drop-ins: ``len``/indexing/
iteration over the members, ``estimators_samples_``, ``warm_start``,
``estimator``/``estimator_``, ``n_classes_``, ``predict_log_proba``, bagging's
``decision_function`` and AdaBoost's staged methods (issue 12)."""

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_wine, make_classification
from sklearn.ensemble import AdaBoostClassifier as SkAda
from sklearn.ensemble import RandomForestClassifier as SkForest
from sklearn.svm import LinearSVC
from sklearn.tree import DecisionTreeClassifier as SkTree

from xpml.ensemble import (
    AdaBoostClassifier,
    BaggingClassifier,
    BaggingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from xpml.exceptions import NotFittedError
from xpml.linear_model import LinearRegression
from xpml.tree import DecisionTreeClassifier, DecisionTreeRegressor

WARM_MSG = "Warm-start fitting without increasing n_estimators does not fit new trees."


def _data(n=120, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(np.int64)
    return X, y


ENSEMBLES = [
    lambda: RandomForestClassifier(6, max_depth=3, random_state=0),
    lambda: RandomForestRegressor(6, max_depth=3, random_state=0),
    lambda: BaggingClassifier(n_estimators=6, random_state=0),
    lambda: BaggingRegressor(n_estimators=6, max_features=0.6, random_state=0),
    lambda: AdaBoostClassifier(n_estimators=6),
]


@pytest.mark.parametrize("make", ENSEMBLES)
def test_members_as_a_sequence(make, xp):
    est = make()
    with pytest.raises(NotFittedError):
        len(est)
    X, y = _data()
    est.fit(xp.asarray(X), xp.asarray(y))
    members = est.estimators_
    assert len(est) == len(members) == 6  # AdaBoost: no perfect stump here
    assert est[0] is members[0] and est[-1] is members[-1]
    assert est[1:3] == members[1:3]
    assert all(a is b for a, b in zip(est, members, strict=True))


def _weights(samples, n):
    return np.bincount(np.asarray(samples), minlength=n).astype(np.float64)


@pytest.mark.parametrize("bootstrap", [True, False])
def test_estimators_samples_are_the_members_training_rows(bootstrap, xp):
    """A member refitted on its ``estimators_samples_`` rows (as counts) is
    the member: a deterministic tree on all features, and least squares."""
    X, y = _data(200, 4, seed=1)
    yr = X @ np.array([1.0, -2.0, 0.5, 0.0]) + np.sin(3 * X[:, 0])
    max_samples = 0.5 if bootstrap else None
    forest = RandomForestRegressor(
        5,
        max_features=1.0,
        max_depth=4,
        max_samples=max_samples,
        bootstrap=bootstrap,
        random_state=3,
    ).fit(xp.asarray(X), xp.asarray(yr))
    samples = forest.estimators_samples_
    assert isinstance(samples, list) and len(samples) == 5
    for s, member in zip(samples, forest.estimators_, strict=True):
        assert xp.is_native(s)
        s = xp.to_numpy(s)
        assert s.dtype == np.int32
        if bootstrap:
            assert len(s) == 100 and len(np.unique(s)) < len(s)
        else:
            np.testing.assert_array_equal(np.sort(s), np.arange(200))
        w = xp.asarray(_weights(s, 200))
        ref = DecisionTreeRegressor(max_depth=4).fit(
            xp.asarray(X), xp.asarray(yr), sample_weight=w
        )
        inbag = xp.asarray(
            X[np.unique(s)]
        )  # thresholds may differ between out-of-bag rows
        np.testing.assert_allclose(
            xp.to_numpy(member.predict(inbag)),
            xp.to_numpy(ref.predict(inbag)),
            rtol=1e-10,
        )
    bag = BaggingRegressor(
        LinearRegression(), n_estimators=4, max_samples=0.7, random_state=2
    ).fit(xp.asarray(X), xp.asarray(yr))
    assert bag.estimators_samples_[0].shape == (140,)
    for s, member in zip(bag.estimators_samples_, bag.estimators_, strict=True):
        w = _weights(xp.to_numpy(s), 200)
        ref = LinearRegression().fit(X, yr, sample_weight=w)
        np.testing.assert_allclose(xp.to_numpy(member.coef_), ref.coef_, rtol=1e-8)
    # the same indices on every call (regenerated from the members' seeds)
    again = bag.estimators_samples_
    assert all(
        np.array_equal(xp.to_numpy(a), xp.to_numpy(b))
        for a, b in zip(again, bag.estimators_samples_, strict=True)
    )


def test_warm_start_grows_the_forest_of_one_fit(xp):
    X, y = _data(150, 6, seed=2)
    Xa, ya = xp.asarray(X), xp.asarray(y)
    warm = RandomForestClassifier(5, random_state=42, warm_start=True).fit(Xa, ya)
    first = list(warm.estimators_)
    warm.set_params(n_estimators=10).fit(Xa, ya)
    cold = RandomForestClassifier(10, random_state=42).fit(Xa, ya)
    assert len(warm) == 10 and all(a is b for a, b in zip(first, warm[:5]))
    assert [t.random_state for t in warm] == [t.random_state for t in cold]
    np.testing.assert_array_equal(
        xp.to_numpy(warm.apply(Xa)), xp.to_numpy(cold.apply(Xa))
    )
    np.testing.assert_array_equal(
        xp.to_numpy(warm.predict_proba(Xa)), xp.to_numpy(cold.predict_proba(Xa))
    )
    # as many trees: scikit-learn's warning, nothing refitted
    grown = list(warm.estimators_)
    warm.set_params(random_state=7)
    with pytest.warns(UserWarning, match=WARM_MSG):
        warm.fit(Xa, ya)
    assert all(a is b for a, b in zip(warm, grown, strict=True))
    np.testing.assert_array_equal(
        xp.to_numpy(warm.apply(Xa)), xp.to_numpy(cold.apply(Xa))
    )
    with pytest.raises(ValueError, match="n_estimators=4 must be larger or equal"):
        warm.set_params(n_estimators=4).fit(Xa, ya)
    # warm_start=False grows a new forest
    warm.set_params(n_estimators=5, warm_start=False, random_state=1).fit(Xa, ya)
    fresh = RandomForestClassifier(5, random_state=1).fit(Xa, ya)
    assert all(a is not b for a, b in zip(first, warm))
    np.testing.assert_array_equal(
        xp.to_numpy(warm.apply(Xa)), xp.to_numpy(fresh.apply(Xa))
    )


def test_warm_start_oob_score_is_the_one_of_a_single_fit():
    X, y = _data(150, 6, seed=3)
    kw = {"max_depth": 3, "random_state": 1}
    cold = RandomForestClassifier(15, oob_score=True, **kw).fit(X, y)
    grown = RandomForestClassifier(5, **kw).fit(X, y)
    grown.set_params(warm_start=True, oob_score=True, n_estimators=15).fit(X, y)
    assert grown.oob_score_ == cold.oob_score_
    same = RandomForestClassifier(15, warm_start=True, **kw).fit(X, y)
    assert not hasattr(same, "oob_score_")
    same.set_params(oob_score=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        same.fit(X, y)
    assert same.oob_score_ == cold.oob_score_
    np.testing.assert_array_equal(
        same.oob_decision_function_, cold.oob_decision_function_
    )


def test_bagging_warm_start_with_generic_members():
    X, _ = _data(100, 3, seed=4)
    y = X @ np.array([1.0, 2.0, -1.0]) + 0.1 * np.sin(7 * X[:, 0])
    kw = {"max_features": 0.7, "random_state": 5}
    warm = BaggingRegressor(LinearRegression(), n_estimators=3, warm_start=True, **kw)
    warm.fit(X, y).set_params(n_estimators=7).fit(X, y)
    cold = BaggingRegressor(LinearRegression(), n_estimators=7, **kw).fit(X, y)
    for a, b in zip(warm.estimators_features_, cold.estimators_features_, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(warm.predict(X), cold.predict(X), rtol=1e-12)


def test_estimator_attributes_and_classes():
    X, y = load_wine(return_X_y=True)
    rf = RandomForestClassifier(5, max_depth=2, random_state=0).fit(X, y)
    assert type(rf.estimator) is DecisionTreeClassifier
    assert rf.estimator.get_params() == DecisionTreeClassifier().get_params()
    assert rf.estimator_.max_depth == 2
    assert type(RandomForestRegressor().estimator) is DecisionTreeRegressor
    sk = SkForest(5, random_state=0).fit(X, y)
    assert rf.n_classes_ == sk.n_classes_ == 3
    assert not hasattr(RandomForestRegressor(3).fit(X, y), "n_classes_")
    bag = BaggingClassifier(n_estimators=3, random_state=0).fit(X, y)
    assert isinstance(bag.estimator_, DecisionTreeClassifier)
    svc = LinearSVC()
    assert BaggingClassifier(svc, n_estimators=2).fit(X, y).estimator_ is svc
    ada = AdaBoostClassifier(n_estimators=3).fit(X, y)
    assert ada.estimator_.max_depth == 1 and ada.n_classes_ == 3


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomForestClassifier(8, max_depth=3, random_state=0),
        lambda: BaggingClassifier(n_estimators=4, random_state=0),
        lambda: AdaBoostClassifier(n_estimators=5),
    ],
)
def test_predict_log_proba_is_the_log_of_predict_proba(make, xp):
    X, y = load_wine(return_X_y=True)
    est = make().fit(xp.asarray(X), xp.asarray(y))
    P = xp.to_numpy(est.predict_proba(xp.asarray(X)))
    with np.errstate(divide="ignore"):
        want = np.log(P)
    L = est.predict_log_proba(xp.asarray(X))
    assert xp.is_native(L)
    np.testing.assert_allclose(xp.to_numpy(L), want, rtol=1e-12)


def test_bagging_decision_function_is_the_members_mean(xp):
    X, y = load_wine(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    bag = BaggingClassifier(
        LinearSVC(), n_estimators=4, max_features=0.5, random_state=0
    )
    bag.fit(xp.asarray(X), xp.asarray(y))
    D = bag.decision_function(xp.asarray(X))
    assert xp.is_native(D)
    want = np.mean(
        [
            m.decision_function(X[:, xp.to_numpy(f)])
            for m, f in zip(bag.estimators_, bag.estimators_features_, strict=True)
        ],
        axis=0,
    )
    np.testing.assert_allclose(xp.to_numpy(D), want, rtol=1e-10, atol=1e-12)
    # a member without decision_function: the ensemble has none (scikit-learn)
    assert not hasattr(BaggingClassifier(n_estimators=2).fit(X, y), "decision_function")


@pytest.mark.parametrize("n_classes", [2, 3])
def test_adaboost_staged_methods_match_sklearn(n_classes, xp):
    X, y = make_classification(
        200, n_features=6, n_informative=4, n_classes=n_classes, random_state=0
    )
    w = np.random.default_rng(0).integers(1, 5, size=len(y)).astype(np.float64)
    ours = AdaBoostClassifier(n_estimators=6).fit(
        xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(w)
    )
    ref = SkAda(SkTree(max_depth=1), n_estimators=6, random_state=0)
    ref.fit(X, y, sample_weight=w)
    Xa = xp.asarray(X)
    pairs = [
        (ours.staged_decision_function(Xa), ref.staged_decision_function(X)),
        (ours.staged_predict_proba(Xa), ref.staged_predict_proba(X)),
        (ours.staged_predict(Xa), ref.staged_predict(X)),
    ]
    for got_stages, want_stages in pairs:
        got_stages, want_stages = list(got_stages), list(want_stages)
        assert len(got_stages) == len(want_stages) == len(ours)
        for got, want in zip(got_stages, want_stages, strict=True):
            assert xp.is_native(got)
            np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-8, atol=1e-12)
    scores = list(ours.staged_score(Xa, xp.asarray(y), sample_weight=xp.asarray(w)))
    want = list(ref.staged_score(X, y, sample_weight=w))
    np.testing.assert_allclose(scores, want, rtol=1e-12)
    assert scores[-1] == pytest.approx(ours.score(X, y, sample_weight=w), rel=1e-12)


def test_warm_start_without_seed_keeps_the_members_draws():
    """random_state=None: the kept trees keep their own seeds and bootstrap
    rows; only the new trees get fresh ones."""
    X, y = _data(120, 4, seed=6)
    est = RandomForestClassifier(4, max_depth=3, warm_start=True).fit(X, y)
    seeds = [t.random_state for t in est]
    rows = [s.copy() for s in est.estimators_samples_]
    est.set_params(n_estimators=7).fit(X, y)
    assert [t.random_state for t in est][:4] == seeds
    for a, b in zip(rows, est.estimators_samples_[:4], strict=True):
        np.testing.assert_array_equal(a, b)
    assert len(est.estimators_samples_) == 7


@pytest.mark.parametrize("fmt", ["csr", "csc"])
def test_sparse_input_gives_the_dense_answers(fmt):
    """SciPy sparse X (densified by validation): the same ensembles."""
    sparse = pytest.importorskip("scipy.sparse")
    X, y = load_wine(return_X_y=True)
    Xs = sparse.csr_matrix(X) if fmt == "csr" else sparse.csc_matrix(X)
    for make in (
        lambda: AdaBoostClassifier(n_estimators=5),
        lambda: BaggingClassifier(n_estimators=3, random_state=0),
        lambda: RandomForestClassifier(5, random_state=0),
    ):
        got = make().fit(Xs, y).predict_proba(Xs)
        np.testing.assert_array_equal(got, make().fit(X, y).predict_proba(X))


def test_warm_start_oob_rules_of_bagging():
    X, y = _data(80, 3, seed=7)
    with pytest.raises(ValueError, match="oob_score=True is not available"):
        BaggingClassifier(n_estimators=3, warm_start=True, oob_score=True).fit(X, y)
    bag = BaggingClassifier(n_estimators=5, oob_score=True, random_state=0).fit(X, y)
    assert hasattr(bag, "oob_decision_function_")
    bag.set_params(warm_start=True, oob_score=False, n_estimators=8).fit(X, y)
    assert not hasattr(bag, "oob_score_")
    assert not hasattr(bag, "oob_decision_function_")


def test_forest_passes_max_leaf_nodes_to_its_trees():
    """Each tree is the tree ``max_leaf_nodes`` grows on its bootstrap rows."""
    X, _ = _data(200, 4, seed=8)
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    forest = RandomForestRegressor(3, max_leaf_nodes=6, random_state=0).fit(X, y)
    assert forest.estimator_.max_leaf_nodes == 6
    for s, member in zip(forest.estimators_samples_, forest.estimators_, strict=True):
        ref = DecisionTreeRegressor(max_leaf_nodes=6).fit(
            X, y, sample_weight=_weights(s, 200)
        )
        inbag = X[np.unique(s)]
        assert len(np.unique(member.apply(X))) == 6
        np.testing.assert_allclose(
            member.predict(inbag), ref.predict(inbag), rtol=1e-10
        )
