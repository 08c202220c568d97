"""Platt scaling: SVM decision values to probabilities.

A decision value is not a probability. Platt (2000) fits
``P(y=+1 | f) = 1 / (1 + exp(A f + B))`` by maximum likelihood on decision
values the model did not see in training (internal cross-validation), with
the regularised targets ``(N₊+1)/(N₊+2)`` and ``1/(N₋+2)`` and the Newton
method with backtracking of Lin, Lin & Weng (2007). Several classes: the
pairwise probabilities ``r_ij`` are coupled into one distribution by Wu, Lin
& Weng (2004), method 2: ``min_p pᵀQp`` subject to ``Σp = 1``, solved here
exactly for all samples at once as a batched linear system.
"""

from __future__ import annotations

import math

from xpml.utils._array_api import device

__all__ = ["sigmoid_fit", "sigmoid_predict", "pairwise_coupling"]


def _nll(f, t, A, B, *, xp):
    """Negative log-likelihood of targets ``t`` under ``1/(1+exp(Af+B))``,
    written so that no exponential overflows."""
    z = f * A + B
    return float(
        xp.sum(
            xp.where(
                z >= 0,
                t * z + xp.log1p(xp.exp(-xp.abs(z))),
                (t - 1.0) * z + xp.log1p(xp.exp(-xp.abs(z))),
            )
        )
    )


def sigmoid_fit(f, y, *, xp, max_iter=100, min_step=1e-10, sigma=1e-12, eps=1e-5):
    """Fit Platt's ``(A, B)`` to decision values ``f`` and labels ``y`` (±1).

    Returns host floats ``(A, B)``; ``P(y=+1|f) = 1/(1+exp(A f + B))``.
    """
    pos = y > 0
    prior1 = float(xp.sum(xp.astype(pos, f.dtype)))
    prior0 = float(f.shape[0]) - prior1
    hi, lo = (prior1 + 1.0) / (prior1 + 2.0), 1.0 / (prior0 + 2.0)
    dev = device(f)
    t = xp.where(
        pos,
        xp.asarray(hi, dtype=f.dtype, device=dev),
        xp.asarray(lo, dtype=f.dtype, device=dev),
    )
    A, B = 0.0, math.log((prior0 + 1.0) / (prior1 + 1.0))
    fval = _nll(f, t, A, B, xp=xp)
    for _ in range(max_iter):
        z = f * A + B
        e = xp.exp(-xp.abs(z))
        # p = 1/(1+exp(z)), q = 1 − p, both without overflow
        p = xp.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
        q = 1.0 - p
        d2 = p * q
        d1 = t - p
        h11 = sigma + float(xp.sum(f * f * d2))
        h22 = sigma + float(xp.sum(d2))
        h21 = float(xp.sum(f * d2))
        g1 = float(xp.sum(f * d1))
        g2 = float(xp.sum(d1))
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            nA, nB = A + step * dA, B + step * dB
            nf = _nll(f, t, nA, nB, xp=xp)
            if nf < fval + 1e-4 * step * gd:
                A, B, fval = nA, nB, nf
                break
            step /= 2.0
        if step < min_step:
            break
    return A, B


def sigmoid_predict(f, A, B, *, xp):
    """``1/(1+exp(A f + B))`` without overflow."""
    z = f * A + B
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


def pairwise_coupling(R, pairs, n_classes, *, xp):
    """Class probabilities from pairwise ones (Wu, Lin & Weng 2004, method 2).

    Parameters
    ----------
    R : array (n, P)
        ``R[:, p] = P(class i | class i or j, x)`` for ``pairs[p] = (i, j)``.
    pairs : list of (i, j)

    Returns
    -------
    P : array (n, n_classes), rows summing to 1.
    """
    n = int(R.shape[0])
    k = n_classes
    dev = device(R)
    # r[:, a, b] = P(a | a or b); Q[t, t] = Σ_{j≠t} r_jt², Q[t, j] = −r_jt r_tj
    zeros = xp.zeros((n,), dtype=R.dtype, device=dev)
    r = [[zeros for _ in range(k)] for _ in range(k)]
    for p, (i, j) in enumerate(pairs):
        r[i][j] = R[:, p]
        r[j][i] = 1.0 - R[:, p]
    rows = []
    for t in range(k):
        row = []
        for j in range(k):
            if j == t:
                row.append(sum((r[s][t] * r[s][t] for s in range(k) if s != t), zeros))
            else:
                row.append(-r[j][t] * r[t][j])
        rows.append(xp.stack(row, axis=1))
    Q = xp.stack(rows, axis=1)  # (n, k, k)
    ones = xp.ones((n, k, 1), dtype=R.dtype, device=dev)
    u = xp.linalg.solve(Q, ones)[:, :, 0]
    u = xp.maximum(u, 0.0)
    return u / xp.sum(u, axis=1, keepdims=True)
