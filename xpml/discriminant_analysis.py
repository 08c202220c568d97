"""Gaussian discriminant analysis: LDA (shared covariance) and QDA (one per class).

Both are generative: class priors ``π_k``, class means ``μ_k`` and Gaussian
class-conditional densities, turned into posteriors by Bayes' rule. With a
shared covariance ``Σ`` the log-odds are linear in ``x``; for two classes the
posterior is exactly the logistic function ``P(y = 1 | x) = σ(θ₀ + θᵀx)`` with

    θ  = Σ⁻¹ (μ₁ − μ₀),
    θ₀ = −½ μ₁ᵀΣ⁻¹μ₁ + ½ μ₀ᵀΣ⁻¹μ₀ + log(π₁ / π₀).
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from xpml._backend import to_numpy
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.linear_model._base import (
    LinearClassifierMixin,
    check_finite_result,
    linalg_errors,
    logsumexp,
    non_finite_error,
    psd_lstsq,
    sigmoid,
)
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import eps
from xpml.utils._param_validation import Interval
from xpml.utils.validation import decode_labels

__all__ = ["LinearDiscriminantAnalysis", "QuadraticDiscriminantAnalysis"]


def _class_stats(X, codes, K, sw, /, *, xp):
    """Weighted class counts (K,) and means (K, d), and the one-hot matrix (n, K).
    A class with zero total weight gets a zero mean."""
    onehot = xp.astype(
        codes[:, None] == xp.arange(K, device=_device(X))[None, :], X.dtype
    )
    W = onehot * sw[:, None]
    counts = xp.sum(W, axis=0)
    means = (W.T @ X) / xp.where(counts > 0, counts, xp.ones_like(counts))[:, None]
    return counts, means, onehot


def _check_weighted_classes(counts, classes, /, *, xp):
    """At least two classes need a positive total sample weight."""
    if int(xp.sum(xp.astype(counts > 0, xp.int64))) < 2:
        raise ValueError(
            f"only one class has a positive total sample weight (classes "
            f"{to_numpy(classes).tolist()!r}); at least two classes are needed"
        )


def _priors(param, counts, /, *, xp, name):
    """Priors from the ``priors`` parameter (normalised) or the class frequencies."""
    K = counts.shape[0]
    if param is None:
        return counts / xp.sum(counts)
    p = np.asarray(
        to_numpy(param) if hasattr(param, "shape") else param, dtype=np.float64
    )
    if p.shape != (K,):
        raise ValueError(
            f"priors must have one entry per class, shape ({K},); got {p.shape}"
        )
    if np.any(p < 0) or p.sum() <= 0:
        raise ValueError(
            f"priors must be non-negative and not all zero; got {p.tolist()}"
        )
    return xp.asarray(p / p.sum(), dtype=counts.dtype, device=_device(counts))


def _softmax_proba(Z, /, *, xp):
    return xp.exp(Z - logsumexp(Z, xp=xp, axis=1))


class LinearDiscriminantAnalysis(LinearClassifierMixin, ClassifierMixin, BaseEstimator):
    """Linear discriminant analysis = Gaussian discriminant analysis with one
    shared covariance, fitted in closed form by maximum likelihood.

    Parameters
    ----------
    priors : array-like (K,) or None, default=None
        Class priors (normalised to sum to one); None uses class frequencies.
    shrinkage : float in [0, 1] or None, default=None
        Shrink the covariance toward a multiple of the identity:
        ``(1 − s) Σ + s · tr(Σ)/d · I``.

    Attributes
    ----------
    classes_ : array (K,)
    priors_ : array (K,)
    means_ : array (K, d)
    covariance_ : array (d, d)
        The pooled maximum-likelihood covariance ``Σ_k π_k Σ_k`` with ``Σ_k``
        the class's covariance (divisor ``n_k``), shrunk when asked (the same
        estimate as scikit-learn's ``solver="lsqr"``).
    coef_ : array (1, d) for two classes, (K, d) otherwise
    intercept_ : array (1,) or (K,)
    theta_ : array (d,)
        Two classes only: ``θ = Σ⁻¹(μ₁ − μ₀)`` (equals ``coef_[0]``).
    theta0_ : float array ()
        Two classes only: ``θ₀`` (equals ``intercept_[0]``), so that
        ``predict_proba(X)[:, 1] = σ(θ₀ + X θ)``.
    n_features_in_ : int

    Notes
    -----
    Class scores ``δ_k(x) = xᵀΣ⁻¹μ_k − ½ μ_kᵀΣ⁻¹μ_k + log π_k``; posteriors are
    their softmax (for two classes the logistic function of ``δ₁ − δ₀``). A
    singular ``Σ`` (``d ≥ n`` or collinear features) is inverted on its range
    (pseudo-inverse, through the eigen-decomposition).

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.discriminant_analysis import LinearDiscriminantAnalysis
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(0, 1, (20, 2)), rng.normal(3, 1, (20, 2))])
    >>> y = np.repeat([0, 1], 20)
    >>> lda = LinearDiscriminantAnalysis().fit(X, y)
    >>> lda.predict(np.array([[0.1, 0.0], [3.0, 3.0]])).tolist()
    [0, 1]
    >>> z = lda.theta0_ + X @ lda.theta_
    >>> bool(np.allclose(lda.predict_proba(X)[:, 1], 1 / (1 + np.exp(-z))))
    True
    """

    _parameter_constraints = {
        "priors": [None, "array-like"],
        "shrinkage": [None, Interval(Real, 0, 1, closed="both")],
    }
    _xpml_tags = {}

    def __init__(self, *, priors=None, shrinkage=None):
        self.priors = priors
        self.shrinkage = shrinkage

    def fit(self, X, y, sample_weight=None):
        """Estimate priors, means and the pooled covariance; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        d = X.shape[1]
        counts, means, onehot = _class_stats(X, codes, K, sw, xp=xp)
        _check_weighted_classes(counts, self.classes_, xp=xp)
        safe = xp.where(counts > 0, counts, xp.ones_like(counts))
        priors = _priors(self.priors, counts, xp=xp, name="priors")
        Xc = X - onehot @ means
        row_w = sw * (onehot @ (priors / safe))  # π_k / n_k for each row
        Sigma = (Xc * row_w[:, None]).T @ Xc
        if self.shrinkage:
            s = float(self.shrinkage)
            mu = xp.sum(xp.linalg.diagonal(Sigma)) / d
            Sigma = (1.0 - s) * Sigma + s * mu * xp.eye(
                d, dtype=X.dtype, device=ctx.device
            )
        owner = type(self).__name__
        with linalg_errors(X, xp=xp, what="covariance", owner=owner):
            Theta = psd_lstsq(Sigma, means.T, xp=xp)  # (d, K): Σ⁺ μ_k
        check_finite_result(Theta, X, xp=xp, what="coefficients", owner=owner)
        coef = Theta.T
        intercept = -0.5 * xp.sum(means * coef, axis=1) + xp.log(priors)
        self.priors_ = priors
        self.means_ = means
        self.covariance_ = Sigma
        if K == 2:
            self.coef_ = (coef[1, :] - coef[0, :])[None, :]
            self.intercept_ = (intercept[1] - intercept[0])[None]
            self.theta_ = self.coef_[0, :]
            self.theta0_ = self.intercept_[0]
        else:
            self.coef_ = coef
            self.intercept_ = intercept
        return self._fitted(ctx)

    def _proba(self, X, ctx):
        xp = ctx.xp
        Z = X @ ctx.take(self.coef_).T + ctx.take(self.intercept_)
        if Z.shape[1] == 1:
            p = sigmoid(Z[:, 0], xp=xp)
            return xp.stack([1.0 - p, p], axis=1)
        return _softmax_proba(Z, xp=xp)

    def predict_proba(self, X):
        """Posterior class probabilities (n, K)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(self._proba(X, ctx))

    def predict_log_proba(self, X):
        """Log posteriors (n, K)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = X @ ctx.take(self.coef_).T + ctx.take(self.intercept_)
        if Z.shape[1] == 1:
            Z = xp.concat([xp.zeros_like(Z), Z], axis=1)
        return ctx.out(Z - logsumexp(Z, xp=xp, axis=1))


class QuadraticDiscriminantAnalysis(ClassifierMixin, BaseEstimator):
    """Quadratic discriminant analysis: one Gaussian per class, its own covariance.

    Parameters
    ----------
    priors : array-like (K,) or None, default=None
    reg_param : float in [0, 1], default=0.0
        Regularises each class covariance's eigenvalues: ``(1 − r) λ + r``
        (scikit-learn's rule).

    Attributes
    ----------
    classes_ : array (K,)
    priors_ : array (K,)
    means_ : array (K, d)
    rotations_ : list of K arrays (d, d)
        Principal axes of each class (right singular vectors of its centred data).
    scalings_ : list of K arrays (d,)
        Regularised maximum-likelihood variances along them (divisor ``n_k``).
    covariance_ : array (K, d, d)
        ``R_k diag(scalings_k) R_kᵀ`` (the regularised class covariances).
    n_features_in_ : int

    Notes
    -----
    ``δ_k(x) = −½ log|Σ_k| − ½ (x − μ_k)ᵀΣ_k⁻¹(x − μ_k) + log π_k``, posteriors
    their softmax. Computed through each class's SVD as scikit-learn does. A
    singular class covariance (``n_k ≤ d`` or collinear features) with
    ``reg_param = 0`` raises ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.discriminant_analysis import QuadraticDiscriminantAnalysis
    >>> rng = np.random.default_rng(0)
    >>> X = np.vstack([rng.normal(0, 0.5, (20, 2)), rng.normal(3, 2.0, (20, 2))])
    >>> y = np.repeat([0, 1], 20)
    >>> qda = QuadraticDiscriminantAnalysis().fit(X, y)
    >>> qda.predict(np.array([[0.0, 0.0], [4.0, 4.0]])).tolist()
    [0, 1]
    """

    _parameter_constraints = {
        "priors": [None, "array-like"],
        "reg_param": [Interval(Real, 0, 1, closed="both")],
    }
    _xpml_tags = {}

    def __init__(self, *, priors=None, reg_param=0.0):
        self.priors = priors
        self.reg_param = reg_param

    def fit(self, X, y):
        """Estimate priors, means and one covariance per class; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(X, y, target="classes")
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        d = X.shape[1]
        host = to_numpy(codes)  # one transfer
        counts, means, _ = _class_stats(X, codes, K, sw, xp=xp)
        if int(np.bincount(host, minlength=K).min()) < 2:
            raise ValueError(
                "y has a class with a single sample; QuadraticDiscriminantAnalysis "
                "needs at least two samples per class to estimate its covariance"
            )
        priors = _priors(self.priors, counts, xp=xp, name="priors")
        r = float(self.reg_param)
        u = eps(X.dtype, xp)
        rotations, scalings, covs = [], [], []
        for k in range(K):
            idx = xp.asarray(np.flatnonzero(host == k), device=ctx.device)
            Xk = xp.take(X, idx, axis=0) - means[k, :]
            nk = int(Xk.shape[0])
            with linalg_errors(X, xp=xp, what="class SVD", owner=type(self).__name__):
                _, S, Vt = xp.linalg.svd(Xk, full_matrices=nk < d)
            S2 = (S * S) / nk  # ML variances
            if nk < d:  # unseen directions
                S2 = xp.concat(
                    [S2, xp.zeros((d - nk,), dtype=X.dtype, device=ctx.device)]
                )
            S2 = (1.0 - r) * S2 + r
            lo, hi = to_numpy(xp.stack([xp.min(S2), xp.max(S2)])).tolist()  # one sync
            if not math.isfinite(hi):  # squares overflowed: not a collinearity
                raise non_finite_error(
                    X, xp=xp, what="class covariance", owner=type(self).__name__
                )
            if lo <= d * u * hi:
                raise ValueError(
                    f"the covariance of class {to_numpy(self.classes_)[k]!r} is singular "
                    f"(its {nk} samples span fewer than d={d} directions, or features are "
                    f"collinear); increase reg_param (now {r}) to regularise it"
                )
            R = Vt.T
            rotations.append(R)
            scalings.append(S2)
            covs.append((R * S2[None, :]) @ R.T)
        self.priors_ = priors
        self.means_ = means
        self.rotations_ = rotations
        self.scalings_ = scalings
        self.covariance_ = xp.stack(covs, axis=0)
        return self._fitted(ctx)

    def _scores(self, X, ctx):
        xp = ctx.xp
        means, priors = ctx.take(self.means_), ctx.take(self.priors_)
        cols = []
        for k in range(means.shape[0]):
            R, S2 = ctx.take(self.rotations_[k]), ctx.take(self.scalings_[k])
            Z = (X - means[k, :]) @ (R / xp.sqrt(S2)[None, :])
            cols.append(-0.5 * (xp.sum(Z * Z, axis=1) + xp.sum(xp.log(S2))))
        return xp.stack(cols, axis=1) + xp.log(priors)

    def decision_function(self, X):
        """Log-odds (n,) for two classes; class scores δ_k (n, K) otherwise."""
        ctx, X = self._validate_predict_data(X)
        Z = self._scores(X, ctx)
        return ctx.out(Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z)

    def predict_proba(self, X):
        """Posterior class probabilities (n, K)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(_softmax_proba(self._scores(X, ctx), xp=ctx.xp))

    def predict_log_proba(self, X):
        """Log posteriors (n, K)."""
        ctx, X = self._validate_predict_data(X)
        Z = self._scores(X, ctx)
        return ctx.out(Z - logsumexp(Z, xp=ctx.xp, axis=1))

    def predict(self, X):
        """Most probable classes (n,)."""
        ctx, X = self._validate_predict_data(X)
        return decode_labels(
            self.classes_, ctx.xp.argmax(self._scores(X, ctx), axis=1), ctx
        )
