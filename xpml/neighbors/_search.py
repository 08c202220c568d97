"""k-nearest-neighbour search: exhaustive on tiled distance blocks, and a k-d tree.

Exhaustive search (the default and the GPU path) walks row blocks of queries
whose size follows a memory budget; against each column block of training
points it computes the ranking score ``‖x‖² − 2q·x`` (the squared distance less
``‖q‖²``) as one product of the Gram engine's factors
(:func:`xpml.kernels.query_factor`, :func:`xpml.kernels.point_factor`), keeps
the ``k`` smallest per row, and merges
the column blocks' candidates with a second top-k. Everything is array-API.
The distances of the ``k`` neighbours returned are then measured directly,
``Σ (q − x)²`` (the Gram form loses about ``eps·‖x‖²``: duplicates would sit at
~1e-8 instead of 0). On NumPy the row blocks are cache-sized and run on a
thread pool (NumPy releases the GIL).

The array API has no top-k. :func:`topk_smallest` selects by a portable
threshold filter (group minima bound the k-th value; a few passes over the
block, much faster than ``numpy.argpartition``), by ``torch.topk`` on torch
(behind :func:`_partition_positions`, rows tied at the k-th value repaired by a
stable sort), or by a stable ``argsort`` (the reference); all return the same
answer.

**Tie rule**: neighbours are ordered by (squared distance, training index):
among equal distances the smaller training index comes first, whatever the
tiling (scikit-learn's chunked brute force may keep a larger index at a tie on
the k-th distance).

The k-d tree (:func:`build_kd_tree`, :func:`kd_tree_kneighbors`) is a CPU-only
algorithm written on host NumPy: data from any backend is copied to the host and
the answer copied back. Leaves are built by median splits on the widest
dimension. The exact search is vectorised over all queries, with a fixed
number of NumPy steps per tree level and per candidate leaf, none per query:
every query's k-th rank measure within its home leaf bounds its search; the
leaves whose box lies within that bound are found by descending the tree for
all queries together, one level per step; each such leaf is measured against
all the queries that need it in one small block, the points within the bound
kept, and the k smallest by (rank, index) taken, so the answer is exact and
follows the same tie rule. With ``max_leaves`` each query visits leaves
best-bin-first and stops after that many (once it holds ``k`` candidates): the
approximate mode.

On NumPy the exact search has a fast path (``"neighbors.kd_tree_exact"``):
SciPy's compiled ``cKDTree`` proposes each query's ``k + 1`` nearest; where the
last is clearly farther than the k-th, the first ``k`` are measured by the same
direct formula and ordered by (rank, index); queries tied (or nearly) at the
k-th distance get ``4k + 1``, then ``16k + 1`` proposals, and past that the
vectorised search above. The answer is the same to the bit.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from xpml._backend import to_numpy
from xpml.kernels import (
    _l1_distances,
    block_rows_for,
    point_factor,
    query_factor,
    sq_norms,
)
from xpml.linalg import host_threads, map_row_blocks, one_blas_thread
from xpml.utils._array_api import (
    device,
    dispatch,
    eps,
    fast_path,
    is_numpy_namespace,
    is_torch_namespace,
    itemsize,
    memory_budget,
    portable,
)
from xpml.utils._array_api import memory_budget as memory_budget_bytes

__all__ = [
    "topk_smallest",
    "exhaustive_kneighbors",
    "exhaustive_radius",
    "build_kd_tree",
    "kd_tree_kneighbors",
    "kd_search_cache",
    "recall_at_k",
]

_MIN_BLOCK_ROWS = (
    64  # below this many query rows per block, the training set is split too
)


# ------------------------------------------------------------------------ top-k
def _partition_positions(D, k, /, *, xp):
    """Column positions of *some* ``k`` smallest entries per row (order and ties
    unspecified) with the backend's partition; None where it has none."""
    if is_numpy_namespace(xp):
        return np.argpartition(D, k - 1, axis=1)[:, :k]
    if is_torch_namespace(xp):
        import torch

        return torch.topk(D, k, dim=1, largest=False, sorted=False).indices
    return None


def _topk_by_partition(D, k, /, *, xp):
    """Backend partition, then rows tied at the k-th value re-selected by a
    stable sort, then the k sorted by (value, position)."""
    b = D.shape[0]
    pos = _partition_positions(D, k, xp=xp)
    if pos is None:
        return _topk_by_sort(D, k, xp=xp)
    kth = xp.max(xp.take_along_axis(D, pos, axis=1), axis=1)
    # a row with more than k entries <= its k-th value has a tie at the boundary:
    # the partition may have kept a larger position, so that row is sorted instead
    tied = xp.count_nonzero(D <= kth[:, None], axis=1) > k
    if bool(xp.any(tied)):
        rows = xp.nonzero(tied)[0]
        fixed = xp.astype(
            _topk_by_sort(xp.take(D, rows, axis=0), k, xp=xp)[1], pos.dtype
        )
        rank = xp.cumulative_sum(xp.astype(tied, xp.int64)) - 1
        row_map = xp.where(
            tied, b + rank, xp.arange(b, dtype=xp.int64, device=device(D))
        )
        pos = xp.take(xp.concat([pos, fixed], axis=0), row_map, axis=0)
    pos = xp.sort(pos, axis=1)
    vals = xp.take_along_axis(D, pos, axis=1)
    order = xp.argsort(vals, axis=1, stable=True)
    return xp.take_along_axis(vals, order, axis=1), xp.take_along_axis(
        pos, order, axis=1
    )


def _topk_by_sort(D, k, /, *, xp):
    pos = xp.argsort(D, axis=1, stable=True)[:, :k]
    return xp.take_along_axis(D, pos, axis=1), pos


def _topk_by_threshold(D, k, /, *, xp):
    """Portable selection in about one pass over ``D``.

    Each row is cut into groups of ``s`` columns (the last ``m mod s`` columns
    form one more group). The k-th smallest group minimum ``τ`` bounds the k-th
    smallest entry from above (k distinct entries are ``<= τ``), so only groups
    whose minimum is ``<= τ`` hold candidates — usually about k groups. Their
    entries ``<= τ`` are sorted by (row, value, position) and the first k of
    each row kept.
    """
    b, m = D.shape
    dev = device(D)
    s = max(1, min(256, m // max(2 * k, 1)))
    g = m // s
    rem = m - g * s
    mins = xp.min(xp.reshape(D[:, : g * s], (b, g, s)), axis=2)
    if rem:
        mins = xp.concat([mins, xp.min(D[:, g * s :], axis=1, keepdims=True)], axis=1)
    tau = xp.sort(mins, axis=1)[:, k - 1]
    # candidate groups: a (row, group) pair per hit, expanded to its s columns
    rows_g, grp = xp.nonzero(mins[:, :g] <= tau[:, None])
    offs = xp.arange(s, dtype=grp.dtype, device=dev)
    cols = xp.reshape(grp[:, None] * s + offs[None, :], (-1,))
    rows = xp.reshape(xp.broadcast_to(rows_g[:, None], (rows_g.shape[0], s)), (-1,))
    if rem:  # the short last group is always scanned
        tail = xp.arange(g * s, m, dtype=grp.dtype, device=dev)
        rows = xp.concat(
            [
                rows,
                xp.reshape(
                    xp.broadcast_to(
                        xp.arange(b, dtype=grp.dtype, device=dev)[:, None], (b, rem)
                    ),
                    (-1,),
                ),
            ]
        )
        cols = xp.concat(
            [cols, xp.reshape(xp.broadcast_to(tail[None, :], (b, rem)), (-1,))]
        )
    vals = xp.take(xp.reshape(D, (-1,)), rows * m + cols)
    keep = xp.nonzero(vals <= xp.take(tau, rows))[0]
    rows, cols, vals = xp.take(rows, keep), xp.take(cols, keep), xp.take(vals, keep)
    order = xp.argsort(cols, stable=True)
    order = xp.take(order, xp.argsort(xp.take(vals, order), stable=True))
    order = xp.take(order, xp.argsort(xp.take(rows, order), stable=True))
    start = xp.searchsorted(
        xp.take(rows, order), xp.arange(b, dtype=rows.dtype, device=dev)
    )
    first_k = start[:, None] + xp.arange(k, dtype=start.dtype, device=dev)[None, :]
    pick = xp.take(order, xp.reshape(first_k, (-1,)))
    return (
        xp.reshape(xp.take(vals, pick), (b, k)),
        xp.reshape(xp.take(cols, pick), (b, k)),
    )


TOPK_METHODS = ("auto", "threshold", "partition", "sort")


def topk_smallest(D, k, /, *, xp, method="auto"):
    """The ``k`` smallest entries of each row of ``D`` and their column positions.

    Rows come ordered by (value, position): among equal values the smaller
    position first. Every method gives the same answer:

    * ``"sort"``: a stable ``argsort`` of the whole row (the reference);
    * ``"threshold"``: group minima bound the k-th value, then only the few
      candidates below the bound are sorted (array-API, a few passes);
    * ``"partition"``: ``numpy.argpartition`` / ``torch.topk``, rows tied at the
      k-th value repaired by the stable sort (other backends: ``"sort"``);
    * ``"auto"``: "partition" on torch (its top-k is fast on CPU and GPU),
      "threshold" elsewhere, "sort" for short rows.

    Returns
    -------
    values : array (b, k)
    positions : array (b, k), integer
    """
    m = D.shape[1]
    if method == "auto":
        if k >= m or m < 16 * k:
            method = "sort"
        else:
            method = "partition" if is_torch_namespace(xp) else "threshold"
    if method == "sort" or k >= m:
        return _topk_by_sort(D, k, xp=xp)
    if method == "threshold":
        return _topk_by_threshold(D, k, xp=xp)
    if method == "partition":
        return _topk_by_partition(D, k, xp=xp)
    raise ValueError(f"method must be one of {TOPK_METHODS}; got {method!r}")


# ---------------------------------------------------------------- metrics
# A search ranks by a *rank measure* ``r`` monotone in the metric's distance:
# ``p`` a number: ``Σ_j |q_j − x_j|^p`` (``max_j |q_j − x_j|`` for p = ∞; for
# p = 2 the squared Euclidean distance); ``p = "cosine"``: ``−q·x`` on unit rows
# (the caller normalises), measured for the k returned as ``1 − q·x``.


def _rank_block(Qb, Xc, p, /, *, xp):
    """Rank measures (b, m) of a query block against training rows ``Xc`` for
    the non-Gram metrics, accumulated one feature at a time: a few (b, m)
    arrays of workspace instead of the (b, m, d) difference tensor."""
    if p == 1:
        return _l1_distances(Qb, Xc, xp=xp)
    D = None
    for j in range(Qb.shape[1]):
        t = xp.abs(Qb[:, j : j + 1] - Xc[:, j][None, :])
        if p == math.inf:
            D = t if D is None else xp.maximum(D, t)
        else:
            t = t**p
            D = t if D is None else D + t
    return D


def _direct_rank(Q, P, p, /, *, xp):
    """Rank measures of ``Q`` (b, d) against ``P`` (b, k, d), measured directly."""
    if p == 2:
        return _direct_sq_distances(Q, P, xp=xp)
    if p == "cosine":
        cos = xp.sum(P * Q[:, None, :], axis=2)
        return xp.clip(1.0 - cos, 0.0, 2.0)
    diff = xp.abs(P - Q[:, None, :])
    if p == math.inf:
        return xp.max(diff, axis=2)
    return xp.sum(diff if p == 1 else diff**p, axis=2)


_NUMPY_CHUNK = (256, 1024)
"""NumPy: query rows and training columns of one distance chunk of the
exhaustive search (2 MiB in float64, the size of a core's L2 cache; measured
at n = 50k, d = 20: the product runs about 3x faster per entry than into
64 MiB blocks, and the selection reads the chunk from cache), never above the
memory budget's share of a thread."""


@dataclasses.dataclass
class _Tiling:
    """Query rows and training columns per distance block."""

    rows: int
    cols: int


def _tiling(n_q, X, k, /, *, xp, block_rows=None, block_cols=None, budget=None):
    """Block sizes: the query rows follow the memory budget (per host thread on
    NumPy, where blocks run on a thread pool), and the training set is split only
    when fewer than ``_MIN_BLOCK_ROWS`` query rows would fit. NumPy's default:
    cache-sized chunks (``_NUMPY_CHUNK``) when they fit the budget."""
    n, d = X.shape
    size = itemsize(X.dtype, xp)
    per_thread = memory_budget(budget) / host_threads(xp)
    rows, cols = _NUMPY_CHUNK
    numpy_chunk = budget is None and is_numpy_namespace(xp)
    if numpy_chunk and 3 * size * rows * cols <= per_thread:
        return _Tiling(
            rows if block_rows is None else int(block_rows),
            cols if block_cols is None else int(block_cols),
        )
    if block_cols is None:
        max_cols = int(per_thread // (size * 3 * _MIN_BLOCK_ROWS))
        block_cols = n if n <= max_cols else max(max_cols, k)
    cols = int(block_cols)
    rows = block_rows_for(
        min(cols, n),
        d,
        size,
        kernel="linear",
        memory_budget=per_thread,
        block_rows=block_rows,
    )
    return _Tiling(rows, cols)


def _score_block(Qa, Xc, Xfc, p, /, *, xp):
    """Ranking scores of a query block against training rows ``Xc`` (their
    factors ``Xfc``): one product for the Gram metrics (``‖x‖² − 2q·x``,
    ``−q·x``), else :func:`_rank_block`."""
    if p == 2 or p == "cosine":
        return Qa @ Xfc.T
    return _rank_block(Qa, Xc, p, xp=xp)


def _score_scale(Qb, p, x_scale, /, *, xp):
    """Per query, the size (b,) that the ranking scores' rounding scales with
    besides the score itself: ``‖q‖² + max ‖x‖²`` for the Gram form, 1 for the
    cosine score, 0 for the rank blocks (sums of non-negative terms)."""
    if p == 2:
        return sq_norms(Qb, xp=xp) + x_scale
    one = xp.ones(Qb.shape[0], dtype=Qb.dtype, device=device(Qb))
    return one if p == "cosine" else 0.0 * one


def _margin(tau, scale, Xf, /, *, xp):
    """Rounding allowance on ranking scores near ``tau`` (b,): twice a bound on
    |score − (direct rank − ‖q‖²)|, about ``5(d+2)·eps·(|τ| + scale)`` (a sum
    of d + 2 products in the score, d squares in the direct rank)."""
    d = Xf.shape[1]
    return (10 * (d + 2) * eps(Xf.dtype, xp)) * (xp.abs(tau) + scale)


def _some_smallest(D, k, /, *, xp, topk):
    """Values and positions (b, k) of *some* k smallest entries per row (order
    and ties unspecified): with ``topk="auto"`` the backend's partition where
    it has one (no repair of ties: the caller takes every entry near the
    k-th), else :func:`topk_smallest`."""
    pos = _partition_positions(D, k, xp=xp) if topk == "auto" else None
    if pos is None:
        return topk_smallest(D, k, xp=xp, method=topk)
    return xp.take_along_axis(D, pos, axis=1), pos


def _block_candidates(D, k, scale, Xf, /, *, xp, topk):
    """Candidates of one column block of scores ``D`` (b, m): its entries
    within the rounding margin of the row's k-th smallest, as (values,
    positions) (b, w), unordered, padded with +inf (one read of ``w``)."""
    kc = min(k, D.shape[1])
    v, pos = _some_smallest(D, kc, xp=xp, topk=topk)
    if kc < k:  # fewer columns than k: all of them
        return v, pos
    kth = xp.max(v, axis=1)
    thr = kth + _margin(kth, scale, Xf, xp=xp)
    w = int(xp.max(xp.count_nonzero(D <= thr[:, None], axis=1)))
    if w > kc:  # near ties at the k-th score (duplicates): all of them
        v, pos = _some_smallest(D, w, xp=xp, topk=topk)
        v = xp.where(v <= thr[:, None], v, xp.full_like(v, math.inf))
    # with w == k, the k entries within the margin are the k smallest
    return v, pos


@portable("neighbors.exhaustive_block")
def _search_block(Qb, X, Xf, k, /, *, xp, tiling, topk="auto", p=2, x_scale=0.0):
    """The k nearest training rows of a block of queries.

    Each column block's ranking scores give the entries within a rounding
    margin (:func:`_margin`) of its k-th smallest; across blocks, those within
    the margin of the overall k-th are measured directly and the k smallest
    by (rank, index) kept. The margin holds every point whose direct rank is
    at most the k-th's, so the answer follows the direct ranks whatever the
    scores' rounding (which can differ between exact duplicates by their
    position in the product)."""
    n = X.shape[0]
    Qa = _query_side(Qb, p, xp=xp)
    scale = _score_scale(Qb, p, x_scale, xp=xp)
    cand_v, cand_i = [], []
    for c0 in range(0, n, tiling.cols):
        c1 = min(c0 + tiling.cols, n)
        D = _score_block(Qa, X[c0:c1, :], Xf[c0:c1, :], p, xp=xp)
        v, pos = _block_candidates(D, k, scale, Xf, xp=xp, topk=topk)
        cand_v.append(v)
        cand_i.append(xp.astype(pos, xp.int64) + c0)
    V, ind = xp.concat(cand_v, axis=1), xp.concat(cand_i, axis=1)
    kth = xp.sort(V, axis=1)[:, k - 1]
    keep = V <= (kth + _margin(kth, scale, Xf, xp=xp))[:, None]
    return _refine(Qb, X, ind, xp=xp, p=p, keep=keep, k=k)


_GROUP = 16
"""Columns per group whose minimum screens a NumPy chunk against the bound."""


def _chunk_hits(DT, thr):
    """(rows, columns, values) of the entries at most ``thr`` (b,) of a chunk
    of scores laid out training-major, ``DT`` (w, b): groups of ``_GROUP``
    consecutive training rows screened by their minimum first (a reduction
    over the middle axis, which NumPy runs as contiguous elementwise minima)."""
    w, b = DT.shape
    if w % _GROUP:
        c, r = np.divmod(np.flatnonzero(DT <= thr), b)
        return r, c, DT[c, r]
    G = DT.reshape(w // _GROUP, _GROUP, b)
    # flat positions: NumPy's 2-d nonzero costs several times flatnonzero
    g, rg = np.divmod(np.flatnonzero(G.min(axis=1) <= thr), b)
    sub = G[g, :, rg]  # (hits, _GROUP)
    i, c = np.divmod(np.flatnonzero(sub <= thr[rg, None]), _GROUP)
    return rg[i], g[i] * _GROUP + c, sub[i, c]


def _first_bound(DT, k, scale, Xf):
    """A first bound (b,) on each row's k-th smallest score from a chunk ``DT``
    (w, b): the k-th smallest of its group minima (k groups each hold an
    entry at most that), plus the margin; +inf with fewer than k groups."""
    w, b = DT.shape
    if w % _GROUP or w // _GROUP < k:
        return np.full(b, np.inf, dtype=DT.dtype)
    mins = DT.reshape(w // _GROUP, _GROUP, b).min(axis=1)
    kth = np.partition(mins, k - 1, axis=0)[k - 1]
    return kth + _margin(kth, scale, Xf, xp=np)


def _first_k_rows(rows, keys, k, b):
    """Positions of each of ``b`` rows' first ``k`` flat entries in the order
    of ``keys`` (a tuple for ``np.lexsort``, least significant first; every
    row holds at least k entries): (b, k)."""
    order = np.lexsort((*keys, rows))
    start = np.searchsorted(rows[order], np.arange(b))
    return order[start[:, None] + np.arange(k)[None, :]]


def _prune(parts, k, b, scale, Xf):
    """The flat candidates ``parts`` merged, the row's bound recomputed from
    its k-th smallest score and the candidates beyond it dropped."""
    R, C, V = (np.concatenate([part[i] for part in parts]) for i in range(3))
    kth = V[_first_k_rows(R, (V,), k, b)[:, -1]]
    thr = kth + _margin(kth, scale, Xf, xp=np)
    keep = V <= thr[R]
    return (R[keep], C[keep], V[keep]), thr


def _block_example():
    """NumPy inputs for the exhaustive block's agreement test: duplicates
    (3k copies of a query), grid ties, several chunks and a short last one."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(150, 4)), np.repeat([[0.5] * 4], 15, 0)])
    X = np.concatenate([X, rng.integers(0, 3, size=(70, 4)).astype(float)])
    Q = np.concatenate([rng.normal(size=(20, 4)), np.full((3, 4), 0.5)])
    Q = np.concatenate([Q, rng.integers(0, 3, size=(9, 4)).astype(float)])
    Xf = point_factor(X, xp=np)
    kw = {"xp": None, "tiling": _Tiling(8, 48), "x_scale": float(Xf[:, -1].max())}
    return (Q, X, Xf, 5), kw


@fast_path("neighbors.exhaustive_block", "numpy", example=_block_example)
def _search_block_numpy(Qb, X, Xf, k, /, *, xp, tiling, topk="auto", p=2, x_scale=0.0):
    """The same answer from cache-sized chunks of ``tiling.cols`` columns:
    each row keeps a bound (its k-th smallest score so far, plus the margin;
    from the first chunk's group minima, then recomputed from the candidates
    after chunks 1, 2, 4, 8, ...), a chunk's entries within it are screened by group
    minima, and the candidates are measured directly at the end."""
    if p != 2 and p != "cosine":  # the rank blocks dominate: no gain here
        return _search_block(Qb, X, Xf, k, xp=xp, tiling=tiling, topk=topk, p=p)
    n, b = X.shape[0], Qb.shape[0]
    Qa = _query_side(Qb, p, xp=np)
    scale = _score_scale(Qb, p, x_scale, xp=np)
    m = max(k, tiling.cols - tiling.cols % _GROUP)
    buf = np.empty((min(m, n), b), dtype=X.dtype)
    parts, thr, update = [], None, 1
    for j, c0 in enumerate(range(0, n, m), start=1):
        c1 = min(c0 + m, n)
        out = buf if c1 - c0 == buf.shape[0] else None
        D = np.matmul(Xf[c0:c1], Qa.T, out=out)  # training-major (w, b)
        if thr is None:
            thr = _first_bound(D, k, scale, Xf)
        r, c, v = _chunk_hits(D, thr)
        parts.append((r, c + c0, v))
        if j == update:
            merged, thr = _prune(parts, k, b, scale, Xf)
            parts, update = [merged], 2 * update
    (R, C, _), _ = _prune(parts, k, b, scale, Xf)
    rank = _direct_rank(np.take(Qb, R, axis=0), X[C][:, None, :], p, xp=np)[:, 0]
    pick = _first_k_rows(R, (C, rank), k, b)
    return rank[pick], C[pick]


def _query_side(Qb, p, /, *, xp):
    if p == 2:
        return query_factor(Qb, xp=xp)
    return -Qb if p == "cosine" else Qb


def _point_side(X, p, /, *, xp, X_norms=None):
    if p == 2:
        return point_factor(X, xp=xp, Z_norms=X_norms)
    return X


def _map_blocks(fn, n, rows, /, *, xp):
    """:func:`xpml.linalg.map_row_blocks`, or the blocks one after the other
    when BLAS is limited to one thread (``threadpoolctl.threadpool_limits(1)``:
    the caller asks for one core), as the k-means assignment does."""
    if host_threads(xp) > 1 and n > rows and one_blas_thread(xp):
        return [fn(r0, min(r0 + rows, n)) for r0 in range(0, n, rows)]
    return map_row_blocks(fn, n, rows, xp=xp)


def exhaustive_kneighbors(
    Q,
    X,
    k,
    /,
    *,
    xp,
    X_norms=None,
    block_rows=None,
    block_cols=None,
    memory_budget=None,
    topk="auto",
    p=2,
):
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
    memory_budget : float, optional
        Bytes of distance-block workspace. Default:
        :func:`xpml.utils._array_api.memory_budget`; on NumPy cache-sized
        chunks (``_NUMPY_CHUNK``), the row blocks spread over a thread pool
        (:func:`xpml.linalg.map_row_blocks`) unless BLAS is limited to one
        thread.
    topk : {"auto", "threshold", "partition", "sort"}
        The per-block selection (see :func:`topk_smallest`); all give the same
        neighbours.
    p : float or "cosine", default=2
        The metric (see the rank measures above): Minkowski ``p`` (``math.inf``
        for Chebyshev), or "cosine" with unit-norm rows ``Q`` and ``X``.

    Returns
    -------
    rank : array (n_queries, k)
        Rank measures of the selected neighbours (for p = 2 the squared
        Euclidean distances), measured directly as ``Σ (q − x)²`` (see
        :func:`_direct_sq_distances`), increasing along each row.
    indices : array (n_queries, k), int64
        Training indices, ordered by (distance, index).
    """
    n_q = Q.shape[0]
    tiling = _tiling(
        n_q,
        X,
        k,
        xp=xp,
        block_rows=block_rows,
        block_cols=block_cols,
        budget=memory_budget,
    )
    # rank by ‖x‖² − 2q·x (the distance less ‖q‖²): one product per block, no clamp;
    # the candidates are then measured exactly by _refine
    Xf = _point_side(X, p, xp=xp, X_norms=X_norms)
    x_scale = xp.max(Xf[:, -1]) if p == 2 else 0.0
    search = dispatch("neighbors.exhaustive_block", xp)

    def block(r0, r1):
        return search(
            Q[r0:r1, :], X, Xf, k, xp=xp, tiling=tiling, topk=topk, p=p, x_scale=x_scale
        )

    results = _map_blocks(block, n_q, tiling.rows, xp=xp)
    if len(results) == 1:
        return results[0]
    return (
        xp.concat([r[0] for r in results], axis=0),
        xp.concat([r[1] for r in results], axis=0),
    )


def _radius_block(Qb, X, Xf, thr, p, /, *, xp):
    """(rows, cols, rank) of the pairs of a query block with rank measure
    ``<= thr`` (a float, or an array (b,) of per-query thresholds): candidates
    by the block scores with a rounding margin, then measured directly (so the
    test is exact)."""
    per_query = not isinstance(thr, float)
    t = thr[:, None] if per_query else thr
    D = _score_block(_query_side(Qb, p, xp=xp), X, Xf, p, xp=xp)
    if p == 2:  # the score lacks ‖q‖², and loses about eps·(‖q‖² + ‖x‖²)
        qn = sq_norms(Qb, xp=xp)[:, None]
        D = D + qn
        slack = 64 * eps(X.dtype, xp) * (qn + xp.max(Xf[:, -1]))
    else:
        if p == "cosine":  # the score is −q·x: the distance less 1
            D = D + 1.0
        slack = 64 * eps(X.dtype, xp) * (1.0 + (xp.abs(t) if per_query else abs(t)))
    rows, cols = xp.nonzero(D <= t + slack)
    P = xp.take(X, cols, axis=0)[:, None, :]
    r = _direct_rank(xp.take(Qb, rows, axis=0), P, p, xp=xp)[:, 0]
    keep = xp.nonzero(r <= (xp.take(thr, rows) if per_query else thr))[0]
    return xp.take(rows, keep), xp.take(cols, keep), xp.take(r, keep)


def exhaustive_radius(Q, X, thr, /, *, xp, p=2, memory_budget=None):
    """Every training row within rank measure ``thr`` of each query (for p = 2
    ``thr`` is the squared radius; "cosine": ``1 − q·x <= thr`` on unit rows);
    ``thr`` may be an array (n_queries,) of per-query thresholds.

    Returns
    -------
    rows, cols : arrays (m,), int64
        Query and training indices of the pairs, by increasing (row, col).
    rank : array (m,)
        Their rank measures, measured directly.
    """
    n_q, n = Q.shape[0], X.shape[0]
    rows_per_block = block_rows_for(
        n,
        X.shape[1],
        itemsize(X.dtype, xp),
        kernel="linear",
        memory_budget=memory_budget_bytes(memory_budget) / 2,
    )
    Xf = _point_side(X, p, xp=xp)
    thr = float(thr) if isinstance(thr, (int, float)) else thr
    parts = []
    for r0 in range(0, n_q, rows_per_block):
        r1 = min(r0 + rows_per_block, n_q)
        t = thr if isinstance(thr, float) else thr[r0:r1]
        rows, cols, r = _radius_block(Q[r0:r1, :], X, Xf, t, p, xp=xp)
        parts.append((xp.astype(rows, xp.int64) + r0, xp.astype(cols, xp.int64), r))
    return tuple(xp.concat([part[i] for part in parts]) for i in range(3))


def _direct_sq_distances(Q, P, /, *, xp):
    """``‖q − p‖²`` summed over the last axis for ``Q`` (b, d) against ``P`` (b, k, d).

    The Gram form ``‖q‖² + ‖p‖² − 2 q·p`` has an absolute error of about
    ``eps·‖q‖²``: a duplicate point gets a distance of ~1e-8 instead of 0. The
    ``k`` returned neighbours are cheap to measure directly; the k-d tree uses
    this same expression, so both searches report identical distances.
    """
    diff = P - Q[:, None, :]
    return xp.sum(diff * diff, axis=2)


def _refine(Qb, X, ind, /, *, xp, p=2, keep=None, k=None):
    """Exact rank measures of candidate neighbours ``ind`` (b, w), ordered by
    (rank, index); with ``keep`` (b, w) only the kept candidates count, and
    the first ``k`` (default w) are returned."""
    b, w = ind.shape
    order = xp.argsort(ind, axis=1, stable=True)
    ind = xp.take_along_axis(ind, order, axis=1)
    P = xp.reshape(xp.take(X, xp.reshape(ind, (-1,)), axis=0), (b, w, X.shape[1]))
    d2 = _direct_rank(Qb, P, p, xp=xp)
    if keep is not None:
        inf = xp.full_like(d2, math.inf)
        d2 = xp.where(xp.take_along_axis(keep, order, axis=1), d2, inf)
    order = xp.argsort(d2, axis=1, stable=True)[:, : (w if k is None else k)]
    return xp.take_along_axis(d2, order, axis=1), xp.take_along_axis(ind, order, axis=1)


# ---------------------------------------------------------------- k-d tree (CPU)
def _split(X, perm, s, e):
    """Median split of ``perm[s:e]`` (in place) on the dimension of largest
    spread: ``(dim, value)``, or None when the points cannot be split."""
    idx = perm[s:e]
    pts = X[idx]
    spread = pts.max(axis=0) - pts.min(axis=0)
    dim = int(np.argmax(spread))
    if spread[dim] == 0:  # identical points cannot be split
        return None
    mid = (e - s) // 2
    perm[s:e] = idx[np.argpartition(pts[:, dim], mid, kind="introselect")]
    return dim, float(X[perm[s + mid], dim])


def _leaf_arrays(X, perm, leaves):
    """Padded point indices and tight bounding boxes of the leaves."""
    width = max(e - s for s, e in leaves)
    leaf_points = np.full((len(leaves), width), -1, dtype=np.int64)
    lo = np.empty((len(leaves), X.shape[1]), dtype=X.dtype)
    hi = np.empty_like(lo)
    for j, (s, e) in enumerate(leaves):
        ids = perm[s:e]
        leaf_points[j, : e - s] = ids
        lo[j] = X[ids].min(axis=0)
        hi[j] = X[ids].max(axis=0)
    return leaf_points, lo, hi


def build_kd_tree(X, leaf_size):
    """A k-d tree over host NumPy data ``X`` (n, d).

    Median split on the dimension of largest spread until a node holds at most
    ``leaf_size`` points. Returns a dict of NumPy arrays: ``leaf_points``
    (n_leaves, leaf_size_max) training indices padded with ``-1``, the leaves'
    tight bounding boxes ``lo``, ``hi`` (n_leaves, d), in tree order (so
    neighbouring leaves are near in space), every node's tight box
    ``node_lo``, ``node_hi`` (n_nodes, d), and the splits: per node
    ``split_dim``, ``split_value``, ``child`` (n_nodes, 2) and ``leaf`` (the
    leaf's number, ``-1`` for an inner node); node 0 is the root.
    """
    X = np.asarray(X)
    perm = np.arange(X.shape[0])
    nodes = []  # (s, e, dim, value, children)
    stack = [(0, X.shape[0], -1)]  # (s, e, parent slot)
    while stack:
        s, e, parent = stack.pop()
        me = len(nodes)
        if parent >= 0:
            nodes[parent // 2][4][parent % 2] = me
        cut = _split(X, perm, s, e) if e - s > leaf_size else None
        nodes.append((s, e, *(cut or (-1, 0.0)), [-1, -1]))
        if cut is not None:
            mid = s + (e - s) // 2
            stack += [(mid, e, 2 * me + 1), (s, mid, 2 * me)]
    leaves = sorted((s, e) for s, e, dim, _, _ in nodes if dim < 0)
    number = {span: j for j, span in enumerate(leaves)}
    leaf_points, lo, hi = _leaf_arrays(X, perm, leaves)
    node_lo = np.empty((len(nodes), X.shape[1]), dtype=X.dtype)
    node_hi = np.empty_like(node_lo)
    for j, (s, e, *_) in enumerate(nodes):
        pts = X[perm[s:e]]
        node_lo[j], node_hi[j] = pts.min(axis=0), pts.max(axis=0)
    return {
        "leaf_points": leaf_points,
        "lo": lo,
        "hi": hi,
        "node_lo": node_lo,
        "node_hi": node_hi,
        "split_dim": np.array([nd[2] for nd in nodes], dtype=np.int64),
        "split_value": np.array([nd[3] for nd in nodes], dtype=X.dtype),
        "child": np.array([nd[4] for nd in nodes], dtype=np.int64).reshape(-1, 2),
        "leaf": np.array([number.get(nd[:2], -1) for nd in nodes], dtype=np.int64),
    }


def _home_leaves(tree, Q):
    """The leaf each query falls in, descending all queries level by level."""
    node = np.zeros(Q.shape[0], dtype=np.int64)
    dim, value, child = tree["split_dim"], tree["split_value"], tree["child"]
    inner = dim[node] >= 0
    while inner.any():
        at = node[inner]
        right = Q[inner, dim[at]] >= value[at]
        node[inner] = child[at, right.astype(np.int64)]
        inner = dim[node] >= 0
    return tree["leaf"][node]


def _gap_rank(gap, p):
    """Rank measure of the per-dimension gaps (last axis) to a leaf box: a
    lower bound on the rank measure to every point in the box."""
    if p == 2:
        return np.einsum("...j,...j->...", gap, gap)
    if p == math.inf:
        return gap.max(axis=-1)
    return (gap if p == 1 else gap**p).sum(axis=-1)


def _coordinate_rank(Qc, blocks, p):
    """Rank measures of queries ``Qc`` (m, d) against one leaf's points each,
    ``blocks`` (m, d, w) (padding at +inf gives +inf), one coordinate at a time
    in the order of :func:`_direct_rank` (so the values are the same for the
    k-d tree's small d)."""
    R = None
    for j in range(Qc.shape[1]):
        t = Qc[:, j, None] - blocks[:, j, :]
        if p == 2:
            t *= t
        else:
            np.abs(t, out=t)
            if p != 1 and p != math.inf:
                t **= p
        if R is None:
            R = t
        elif p == math.inf:
            np.maximum(R, t, out=R)
        else:
            R += t
    return R


def _refine_host(Q, X, ind, p):
    """:func:`_refine` for the k-d tree's host NumPy data: the same values (one
    coordinate at a time in :func:`_direct_rank`'s order, exact for d < 8
    where NumPy sums a short axis in order) from one gather of coordinate rows
    instead of point rows and a reduction over a short axis."""
    if X.shape[1] >= 8:
        return _refine(Q, X, ind, xp=np, p=p)
    ind = np.sort(ind, axis=1)
    blocks = np.ascontiguousarray(X.T).take(ind, axis=1)  # (d, m, k)
    R = _coordinate_rank(Q, blocks.transpose(1, 0, 2), p)
    order = np.argsort(R, axis=1, kind="stable")
    return np.take_along_axis(R, order, axis=1), np.take_along_axis(ind, order, axis=1)


def _leaf_blocks(X, leaf_points):
    """The leaves' points, leaf-major and coordinate-major (n_leaves, d, w),
    padding at +inf: a leaf's block is one contiguous copy."""
    blocks = X[np.maximum(leaf_points, 0)]
    blocks[leaf_points < 0] = np.inf
    return np.ascontiguousarray(blocks.transpose(0, 2, 1))


def _box_rank(Qc, lo, hi, p):
    """Rank measure of the gap of each query ``Qc`` (m, d) to its box
    ``lo``, ``hi`` (m, d): a lower bound on the rank measure to the box's points."""
    gap = np.maximum(lo - Qc, 0.0)
    gap += np.maximum(Qc - hi, 0.0)
    return _gap_rank(gap, p)


def _node_boxes(tree):
    """Tight boxes (n_nodes, d) of every node: stored by :func:`build_kd_tree`,
    or (trees saved before they were) merged from the leaves upwards."""
    if "node_lo" in tree:
        return tree["node_lo"], tree["node_hi"]
    leaf, child = tree["leaf"], tree["child"]
    lo = np.empty((leaf.shape[0], tree["lo"].shape[1]), dtype=tree["lo"].dtype)
    hi = np.empty_like(lo)
    for node in range(leaf.shape[0] - 1, -1, -1):  # children follow their parent
        if leaf[node] >= 0:
            lo[node], hi[node] = tree["lo"][leaf[node]], tree["hi"][leaf[node]]
        else:
            a, b = child[node]
            lo[node], hi[node] = np.minimum(lo[a], lo[b]), np.maximum(hi[a], hi[b])
    return lo, hi


@dataclasses.dataclass
class _TreeArrays:
    """What the exact search reads of a tree, gathered once per call."""

    leaf_points: np.ndarray
    node_lo: np.ndarray
    node_hi: np.ndarray
    child: np.ndarray
    leaf: np.ndarray
    blocks: np.ndarray


def _candidate_leaves(t, Qc, home, bound, p):
    """(query, leaf) pairs whose leaf box lies within ``bound`` of the query,
    found by descending all queries together, one tree level per step (the
    home leaves left out)."""
    qi = np.arange(Qc.shape[0])
    node = np.zeros(Qc.shape[0], dtype=np.int64)
    reach = bound / (1.0 - 1e-12)  # the bound with a rounding margin
    pairs_q, pairs_leaf = [], []
    while qi.size:
        Qn = Qc[qi]
        gap = np.maximum(t.node_lo[node] - Qn, Qn - t.node_hi[node])
        np.maximum(gap, 0.0, out=gap)  # one side at most is positive
        near = _gap_rank(gap, p) <= reach[qi]
        qi, node = qi[near], node[near]
        lf = t.leaf[node]
        inner = lf < 0
        other = ~inner & (lf != home[qi])
        pairs_q.append(qi[other])
        pairs_leaf.append(lf[other])
        qi = np.repeat(qi[inner], 2)
        node = t.child[node[inner]].reshape(-1)
    return np.concatenate(pairs_q), np.concatenate(pairs_leaf)


def _pairs_within(t, Qc, pq, pl, bound, *, p):
    """(query, training index, rank) of the points within the query's bound in
    its candidate leaves: the pairs grouped by leaf, each leaf's queries
    measured against its block in place (one small block per leaf, no copy
    of the leaves' points)."""
    order = np.argsort(pl, kind="stable")
    pq, pl = pq[order], pl[order]
    Qp, bp = Qc[pq], bound[pq]
    edges = np.flatnonzero(np.diff(pl)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [pl.size]])
    parts = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        leaf = int(pl[s])
        D = _coordinate_rank(Qp[s:e], t.blocks[leaf][None], p)
        r, c = np.nonzero(D <= bp[s:e, None])
        parts.append((pq[s + r], t.leaf_points[leaf, c], D[r, c]))
    return tuple(np.concatenate([part[i] for part in parts]) for i in range(3))


def _select_by_sort(rows, idx, val, k, m):
    """Each of ``m`` rows' k smallest (rank, index) among flat entries (every
    row holds at least k)."""
    order = np.lexsort((idx, val, rows))
    start = np.searchsorted(rows[order], np.arange(m))
    return idx[order[start[:, None] + np.arange(k)[None, :]]]


def _select_dense(V, I, k):
    """Each row's k smallest (rank, index) of dense entries ``V``, ``I``: a
    partition, and a sort of the rows tied at their k-th rank."""
    kth = np.partition(V, k - 1, axis=1)[:, k - 1]
    le = V <= kth[:, None]
    tied = le.sum(axis=1) > k
    le[tied] = False
    out = np.empty((V.shape[0], k), dtype=np.int64)
    out[~tied] = I[le].reshape(-1, k)
    if tied.any():
        pos = np.lexsort((I[tied], V[tied]), axis=1)[:, :k]
        out[tied] = np.take_along_axis(I[tied], pos, axis=1)
    return out


def _select(D, ids, extra, k):
    """Each query's k smallest (rank, index) among its home-leaf entries
    ``D``, ``ids`` (m, w) and the other leaves' entries ``extra`` (rows,
    indices, ranks): dense rows for queries with at most w other entries,
    a sort of the flat entries for the rest."""
    r2, i2, v2 = extra
    m, w = D.shape
    count = np.bincount(r2, minlength=m)
    heavy = count > w
    out = np.empty((m, k), dtype=np.int64)
    if heavy.any():
        rows = np.flatnonzero(heavy)
        r, c = np.nonzero(np.isfinite(D[rows]))
        mine = heavy[r2]
        hr = np.concatenate([r, np.searchsorted(rows, r2[mine])])
        hi = np.concatenate([ids[rows[r], c], i2[mine]])
        hv = np.concatenate([D[rows[r], c], v2[mine]])
        out[rows] = _select_by_sort(hr, hi, hv, k, rows.size)
        count[heavy] = 0
        r2, i2, v2 = r2[~mine], i2[~mine], v2[~mine]
    order = np.argsort(r2, kind="stable")
    r2, i2, v2 = r2[order], i2[order], v2[order]
    pos = w + np.arange(r2.size) - np.repeat(np.cumsum(count) - count, count)
    width = w + int(count.max(initial=0))
    V = np.full((m, width), np.inf, dtype=D.dtype)
    I = np.full((m, width), -1, dtype=np.int64)
    V[:, :w], I[:, :w] = D, ids
    V[r2, pos], I[r2, pos] = v2, i2
    light = ~heavy
    out[light] = _select_dense(V[light], I[light], k)
    return out


def _exact_chunk(t, X, Qc, home, k, *, p):
    """Exact k nearest of a chunk of queries: the k-th rank within the home
    leaf bounds each query's search, the leaves within that bound are found by
    a level-by-level descent, every point of theirs within the bound is kept,
    and each query's k smallest kept by (rank, index)."""
    D = _coordinate_rank(Qc, t.blocks[home], p)
    bound = np.partition(D, k - 1, axis=1)[:, k - 1]
    pq, pl = _candidate_leaves(t, Qc, home, bound, p)
    if pq.size:
        extra = _pairs_within(t, Qc, pq, pl, bound, p=p)
    else:
        extra = (pq, pq, np.empty(0, dtype=D.dtype))
    ind = _select(D, t.leaf_points[home], extra, k)
    return _refine_host(Qc, X, ind, p)


def _exact_kd_search(tree, X, Q, k, *, p, chunk_elements=2**22):
    """The exact search of :func:`kd_tree_kneighbors`, in query chunks of
    about ``chunk_elements`` distance entries."""
    node_lo, node_hi = _node_boxes(tree)
    t = _TreeArrays(
        tree["leaf_points"],
        node_lo,
        node_hi,
        tree["child"],
        tree["leaf"],
        _leaf_blocks(X, tree["leaf_points"]),
    )
    home = _home_leaves(tree, Q)
    order = np.argsort(home, kind="stable")  # neighbouring queries together
    chunk = max(1, chunk_elements // (8 * t.leaf_points.shape[1]))
    out_d = np.empty((Q.shape[0], k), dtype=X.dtype)
    out_i = np.empty((Q.shape[0], k), dtype=np.int64)
    for q0 in range(0, Q.shape[0], chunk):
        rows = order[q0 : q0 + chunk]
        out_d[rows], out_i[rows] = _exact_chunk(t, X, Q[rows], home[rows], k, p=p)
    return out_d, out_i


def _exact_kd_example():
    """NumPy inputs for the fast path's agreement test: clustered points with
    duplicates, grid ties and far queries."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(size=(300, 3)), np.zeros((12, 3))])
    X = np.concatenate([X, rng.integers(0, 3, size=(60, 3)).astype(float)])
    Q = np.concatenate([rng.normal(size=(40, 3)), 5 * rng.normal(size=(8, 3))])
    Q = np.concatenate([Q, np.zeros((3, 3)), rng.integers(0, 3, size=(9, 3))])
    return (build_kd_tree(X, 16), X, Q, 6), {"xp": None, "p": 2}


@portable("neighbors.kd_tree_exact")
def _exact_kd_portable(tree, X, Q, k, /, *, xp, p=2, cache=None):
    """xpml's own exact search on the tree (see :func:`_exact_kd_search`);
    ``cache`` is the fast path's (unused here)."""
    return _exact_kd_search(tree, X, Q, k, p=p)


def _clearly_beyond(kth, nxt, X):
    """Whether a proposed next rank ``nxt`` lies clearly beyond the k-th
    ``kth`` in ``X``'s precision: relative gap above 1e-9 plus a few of its
    eps (far above both libraries' rounding), and neither underflow nor
    overflow in the rank measure."""
    fi = np.finfo(X.dtype)
    gap = 1.0 + 1e-9 + (8 * X.shape[1] + 64) * fi.eps
    clear = (nxt > kth * gap) & (nxt > 1e3 * fi.tiny) & (nxt < fi.max / 4)
    return clear & np.isfinite(kth)


def preload_kd_proposer():
    """Import SciPy's spatial module, which the exact k-d tree's first query
    would otherwise import (0.1-0.5 s, most of a first call's extra time):
    called when a tree is built or a fitted model with one is loaded."""
    import scipy.spatial  # noqa: F401


def _proposer(X, cache):
    """SciPy's ``cKDTree`` over ``X``: built once per ``cache`` (a dict)."""
    from scipy.spatial import cKDTree

    tree = None if cache is None else cache.get("ckdtree")
    if tree is None:
        tree = cKDTree(X, leafsize=16)
        if cache is not None:
            cache["ckdtree"] = tree
    return tree


def kd_search_cache(X):
    """The exact k-d tree fast path's cache for host data ``X`` (the dict
    :func:`kd_tree_kneighbors` takes), filled at fit: SciPy's ``cKDTree``,
    which the first query would otherwise build (20k points in 3-D: ~20 ms,
    a fifth of a first call)."""
    cache = {}
    _proposer(np.asarray(X), cache)
    return cache


@fast_path("neighbors.kd_tree_exact", "numpy", example=_exact_kd_example)
def _exact_kd_scipy(tree, X, Q, k, /, *, xp, p=2, cache=None):
    """SciPy's compiled k-d tree (``scipy.spatial.cKDTree``) proposes each
    query's ``w + 1`` nearest (``w = k``, then ``4k`` and ``16k`` for the
    queries still unsettled). Where the ``(w+1)``-th lies clearly beyond the
    k-th (:func:`_clearly_beyond`), every point at the k-th rank or nearer is
    among the first ``w``: they are measured and ordered by (rank, index) as
    the exhaustive search's :func:`_refine` does, and the first ``k`` kept.
    Queries still tied after that (many duplicates) are answered by the
    portable search, which applies the same rule. ``cache`` (a dict, the
    caller's for one training set ``X``) keeps the ``cKDTree`` between calls."""
    n = X.shape[0]
    proposer = _proposer(X, cache)
    # one worker when the caller limits BLAS to one thread (as the brute search)
    workers = 1 if one_blas_thread(np) else host_threads(np)
    out_d = np.empty((Q.shape[0], k), dtype=X.dtype)
    out_i = np.empty((Q.shape[0], k), dtype=np.int64)
    rows, w = np.arange(Q.shape[0]), k
    while rows.size and w <= 16 * k:
        kk = min(w + 1, n)
        Qr = Q if rows.size == Q.shape[0] else Q[rows]  # no copy on the first pass
        dist, ind = proposer.query(Qr, kk, p=p, workers=workers)
        dist, ind = dist.reshape(-1, kk), ind.reshape(-1, kk)
        if kk > w:  # only the k-th and the next rank are needed
            edge = dist[:, [k - 1, w]]
            rank = edge if p == math.inf else edge**p
            clear = _clearly_beyond(rank[:, 0], rank[:, 1], X)
        else:  # w >= n: every point is a candidate
            clear = np.ones(rows.size, dtype=bool)
        done, every = rows[clear], bool(clear.all())
        cand = (ind[:, :w] if every else ind[clear, :w]).astype(np.int64)
        ranks, ids = _refine_host(Qr if every else Qr[clear], X, cand, p)
        out_d[done], out_i[done] = ranks[:, :k], ids[:, :k]
        rows, w = rows[~clear], 4 * w
    if rows.size:
        out_d[rows], out_i[rows] = _exact_kd_search(tree, X, Q[rows], k, p=p)
    return out_d, out_i


def kd_tree_kneighbors(tree, X, Q, k, *, max_leaves=None, p=2, cache=None):
    """k nearest neighbours of host queries ``Q`` in host data ``X`` with a tree
    from :func:`build_kd_tree`.

    Exact (``max_leaves`` None; on NumPy SciPy's ``cKDTree`` with the ties
    redone here, see the module notes), vectorised over all queries (a fixed number
    of NumPy steps per tree level, none per query or per leaf): each query's
    k-th rank measure within its home leaf bounds its search; the leaves whose
    box lies within that bound are found by descending the tree level by level
    for all queries together, every point of theirs within the bound is kept,
    and the k smallest by (rank, index) are taken, then measured as the
    exhaustive search measures them. When some leaf holds fewer than ``k``
    points the exhaustive search answers instead. With ``max_leaves``:
    best-bin-first over at most that many leaves per query (approximate).
    ``p``: the Minkowski metric (``math.inf``: Chebyshev); boxes bound any
    such norm, so the search is exact for every ``p > 0``. ``cache``: a dict
    kept by the caller for this ``X`` (NumPy keeps SciPy's tree in it).

    Returns
    -------
    rank : ndarray (n_queries, k)
        Rank measures (for p = 2 squared distances).
    indices : ndarray (n_queries, k), int64, ordered by (distance, index)
    """
    X, Q = np.asarray(X), np.asarray(Q)
    if max_leaves is not None:
        return _best_bin_first(tree, X, Q, k, max_leaves, p=p)
    if k > int((tree["leaf_points"] >= 0).sum(axis=1).min()):
        return exhaustive_kneighbors(Q, X, k, xp=np, p=p)
    search = dispatch("neighbors.kd_tree_exact", np)
    return search(tree, X, Q, k, xp=np, p=p, cache=cache)


def _best_bin_first_all(tree, X, Q, k, max_leaves, /, *, chunk_elements=2**22, p=2):
    """Approximate search, the reference: each query visits leaves in increasing order of the
    squared distance to their box, at most ``max_leaves`` of them (more only
    while it holds fewer than ``k`` candidates)."""
    leaf_points, lo, hi = (np.asarray(tree[key]) for key in ("leaf_points", "lo", "hi"))
    n_leaves = leaf_points.shape[0]
    n, d = X.shape
    out_d = np.empty((Q.shape[0], k), dtype=X.dtype)
    out_i = np.empty((Q.shape[0], k), dtype=np.int64)
    chunk = max(1, chunk_elements // max(1, n_leaves * d))
    limit = min(n_leaves, int(max_leaves))
    for q0 in range(0, Q.shape[0], chunk):
        Qc = Q[q0 : q0 + chunk]
        gap = np.maximum(lo[None] - Qc[:, None], 0) + np.maximum(
            Qc[:, None] - hi[None], 0
        )
        bound = _gap_rank(gap, p)
        order = np.argsort(bound, axis=1, kind="stable")
        bound = np.take_along_axis(bound, order, axis=1)
        best_d = np.full((Qc.shape[0], k), np.inf, dtype=X.dtype)
        best_i = np.full((Qc.shape[0], k), n, dtype=np.int64)  # n: none yet
        active = np.arange(Qc.shape[0])
        for r in range(n_leaves):
            if r >= limit:  # only queries still short of k continue
                active = active[best_i[active, -1] == n]
            active = active[bound[active, r] * (1.0 - 1e-12) <= best_d[active, -1]]
            if active.size == 0:
                break
            ids = leaf_points[order[active, r]]
            dist = _direct_rank(Qc[active], X[np.maximum(ids, 0)], p, xp=np)
            dist[ids < 0] = np.inf
            vals = np.concatenate([best_d[active], dist], axis=1)
            cand = np.concatenate([best_i[active], np.where(ids < 0, n, ids)], axis=1)
            o = np.lexsort((cand, vals), axis=-1)[:, :k]
            best_d[active] = np.take_along_axis(vals, o, axis=1)
            best_i[active] = np.take_along_axis(cand, o, axis=1)
        out_d[q0 : q0 + Qc.shape[0]] = best_d
        out_i[q0 : q0 + Qc.shape[0]] = best_i
    return out_d, out_i


def _leaf_pairs(t, Qc, reach, p, *, margin):
    """(query, leaf, box rank) of the leaves whose box rank lies within
    ``reach`` of each query (``rank * (1 - 1e-12) <= reach`` when ``margin``,
    else ``rank <= reach``), found by descending all queries together, one tree
    level per step. A node's box holds its leaves' boxes, so its rank is no
    larger (the same rounding, monotone): pruning on it loses no leaf. The
    leaves' ranks are measured as :func:`_best_bin_first_all` measures them."""
    qi = np.arange(Qc.shape[0])
    node = np.zeros(Qc.shape[0], dtype=np.int64)
    pairs_q, pairs_leaf, pairs_rank = [], [], []
    while qi.size:
        Qn = Qc[qi]
        gap = np.maximum(t.node_lo[node] - Qn, 0) + np.maximum(Qn - t.node_hi[node], 0)
        rank = _gap_rank(gap, p)
        near = (rank * (1.0 - 1e-12) if margin else rank) <= reach[qi]
        qi, node, rank = qi[near], node[near], rank[near]
        lf = t.leaf[node]
        inner = lf < 0
        pairs_q.append(qi[~inner])
        pairs_leaf.append(lf[~inner])
        # a leaf node's box is its leaf's (lo, hi): the same rank, kept
        pairs_rank.append(rank[~inner])
        qi = np.repeat(qi[inner], 2)
        node = t.child[node[inner]].reshape(-1)
    return tuple(np.concatenate(a) for a in (pairs_q, pairs_leaf, pairs_rank))


def _leaf_ranks(t, X, Qa, leaves, p):
    """Rank measures (m, w) of queries ``Qa`` to the points of one leaf each
    (padding +inf) and the points' indices (padding ``n``), measured as
    :func:`_best_bin_first_all` measures them."""
    ids = t.leaf_points[leaves]
    pad = ids < 0
    if t.blocks is not None:  # small d: one coordinate at a time, the same sums
        dist = _coordinate_rank(Qa, t.blocks[leaves], p)
    else:
        dist = _direct_rank(Qa, X[np.maximum(ids, 0)], p, xp=np)
        dist[pad] = np.inf
    return dist, np.where(pad, X.shape[0], ids)


def _first_leaves(t, X, Qc, k, p):
    """Each query's first leaf in visiting order (smallest box rank, then
    smallest leaf number) and the k-th smallest rank among its points (+inf
    when it holds fewer than ``k``). The first leaf's rank is at most that of
    the leaf the query falls in (the splits' descent), so only leaves within
    the latter are looked at."""
    home = _home_leaves(t.tree, Qc)
    gap = np.maximum(t.lo[home] - Qc, 0) + np.maximum(Qc - t.hi[home], 0)
    pq, pl, pb = _leaf_pairs(t, Qc, _gap_rank(gap, p), p, margin=False)
    o = np.lexsort((pl, pb, pq))
    pq, pl = pq[o], pl[o]
    first = np.flatnonzero(np.r_[True, pq[1:] != pq[:-1]])
    leaf = pl[first]  # every query is found: its home leaf qualifies
    dist, _ = _leaf_ranks(t, X, Qc, leaf, p)
    if k > dist.shape[1]:
        return leaf, np.full(Qc.shape[0], np.inf, dtype=dist.dtype)
    return leaf, np.partition(dist, k - 1, axis=1)[:, k - 1]


def _merge_k(V, I, k):
    """The k smallest (rank, index) entries of each row of ``V``, ``I``
    (unordered): a partition, and a sort of the rows tied at their k-th rank."""
    kth = np.partition(V, k - 1, axis=1)[:, k - 1]
    le = V <= kth[:, None]
    tied = le.sum(axis=1) != k
    le[tied] = False
    out_v = np.empty((V.shape[0], k), dtype=V.dtype)
    out_i = np.empty((V.shape[0], k), dtype=I.dtype)
    out_v[~tied], out_i[~tied] = V[le].reshape(-1, k), I[le].reshape(-1, k)
    if tied.any():
        pos = np.lexsort((I[tied], V[tied]), axis=1)[:, :k]
        out_v[tied] = np.take_along_axis(V[tied], pos, axis=1)
        out_i[tied] = np.take_along_axis(I[tied], pos, axis=1)
    return out_v, out_i


def _visit_lists(t, Qc, leaf1, kth1, /, *, limit, p):
    """Each query's leaves in visiting order (box rank, then leaf number), at
    most ``limit``: every leaf it can visit has a rank within ``kth1`` (the
    k-th rank after its first leaf, which only falls afterwards), so only
    those are gathered. Returns leaves and ranks (m, c), ``+inf`` ranks past
    a query's list."""
    m, n_leaves = Qc.shape[0], t.lo.shape[0]
    pq, pl, pb = _leaf_pairs(t, Qc, kth1, p, margin=True)
    gap = np.maximum(t.lo[leaf1] - Qc, 0) + np.maximum(Qc - t.hi[leaf1], 0)
    pq = np.concatenate([pq, np.arange(m)])
    pl = np.concatenate([pl, leaf1])
    pb = np.concatenate([pb, _gap_rank(gap, p)])
    _, keep = np.unique(pq * n_leaves + pl, return_index=True)
    pq, pl, pb = pq[keep], pl[keep], pb[keep]
    o = np.lexsort((pl, pb, pq))
    pq, pl, pb = pq[o], pl[o], pb[o]
    count = np.bincount(pq, minlength=m)
    pos = np.arange(pq.size) - np.repeat(np.cumsum(count) - count, count)
    kept = pos < limit
    c = int(min(limit, count.max()))
    L = np.zeros((m, c), dtype=np.int64)
    B = np.full((m, c), np.inf, dtype=pb.dtype)
    L[pq[kept], pos[kept]], B[pq[kept], pos[kept]] = pl[kept], pb[kept]
    return L, B


def _bbf_chunk(t, X, Qc, k, *, limit, p):
    """Best-bin-first for a chunk of queries: the visit steps run for all
    queries together, each step one leaf per query still running, which stops
    at the first leaf whose box rank exceeds its k-th rank (the list's end
    included). Returns ranks and indices of the queries whose first leaf holds
    ``k`` points, and that mask (the others are left to the caller)."""
    leaf1, kth1 = _first_leaves(t, X, Qc, k, p)
    ok = np.isfinite(kth1)
    Qc, leaf1, kth1 = Qc[ok], leaf1[ok], kth1[ok]
    if Qc.shape[0] == 0:
        return np.empty((0, k), dtype=X.dtype), np.empty((0, k), dtype=np.int64), ok
    L, B = _visit_lists(t, Qc, leaf1, kth1, limit=limit, p=p)
    best_d = np.full((Qc.shape[0], k), np.inf, dtype=X.dtype)
    best_i = np.full((Qc.shape[0], k), X.shape[0], dtype=np.int64)
    kth = np.full(Qc.shape[0], np.inf, dtype=X.dtype)
    alive = np.arange(Qc.shape[0])
    for r in range(L.shape[1]):
        alive = alive[B[alive, r] * (1.0 - 1e-12) <= kth[alive]]
        if alive.size == 0:
            break
        dist, ids = _leaf_ranks(t, X, Qc[alive], L[alive, r], p)
        V = np.concatenate([best_d[alive], dist], axis=1)
        I = np.concatenate([best_i[alive], ids], axis=1)
        best_d[alive], best_i[alive] = _merge_k(V, I, k)
        kth[alive] = best_d[alive].max(axis=1)
    o = np.lexsort((best_i, best_d), axis=1)
    best_d, best_i = (np.take_along_axis(a, o, axis=1) for a in (best_d, best_i))
    return best_d, best_i, ok


@dataclasses.dataclass
class _LeafTree:
    """What the approximate search reads of a tree, gathered once per call."""

    tree: dict
    leaf_points: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    node_lo: np.ndarray
    node_hi: np.ndarray
    child: np.ndarray
    leaf: np.ndarray
    blocks: np.ndarray | None  # (n_leaves, d, w) for d < 8 (see _leaf_ranks)


_BBF_CHUNK = 2048
"""Queries per step of the approximate search: at 8192 a chunk's (queries,
leaf points) temporaries (~13 MB each in 3-D) are mapped afresh by every step
(tens of thousands of page faults per call, warm calls too); at 2048 they
are reused (50k queries in 3-D: ~1.2 s -> ~0.9 s CPU, loaded machine)."""


def _best_bin_first(tree, X, Q, k, max_leaves, /, *, chunk=_BBF_CHUNK, p=2):
    """Approximate search: each query visits leaves in increasing order of the
    rank measure to their box (ties: smaller leaf number first), at most
    ``max_leaves`` of them (more only while it holds fewer than ``k``
    candidates), stopping at the first whose box rank exceeds its k-th rank.
    Only the leaves a query can visit are found (:func:`_visit_lists`), and
    the visits run step by step for all queries together. Queries whose first
    leaf holds fewer than ``k`` points take :func:`_best_bin_first_all`; the
    answer is the same as its for every query."""
    t = _LeafTree(
        tree,
        *(np.asarray(tree[key]) for key in ("leaf_points", "lo", "hi")),
        *_node_boxes(tree),
        tree["child"],
        tree["leaf"],
        _leaf_blocks(X, tree["leaf_points"]) if X.shape[1] < 8 else None,
    )
    limit = min(t.lo.shape[0], int(max_leaves))
    out_d = np.empty((Q.shape[0], k), dtype=X.dtype)
    out_i = np.empty((Q.shape[0], k), dtype=np.int64)
    short = np.zeros(Q.shape[0], dtype=bool)
    for q0 in range(0, Q.shape[0], chunk):
        Qc = Q[q0 : q0 + chunk]
        d, i, ok = _bbf_chunk(t, X, Qc, k, limit=limit, p=p)
        rows = q0 + np.flatnonzero(ok)
        out_d[rows], out_i[rows] = d, i
        short[q0 : q0 + Qc.shape[0]] = ~ok
    if short.any():
        rows = np.flatnonzero(short)
        out_d[rows], out_i[rows] = _best_bin_first_all(
            tree, X, Q[rows], k, max_leaves, p=p
        )
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
