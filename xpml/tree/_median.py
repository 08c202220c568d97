"""Weighted medians and absolute errors of many ranges of many rows at once.

The absolute-error tree criterion needs, at every split position of every
sorted row, the weighted median of the left part (a prefix of the row) and of
the right part (a suffix), and the weighted sums of ``|y − median|``. These do
not follow from cumulative sums of fixed channels; here they come from a
*wavelet matrix* walk over the ``y``-ranks of each row (Claude, Navarro and
Ordóñez 2015, "The wavelet matrix"), with array passes only:

* each row holds a permutation ``rank`` of ``0..L−1`` (the order of its ``y``);
* level ``b`` (most significant bit first) stably moves the entries whose rank
  has bit ``b`` clear before the others; the cumulative count, weight and
  weighted ``y`` of those entries answer, for every query range ``[lo, hi)``
  at once, how much weight lies in the lower half of its current rank
  interval;
* each query descends into the half that holds the weighted median (the
  smallest rank whose cumulative weight reaches half the range's weight),
  accumulating the weight and weighted ``y`` of what it leaves below.

``B = ⌈log2 L⌉`` levels of O(L) passes per row: O(L log L) work, and O(L) live
memory per row and query set (levels are built and queried one at a time).
The absolute error then follows from the pinball identity
``Σ w |y − m| = m (2 W_below − W) + Y − 2 Y_below`` (entries ranked below the
median are at most ``m``, those above at least ``m``).

A stable partition is a scatter; its portable form inverts the destination
permutation with ``argsort``, and NumPy / PyTorch scatter directly
(:func:`invert_rows`).
"""

from __future__ import annotations

import numpy as np

from xpml.utils._array_api import device, dispatch, fast_path, portable

__all__ = ["invert_rows", "median_of", "range_abs_errors", "rank_rows"]


def _take_rows(a, idx, *, xp):
    """``a[r, idx[r, q]]`` for 2-D ``a`` (R, N) and ``idx`` (R, Q): one flat take."""
    R, N = int(a.shape[0]), int(a.shape[1])
    off = xp.arange(R, dtype=idx.dtype, device=device(idx))[:, None] * N
    flat = xp.take(xp.reshape(a, (-1,)), xp.reshape(idx + off, (-1,)))
    return xp.reshape(flat, idx.shape)


# ------------------------------------------------------- inverse permutation
@portable("tree.invert_rows")
def _invert_rows(perm, *, xp):
    """Inverse of each row's permutation (R, L): an ``argsort``."""
    return xp.argsort(perm, axis=-1)


def _invert_example():
    rng = np.random.default_rng(0)
    perm = np.argsort(rng.random((4, 37)), axis=1)
    return (perm,), {"xp": np}


@fast_path("tree.invert_rows", "numpy", example=_invert_example)
def _invert_rows_numpy(perm, *, xp):
    out = np.empty_like(perm)
    src = np.broadcast_to(np.arange(perm.shape[-1], dtype=perm.dtype), perm.shape)
    np.put_along_axis(out, perm, src, axis=-1)
    return out


@fast_path("tree.invert_rows", "torch", example=_invert_example)
def _invert_rows_torch(perm, *, xp):
    import torch

    src = torch.arange(perm.shape[-1], dtype=perm.dtype, device=perm.device)
    return torch.empty_like(perm).scatter_(-1, perm, src.expand(perm.shape))


def invert_rows(perm, *, xp):
    """``inv`` with ``inv[r, perm[r, i]] = i`` for each row permutation of ``perm``."""
    return dispatch("tree.invert_rows", xp)(perm, xp=xp)


def rank_rows(y, *, xp):
    """Ranks (G, L) of each row's values (ties by position) and the values in
    rank order (G, L)."""
    order = xp.argsort(y, axis=-1, stable=True)
    return invert_rows(order, xp=xp), _take_rows(y, order, xp=xp)


# ---------------------------------------------------------------- the walk
def _walk(rank, w, wy, lo, hi, *, strict, xp):
    """Descend the wavelet matrix of ``rank`` (R, L) for the query ranges
    ``[lo, hi)`` (R, Q). Returns, per query, the median rank ``t`` (the
    smallest rank whose cumulative weight in the range reaches half of the
    range's weight; exceeds it where ``strict``, None: nowhere), and the weight and ``w·y`` of
    the range's entries ranked below ``t``; and the range's weight and ``w·y``."""
    R, L = (int(n) for n in rank.shape)
    Q = int(lo.shape[1])
    dev = device(rank)
    idt = rank.dtype
    pos = xp.arange(L, dtype=idt, device=dev)[None, :]
    rows = xp.arange(R, dtype=idt, device=dev)[:, None]
    # weight, w·y and rank of the entries, carried from level to level at once
    # (ranks and counts are exact in floating point below 2^24 entries a row)
    V = xp.stack([w, wy, xp.astype(rank, w.dtype)])
    se = xp.concat([lo, hi], axis=1)  # both ends of every range

    def at_ends(C):  # C (c, R, L+1) at both ends of every range: (c, R, 2Q)
        flat = xp.reshape(se + rows * (L + 1), (-1,))
        c = int(C.shape[0])
        return xp.reshape(xp.take(xp.reshape(C, (c, -1)), flat, axis=1), (c, R, 2 * Q))

    full = at_ends(xp.cumulative_sum(V[:2, ...], axis=-1, include_initial=True))
    W, Y = full[0, :, Q:] - full[0, :, :Q], full[1, :, Q:] - full[1, :, :Q]
    half = W / 2
    acc_w, acc_y = xp.zeros_like(W), xp.zeros_like(W)
    t = xp.zeros_like(lo)
    for b in range(max(1, (L - 1).bit_length()) - 1, -1, -1):
        low = ((xp.astype(V[2, ...], idt) >> b) & 1) == 0
        lowf = xp.astype(low, V.dtype)
        C = xp.stack([V[0, ...] * lowf, V[1, ...] * lowf, lowf])
        C = xp.cumulative_sum(C, axis=-1, include_initial=True)
        g = at_ends(C)
        tot = acc_w + (g[0, :, Q:] - g[0, :, :Q])
        up = tot < half
        if strict is not None:
            up = up | (strict & (tot == half))
        acc_w = xp.where(up, tot, acc_w)
        acc_y = xp.where(up, acc_y + (g[1, :, Q:] - g[1, :, :Q]), acc_y)
        t = xp.where(up, t + (1 << b), t)
        # where the range lies in the next level's order (zeros first)
        z_at, Z = xp.astype(g[2, ...], idt), xp.astype(C[2, :, L:], idt)
        se = xp.where(xp.concat([up, up], axis=1), Z + se - z_at, z_at)
        if b == 0:
            break
        cz = xp.astype(C[2, :, :-1], idt)
        src = invert_rows(xp.where(low, cz, Z + pos - cz), xp=xp)
        flat = xp.reshape(src + rows * L, (-1,))
        V = xp.reshape(xp.take(xp.reshape(V, (3, -1)), flat, axis=1), (3, R, L))
    return t, acc_w, acc_y, W, Y


def range_abs_errors(rank, w, y_by_rank, lo, hi, *, xp, midpoint=False):
    """Weighted absolute errors about the weighted median of ranges of rows.

    Parameters
    ----------
    rank : int array (G, F, L)
        Each row a permutation of ``0..L−1``: the rank of each entry's ``y``
        in its group (rows of one group share their entries, in different
        orders, e.g. sorted along different features).
    w : array (G, F, L)
        Weights (>= 0) of the entries, in the rows' order.
    y_by_rank : array (G, L)
        Each group's ``y`` in rank order (nondecreasing).
    lo, hi : int arrays (G, F, Q)
        Query ranges ``[lo, hi)`` of positions in the rows, of positive weight.
    midpoint : bool
        Also return the rank ``t_hi`` of scikit-learn's upper median: the
        smallest rank whose cumulative weight *exceeds* half of the range's
        weight (``t_hi = t`` unless the weight below ``t`` and up to it is
        exactly half; then the median is the mean of ranks ``t`` and ``t_hi``).

    Returns
    -------
    sae : array (G, F, Q)
        ``Σ w |y − m|`` over each range, ``m`` its weighted median.
    t, t_hi : int arrays (G, F, Q)
        Rank of the (lower) weighted median; ``t_hi`` only with ``midpoint``
        (else None). See :func:`median_of`.
    """
    G, F, L = (int(n) for n in rank.shape)
    Q = int(lo.shape[-1])
    rows = (G * F, L)
    ybr = xp.reshape(xp.broadcast_to(y_by_rank[:, None, :], (G, F, L)), rows)
    r2 = xp.reshape(rank, rows)
    w2 = xp.reshape(w, rows)
    wy = w2 * _take_rows(ybr, r2, xp=xp)
    lo2, hi2 = xp.reshape(lo, (G * F, Q)), xp.reshape(hi, (G * F, Q))
    if midpoint:  # both medians in one walk: the queries twice
        lo2, hi2 = xp.concat([lo2, lo2], axis=1), xp.concat([hi2, hi2], axis=1)
        strict = (xp.arange(2 * Q, device=device(lo)) >= Q)[None, :]
    else:
        strict = None
    t_all, acc_w, acc_y, W, Y = _walk(r2, w2, wy, lo2, hi2, strict=strict, xp=xp)
    # a range of no weight has no median: the strict walk runs past the end
    t_all = xp.minimum(t_all, xp.full_like(t_all, L - 1))
    t, acc_w, acc_y, W, Y = (a[:, :Q] for a in (t_all, acc_w, acc_y, W, Y))
    m = _take_rows(ybr, t, xp=xp)
    sae = m * (2 * acc_w - W) + Y - 2 * acc_y
    sae = xp.where(sae > 0, sae, xp.zeros_like(sae))  # rounding below 0
    t_hi = xp.reshape(t_all[:, Q:], (G, F, Q)) if midpoint else None
    return xp.reshape(sae, (G, F, Q)), xp.reshape(t, (G, F, Q)), t_hi


def median_of(y_by_rank, t, t_hi, *, xp):
    """scikit-learn's weighted median of each range, from the ranks of
    :func:`range_abs_errors` (``midpoint=True``): ``(y[t] + y[t_hi]) / 2``.
    ``y_by_rank`` (G, L), ``t`` and ``t_hi`` (G, F, Q)."""
    G, F, Q = (int(n) for n in t.shape)
    flat = (G, F * Q)
    a = _take_rows(y_by_rank, xp.reshape(t, flat), xp=xp)
    b = _take_rows(y_by_rank, xp.reshape(t_hi, flat), xp=xp)
    return xp.reshape((a + b) / 2, (G, F, Q))
