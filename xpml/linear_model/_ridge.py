"""Ridge regression: ``(XᵀX + λI′) w = Xᵀy`` with an unpenalised intercept."""

from __future__ import annotations

from numbers import Real

from xpml.base import BaseEstimator, RegressorMixin
from xpml.linear_model._base import (
    block_rows,
    center_data,
    check_finite_result,
    linalg_errors,
    solve_spd,
)
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import eps
from xpml.utils._param_validation import Interval, Options

__all__ = ["Ridge", "SOLVERS"]

SOLVERS = ("auto", "primal", "dual", "svd")


def _eye(m, X, xp):
    return xp.eye(m, dtype=X.dtype, device=_device(X))


def _solve_primal(Xs, ys, alpha, /, *, xp):
    """``(XsᵀXs + αI) w = Xsᵀys``: a ``d × d`` system."""
    G = Xs.T @ Xs
    if alpha:
        G = G + alpha * _eye(Xs.shape[1], Xs, xp)
    return solve_spd(G, Xs.T @ ys, Xs, xp=xp, owner="Ridge")


def _weighted_means(X, y, sw, /, *, xp, fit_intercept):
    """``(x̄, ȳ)``, weighted when ``sw`` is given; zeros without an intercept."""
    if not fit_intercept:
        return (
            xp.zeros((X.shape[1],), dtype=X.dtype, device=_device(X)),
            xp.zeros(tuple(y.shape[1:]), dtype=X.dtype, device=_device(X)),
        )
    if sw is None:
        return xp.mean(X, axis=0), xp.mean(y, axis=0)
    wsum = xp.sum(sw)
    yw = sw * y if len(y.shape) == 1 else sw[:, None] * y
    return xp.sum(sw[:, None] * X, axis=0) / wsum, xp.sum(yw, axis=0) / wsum


def _centred_normal_equations(X, y, x_off, y_off, sqrt_w, /, *, xp, rows=None):
    """``XsᵀXs`` and ``Xsᵀys`` for ``Xs = √w (X − x̄)``, ``ys = √w (y − ȳ)``, built
    block by block so the centred copy of ``X`` is never formed: one pass over
    ``X`` whose blocks stay in cache for the three products."""
    n, d = X.shape
    rows = rows or block_rows(X, xp=xp)
    G = xp.zeros((d, d), dtype=X.dtype, device=_device(X))
    c = xp.zeros((d,) + tuple(y.shape[1:]), dtype=X.dtype, device=_device(X))
    for a in range(0, n, rows):
        e = min(a + rows, n)
        Xc, yc = X[a:e, :] - x_off, y[a:e, ...] - y_off
        if sqrt_w is not None:
            Xc = Xc * sqrt_w[a:e, None]
            yc = yc * (sqrt_w[a:e] if len(y.shape) == 1 else sqrt_w[a:e, None])
        G = G + Xc.T @ Xc  # symmetric rank-k (BLAS syrk)
        c = c + Xc.T @ yc
    return G, c


def _solve_dual(Xs, ys, alpha, /, *, xp):
    """``w = Xsᵀ (XsXsᵀ + αI)⁻¹ ys``: an ``n × n`` system (cheaper when d > n)."""
    K = Xs @ Xs.T
    if alpha:
        K = K + alpha * _eye(Xs.shape[0], Xs, xp)
    return Xs.T @ solve_spd(K, ys, Xs, xp=xp, owner="Ridge", what="dual system")


def _solve_svd(Xs, ys, alpha, /, *, xp):
    """``w = V diag(s / (s² + α)) Uᵀ ys`` (also the minimum-norm solution at α = 0).

    The filter is computed as ``1 / (s + α/s)``, which cannot overflow where
    ``s²`` would (features near ``1e300``), so this solver stays exact there.
    """
    U, s, Vt = xp.linalg.svd(Xs, full_matrices=False)
    keep = s > max(Xs.shape) * eps(Xs.dtype, xp) * (s[0] if s.shape[0] else 0.0)
    s_safe = xp.where(keep, s, xp.ones_like(s))
    f = xp.where(keep, 1.0 / (s_safe + alpha / s_safe), xp.zeros_like(s))
    Utb = U.T @ ys
    return Vt.T @ (f[:, None] * Utb if len(ys.shape) == 2 else f * Utb)


class Ridge(RegressorMixin, BaseEstimator):
    """Linear least squares with an L2 penalty on the slopes.

    Minimises ``Σᵢ ωᵢ (yᵢ − xᵢ·w − b)² + α ‖w‖²``; the intercept ``b`` is not
    penalised (it is found by weighted centring). Same objective and parameter
    scale as :class:`sklearn.linear_model.Ridge`.

    Parameters
    ----------
    alpha : float, default=1.0
        Penalty strength ``α ≥ 0``.
    fit_intercept : bool, default=True
    solver : {"auto", "primal", "dual", "svd"}, default="auto"
        ``"primal"`` solves the ``d × d`` system ``(XᵀX + αI)w = Xᵀy``;
        ``"dual"`` the ``n × n`` system ``(XXᵀ + αI)a = y`` with ``w = Xᵀa``;
        ``"svd"`` uses the thin SVD. ``"auto"``: primal when ``n ≥ d``, dual
        otherwise. All give the same coefficients. With ``alpha=0`` the dual
        system ``XXᵀ`` is singular whenever ``n > d`` (and ill-conditioned
        otherwise), so ``"dual"`` is routed to ``"svd"`` (``solver_`` says so).

    Attributes
    ----------
    coef_ : array (d,) or (n_targets, d)
    intercept_ : float array () or (n_targets,)
    solver_ : str
        The solver used (``"auto"`` resolved).
    n_features_in_ : int

    Notes
    -----
    With ``Xs = √Ω (X − x̄)`` and ``ys = √Ω (y − ȳ)``:
    ``w = (XsᵀXs + αI)⁻¹ Xsᵀ ys = Xsᵀ (XsXsᵀ + αI)⁻¹ ys`` and ``b = ȳ − x̄·w``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.linear_model import Ridge
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([1.0, 3.0, 5.0, 7.0])
    >>> r = Ridge(alpha=0.0).fit(X, y)
    >>> round(float(r.coef_[0]), 8), round(float(r.intercept_), 8)
    (2.0, 1.0)
    >>> p = Ridge(alpha=2.0, solver="primal").fit(X, y).coef_
    >>> d = Ridge(alpha=2.0, solver="dual").fit(X, y).coef_
    >>> bool(np.allclose(p, d))
    True
    """

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "solver": [Options(*SOLVERS)],
    }
    _xpml_tags = {"multi_output": True}

    def __init__(self, alpha=1.0, *, fit_intercept=True, solver="auto"):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.solver = solver

    def fit(self, X, y, sample_weight=None):
        """Fit the ridge coefficients; returns self."""
        weighted = sample_weight is not None
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="multi")
        xp = ctx.xp
        n, d = X.shape
        solver = (
            self.solver if self.solver != "auto" else ("primal" if n >= d else "dual")
        )
        alpha = float(self.alpha)
        if solver == "dual" and not alpha:  # XXᵀ singular: minimum-norm by SVD
            solver = "svd"
        owner = type(self).__name__
        with linalg_errors(X, xp=xp, what="solve", owner=owner):
            coef, x_off, y_off = self._solve(X, y, sw, solver, alpha, xp=xp, w=weighted)
        if solver == "svd":  # the other solvers checked their solve already
            check_finite_result(coef, X, xp=xp, what="coefficients", owner=owner)
        self.coef_ = coef.T if len(y.shape) == 2 else coef
        self.intercept_ = y_off - x_off @ coef
        self.solver_ = solver
        return self._fitted(ctx)

    def _solve(self, X, y, sw, solver, alpha, /, *, xp, w):
        """``(coef, x̄, ȳ)`` by ``solver``; ``w``: sample weights were given."""
        weighted, d = w, X.shape[1]
        if solver == "primal":
            x_off, y_off = _weighted_means(
                X, y, sw if weighted else None, xp=xp, fit_intercept=self.fit_intercept
            )
            G, c = _centred_normal_equations(
                X, y, x_off, y_off, xp.sqrt(sw) if weighted else None, xp=xp
            )
            if alpha:
                G = G + alpha * _eye(d, X, xp)
            coef = solve_spd(G, c, X, xp=xp, owner="Ridge")
        else:
            Xs, ys, x_off, y_off, _ = center_data(
                X, y, sw, xp=xp, fit_intercept=self.fit_intercept, scale=weighted
            )
            coef = getattr(self, f"_solve_{solver}")(Xs, ys, alpha, xp=xp)
        return coef, x_off, y_off

    _solve_primal = staticmethod(_solve_primal)
    _solve_dual = staticmethod(_solve_dual)
    _solve_svd = staticmethod(_solve_svd)

    def predict(self, X):
        """``X w + b``, in the caller's library."""
        ctx, X = self._validate_predict_data(X)
        coef, b = ctx.take(self.coef_), ctx.take(self.intercept_)
        return ctx.out((X @ coef if len(coef.shape) == 1 else X @ coef.T) + b)
