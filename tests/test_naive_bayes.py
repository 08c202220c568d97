"""Naive Bayes against scikit-learn, α = 0 without NaN, and duplicated evidence."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn import naive_bayes as sk
from sklearn.datasets import load_breast_cancer, load_digits

from xpml.metrics import expected_calibration_error, log_loss
from xpml.naive_bayes import BernoulliNB, GaussianNB, MultinomialNB


@pytest.fixture(scope="module")
def digits():
    return load_digits(return_X_y=True)


@pytest.fixture(scope="module")
def cancer():
    return load_breast_cancer(return_X_y=True)


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_multinomial_nb_equals_sklearn_on_digit_counts(xp, digits, alpha):
    X, y = digits
    m = MultinomialNB(alpha=alpha).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.MultinomialNB(alpha=alpha).fit(X, y)
    P = m.predict_proba(xp.asarray(X))
    assert xp.is_native(P)
    np.testing.assert_allclose(xp.to_numpy(P), ref.predict_proba(X), rtol=0, atol=1e-10)
    np.testing.assert_allclose(
        xp.to_numpy(m.feature_log_prob_), ref.feature_log_prob_, rtol=1e-12
    )


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_bernoulli_nb_equals_sklearn_on_binarised_digits(xp, digits, alpha):
    X, y = digits
    Xb = (X > 7).astype(np.float64)
    m = BernoulliNB(alpha=alpha).fit(xp.asarray(Xb), xp.asarray(y))
    ref = sk.BernoulliNB(alpha=alpha).fit(Xb, y)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(Xb))),
        ref.predict_proba(Xb),
        rtol=0,
        atol=1e-10,
    )
    # the binarize threshold does the same on the raw counts
    t = BernoulliNB(alpha=alpha, binarize=7.0).fit(X, y)
    np.testing.assert_allclose(t.predict_proba(X), ref.predict_proba(Xb), atol=1e-10)


def test_gaussian_nb_equals_sklearn_on_breast_cancer(xp, cancer):
    X, y = cancer
    m = GaussianNB().fit(xp.asarray(X), xp.asarray(y))
    ref = sk.GaussianNB().fit(X, y)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X))),
        ref.predict_proba(X),
        rtol=0,
        atol=1e-10,
    )
    np.testing.assert_allclose(xp.to_numpy(m.var_), ref.var_, rtol=1e-12)


def test_sample_weights_equal_sklearn(digits, cancer):
    X, y = digits
    w = np.random.default_rng(0).uniform(0.1, 3.0, len(y))
    for ours, theirs, data in (
        (MultinomialNB(), sk.MultinomialNB(), X),
        (BernoulliNB(binarize=7.0), sk.BernoulliNB(binarize=7.0), X),
    ):
        np.testing.assert_allclose(
            ours.fit(data, y, sample_weight=w).predict_proba(data),
            theirs.fit(data, y, sample_weight=w).predict_proba(data),
            atol=1e-10,
        )
    Xc, yc = cancer
    wc = np.random.default_rng(1).uniform(0.1, 3.0, len(yc))
    np.testing.assert_allclose(
        GaussianNB().fit(Xc, yc, sample_weight=wc).predict_proba(Xc),
        sk.GaussianNB().fit(Xc, yc, sample_weight=wc).predict_proba(Xc),
        atol=1e-10,
    )


def test_alpha_zero_unseen_words_give_no_nan(xp):
    # vocabulary of 4 words; word 2 only in class 0, word 3 only in class 1
    X = np.array([[2, 1, 1, 0], [1, 2, 3, 0], [1, 1, 0, 2], [2, 0, 0, 1]], dtype=float)
    y = np.array([0, 0, 1, 1])
    m = MultinomialNB(alpha=0.0).fit(xp.asarray(X), xp.asarray(y))
    flp = xp.to_numpy(m.feature_log_prob_)
    assert flp[0, 3] == -np.inf and flp[1, 2] == -np.inf
    T = np.array(
        [
            [1, 1, 0, 0],  # both classes possible
            [0, 1, 1, 0],  # word 2: class 1 impossible
            [0, 0, 0, 1],  # word 3: class 0 impossible
            [0, 0, 1, 1],  # both unseen words: every class is −inf
            [0, 0, 0, 0],
        ],
        dtype=float,
    )  # empty document: the prior
    P = xp.to_numpy(m.predict_proba(xp.asarray(T)))
    L = xp.to_numpy(m.predict_log_proba(xp.asarray(T)))
    J = xp.to_numpy(m.predict_joint_log_proba(xp.asarray(T)))
    assert not np.isnan(P).any() and not np.isnan(L).any() and not np.isnan(J).any()
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert P[1, 1] == 0.0 and P[1, 0] == 1.0 and P[2, 0] == 0.0 and P[2, 1] == 1.0
    assert np.all(J[3] == -np.inf)
    prior = np.exp(xp.to_numpy(m.class_log_prior_))
    np.testing.assert_allclose(P[3], prior, atol=1e-15)  # documented fall-back
    np.testing.assert_allclose(P[4], prior, atol=1e-15)
    # Bernoulli with α = 0: a feature always (or never) present in a class
    b = BernoulliNB(alpha=0.0).fit(xp.asarray((X > 0).astype(float)), xp.asarray(y))
    Pb = xp.to_numpy(b.predict_proba(xp.asarray((T > 0).astype(float))))
    assert not np.isnan(Pb).any()
    np.testing.assert_allclose(Pb.sum(axis=1), 1.0, atol=1e-12)


def _log_odds(model, X):
    J = model.predict_joint_log_proba(X)
    return J[:, 1] - J[:, 0]


@pytest.mark.parametrize("kind", ["multinomial", "bernoulli", "gaussian"])
def test_duplicated_features_multiply_log_odds_and_ruin_calibration(
    kind, digits, cancer
):
    if kind == "gaussian":
        X, y = cancer
        make = lambda: GaussianNB(priors=[0.5, 0.5])  # noqa: E731
    else:
        X, y = digits
        keep = (y == 3) | (y == 8)
        X, y = X[keep], (y[keep] == 8).astype(int)
        if kind == "bernoulli":
            X = (X > 7).astype(float)
            make = lambda: BernoulliNB(fit_prior=False)  # noqa: E731
        else:
            make = lambda: MultinomialNB(fit_prior=False)  # noqa: E731
    base = make().fit(X, y)
    lo = _log_odds(base, X)
    ece = [expected_calibration_error(y, base.predict_proba(X)[:, 1])]
    loss = [log_loss(y, base.predict_proba(X))]
    for k in (2, 3, 5):
        Xk = np.tile(X, (1, k))
        mk = make().fit(Xk, y)
        np.testing.assert_allclose(
            _log_odds(mk, Xk), k * lo, rtol=1e-10, atol=1e-10 * np.abs(lo).max()
        )
        np.testing.assert_array_equal(
            mk.predict(Xk), base.predict(X)
        )  # accuracy unchanged
        ece.append(expected_calibration_error(y, mk.predict_proba(Xk)[:, 1]))
        loss.append(log_loss(y, mk.predict_proba(Xk)))
    assert ece[-1] > ece[0] and loss[-1] > loss[0], (ece, loss)


def test_gaussian_nb_var_smoothing_as_sklearn(cancer):
    X, y = cancer
    for vs in (1e-9, 1e-3, 0.1):
        m = GaussianNB(var_smoothing=vs).fit(X, y)
        ref = sk.GaussianNB(var_smoothing=vs).fit(X, y)
        assert abs(m.epsilon_ - ref.epsilon_) <= 1e-12 * ref.epsilon_
        np.testing.assert_allclose(m.predict_proba(X), ref.predict_proba(X), atol=1e-10)


def test_multinomial_nb_rejects_negative_counts():
    with pytest.raises(ValueError, match="Negative values"):
        MultinomialNB().fit(np.array([[1.0, -1.0], [0.0, 2.0]]), np.array([0, 1]))


@pytest.mark.parametrize("name", ["MultinomialNB", "BernoulliNB", "GaussianNB"])
def test_partial_fit_in_batches_equals_sklearn_fit(xp, digits, name):
    """Two partial_fit batches (the first missing classes) give scikit-learn's
    single fit: counts add, Gaussian moments pool (Chan et al.)."""
    X, y = digits
    X, y = X[:600], y[:600]
    w = np.random.default_rng(0).uniform(0.5, 2.0, y.shape[0])
    ours = getattr(__import__("xpml.naive_bayes").naive_bayes, name)()
    first = y < 5  # the first batch sees only half the classes
    for rows in (first, ~first):
        ours.partial_fit(
            xp.asarray(X[rows]),
            xp.asarray(y[rows]),
            classes=np.unique(y),
            sample_weight=xp.asarray(w[rows]),
        )
    ref = getattr(sk, name)().fit(X, y, sample_weight=w)
    if name == "GaussianNB":  # ε comes from the last batch: compare the moments
        np.testing.assert_allclose(xp.to_numpy(ours.theta_), ref.theta_, atol=1e-10)
        np.testing.assert_allclose(
            xp.to_numpy(ours.var_) - ours.epsilon_,
            ref.var_ - ref.epsilon_,
            atol=1e-9,
        )
    else:
        np.testing.assert_allclose(
            xp.to_numpy(ours.predict_proba(xp.asarray(X))),
            ref.predict_proba(X),
            rtol=0,
            atol=1e-8,
        )
    np.testing.assert_allclose(
        xp.to_numpy(ours.class_count_), ref.class_count_, rtol=1e-12
    )


def test_partial_fit_classes_rules():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.raises(ValueError, match="classes must be passed on the first"):
        MultinomialNB().partial_fit(X, [0, 1])
    nb = MultinomialNB().partial_fit(X, [0, 1], classes=[0, 1, 2])
    with pytest.raises(ValueError, match="not the same as on last call"):
        nb.partial_fit(X, [0, 1], classes=[0, 1])
    with pytest.raises(ValueError, match="X has 3 features, but MultinomialNB"):
        nb.partial_fit(np.ones((2, 3)), [0, 1])


def test_force_alpha_false_clips_alpha_as_sklearn():
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    with pytest.warns(UserWarning, match="alpha too small"):
        m = MultinomialNB(alpha=0.0, force_alpha=False).fit(X, [0, 1])
    ref = sk.MultinomialNB(alpha=0.0, force_alpha=False).fit(X, [0, 1])
    np.testing.assert_allclose(m.feature_log_prob_, ref.feature_log_prob_)


@pytest.mark.parametrize("name", ["MultinomialNB", "BernoulliNB"])
def test_discrete_nb_fits_a_single_class_as_sklearn(name):
    X = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    ours = getattr(__import__("xpml.naive_bayes").naive_bayes, name)().fit(X, [1, 1])
    ref = getattr(sk, name)().fit(X, [1, 1])
    np.testing.assert_allclose(ours.feature_log_prob_, ref.feature_log_prob_)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
