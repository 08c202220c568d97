"""The split search's rank-key sort (xpml.tree._grow): per-feature dense ranks
and their values against ``np.unique``, the sorting networks by the 0-1
principle, and the (rank, position) sort against NumPy's stable argsort."""

import itertools
import types

import numpy as np
import pytest

from xpml.tree._grow import _NETWORK_SORT, _rank_tables, _sort_by_rank, _sorting_network


def test_rank_tables_match_unique(xp):
    rng = np.random.default_rng(0)
    n, d = 60, 4
    X = np.round(rng.standard_normal((n, d)), 1)  # ties
    X[:, 3] = 2.5  # a constant feature
    flat = np.concatenate([X.reshape(-1), np.full(d, np.inf)])  # the sentinel row
    R, XS = _rank_tables(xp.asarray(flat), d, xp=xp.xp)
    R = xp.to_numpy(R).reshape(d, n + 1)  # feature after feature
    XS = xp.to_numpy(XS).reshape(d, n + 1)
    for f in range(d):
        u, inv = np.unique(flat.reshape(n + 1, d)[:, f], return_inverse=True)
        np.testing.assert_array_equal(R[f], inv)  # dense, order-preserving
        np.testing.assert_array_equal(XS[f, : len(u)], u)  # each rank's value
        assert np.all(np.isposinf(XS[f, len(u) :]))  # past the last rank


@pytest.mark.parametrize("L", range(2, _NETWORK_SORT + 3))
def test_sorting_networks_sort_every_01_input(L):
    for bits in itertools.product((0, 1), repeat=L):
        x = list(bits)
        for i, j in _sorting_network(L):
            assert i < j < L
            x[i], x[j] = min(x[i], x[j]), max(x[i], x[j])
        assert x == sorted(bits), (L, bits)


@pytest.mark.parametrize("L", [2, 3, 5, _NETWORK_SORT, 7, 40])
def test_rank_sort_is_a_stable_argsort(L, xp):
    rng = np.random.default_rng(L)
    ranks = rng.integers(0, 4, size=(3, 2, L)).astype(np.int32)  # many ties
    g = types.SimpleNamespace(xp=xp.xp, n_ranks=5)
    perm, rk = _sort_by_rank(g, xp.asarray(ranks), L)
    want = np.argsort(ranks, axis=-1, kind="stable")
    np.testing.assert_array_equal(xp.to_numpy(perm), want)
    np.testing.assert_array_equal(
        xp.to_numpy(rk), np.take_along_axis(ranks, want, axis=-1)
    )
