"""Gaussian discriminant analysis: LDA (shared covariance) and QDA (one per class).

Both are generative: class priors ``π_k``, class means ``μ_k`` and Gaussian
class-conditional densities, turned into posteriors by Bayes' rule. With a
shared covariance ``Σ`` the log-odds are linear in ``x``; for two classes the
posterior is exactly the logistic function ``P(y = 1 | x) = σ(θ₀ + θᵀx)`` with

    θ  = Σ⁻¹ (μ₁ − μ₀),
    θ₀ = −½ μ₁ᵀΣ⁻¹μ₁ + ½ μ₀ᵀΣ⁻¹μ₀ + log(π₁ / π₀).
"""

from __future__ import annotations

import abc
import warnings
from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, TransformerMixin
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
from xpml.utils._math import all_finite
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_is_fitted, decode_labels

__all__ = ["LinearDiscriminantAnalysis", "QuadraticDiscriminantAnalysis"]


class EstimatorWithFit(abc.ABC):  # noqa: B024 - an isinstance test only
    """Any object with a ``fit`` method (``isinstance`` test for the constraint
    of ``covariance_estimator``)."""

    @classmethod
    def __subclasshook__(cls, C):
        return True if callable(getattr(C, "fit", None)) else NotImplemented


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


def _priors(param, counts, /, *, xp, name, warn=False):
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
    if warn and abs(p.sum() - 1.0) > 1e-5:
        warnings.warn(
            "The priors do not sum to 1. Renormalizing", UserWarning, stacklevel=3
        )
    return xp.asarray(p / p.sum(), dtype=counts.dtype, device=_device(counts))


def _weighted_cov(X, w, /, *, xp):
    """Frequency-weighted mean-centred data and ML covariance (divisor ``Σw``)."""
    W = xp.sum(w)
    Xc = X - (w[None, :] @ X) / W
    return (Xc * w[:, None]).T @ Xc / W, Xc


def _shrink(S, s, /, *, xp):
    """``(1 − s) S + s · tr(S)/d · I`` (scikit-learn's ``shrunk_covariance``)."""
    d = S.shape[0]
    mu = xp.sum(xp.linalg.diagonal(S)) / d
    return (1.0 - s) * S + s * mu * xp.eye(d, dtype=S.dtype, device=_device(S))


def _ledoit_wolf_shrinkage(Z, w, /, *, xp):
    """Ledoit–Wolf's optimal shrinkage of centred data ``Z`` (frequency weights
    ``w``), written as scikit-learn's ``ledoit_wolf_shrinkage``."""
    n, d = Z.shape
    if d == 1:
        return 0.0
    W = xp.sum(w)
    Z2 = Z * Z
    trace = (w[None, :] @ Z2)[0, :] / W
    mu = xp.sum(trace) / d
    beta_ = xp.sum(Z2.T @ (Z2 * w[:, None]))
    delta_ = xp.sum(((Z * w[:, None]).T @ Z) ** 2) / W**2
    beta = (beta_ / W - delta_) / (d * W)
    delta = (delta_ - 2.0 * mu * xp.sum(trace) + d * mu**2) / d
    beta, delta = to_numpy(xp.stack([beta, delta])).tolist()  # one sync
    beta = min(beta, delta)
    return 0.0 if beta == 0 else beta / delta


def _cov(X, w, shrinkage, estimator, /, *, xp):
    """One covariance as scikit-learn's ``_cov``: empirical, Ledoit–Wolf on
    standardised features (``"auto"``), shrunk by a float, or a covariance
    estimator's ``covariance_`` (fitted on the host, rows with ``w > 0``)."""
    if estimator is not None:
        if shrinkage is not None and shrinkage != 0:
            raise ValueError(
                "covariance_estimator and shrinkage parameters are not None. "
                "Only one of the two can be set."
            )
        rows = to_numpy(w) > 0
        est = estimator  # fitted in place, as scikit-learn does
        est.fit(to_numpy(X)[rows])
        if not hasattr(est, "covariance_"):
            raise ValueError(
                f"{type(est).__name__} does not have a covariance_ attribute "
                f"(covariance_estimator)"
            )
        return xp.asarray(np.asarray(est.covariance_), dtype=X.dtype, device=_device(X))
    S, Xc = _weighted_cov(X, w, xp=xp)
    if shrinkage is None or shrinkage == "empirical":
        return S
    if shrinkage != "auto":
        return _shrink(S, float(shrinkage), xp=xp)
    sd = xp.sqrt(xp.linalg.diagonal(S))
    sd = xp.where(sd > 10 * eps(X.dtype, xp), sd, xp.ones_like(sd))
    C = S / (sd[:, None] * sd[None, :])
    C = _shrink(C, _ledoit_wolf_shrinkage(Xc / sd, w, xp=xp), xp=xp)
    return sd[:, None] * C * sd[None, :]


def _class_cov(X, onehot, sw, priors, opts, /, *, xp):
    """``Σ_k π_k Σ_k``, each class's covariance from :func:`_cov`."""
    shrinkage, estimator = opts
    Sigma = 0.0
    for k in range(onehot.shape[1]):  # a loop over classes, vectorised over rows
        Sigma = Sigma + priors[k] * _cov(
            X, sw * onehot[:, k], shrinkage, estimator, xp=xp
        )
    return Sigma


def _lda_lsqr(X, means, Sigma, priors, /, *, xp):
    """Scores ``δ_k`` from ``Σ⁺ μ_k`` (least squares)."""
    with linalg_errors(X, xp=xp, what="covariance", owner="LinearDiscriminantAnalysis"):
        Theta = psd_lstsq(Sigma, means.T, xp=xp)  # (d, K)
    coef = Theta.T
    return coef, -0.5 * xp.sum(means * coef, axis=1) + xp.log(priors)


def _lda_eigen(X, means, Sigma, St, priors, /, *, xp):
    """The generalised eigenproblem ``S_b v = λ S_w v`` (Cholesky whitening of
    ``S_w``); returns coef, intercept, eigenvalues (descending), eigenvectors."""
    owner = "LinearDiscriminantAnalysis"
    with linalg_errors(X, xp=xp, what="within-class covariance", owner=owner):
        L = xp.linalg.cholesky(Sigma)
        Linv = xp.linalg.inv(L)
        evals, V = xp.linalg.eigh(Linv @ (St - Sigma) @ Linv.T)
    order = xp.flip(xp.argsort(evals))
    evals = xp.take(evals, order)
    evecs = xp.take(Linv.T @ V, order, axis=1)  # evecsᵀ S_w evecs = I
    coef = (means @ evecs) @ evecs.T
    intercept = -0.5 * xp.sum(means * coef, axis=1) + xp.log(priors)
    return coef, intercept, evals, evecs


def _lda_svd(X, Xc, sw, means, priors, /, *, tol, xp):
    """scikit-learn's SVD solver, with frequency weights: whiten the within-class
    scatter by an SVD of the centred data, then an SVD of the whitened class
    means. Returns coef, intercept, scalings, between-class singular values.
    Non-finite standard deviations or singular values (an overflow at huge
    ``X``) raise :func:`non_finite_error` (one finiteness check)."""
    W, K = xp.sum(sw), means.shape[0]
    xbar = priors @ means
    std = xp.sqrt((sw[None, :] @ (Xc * Xc))[0, :] / W)
    std = xp.where(std == 0, xp.ones_like(std), std)
    Z = xp.sqrt(sw / W)[:, None] * (Xc / std)
    owner, what = "LinearDiscriminantAnalysis", "within-class scatter"
    with linalg_errors(X, xp=xp, what=what, owner=owner):
        _, S, Vt = xp.linalg.svd(Z, full_matrices=False)
    if not all_finite(xp.concat([std, S]), xp=xp):
        raise non_finite_error(X, xp=xp, what=what, owner=owner)
    rank = int(xp.sum(xp.astype(S > tol, xp.int64)))
    scalings = (Vt[:rank, :] / std).T / S[:rank]
    fac = 1.0 if K == 1 else 1.0 / (K - 1)
    B = (xp.sqrt(W * priors * fac)[:, None] * (means - xbar)) @ scalings
    with linalg_errors(X, xp=xp, what="between-class scatter", owner=owner):
        _, S, Vt = xp.linalg.svd(B, full_matrices=False)
    rank = int(xp.sum(xp.astype(S > tol * S[0], xp.int64))) if S.shape[0] else 0
    scalings = scalings @ Vt.T[:, :rank]
    coef = (means - xbar) @ scalings
    intercept = -0.5 * xp.sum(coef**2, axis=1) + xp.log(priors)
    coef = coef @ scalings.T
    return coef, intercept - xbar @ coef.T, scalings, S


def _softmax_proba(Z, /, *, xp):
    return xp.exp(Z - logsumexp(Z, xp=xp, axis=1))


class LinearDiscriminantAnalysis(
    LinearClassifierMixin, ClassifierMixin, TransformerMixin, BaseEstimator
):
    """Linear discriminant analysis = Gaussian discriminant analysis with one
    shared covariance, fitted in closed form by maximum likelihood.

    Parameters
    ----------
    solver : {"svd", "lsqr", "eigen"}, default="svd"
        "svd": scikit-learn's two SVDs (within-class whitening, then the class
        means), no covariance formed, no shrinkage; "lsqr": ``Σ⁺ μ_k`` by least
        squares; "eigen": the generalised eigenproblem ``S_b v = λ S_w v``.
    shrinkage : "auto", float in [0, 1] or None, default=None
        ("lsqr", "eigen") Shrink each class covariance toward a multiple of the
        identity, ``(1 − s) Σ_k + s · tr(Σ_k)/d · I``; "auto" picks ``s`` by
        Ledoit–Wolf on standardised features (as scikit-learn).
    priors : array-like (K,) or None, default=None
        Class priors (renormalised with a warning when they do not sum to
        one); None uses class frequencies.
    n_components : int or None, default=None
        Columns kept by ``transform``, at most ``min(K − 1, d)`` (the default).
    store_covariance : bool, default=False
        ("svd") Also compute ``covariance_``; the other solvers always do.
    tol : float ≥ 0, default=1e-4
        ("svd") Singular values at or below it count as rank deficiency.
    covariance_estimator : estimator or None, default=None
        ("lsqr", "eigen") A scikit-learn covariance estimator fitted, on the
        host, to each class in place of the empirical covariance.

    Attributes
    ----------
    classes_ : array (K,)
    priors_ : array (K,)
    means_ : array (K, d)
    covariance_ : array (d, d)
        The pooled maximum-likelihood covariance ``Σ_k π_k Σ_k`` with ``Σ_k``
        the class's covariance (divisor ``n_k``), shrunk when asked.
    coef_ : array (1, d) for two classes, (K, d) otherwise
    intercept_ : array (1,) or (K,)
    scalings_ : array (d, r)
        ("svd", "eigen") The discriminant directions (``transform``'s matrix).
    xbar_ : array (d,)
        ("svd") The prior-weighted overall mean ``Σ_k π_k μ_k``.
    explained_variance_ratio_ : array (n_components,)
        ("svd", "eigen") Share of the between-class variance per direction.
    theta_ : array (d,)
        Two classes only: ``θ = Σ⁻¹(μ₁ − μ₀)`` (equals ``coef_[0]``).
    theta0_ : float array ()
        Two classes only: ``θ₀`` (equals ``intercept_[0]``), so that
        ``predict_proba(X)[:, 1] = σ(θ₀ + X θ)``.
    n_features_in_ : int

    Notes
    -----
    Class scores ``δ_k(x) = xᵀΣ⁻¹μ_k − ½ μ_kᵀΣ⁻¹μ_k + log π_k``; posteriors are
    their softmax (for two classes the logistic function of ``δ₁ − δ₀``).
    "lsqr" inverts a singular ``Σ`` on its range (pseudo-inverse); "svd" drops
    directions with singular values ≤ ``tol``; "eigen" needs ``Σ`` positive
    definite (use ``shrinkage``).

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
        "solver": [Options("svd", "lsqr", "eigen")],
        "shrinkage": [None, Options("auto"), Interval(Real, 0, 1, closed="both")],
        "priors": [None, "array-like"],
        "n_components": [None, Interval(Integral, 1, None, closed="left")],
        "store_covariance": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "covariance_estimator": [None, EstimatorWithFit],
    }
    _xpml_tags = {}

    def __init__(
        self,
        *,
        solver="svd",
        shrinkage=None,
        priors=None,
        n_components=None,
        store_covariance=False,
        tol=1e-4,
        covariance_estimator=None,
    ):
        self.solver = solver
        self.shrinkage = shrinkage
        self.priors = priors
        self.n_components = n_components
        self.store_covariance = store_covariance
        self.tol = tol
        self.covariance_estimator = covariance_estimator

    def _check_options(self, K, d):
        """scikit-learn's cross-parameter rules; sets ``_max_components``."""
        top = min(K - 1, d)
        if self.n_components is not None and self.n_components > top:
            raise ValueError(
                "n_components cannot be larger than min(n_features, n_classes - 1)."
            )
        self._max_components = top if self.n_components is None else self.n_components
        if self.solver == "svd" and self.shrinkage is not None:
            raise NotImplementedError("shrinkage not supported with 'svd' solver.")
        if self.solver == "svd" and self.covariance_estimator is not None:
            raise ValueError(
                "covariance estimator is not supported with svd solver. "
                "Try another solver"
            )

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Estimate priors, means and the pooled covariance; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes", min_samples=2
        )
        xp = ctx.xp
        K, (n, d) = int(self.classes_.shape[0]), X.shape
        if n == K:
            raise ValueError(
                "The number of samples must be more than the number of classes."
            )
        self._check_options(K, d)
        counts, means, onehot = _class_stats(X, codes, K, sw, xp=xp)
        _check_weighted_classes(counts, self.classes_, xp=xp)
        self.priors_ = _priors(self.priors, counts, xp=xp, name="priors", warn=True)
        self.means_ = means
        solve = {"svd": self._fit_svd, "lsqr": self._fit_lsqr, "eigen": self._fit_eigen}
        coef, intercept = solve[self.solver](X, onehot, sw, xp=xp)
        if self.solver != "svd":  # "svd" checks its SVD's inputs and results
            check_finite_result(
                coef, X, xp=xp, what="coefficients", owner=type(self).__name__
            )
        if K == 2:
            self.coef_ = (coef[1, :] - coef[0, :])[None, :]
            self.intercept_ = (intercept[1] - intercept[0])[None]
            self.theta_ = self.coef_[0, :]
            self.theta0_ = self.intercept_[0]
        else:
            self.coef_, self.intercept_ = coef, intercept
        return self._fitted(ctx)

    def _covariance(self, X, onehot, sw, /, *, xp):
        """``Σ = Σ_k π_k Σ_k`` (shrunk / estimated per class when asked)."""
        if self.shrinkage is None and self.covariance_estimator is None:
            counts = xp.sum(onehot * sw[:, None], axis=0)
            safe = xp.where(counts > 0, counts, xp.ones_like(counts))
            Xc = X - onehot @ self.means_
            row_w = sw * (onehot @ (self.priors_ / safe))  # π_k / n_k for each row
            return (Xc * row_w[:, None]).T @ Xc
        opts = (self.shrinkage, self.covariance_estimator)
        return _class_cov(X, onehot, sw, self.priors_, opts, xp=xp)

    def _fit_svd(self, X, onehot, sw, /, *, xp):
        if self.store_covariance:
            self.covariance_ = self._covariance(X, onehot, sw, xp=xp)
        Xc = X - onehot @ self.means_
        coef, intercept, self.scalings_, S = _lda_svd(
            X, Xc, sw, self.means_, self.priors_, tol=float(self.tol), xp=xp
        )
        self.xbar_ = self.priors_ @ self.means_
        self.explained_variance_ratio_ = (S**2 / xp.sum(S**2))[: self._max_components]
        return coef, intercept

    def _fit_lsqr(self, X, onehot, sw, /, *, xp):
        self.covariance_ = self._covariance(X, onehot, sw, xp=xp)
        return _lda_lsqr(X, self.means_, self.covariance_, self.priors_, xp=xp)

    def _fit_eigen(self, X, onehot, sw, /, *, xp):
        self.covariance_ = self._covariance(X, onehot, sw, xp=xp)
        St = _cov(X, sw, self.shrinkage, self.covariance_estimator, xp=xp)
        coef, intercept, evals, self.scalings_ = _lda_eigen(
            X, self.means_, self.covariance_, St, self.priors_, xp=xp
        )
        self.explained_variance_ratio_ = (evals / xp.sum(evals))[: self._max_components]
        return coef, intercept

    def transform(self, X: ArrayLike) -> Array:
        """Project onto the discriminant directions (n, n_components):
        ``(X − x̄) S`` for "svd", ``X S`` for "eigen" (``S = scalings_``)."""
        if self.solver == "lsqr":
            raise NotImplementedError(
                "transform not implemented for 'lsqr' solver (use 'svd' or 'eigen')."
            )
        ctx, X = self._validate_predict_data(X)
        if self.solver == "svd":
            X = X - ctx.take(self.xbar_)
        Z = X @ ctx.take(self.scalings_)
        return ctx.out(Z[:, : self._max_components])

    def fit_transform(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Array:
        """``fit(X, y).transform(X)``."""
        return self.fit(X, y, sample_weight).transform(X)

    def get_feature_names_out(self, input_features=None):
        """``lineardiscriminantanalysis0``, ... one per output column."""
        check_is_fitted(self)
        n = self._max_components
        if self.solver == "svd":
            n = min(n, int(self.scalings_.shape[1]))
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(n)], dtype=object)

    def _proba(self, X, ctx):
        xp = ctx.xp
        Z = X @ ctx.take(self.coef_).T + ctx.take(self.intercept_)
        if Z.shape[1] == 1:
            p = sigmoid(Z[:, 0], xp=xp)
            return xp.stack([1.0 - p, p], axis=1)
        return _softmax_proba(Z, xp=xp)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Posterior class probabilities (n, K)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(self._proba(X, ctx))

    def predict_log_proba(self, X: ArrayLike) -> Array:
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
    solver : {"svd", "eigen"}, default="svd"
        "svd": each class's SVD (needs more samples than features per class);
        "eigen": the eigen-decomposition of each class covariance from
        ``shrinkage`` / ``covariance_estimator``.
    shrinkage : "auto", float in [0, 1] or None, default=None
        ("eigen") As :class:`LinearDiscriminantAnalysis`, per class.
    priors : array-like (K,) or None, default=None
    reg_param : float in [0, 1], default=0.0
        ("svd") Regularises each class covariance's eigenvalues:
        ``(1 − r) λ + r`` (scikit-learn's rule).
    store_covariance : bool, default=False
        Also store the class covariances in ``covariance_``.
    tol : float ≥ 0, default=1e-4
        Eigenvalues at or below it make a class covariance rank deficient
        (``LinAlgError``, a ``ValueError``).
    covariance_estimator : estimator or None, default=None
        ("eigen") A scikit-learn covariance estimator fitted to each class.

    Attributes
    ----------
    classes_ : array (K,)
    priors_ : array (K,)
    means_ : array (K, d)
    rotations_ : list of K arrays (d, r_k)
        Principal axes of each class.
    scalings_ : list of K arrays (r_k,)
        Variances along them (regularised; divisor ``n_k``).
    covariance_ : list of K arrays (d, d)
        With ``store_covariance``: ``R_k diag(scalings_k) R_kᵀ``.
    n_features_in_ : int

    Notes
    -----
    ``δ_k(x) = −½ log|Σ_k| − ½ (x − μ_k)ᵀΣ_k⁻¹(x − μ_k) + log π_k``, posteriors
    their softmax. Computed through each class's SVD (or eigen-decomposition)
    as scikit-learn does. A rank-deficient class covariance (``n_k ≤ d`` for
    "svd", or collinear features) raises ``LinAlgError`` naming the fix.

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
        "solver": [Options("svd", "eigen")],
        "shrinkage": [None, Options("auto"), Interval(Real, 0, 1, closed="both")],
        "priors": [None, "array-like"],
        "reg_param": [Interval(Real, 0, 1, closed="both")],
        "store_covariance": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "covariance_estimator": [None, EstimatorWithFit],
    }
    _xpml_tags = {}

    def __init__(
        self,
        *,
        solver="svd",
        shrinkage=None,
        priors=None,
        reg_param=0.0,
        store_covariance=False,
        tol=1.0e-4,
        covariance_estimator=None,
    ):
        self.solver = solver
        self.shrinkage = shrinkage
        self.priors = priors
        self.reg_param = reg_param
        self.store_covariance = store_covariance
        self.tol = tol
        self.covariance_estimator = covariance_estimator

    def _check_options(self):
        if self.solver == "svd" and self.shrinkage is not None:
            raise NotImplementedError("shrinkage not supported with 'svd' solver.")
        if self.solver == "svd" and self.covariance_estimator is not None:
            raise ValueError(
                "covariance_estimator is not supported with solver='svd'. "
                "Try solver='eigen' instead."
            )

    def _class_svd(self, Xk, /, *, xp):
        """Principal variances (regularised, descending) and axes of one class."""
        _, S, Vt = xp.linalg.svd(Xk - xp.mean(Xk, axis=0), full_matrices=False)
        r = float(self.reg_param)
        return (1.0 - r) * (S * S) / Xk.shape[0] + r, Vt.T

    def _class_eigen(self, Xk, /, *, xp):
        """Eigen-decomposition of the class covariance from ``_cov`` (shrunk or
        estimated), eigenvalues descending."""
        w = xp.ones((Xk.shape[0],), dtype=Xk.dtype, device=_device(Xk))
        cov = _cov(Xk, w, self.shrinkage, self.covariance_estimator, xp=xp)
        vals, vecs = xp.linalg.eigh(cov)
        order = xp.flip(xp.argsort(vals))
        return xp.take(vals, order), xp.take(vecs, order, axis=1)

    def _check_rank(self, X, S2, label, nk, d, /, *, xp):
        if not all_finite(S2, xp=xp):  # squares overflowed
            raise non_finite_error(
                X, xp=xp, what="class covariance", owner=type(self).__name__
            )
        if int(xp.sum(xp.astype(S2 > float(self.tol), xp.int64))) >= d:
            return
        if self.solver == "svd" and nk <= d:
            raise np.linalg.LinAlgError(
                f"The covariance matrix of class {label} is not full rank. When "
                f"using `solver='svd'` the number of samples in each class should "
                f"be more than the number of features, but class {label} has {nk} "
                f"samples and {d} features. Try using `solver='eigen'` and setting "
                f"the parameter `shrinkage` for regularization."
            )
        param = "shrinkage" if self.solver == "eigen" else "reg_param"
        raise np.linalg.LinAlgError(
            f"The covariance matrix of class {label} is not full rank. Increase "
            f"the value of `{param}` to reduce the collinearity."
        )

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Estimate priors, means and one covariance per class; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(X, y, target="classes")
        xp = ctx.xp
        K, d = int(self.classes_.shape[0]), X.shape[1]
        self._check_options()
        host = to_numpy(codes)  # one transfer
        labels = to_numpy(self.classes_)
        counts, means, _ = _class_stats(X, codes, K, sw, xp=xp)
        self.priors_ = _priors(self.priors, counts, xp=xp, name="priors")
        solve = self._class_svd if self.solver == "svd" else self._class_eigen
        rotations, scalings = [], []
        for k in range(K):  # a loop over classes, vectorised over rows
            rows = np.flatnonzero(host == k)
            if rows.size == 1:
                raise ValueError(
                    f"y has only 1 sample in class {labels[k]}, covariance is ill "
                    f"defined."
                )
            Xk = xp.take(X, xp.asarray(rows, device=ctx.device), axis=0)
            with linalg_errors(X, xp=xp, what="class covariance", owner="QDA"):
                S2, R = solve(Xk, xp=xp)
            self._check_rank(X, S2, labels[k], int(rows.size), d, xp=xp)
            rotations.append(R)
            scalings.append(S2)
        self.means_ = means
        self.rotations_ = rotations
        self.scalings_ = scalings
        if self.store_covariance:
            self.covariance_ = [
                (R * S2[None, :]) @ R.T for R, S2 in zip(rotations, scalings)
            ]
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

    def decision_function(self, X: ArrayLike) -> Array:
        """Log-odds (n,) for two classes; class scores δ_k (n, K) otherwise."""
        ctx, X = self._validate_predict_data(X)
        Z = self._scores(X, ctx)
        return ctx.out(Z[:, 1] - Z[:, 0] if Z.shape[1] == 2 else Z)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Posterior class probabilities (n, K)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(_softmax_proba(self._scores(X, ctx), xp=ctx.xp))

    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Log posteriors (n, K)."""
        ctx, X = self._validate_predict_data(X)
        Z = self._scores(X, ctx)
        return ctx.out(Z - logsumexp(Z, xp=ctx.xp, axis=1))

    def predict(self, X: ArrayLike) -> Array:
        """Most probable classes (n,)."""
        ctx, X = self._validate_predict_data(X)
        return decode_labels(
            self.classes_, ctx.xp.argmax(self._scores(X, ctx), axis=1), ctx
        )
