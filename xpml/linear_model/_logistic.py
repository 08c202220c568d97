"""Logistic regression: batch gradient descent, SGD and Newton (IRLS).

One objective for every solver (scikit-learn's, up to a constant factor)::

    F(w, b) = Σᵢ ωᵢ ℓᵢ + ‖w‖² / (2C)        (penalty="l2"; no second term for None)

with ``ℓᵢ`` the logistic (two classes) or softmax cross-entropy (more) loss; the
intercept ``b`` is never penalised. Newton solves ``H e = −∇F`` with
``H = XᵀΩX (+ I/C)``, ``Ω = diag(ω s(1 − s))`` (the multinomial Hessian has the
``K × K`` blocks ``Xᵀ diag(ω(p_k δ_km − p_k p_m)) X``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings
from numbers import Integral, Real

from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.exceptions import ConvergenceWarning, SeparableDataWarning, warn
from xpml.linalg import _single_threaded_blas
from xpml.linear_model._base import (
    LinearClassifierMixin,
    SklearnInputMixin,
    block_rows,
    check_finite_result,
    class_weight_factors,
    linalg_errors,
    log_sigmoid,
    logsumexp,
    psd_lstsq,
    sigmoid,
    softmax,
    solve_spd,
)
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import eps
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state

__all__ = ["LogisticRegression", "SOLVERS"]

SOLVERS = ("newton", "gd", "sgd")
# scikit-learn's solver names: they solve the same convex problem, so they are
# answered by xpml's exact solvers: Newton for the L2 / no penalty, proximal
# gradient (FISTA) for "l1" and "elasticnet". scikit-learn's pairing rules of
# solver and penalty are kept (errors as scikit-learn's).
SKLEARN_SOLVERS = ("lbfgs", "liblinear", "newton-cg", "newton-cholesky", "sag", "saga")
_SUPPORTS = {
    "l1": ("liblinear", "saga"),
    "elasticnet": ("saga",),
}


# --------------------------------------------------------------- pure helpers
def _scores(X, W, b, /, *, xp):
    """Linear scores ``X W + b``: (n, m)."""
    return X @ W + b


def _loss(Z, Y, sw, /, *, xp, binary):
    """``Σ ωᵢ ℓᵢ`` for scores ``Z`` (n, m) and targets ``Y`` (one-hot, or (n, 1) 0/1)."""
    if binary:
        z = Z[:, 0]
        y = Y[:, 0]
        # −[y log σ(z) + (1 − y) log σ(−z)], with log σ(−z) = log σ(z) − z
        return -xp.sum(sw * (log_sigmoid(z, xp=xp) - (1.0 - y) * z))
    lse = logsumexp(Z, xp=xp, axis=1)[:, 0]
    return xp.sum(sw * (lse - xp.sum(Y * Z, axis=1)))


def _probs(Z, /, *, xp, binary):
    return sigmoid(Z, xp=xp) if binary else softmax(Z, xp=xp, axis=1)


def _objective(X, Y, sw, W, b, /, *, lam, xp, binary):
    F = _loss(_scores(X, W, b, xp=xp), Y, sw, xp=xp, binary=binary)
    return F + 0.5 * lam * xp.sum(W * W) if lam else F


def _gradient(X, Y, sw, W, b, /, *, lam, xp, binary, fit_intercept):
    """``(∇_W F, ∇_b F, residual)`` with residual ``ω (p − y)`` (n, m)."""
    P = _probs(_scores(X, W, b, xp=xp), xp=xp, binary=binary)
    Rw = sw[:, None] * (P - Y)
    gW = X.T @ Rw
    if lam:
        gW = gW + lam * W
    gb = xp.sum(Rw, axis=0) if fit_intercept else xp.zeros_like(b)
    return gW, gb, P


def _augment(X, /, *, xp):
    ones = xp.ones((X.shape[0], 1), dtype=X.dtype, device=_device(X))
    return xp.concat([ones, X], axis=1)


def _binary_gradient(X, z, y, sw, w, /, *, lam, xp, fit_intercept):
    """Gradient of the binary objective at scores ``z`` (one product with
    ``X``): ``(g_w, g_b)`` of :func:`_binary_newton_system` without its Hessian."""
    s = sigmoid(z, xp=xp)
    r = sw * (s - y)
    gw = X.T @ r
    if lam:
        gw = gw + lam * w
    if fit_intercept:
        return gw, xp.sum(r)[None]
    return gw, xp.zeros((1,), dtype=X.dtype, device=_device(X))


def _binary_newton_system(X, z, y, sw, w, /, *, lam, xp, fit_intercept, rows=None):
    """Gradient and Hessian of the binary objective at scores ``z``, in one pass over
    ``X`` by row blocks (each block is used three times while it is in cache):
    ``g = Xᵀ ω(s − y) (+ λw)`` and ``H = XᵀΩX (+ λI)`` with ``Ω = diag(ω s(1 − s))``,
    bordered by the intercept's row and column when ``fit_intercept``.

    Returns ``(g_w, g_b, H)``; ``H`` is ``(d+1) × (d+1)`` (intercept first) or ``d × d``.
    """
    n, d = X.shape
    rows = rows or block_rows(X, xp=xp)
    dev = _device(X)
    G = xp.zeros((d, 2), dtype=X.dtype, device=dev)
    H = xp.zeros((d, d), dtype=X.dtype, device=dev)
    r_sum = xp.zeros((), dtype=X.dtype, device=dev)
    o_sum = xp.zeros((), dtype=X.dtype, device=dev)
    for a in range(0, n, rows):
        e = min(a + rows, n)
        Xc, swc = X[a:e, :], sw[a:e]
        s = sigmoid(z[a:e], xp=xp)
        r = swc * (s - y[a:e])
        om = swc * s * (1.0 - s)
        G = G + Xc.T @ xp.stack([r, om], axis=1)
        B = xp.sqrt(om)[:, None] * Xc
        H = H + B.T @ B  # XᵀΩX as a symmetric rank-k product (BLAS syrk)
        r_sum, o_sum = r_sum + xp.sum(r), o_sum + xp.sum(om)
    gw, Hwb = G[:, 0], G[:, 1]
    if lam:
        gw = gw + lam * w
        H = H + lam * xp.eye(d, dtype=X.dtype, device=dev)
    if not fit_intercept:
        return gw, xp.zeros((1,), dtype=X.dtype, device=dev), H
    H = xp.concat(
        [
            xp.concat([o_sum[None, None], Hwb[None, :]], axis=1),
            xp.concat([Hwb[:, None], H], axis=1),
        ],
        axis=0,
    )
    return gw, r_sum[None], H


def _subsample_stride(n, d):
    """Row stride ``k`` of the warm start's Hessian sample, about
    ``4 max(1024, 128 (d + 1))`` rows (its fit uses every fourth of them); 0 (no
    warm start) when that would be all the rows."""
    return n // (4 * max(1024, 128 * (d + 1)))


def _bfgs_update(H, s, r, /, *, xp):
    """BFGS update of the Hessian approximation ``H`` with the step ``s`` and the
    change of gradient ``r``: ``H − H s sᵀH / sᵀHs + r rᵀ / rᵀs``; ``H``
    unchanged when the curvature ``rᵀs`` is not clearly positive (no host sync)."""
    Hs = H @ s
    sHs, rs = xp.sum(s * Hs), xp.sum(r * s)
    ok = (sHs > 0) & (rs > 1e-10 * sHs)
    one = xp.ones_like(sHs)
    sHs, rs = xp.where(ok, sHs, one), xp.where(ok, rs, one)
    new = H - Hs[:, None] * (Hs[None, :] / sHs) + r[:, None] * (r[None, :] / rs)
    return xp.where(ok, new, H)


def _binary_objective(z, y, sw, w, /, *, lam, xp):
    """``F`` of the binary problem at scores ``z`` (a device scalar)."""
    F = -xp.sum(sw * (log_sigmoid(z, xp=xp) - (1.0 - y) * z))
    return F + 0.5 * lam * xp.sum(w * w) if lam else F


def _flat_gradient(X, z, y, sw, w, /, *, lam, xp, fit_intercept):
    """The binary gradient as one vector, intercept first: ``(p,)``."""
    gw, gb = _binary_gradient(
        X, z, y, sw, w, lam=lam, xp=xp, fit_intercept=fit_intercept
    )
    return xp.concat([gb, gw]) if fit_intercept else gw


def _objective_along(line, t, /, *, lam, xp):
    """The binary ``F`` at ``t`` along ``line = (z, dz, w, ew, y, ω)``."""
    z, dz, w, ew, y, sw = line
    return _binary_objective(z + t * dz, y, sw, w + t * ew, lam=lam, xp=xp)


def _backtrack(objective, F, slope, resolution, /):
    """Armijo backtracking: ``(t, F(t))`` for the first ``t = 1, ½, ¼, …`` with
    ``F(t) ≤ F + 10⁻⁴ t · slope`` (30 halvings at most); ``objective(t)`` is
    ``F`` at step ``t`` (a device scalar). Where the predicted decrease
    ``|slope|`` is below ``resolution`` (the rounding of ``F``'s sum), ``F``
    cannot judge the step: ``F(t) ≤ F + resolution`` accepts it."""
    F, slope, step = float(F), float(slope), 1.0
    flat = abs(slope) <= resolution
    for _ in range(30):
        Fn = float(objective(step))
        if Fn <= F + 1e-4 * step * slope or step < 1e-10:
            break
        if flat and Fn <= F + resolution:
            break
        step *= 0.5
    return step, Fn


def _scores_and_gradient(X, z, e, y, sw, /, *, xp, fit_intercept, rows=None):
    """The change of scores ``dz = X e_w + e_b`` along the step ``e`` (intercept
    first when ``fit_intercept``) and the loss's gradient (no penalty) at
    ``z + dz``, intercept first: ``(dz, g)``, in one pass over ``X`` by row
    blocks (each block is read twice while it is in cache)."""
    n = X.shape[0]
    rows = rows or block_rows(X, xp=xp)
    ew, eb = (e[1:], e[0]) if fit_intercept else (e, 0.0)
    gw = xp.zeros((X.shape[1],), dtype=X.dtype, device=_device(X))
    parts, r_sum = [], xp.zeros((), dtype=X.dtype, device=_device(X))
    for a in range(0, n, rows):
        Xc = X[a : min(a + rows, n), :]
        d = Xc @ ew + eb
        r = sw[a : a + d.shape[0]] * (
            sigmoid(z[a : a + d.shape[0]] + d, xp=xp) - y[a : a + d.shape[0]]
        )
        gw, r_sum = gw + Xc.T @ r, r_sum + xp.sum(r)
        parts.append(d)
    dz = parts[0] if len(parts) == 1 else xp.concat(parts)
    return dz, (xp.concat([r_sum[None], gw]) if fit_intercept else gw)


def _add_penalty(g, w, b, /, *, lam, xp, fit_intercept):
    """The flat gradient ``g`` (intercept first) plus the penalty's ``λ w``."""
    if not lam:
        return g
    return g + lam * (xp.concat([xp.zeros_like(b), w]) if fit_intercept else w)


def _separated(Z, codes, sw, /, *, xp, binary):
    """True when every positively-weighted training point is classified correctly
    with a positive margin (then the unregularised MLE does not exist)."""
    if binary:
        sign = xp.astype(codes, Z.dtype) * 2.0 - 1.0
        ok = sign * Z[:, 0] > 0
    else:
        onehot = codes[:, None] == xp.arange(Z.shape[1], device=_device(Z))[None, :]
        true = xp.sum(xp.where(onehot, Z, xp.zeros_like(Z)), axis=1)
        other = xp.max(xp.where(onehot, xp.full_like(Z, -float("inf")), Z), axis=1)
        ok = true > other
    return bool(xp.all(ok | (sw <= 0)))


def _sklearn_convergence_phrase(solver, n_iter, max_iter):
    """scikit-learn's convergence-warning wording for ``solver`` (what its
    tests and users' warning filters match), ending with a newline; empty for
    xpml's own solvers."""
    if solver == "lbfgs":
        return (
            f"lbfgs failed to converge after {n_iter} iteration(s) (status=1):\n"
            "STOP: TOTAL NO. OF ITERATIONS REACHED LIMIT\n\n"
            "Increase the number of iterations to improve the convergence "
            f"(max_iter={max_iter}).\n"
        )
    phrases = {
        "newton-cg": f"newton-cg failed to converge after {n_iter} iteration(s). "
        "Increase the number of iterations.",
        "newton-cholesky": f"Newton solver did not converge after {n_iter} iterations.",
        "liblinear": "Liblinear failed to converge, increase the number of iterations.",
        "sag": "The max_iter was reached which means the coef_ did not converge",
        "saga": "The max_iter was reached which means the coef_ did not converge",
    }
    return phrases[solver] + "\n" if solver in phrases else ""


def _future(message):
    warnings.warn(message, FutureWarning, stacklevel=5)


def _user(message):
    warnings.warn(message, UserWarning, stacklevel=5)


class LogisticRegression(
    SklearnInputMixin, LinearClassifierMixin, ClassifierMixin, BaseEstimator
):
    """Logistic regression (binary) and softmax regression (multinomial).

    Parameters
    ----------
    penalty : {"l1", "l2", "elasticnet", None, "deprecated"}, default="deprecated"
        ``"l2"`` adds ``‖w‖²/(2C)``, ``"l1"`` adds ``‖w‖₁/C``, ``"elasticnet"``
        ``(r‖w‖₁ + (1 − r)‖w‖²/2)/C`` with ``r = l1_ratio``; the intercept is
        never penalised. ``"deprecated"`` (scikit-learn's default): the penalty
        is set by ``l1_ratio`` alone (0: L2, 1: L1); ``C=np.inf`` removes it.
    l1_ratio : float in [0, 1] or None, default=0.0
    dual, intercept_scaling, verbose, n_jobs
        Accepted for scikit-learn compatibility (``dual=True`` only with
        ``solver="liblinear"``, as scikit-learn; the primal is solved).
    class_weight : dict, "balanced" or None
        Multiplies each sample's weight by its class's weight; "balanced":
        ``n / (K · n_k)``.
    warm_start : bool, default=False
        Start from the previous ``coef_`` / ``intercept_`` when their shapes fit.
    C : float, default=1.0
        Inverse penalty strength, as in scikit-learn: the objective is
        ``Σᵢ ωᵢ ℓᵢ + ‖w‖²/(2C)`` (scikit-learn's divided by ``C``).
    solver : {"lbfgs", "newton-cg", "newton-cholesky", "sag", "liblinear", \
"saga", "newton", "gd", "sgd"}, default="lbfgs"
        scikit-learn's names solve the same convex problem: with the L2 or no
        penalty they run ``"newton"``; "l1" (with "liblinear" or "saga") and
        "elasticnet" (with "saga") run FISTA. Unlike liblinear, the intercept
        is never penalised.
        ``"newton"``: Newton–Raphson = IRLS with a backtracking line search
        (two classes, a cold start and at least ``4 max(1024, 128 (d + 1))``
        rows: Newton on a strided subsample first, then BFGS steps on all rows
        from a subsample's Hessian: one pass over ``X`` per step instead of a
        new Hessian; ``n_iter_`` counts the steps on all rows);
        ``"gd"``: full-batch gradient descent; ``"sgd"``: mini-batch stochastic
        gradient descent with a decaying step.
    fit_intercept : bool, default=True
    max_iter : int, default=100
        Newton steps, gradient steps ("gd") or epochs ("sgd").
    tol : float, default=1e-6
        scikit-learn's default. xpml's solvers work to ``tol / 100``: stop
        when ``max |∇F| / Σω ≤ tol / 100`` ("newton", "gd"; for Newton one
        more quadratic step is cheap, and the answer then matches
        scikit-learn's at its own tol), when an epoch moves no parameter by
        more than ``tol / 100`` ("sgd"), or a proximal step none by more than
        ``tol / 100`` relative (L1 / elastic net).
    learning_rate : float or None, default=None
        Step size on the mean objective for "gd"/"sgd". None: ``1/L`` with
        ``L`` the Lipschitz constant of the mean gradient (from the largest
        eigenvalue of ``[1, X]ᵀ[1, X] / Σω``).
    batch_size : int, default=32
        Mini-batch size for "sgd".
    random_state : int, Generator or None
        Shuffling for "sgd" (drawn on the host, same on every backend).

    Attributes
    ----------
    classes_ : array (K,)
    coef_ : array (1, d) for two classes, (K, d) otherwise
    intercept_ : array (1,) or (K,)
    n_iter_ : int array (1,)
        Iterations run (scikit-learn's shape).
    converged_ : bool
    n_features_in_ : int

    Notes
    -----
    On linearly separable data without a penalty the weights grow without bound:
    Newton stops as soon as its iterate separates the data, gradient descent
    runs its budget ``max_iter``; both warn with
    :class:`xpml.exceptions.SeparableDataWarning`. Gradient descent then turns,
    slowly (``O(1/log t)``), toward the max-margin direction in the augmented
    space ``[1, x]`` (Soudry et al. 2018).

    References
    ----------
    Soudry, Hoffer, Nacson, Gunasekar & Srebro (2018), The implicit bias of
    gradient descent on separable data. JMLR 19.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.linear_model import LogisticRegression
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0, 0, 1, 1])
    >>> clf = LogisticRegression(C=1.0).fit(X, y)
    >>> clf.predict(np.array([[0.2], [2.8]])).tolist()
    [0, 1]
    >>> bool(np.allclose(clf.predict_proba(X).sum(axis=1), 1.0))
    True
    """

    _parameter_constraints = {
        # C=np.inf: no penalty (scikit-learn's way since penalty is deprecated)
        "C": [Interval(Real, 0, None, closed="neither", allow_inf=True)],
        "l1_ratio": [None, Interval(Real, 0, 1, closed="both")],
        "dual": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [None, "dict", Options("balanced")],
        "verbose": [Interval(Integral, 0, None)],
        "warm_start": ["boolean"],
        "n_jobs": [None, Interval(Integral, None, -1), Interval(Integral, 1, None)],
        "batch_size": [Interval(Integral, 1, None)],
        "fit_intercept": ["boolean"],
        "learning_rate": [None, Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 0, None)],
        "penalty": [Options("l1", "l2", "elasticnet", None, "deprecated")],
        "random_state": ["random_state"],
        "solver": [Options(*SOLVERS, *SKLEARN_SOLVERS)],
        "tol": [Interval(Real, 0, None, closed="left")],
    }
    _xpml_tags = {"parity_rtol": 1e-7}

    def __init__(
        self,
        penalty="deprecated",
        *,
        C=1.0,
        l1_ratio=0.0,
        dual=False,
        tol=1e-4,
        fit_intercept=True,
        intercept_scaling=1,
        class_weight=None,
        random_state=None,
        solver="lbfgs",
        max_iter=100,
        verbose=0,
        warm_start=False,
        n_jobs=None,
        learning_rate=None,
        batch_size=32,
    ):
        self.penalty = penalty
        self.C = C
        self.l1_ratio = l1_ratio
        self.dual = dual
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.verbose = verbose
        self.warm_start = warm_start
        self.n_jobs = n_jobs
        self.solver = solver
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.learning_rate = learning_rate
        self.batch_size = batch_size
        self.random_state = random_state

    # ------------------------------------------------------------------ fit
    def _penalty(self):
        """``(penalty, l1_ratio)`` resolved as scikit-learn does, checked
        against the solver."""
        pen, r = self.penalty, self.l1_ratio
        self._deprecation_warnings()
        if pen == "deprecated":
            r = 0.0 if r is None else float(r)
            pen = "l2" if r == 0 else ("l1" if r == 1 else "elasticnet")
        elif pen == "l1":
            r = 1.0
        elif pen == "elasticnet":
            if r is None:
                raise ValueError(
                    "l1_ratio must be specified when penalty is elasticnet."
                )
            r = float(r)
        else:
            r = 0.0
        if pen in _SUPPORTS and self.solver not in _SUPPORTS[pen]:
            raise ValueError(
                f"Solver {self.solver} supports only 'l2' or None penalties, got {pen} "
                f"penalty (solvers for {pen}: {', '.join(_SUPPORTS[pen])})."
            )
        if self.dual and self.solver != "liblinear":
            raise ValueError(
                f"Solver {self.solver} supports only dual=False, got dual=True"
            )
        return pen, r

    def _deprecation_warnings(self):
        """scikit-learn 1.8's FutureWarnings (``penalty``, ``l1_ratio=None``,
        ``n_jobs``) and its UserWarnings on ``penalty`` / ``l1_ratio`` / ``C``
        combinations one of them ignores, with scikit-learn's wording."""
        pen, r = self.penalty, self.l1_ratio
        if pen == "deprecated" and r is None:
            _future(
                "'l1_ratio=None' was deprecated in version 1.8 and will trigger "
                "an error in 1.10. Use 0<=l1_ratio<=1 instead. xpml reads it as 0 "
                "(L2 penalty)."
            )
        if pen != "deprecated":
            _future(
                "'penalty' was deprecated in version 1.8 and will be removed in "
                "1.10. To avoid this warning, leave 'penalty' set to its default "
                "value and use 'l1_ratio' or 'C' instead. Use l1_ratio=0 instead of "
                "penalty='l2', l1_ratio=1 instead of penalty='l1', l1_ratio set to "
                "a float between 0 and 1 instead of penalty='elasticnet', and "
                "C=np.inf instead of penalty=None."
            )
        if self.n_jobs is not None:
            _future(
                "'n_jobs' has no effect since 1.8 and will be removed in 1.10. "
                f"You provided 'n_jobs={self.n_jobs}', please leave it unspecified "
                "(xpml never used it: its solvers run on the inputs' device)."
            )
        if pen == "deprecated":
            pen = None if self.C == math.inf else ("elasticnet" if r and r < 1 else "")
        if pen != "elasticnet" and r is not None and 0 < r < 1:
            _user(
                f"l1_ratio parameter is only used when penalty is 'elasticnet'. "
                f"Got (penalty={pen}); l1_ratio={r} is ignored."
            )
        if (pen == "l2" and r != 0) or (pen == "l1" and r != 1):
            _user(
                f"Inconsistent values: penalty={pen} with l1_ratio={r}. penalty is "
                "deprecated. Please use l1_ratio only. xpml follows penalty."
            )
        if self.penalty is None and self.C != 1.0:
            _user(
                "Setting penalty=None will ignore the C and l1_ratio parameters "
                f"(C={self.C} is not used: the objective has no penalty term)."
            )

    def _solver_method(self, pen, r):
        if pen in _SUPPORTS and r > 0:  # elasticnet with l1_ratio=0 is the L2 problem
            return "prox"
        return self.solver if self.solver in SOLVERS else "newton"

    def _start(self, prev, d, m, X, ctx):
        """Zeros, or the previous fit's ``(W, b)`` (``warm_start``) when its
        shape fits."""
        xp = ctx.xp
        W = xp.zeros((d, m), dtype=X.dtype, device=ctx.device)
        b = xp.zeros((m,), dtype=X.dtype, device=ctx.device)
        if prev is None or tuple(prev[0].shape) != (m, d):
            return W, b
        return (
            xp.astype(ctx.take(prev[0]), X.dtype).T,
            xp.astype(ctx.take(prev[1]), X.dtype),
        )

    def _targets(self, codes, sw, X, ctx):
        """One-hot (or (n, 1) 0/1) targets and the class-weighted sample weights."""
        xp = ctx.xp
        cw = class_weight_factors(
            self.class_weight, self.classes_, codes, xp=xp, dtype=X.dtype
        )
        if cw is not None:
            sw = sw * cw
        K = int(self.classes_.shape[0])
        if K == 2:
            return xp.astype(codes, X.dtype)[:, None], sw
        one_hot = codes[:, None] == xp.arange(K, device=ctx.device)[None, :]
        return xp.astype(one_hot, X.dtype), sw

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit by the chosen solver; returns self."""
        self._validate_params()
        pen, r = self._penalty()
        method = self._solver_method(pen, r)
        prev = (
            (self.coef_, self.intercept_)
            if self.warm_start and hasattr(self, "coef_")
            else None
        )
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        xp = ctx.xp
        Y, sw = self._targets(codes, sw, X, ctx)
        binary = Y.shape[1] == 1
        if self.solver == "liblinear" and not binary:
            raise ValueError(
                "The 'liblinear' solver does not support multiclass classification "
                "(n_classes >= 3). Either use another solver or wrap the estimator in "
                "a OneVsRestClassifier to keep applying a one-versus-rest scheme."
            )
        inv_c = 1.0 / float(self.C) if pen is not None else 0.0
        lam, l1 = inv_c * (1.0 - r), inv_c * r
        W, b = self._start(prev, X.shape[1], Y.shape[1], X, ctx)
        solve = getattr(self, f"_solve_{method}")
        if method == "prox":
            solve = functools.partial(solve, l1=l1)
        elif method == "newton":
            solve = functools.partial(solve, cold=prev is None)
        owner = type(self).__name__
        with linalg_errors(X, xp=xp, what="Newton system / Hessian", owner=owner):
            W, b, n_iter, converged = solve(
                X, Y, sw, W, b, lam=lam, xp=xp, binary=binary
            )
        check_finite_result(W, X, xp=xp, what="coefficients", owner=owner)
        unbounded = not (lam or l1 or converged)
        self._warn(
            unbounded
            and _separated(_scores(X, W, b, xp=xp), codes, sw, xp=xp, binary=binary),
            converged,
            n_iter,
        )
        self.coef_ = W.T
        self.intercept_ = b
        self.n_iter_ = ctx.xp.full(  # scikit-learn's shape, in the inputs' library
            (1,), int(n_iter), dtype=ctx.xp.int32, device=ctx.device
        )
        self.converged_ = bool(converged)
        return self._fitted(ctx)

    def _warn(self, separable, converged, n_iter):
        if separable:
            warn(
                SeparableDataWarning,
                f"the training data are linearly separable: without a penalty the weights "
                f"grow without bound; solver={self.solver!r} stopped after {n_iter} "
                f"iteration(s). Use penalty='l2' for a finite solution.",
                stacklevel=3,
            )
        elif not converged:
            warn(
                ConvergenceWarning,
                _sklearn_convergence_phrase(self.solver, n_iter, self.max_iter)
                + f"xpml: solver={self.solver!r} did not reach tol={self.tol} in "
                f"max_iter={self.max_iter} iterations; increase max_iter",
                stacklevel=3,
            )

    def _lipschitz(self, X, sw, lam, /, *, xp, binary):
        """Lipschitz constant of the gradient of ``F / Σω``."""
        Xa = _augment(X, xp=xp) if self.fit_intercept else X
        G = Xa.T @ (sw[:, None] * Xa)
        top = xp.max(xp.linalg.eigvalsh(G))
        return (0.25 if binary else 0.5) * float(top) / float(xp.sum(sw)) + lam / float(
            xp.sum(sw)
        )

    def _solve_newton(self, X, Y, sw, W, b, /, *, lam, xp, binary, cold=False):
        """Newton (IRLS); for two classes and many rows from a cold start, the
        warm start of :meth:`_subsample_start` and the quasi-Newton steps of
        :meth:`_solve_quasi_newton`, else the full Newton steps. For two
        classes on NumPy, with one BLAS thread (as the SMO solve): its products
        are cache-sized row blocks, on which a second thread mostly waits."""
        limit = _single_threaded_blas(xp) if binary else None
        with limit or contextlib.nullcontext():
            return self._newton_solve(
                X, Y, sw, W, b, lam=lam, xp=xp, binary=binary, cold=cold
            )

    def _newton_solve(self, X, Y, sw, W, b, /, *, lam, xp, binary, cold):
        start = None
        if binary and cold:
            start = self._subsample_start(X, Y[:, 0], sw, W, b, lam=lam, xp=xp)
        if start is not None:
            return self._solve_quasi_newton(X, Y[:, 0], sw, start, lam=lam, xp=xp)
        return self._newton_steps(
            X, Y, sw, W, b, lam=lam, xp=xp, binary=binary, tol=self.tol
        )

    def _newton_steps(self, X, Y, sw, W, b, /, *, lam, xp, binary, tol):
        """Newton steps with a backtracking line search until
        ``max |∇F| / Σω ≤ tol / 100``; the Hessian is rebuilt while
        ``max |∇F| / Σω > tol``."""
        fi = self.fit_intercept
        total = float(xp.sum(sw))
        codes = xp.astype(Y[:, 0], xp.int64) if binary else xp.argmax(Y, axis=1)
        Xa = None if binary else (_augment(X, xp=xp) if fi else X)
        Z = _scores(X, W, b, xp=xp)  # kept up to date: one pass over X per step
        F = float(_loss(Z, Y, sw, xp=xp, binary=binary) + 0.5 * lam * xp.sum(W * W))
        converged, it, H, renew = False, 0, None, True
        for it in range(1, self.max_iter + 1):
            if binary:
                args = (X, Z[:, 0], Y[:, 0], sw, W[:, 0])
                if renew:  # gradient and Hessian in one pass over X
                    gW, gb, H = _binary_newton_system(
                        *args, lam=lam, xp=xp, fit_intercept=fi
                    )
                else:
                    gW, gb = _binary_gradient(*args, lam=lam, xp=xp, fit_intercept=fi)
                gW = gW[:, None]
            else:
                P = softmax(Z, xp=xp, axis=1)
                Rw = sw[:, None] * (P - Y)
                gW = X.T @ Rw + lam * W if lam else X.T @ Rw
                gb = xp.sum(Rw, axis=0) if fi else xp.zeros_like(b)
            gmax = float(xp.max(xp.abs(gW)))
            if fi:
                gmax = max(gmax, float(xp.max(xp.abs(gb))))
            if not math.isfinite(gmax):  # overflow: stop now, fit() names the cause
                W = W + gmax
                break
            if gmax / total <= tol * 1e-2:
                converged, it = True, it - 1
                break
            if not lam and _separated(Z, codes, sw, xp=xp, binary=binary):
                break
            # once within tol, Newton's quadratic convergence lets the last
            # Hessian take the polishing step(s) to tol / 100 (no pass to rebuild it)
            renew = gmax / total > tol
            if binary:
                g = xp.concat([gb, gW[:, 0]]) if fi else gW[:, 0]
                e = -solve_spd(
                    H, g, X, xp=xp, owner="LogisticRegression", what="Hessian"
                )
                eW, eb = (e[1:, None], e[:1]) if fi else (e[:, None], xp.zeros_like(b))
            else:
                eW, eb = self._newton_step_multi(Xa, sw, P, gW, gb, lam=lam, xp=xp)
            # backtracking (Armijo) line search on F, along dZ = X eW + eb (one pass)
            dZ = X @ eW + eb
            slope = float(xp.sum(gW * eW) + (xp.sum(gb * eb) if fi else 0.0))
            step = 1.0
            for _ in range(30):
                Wn, bn, Zn = W + step * eW, b + step * eb, Z + step * dZ
                Fn = _loss(Zn, Y, sw, xp=xp, binary=binary)
                Fn = float(Fn + 0.5 * lam * xp.sum(Wn * Wn)) if lam else float(Fn)
                if Fn <= F + 1e-4 * step * slope or step < 1e-10:
                    break
                step *= 0.5
            W, b, F, Z = Wn, bn, Fn, Zn
        return W, b, it, converged

    def _subsample_start(self, X, y, sw, W, b, /, *, lam, xp):
        """``(w, b, H)``: Newton on every ``4k``-th row (``k`` from
        :func:`_subsample_stride`; weights rescaled to the same total, so the
        penalty weighs the same) to ``tol = max(self.tol, 1e-3)``, and the
        Hessian of every ``k``-th row there, an estimate of the full one; None
        when the data are too few or the subsample's fit does not converge
        (e.g. it is separable)."""
        k = _subsample_stride(*X.shape)
        if not k:
            return None
        total = float(xp.sum(sw))
        Xh, yh, swh = X[::k, :], y[::k], sw[::k]  # views
        Xs, ys, sws = Xh[::4, :], yh[::4], swh[::4]
        sub_total = float(xp.sum(sws))  # swh's total is at least this
        if not sub_total > 0:
            return None
        Ws, bs, _, converged = self._newton_steps(
            Xs, ys[:, None], sws * (total / sub_total), W, b,
            lam=lam, xp=xp, binary=True, tol=max(self.tol, 1e-3),
        )  # fmt: skip
        if not converged:
            return None
        w = Ws[:, 0]
        _, _, H = _binary_newton_system(
            Xh, Xh @ w + bs, yh, swh * (total / float(xp.sum(swh))), w,
            lam=lam, xp=xp, fit_intercept=self.fit_intercept,
        )  # fmt: skip
        return w, bs, H

    def _solve_quasi_newton(self, X, y, sw, start, /, *, lam, xp):
        """Binary Newton-type steps from ``(w, b)`` with the Hessian estimate
        ``H``, BFGS-updated: per step one pass over ``X`` (by row blocks) for
        the scores' change and the gradient at the full step. Where a step cuts ``max |∇F|`` by
        less than half, the exact Hessian is built at the next point (a Newton
        step). Stops as :meth:`_newton_steps` (``max |∇F| / Σω ≤ tol / 100``).
        Returns ``(W, b, steps, converged)`` as the other solvers."""
        (w, b, H), fi, total = start, self.fit_intercept, float(xp.sum(sw))
        codes = xp.astype(y, xp.int64)
        z, g = _scores_and_gradient(  # the scores and gradient at the start: one pass
            X,
            xp.zeros_like(y),
            xp.concat([b, w]) if fi else w,
            y,
            sw,
            xp=xp,
            fit_intercept=fi,
        )
        g = _add_penalty(g, w, b, lam=lam, xp=xp, fit_intercept=fi)
        F = _binary_objective(z, y, sw, w, lam=lam, xp=xp)
        rounding = math.sqrt(X.shape[0]) * eps(X.dtype, xp)  # of F's sum, relative
        converged, it, last = False, 0, math.inf
        for it in range(1, self.max_iter + 1):
            gmax = float(xp.max(xp.abs(g)))
            if not math.isfinite(gmax):  # overflow: stop now, fit() names the cause
                w = w + gmax
                break
            if gmax / total <= self.tol * 1e-2:
                converged, it = True, it - 1
                break
            if not lam and _separated(z[:, None], codes, sw, xp=xp, binary=True):
                break
            if gmax > 0.5 * last:  # slow progress: an exact Newton step
                _, _, H = _binary_newton_system(
                    X, z, y, sw, w, lam=lam, xp=xp, fit_intercept=fi
                )
            last = gmax
            e = -solve_spd(H, g, X, xp=xp, owner="LogisticRegression", what="Hessian")
            ew, eb = (e[1:], e[:1]) if fi else (e, xp.zeros_like(b))
            # the scores' change and the gradient at the full step in one pass
            dz, g_new = _scores_and_gradient(X, z, e, y, sw, xp=xp, fit_intercept=fi)
            line = (z, dz, w, ew, y, sw)
            step, F = _backtrack(
                functools.partial(_objective_along, line, lam=lam, xp=xp),
                F,
                xp.sum(g * e),
                rounding * abs(float(F)),
            )
            w, b, z = w + step * ew, b + step * eb, z + step * dz
            if step < 1.0:  # the gradient at the point the line search chose
                g_new = _flat_gradient(X, z, y, sw, w, lam=lam, xp=xp, fit_intercept=fi)
            else:
                g_new = _add_penalty(g_new, w, b, lam=lam, xp=xp, fit_intercept=fi)
            H = _bfgs_update(H, step * e, g_new - g, xp=xp)
            g = g_new
        return w[:, None], b, it, converged

    def _newton_step_multi(self, Xa, sw, P, gW, gb, /, *, lam, xp):
        """Full multinomial Newton step (``K(d+1)`` unknowns; minimum-norm, since
        adding a constant to every class's scores changes nothing)."""
        n, p = Xa.shape
        K = P.shape[1]
        fi = self.fit_intercept
        rows = []
        for k in range(K):
            row = []
            for j in range(K):
                wt = sw * (P[:, k] * ((1.0 if j == k else 0.0) - P[:, j]))
                row.append((wt[:, None] * Xa).T @ Xa)
            rows.append(xp.concat(row, axis=1))
        H = xp.concat(rows, axis=0)
        if lam:
            pen = xp.ones((p,), dtype=Xa.dtype, device=_device(Xa)) * lam
            if fi:
                pen = xp.concat(
                    [xp.zeros((1,), dtype=Xa.dtype, device=_device(Xa)), pen[1:]]
                )
            H = H + _diag(xp.concat([pen] * K), xp)
        G = xp.concat([gb[None, :], gW], axis=0) if fi else gW  # (p, K)
        g = xp.reshape(G.T, (-1,))  # class-major
        e = -psd_lstsq(H, g, xp=xp)
        E = xp.reshape(e, (K, p)).T  # (p, K)
        if fi:
            return E[1:, :], E[0, :]
        return E, xp.zeros_like(gb)

    def _solve_prox(self, X, Y, sw, W, b, /, *, lam, l1, xp, binary):
        """FISTA (accelerated proximal gradient) on
        ``F + l1‖W‖₁``: step ``1/L``, soft-threshold of ``W`` (never ``b``).
        Up to ``100 · max_iter`` steps; stops when a step moves no parameter by
        more than ``tol · max(1, max|W|)`` (checked every 10 steps: one sync)."""
        fi = self.fit_intercept
        step = 1.0 / (
            self._lipschitz(X, sw, lam, xp=xp, binary=binary) * float(xp.sum(sw))
        )
        zero = xp.zeros((), dtype=X.dtype, device=_device(X))
        Wy, by, t, converged, it = W, b, 1.0, False, 0
        for it in range(1, 100 * self.max_iter + 1):
            gW, gb, _ = _gradient(
                X, Y, sw, Wy, by, lam=lam, xp=xp, binary=binary, fit_intercept=fi
            )
            z = Wy - step * gW
            Wn = xp.maximum(z - step * l1, zero) + xp.minimum(z + step * l1, zero)
            bn = by - step * gb if fi else b
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            mom = (t - 1.0) / t_next
            Wy, by = Wn + mom * (Wn - W), bn + mom * (bn - b)
            if it % 10 == 0:
                move = xp.max(xp.abs(Wn - W)) if W.shape[0] else zero
                move = xp.maximum(move, xp.max(xp.abs(bn - b)))
                top = xp.max(xp.abs(Wn)) if W.shape[0] else zero
                if float(move) <= self.tol * 1e-2 * max(1.0, float(top)):
                    W, b, converged = Wn, bn, True
                    break
            W, b, t = Wn, bn, t_next
        return W, b, it, converged

    def _solve_gd(self, X, Y, sw, W, b, /, *, lam, xp, binary):
        fi = self.fit_intercept
        total = float(xp.sum(sw))
        lr = self.learning_rate or 1.0 / self._lipschitz(
            X, sw, lam, xp=xp, binary=binary
        )
        eta = lr / total
        converged, it = False, 0
        for it in range(1, self.max_iter + 1):
            gW, gb, _ = _gradient(
                X, Y, sw, W, b, lam=lam, xp=xp, binary=binary, fit_intercept=fi
            )
            if it % 10 == 1 or it == self.max_iter:  # sync every 10 steps only
                gmax = xp.max(xp.abs(gW))
                if fi:
                    gmax = xp.maximum(gmax, xp.max(xp.abs(gb)))
                if float(gmax) / total <= self.tol * 1e-2:
                    converged, it = True, it - 1
                    break
            W = W - eta * gW
            if fi:
                b = b - eta * gb
        return W, b, it, converged

    def _solve_sgd(self, X, Y, sw, W, b, /, *, lam, xp, binary):
        fi = self.fit_intercept
        n = X.shape[0]
        total = float(xp.sum(sw))
        lr0 = self.learning_rate or 1.0 / self._lipschitz(
            X, sw, lam, xp=xp, binary=binary
        )
        rng = check_random_state(self.random_state)
        dev = _device(X)
        bs = min(int(self.batch_size), n)
        converged, epoch = False, 0
        for epoch in range(1, self.max_iter + 1):
            perm = xp.asarray(rng.permutation(n), device=dev)
            lr = lr0 / (1.0 + epoch - 1) ** 0.5
            W_old, b_old = W, b
            for start in range(0, n, bs):
                idx = perm[start : min(start + bs, n)]
                Xb, Yb, swb = (
                    xp.take(X, idx, axis=0),
                    xp.take(Y, idx, axis=0),
                    xp.take(sw, idx),
                )
                scale = xp.sum(swb)
                scale = xp.where(scale > 0, scale, xp.ones_like(scale))
                gW, gb, _ = _gradient(
                    Xb, Yb, swb, W, b, lam=0.0, xp=xp, binary=binary, fit_intercept=fi
                )
                if lam:
                    gW = gW + (lam * scale / total) * W
                W = W - (lr / scale) * gW
                if fi:
                    b = b - (lr / scale) * gb
            move = xp.max(xp.abs(W - W_old))
            if fi:
                move = xp.maximum(move, xp.max(xp.abs(b - b_old)))
            if float(move) <= self.tol * 1e-2:
                converged = True
                break
        return W, b, epoch, converged

    # -------------------------------------------------------------- predict
    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities (n, K), columns in ``classes_`` order."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = self._decision(X, ctx)
        if Z.shape[1] == 1:
            p = sigmoid(Z[:, 0], xp=xp)
            return ctx.out(xp.stack([1.0 - p, p], axis=1))
        return ctx.out(softmax(Z, xp=xp, axis=1))

    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Log class probabilities (n, K)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = self._decision(X, ctx)
        if Z.shape[1] == 1:
            z = Z[:, 0]
            return ctx.out(
                xp.stack([log_sigmoid(-z, xp=xp), log_sigmoid(z, xp=xp)], axis=1)
            )
        return ctx.out(Z - logsumexp(Z, xp=xp, axis=1))


def _diag(v, xp):
    n = v.shape[0]
    return xp.eye(n, dtype=v.dtype, device=_device(v)) * v[None, :]
