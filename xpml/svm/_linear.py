"""Linear support vector classification by trust-region Newton (TRON) steps
(``solver="newton"``, the default) or by LIBLINEAR's dual coordinate descent,
blocked (``solver="dcd"``).

The Newton solvers use whole-array operations only: no loop over samples.

* ``loss="squared_hinge"``: the primal ``½‖w‖² + Σᵢ Cᵢ max(0, 1 − yᵢ w·xᵢ)²`` is
  once differentiable with a piecewise-constant generalised Hessian
  ``I + 2 Σ_{i∈I} Cᵢ xᵢxᵢᵀ`` over the active set ``I = {i: yᵢ w·xᵢ < 1}``.
  LIBLINEAR's trust-region Newton method (Lin, Weng & Keerthi 2008) solves it:
  each Newton step is a truncated conjugate-gradient solve (Steihaug) whose
  Hessian-vector products are two matrix products, ``X s`` and ``Xᵀ(h ⊙ Xs)``.
* ``loss="hinge"``: the dual ``min_α ½‖Σ αᵢyᵢxᵢ‖² − Σαᵢ, 0 ≤ αᵢ ≤ Cᵢ`` is
  solved by the proximal point method (the augmented Lagrangian method of Yan &
  Li 2020): each outer step adds ``μ/(2Cᵢ)·(αᵢ − aᵢ)²`` around the current
  ``a`` and solves that strongly convex dual through its primal
  ``½‖w‖² + Σ φᵢ(yᵢ w·xᵢ)``, ``φᵢ(m) = max_{0≤α≤Cᵢ} α(1−m) − μ(α−aᵢ)²/(2Cᵢ)``,
  again by TRON (``φᵢ`` is C¹ with slope ``−clip(aᵢ + Cᵢ(1−m)/μ, 0, Cᵢ)``);
  the maximising ``α`` becomes the next centre. The proximal point iteration
  converges to the exact hinge solution without ``μ → 0``.

Hessian products run over the rows with curvature only (``h > 0`` in some
subproblem, LIBLINEAR's active set): they are gathered once per Newton step
(``_curvature_rows``; their count comes down with the step's status read), so
a conjugate-gradient step costs ``|I|·p``, not ``n·p``. For the hinge's
proximal steps ``I`` is the band of samples near the margin, a few dozen to a
few hundred rows at ``n = 20 000``: the products that took ~85 % of the time
now take a few per cent, and each Newton step costs about two passes over
``X`` (the objective and gradient).

The one-vs-rest subproblems are solved together: ``W`` is ``(k, p)`` and every
scalar of the trust-region logic is a length-``k`` vector updated with
``where``, so a converged subproblem simply stops moving. Host reads: one per
Newton step (finished? finite?) and one every ``_CG_CHECK`` conjugate-gradient
steps, whatever ``n``.

Stopping rules follow LIBLINEAR's meaning of ``tol``: ``dual=False`` stops when
``‖∇f(w)‖ ≤ tol · max(min(n₊, n₋), 1)/n · ‖∇f(0)‖``; ``dual=True`` (and the
hinge loss, which has only a dual) when the largest ``|PG|``, the projected
gradient of the dual, is at most ``tol`` (LIBLINEAR's dual test is the spread
``max PG − min PG ≤ tol``, which this implies up to a factor 2). For the squared hinge the
dual optimum is ``αᵢ = 2Cᵢ max(0, 1 − yᵢ w·xᵢ)``, so ``dual=True`` runs the same
Newton solver and only tests the dual's criterion.

After each proximal step the hinge solver tries an exact step on the face the
iterate has found (zero / free / at ``C``): a least-squares system over the
free samples (at most ``2p`` of them). Once the partition is right it lands on
the optimum (largest |projected gradient| ~1e-12).

Cost (measured on a shared 2-core CPU, one BLAS thread both sides, ``C=1``,
``tol=1e-4``, n = 20 000): the squared hinge runs at 0.6-0.7× the time of
LIBLINEAR's primal Newton solver (d = 50 and 500); the hinge, before the
gathered Hessian products, took 2.6× to 4.9× the time of LIBLINEAR's
coordinate descent at d = 50 (which stops at ``max_iter=1000`` epochs
unconverged there while this solver reaches ``max |PG| ≤ 1e-4`` in ~130-150
Newton steps of ~8 conjugate-gradient products each), and about 0.5× with
them (the bench suite's report has the figures). At d = 500 the proximal
steps at small ``μ`` grow the band a few rows per Newton step and can use
all ``max_iter`` steps, as LIBLINEAR uses all its epochs. Each Newton step
costs one host read, plus one per ``_CG_CHECK`` CG steps.

``solver="dcd"`` is LIBLINEAR's dual coordinate descent (Hsieh et al. 2008) on
``min ½αᵀ(Q + diag D)α − Σα, 0 ≤ α ≤ U`` (hinge: ``U = C, D = 0``; squared
hinge: ``U = ∞, D = 1/(2C)``), one subproblem after the other, with a random
permutation of the active coordinates per epoch (from ``random_state``),
LIBLINEAR's shrinking and its stopping rule: the spread ``max PG − min PG`` of
the projected gradients seen in an epoch is at most ``tol`` with every
coordinate active. It is **blocked**: the permuted coordinates are taken
``q = 128`` at a time; one product gives the block's Gram ``X_B X_Bᵀ`` and
margins ``X_B w``, downloaded together (the one sync per block); the q scalar
updates run on the host in exact DCD order, each updating the block's margins
with a Gram column (``_dcd_block``, the sequential core, as SMO's subproblem);
then ``Δα∘y`` goes up once and ``w += X_Bᵀ(Δα∘y)`` runs on the device. The
iterates equal one-coordinate-at-a-time DCD's (up to rounding). Shrunk
coordinates leave the active set at the end of the epoch (LIBLINEAR swaps them
out at once, which only reorders the rest of its epoch). The Gram costs
``q·p`` flops per coordinate, against ``2p`` for DCD itself, and the host core
is a Python loop of q scalars per block: on a CPU this is far slower than
LIBLINEAR's compiled loop (see the report in the linear-svc bench suite), so
it is not the default for either loss.
"""

from __future__ import annotations

import dataclasses
from numbers import Integral, Real
from typing import Any

import array_api_extra as xpx
import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.exceptions import ConvergenceWarning, warn
from xpml.utils._array_api import device, eps
from xpml.utils._math import psd_lstsq
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state, decode_labels

__all__ = ["LinearSVC"]

# LIBLINEAR's trust-region constants: acceptance thresholds eta0 < eta1 < eta2
# on actual/predicted reduction, and the radius factors sigma1 < sigma2 < sigma3
_ETA0, _ETA1, _ETA2 = 1e-4, 0.25, 0.75
_SIGMA1, _SIGMA2, _SIGMA3 = 0.25, 0.5, 4.0
_CG_RTOL = 0.1  # CG stops at ‖r‖ ≤ 0.1 ‖∇f‖ (LIBLINEAR's eps_cg)
_CG_CHECK = 4  # CG steps between host reads of "all subproblems done"
_MU0, _MU_SHRINK, _MU_MIN = 1.0, 0.1, 1e-3  # proximal weights of the hinge dual
_FACE_MAX = 4096  # largest free set the exact face step is tried on
_GATHER_MAX = 0.5  # Hessian products over the curvature rows up to this share


@dataclasses.dataclass
class _Loss:
    """The loss part of ``k`` binary problems sharing the samples ``Z``.

    ``Y`` and ``C`` are ``(n, k)``: labels ±1 and costs ``C·sᵢ·class weight``.
    ``kind`` is "squared_hinge" or "prox_hinge" (with centre ``a`` and ``mu``).
    """

    Z: Any
    Y: Any
    C: Any
    kind: str
    a: Any = None
    mu: float = 1.0


def _rowdot(A, B, /, *, xp):
    return xp.sum(A * B, axis=1)


def _loss_terms(loss, W, /, *, xp):
    """Loss value ``(k,)``, dual variables ``α (n, k)`` (minus the loss slope)
    and generalised curvature ``h (n, k)`` at ``W``."""
    M = loss.Y * (loss.Z @ W.T)
    zero = xp.zeros_like(M)
    if loss.kind == "squared_hinge":
        xi = xp.maximum(1.0 - M, zero)
        alpha = 2.0 * loss.C * xi
        h = xp.where(xi > 0.0, 2.0 * loss.C, zero)
        return xp.sum(loss.C * xi * xi, axis=0), alpha, h
    t = loss.a + loss.C * (1.0 - M) / loss.mu
    alpha = xp.minimum(xp.maximum(t, zero), loss.C)
    h = xp.where((t > 0.0) & (t < loss.C), loss.C / loss.mu, zero)
    safe_C = xp.where(loss.C > 0.0, loss.C, xp.ones_like(M))
    d = alpha - loss.a
    phi = alpha * (1.0 - M) - 0.5 * loss.mu * d * d / safe_C
    return xp.sum(phi, axis=0), alpha, h


def _evaluate(loss, W, /, *, xp):
    """Objective ``f (k,)``, gradient ``G (k, p)``, duals ``α`` and curvature ``h``."""
    value, alpha, h = _loss_terms(loss, W, xp=xp)
    f = 0.5 * _rowdot(W, W, xp=xp) + value
    G = W - (alpha * loss.Y).T @ loss.Z
    return f, G, alpha, h


def _hess_vec(curv, S, /, *, xp):
    """Generalised Hessian times ``S``: ``S + Xᵀ(h ⊙ X S)`` per subproblem,
    over the rows of ``curv`` (those with curvature)."""
    Z, h = curv
    return S + (h * (Z @ S.T)).T @ Z


def _curvature_rows(loss, h, count, /, *, xp):
    """``(Z_I, h_I)``: the ``count`` rows where some subproblem has curvature
    ``h > 0`` (the others add nothing to a Hessian product), or all rows when
    they are most of them (the gather would cost more than it saves).

    LIBLINEAR's TRON does the same on its active set; for the hinge's proximal
    steps it is the few samples near the margin, so each conjugate-gradient
    product reads ``|I|`` rows instead of ``n``."""
    n = loss.Z.shape[0]
    if count > _GATHER_MAX * n:
        return loss.Z, h
    flat = xp.astype(xp.any(h > 0.0, axis=1), xp.int8)
    rows = xp.argsort(-flat, stable=True)[:count]  # curvature rows first
    return xp.take(loss.Z, rows, axis=0), xp.take(h, rows, axis=0)


def _to_boundary(S, D, delta, /, *, xp):
    """The ``τ ≥ 0`` with ``‖S + τD‖ = delta`` (LIBLINEAR's stable formula)."""
    std, sts, dtd = (_rowdot(a, b, xp=xp) for a, b in ((S, D), (S, S), (D, D)))
    room = xp.maximum(delta * delta - sts, xp.zeros_like(sts))
    rad = xp.sqrt(std * std + dtd * room)
    safe_dtd = xp.where(dtd > 0.0, dtd, xp.ones_like(dtd))
    return xp.where(
        std >= 0.0,
        room / xp.where(std + rad > 0.0, std + rad, safe_dtd),
        (rad - std) / safe_dtd,
    )


def _steihaug_cg(curv, G, delta, frozen, /, *, xp):
    """Truncated CG for ``H s = −g`` inside ``‖s‖ ≤ delta``, all rows at once.

    Rows in ``frozen`` (converged) and rows that hit the boundary or met the
    CG tolerance stop moving. Returns the step ``S`` and residual ``R``.
    """
    S = xp.zeros_like(G)
    R = -G
    D = R
    rr = _rowdot(R, R, xp=xp)
    cg_tol2 = (_CG_RTOL * _CG_RTOL) * rr
    active = ~frozen & (rr > cg_tol2)
    ones, zeros = xp.ones_like(rr), xp.zeros_like(rr)
    for j in range(2 * G.shape[1] + 20):
        if j % _CG_CHECK == 0 and not bool(xp.any(active)):  # the CG host read
            break
        HD = _hess_vec(curv, D, xp=xp)
        alpha = rr / xp.where(active, _rowdot(D, HD, xp=xp), ones)
        S_try = S + alpha[:, None] * D
        over = active & (_rowdot(S_try, S_try, xp=xp) > delta * delta)
        tau = _to_boundary(S, D, delta, xp=xp)
        step = xp.where(active, xp.where(over, tau, alpha), zeros)
        S = S + step[:, None] * D
        R = R - step[:, None] * HD
        rr_new = _rowdot(R, R, xp=xp)
        active = active & ~over & (rr_new > cg_tol2)
        beta = rr_new / xp.where(rr > 0.0, rr, ones)
        D = xp.where(active[:, None], R + beta[:, None] * D, D)
        rr = rr_new
    return S, R


@dataclasses.dataclass
class _Step:
    """The trust-region bookkeeping of one Newton step (length-``k`` arrays)."""

    f: Any
    f_new: Any
    G: Any
    S: Any
    R: Any


def _radius_update(step, delta, first, small, /, *, xp):
    """LIBLINEAR's radius rule; returns ``(delta, accept, stalled)``."""
    gs = _rowdot(step.G, step.S, xp=xp)
    prered = -0.5 * (gs - _rowdot(step.S, step.R, xp=xp))
    actred = step.f - step.f_new
    snorm = xp.sqrt(_rowdot(step.S, step.S, xp=xp))
    if first:
        delta = xp.minimum(delta, snorm)
    den = step.f_new - step.f - gs
    ones = xp.ones_like(den)
    interp = xp.maximum(_SIGMA1 * ones, -0.5 * gs / xp.where(den > 0.0, den, ones))
    alpha = xp.where(den > 0.0, interp, _SIGMA3 * ones)
    shrink = xp.minimum(xp.maximum(alpha, _SIGMA1 * ones) * snorm, _SIGMA2 * delta)
    low = xp.maximum(_SIGMA1 * delta, xp.minimum(alpha * snorm, _SIGMA2 * delta))
    mid = xp.maximum(_SIGMA1 * delta, xp.minimum(alpha * snorm, _SIGMA3 * delta))
    high = xp.maximum(delta, xp.minimum(alpha * snorm, _SIGMA3 * delta))
    delta = xp.where(
        actred < _ETA0 * prered,
        shrink,
        xp.where(
            actred < _ETA1 * prered,
            low,
            xp.where(actred < _ETA2 * prered, mid, high),
        ),
    )
    tiny = small * xp.abs(step.f)
    stalled = ((actred <= 0.0) & (prered <= 0.0)) | (
        (xp.abs(actred) <= tiny) & (xp.abs(prered) <= tiny)
    )
    return delta, actred > _ETA0 * prered, stalled


def _status(f, G, done, h, /, *, xp):
    """One host read per Newton step: the status (2 if anything is non-finite,
    else 1 when every subproblem is done, else 0) and the number of rows with
    curvature ``h > 0``, downloaded together."""
    finite = xp.all(xp.isfinite(f)) & xp.all(xp.isfinite(_rowdot(G, G, xp=xp)))
    status = xp.where(finite, xp.astype(xp.all(done), xp.int64), 2)
    count = xp.sum(xp.astype(xp.any(h > 0.0, axis=1), xp.int64))
    status, count = to_numpy(xp.stack([status, count])).tolist()
    return int(status), int(count)


def _raise_non_finite(loss, /, *, xp):
    scale = float(xp.max(xp.abs(loss.Z)))
    raise ValueError(
        "LinearSVC: non-finite values (inf or nan) appeared in the solve: the "
        f"products of X (largest |x| = {scale:.3g}, with the intercept column) with "
        "the weights overflow the floating-point range. Rescale X (for example "
        "with a StandardScaler) or lower C."
    )


def _tron(loss, W, stop, max_iter, /, *, xp):
    """Trust-region Newton on ``k`` subproblems from ``W (k, p)``.

    ``stop(W, G, alpha, gnorm0) -> bool (k,)`` says which subproblems are
    done. Returns ``W``, the duals ``α``, the number of Newton steps and
    whether every subproblem stopped (by ``stop`` or by a stalled reduction).
    """
    f, G, alpha, h = _evaluate(loss, W, xp=xp)
    gnorm0 = xp.sqrt(_rowdot(G, G, xp=xp))
    delta = gnorm0
    done = stop(W, G, alpha, gnorm0)
    small = 10.0 * eps(W.dtype, xp)  # relative reduction below rounding: stalled
    status, count = _status(f, G, done, h, xp=xp)
    it = 0
    while status == 0 and it < max_iter:
        it += 1
        curv = _curvature_rows(loss, h, count, xp=xp)
        S, R = _steihaug_cg(curv, G, delta, done, xp=xp)
        f_new, G_new, alpha_new, h_new = _evaluate(loss, W + S, xp=xp)
        step = _Step(f, f_new, G, S, R)
        delta, accept, stalled = _radius_update(step, delta, it == 1, small, xp=xp)
        accept = accept & ~done
        W = xp.where(accept[:, None], W + S, W)
        f = xp.where(accept, f_new, f)
        G = xp.where(accept[:, None], G_new, G)
        alpha = xp.where(accept[None, :], alpha_new, alpha)
        h = xp.where(accept[None, :], h_new, h)
        done = done | stalled | stop(W, G, alpha, gnorm0)
        status, count = _status(f, G, done, h, xp=xp)
    if status == 2:
        _raise_non_finite(loss, xp=xp)
    return W, alpha, it, status == 1


def _dual_pg_max(loss, Wd, alpha, U, D, /, *, xp):
    """``max |PG|`` per subproblem of the dual ``½αᵀ(Q + diag D)α − Σα`` on
    ``0 ≤ α ≤ U`` at ``α`` (with ``w = Σ αᵢyᵢxᵢ = Wd``); PG is the gradient
    projected on the box (zero where ``U = 0`` pins ``α``), zero exactly at
    the optimum. LIBLINEAR tests the spread ``max PG − min PG`` instead, which
    is at most twice this but can vanish away from the optimum (all PG equal,
    as on symmetric data) when nothing is updated in between."""
    G = loss.Y * (loss.Z @ Wd.T) - 1.0 + D * alpha
    zero = xp.zeros_like(G)
    at_lower, at_upper = alpha <= 0.0, alpha >= U
    PG = xp.where(at_lower, xp.minimum(G, zero), G)
    PG = xp.where(at_upper & ~at_lower, xp.maximum(G, zero), PG)
    PG = xp.where(at_lower & at_upper, zero, PG)
    return xp.max(xp.abs(PG), axis=0)


def _squared_hinge_diag(C, /, *, xp):
    """``D = 1/(2Cᵢ)`` of the squared-hinge dual (0 where ``Cᵢ = 0``)."""
    pos = C > 0.0
    return xp.where(pos, 0.5 / xp.where(pos, C, xp.ones_like(C)), xp.zeros_like(C))


def _solve_squared_hinge(loss, tol, max_iter, dual, /, *, xp):
    """TRON on the squared-hinge primal; ``dual`` picks LIBLINEAR's stopping rule."""
    k = loss.Y.shape[1]
    n = loss.Y.shape[0]
    npos = xp.sum(xp.astype(loss.Y > 0.0, loss.Z.dtype), axis=0)
    frac = xp.maximum(xp.minimum(npos, n - npos), xp.ones_like(npos)) / n
    inf = xp.full_like(loss.C, float("inf"))
    U = xp.where(loss.C > 0.0, inf, xp.zeros_like(loss.C))
    Dg = _squared_hinge_diag(loss.C, xp=xp)

    def stop(W, G, alpha, gnorm0):
        if dual:  # w of the dual is W − G (G = W − Σ αᵢyᵢxᵢ)
            return _dual_pg_max(loss, W - G, alpha, U, Dg, xp=xp) <= tol
        return xp.sqrt(_rowdot(G, G, xp=xp)) <= tol * frac * gnorm0

    W0 = xp.zeros((k, loss.Z.shape[1]), dtype=loss.Z.dtype, device=device(loss.Z))
    W, alpha, it, converged = _tron(loss, W0, stop, max_iter, xp=xp)
    return W, alpha, Dg, it, converged


def _face_step(loss, alpha, /, *, xp):
    """The exact hinge solution for the current partition of ``α`` into zero,
    free and at ``C``, or None when a free set is empty or over ``_FACE_MAX``.

    On the face, ``w = Σ_{α=C} Cᵢyᵢxᵢ + Σ_{free} βᵢyᵢxᵢ`` with ``yᵢ w·xᵢ = 1``
    on the free set: a least-squares system in the free ``β`` (the dual's
    Newton step on that face). The result is clipped to the box, so it is a
    feasible dual point whatever the partition.
    """
    C, Y, Z = loss.C, loss.Y, loss.Z
    free = (alpha > 0.0) & (alpha < C)
    sizes = to_numpy(xp.sum(xp.astype(free, xp.int32), axis=0))  # one host read
    # beyond p free points the face system is over-determined (and eigh costly)
    if sizes.min() == 0 or sizes.max() > min(_FACE_MAX, 2 * Z.shape[1]):
        return None
    zero = xp.zeros_like(C)
    base = xp.where(alpha >= C, C, zero)
    cols = []
    for r in range(Y.shape[1]):  # one-vs-rest subproblems, not samples
        idx = xp.nonzero(free[:, r])[0]
        yr = Y[:, r]
        w_bound = (base[:, r] * yr) @ Z
        A = xp.take(yr, idx)[:, None] * xp.take(Z, idx, axis=0)
        beta = psd_lstsq(A @ A.T, 1.0 - A @ w_bound, xp=xp)
        col = xpx.at(base[:, r])[free[:, r]].set(beta)  # rows in nonzero order
        cols.append(xp.minimum(xp.maximum(col, zero[:, r]), C[:, r]))
    return xp.stack(cols, axis=1)


def _polish(loss, alpha, Wd, pg, /, *, xp):
    """Try the exact face step; keep it for the subproblems it improves."""
    cand = _face_step(loss, alpha, xp=xp)
    if cand is None:
        return alpha, Wd, pg
    Wc = (cand * loss.Y).T @ loss.Z
    zero_D = xp.zeros_like(loss.C)
    pg_c = _dual_pg_max(loss, Wc, cand, loss.C, zero_D, xp=xp)
    better = pg_c < pg
    alpha = xp.where(better[None, :], cand, alpha)
    Wd = xp.where(better[:, None], Wc, Wd)
    return alpha, Wd, xp.where(better, pg_c, pg)


def _solve_hinge(loss, tol, max_iter, /, *, xp):
    """Proximal point iterations on the hinge dual, each solved by TRON and
    followed by an exact step on the face the iterate has found."""
    k, p = loss.Y.shape[1], loss.Z.shape[1]
    W = xp.zeros((k, p), dtype=loss.Z.dtype, device=device(loss.Z))
    zero_D = xp.zeros_like(loss.C)
    # an error e in w moves G by at most ‖e‖·max‖x‖: keep that below tol/10
    xmax = float(xp.max(xp.sqrt(xp.sum(loss.Z * loss.Z, axis=1))))
    floor = 100.0 * eps(loss.Z.dtype, xp)
    gtol = max(0.1 * tol / max(xmax, floor), floor)

    # inexact proximal steps: each inner solve only as accurate as the outer
    # iterate deserves (a tenth of the last |PG|), never beyond gtol
    inner = {"gtol": max(0.1 / max(xmax, floor), gtol)}

    def stop(W, G, alpha, gnorm0):
        return xp.sqrt(_rowdot(G, G, xp=xp)) <= inner["gtol"]

    prox = dataclasses.replace(loss, kind="prox_hinge", a=zero_D, mu=_MU0)
    total, converged = 0, False
    while total < max_iter:
        W, alpha, it, _ = _tron(prox, W, stop, max_iter - total, xp=xp)
        total += max(it, 1)
        Wd = (alpha * loss.Y).T @ loss.Z
        pg = _dual_pg_max(loss, Wd, alpha, loss.C, zero_D, xp=xp)
        alpha, Wd, pg = _polish(loss, alpha, Wd, pg, xp=xp)
        worst = float(xp.max(pg))  # one host read per proximal step
        if worst <= tol:
            converged = True
            break
        inner["gtol"] = max(min(inner["gtol"], 0.1 * worst / max(xmax, floor)), gtol)
        mu = max(prox.mu * _MU_SHRINK, _MU_MIN)
        prox = dataclasses.replace(prox, a=alpha, mu=mu)
        W = Wd
    return Wd, alpha, zero_D, total, converged


@dataclasses.dataclass(frozen=True)
class _DCDOptions:
    """Settings of the blocked dual coordinate descent."""

    tol: float
    max_iter: int  # epochs (LIBLINEAR's meaning)
    block: int = 128  # coordinates per GEMM block
    shrinking: bool = True


@dataclasses.dataclass
class _DCDProblem:
    """One binary subproblem on the host side: labels, box, diagonal, ``Q̄ᵢᵢ``."""

    y: Any  # (n,) ±1
    U: Any  # (n,) upper bounds (C or inf)
    Dg: Any  # (n,) diagonal added to Q
    qd: Any  # (n,) ‖xᵢ‖² + Dᵢ
    alpha: Any  # (n,) the dual iterate


def _dcd_block(KM, prob, idx, bounds, /):
    """The sequential core: DCD's q coordinate updates of one block, in order,
    on the host. ``KM = [K | m]`` is the block's Gram ``xᵢ·xⱼ`` beside its
    margins ``xᵢ·w``; the margins follow each update through a Gram column,
    so the iterates equal unblocked DCD's. ``bounds = (PGmin_old, PGmax_old)``
    shrink coordinates stuck at a bound. Returns the new ``α_B``, the kept
    mask and the block's largest and smallest projected gradients."""
    q = idx.shape[0]
    K, m = KM[:, :q], KM[:, q].copy()
    lo, hi = bounds
    a, y = prob.alpha[idx].tolist(), prob.y[idx].tolist()
    U, Dg, qd = prob.U[idx].tolist(), prob.Dg[idx].tolist(), prob.qd[idx].tolist()
    keep = [True] * q
    pgmax, pgmin = -np.inf, np.inf
    for j in range(q):  # the q scalars of one block, not the samples
        aj = a[j]
        G = y[j] * float(m[j]) - 1.0 + Dg[j] * aj
        PG = G
        if aj == 0.0:
            if G > hi:
                keep[j] = False
                continue
            PG = min(G, 0.0)
        elif aj >= U[j]:
            if G < lo:
                keep[j] = False
                continue
            PG = max(G, 0.0)
        pgmax, pgmin = max(pgmax, PG), min(pgmin, PG)
        if abs(PG) > 1e-12:
            new = min(max(aj - G / qd[j], 0.0), U[j])
            if new != aj:
                m += ((new - aj) * y[j]) * K[j]
                a[j] = new
    return np.asarray(a), np.asarray(keep), pgmax, pgmin


def _dcd_epoch(Z, w, prob, perm, ctx, /):
    """One pass over ``perm`` in blocks: a GEMM for ``[K | m]``, one download,
    the host core, one upload of ``Δα∘y`` and ``w += Z_Bᵀ(Δα∘y)``."""
    xp, opts, bounds = ctx["xp"], ctx["opts"], ctx["bounds"]
    perm_d = xp.asarray(perm, device=device(Z))  # one upload per epoch
    keep, pgmax, pgmin = [], -np.inf, np.inf
    n_perm = perm.shape[0]
    for s in range(0, n_perm, opts.block):
        stop = min(s + opts.block, n_perm)
        idx = perm[s:stop]
        ZB = xp.take(Z, perm_d[s:stop], axis=0)
        KM = to_numpy(xp.concat([ZB @ ZB.T, (ZB @ w)[:, None]], axis=1))
        if not np.all(np.isfinite(KM)):
            return None
        a_new, kept, bmax, bmin = _dcd_block(KM, prob, idx, bounds)
        keep.append(kept)
        pgmax, pgmin = max(pgmax, bmax), min(pgmin, bmin)
        delta = (a_new - prob.alpha[idx]) * prob.y[idx]
        if np.any(delta != 0.0):
            dy = xp.asarray(delta, dtype=Z.dtype, device=device(Z))
            w = w + dy @ ZB
            prob.alpha[idx] = a_new
    keep = np.concatenate(keep) if keep else np.zeros(0, dtype=bool)
    return w, keep, pgmax, pgmin


def _dcd_subproblem(Z, prob, opts, rng, /, *, xp):
    """LIBLINEAR's DCD with shrinking on one binary problem; returns ``w``,
    the epochs run and whether the spread ``max PG − min PG`` reached ``tol``
    with every coordinate active."""
    eligible = np.flatnonzero(prob.U > 0.0)  # zero cost pins αᵢ = 0
    active = eligible
    w = xp.zeros((Z.shape[1],), dtype=Z.dtype, device=device(Z))
    ctx = {"xp": xp, "opts": opts, "bounds": (-np.inf, np.inf)}
    for epoch in range(1, opts.max_iter + 1):
        perm = rng.permutation(active)
        out = _dcd_epoch(Z, w, prob, perm, ctx)
        if out is None:
            return None, epoch, False
        w, keep, pgmax, pgmin = out
        active = np.sort(perm[keep])
        if pgmax - pgmin <= opts.tol:
            if active.shape[0] == eligible.shape[0]:
                return w, epoch, True
            active, ctx["bounds"] = eligible, (-np.inf, np.inf)
            continue
        if opts.shrinking:
            ctx["bounds"] = (
                pgmin if pgmin < 0.0 else -np.inf,
                pgmax if pgmax > 0.0 else np.inf,
            )
    return w, opts.max_iter, False


def _solve_dcd(loss, opts, rng, /, *, xp):
    """Blocked dual coordinate descent on each one-vs-rest subproblem."""
    Y, C = to_numpy(loss.Y).astype(np.float64), to_numpy(loss.C).astype(np.float64)
    sq = to_numpy(xp.sum(loss.Z * loss.Z, axis=1)).astype(np.float64)
    hinge = loss.kind == "hinge"
    Ws, alphas, epochs, converged = [], [], 0, True
    for r in range(Y.shape[1]):  # one-vs-rest subproblems, not samples
        c = C[:, r]
        if hinge:
            U, Dg = c.copy(), np.zeros_like(c)
        else:
            pos = c > 0.0
            U = np.where(pos, np.inf, 0.0)
            Dg = np.where(pos, 0.5 / np.where(pos, c, 1.0), 0.0)
        prob = _DCDProblem(Y[:, r], U, Dg, sq + Dg, np.zeros_like(c))
        w, it, ok = _dcd_subproblem(loss.Z, prob, opts, rng, xp=xp)
        if w is None:
            _raise_non_finite(loss, xp=xp)
        Ws.append(w)
        alphas.append(prob.alpha)
        epochs, converged = max(epochs, it), converged and ok
    dev = device(loss.Z)
    alpha = xp.asarray(np.stack(alphas, axis=1), dtype=loss.Z.dtype, device=dev)
    D = xp.zeros_like(loss.C) if hinge else _squared_hinge_diag(loss.C, xp=xp)
    return xp.stack(Ws, axis=0), alpha, D, epochs, converged


def _objectives(loss, W, alpha, D, /, *, xp):
    """Primal ``½‖w‖² + Σ Cᵢ ξᵢ^p`` at ``W`` and dual ``Σα − ½‖Σαyx‖² − ½ΣDα²``."""
    margin = loss.Y * (loss.Z @ W.T)
    slack = xp.maximum(1.0 - margin, xp.zeros_like(margin))
    if loss.kind == "squared_hinge":
        slack = slack * slack
    primal = 0.5 * _rowdot(W, W, xp=xp) + xp.sum(loss.C * slack, axis=0)
    Wd = (alpha * loss.Y).T @ loss.Z
    dual = (
        xp.sum(alpha, axis=0)
        - 0.5 * _rowdot(Wd, Wd, xp=xp)
        - 0.5 * xp.sum(D * alpha * alpha, axis=0)
    )
    return primal, dual


def _class_weights(class_weight, classes, codes, sw):
    """Host float array ``(k,)`` of class weights (scikit-learn's meaning:
    "balanced" is ``Σs / (k · Σ_{class} s)`` with the sample weights ``s``)."""
    k = len(classes)
    if class_weight is None:
        return np.ones(k)
    if class_weight == "balanced":
        mass = np.bincount(codes, weights=sw, minlength=k)
        return sw.sum() / (k * np.maximum(mass, np.finfo(np.float64).tiny))
    out = np.ones(k)
    for key, w in class_weight.items():
        if key not in classes:
            raise ValueError(
                f"class_weight has the label {key!r}, which is not a class of y; "
                f"classes are {classes!r}"
            )
        out[classes.index(key)] = float(w)
    if not np.all(np.isfinite(out) & (out >= 0)):
        raise ValueError(f"class_weight values must be finite and >= 0; got {out}")
    return out


def _targets_and_costs(y, sw, cw, C, k, /, *, xp):
    """``Y (n, m)`` labels ±1 and costs ``(n, m)`` of the one-vs-rest problems.

    Two classes: one problem, positive class 1, each sample costing
    ``C·sᵢ·cw[yᵢ]``. More: problem ``r`` has the positives ``y = r`` costing
    ``C·sᵢ·cw[r]`` and the rest ``C·sᵢ`` (LIBLINEAR's one-vs-rest).
    """
    dev = device(y)
    dtype = sw.dtype
    cw_d = xp.asarray(cw, dtype=dtype, device=dev)
    one = xp.ones((), dtype=dtype, device=dev)
    if k == 2:
        Y = xp.where(y == 1, one, -one)[:, None]
        return Y, (C * sw * xp.take(cw_d, y))[:, None]
    pos = y[:, None] == xp.arange(k, dtype=y.dtype, device=dev)[None, :]
    Y = xp.where(pos, one, -one)
    costs = xp.where(pos, cw_d[None, :] + 0.0 * Y, xp.ones_like(Y))
    return Y, C * sw[:, None] * costs


class LinearSVC(ClassifierMixin, BaseEstimator):
    """Linear support vector classifier (LIBLINEAR's problems, Newton solvers).

    Minimises ``½‖w‖² + C Σᵢ sᵢ L(yᵢ w·xᵢ)`` with ``L`` the hinge ``max(0, 1−m)``
    or the squared hinge ``max(0, 1−m)²`` (``sᵢ`` the sample weights times the
    class weights). Multi-class problems are solved one versus rest, all
    subproblems together.

    Parameters
    ----------
    penalty : {"l2"}, default="l2"
    loss : {"hinge", "squared_hinge"}, default="squared_hinge"
    dual : "auto" or bool, default="auto"
        Which optimality test ``tol`` refers to (see Notes): the dual's
        projected gradient (True) or the primal gradient norm (False). "auto"
        is False for the squared hinge when ``n_samples > n_features`` and True
        otherwise; the hinge loss has only the dual (``dual=False`` raises).
    tol : float, default=1e-4
    C : float, default=1.0
        Inverse regularisation strength (> 0).
    multi_class : {"ovr"}, default="ovr"
    fit_intercept : bool, default=True
        Learn an intercept by appending a constant feature ``intercept_scaling``
        to every sample. As in LIBLINEAR the intercept is then regularised
        like the other weights; a larger ``intercept_scaling`` weakens that.
    intercept_scaling : float, default=1.0
    class_weight : dict, "balanced" or None, default=None
        Multiplies ``C`` for the samples of each class (of the positive class
        only in a one-vs-rest subproblem with more than two classes).
    max_iter : int, default=1000
        Maximum number of Newton steps (over all proximal steps for the hinge),
        or of epochs per subproblem for ``solver="dcd"``.
    random_state : int, RandomState instance or None, default=None
        Seeds the coordinate permutations of ``solver="dcd"``; the Newton
        solvers are deterministic and ignore it.
    solver : {"newton", "dcd"}, default="newton"
        "newton": trust-region Newton on the primal (squared hinge) or
        proximal-point Newton on the dual (hinge), whole-array steps.
        "dcd": LIBLINEAR's dual coordinate descent, blocked (see the module
        docstring); ``dual=False`` raises with it. Both learn the intercept
        through the augmented feature, so it is regularised as in LIBLINEAR
        and scikit-learn's LinearSVC.

    Attributes
    ----------
    coef_ : array of shape (1, n_features) for two classes, else (n_classes, n_features)
    intercept_ : array of shape (1,) or (n_classes,)
        Zeros when ``fit_intercept=False``.
    classes_ : array of shape (n_classes,)
    n_iter_ : int
        Newton steps run (all subproblems advance together), or for
        ``solver="dcd"`` the most epochs any subproblem ran.
    dual_coef_ : array of shape (n_samples,) or (n_samples, n_classes)
        ``αᵢyᵢ`` of each subproblem (labels ``±1``); for the hinge loss
        ``w = Σᵢ dual_coef_[i] xᵢ`` over the (augmented) samples exactly, for
        the squared hinge up to the final gradient.
    primal_objective_, dual_objective_ : array of shape (1,) or (n_classes,)
        Objective values at the solution; ``primal − dual ≥ 0`` is the duality
        gap, a certificate of convergence.
    n_features_in_ : int

    Notes
    -----
    Dual of a subproblem (labels ``±1``): ``max Σα − ½‖Σ αᵢyᵢxᵢ‖² − ½ΣDᵢαᵢ²``
    s.t. ``0 ≤ αᵢ ≤ Uᵢ``; hinge: ``Dᵢ = 0, Uᵢ = Cᵢ``; squared hinge:
    ``Dᵢ = 1/(2Cᵢ), Uᵢ = ∞``. The module docstring describes the solvers.

    References
    ----------
    Lin, Weng & Keerthi, "Trust region Newton method for large-scale logistic
    regression", JMLR 2008. Hsieh, Chang, Lin, Keerthi & Sundararajan, "A dual
    coordinate descent method for large-scale linear SVM", ICML 2008. Yan &
    Li, "An efficient augmented Lagrangian method for support vector machine",
    Optimization Methods and Software 2020.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.svm import LinearSVC
    >>> X = np.array([[-2.0, -1.0], [-1.0, -2.0], [1.0, 2.0], [2.0, 1.0]])
    >>> y = np.array([0, 0, 1, 1])
    >>> clf = LinearSVC(loss="hinge", fit_intercept=False).fit(X, y)
    >>> clf.predict(np.array([[3.0, 3.0], [-3.0, -2.0]])).tolist()
    [1, 0]
    >>> bool(clf.primal_objective_[0] - clf.dual_objective_[0] < 1e-3)
    True
    """

    _parameter_constraints = {
        "penalty": [Options("l2")],
        "loss": [Options("hinge", "squared_hinge")],
        "dual": [Options("auto"), "boolean"],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "C": [Interval(Real, 0, None, closed="neither")],
        "multi_class": [Options("ovr")],
        "fit_intercept": ["boolean"],
        "intercept_scaling": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [dict, Options("balanced"), None],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "solver": [Options("newton", "dcd")],
    }
    _xpml_tags = {
        "test_params": {"C": 0.1, "tol": 1e-3},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "an iterative solver stopped at tol: weights equal repetitions only up to "
            "the tolerance (tests/test_linear_svc.py checks it at a tight tol)",
        },
    }

    def __init__(
        self,
        *,
        penalty="l2",
        loss="squared_hinge",
        dual="auto",
        tol=1e-4,
        C=1.0,
        multi_class="ovr",
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        max_iter=1000,
        random_state=None,
        solver="newton",
    ):
        self.penalty = penalty
        self.loss = loss
        self.dual = dual
        self.tol = tol
        self.C = C
        self.multi_class = multi_class
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.max_iter = max_iter
        self.random_state = random_state
        self.solver = solver

    def _use_dual(self, n, d):
        if self.solver == "dcd" and self.dual is False:
            raise ValueError(
                "dual=False is not supported with solver='dcd' (dual coordinate "
                "descent solves the dual); use dual=True or 'auto', or "
                "solver='newton'"
            )
        if self.loss == "hinge":
            if self.dual is False:
                raise ValueError(
                    "dual=False is not supported with loss='hinge' (the hinge loss "
                    "is solved through its dual only); use dual=True or 'auto', or "
                    "loss='squared_hinge'"
                )
            return True
        return n <= d if self.dual == "auto" else bool(self.dual)

    def _problem(self, X, y, sw, ctx):
        """The augmented samples and the one-vs-rest targets and costs."""
        xp, n = ctx.xp, X.shape[0]
        if self.fit_intercept:
            col = xp.full(
                (n, 1), float(self.intercept_scaling), dtype=X.dtype, device=ctx.device
            )
            X = xp.concat([X, col], axis=1)
        classes = to_numpy(self.classes_).tolist()
        sw_h = to_numpy(sw).astype(np.float64)
        cw = _class_weights(self.class_weight, classes, to_numpy(y), sw_h)
        Y, costs = _targets_and_costs(y, sw, cw, float(self.C), len(classes), xp=xp)
        kind = "hinge" if self.loss == "hinge" else "squared_hinge"
        return _Loss(X, Y, costs, kind)

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> LinearSVC:
        """Fit the one-vs-rest linear SVMs.

        Parameters
        ----------
        X : array of shape (n_samples, n_features)
        y : array of shape (n_samples,)
        sample_weight : array of shape (n_samples,), optional
            Per-sample multipliers of ``C``.

        Returns
        -------
        self
        """
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="classes")
        xp = ctx.xp
        n, d = int(X.shape[0]), int(X.shape[1])
        dual = self._use_dual(n, d)
        loss = self._problem(X, y, sw, ctx)
        tol, max_iter = float(self.tol), int(self.max_iter)
        if self.solver == "dcd":
            rng = check_random_state(self.random_state)
            opts = _DCDOptions(tol, max_iter)
            W, alpha, D, it, ok = _solve_dcd(loss, opts, rng, xp=xp)
        elif loss.kind == "hinge":
            W, alpha, D, it, ok = _solve_hinge(loss, tol, max_iter, xp=xp)
        else:
            W, alpha, D, it, ok = _solve_squared_hinge(loss, tol, max_iter, dual, xp=xp)
        if not ok:
            unit = "epochs" if self.solver == "dcd" else "Newton steps"
            warn(
                ConvergenceWarning,
                f"LinearSVC did not converge in max_iter={self.max_iter} {unit} "
                f"(tol={self.tol}); increase max_iter or tol.",
            )
        self.primal_objective_, self.dual_objective_ = _objectives(
            loss, W, alpha, D, xp=xp
        )
        self._set_solution(W, alpha * loss.Y, d, ctx)
        self.n_iter_ = int(it)
        return self._fitted(ctx)

    def _set_solution(self, W, dual_coef, d, ctx):
        self.coef_ = W[:, :d]
        if self.fit_intercept:
            self.intercept_ = float(self.intercept_scaling) * W[:, d]
        else:
            self.intercept_ = ctx.xp.zeros(
                (W.shape[0],), dtype=W.dtype, device=ctx.device
            )
        self.dual_coef_ = dual_coef[:, 0] if dual_coef.shape[1] == 1 else dual_coef

    def _scores(self, X, ctx):
        coef, b = ctx.take(self.coef_), ctx.take(self.intercept_)
        if coef.dtype != X.dtype:
            X = ctx.xp.astype(X, coef.dtype)
        return X @ coef.T + b[None, :]

    def decision_function(self, X: ArrayLike) -> Array:
        """Signed distances to the hyperplanes, ``X wᵀ + b``.

        Returns
        -------
        scores : array of shape (n_samples,) for two classes, else (n_samples, n_classes)
        """
        ctx, X = self._validate_predict_data(X)
        scores = self._scores(X, ctx)
        return ctx.out(scores[:, 0] if scores.shape[1] == 1 else scores)

    def predict(self, X: ArrayLike) -> Array:
        """Class labels: the sign of the score (two classes) or the largest score."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        scores = self._scores(X, ctx)
        if scores.shape[1] == 1:
            codes = xp.astype(scores[:, 0] > 0, xp.int64)
        else:
            codes = xp.argmax(scores, axis=1)
        return decode_labels(self.classes_, codes, ctx)
