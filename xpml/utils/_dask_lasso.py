"""Dask fit of Lasso: the Gram, then coordinate descent on the client.

One graph, one compute: the weighted means (first pass), then the centred
``G = Xsᵀ Xs``, ``c = Xsᵀ ys`` and ``ys·ys`` summed over the row blocks, with
``Xs = √w (X − x̄)`` and ``ys = √w (y − ȳ)`` as the single-machine
``center_data`` (weights rescaled to sum ``n``, as scikit-learn). The
coordinate descent then runs on the ``d × d`` Gram: the same objective
``½‖ys − Xs w‖² + nα‖w‖₁``, the same coordinate order and the same stopping
rule (largest change below ``tol`` times the largest weight, then the
duality gap below ``tol · ‖ys‖²``) as the single-machine ``_cd_lasso``, with
``Xsᵀr = c − G w`` and ``‖r‖² = ys·ys − 2 wᵀc + wᵀG w`` in place of the
residual. The Gram is not the residual's arithmetic: the iterates agree to
rounding (1e-10 on the tests' data), not bit for bit.
"""

from __future__ import annotations

import dataclasses
import warnings

import array_api_compat
import numpy as np

from xpml._dask import compute, map_sum, register
from xpml.utils._dask_fits import offsets, prologue

__all__ = ["fit_lasso", "gram_lasso"]


def _ns(a):
    return array_api_compat.array_namespace(a)


def _gram_block(Xb, yb, wb, x_off, y_off):
    """``(Σ w x̃ x̃ᵀ, Σ w x̃ ỹᵀ, Σ w ỹ²)`` of one block (``x̃ = x − x̄``)."""
    xp = _ns(Xb)
    Xc, yc = Xb - x_off, yb - y_off
    Xw = Xc if wb is None else Xc * wb[:, None]
    yw = yc if wb is None else (yc * wb if yc.ndim == 1 else yc * wb[:, None])
    return Xw.T @ Xc, Xw.T @ yc, xp.sum(yw * yc, axis=0)


@dataclasses.dataclass
class Gram:
    """The sufficient statistics of one target: ``G = XsᵀXs``, ``c = Xsᵀys``,
    ``yy = ys·ys``."""

    G: np.ndarray
    c: np.ndarray
    yy: float


def _duality_gap(g, w, Gw, l1, positive):
    """The single-machine duality gap, from the Gram."""
    XtR = g.c - Gw
    top = np.max(XtR) if positive else np.max(np.abs(XtR))
    R2 = g.yy - 2.0 * (w @ g.c) + w @ Gw
    Ry = g.yy - w @ g.c
    const = l1 / top if top > l1 else 1.0
    gap = 0.5 * (R2 + R2 * const * const) if top > l1 else R2
    return float(gap + l1 * np.sum(np.abs(w)) - const * Ry)


def gram_lasso(g, w, l1, *, max_iter, tol, positive=False, rng=None):
    """``argmin ½‖ys − Xs w‖² + l1‖w‖₁`` by coordinate descent on the Gram,
    from ``w``: returns ``(w, gap, n_iter, tol_scaled)`` as ``_cd_lasso``."""
    d = g.G.shape[0]
    w = np.array(w, dtype=np.float64)
    norms = np.diagonal(g.G).copy()
    Gw = g.G @ w
    tol_scaled = tol * g.yy
    gap, n_iter = float("inf"), 0
    for n_iter in range(1, max_iter + 1):
        dw_max = w_max = 0.0
        for j in rng.permutation(d).tolist() if rng is not None else range(d):
            if not norms[j] > 0:
                continue
            rho = g.c[j] - Gw[j] + norms[j] * w[j]
            z = max(rho - l1, 0.0)
            if not positive:  # soft threshold: max(ρ − t, 0) + min(ρ + t, 0)
                z = z + min(rho + l1, 0.0)
            new = z / norms[j]
            delta = new - w[j]
            if delta:
                Gw = Gw + delta * g.G[:, j]
            w[j] = new
            dw_max, w_max = max(dw_max, abs(delta)), max(w_max, abs(new))
        if w_max == 0.0 or dw_max / w_max <= tol or n_iter == max_iter:
            gap = _duality_gap(g, w, Gw, l1, positive)
            if gap <= tol_scaled:
                break
    return w, gap, n_iter, tol_scaled


def _targets(G, c, yy, multi):
    if not multi:
        return [Gram(G, c, float(yy))]
    return [Gram(G, c[:, t], float(yy[t])) for t in range(c.shape[1])]


def _start(est, d, t, n_targets):
    """``coef_`` of a previous fit when ``warm_start`` and the shapes agree."""
    prev = getattr(est, "coef_", None) if est.warm_start else None
    want = (d,) if n_targets is None else (n_targets, d)
    if prev is None or tuple(np.shape(prev)) != want:
        return np.zeros(d)
    prev = np.asarray(prev, dtype=np.float64)
    return prev if n_targets is None else prev[t, :]


@register("Lasso")
def fit_lasso(est, X, y, sample_weight):
    """Weighted means and the centred Gram in one compute; coordinate descent
    on the ``d × d`` Gram on the client."""
    from xpml._backend import to_numpy
    from xpml.exceptions import ConvergenceWarning, warn
    from xpml.utils.validation import check_random_state

    data = prologue(est, X, y, sample_weight)
    n, d = data.n, data.d
    if not est.alpha:
        warnings.warn(
            "With alpha=0, this algorithm does not converge well. You are advised "
            "to use the LinearRegression estimator",
            UserWarning,
            stacklevel=4,
        )
    x_off, y_off = offsets(data, est.fit_intercept)
    sums = map_sum(_gram_block, (data.X, data.y, data.w), x_off, y_off)
    (G, c, yy), x_off, y_off, W = compute(
        sums, x_off, y_off, data.w.sum() if data.w is not None else n
    )
    G, c, yy, x_off, y_off = (to_numpy(a) for a in (G, c, yy, x_off, y_off))
    scale = n / float(W)  # the weights rescaled to sum n (a no-op without them)
    multi = data.y.ndim == 2
    n_targets = int(data.y.shape[1]) if multi else None
    rng = check_random_state(est.random_state) if est.selection == "random" else None
    coefs, gaps, iters = [], [], []
    for t, g in enumerate(_targets(G * scale, c * scale, yy * scale, multi)):
        w, gap, n_iter, tol_scaled = gram_lasso(
            g,
            _start(est, d, t, n_targets),
            float(est.alpha) * n,
            max_iter=est.max_iter,
            tol=est.tol,
            positive=est.positive,
            rng=rng,
        )
        if gap > tol_scaled:
            warn(
                ConvergenceWarning,
                f"Lasso did not converge in max_iter={est.max_iter} sweeps: duality "
                f"gap {gap:.3g} > tolerance {tol_scaled:.3g}; increase max_iter or tol",
            )
        coefs.append(w)
        gaps.append(gap)
        iters.append(n_iter)
    Wc = np.stack(coefs) if multi else coefs[0]
    est.coef_ = Wc
    est.intercept_ = y_off - (Wc @ x_off if multi else x_off @ Wc)
    est.n_iter_ = int(max(iters))
    est.dual_gap_ = float(max(gaps)) / n
    return est
