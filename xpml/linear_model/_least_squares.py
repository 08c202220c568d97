"""Ordinary and weighted least squares through the pseudo-inverse."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, RegressorMixin
from xpml.linear_model._base import (
    RankDeficiencyWarning,
    SklearnInputMixin,
    check_finite_result,
    data_offsets,
    default_rcond,
    linalg_errors,
    pinv_solve,
)
from xpml.utils._param_validation import Interval

__all__ = ["LinearRegression"]


class LinearRegression(SklearnInputMixin, RegressorMixin, BaseEstimator):
    """Least squares ``w = X⁺ y`` by the SVD-based pseudo-inverse.

    Solves the normal equations even when ``XᵀX`` is singular, giving the
    minimum-norm solution; ``sample_weight`` gives weighted least squares
    ``XᵀΩXw = XᵀΩy``. The intercept is a separate, unpenalised term found by
    centring.

    Parameters
    ----------
    fit_intercept : bool, default=True
    copy_X : bool, default=True
        Accepted for scikit-learn compatibility: ``X`` is never modified.
    tol : float, default=1e-6
        Accepted for scikit-learn compatibility (scikit-learn uses it for
        sparse ``X`` only; the cut-off of the dense fit is ``rcond``).
    n_jobs : int or None
        Accepted; unused.
    positive : bool, default=False
        Non-negative slopes (non-negative least squares, by projected
        coordinate descent on the Gram matrix); ``rank_`` and ``singular_``
        are then None.
    rcond : float in [0, 1) or None, default=None
        Relative cut-off for small singular values: those at or below
        ``rcond · σ_max`` count as zero. None means ``max(1e-6, 100·eps)``
        (scikit-learn's ``tol=1e-6`` in float64, ``1.2e-5`` in float32; see
        Notes). A rank-deficient fit warns with ``RankDeficiencyWarning``.

    Attributes
    ----------
    coef_ : array (d,) or (n_targets, d)
    intercept_ : float array () or (n_targets,)
    rank_ : int
        Numerical rank of the centred (weighted) data.
    singular_ : array (min(n, d),)
        Its singular values.
    n_features_in_ : int

    Notes
    -----
    With ``Xs = √Ω (X − x̄)``: ``w = Xs⁺ √Ω (y − ȳ)`` and ``b = ȳ − x̄·w``.
    The cut-off is relative to ``σ_max`` and does not grow with ``n`` (LAPACK's
    ``max(n, d)·eps`` is 0.06 in float32 at ``n = 500,000`` and drops real
    directions); nearly collinear columns (``x₂ = x₁ + 1e-10·noise``) fall
    below it, so the fit shares the weight between them instead of returning
    cancelling coefficients of ``±10⁸``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])   # rank 1
    >>> import warnings
    >>> with warnings.catch_warnings():  # rank 1 < 2: RankDeficiencyWarning
    ...     warnings.simplefilter("ignore")
    ...     reg = LinearRegression().fit(X, np.array([0.0, 2.0, 4.0]))
    >>> np.round(reg.coef_, 6).tolist(), round(float(reg.intercept_), 6)
    ([1.0, 1.0], 0.0)
    """

    _parameter_constraints = {
        "fit_intercept": ["boolean"],
        "copy_X": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "n_jobs": [None, Interval(Integral, None, -1), Interval(Integral, 1, None)],
        "positive": ["boolean"],
        "rcond": [None, Interval(Real, 0, 1, closed="left")],
    }
    _xpml_tags = {"multi_output": True}

    def __init__(
        self,
        *,
        fit_intercept=True,
        copy_X=True,
        tol=1e-6,
        n_jobs=None,
        positive=False,
        rcond=None,
    ):
        self.fit_intercept = fit_intercept
        self.copy_X = copy_X
        self.tol = tol
        self.n_jobs = n_jobs
        self.positive = positive
        self.rcond = rcond

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit by the pseudo-inverse (or non-negative least squares); returns
        self."""
        self._validate_params()
        if self.positive and type(X).__module__.startswith("scipy.sparse"):
            raise TypeError(  # scikit-learn's rule (and message)
                "Sparse data was passed for X, but dense data is required. "
                "LinearRegression(positive=True) needs a dense X: use X.toarray()."
            )
        if self.positive:
            return self._fit_positive(X, y, sample_weight)
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="multi")
        xp = ctx.xp
        weighted = sample_weight is not None  # unit weights: not multiplied
        x_off, y_off = data_offsets(
            X, y, sw, xp=xp, fit_intercept=self.fit_intercept, scale=weighted
        )
        with linalg_errors(X, xp=xp, what="SVD", owner="LinearRegression"):
            coef, keep, s = pinv_solve(  # centred (and weighted) as it goes
                X,
                y,
                xp=xp,
                rcond=self.rcond,
                shift=(x_off, y_off) if self.fit_intercept else None,
                scale=xp.sqrt(sw) if weighted else None,
            )
        check_finite_result(
            coef, X, xp=xp, what="coefficients", owner="LinearRegression"
        )
        self.coef_ = coef.T if len(y.shape) == 2 else coef
        self.intercept_ = y_off - x_off @ coef
        self.rank_ = int(xp.sum(xp.astype(keep, xp.int64)))
        self.singular_ = s
        if self.rank_ < min(X.shape):
            rcond = default_rcond(X.dtype, xp=xp) if self.rcond is None else self.rcond
            warnings.warn(
                f"X is rank deficient: numerical rank {self.rank_} < "
                f"min(n_samples, n_features)={min(X.shape)} (singular values at or "
                f"below rcond={rcond:.3g} times the largest were dropped; collinear "
                f"or constant features); the minimum-norm solution is returned",
                RankDeficiencyWarning,
                stacklevel=2,
            )
        return self._fitted(ctx)

    def _fit_positive(self, X, y, sample_weight):
        """Non-negative least squares: a :class:`Ridge` with ``alpha=0`` and
        ``positive=True`` (projected coordinate descent on the Gram matrix)."""
        from xpml.linear_model._ridge import Ridge

        r = Ridge(alpha=0.0, fit_intercept=self.fit_intercept, positive=True)
        r.fit(X, y, sample_weight)
        for name in ("coef_", "intercept_", "n_features_in_", "feature_names_in_"):
            if hasattr(r, name):
                setattr(self, name, getattr(r, name))
        self.rank_ = None
        self.singular_ = None
        return self  # Ridge already returned its attributes in the caller's library

    def predict(self, X: ArrayLike) -> Array:
        """``X w + b``, in the caller's library."""
        ctx, X = self._validate_predict_data(X)
        coef, b = ctx.take(self.coef_), ctx.take(self.intercept_)
        return ctx.out((X @ coef if len(coef.shape) == 1 else X @ coef.T) + b)
