"""The LASSO by cyclic coordinate descent with soft-thresholding, and its path.

Penalty scale (the same as scikit-learn's): ``Lasso(alpha=α)`` minimises

    (1 / (2 Σω)) Σᵢ ωᵢ (yᵢ − xᵢ·w − b)²  +  α ‖w‖₁

(``Σω = n`` without sample weights). The lecture form ``‖Xw − y‖² + λ‖w‖₁``
is the same problem with ``λ = 2nα``.
"""

from __future__ import annotations

import contextlib
import warnings
from numbers import Integral, Real

import numpy as np

from xpml._backend import enter, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, RegressorMixin
from xpml.exceptions import ConvergenceWarning, warn
from xpml.linalg import _single_threaded_blas
from xpml.linear_model._base import SklearnInputMixin, center_data
from xpml.utils._array_api import device as _device
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_array, check_random_state, check_targets

__all__ = ["Lasso", "lasso_path"]


def _soft_threshold(z, t, /, *, xp, zero):
    """``sign(z) · max(|z| − t, 0) = max(z − t, 0) + min(z + t, 0)``, on the
    device: ``maximum``/``minimum`` against a zero array (array-api-compat's
    ``sign`` and ``clip`` with Python bounds do masked writes on PyTorch, one
    host sync each)."""
    return xp.maximum(z - t, zero) + xp.minimum(z + t, zero)


def _duality_gap(X, y, w, R, l1, /, *, xp, positive=False):
    """Duality gap of ``½‖y − Xw‖² + l1‖w‖₁`` at ``w`` with residual ``R``
    (with ``w ≥ 0`` when ``positive``: the dual constraint is one-sided)."""
    XtR = X.T @ R
    XtR_max = xp.max(XtR) if positive else xp.max(xp.abs(XtR))
    R2 = xp.sum(R * R)
    ratio = l1 / xp.where(XtR_max > 0, XtR_max, xp.ones_like(XtR_max))
    const = xp.where(XtR_max > l1, ratio, xp.ones_like(ratio))
    gap = xp.where(XtR_max > l1, 0.5 * (R2 + R2 * const * const), R2)
    return gap + l1 * xp.sum(xp.abs(w)) - const * xp.sum(R * y)


def _cd_lasso(X, y, w, l1, /, *, xp, max_iter, tol, positive=False, rng=None):
    """Minimise ``½‖y − Xw‖² + l1‖w‖₁`` from ``w`` by cyclic coordinate descent.

    Each coordinate step is vectorised over the ``n`` rows (one dot product and
    one axpy on the residual); convergence is checked once per sweep (one host
    sync), as scikit-learn does: when the largest coordinate change is below
    ``tol`` times the largest weight, the duality gap is computed and compared
    with ``tol · ‖y‖²``.

    ``positive``: coefficients constrained to ``≥ 0`` (one-sided threshold).
    ``rng``: a host generator to visit the coordinates in a random order each
    sweep (scikit-learn's ``selection="random"``); None: cyclic.

    Returns ``(w, gap, n_iter)``; ``gap`` is a Python float.

    On NumPy BLAS runs with one thread meanwhile (as scikit-learn's and
    liblinear's solvers): a second thread on each coordinate's dot product
    mostly waits (and spins), and one thread makes the sums reproducible.
    """
    with _single_threaded_blas(xp) or contextlib.nullcontext():
        return _cd_sweeps(
            X, y, w, l1, xp=xp, max_iter=max_iter, tol=tol, positive=positive, rng=rng
        )


def _cd_sweeps(X, y, w, l1, /, *, xp, max_iter, tol, positive, rng):
    n, d = X.shape
    # columns as contiguous rows (one copy): each coordinate step then reads one
    # contiguous vector instead of a strided column of X
    Xt = xp.reshape(xp.reshape(X.T, (-1,)), (d, n))
    norms = to_numpy(xp.sum(Xt * Xt, axis=1)).tolist() if d else []  # one sync
    inv = [1.0 / v if v > 0 else 0.0 for v in norms]
    coords = [w[j] for j in range(d)]
    R = y - X @ w
    tol_scaled = tol * float(xp.sum(y * y))
    gap, n_iter = float("inf"), 0
    zero = xp.zeros((), dtype=X.dtype, device=_device(X))
    for n_iter in range(1, max_iter + 1):
        dw_max, w_max = zero, zero
        for j in rng.permutation(d).tolist() if rng is not None else range(d):
            if not inv[j]:
                continue
            xj, wj = Xt[j, :], coords[j]
            rho = xj @ R + norms[j] * wj
            if positive:
                new = xp.maximum(rho - l1, zero) * inv[j]
            else:
                new = _soft_threshold(rho, l1, xp=xp, zero=zero) * inv[j]
            delta = new - wj
            R = R - delta * xj
            coords[j] = new
            dw_max = xp.maximum(dw_max, xp.abs(delta))
            w_max = xp.maximum(w_max, xp.abs(new))
        dw, wm = to_numpy(xp.stack([dw_max, w_max])).tolist()  # one sync per sweep
        if wm == 0.0 or dw / wm <= tol or n_iter == max_iter:
            w = xp.stack(coords) if d else w
            gap = float(_duality_gap(X, y, w, R, l1, xp=xp, positive=positive))
            if gap <= tol_scaled:
                break
    w = xp.stack(coords) if d else w
    return w, gap, n_iter, tol_scaled


def lasso_path(X, y, *, eps=1e-3, n_alphas=100, alphas=None, max_iter=1000, tol=1e-4):
    """LASSO coefficients along a decreasing grid of penalties, warm-started.

    Like :func:`sklearn.linear_model.lasso_path`: no intercept is fitted (centre
    the data first if you need one), the objective is
    ``(1/(2n))‖y − Xw‖² + α‖w‖₁``, and the default grid has ``n_alphas``
    values from ``α_max = max|Xᵀy|/n`` (where every coefficient is exactly
    zero) down to ``eps · α_max`` on a log scale.

    Parameters
    ----------
    X : array (n, d)
    y : array (n,)
    eps : float, default=1e-3
    n_alphas : int, default=100
    alphas : array-like or None
        Explicit penalties (sorted into decreasing order).
    max_iter, tol : as in :class:`Lasso`.

    Returns
    -------
    alphas : array (n_alphas,)
        Decreasing penalties, in the caller's library.
    coefs : array (d, n_alphas)
    dual_gaps : array (n_alphas,)
        Duality gap at the end of each fit.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(50, 4)); y = X @ np.array([3.0, 0.0, -2.0, 0.0])
    >>> alphas, coefs, _ = lasso_path(X, y, n_alphas=5)
    >>> coefs.shape, int(np.count_nonzero(coefs[:, 0]))
    ((4, 5), 0)
    """
    ctx, (X, y) = enter(X, y, names=("X", "y"))
    xp = ctx.xp
    X = check_array(X, xp=xp, name="X", requested=ctx.dtype)
    y = check_targets(
        y, xp=xp, name="y", n_samples=int(X.shape[0]), requested=ctx.dtype
    )
    y = xp.astype(y, X.dtype)
    n, d = X.shape
    if alphas is None:
        a_max = float(xp.max(xp.abs(X.T @ y))) / n
        grid = (
            np.geomspace(a_max, a_max * eps, int(n_alphas))
            if a_max > 0
            else np.zeros(n_alphas)
        )
    else:
        grid = np.sort(np.asarray(alphas, dtype=np.float64).ravel())[::-1]
    w = xp.zeros((d,), dtype=X.dtype, device=ctx.device)
    coefs, gaps = [], []
    for a in grid:
        w, gap, _, _ = _cd_lasso(
            X, y, w, float(a) * n, xp=xp, max_iter=max_iter, tol=tol
        )
        coefs.append(w)
        gaps.append(gap)
    coefs = xp.stack(coefs, axis=1)
    al = xp.asarray(grid.copy(), dtype=X.dtype, device=ctx.device)
    gp = xp.asarray(np.asarray(gaps), dtype=X.dtype, device=ctx.device)
    return ctx.out(al), ctx.out(coefs), ctx.out(gp)


class Lasso(SklearnInputMixin, RegressorMixin, BaseEstimator):
    """Linear regression with an L1 penalty, by coordinate descent.

    Minimises ``(1/(2Σω)) Σᵢ ωᵢ (yᵢ − xᵢ·w − b)² + α‖w‖₁`` — scikit-learn's
    scale: ``Lasso(alpha=α)`` here equals ``sklearn.linear_model.Lasso(alpha=α)``;
    the lecture objective ``‖Xw − y‖² + λ‖w‖₁`` has ``λ = 2nα``. The
    intercept is not penalised. Exact zeros appear as ``α`` grows; at
    ``α ≥ max|Xᵀ(y − ȳ)|/n`` every slope is zero.

    Parameters
    ----------
    alpha : float, default=1.0
    fit_intercept : bool, default=True
    max_iter : int, default=1000
        Maximum number of sweeps over the coordinates.
    tol : float, default=1e-4
        Stop when the duality gap is below ``tol · ‖y − ȳ‖²`` (checked when the
        largest coordinate change in a sweep is below ``tol ·`` the largest
        coefficient, as scikit-learn does).
    warm_start : bool, default=False
        Start from the previous ``coef_``.
    precompute : bool or array, default=False
        Accepted for scikit-learn compatibility; the result does not depend on
        it (the coordinate steps always use the residual).
    copy_X : bool, default=True
        Accepted: ``X`` is never modified.
    positive : bool, default=False
        Constrain the coefficients to be non-negative.
    random_state : int, Generator or None
        Seeds the coordinate order when ``selection="random"``.
    selection : {"cyclic", "random"}, default="cyclic"
        Visit the coordinates in order, or in a fresh random order each sweep.

    Attributes
    ----------
    coef_ : array (d,) or (n_targets, d)
        Several targets are fitted one after the other.
    intercept_ : float array () or (n_targets,)
    n_iter_ : int
        Sweeps run (the most over targets).
    dual_gap_ : float
        Final duality gap of scikit-learn's objective
        ``(1/(2n))‖y − Xw − b‖² + α‖w‖₁`` (the most over targets).
    n_features_in_ : int

    Notes
    -----
    Coordinate step: ``ρⱼ = xⱼ·r + ‖xⱼ‖² wⱼ``, ``wⱼ ← S(ρⱼ, nα) / ‖xⱼ‖²`` with
    ``S(z, t) = sign(z) max(|z| − t, 0)``, then ``r ← r − Δwⱼ xⱼ``.

    References
    ----------
    Friedman, Hastie & Tibshirani (2010), Regularization paths for generalized
    linear models via coordinate descent. J. Stat. Softw. 33(1).

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.linear_model import Lasso
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(100, 5)); y = X @ np.array([2.0, 0, 0, -1.0, 0]) + 0.5
    >>> m = Lasso(alpha=0.1).fit(X, y)
    >>> np.flatnonzero(m.coef_).tolist()
    [0, 3]
    """

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None)],
        "tol": [Interval(Real, 0, None, closed="left")],
        "warm_start": ["boolean"],
        "precompute": ["boolean", "array-like"],
        "copy_X": ["boolean"],
        "positive": ["boolean"],
        "random_state": ["random_state"],
        "selection": [Options("cyclic", "random")],
    }
    _xpml_tags = {"multi_output": True}

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        precompute=False,
        copy_X=True,
        max_iter=1000,
        tol=1e-4,
        warm_start=False,
        positive=False,
        random_state=None,
        selection="cyclic",
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.precompute = precompute
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.warm_start = warm_start
        self.positive = positive
        self.random_state = random_state
        self.selection = selection

    def _warn_not_converged(self, gap, tol):
        """scikit-learn's wording first (its tests and users' filters match
        it), then xpml's explanation."""
        warn(
            ConvergenceWarning,
            "Objective did not converge. You might want to increase the number of "
            "iterations, check the scale of the features or consider increasing "
            f"regularisation. Duality gap: {gap:.3e}, tolerance: {tol:.3e}. xpml: "
            f"{type(self).__name__} did not converge in max_iter={self.max_iter} "
            "sweeps; increase max_iter or tol",
            stacklevel=3,
        )

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit by coordinate descent; returns self."""
        weighted = sample_weight is not None
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="multi")
        xp = ctx.xp
        n, d = X.shape
        if not self.alpha:  # scikit-learn's warning (and advice)
            warnings.warn(
                "With alpha=0, this algorithm does not converge well. You are advised "
                "to use the LinearRegression estimator",
                UserWarning,
                stacklevel=2,
            )
        if weighted:  # scikit-learn rescales the weights to sum to n
            sw = sw * (n / xp.sum(sw))
        Xs, ys, x_off, y_off, _ = center_data(
            X, y, sw, xp=xp, fit_intercept=self.fit_intercept, scale=weighted
        )
        targets = [ys] if len(y.shape) == 1 else [ys[:, t] for t in range(y.shape[1])]
        prev = getattr(self, "coef_", None) if self.warm_start else None
        coefs, gaps, iters = [], [], []
        rng = (
            check_random_state(self.random_state)
            if self.selection == "random"
            else None
        )
        for t, yt in enumerate(targets):
            w0 = xp.zeros((d,), dtype=X.dtype, device=ctx.device)
            if prev is not None and tuple(prev.shape) == (
                (d,) if len(y.shape) == 1 else (len(targets), d)
            ):
                prev_t = ctx.take(prev)
                w0 = xp.astype(prev_t if len(y.shape) == 1 else prev_t[t, :], X.dtype)
            w, gap, n_iter, tol_scaled = _cd_lasso(
                Xs,
                yt,
                w0,
                float(self.alpha) * n,
                xp=xp,
                max_iter=self.max_iter,
                tol=self.tol,
                positive=self.positive,
                rng=rng,
            )
            if gap > tol_scaled:
                self._warn_not_converged(gap, tol_scaled)
            coefs.append(w)
            gaps.append(gap)
            iters.append(n_iter)
        W = coefs[0] if len(y.shape) == 1 else xp.stack(coefs, axis=0)  # (d,) or (t, d)
        self.coef_ = W
        self.intercept_ = y_off - (x_off @ W if len(y.shape) == 1 else W @ x_off)
        self.n_iter_ = int(max(iters))
        # scikit-learn reports the gap of the mean objective (1/(2n))‖·‖² + α‖w‖₁
        self.dual_gap_ = float(max(gaps)) / n
        return self._fitted(ctx)

    def predict(self, X: ArrayLike) -> Array:
        """``X w + b``, in the caller's library."""
        ctx, X = self._validate_predict_data(X)
        W = ctx.take(self.coef_)
        return ctx.out(
            (X @ W if len(W.shape) == 1 else X @ W.T) + ctx.take(self.intercept_)
        )
