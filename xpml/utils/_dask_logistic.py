"""LogisticRegression (``solver="newton"``) on dask arrays: two passes per
Newton iteration.

Pass one maps the single-machine Newton system (gradient, Hessian ``XᵀΩX``
bordered by the intercept, loss, count of misclassified points) over the row
blocks and sums it; the client adds the penalty, tests convergence and solves
the small system with the single-machine solvers (``spd_solve``, or
``psd_lstsq`` for the multinomial ``K(d+1)`` system). Pass two evaluates the
loss at all 30 step lengths of the backtracking line search at once, so the
client picks the same Armijo step as the single-machine loop. Scores are
recomputed from ``W`` in each pass: nothing of size ``n`` persists between
iterations.
"""

from __future__ import annotations

import math
import warnings

import array_api_compat
import numpy as np

from xpml._dask import compute, map_sum, persist, register
from xpml.utils._dask_fits import prologue

__all__ = ["fit_logistic_regression"]

_STEPS = tuple(0.5**j for j in range(30))


def _ns(a):
    return array_api_compat.array_namespace(a)


def _targets(Xb, codes, wb, m):
    xp = _ns(Xb)
    wb = xp.ones((Xb.shape[0],), dtype=Xb.dtype) if wb is None else wb
    if m == 1:
        return xp.astype(codes, Xb.dtype)[:, None], wb
    return xp.astype(codes[:, None] == xp.arange(m)[None, :], Xb.dtype), wb


def _misclassified(Z, codes, wb, xp):
    if Z.shape[1] == 1:
        ok = (xp.astype(codes, Z.dtype) * 2.0 - 1.0) * Z[:, 0] > 0
    else:
        onehot = codes[:, None] == xp.arange(Z.shape[1])[None, :]
        true = xp.sum(xp.where(onehot, Z, xp.zeros_like(Z)), axis=1)
        other = xp.max(xp.where(onehot, xp.full_like(Z, -math.inf), Z), axis=1)
        ok = true > other
    return xp.sum(xp.astype(~ok & (wb > 0), xp.int64))


def _multi_hessian(Xa, wb, P, xp):
    K = P.shape[1]
    rows = []
    for k in range(K):
        row = []
        for j in range(K):
            wt = wb * (P[:, k] * ((1.0 if j == k else 0.0) - P[:, j]))
            row.append((wt[:, None] * Xa).T @ Xa)
        rows.append(xp.concat(row, axis=1))
    return xp.concat(rows, axis=0)


def _system_block(Xb, codes, wb, Wb, fi):
    """``(g_W, g_b, H, loss, misclassified)`` of one block at ``(W, b)``."""
    from xpml.linear_model._logistic import (
        _augment,
        _binary_newton_system,
        _loss,
        softmax,
    )

    W, b = Wb
    xp = _ns(Xb)
    Y, wb = _targets(Xb, codes, wb, W.shape[1])
    Z = Xb @ W + b
    binary = W.shape[1] == 1
    if binary:
        gw, gb, H = _binary_newton_system(
            Xb, Z[:, 0], Y[:, 0], wb, W[:, 0], lam=0.0, xp=xp, fit_intercept=fi
        )
        gW = gw[:, None]
    else:
        P = softmax(Z, xp=xp, axis=1)
        Rw = wb[:, None] * (P - Y)
        gW, gb = Xb.T @ Rw, xp.sum(Rw, axis=0)
        H = _multi_hessian(_augment(Xb, xp=xp) if fi else Xb, wb, P, xp)
    loss = _loss(Z, Y, wb, xp=xp, binary=binary)
    return gW, gb, H, loss, _misclassified(Z, codes, wb, xp), xp.sum(wb)


def _losses_block(Xb, codes, wb, Wb, E):
    """The loss at ``W + t·eW`` for every step length ``t`` of the search."""
    from xpml.linear_model._logistic import _loss

    (W, b), (eW, eb) = Wb, E
    xp = _ns(Xb)
    Y, wb = _targets(Xb, codes, wb, W.shape[1])
    Z, dZ = Xb @ W + b, Xb @ eW + eb
    binary = W.shape[1] == 1
    return (xp.stack([_loss(Z + t * dZ, Y, wb, xp=xp, binary=binary) for t in _STEPS]),)


def _newton_step(est, system, Wb, lam, xp):
    """The Newton direction from the summed system (penalty added here)."""
    from xpml.utils._math import psd_lstsq, spd_solve

    gW, gb, H = system
    W, b = Wb
    fi, (d, m) = est.fit_intercept, W.shape
    p = d + 1 if fi else d
    if lam:
        pen = xp.concat(
            [xp.zeros((1,), dtype=W.dtype), xp.full((d,), lam, dtype=W.dtype)]
        )
        pen = pen if fi else pen[1:]
        H = H + xp.eye(p * m, dtype=W.dtype) * xp.concat([pen] * m)[None, :]
    if m == 1:
        e = -spd_solve(H, xp.concat([gb, gW[:, 0]]) if fi else gW[:, 0], xp=xp)
        return (e[1:, None], e[:1]) if fi else (e[:, None], xp.zeros_like(b))
    G = xp.concat([gb[None, :], gW], axis=0) if fi else gW
    E = xp.reshape(-psd_lstsq(H, xp.reshape(G.T, (-1,)), xp=xp), (m, p)).T
    return (E[1:, :], E[0, :]) if fi else (E, xp.zeros_like(gb))


def _line_search(data, Wb, E, /, *, F, slope, lam):
    """First Armijo step among ``1, ½, ¼, …`` (the last one if none passes)."""
    W, b = Wb
    eW, eb = E
    ((L,),) = compute(map_sum(_losses_block, (data.X, data.y, data.w), Wb, E))
    xp = _ns(W)
    for j, t in enumerate(_STEPS):
        Wn, bn = W + t * eW, b + t * eb
        Fn = float(L[j] + 0.5 * lam * xp.sum(Wn * Wn)) if lam else float(L[j])
        if Fn <= F + 1e-4 * t * slope:
            break
    return (Wn, bn), Fn


def _newton(est, data, Wb, lam):
    """The single-machine Newton loop, each pass over ``X`` on the cluster."""
    fi, xp = est.fit_intercept, data.xp
    arrays = (data.X, data.y, data.w)
    converged, it, separated = False, 0, False
    for it in range(1, est.max_iter + 1):
        ((gW, gb, H, loss, bad, total),) = compute(
            map_sum(_system_block, arrays, Wb, fi)
        )
        W, b = Wb
        gb = gb if fi else xp.zeros_like(b)
        if lam:
            gW = gW + lam * W
        F = float(loss + 0.5 * lam * xp.sum(W * W))
        gmax = float(xp.max(xp.abs(gW)))
        if fi:
            gmax = max(gmax, float(xp.max(xp.abs(gb))))
        separated = int(bad) == 0
        if not math.isfinite(gmax):
            Wb = (W + gmax, b)
            break
        if gmax / float(total) <= est.tol * 1e-2:  # the single-machine rule
            converged, it = True, it - 1
            break
        if not lam and separated:
            break
        E = _newton_step(est, (gW, gb, H), Wb, lam, xp)
        slope = float(xp.sum(gW * E[0]) + (xp.sum(gb * E[1]) if fi else 0.0))
        Wb, F = _line_search(data, Wb, E, F=F, slope=slope, lam=lam)
    return Wb, it, converged, separated


@register("LogisticRegression")
def fit_logistic_regression(est, X, y, sample_weight):
    """Newton / IRLS with two passes over the row blocks per iteration."""
    from xpml.exceptions import ConvergenceWarning, SeparableDataWarning

    est._validate_params()
    pen, r = est._penalty()
    if est._solver_method(pen, r) != "newton" or est.class_weight is not None:
        raise TypeError(
            f"LogisticRegression(solver={est.solver!r}, penalty={pen!r}, "
            f"class_weight={est.class_weight!r}) does not fit dask arrays; use "
            f"solver='newton' (or 'lbfgs', run as Newton) with penalty 'l2' or "
            f"None and no class_weight (two passes over the blocks per iteration)"
        )
    data = prologue(est, X, y, sample_weight, classes=True)
    data.X, data.y, data.w = persist(data.X, data.y, data.w)  # read every pass
    xp, K = data.xp, int(est.classes_.shape[0])
    m = 1 if K == 2 else K
    Wb = (xp.zeros((data.d, m), dtype=data.X.dtype), xp.zeros((m,), dtype=data.X.dtype))
    # as the single-machine fit: elasticnet with l1_ratio=0 is the L2 problem
    lam = (1.0 - r) / float(est.C) if pen is not None else 0.0
    (W, b), it, converged, separated = _newton(est, data, Wb, lam)
    if not bool(xp.all(xp.isfinite(W))):
        raise ValueError("LogisticRegression: non-finite values in the coefficients")
    if not lam and not converged and separated:
        warnings.warn(
            f"the training data are linearly separable: without a penalty the "
            f"weights grow without bound; stopped after {it} iteration(s)",
            SeparableDataWarning,
            stacklevel=4,
        )
    elif not converged:
        warnings.warn(
            f"solver='newton' did not reach tol={est.tol} in max_iter={est.max_iter}",
            ConvergenceWarning,
            stacklevel=4,
        )
    est.coef_, est.intercept_ = W.T, b
    est.n_iter_ = np.asarray([int(it)], dtype=np.int32)  # scikit-learn's shape
    est.converged_ = bool(converged)
    return est
