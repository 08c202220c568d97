"""Weighted medians and absolute errors of ranges (xpml.tree._median) against a
brute-force NumPy computation: random rows whose entries are shared by the rows
of a group in different orders, integer weights (so that exact half-weight
ties, where scikit-learn's median is a midpoint, occur), ties in ``y``, every
prefix and suffix of every row. Absolute errors to 1e-12 relative to the
range's Σ w|y|, medians exactly."""

import numpy as np
import pytest

from xpml.tree._median import (
    _invert_rows,
    invert_rows,
    median_of,
    range_abs_errors,
    rank_rows,
)


def _brute(y, w):
    """Σ w |y − m| and scikit-learn's weighted median m of one range."""
    o = np.argsort(y, kind="stable")
    ys, ws = y[o], w[o]
    cw = np.cumsum(ws)
    half = cw[-1] / 2
    lo = np.searchsorted(cw, half, "left")
    hi = min(np.searchsorted(cw, half, "right"), len(ys) - 1)
    m = (ys[lo] + ys[hi]) / 2
    return np.sum(ws * np.abs(ys - m)), m


def _case(L, seed, G=3, F=2):
    """Groups of L entries (y with ties, integer weights, zero-weight padding
    at the end of some rows' entries), F rows per group in random orders."""
    rng = np.random.default_rng(seed)
    y = rng.integers(-3, 4, size=(G, L)).astype(float) * 0.5 + 10.0
    w = rng.integers(1, 4, size=(G, L)).astype(float)
    w[0, L - L // 4 :] = 0.0  # padding entries of one group
    order = np.stack([[rng.permutation(L) for _ in range(F)] for _ in range(G)])
    return y, w, order


@pytest.mark.parametrize("L", [1, 2, 3, 7, 8, 33])
def test_prefix_and_suffix_medians_equal_brute_force(L, xp):
    y, w, order = _case(L, seed=L)
    G, F = order.shape[:2]
    rank, ybr = rank_rows(xp.asarray(y), xp=xp.xp)
    rank_np = xp.to_numpy(rank)
    np.testing.assert_array_equal(xp.to_numpy(ybr), np.sort(y, axis=1))
    rows_rank = np.take_along_axis(np.repeat(rank_np[:, None, :], F, 1), order, -1)
    rows_w = np.take_along_axis(np.repeat(w[:, None, :], F, 1), order, -1)
    rows_y = np.take_along_axis(np.repeat(y[:, None, :], F, 1), order, -1)
    k = np.arange(L)
    lo = np.concatenate([np.zeros(L, np.int64), k + 1])
    hi = np.concatenate([k + 1, np.full(L, L)])
    lo3, hi3 = (
        np.ascontiguousarray(np.broadcast_to(a, (G, F, 2 * L))) for a in (lo, hi)
    )
    sae, t, t_hi = range_abs_errors(
        xp.asarray(rows_rank),
        xp.asarray(rows_w),
        ybr,
        xp.asarray(lo3),
        xp.asarray(hi3),
        xp=xp.xp,
        midpoint=True,
    )
    med = xp.to_numpy(median_of(ybr, t, t_hi, xp=xp.xp))
    sae = xp.to_numpy(sae)
    checked = 0
    for g in range(G):
        for f in range(F):
            for q in range(2 * L):
                yr, wr = rows_y[g, f, lo[q] : hi[q]], rows_w[g, f, lo[q] : hi[q]]
                if wr.sum() == 0:
                    assert sae[g, f, q] == 0
                    continue
                ref, m = _brute(yr, wr)
                scale = np.sum(wr * np.abs(yr))
                assert abs(sae[g, f, q] - ref) <= 1e-12 * scale, (g, f, q)
                assert med[g, f, q] == m, (g, f, q, med[g, f, q], m)
                checked += 1
    assert checked >= G * F * L


def test_without_midpoint_the_lower_median_gives_the_same_errors():
    y, w, order = _case(16, seed=5, G=1, F=1)
    rank, ybr = rank_rows(y, xp=np)
    r = rank[:, order[0, 0]][:, None, :]
    ww = w[:, order[0, 0]][:, None, :]
    lo = np.zeros((1, 1, 3), np.int64) + np.array([0, 4, 9])
    hi = np.zeros((1, 1, 3), np.int64) + np.array([16, 12, 10])
    a, t, none = range_abs_errors(r, ww, ybr, lo, hi, xp=np)
    b, t2, t_hi = range_abs_errors(r, ww, ybr, lo, hi, xp=np, midpoint=True)
    assert none is None
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(t, t2)
    assert np.all(t_hi >= t)


def test_fast_inverse_permutations_equal_argsort(xp):
    perm = np.argsort(np.random.default_rng(0).random((5, 41)), axis=1)
    got = xp.to_numpy(invert_rows(xp.asarray(perm), xp=xp.xp))
    ref = xp.to_numpy(_invert_rows(xp.asarray(perm), xp=xp.xp))
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(
        np.take_along_axis(perm, got, 1), np.tile(np.arange(41), (5, 1))
    )
