"""Overflow and non-finite intermediates (issue 11.4).

Inputs are finite, so a NaN or infinity inside a fit comes from an overflow (at
``X × 1e300`` every square overflows float64) or a failed decomposition. Each
estimator must say so with a ``ValueError`` naming the cause, not return NaN
coefficients, a silently wrong model, or let ``LinAlgError: SVD did not
converge`` escape raw. Hyperparameters where infinity is meaningless are
refused by the parameter checks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from xpml.discriminant_analysis import (
    LinearDiscriminantAnalysis,
    QuadraticDiscriminantAnalysis,
)
from xpml.exceptions import InvalidParameterError
from xpml.kernel_approximation import Nystroem, RandomFourierFeatures
from xpml.kernel_ridge import KernelRidge
from xpml.kernels import gram
from xpml.linear_model import (
    LinearRegression,
    LogisticRegression,
    Ridge,
    SequentialFeatureSelector,
)
from xpml.naive_bayes import BernoulliNB
from xpml.online import AROW, PassiveAggressive

CAUSE = r"non-finite values in the .*overflow float64.*scale the features"


def _huge(n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y_cls = (X[:, 0] > 0).astype(np.int64)
    y_reg = X @ np.arange(1.0, d + 1.0) + 0.1 * rng.standard_normal(n)
    return X * 1e300, y_cls, y_reg


CASES = {
    "Ridge": (Ridge, "reg"),
    "Ridge-dual": (lambda: Ridge(solver="dual"), "reg"),
    "LDA": (LinearDiscriminantAnalysis, "cls"),
    "QDA": (QuadraticDiscriminantAnalysis, "cls"),
    "LogisticRegression": (LogisticRegression, "cls"),
    "LogisticRegression-gd": (lambda: LogisticRegression(solver="gd"), "cls"),
    "KernelRidge-linear": (KernelRidge, "reg"),
    "KernelRidge-rbf": (lambda: KernelRidge(kernel="rbf"), "reg"),
    "KernelRidge-poly": (lambda: KernelRidge(kernel="poly"), "reg"),
    "Nystroem": (lambda: Nystroem(n_components=10, random_state=0), None),
    "Nystroem-linear": (
        lambda: Nystroem(kernel="linear", n_components=10, random_state=0),
        None,
    ),
    "AROW": (AROW, "cls"),
    "AROW-diag": (lambda: AROW(covariance="diag"), "cls"),
    "PassiveAggressive": (PassiveAggressive, "cls"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fit_at_1e300_names_the_overflow(name):
    make, target = CASES[name]
    X, y_cls, y_reg = _huge()
    y = {"cls": y_cls, "reg": y_reg, None: None}[target]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's overflow notes
        with pytest.raises(ValueError, match=CAUSE):
            make().fit(X, y)


@pytest.mark.parametrize("name", ["SVC", "LinearSVC"])
def test_svm_fit_at_1e300_names_the_overflow(name):
    from xpml import svm

    X, y, _ = _huge()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match="overflow"):
            getattr(svm, name)().fit(X, y)


def test_linear_regression_at_1e300_is_right_or_refuses():
    """The SVD scales internally, so least squares at 1e300 is still exact
    (scikit-learn agrees); the result must not be NaN."""
    X, _, y = _huge()
    reg = LinearRegression().fit(X, y)
    ref = np.linalg.lstsq(np.c_[X / 1e300, np.ones(len(y))], y, rcond=None)[0]
    np.testing.assert_allclose(reg.coef_ * 1e300, ref[:-1], rtol=1e-8)


def test_ridge_svd_at_1e300_is_exact():
    """The SVD solver's filter ``1/(s + α/s)`` never squares ``s``: at 1e300 it
    returns least squares (α is negligible against s² ~ 1e600), not zeros."""
    X, _, y = _huge()
    coef = Ridge(solver="svd").fit(X, y).coef_
    ref = np.linalg.lstsq(np.c_[X / 1e300, np.ones(len(y))], y, rcond=None)[0]
    np.testing.assert_allclose(coef * 1e300, ref[:-1], rtol=1e-8)


def test_qda_overflow_is_not_blamed_on_collinearity():
    X, y, _ = _huge()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError) as info:
            QuadraticDiscriminantAnalysis().fit(X, y)
    assert "collinear" not in str(info.value)
    assert "overflow" in str(info.value)


def test_linalg_error_is_chained_not_raw():
    """The library's LinAlgError is the cause, not the error the user sees."""
    X, y, _ = _huge()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(ValueError, match=CAUSE) as info:
            LinearDiscriminantAnalysis().fit(X, y)
    assert "did not converge" not in str(info.value)


@pytest.mark.parametrize(
    "est",
    [
        Ridge(alpha=float("inf")),
        Ridge(alpha=float("nan")),
        RandomFourierFeatures(gamma=float("inf")),
        BernoulliNB(binarize=float("nan")),
        KernelRidge(alpha=float("inf")),
    ],
    ids=["ridge-alpha-inf", "ridge-alpha-nan", "rff-gamma-inf", "bnb-nan", "kr-inf"],
)
def test_meaningless_infinite_hyperparameters_are_refused(est):
    X, y, _ = _huge()
    with pytest.raises(InvalidParameterError):
        est.fit(X / 1e300, y)


def test_kernel_ridge_alpha_array_must_be_finite():
    X, _, y = _huge()
    Y = np.c_[y, y]
    with pytest.raises(ValueError, match="finite"):
        KernelRidge(alpha=np.array([1.0, np.inf])).fit(X / 1e300, Y)


def test_infinite_memory_budget_is_refused():
    X = np.random.default_rng(0).standard_normal((5, 2))
    with pytest.raises(ValueError, match="memory_budget"):
        gram(X, kernel="rbf", memory_budget=float("inf"))


@pytest.mark.parametrize("est", [AROW(n_epochs=0), PassiveAggressive(n_epochs=-1)])
def test_online_n_epochs_must_be_positive(est):
    X, y, _ = _huge()
    with pytest.raises(InvalidParameterError, match="n_epochs"):
        est.fit(X / 1e300, y)


def test_sequential_feature_selector_bad_cv_is_named():
    X, _, y = _huge()
    sfs = SequentialFeatureSelector(Ridge(), n_features_to_select=1, cv="bogus")
    with pytest.raises(InvalidParameterError, match="'cv'"):
        sfs.fit(X / 1e300, y)
