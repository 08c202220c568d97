"""scikit-learn's parameters of the linear models (issue 12): each compared with
scikit-learn at a stated tolerance."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
import sklearn.linear_model as sk

from xpml.linear_model import (
    Lasso,
    LinearRegression,
    LogisticRegression,
    Perceptron,
    Ridge,
)


def _regression(n=60, d=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=n) + 1.0
    return X, y


def _np(a, xp):
    return xp.to_numpy(a) if hasattr(xp, "to_numpy") else np.asarray(a)


# ------------------------------------------------------------------- ridge
@pytest.mark.parametrize(
    "solver", ["auto", "svd", "cholesky", "lsqr", "sparse_cg", "sag", "saga"]
)
def test_ridge_sklearn_solver_names(xp, solver):
    X, y = _regression()
    m = Ridge(alpha=2.0, solver=solver).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.Ridge(alpha=2.0, solver="svd").fit(X, y)
    np.testing.assert_allclose(_np(m.coef_, xp), ref.coef_, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(float(m.intercept_), ref.intercept_, atol=1e-10)


def test_ridge_positive_equals_sklearn(xp):
    X, y = _regression(seed=3)
    m = Ridge(alpha=1.0, positive=True).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.Ridge(alpha=1.0, positive=True, tol=1e-12).fit(X, y)
    assert float(np.min(_np(m.coef_, xp))) >= 0.0
    np.testing.assert_allclose(_np(m.coef_, xp), ref.coef_, atol=1e-5)


def test_ridge_positive_solver_rules():
    X, y = _regression()
    with pytest.raises(ValueError, match="positive"):
        Ridge(solver="svd", positive=True).fit(X, y)
    with pytest.raises(ValueError, match="lbfgs"):
        Ridge(solver="lbfgs").fit(X, y)


def test_ridge_alpha_per_target_and_sparse():
    X, y = _regression()
    Y = np.c_[y, 2.0 * y - 1.0]
    m = Ridge(alpha=[0.5, 3.0]).fit(sp.csr_matrix(X), Y)
    ref = sk.Ridge(alpha=[0.5, 3.0]).fit(X, Y)
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-10)
    np.testing.assert_allclose(m.predict(sp.csr_matrix(X)), ref.predict(X), rtol=1e-10)


def test_linear_regression_positive_and_scalar_weight():
    X, y = _regression(seed=4)
    m = LinearRegression(positive=True).fit(X, y, sample_weight=2.0)
    ref = sk.LinearRegression(positive=True).fit(X, y, sample_weight=2.0)
    np.testing.assert_allclose(m.coef_, ref.coef_, atol=1e-7)
    np.testing.assert_allclose(m.intercept_, ref.intercept_, atol=1e-7)


# ------------------------------------------------------------------- lasso
@pytest.mark.parametrize(
    "kw", [{}, {"positive": True}, {"selection": "random", "random_state": 0}]
)
def test_lasso_params_and_dual_gap(xp, kw):
    X, y = _regression(seed=1)
    m = Lasso(alpha=0.1, tol=1e-10, **kw).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.Lasso(alpha=0.1, tol=1e-10, **kw).fit(X, y)
    np.testing.assert_allclose(_np(m.coef_, xp), ref.coef_, atol=1e-8)
    # the gap in scikit-learn's scale (not n times larger)
    assert m.dual_gap_ <= 1e-8 and ref.dual_gap_ <= 1e-8


# ---------------------------------------------------------------- logistic
def _iris(binary):
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    return X, ((y == 1).astype(int) if binary else y)


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("class_weight", [None, "balanced", {0: 2.0, 1: 0.5}])
def test_logistic_class_weight(xp, binary, class_weight):
    X, y = _iris(binary)
    if not binary and class_weight is not None:
        y = np.where(np.arange(150) < 20, 0, y)  # unbalanced
    m = LogisticRegression(class_weight=class_weight).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.LogisticRegression(class_weight=class_weight, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(_np(m.coef_, xp), ref.coef_, rtol=1e-4, atol=1e-5)
    assert m.n_iter_.shape == ref.n_iter_.shape == (1,)


@pytest.mark.parametrize("l1_ratio", [1.0, 0.5])
def test_logistic_l1_elasticnet(l1_ratio):
    X, y = _iris(binary=True)
    m = LogisticRegression(l1_ratio=l1_ratio, solver="saga", C=0.3).fit(X, y)
    ref = sk.LogisticRegression(
        l1_ratio=l1_ratio, solver="saga", C=0.3, tol=1e-10, max_iter=10000
    ).fit(X, y)
    np.testing.assert_allclose(m.coef_, ref.coef_, atol=2e-4)
    np.testing.assert_allclose(m.intercept_, ref.intercept_, atol=2e-4)


def test_logistic_solver_rules_and_warm_start():
    X, y = _iris(binary=True)
    with pytest.raises(ValueError, match="supports only"):
        LogisticRegression(l1_ratio=1.0, solver="lbfgs").fit(X, y)
    m = LogisticRegression(warm_start=True, max_iter=100).fit(X, y)
    first = m.n_iter_[0]
    m.fit(X, y)
    assert m.n_iter_[0] <= first


# scikit-learn's own test_max_iter patterns, per solver
_MAX_ITER_PHRASES = [
    ("newton-cg", "newton-cg failed to converge.* Increase the number of iterations."),
    ("liblinear", "Liblinear failed to converge, increase the number of iterations."),
    ("sag", "The max_iter was reached which means the coef_ did not converge"),
    ("saga", "The max_iter was reached which means the coef_ did not converge"),
    ("lbfgs", "lbfgs failed to converge"),
    ("newton-cholesky", "Newton solver did not converge after [0-9]* iterations"),
]


@pytest.mark.parametrize("solver, phrase", _MAX_ITER_PHRASES)
def test_logistic_convergence_warning_wording(solver, phrase):
    from sklearn.exceptions import ConvergenceWarning

    X, y = _iris(binary=True)
    m = LogisticRegression(solver=solver, max_iter=1, tol=1e-15)
    with pytest.warns(ConvergenceWarning, match=phrase) as rec:
        m.fit(X, y)
    assert m.n_iter_[0] == 1
    # scikit-learn's phrase first, xpml's explanation after it
    text = next(str(r.message) for r in rec if "xpml:" in str(r.message))
    assert text.index("xpml:") > 0 and "max_iter=1" in text
    with pytest.warns(ConvergenceWarning, match=phrase):  # the reference agrees
        sk.LogisticRegression(solver=solver, max_iter=1, tol=1e-15).fit(X, y)


def test_logistic_own_solver_warning_unchanged():
    from sklearn.exceptions import ConvergenceWarning

    X, y = _iris(binary=True)
    with pytest.warns(ConvergenceWarning, match="^xpml: solver='gd' did not reach"):
        LogisticRegression(solver="gd", max_iter=2, tol=1e-15).fit(X, y)


@pytest.mark.parametrize(
    "kw, category, phrase",
    [
        ({"penalty": "l2"}, FutureWarning, "'penalty' was deprecated"),
        ({"penalty": None}, FutureWarning, "'penalty' was deprecated"),
        ({"l1_ratio": None}, FutureWarning, "'l1_ratio=None' was deprecated"),
        ({"n_jobs": 1}, FutureWarning, "'n_jobs' has no effect"),
        (
            {"penalty": "l1", "solver": "saga", "l1_ratio": 0.5},
            UserWarning,
            r"l1_ratio parameter is only used when penalty is 'elasticnet'\. "
            r"Got \(penalty=l1\)",
        ),
        (
            {"penalty": "l1", "solver": "saga", "l1_ratio": 0.0},
            UserWarning,
            "Inconsistent values: penalty=l1 with l1_ratio=0.0",
        ),
        (
            {"penalty": "l2", "solver": "saga", "l1_ratio": 1.0},
            UserWarning,
            "Inconsistent values: penalty=l2 with l1_ratio=1.0",
        ),
        ({"penalty": None, "C": 4}, UserWarning, "Setting penalty=None will ignore"),
    ],
)
def test_logistic_parameter_warnings_as_sklearn(kw, category, phrase):
    X, y = _iris(binary=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=Warning)
        ref = sk.LogisticRegression(max_iter=10000, **kw).fit(X, y)
        m = LogisticRegression(**kw).fit(X, y)
    with pytest.warns(category, match=phrase):
        LogisticRegression(**kw).fit(X, y)
    with pytest.warns(category, match=phrase):  # the reference agrees
        sk.LogisticRegression(max_iter=10000, **kw).fit(X, y)
    np.testing.assert_allclose(m.coef_, ref.coef_, rtol=1e-3, atol=1e-3)


def test_logistic_defaults_warn_nothing():
    X, y = _iris(binary=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LogisticRegression().fit(X, y)
        LogisticRegression(l1_ratio=1.0, solver="saga", C=0.5).fit(X, y)
        LogisticRegression(C=np.inf).fit(X, y)


def test_logistic_liblinear_multiclass_raises():
    X, y = _iris(binary=False)
    msg = "The 'liblinear' solver does not support multiclass classification"
    with pytest.raises(ValueError, match=msg):
        LogisticRegression(solver="liblinear").fit(X, y)
    with pytest.raises(ValueError, match=msg):  # the reference agrees
        sk.LogisticRegression(solver="liblinear").fit(X, y)
    LogisticRegression(solver="liblinear").fit(*_iris(binary=True))  # two: fine


def test_lasso_convergence_wording():
    from sklearn.exceptions import ConvergenceWarning

    X, y = _regression(seed=2)
    phrase = "Objective did not converge. You might want to increase the number of iterations."
    with pytest.warns(ConvergenceWarning, match=phrase) as rec:
        Lasso(alpha=1e-4, tol=1e-14, max_iter=1).fit(X, y)
    assert any(
        "xpml: Lasso did not converge in max_iter=1" in str(r.message) for r in rec
    )
    with pytest.warns(ConvergenceWarning, match=phrase):
        sk.Lasso(alpha=1e-4, tol=1e-14, max_iter=1).fit(X, y)


# --------------------------------------------------------------- perceptron
def test_perceptron_defaults_and_stopping_equal_sklearn():
    X, y = _iris(binary=False)
    m = Perceptron(shuffle=False).fit(X, y)
    ref = sk.Perceptron(shuffle=False).fit(X, y)
    assert m.max_iter == ref.max_iter == 1000
    assert m.n_iter_ == ref.n_iter_
    np.testing.assert_allclose(m.coef_, ref.coef_, atol=1e-10)


def test_perceptron_partial_fit_equals_sklearn():
    X, y = _iris(binary=False)
    m, ref = Perceptron(shuffle=False), sk.Perceptron(shuffle=False)
    for a, b in ((0, 75), (75, 150)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m.partial_fit(X[a:b], y[a:b], classes=np.unique(y))
            ref.partial_fit(X[a:b], y[a:b], classes=np.unique(y))
    np.testing.assert_allclose(m.coef_, ref.coef_, atol=1e-10)
    np.testing.assert_allclose(m.intercept_, ref.intercept_, atol=1e-10)


def test_perceptron_class_weight_in_order():
    X, y = _iris(binary=True)
    kw = {
        "shuffle": False,
        "class_weight": {0: 1.0, 1: 3.0},
        "tol": None,
        "max_iter": 3,
    }
    m = Perceptron(**kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk.Perceptron(**kw).fit(X, y)
    np.testing.assert_allclose(m.coef_, ref.coef_, atol=1e-10)
