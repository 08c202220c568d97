"""k-nearest-neighbour search: exhaustive on tiled distance blocks, and a k-d tree.

Exhaustive search (the default and the GPU path) walks row blocks of queries
whose size follows a memory budget; against each column block of training
points it computes squared distances with the Gram engine
(:func:`xpml.kernels.sq_distances`), keeps the ``k`` smallest per row, and merges
the column blocks' candidates with a second top-k. Everything is array-API.

The array API has no top-k. :func:`topk_smallest` selects with
``numpy.argpartition`` / ``torch.topk`` where the backend has one (behind
:func:`_select_k_positions`) and with a stable ``argsort`` elsewhere; rows whose
k-th value is tied are re-selected by a stable sort, so both paths return the
same answer.

**Tie rule**: neighbours are ordered by (squared distance, training index):
among equal distances the smaller training index comes first, whatever the
tiling (scikit-learn's chunked brute force may keep a larger index at a tie on
the k-th distance).

The k-d tree (:func:`build_kd_tree`, :func:`kd_tree_kneighbors`) is a CPU-only
algorithm written on host NumPy: data from any backend is copied to the host and
the answer copied back. Leaves are built by median splits on the widest
dimension; a query visits leaves in increasing order of the squared distance to
their bounding box (best-bin-first, vectorised over queries) and stops when the
next box is farther than its current k-th neighbour, so the answer is exact and
follows the same tie rule. With ``max_leaves`` it stops after that many leaves
(once it holds ``k`` candidates): the approximate mode.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from xpml._backend import to_numpy
from xpml.kernels import DEFAULT_MEMORY_BUDGET, block_rows_for, sq_distances, sq_norms

__all__ = [
    "topk_smallest",
    "exhaustive_kneighbors",
    "build_kd_tree",
    "kd_tree_kneighbors",
    "recall_at_k",
]

_MIN_BLOCK_ROWS = 64  # below this many query rows per block, the training set is split too


def _device(x):
    return array_api_compat.device(x)


# ------------------------------------------------------------------------ top-k
def _select_k_positions(D, k, /, *, xp):
    """Column positions of *some* ``k`` smallest entries per row (order and ties
    unspecified): a partition where the backend has one, else a stable sort."""
    if k < D.shape[1]:
        if array_api_compat.is_numpy_namespace(xp):
            return np.argpartition(D, k - 1, axis=1)[:, :k]
        if array_api_compat.is_torch_namespace(xp):
            import torch

            return torch.topk(D, k, dim=1, largest=False, sorted=False).indices
    return xp.argsort(D, axis=1, stable=True)[:, :k]


def topk_smallest(D, k, /, *, xp, portable=False):
    """The ``k`` smallest entries of each row of ``D`` and their column positions.

    Rows come ordered by (value, position): among equal values the smaller
    position first. ``portable=True`` uses only a stable ``argsort``; otherwise a
    backend's partition selects and tied rows are repaired, giving the same result.

    Returns
    -------
    values : array (b, k)
    positions : array (b, k), integer
    """
    b, m = D.shape
    if portable or k >= m:
        pos = xp.argsort(D, axis=1, stable=True)[:, :k]
        return xp.take_along_axis(D, pos, axis=1), pos
    pos = _select_k_positions(D, k, xp=xp)
    kth = xp.max(xp.take_along_axis(D, pos, axis=1), axis=1)
    # a row with more than k entries <= its k-th value has a tie at the boundary:
    # the partition may have kept a larger index, so that row is sorted instead
    tied = xp.count_nonzero(D <= kth[:, None], axis=1) > k
    if bool(xp.any(tied)):
        rows = xp.nonzero(tied)[0]
        fixed = xp.argsort(xp.take(D, rows, axis=0), axis=1, stable=True)[:, :k]
        fixed = xp.astype(fixed, pos.dtype)
        rank = xp.cumulative_sum(xp.astype(tied, xp.int64)) - 1
        row_map = xp.where(tied, b + rank, xp.arange(b, dtype=xp.int64, device=_device(D)))
        pos = xp.take(xp.concat([pos, fixed], axis=0), row_map, axis=0)
    pos = xp.sort(pos, axis=1)
    vals = xp.take_along_axis(D, pos, axis=1)
    order = xp.argsort(vals, axis=1, stable=True)
    return xp.take_along_axis(vals, order, axis=1), xp.take_along_axis(pos, order, axis=1)


def _itemsize(X):
    return 4 if "32" in str(X.dtype) else 8


def exhaustive_kneighbors(Q, X, k, /, *, xp, X_norms=None, block_rows=None, block_cols=None,
                          memory_budget=None, portable=False):
    """Exact k nearest training rows of each query by tiled exhaustive search.

    Parameters
    ----------
    Q : array (n_queries, d)
    X : array (n, d)
        Training points; ``k <= n``.
    k : int
    X_norms : array (n,), optional
        ``‖x‖²`` of the training rows (computed when not given).
    block_rows, block_cols : int, optional
        Tile sizes; by default the query rows follow ``memory_budget`` and the
        training set is split only when fewer than 64 query rows would fit.
    portable : bool
        Use the stable-sort top-k only (no backend partition).

    Returns
    -------
    sq_dist : array (n_queries, k)
        Squared Euclidean distances of the selected neighbours, measured
        directly as ``Σ (q − x)²`` (see :func:`_direct_sq_distances`),
        increasing along each row.
    indices : array (n_queries, k), int64
        Training indices, ordered by (distance, index).
    """
    n_q, d = Q.shape
    n = X.shape[0]
    size = _itemsize(X)
    if X_norms is None:
        X_norms = sq_norms(X, xp=xp)
    if block_cols is None:
        budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
        max_cols = int(budget // (size * 3 * _MIN_BLOCK_ROWS))
        block_cols = n if n <= max_cols else max(max_cols, k)
    block_cols = int(block_cols)
    rows = block_rows_for(min(block_cols, n), d, size, kernel="linear",
                          memory_budget=memory_budget, block_rows=block_rows)
    col_starts = list(range(0, n, block_cols))
    out_d, out_i = [], []
    for r0 in range(0, n_q, rows):
        Qb = Q[r0:min(r0 + rows, n_q), :]
        cand_d, cand_i = [], []
        for c0 in col_starts:
            c1 = min(c0 + block_cols, n)
            D = sq_distances(Qb, X[c0:c1, :], xp=xp, Y_norms=X_norms[c0:c1])
            v, p = topk_smallest(D, min(k, c1 - c0), xp=xp, portable=portable)
            cand_d.append(v)
            cand_i.append(xp.astype(p, xp.int64) + c0)
        if len(col_starts) == 1:
            ind = cand_i[0]
        else:
            # candidates are grouped by increasing index and sorted by (value, index)
            # within a group, so a stable sort on values keeps the (value, index) rule
            V, P = xp.concat(cand_d, axis=1), xp.concat(cand_i, axis=1)
            _, p = topk_smallest(V, k, xp=xp, portable=True)
            ind = xp.take_along_axis(P, p, axis=1)
        d2, ind = _refine(Qb, X, ind, xp=xp)
        out_d.append(d2)
        out_i.append(ind)
    if len(out_d) == 1:
        return out_d[0], out_i[0]
    return xp.concat(out_d, axis=0), xp.concat(out_i, axis=0)


def _direct_sq_distances(Q, P, /, *, xp):
    """``‖q − p‖²`` summed over the last axis for ``Q`` (b, d) against ``P`` (b, k, d).

    The Gram form ``‖q‖² + ‖p‖² − 2 q·p`` has an absolute error of about
    ``eps·‖q‖²``: a duplicate point gets a distance of ~1e-8 instead of 0. The
    ``k`` returned neighbours are cheap to measure directly; the k-d tree uses
    this same expression, so both searches report identical distances.
    """
    diff = P - Q[:, None, :]
    return xp.sum(diff * diff, axis=2)


def _refine(Qb, X, ind, /, *, xp):
    """Exact distances of the selected neighbours, re-ordered by (distance, index)."""
    b, k = ind.shape
    ind = xp.sort(ind, axis=1)
    P = xp.reshape(xp.take(X, xp.reshape(ind, (-1,)), axis=0), (b, k, X.shape[1]))
    d2 = _direct_sq_distances(Qb, P, xp=xp)
    order = xp.argsort(d2, axis=1, stable=True)
    return xp.take_along_axis(d2, order, axis=1), xp.take_along_axis(ind, order, axis=1)


# ---------------------------------------------------------------- k-d tree (CPU)
def build_kd_tree(X, leaf_size):
    """A k-d tree's leaves over host NumPy data ``X`` (n, d).

    Median split on the dimension of largest spread until a node holds at most
    ``leaf_size`` points. Returns a dict of NumPy arrays: ``leaf_points``
    (n_leaves, leaf_size_max) training indices padded with ``-1``, and the
    leaves' tight bounding boxes ``lo``, ``hi`` (n_leaves, d).
    """
    X = np.asarray(X)
    n = X.shape[0]
    perm = np.arange(n)
    leaves = []
    stack = [(0, n)]
    while stack:
        s, e = stack.pop()
        if e - s <= leaf_size:
            leaves.append((s, e))
            continue
        idx = perm[s:e]
        pts = X[idx]
        spread = pts.max(axis=0) - pts.min(axis=0)
        dim = int(np.argmax(spread))
        if spread[dim] == 0:  # identical points cannot be split
            leaves.append((s, e))
            continue
        mid = (e - s) // 2
        perm[s:e] = idx[np.argpartition(pts[:, dim], mid, kind="introselect")]
        stack.append((s + mid, e))
        stack.append((s, s + mid))
    leaves.sort()
    width = max(e - s for s, e in leaves)
    leaf_points = np.full((len(leaves), width), -1, dtype=np.int64)
    lo = np.empty((len(leaves), X.shape[1]), dtype=X.dtype)
    hi = np.empty_like(lo)
    for j, (s, e) in enumerate(leaves):
        ids = perm[s:e]
        leaf_points[j, : e - s] = ids
        lo[j] = X[ids].min(axis=0)
        hi[j] = X[ids].max(axis=0)
    return {"leaf_points": leaf_points, "lo": lo, "hi": hi}


def kd_tree_kneighbors(tree, X, Q, k, *, max_leaves=None, chunk_elements=2**22):
    """k nearest neighbours of host queries ``Q`` in host data ``X`` with a tree
    from :func:`build_kd_tree`.

    Exact when ``max_leaves`` is None; otherwise each query visits at most
    ``max_leaves`` leaves (more only while it holds fewer than ``k`` candidates).

    Returns
    -------
    sq_dist : ndarray (n_queries, k)
    indices : ndarray (n_queries, k), int64, ordered by (distance, index)
    """
    X, Q = np.asarray(X), np.asarray(Q)
    leaf_points, lo, hi = (np.asarray(tree[key]) for key in ("leaf_points", "lo", "hi"))
    n_leaves, width = leaf_points.shape
    n, d = X.shape
    n_q = Q.shape[0]
    sentinel = n  # index of "no neighbour yet" (sorts after every real index)
    out_d = np.empty((n_q, k), dtype=X.dtype)
    out_i = np.empty((n_q, k), dtype=np.int64)
    chunk = max(1, chunk_elements // max(1, n_leaves * d))
    limit = n_leaves if max_leaves is None else min(n_leaves, int(max_leaves))
    for q0 in range(0, n_q, chunk):
        Qc = Q[q0:q0 + chunk]
        c = Qc.shape[0]
        gap = np.maximum(lo[None] - Qc[:, None], 0) + np.maximum(Qc[:, None] - hi[None], 0)
        bound = np.einsum("clj,clj->cl", gap, gap)
        order = np.argsort(bound, axis=1, kind="stable")
        bound = np.take_along_axis(bound, order, axis=1)
        best_d = np.full((c, k), np.inf, dtype=X.dtype)
        best_i = np.full((c, k), sentinel, dtype=np.int64)
        active = np.arange(c)
        for r in range(n_leaves):
            if r >= limit:  # approximate mode: only queries still short of k continue
                active = active[best_i[active, -1] == sentinel]
            # a box no nearer than the k-th neighbour cannot improve it (margin for
            # rounding, so an equal-distance point with a smaller index is not lost)
            active = active[bound[active, r] * (1.0 - 1e-12) <= best_d[active, -1]]
            if active.size == 0:
                break
            ids = leaf_points[order[active, r]]
            dist = _direct_sq_distances(Qc[active], X[np.maximum(ids, 0)], xp=np)
            dist[ids < 0] = np.inf
            ids = np.where(ids < 0, sentinel, ids)
            vals = np.concatenate([best_d[active], dist], axis=1)
            cand = np.concatenate([best_i[active], ids], axis=1)
            o = np.lexsort((cand, vals), axis=-1)[:, :k]
            best_d[active] = np.take_along_axis(vals, o, axis=1)
            best_i[active] = np.take_along_axis(cand, o, axis=1)
        out_d[q0:q0 + c] = best_d
        out_i[q0:q0 + c] = best_i
    return out_d, out_i


def recall_at_k(approx_indices, exact_indices):
    """Mean fraction of the exact k neighbours that an approximate search found.

    Examples
    --------
    >>> import numpy as np
    >>> recall_at_k(np.array([[0, 1], [2, 5]]), np.array([[0, 1], [2, 3]]))
    0.75
    """
    a, e = to_numpy(approx_indices), to_numpy(exact_indices)
    hits = (a[:, :, None] == e[:, None, :]).any(axis=2).sum()
    return float(hits / e.size)
