"""LinearSVC by dual coordinate descent: scikit-learn (liblinear) parity, duality
gap, intercept by augmentation, sample weights, backends."""

import warnings

import numpy as np
import pytest

from xpml.exceptions import ConvergenceWarning, InvalidParameterError
from xpml.svm._linear import LinearSVC

sk_svm = pytest.importorskip("sklearn.svm")
sk_datasets = pytest.importorskip("sklearn.datasets")


def _breast_cancer():
    X, y = sk_datasets.load_breast_cancer(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[:400], idx[400:]
    return X[tr], y[tr], X[te], y[te]


def _synthetic(n=300, k=3):
    X, y = sk_datasets.make_classification(
        n_samples=n,
        n_features=10,
        n_informative=6,
        n_classes=k,
        n_clusters_per_class=1,
        random_state=0,
    )
    X = (X - X.mean(0)) / X.std(0)
    return X[:200], y[:200], X[200:], y[200:]


def _sklearn(**kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sk_svm.LinearSVC(dual=True, max_iter=100000, random_state=0, **kw)


def _acc(est, X, y):
    return float(np.mean(est.predict(X) == y))


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("data", ["breast_cancer", "synthetic3"])
def test_accuracy_within_half_percent_of_liblinear(loss, data):
    """fit_intercept=False, C=0.1: test and training accuracy within 0.5% of
    sklearn.svm.LinearSVC(dual=True, fit_intercept=False); weights within 1%."""
    Xtr, ytr, Xte, yte = _breast_cancer() if data == "breast_cancer" else _synthetic()
    kw = dict(loss=loss, C=0.1, fit_intercept=False, tol=1e-4)
    ours = LinearSVC(random_state=0, max_iter=3000, **kw).fit(Xtr, ytr)
    ref = _sklearn(**kw).fit(Xtr, ytr)
    assert ours.coef_.shape == ref.coef_.shape
    np.testing.assert_array_equal(ours.intercept_, np.zeros(len(ours.coef_)))
    for X, y in ((Xte, yte), (Xtr, ytr)):
        assert abs(_acc(ours, X, y) - _acc(ref, X, y)) <= 0.005
    assert np.abs(ours.coef_ - ref.coef_).max() <= 1e-2 * np.abs(ref.coef_).max()
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    scores, ref_scores = ours.decision_function(Xte), ref.decision_function(Xte)
    assert scores.shape == ref_scores.shape


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_duality_gap_closes(loss):
    """primal − dual ≥ 0 always, and small relative to the primal at a tight tol;
    the KKT conditions of the dual hold."""
    Xtr, ytr, _, _ = _synthetic(n=200, k=2)
    gaps = []
    for tol in (1e-1, 1e-5):
        est = LinearSVC(
            loss=loss,
            C=0.5,
            fit_intercept=False,
            tol=tol,
            random_state=0,
            max_iter=5000,
        ).fit(Xtr, ytr)
        gap = float(est.primal_objective_[0] - est.dual_objective_[0])
        assert gap >= -1e-10
        gaps.append(gap / float(est.primal_objective_[0]))
    assert gaps[1] < 1e-5 and gaps[1] < gaps[0]
    # KKT: α = 0 where the margin is > 1, α = C where it is < 1 (hinge)
    yy = np.where(ytr == 1, 1.0, -1.0)
    margin = yy * est.decision_function(Xtr)
    a = est.dual_coef_ * yy  # dual_coef_ holds αᵢyᵢ
    assert np.all(a >= 0)
    assert np.all(a[margin > 1 + 1e-3] < 1e-8)
    if loss == "hinge":
        assert np.all(a <= 0.5 + 1e-12)
        assert np.allclose(a[margin < 1 - 1e-3], 0.5)
    else:  # squared hinge: α = 2C ξ
        np.testing.assert_allclose(a, 2 * 0.5 * np.maximum(1 - margin, 0), atol=1e-4)
    # w = Σ αᵢ yᵢ xᵢ
    np.testing.assert_allclose(est.coef_[0], est.dual_coef_ @ Xtr, atol=1e-10)


def test_intercept_by_augmentation_matches_liblinear():
    """fit_intercept=True appends a constant intercept_scaling feature (regularised
    bias, as liblinear does)."""
    Xtr, ytr, Xte, yte = _synthetic()
    Xtr = Xtr + 2.0  # an offset the intercept has to absorb
    Xte = Xte + 2.0
    for scaling in (1.0, 10.0):
        kw = dict(loss="squared_hinge", C=0.1, intercept_scaling=scaling, tol=1e-5)
        ours = LinearSVC(random_state=0, max_iter=5000, **kw).fit(Xtr, ytr)
        ref = _sklearn(**kw).fit(Xtr, ytr)
        assert ours.intercept_.shape == (3,)
        ref_scale = np.abs(ref.coef_).max()
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-3 * ref_scale)
        np.testing.assert_allclose(
            ours.intercept_, ref.intercept_, atol=1e-3 * ref_scale
        )
        assert abs(_acc(ours, Xte, yte) - _acc(ref, Xte, yte)) <= 0.005


def test_sample_weights_equal_repetition_and_removal():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)
    w = rng.integers(0, 3, size=40)
    w[:2] = (0, 2)
    kw = dict(C=0.3, tol=1e-8, max_iter=20000, random_state=0)
    a = LinearSVC(**kw).fit(X, y, sample_weight=w.astype(float))
    b = LinearSVC(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-6)
    np.testing.assert_allclose(a.intercept_, b.intercept_, atol=1e-6)


def test_same_model_on_every_backend(xp):
    """One seed, one model: coefficients to 1e-8 and identical predictions (3 classes)."""
    rng = np.random.default_rng(1)
    X = np.concatenate(
        [rng.normal(size=(12, 3)) + c for c in ([3, 0, 0], [0, 3, 0], [0, 0, 3])]
    )
    y = np.repeat(np.array([3, 5, 7]), 12)
    kw = dict(C=0.5, tol=1e-3, max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref = LinearSVC(**kw).fit(X, y)
        got = LinearSVC(**kw).fit(xp.asarray(X), xp.asarray(y))
    pred = got.predict(xp.asarray(X))
    assert xp.is_native(pred)
    np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(X))
    np.testing.assert_allclose(xp.to_numpy(got.coef_), ref.coef_, rtol=1e-8, atol=1e-10)
    assert got.n_iter_ == ref.n_iter_


def test_convergence_warning_and_errors():
    X, y, _, _ = _synthetic(n=100, k=2)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        est = LinearSVC(max_iter=1, random_state=0).fit(X, y)
    assert est.n_iter_ == 1
    with pytest.raises(InvalidParameterError, match="'loss'.*'hinge'.*'squared_hinge'"):
        LinearSVC(loss="log").fit(X, y)
    with pytest.raises(InvalidParameterError, match="'C'"):
        LinearSVC(C=0.0).fit(X, y)
    with pytest.raises(ValueError, match="class"):
        LinearSVC().fit(X, np.zeros(len(X)))
