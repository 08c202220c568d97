"""Ridge regression: ``(XᵀX + λI′) w = Xᵀy`` with an unpenalised intercept."""

from __future__ import annotations

import contextlib
from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, RegressorMixin
from xpml.exceptions import ConvergenceWarning, warn
from xpml.linalg import _single_threaded_blas
from xpml.linear_model._base import (
    SklearnInputMixin,
    block_rows,
    center_data,
    check_finite_result,
    linalg_errors,
    solve_spd,
)
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import dispatch, eps, fast_path, portable, preload_namespace
from xpml.utils._param_validation import Interval, Options

__all__ = ["Ridge", "SOLVERS"]

# NumPy's array-API wrapper is built with the imports, not by the first fit (issue
# 16; see preload_namespace)
preload_namespace("numpy")

SOLVERS = ("auto", "primal", "dual", "svd")
# scikit-learn's solver names. They all solve the same strictly convex problem
# (exactly, or iteratively to ``tol``); xpml answers each with an exact method:
# "svd" by the thin SVD, the others by the normal equations ("primal" when
# n ≥ d, "dual" otherwise), which agree with scikit-learn's to its tolerance.
# "lbfgs" is scikit-learn's solver for ``positive=True``: projected coordinate
# descent on the Gram matrix here.
SKLEARN_SOLVERS = ("cholesky", "lsqr", "sparse_cg", "sag", "saga", "lbfgs")


def _positive_cd(H, c, /, *, xp, max_iter, tol):
    """Minimise ``½wᵀHw − cᵀw`` over ``w ≥ 0`` (``H`` SPD, ``c`` (d,)) by
    projected coordinate descent; one host sync per sweep. Returns
    ``(w, sweeps, converged)``."""
    d = H.shape[0]
    diag = to_numpy(xp.linalg.diagonal(H)).tolist() if d else []  # one sync
    w = [xp.zeros((), dtype=H.dtype, device=_device(H)) for _ in range(d)]
    g = -c  # gradient Hw − c at w = 0
    zero = w[0] if d else None
    it, done = 0, False
    for it in range(1, max_iter + 1):
        dw = zero
        for j in range(d):
            if diag[j] <= 0:
                continue
            new = xp.maximum(w[j] - g[j] / diag[j], zero)
            delta = new - w[j]
            g = g + delta * H[:, j]
            w[j] = new
            dw = xp.maximum(dw, xp.abs(delta))
        wv = xp.stack(w) if d else c
        top = float(xp.max(xp.abs(wv))) if d else 0.0  # one sync per sweep
        if not d or float(dw) <= tol * max(top, 1e-300):
            done = True
            break
    return (xp.stack(w) if d else xp.zeros_like(c)), it, done


def _alphas(alpha, n_targets):
    """``alpha`` as a host float array of length ``n_targets`` (or one)."""
    a = np.asarray(alpha, dtype=np.float64).reshape(-1)
    if a.shape[0] not in (1, n_targets):
        raise ValueError(
            f"Number of targets and number of penalties do not correspond: "
            f"{a.shape[0]} != {n_targets}"
        )
    if np.any(a < 0) or not np.all(np.isfinite(a)):
        raise ValueError(f"alpha must be non-negative and finite, got {alpha!r}")
    return a


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


def _normal_equations_example():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((700, 6)), rng.standard_normal(700)
    sqrt_w = np.sqrt(rng.uniform(0.5, 2.0, 700))
    return (X, y, X.mean(axis=0), y.mean(), sqrt_w), {"xp": None, "rows": 256}


@portable("linear_model.centred_normal_equations")
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


@fast_path(
    "linear_model.centred_normal_equations", "numpy", example=_normal_equations_example
)
def _centred_normal_equations_numpy(X, y, x_off, y_off, sqrt_w, /, *, xp, rows=None):
    """The portable twin's products, each block centred into one reused buffer
    (``out=``) instead of a fresh ~2 MiB array per block: a first fit faults in
    one block's pages, not those of every block glibc maps and trims (issue
    16). Same operations in the same order: the same numbers, bit for bit.
    BLAS runs with one thread meanwhile: on products of cache-sized blocks a
    second thread mostly waits (and spins)."""
    with _single_threaded_blas(np) or contextlib.nullcontext():
        return _blocked_normal_equations(X, y, x_off, y_off, sqrt_w, rows=rows)


def _blocked_normal_equations(X, y, x_off, y_off, sqrt_w, /, *, rows):
    n, d = X.shape
    rows = min(rows or block_rows(X, xp=np), n)
    buf = np.empty((rows, d), dtype=X.dtype)
    G = np.zeros((d, d), dtype=X.dtype)
    c = np.zeros((d,) + tuple(y.shape[1:]), dtype=X.dtype)
    for a in range(0, n, rows):
        e = min(a + rows, n)
        Xc = np.subtract(X[a:e, :], x_off, out=buf[: e - a])
        yc = y[a:e, ...] - y_off
        if sqrt_w is not None:
            np.multiply(Xc, sqrt_w[a:e, None], out=Xc)
            yc = yc * (sqrt_w[a:e] if y.ndim == 1 else sqrt_w[a:e, None])
        G = G + Xc.T @ Xc  # symmetric rank-k (BLAS syrk: Xc.T and Xc share data)
        c = c + Xc.T @ yc
    return G, c


def _normal_equations(X, y, x_off, y_off, sqrt_w, /, *, xp):
    return dispatch("linear_model.centred_normal_equations", xp)(
        X, y, x_off, y_off, sqrt_w, xp=xp
    )


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


class Ridge(SklearnInputMixin, RegressorMixin, BaseEstimator):
    """Linear least squares with an L2 penalty on the slopes.

    Minimises ``Σᵢ ωᵢ (yᵢ − xᵢ·w − b)² + α ‖w‖²``; the intercept ``b`` is not
    penalised (it is found by weighted centring). Same objective and parameter
    scale as :class:`sklearn.linear_model.Ridge`.

    Parameters
    ----------
    alpha : float or array (n_targets,), default=1.0
        Penalty strength ``α ≥ 0``; one per target when an array.
    fit_intercept : bool, default=True
    copy_X : bool, default=True
        Accepted for scikit-learn compatibility: ``X`` is never modified.
    max_iter : int or None, default=None
        Sweeps of the ``positive=True`` solver (None: 15000); the exact
        solvers ignore it.
    tol : float, default=1e-4
        Accepted; the exact solvers need none. ``positive=True`` stops when a
        sweep moves no coefficient by more than ``min(tol, 1e-8)`` times the
        largest one.
    positive : bool, default=False
        Constrain the slopes to be non-negative (solver "auto" or "lbfgs").
    random_state : int, Generator or None
        Accepted for scikit-learn compatibility (unused: no solver here is
        random).
    solver : {"auto", "primal", "dual", "svd", "cholesky", "lsqr", \
"sparse_cg", "sag", "saga", "lbfgs"}, default="auto"
        scikit-learn's names are accepted with the same meaning: all solve the
        same problem; "cholesky", "lsqr", "sparse_cg", "sag" and "saga" are
        answered exactly like "auto", and "lbfgs" (only with
        ``positive=True``) by projected coordinate descent.
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
        The solver used (``"auto"`` resolved to "primal", "dual" or "svd"); a
        scikit-learn name ("cholesky", "lbfgs", ...) is reported as given, as
        scikit-learn does (see ``solver`` for the method that answers it).
    n_iter_ : None or int array (n_targets,)
        Sweeps of the ``positive=True`` solver; None for the exact solvers.
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
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "fit_intercept": ["boolean"],
        "copy_X": ["boolean"],
        "max_iter": [None, Interval(Integral, 1, None)],
        "tol": [Interval(Real, 0, None, closed="left")],
        "solver": [Options(*SOLVERS, *SKLEARN_SOLVERS)],
        "positive": ["boolean"],
        "random_state": ["random_state"],
    }
    _xpml_tags = {
        "multi_output": True,
        "sklearn_xfail": {
            "check_non_transformer_estimators_n_iter": "n_iter_ is None for the "
            "direct solvers, as scikit-learn's own Ridge (which the check skips by "
            "name)",
        },
    }

    def __init__(
        self,
        alpha=1.0,
        *,
        fit_intercept=True,
        copy_X=True,
        max_iter=None,
        tol=1e-4,
        solver="auto",
        positive=False,
        random_state=None,
    ):
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.copy_X = copy_X
        self.max_iter = max_iter
        self.tol = tol
        self.solver = solver
        self.positive = positive
        self.random_state = random_state

    def _check_solver(self):
        """scikit-learn's pairing rules of ``solver`` and ``positive``."""
        if self.positive and self.solver not in ("auto", "lbfgs"):
            raise ValueError(
                f"solver='{self.solver}' does not support positive fitting. Please "
                "set the solver to 'auto' or 'lbfgs', or set `positive=False`"
            )
        if self.solver == "lbfgs" and not self.positive:
            raise ValueError(
                "'lbfgs' solver can be used only when positive=True. "
                "Please use another solver."
            )

    def _pick_solver(self, n, d, alpha):
        solver = self.solver
        if solver in ("auto", "cholesky", "lsqr", "sparse_cg", "sag", "saga"):
            solver = "primal" if n >= d else "dual"
        if solver == "dual" and not alpha:  # XXᵀ singular: minimum-norm by SVD
            solver = "svd"
        return solver

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit the ridge coefficients; returns self. ``X`` is never modified."""
        weighted = sample_weight is not None
        self._validate_params()
        self._check_solver()
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="multi")
        xp = ctx.xp
        n, d = X.shape
        alphas = _alphas(self.alpha, 1 if len(y.shape) == 1 else int(y.shape[1]))
        owner = type(self).__name__
        self.n_iter_ = None
        if self.positive:
            coef, x_off, y_off = self._solve_positive(
                X, y, sw, alphas, xp=xp, w=weighted
            )
            solver = "lbfgs"
        elif alphas.shape[0] > 1:  # one penalty per target: one solve per target
            solver = self._pick_solver(n, d, float(np.min(alphas)))
            cols = []
            for t, a in enumerate(alphas.tolist()):
                with linalg_errors(X, xp=xp, what="solve", owner=owner):
                    c, x_off, yo = self._solve(
                        X, y[:, t], sw, solver, a, xp=xp, w=weighted
                    )
                cols.append((c, yo))
            coef = xp.stack([c for c, _ in cols], axis=1)
            y_off = xp.stack([yo for _, yo in cols])
        else:
            alpha = float(alphas[0])
            solver = self._pick_solver(n, d, alpha)
            with linalg_errors(X, xp=xp, what="solve", owner=owner):
                coef, x_off, y_off = self._solve(
                    X, y, sw, solver, alpha, xp=xp, w=weighted
                )
        if solver == "svd":  # the other solvers checked their solve already
            check_finite_result(coef, X, xp=xp, what="coefficients", owner=owner)
        # one target given as a column: coef_ (d,) and intercept_ (1,), as scikit-learn
        one_col = len(y.shape) == 2 and y.shape[1] == 1
        self.coef_ = coef[:, 0] if one_col else (coef.T if len(y.shape) == 2 else coef)
        self.intercept_ = y_off - x_off @ coef
        # scikit-learn's names are reported as given (computed as documented)
        self.solver_ = self.solver if self.solver in SKLEARN_SOLVERS else solver
        return self._fitted(ctx)

    def _solve_positive(self, X, y, sw, alphas, /, *, xp, w):
        """Non-negative ridge: projected coordinate descent on the centred Gram
        matrix, one target at a time. Returns ``(coef, x̄, ȳ)``."""
        x_off, y_off = _weighted_means(
            X, y, sw if w else None, xp=xp, fit_intercept=self.fit_intercept
        )
        G, c = _normal_equations(X, y, x_off, y_off, xp.sqrt(sw) if w else None, xp=xp)
        d = X.shape[1]
        max_iter = self.max_iter if self.max_iter is not None else 15000
        tol = min(float(self.tol), 1e-8)
        cols, iters = [], []
        for t in range(1 if len(y.shape) == 1 else int(y.shape[1])):
            a = float(alphas[min(t, alphas.shape[0] - 1)])
            ct = c if len(y.shape) == 1 else c[:, t]
            wt, it, done = _positive_cd(
                G + a * _eye(d, X, xp), ct, xp=xp, max_iter=max_iter, tol=tol
            )
            cols.append(wt)
            iters.append(it)
            if not done:
                warn(
                    ConvergenceWarning,
                    f"The lbfgs solver did not converge in max_iter={max_iter} sweeps "
                    f"(Ridge(positive=True) is solved by projected coordinate descent "
                    f"here); increase max_iter or tol",
                    stacklevel=3,
                )
        coef = cols[0] if len(y.shape) == 1 else xp.stack(cols, axis=1)
        self.n_iter_ = np.asarray(iters, dtype=np.int32)
        return coef, x_off, y_off

    def _solve(self, X, y, sw, solver, alpha, /, *, xp, w):
        """``(coef, x̄, ȳ)`` by ``solver``; ``w``: sample weights were given."""
        weighted, d = w, X.shape[1]
        if solver == "primal":
            x_off, y_off = _weighted_means(
                X, y, sw if weighted else None, xp=xp, fit_intercept=self.fit_intercept
            )
            G, c = _normal_equations(
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

    def predict(self, X: ArrayLike) -> Array:
        """``X w + b``, in the caller's library."""
        ctx, X = self._validate_predict_data(X)
        coef, b = ctx.take(self.coef_), ctx.take(self.intercept_)
        return ctx.out((X @ coef if len(coef.shape) == 1 else X @ coef.T) + b)
