"""LDA and QDA against scikit-learn, and the LDA posterior as a logistic function."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from scipy.stats import multivariate_normal
from sklearn import discriminant_analysis as sk
from sklearn.datasets import load_wine

from xpml.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)


@pytest.fixture(scope="module")
def wine():
    return load_wine(return_X_y=True)


@pytest.mark.parametrize("shrinkage", [None, 0.25])
def test_lda_predict_proba_equals_sklearn_on_wine(xp, wine, shrinkage):
    X, y = wine
    m = LinearDiscriminantAnalysis(solver="lsqr", shrinkage=shrinkage).fit(
        xp.asarray(X), xp.asarray(y)
    )
    ref = sk.LinearDiscriminantAnalysis(solver="lsqr", shrinkage=shrinkage).fit(X, y)
    P = m.predict_proba(xp.asarray(X))
    assert xp.is_native(P)
    np.testing.assert_allclose(xp.to_numpy(P), ref.predict_proba(X), rtol=0, atol=1e-8)
    np.testing.assert_allclose(xp.to_numpy(m.covariance_), ref.covariance_, rtol=1e-10)
    np.testing.assert_array_equal(xp.to_numpy(m.predict(xp.asarray(X))), ref.predict(X))


def test_lda_priors_equal_sklearn(wine):
    X, y = wine
    pri = [0.5, 0.3, 0.2]
    for solver in ("svd", "lsqr", "eigen"):
        m = LinearDiscriminantAnalysis(solver=solver, priors=pri).fit(X, y)
        ref = sk.LinearDiscriminantAnalysis(solver=solver, priors=pri).fit(X, y)
        np.testing.assert_allclose(m.predict_proba(X), ref.predict_proba(X), atol=1e-8)


@pytest.mark.parametrize("reg_param", [0.0, 0.1])
def test_qda_predict_proba_equals_sklearn_on_wine(xp, wine, reg_param):
    X, y = wine
    m = QuadraticDiscriminantAnalysis(reg_param=reg_param).fit(
        xp.asarray(X), xp.asarray(y)
    )
    ref = sk.QuadraticDiscriminantAnalysis(reg_param=reg_param).fit(X, y)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X))),
        ref.predict_proba(X),
        rtol=0,
        atol=1e-8,
    )
    np.testing.assert_allclose(
        xp.to_numpy(m.decision_function(xp.asarray(X))),
        ref.decision_function(X),
        rtol=1e-9,
    )


def test_lda_posterior_is_logistic_of_theta(xp, wine):
    """Bayes' rule with the fitted Gaussians equals σ(θ₀ + θᵀx) to 1e-12 (standardised
    wine, classes 0 and 1: on the raw scale, proline ~10³, the reference densities
    themselves round at ~1e-12)."""
    X, y = wine
    keep = y < 2
    X2, y2 = X[keep], y[keep]
    X2 = (X2 - X2.mean(0)) / X2.std(0)
    m = LinearDiscriminantAnalysis(store_covariance=True).fit(
        xp.asarray(X2), xp.asarray(y2)
    )
    theta, theta0 = xp.to_numpy(m.theta_), float(xp.to_numpy(m.theta0_))
    mu, S, pri = (
        xp.to_numpy(m.means_),
        xp.to_numpy(m.covariance_),
        xp.to_numpy(m.priors_),
    )
    # generative posterior, from the two class densities and the priors
    log_odds = (
        multivariate_normal(mu[1], S).logpdf(X2)
        + np.log(pri[1])
        - multivariate_normal(mu[0], S).logpdf(X2)
        - np.log(pri[0])
    )
    logistic = expit(theta0 + X2 @ theta)
    np.testing.assert_allclose(logistic, expit(log_odds), rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X2)))[:, 1], logistic, rtol=0, atol=1e-12
    )
    # θ in closed form
    np.testing.assert_allclose(theta, np.linalg.solve(S, mu[1] - mu[0]), rtol=1e-8)


def test_qda_singular_class_covariance_is_refused_as_sklearn():
    """n_k ≤ d: the "svd" solver refuses (LinAlgError, a ValueError), even with
    reg_param, as scikit-learn; "eigen" with shrinkage fits and agrees."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 6))
    y = np.repeat([0, 1], 5)  # n_k = 5 < d = 6
    for est in (QuadraticDiscriminantAnalysis(), sk.QuadraticDiscriminantAnalysis()):
        with pytest.raises(ValueError, match="number of samples in each class"):
            est.set_params(reg_param=0.5).fit(X, y)
    m = QuadraticDiscriminantAnalysis(solver="eigen", shrinkage="auto").fit(X, y)
    ref = sk.QuadraticDiscriminantAnalysis(solver="eigen", shrinkage="auto").fit(X, y)
    np.testing.assert_allclose(m.predict_proba(X), ref.predict_proba(X), atol=1e-10)


@pytest.mark.parametrize(
    "solver, shrinkage",
    [
        ("svd", None),
        ("lsqr", "auto"),
        ("eigen", None),
        ("eigen", "auto"),
        ("eigen", 0.3),
    ],
)
def test_lda_solvers_equal_sklearn_on_wine(xp, wine, solver, shrinkage):
    X, y = wine
    kw = dict(solver=solver, shrinkage=shrinkage, store_covariance=True)
    m = LinearDiscriminantAnalysis(**kw).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.LinearDiscriminantAnalysis(**kw).fit(X, y)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X))),
        ref.predict_proba(X),
        rtol=0,
        atol=1e-8,
    )
    np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(xp.to_numpy(m.covariance_), ref.covariance_, rtol=1e-9)
    if solver != "lsqr":  # the directions are defined up to sign
        np.testing.assert_allclose(
            np.abs(xp.to_numpy(m.transform(xp.asarray(X)))),
            np.abs(ref.transform(X)),
            rtol=1e-7,
            atol=1e-9,
        )
        np.testing.assert_allclose(
            xp.to_numpy(m.explained_variance_ratio_),
            ref.explained_variance_ratio_,
            rtol=1e-9,
        )


@pytest.mark.parametrize("solver", ["svd", "eigen"])
def test_qda_solvers_equal_sklearn_on_wine(xp, wine, solver):
    X, y = wine
    kw = dict(solver=solver, store_covariance=True)
    if solver == "eigen":
        kw["shrinkage"] = 0.1
    m = QuadraticDiscriminantAnalysis(**kw).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.QuadraticDiscriminantAnalysis(**kw).fit(X, y)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X))),
        ref.predict_proba(X),
        rtol=0,
        atol=1e-8,
    )
    for a, b in zip(m.covariance_, ref.covariance_):
        np.testing.assert_allclose(xp.to_numpy(a), b, rtol=1e-9, atol=1e-12)


def test_lda_sample_weight_is_repetition():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 3)) + np.repeat(np.eye(3), 10, axis=0)
    y = np.repeat([0, 1, 2], 10)
    w = rng.integers(1, 4, size=30)
    for solver, shrinkage in [("svd", None), ("lsqr", "auto"), ("eigen", 0.2)]:
        est = LinearDiscriminantAnalysis(solver=solver, shrinkage=shrinkage)
        a = est.fit(X, y, sample_weight=w.astype(float)).predict_proba(X)
        b = est.fit(np.repeat(X, w, axis=0), np.repeat(y, w)).predict_proba(X)
        np.testing.assert_allclose(a, b, atol=1e-12)
