"""k-means clustering by Lloyd's iterations.

Each iteration assigns every point to its nearest centre (squared distances from
the Gram engine, in row blocks sized by a memory budget) and moves each centre to
the (weighted) mean of its points, computed as one matrix product with the
one-hot assignment matrix (on NumPy: SciPy's sparse product, and after the
first iterations only the points that changed cluster move between the sums;
the scores are laid out centre by centre so that the nearest centre is one
vectorised minimum; in float64, Hamerly's bounds, moved by the centre shifts,
leave unscored the rows that cannot change cluster, rounding included, so the
labels are the full assignment's). On a distance tie a point keeps its
previous cluster (on the first assignment: the smallest cluster index). Random
draws (initial centres, partitions) are made on the host with NumPy and moved
to the device, so one seed gives the same clustering on every backend.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClusterMixin, TransformerMixin
from xpml.exceptions import ConvergenceWarning, warn
from xpml.kernels import (
    block_rows_for,
    point_factor,
    query_factor,
    sq_distances,
    sq_norms,
)
from xpml.linalg import (
    _single_threaded_blas,
    host_threads,
    map_row_blocks,
    one_blas_thread,
    thread_pool,
)
from xpml.utils._array_api import (
    device,
    dispatch,
    fast_path,
    is_numpy_namespace,
    itemsize,
    portable,
)
from xpml.utils._array_api import memory_budget as budget_bytes
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state

try:  # the NumPy scatter-add's sparse product (scikit-learn depends on SciPy)
    import scipy.sparse as _sparse
except ImportError:  # pragma: no cover - SciPy is optional
    _sparse = None
try:  # SciPy's private kernels (y += A x in place): np.add.at where missing
    from scipy.sparse import _sparsetools
except ImportError:  # pragma: no cover - private: may move in a SciPy release
    _sparsetools = None

__all__ = ["KMeans"]

INITS = ("k-means++", "random", "forgy", "random-partition")


# ----------------------------------------------------------------- helpers
ASSIGN_TILE_BYTES = 2**22
"""On NumPy, the scores and rows of ``A`` of one assignment block take about
this much; at least :data:`MIN_TILE_ROWS` rows. Session 11 (the blocks split
in one shard per thread, two threads): 4 MiB against 1 MiB, fits of 50
iterations timed in turns, 7 rounds, was as fast or 3-17 % faster on blobs
and Gaussian data at d = 5 / 20 / 100, k = 8 to 64 (fewer, larger blocks:
fewer calls per step on each thread; the whole assignment of 50,000 x 20 at
k = 8 took 0.66 ms in 12,500-row blocks against 0.87 in 4,519). An earlier
measurement had 4,096-row blocks 1.3x faster than 22k-row ones at k = 8,
before the assignment was split in shards."""

MIN_TILE_ROWS = 256


def _block_rows(X, k, xp, memory_budget):
    """Rows per assignment block: the memory budget's, and on NumPy at most a
    cache-sized tile (:data:`ASSIGN_TILE_BYTES`)."""
    size = itemsize(X.dtype, xp)
    budget = budget_bytes(memory_budget)
    rows = block_rows_for(k, X.shape[1], size, kernel="linear", memory_budget=budget)
    if is_numpy_namespace(xp):
        per_row = (k + X.shape[1] + 1) * size
        rows = min(rows, max(MIN_TILE_ROWS, ASSIGN_TILE_BYTES // per_row))
    return rows


@portable("kmeans.nearest")
def _nearest(Ab, B, prev, /, *, xp):
    """Nearest centre of each row of a block of ``A = [x, 1]`` against
    ``B = [−2c, ‖c‖²]`` (:func:`xpml.kernels.point_factor`; ``prev`` kept on ties)."""
    S = Ab @ B.T
    lab = xp.argmin(S, axis=1)
    if prev is not None:
        sprev = xp.take_along_axis(S, prev[:, None], axis=1)[:, 0]
        smin = xp.take_along_axis(S, lab[:, None], axis=1)[:, 0]
        lab = xp.where(sprev <= smin, prev, lab)
    return lab


def _nearest_example():
    rng = np.random.default_rng(0)
    A = np.concatenate([rng.standard_normal((60, 3)), np.ones((60, 1))], axis=1)
    C = np.concatenate([rng.standard_normal((4, 3)), A[:2, :3]])  # 4, 5 on points
    C = np.concatenate([C, C[:3]])  # centres 6, 7, 8 tie with 0, 1, 2
    B = np.concatenate([-2.0 * C, np.sum(C * C, axis=1)[:, None]], axis=1)
    return (A, B, rng.integers(0, 9, 60)), {"xp": None}


def _nearest_into(Ab, B, prev, out):
    """:func:`_nearest_numpy` written into ``out`` (intp); returns the block's
    rows whose label is not ``prev`` (None when ``prev`` is None)."""
    St = B @ Ab.T
    if prev is None:
        np.argmin(St, axis=0, out=out)
        return None
    b = St.shape[1]
    flat = prev * b  # St[prev[i], i] in the flattened scores
    flat += np.arange(b)
    moved = np.flatnonzero(St.reshape(-1).take(flat) > St.min(axis=0))
    out[...] = prev
    if moved.size:
        out[moved] = np.argmin(St[:, moved], axis=0)
    return moved


@fast_path("kmeans.nearest", "numpy", example=_nearest_example)
def _nearest_numpy(Ab, B, prev, /, *, xp):
    """As the portable twin, with the scores laid out centre by centre
    (``St = B Abᵀ``, ``(k, b)``): the minimum over the centres is then one
    vectorised pass, whereas ``argmin`` along a short row costs a call per row.
    A row keeps ``prev`` when its previous centre scores the minimum (the tie
    rule: most rows after the first iterations); only the others need their
    ``argmin`` (the first of equal minima, as the portable twin's)."""
    out = np.empty(Ab.shape[0], dtype=np.intp)
    _nearest_into(Ab, B, prev, out)
    return out


def _assign_numpy(A, B, previous, rows, shards):
    """NumPy labels of all rows (:func:`_nearest_into` per block, one shard of
    blocks per thread when ``shards`` is given) and the rows whose label is not
    ``previous`` (in order; None when ``previous`` is None)."""
    n = A.shape[0]
    labels = np.empty(n, dtype=np.intp)

    def run(r0, r1):
        moved = []
        for b0 in range(r0, r1, rows):
            b1 = min(b0 + rows, r1)
            prev = None if previous is None else previous[b0:b1]
            m = _nearest_into(A[b0:b1], B, prev, labels[b0:b1])
            if m is not None:
                moved.append(m + b0)
        return moved

    parts = [run(0, n)] if shards is None else shards(run, n)
    if previous is None:
        return labels, None
    moved = [m for part in parts for m in part]
    return labels, (np.concatenate(moved) if moved else np.zeros(0, dtype=np.intp))


def _assign_factored(A, B, previous, rows, /, *, xp, shards=None):
    """Labels of all rows of ``A = [x, 1]`` against ``B = [−2c, ‖c‖²]``, in row
    blocks: split in ``shards`` (:func:`_shard_runner`, one run of consecutive
    blocks per thread) when given, else on a thread pool on NumPy
    (:func:`xpml.linalg.map_row_blocks`) unless BLAS is limited to one thread."""

    nearest = dispatch("kmeans.nearest", xp)

    def block(r0, r1):
        prev = None if previous is None else previous[r0:r1]
        return nearest(A[r0:r1, :], B, prev, xp=xp)

    def blocks(r0, r1):
        return [block(b0, min(b0 + rows, r1)) for b0 in range(r0, r1, rows)]

    n = A.shape[0]
    if shards is not None:
        out = [lab for part in shards(blocks, n) for lab in part]
    elif one_blas_thread(xp):
        out = blocks(0, n)
    else:
        out = map_row_blocks(block, n, rows, xp=xp)
    return out[0] if len(out) == 1 else xp.concat(out)


@contextlib.contextmanager
def _shard_runner(xp):
    """For one Lloyd run on NumPy with several CPUs: ``run(fn, n)`` =
    ``[fn(r0, r1)]`` over one shard of consecutive rows per thread, in order,
    on a pool held for the run with BLAS limited to one thread meanwhile (a
    pool and a BLAS limit per iteration cost more than a k = 8 assignment's
    product). None elsewhere, and when the caller limited BLAS to one thread."""
    threads = host_threads(xp)
    limits = None if threads < 2 or one_blas_thread(xp) else _single_threaded_blas(xp)
    if limits is None:
        yield None
        return
    with limits, thread_pool(threads - 1) as pool:

        def run(fn, n):  # the last shard on the calling thread: one hand-off fewer
            step = max(1, -(-n // threads))
            bounds = [(r0, min(r0 + step, n)) for r0 in range(0, n, step)]
            others = [pool.submit(fn, *b) for b in bounds[:-1]]
            last = fn(*bounds[-1])
            return [f.result() for f in others] + [last]

        yield run


def _assign(X, C, previous, /, *, xp, memory_budget=None):
    """Nearest centre of each row (keeping ``previous`` on ties), in row blocks."""
    rows = _block_rows(X, C.shape[0], xp, memory_budget)
    A, B = query_factor(X, xp=xp), point_factor(C, xp=xp)
    return _assign_factored(A, B, previous, rows, xp=xp)


def _membership(labels, k, /, *, xp, dtype):
    """``M[c, i] = [labels_i = c]``, shape ``(k, n)`` (laid out so each class's
    row is contiguous: about 4x faster to build on NumPy than ``(n, k)``)."""
    ks = xp.arange(k, dtype=labels.dtype, device=device(labels))
    return xp.astype(ks[:, None] == labels[None, :], dtype)


@portable("cluster_sums")
def cluster_sums(labels, Xw, w, /, *, xp, k):
    """Per-cluster sums ``Σ_{label(i)=c} wᵢxᵢ`` (k, d) and ``Σ_{label(i)=c} wᵢ``
    (k,), given ``Xw = w[:, None] * X``: two products with the one-hot
    membership matrix (O(n·k·d), the portable way to scatter-add)."""
    M = _membership(labels, k, xp=xp, dtype=Xw.dtype)
    return M @ Xw, M @ w


def _cluster_sums_example():
    rng = np.random.default_rng(0)
    X, w = rng.standard_normal((50, 3)), rng.uniform(0.5, 2.0, 50)
    labels = rng.integers(0, 4, 50)
    labels[:4] = np.arange(4)
    return (labels, X * w[:, None], w), {"k": 5, "xp": None}  # cluster 4 empty


@fast_path("cluster_sums", "numpy", example=_cluster_sums_example)
def _cluster_sums_numpy(labels, Xw, w, /, *, xp, k):
    """O(n·d) scatter-add: with SciPy, one product of the sparse ``(k, n)``
    membership matrix (a single pass over the rows of a C-ordered ``Xw``, as
    :func:`_weighted_points` makes it then); without, one ``bincount`` per
    feature (of a column-major ``Xw``). Both add each row in row order: the
    same sums, bit for bit."""
    wsum = np.bincount(labels, weights=w, minlength=k).astype(w.dtype, copy=False)
    n, d = Xw.shape
    if _sparse is not None and d:
        ones = np.ones(n, dtype=Xw.dtype)
        M = _sparse.csc_array((ones, labels, np.arange(n + 1)), shape=(k, n))
        return M @ np.ascontiguousarray(Xw), wsum
    sums = np.empty((k, d), dtype=np.float64)
    for j in range(d):
        sums[:, j] = np.bincount(labels, weights=Xw[:, j], minlength=k)
    return sums.astype(Xw.dtype, copy=False), wsum


@fast_path("cluster_sums", "torch", example=_cluster_sums_example)
def _cluster_sums_torch(labels, Xw, w, /, *, xp, k):
    """O(n·d) scatter-add by ``index_add`` (on a GPU: atomics, no sync)."""
    sums = xp.zeros((k, Xw.shape[1]), dtype=Xw.dtype, device=Xw.device)
    wsum = xp.zeros((k,), dtype=w.dtype, device=w.device)
    return sums.index_add(0, labels, Xw), wsum.index_add(0, labels, w)


@portable("kmeans.weighted_points")
def _weighted_points(X, w, /, *, xp):
    """``w[:, None] * X``."""
    return X * w[:, None]


def _weighted_points_example():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((7, 3)), rng.uniform(0.5, 2.0, 7)), {"xp": None}


@fast_path("kmeans.weighted_points", "numpy", example=_weighted_points_example)
def _weighted_points_numpy(X, w, /, *, xp):
    """``w[:, None] * X`` laid out for :func:`_cluster_sums_numpy`: row-major
    for SciPy's sparse product (``X`` itself, never written, when all weights
    are 1), column-major (each feature's ``bincount`` reads a contiguous
    column) without SciPy."""
    if _sparse is not None and X.flags.c_contiguous and np.all(w == 1.0):
        return X
    Xw = X * w[:, None]
    return np.ascontiguousarray(Xw) if _sparse is not None else np.asfortranarray(Xw)


@portable("kmeans.query_factor")
def _query_factor(X, /, *, xp):
    """``A = [x, 1]`` (:func:`xpml.kernels.query_factor`)."""
    return query_factor(X, xp=xp)


def _query_factor_example():
    return (np.random.default_rng(0).standard_normal((7, 3)),), {"xp": None}


_TRANSPOSE_ROWS = 2048


@fast_path("kmeans.query_factor", "numpy", example=_query_factor_example)
def _query_factor_numpy(X, /, *, xp):
    """``[x, 1]`` column-major: a row block's transpose is then a row-major
    slice, the layout in which :func:`_nearest_numpy`'s product ``B Abᵀ`` runs
    fastest (measured: about 1.5x on the product at k = 8, 1.1x at k = 64)."""
    n = X.shape[0]
    A = np.empty((n, X.shape[1] + 1), dtype=X.dtype, order="F")
    for r0 in range(0, n, _TRANSPOSE_ROWS):  # row blocks: a cache-friendly transpose
        A[r0 : r0 + _TRANSPOSE_ROWS, :-1] = X[r0 : r0 + _TRANSPOSE_ROWS]
    A[:, -1] = 1.0
    return A


@dataclasses.dataclass
class _Data:
    """What every Lloyd iteration reads: the points ``X``, their weights ``w``,
    ``Xw = w X``, ``A = [x, 1]`` (:func:`xpml.kernels.query_factor`), the
    rows per assignment block and, during a run, its :func:`_shard_runner` and
    (NumPy, float64) its :class:`_Bounds`."""

    X: object
    w: object
    Xw: object
    A: object
    rows: int
    shards: object = None
    bounds: object = None

    @classmethod
    def make(cls, X, w, k, /, *, xp, memory_budget=None):
        rows = _block_rows(X, k, xp, memory_budget)
        Xw = dispatch("kmeans.weighted_points", xp)(X, w, xp=xp)
        return cls(X, w, Xw, dispatch("kmeans.query_factor", xp)(X, xp=xp), rows)


@portable("kmeans.update_sums")
def _update_sums(labels, previous, previous_sums, Xw, w, /, *, xp):
    """:func:`cluster_sums` of ``labels``, given those of the ``previous``
    labels (``previous_sums = (sums, wsum)``, unused here: summed afresh)."""
    k = previous_sums[0].shape[0]
    return dispatch("cluster_sums", xp)(labels, Xw, w, xp=xp, k=k)


def _update_sums_example():
    (labels, Xw, w), kw = _cluster_sums_example()
    previous = np.array(labels)
    previous[[3, 7, 11]] = [0, 4, 2]  # three points move (one out of cluster 4)
    old = _cluster_sums_numpy(previous, Xw, w, xp=None, k=kw["k"])
    return (labels, previous, old, Xw, w), {"xp": None}


INCREMENTAL_SUMS_UP_TO = 1 / 16
"""Share of changed labels up to which the NumPy Lloyd step moves only the
changed rows between the cluster sums (``np.add.at``, dearer per row); above it
the sums are made afresh (one pass over ``X``)."""


@fast_path("kmeans.update_sums", "numpy", example=_update_sums_example)
def _update_sums_numpy(labels, previous, previous_sums, Xw, w, /, *, xp):
    """Only the points whose label changed (few after the first iterations)
    move their rows from the old cluster's sum to the new one's; many changes
    are summed afresh (:func:`_moved_sums`)."""
    moved = np.flatnonzero(labels != previous)
    return _moved_sums(labels, previous, moved, previous_sums, Xw=Xw, w=w)


def _moved_sums(labels, previous, moved, previous_sums, /, *, Xw, w, counts=False):
    """The sums and weights of ``labels``' clusters from those of ``previous``
    (``previous_sums``), ``moved`` the rows whose label changed: their rows
    move between the sums (in row order: all added, then all subtracted), or,
    past :data:`INCREMENTAL_SUMS_UP_TO`, everything is summed afresh. The
    weights are summed afresh, so that an empty cluster's weight is exactly 0
    (its sum is reset to 0); with ``counts`` (all weights 1) they move with the
    rows instead: whole numbers, the same as summed afresh."""
    sums, wsum = previous_sums
    k = sums.shape[0]
    if moved.size > INCREMENTAL_SUMS_UP_TO * labels.shape[0]:
        return _cluster_sums_numpy(labels, Xw, w, xp=np, k=k)
    if counts:
        delta = np.bincount(labels[moved], minlength=k)
        delta -= np.bincount(previous[moved], minlength=k)
        wsum = (wsum.astype(np.float64) + delta).astype(w.dtype, copy=False)
    else:
        wsum = np.bincount(labels, weights=w, minlength=k).astype(w.dtype, copy=False)
    sums = np.array(sums, dtype=Xw.dtype)
    if moved.size:
        _move_rows(sums, Xw[moved], labels[moved], previous[moved])
        sums[wsum == 0] = 0.0
    return sums, wsum


def _move_rows(sums, rows, to, back):
    """``sums[to[i]] += rows[i]`` for every ``i`` in order, then
    ``sums[back[i]] -= rows[i]``, in place: ``np.add.at``'s sums bit for bit.
    With SciPy, as two products of a sparse ``(k, m)`` matrix of ±1 that its
    kernel adds into ``sums`` column after column (``y + (±1)x`` rounds as
    ``y ± x``; about 25x faster than ``np.add.at`` at m = 3000, d = 20)."""
    m = rows.shape[0]
    kernel = getattr(_sparsetools, "csc_matvecs", None)
    if kernel is None or not sums.flags.c_contiguous:
        np.add.at(sums, to, rows)
        np.subtract.at(sums, back, rows)
        return
    flat, k, d = np.ascontiguousarray(rows).reshape(-1), *sums.shape
    starts = np.arange(m + 1, dtype=to.dtype)
    for index, ufunc in ((to, np.add), (back, np.subtract)):
        sign = np.full(m, 1.0 if ufunc is np.add else -1.0, rows.dtype)
        try:  # a private kernel: its signature may change between releases
            kernel(k, m, d, starts, index, sign, flat, sums.reshape(-1))
        except (TypeError, ValueError):
            ufunc.at(sums, index, rows)


# ------------------------------------------- Hamerly's bounds (NumPy, float64)
BOUND_SLACK = 8.0
"""Safety factor on the rounding bound of a score, ``K = (d + 4) eps`` per unit
of ``‖x‖² + 3 max ‖c‖²`` (the product ``[x, 1]·[−2c, ‖c‖²]`` has ``d + 1``
terms of absolute sum at most ``‖x‖² + 2‖c‖²``, and ``‖c‖²`` one rounding)."""

MIN_GATHER_ROWS = 256
"""A gathered chunk of candidate rows is padded to at least this many rows (and
a multiple of 16): a product of that width takes OpenBLAS's general kernel,
whose scores are those of the full assignment blocks bit for bit (narrow ones
take a small-matrix or matrix-vector kernel and round differently)."""

DENSE_BLOCK_SHARE = 1 / 2
"""An assignment block with at least this share of candidate rows is scored
whole, in place (cheaper than gathering them; its other rows get tighter
bounds)."""


POOLED_CANDIDATES = 16384
"""The candidate rows of a bounded step are split over the run's threads from
this many on (fewer take a millisecond or two: one thread, no hand-off)."""


@dataclasses.dataclass
class _Bounds:
    """Hamerly's bounds for one Lloyd run on NumPy (float64): ``upper[i]``
    bounds the distance from ``xᵢ`` to ``C[labels[i]]`` from above and
    ``lower[i]`` its distance to every other centre of ``C`` from below, up to
    ``margin[i] + coef √3 R``. A run-scoped cache (like the shard pool), never
    returned. A row with ``lower − upper`` over that margin, after the bounds
    moved by the centre shifts, keeps its label in the full assignment too: its
    true distances differ by more than ``√(2E)``, ``E`` the rounding bound of
    a score, so the scores cannot reorder."""

    points: object  # X, row-major (candidate rows are gathered from it)
    xx: object  # ‖xᵢ‖²
    margin: object  # coef ‖xᵢ‖
    coef: float  # 4 √K + (2 max_iter + 8) eps: rounding of scores and bounds
    radius: float = 0.0  # the largest ‖c‖ of the run so far
    labels: object = None  # the labels the bounds are about (the last step's)
    C: object = None  # the centres they were measured against
    upper: object = None
    lower: object = None

    @classmethod
    def make(cls, X, max_iter):
        eps = np.finfo(np.float64).eps
        K = BOUND_SLACK * (X.shape[1] + 4) * eps
        coef = 4.0 * math.sqrt(K) + (2.0 * max_iter + 8.0) * eps
        xx = np.einsum("ij,ij->i", X, X)
        return cls(np.ascontiguousarray(X), xx, coef * np.sqrt(xx), coef)

    def candidates(self, C, B):
        """Move the bounds by the centre shifts since :attr:`C` and return the
        rows they cannot keep in their cluster (in order)."""
        self.radius = max(self.radius, math.sqrt(float(B[:, -1].max())))
        diff = C - self.C
        delta = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        delta *= 1.0 + (C.shape[1] + 4) * np.finfo(np.float64).eps
        upper, lower = self.upper, self.lower
        upper += delta.take(self.labels)
        lower -= delta.max()
        gap = lower - upper
        gap -= self.margin
        return np.flatnonzero(gap <= self.coef * math.sqrt(3.0) * self.radius)

    def measure(self, rows, smin, second):
        """Bounds of ``rows`` from their smallest and second-smallest scores."""
        xx = self.xx[rows]
        near, other = smin + xx, second + xx
        self.upper[rows] = np.sqrt(np.maximum(near, 0.0, out=near))
        self.lower[rows] = np.sqrt(np.maximum(other, 0.0, out=other))


def _bounds_for(data, max_iter, xp):
    """:class:`_Bounds` for a run on NumPy in float64 (float32's products round
    differently by position, so its rows are all scored), else None."""
    if not is_numpy_namespace(xp) or data.X.dtype != np.float64:
        return None
    return _Bounds.make(data.X, max_iter)


def _two_nearest(St, prev):
    """Labels of the columns of scores ``St`` (k, m), C-ordered (``prev`` kept
    on a tie, else the first of equal minima: :func:`_nearest_into`'s rule),
    the columns whose label is not ``prev``, and the smallest and
    second-smallest score of each column (``St`` is overwritten)."""
    m = St.shape[1]
    flat = St.reshape(-1)  # a view: St[j, i] = flat[j m + i]
    at = prev * m
    at += np.arange(m)
    smin = St.min(axis=0)
    moved = np.flatnonzero(flat.take(at) > smin)
    lab = np.array(prev)
    if moved.size:
        lab[moved] = np.argmin(St[:, moved], axis=0)
        at[moved] += (lab[moved] - prev[moved]) * m
    flat[at] = np.inf
    return lab, moved, smin, St.min(axis=0)


def _chunk_scores(data, B, rows):
    """``(B A[rows']ᵀ, rows')`` (k, m'): a slice ``rows' = rows`` is read in
    place; other rows are gathered from the row-major points
    (:attr:`_Bounds.points`) into a block padded with copies of the first
    (``rows'``, at least :data:`MIN_GATHER_ROWS` and a multiple of 16)."""
    if isinstance(rows, slice):
        return B @ data.A[rows].T, rows
    m, d = rows.shape[0], data.X.shape[1]
    padded = np.full(max(MIN_GATHER_ROWS, -(-m // 16) * 16), rows[0], dtype=np.intp)
    padded[:m] = rows
    block = np.empty((padded.shape[0], d + 1))
    block[:, :d] = data.bounds.points.take(padded, axis=0)
    block[:, d] = 1.0
    return B @ block.T, padded


def _candidate_chunks(active, n, rows):
    """What to score: whole assignment blocks of ``rows`` rows (slices) where
    at least :data:`DENSE_BLOCK_SHARE` of the rows are candidates (every block
    when ``active`` is None) and long enough to read in place, then the other
    candidates gathered in chunks of at most ``rows``."""
    nblocks = -(-n // rows)
    if active is None:
        dense = np.ones(nblocks, dtype=bool)
        active = np.arange(n)
    else:
        dense = np.bincount(active // rows, minlength=nblocks) >= (
            DENSE_BLOCK_SHARE * rows
        )
    if n - (nblocks - 1) * rows < MIN_GATHER_ROWS:
        dense[-1] = False  # a short last block is gathered and padded
    chunks = [slice(b * rows, min(n, (b + 1) * rows)) for b in np.flatnonzero(dense)]
    rest = active[~dense[active // rows]]
    chunks += [rest[c0 : c0 + rows] for c0 in range(0, rest.shape[0], rows)]
    return chunks


def _assign_bounded(data, B, C, previous):
    """:func:`_assign_numpy`'s ``(labels, moved)`` for a step after the first:
    only the rows :meth:`_Bounds.candidates` names get scores (all of them
    when the bounds are not about ``previous``), their bounds measured anew;
    chunks of them split over ``data.shards`` from :data:`POOLED_CANDIDATES`
    rows on."""
    bd, n = data.bounds, data.A.shape[0]
    if bd.labels is previous:
        active = bd.candidates(C, B)
    else:
        active = None
        bd.upper, bd.lower = np.empty(n), np.empty(n)
    chunks = _candidate_chunks(active, n, data.rows)
    scored = n if active is None else active.shape[0]
    labels = np.array(previous)

    def run(c0, c1):
        moved = []
        for rows in chunks[c0:c1]:
            St, padded = _chunk_scores(data, B, rows)
            lab, mv, smin, second = _two_nearest(St, previous[padded])
            if not isinstance(rows, slice):  # drop the padding
                m = rows.shape[0]
                lab, mv, smin, second = lab[:m], mv[mv < m], smin[:m], second[:m]
            labels[rows] = lab
            bd.measure(rows, smin, second)
            if mv.size:
                moved.append(mv + rows.start if isinstance(rows, slice) else rows[mv])
        return moved

    if data.shards is None or len(chunks) < 2 or scored < POOLED_CANDIDATES:
        parts = [run(0, len(chunks))]
    else:
        parts = data.shards(run, len(chunks))
    bd.labels, bd.C = labels, C
    moved = [m for part in parts for m in part]
    return labels, (np.sort(np.concatenate(moved)) if moved else np.zeros(0, np.intp))


@portable("kmeans.lloyd_step")
def _lloyd_step(data, C, previous, /, *, xp, previous_sums=None):
    """One Lloyd iteration: assign every point to its nearest centre of ``C``
    (keeping ``previous`` on ties), then the weighted sums and weights of the
    new clusters (updated from ``previous_sums``, those of ``previous``, when
    given). Returns ``(labels, sums, wsum)``; no host sync."""
    B = point_factor(C, xp=xp)
    labels = _assign_factored(data.A, B, previous, data.rows, xp=xp, shards=data.shards)
    if previous is None or previous_sums is None:
        sums, wsum = dispatch("cluster_sums", xp)(
            labels, data.Xw, data.w, xp=xp, k=C.shape[0]
        )
    else:
        sums, wsum = dispatch("kmeans.update_sums", xp)(
            labels, previous, previous_sums, data.Xw, data.w, xp=xp
        )
    return labels, sums, wsum


def _lloyd_step_example(weighted=False, first=False):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((700, 3)) + 4.0 * rng.integers(0, 3, (700, 1))
    w = rng.uniform(0.5, 2.0, 700) if weighted else np.ones(700)
    C = np.concatenate([X[:4], [[50.0, 50.0, 50.0]]])  # cluster 4 stays empty
    data = _Data.make(X, w, 5, xp=np, memory_budget=5 * 8 * 3 * 96)  # 96-row blocks
    previous = _nearest_numpy(data.A, point_factor(X[10:15], xp=np), None, xp=np)
    sums = None if first else _cluster_sums_numpy(previous, data.Xw, w, xp=np, k=5)
    previous = None if first else previous
    return (data, C, previous), {"xp": None, "previous_sums": sums}


@fast_path("kmeans.lloyd_step", "numpy", example=_lloyd_step_example)
def _lloyd_step_numpy(data, C, previous, /, *, xp, previous_sums=None):
    """As the portable twin, the labels written block by block into one array
    (one shard of blocks per thread, ``data.shards``), which also gives the
    rows whose label changed (no second pass to find them); with all weights 1
    (``Xw`` is then ``X`` itself, :func:`_weighted_points_numpy`) the cluster
    weights are counts that move with those rows."""
    B = point_factor(C, xp=xp)
    if data.bounds is not None and previous is not None:
        labels, moved = _assign_bounded(data, B, C, previous)
    else:
        labels, moved = _assign_numpy(data.A, B, previous, data.rows, data.shards)
    if moved is None or previous_sums is None:
        return (
            labels,
            *_cluster_sums_numpy(labels, data.Xw, data.w, xp=xp, k=C.shape[0]),
        )
    counts = data.Xw is data.X and labels.shape[0] <= 2**24  # exact in float32
    sums = _moved_sums(
        labels, previous, moved, previous_sums, Xw=data.Xw, w=data.w, counts=counts
    )
    return (labels, *sums)


def _bounded_step_example():
    """A step with Hamerly's bounds from the step before (centres moved a little:
    most rows kept by their bounds, some near the boundaries scored)."""
    (data, C, previous), kw = _lloyd_step_example()
    data = dataclasses.replace(data, bounds=_bounds_for(data, 10, np))
    labels, *sums = _lloyd_step_numpy(data, C, previous, **{**kw, "xp": np})
    C = C + 0.05 * np.random.default_rng(2).standard_normal(C.shape)
    return (data, C, labels), {"xp": None, "previous_sums": tuple(sums)}


for _case in ({"weighted": True}, {"first": True}):  # more agreement examples
    fast_path(
        "kmeans.lloyd_step", "numpy", example=lambda c=_case: _lloyd_step_example(**c)
    )(_lloyd_step_numpy)
fast_path("kmeans.lloyd_step", "numpy", example=_bounded_step_example)(
    _lloyd_step_numpy
)


def _means(sums, wsum, C_old, /, *, xp):
    """Cluster means; an empty cluster keeps its old centre (relocated later)."""
    filled = wsum > 0
    safe = xp.where(filled, wsum, xp.ones_like(wsum))
    return xp.where(filled[:, None], sums / safe[:, None], C_old)


def _relocate_empty(data, labels, C_old, sums, wsum, /, *, xp):
    """Each empty cluster takes the point farthest from its old centre (removed
    from that centre's mean), as scikit-learn does; among equally far points,
    first those whose cluster keeps other points (on duplicate points a move
    then empties no other cluster). A rare path: it syncs."""
    import array_api_extra as xpx

    X, w = data.X, data.w
    empty_ids = [int(i) for i in to_numpy(xp.nonzero(wsum == 0)[0])]
    resid = xp.sum((X - xp.take(C_old, labels, axis=0)) ** 2, axis=1)
    shared = xp.astype(xp.take(wsum, labels) > w, X.dtype)
    order = xp.argsort(-shared, stable=True)
    order = xp.take(order, xp.argsort(-xp.take(resid, order), stable=True))
    far = to_numpy(order[: len(empty_ids)])
    lab_host = to_numpy(labels)
    sums, wsum = xp.asarray(sums, copy=True), xp.asarray(wsum, copy=True)
    for new, j in zip(empty_ids, far):
        j = int(j)
        old = int(lab_host[j])
        xj, wj = X[j, :], w[j]
        sums = xpx.at(sums)[old, :].set(sums[old, :] - wj * xj)
        wsum = xpx.at(wsum)[old].set(wsum[old] - wj)
        sums = xpx.at(sums)[new, :].set(wj * xj)
        wsum = xpx.at(wsum)[new].set(wj)
    return _means(sums, wsum, C_old, xp=xp)  # a cluster left empty keeps its centre


@portable("kmeans.inertia")
def _inertia_portable(X, C, labels, w, /, *, xp):
    """``Σᵢ wᵢ ‖xᵢ − c_label(i)‖²``."""
    return xp.sum(w * xp.sum((X - xp.take(C, labels, axis=0)) ** 2, axis=1))


def _inertia_example():
    rng = np.random.default_rng(0)
    X, C = rng.standard_normal((5000, 3)), rng.standard_normal((4, 3))
    return (X, C, rng.integers(0, 4, 5000), rng.uniform(0.5, 2.0, 5000)), {"xp": None}


@fast_path("kmeans.inertia", "numpy", example=_inertia_example)
def _inertia_numpy(X, C, labels, w, /, *, xp):
    """As the portable twin, the rows' squared distances made in blocks of
    :data:`_TRANSPOSE_ROWS` rows in one reused buffer instead of three
    ``n × d`` temporaries (fresh memory on a first fit, issue 16); each row's
    sum, and so the total, is the same."""
    n = X.shape[0]
    rows = min(n, _TRANSPOSE_ROWS)
    buf = np.empty((rows, X.shape[1]), dtype=np.result_type(X, C))
    dist = np.empty(n, dtype=buf.dtype)
    for r0 in range(0, n, rows):
        D = buf[: min(rows, n - r0)]
        np.take(C, labels[r0 : r0 + rows], axis=0, out=D, mode="clip")  # unbuffered
        np.subtract(X[r0 : r0 + rows], D, out=D)
        np.square(D, out=D)
        np.sum(D, axis=1, out=dist[r0 : r0 + rows])
    return np.sum(w * dist)


def _inertia(X, C, labels, w, /, *, xp):
    return dispatch("kmeans.inertia", xp)(X, C, labels, w, xp=xp)


def _iteration(data, C, labels_old, /, *, xp, sums_old=None):
    """A Lloyd iteration with its stopping statistics read back in one host
    transfer: ``(labels, C_new, shift, same, sums)`` with ``shift`` the squared
    centre shift, ``same`` whether no label changed and ``sums = (sums, wsum)``
    of the new labels (``sums_old``: those of ``labels_old``)."""
    step = dispatch("kmeans.lloyd_step", xp)
    labels, sums, wsum = step(data, C, labels_old, xp=xp, previous_sums=sums_old)
    C_new = _means(sums, wsum, C, xp=xp)
    same = (
        xp.zeros((), dtype=C.dtype, device=device(C))
        if labels_old is None
        else xp.astype(xp.all(labels == labels_old), C.dtype)
    )
    n_empty = xp.astype(xp.sum(xp.astype(wsum == 0, xp.int64)), C.dtype)
    shift = xp.sum((C_new - C) ** 2)
    stats = to_numpy(xp.stack([shift, same, n_empty]))  # the iteration's one sync
    shift = float(stats[0])
    if stats[2] > 0:
        C_new = _relocate_empty(data, labels, C, sums, wsum, xp=xp)
        shift = float(xp.sum((C_new - C) ** 2))
    return labels, C_new, shift, bool(stats[1]), (sums, wsum)


def _lloyd(data, C, max_iter, tol, /, *, xp):
    """Lloyd's iterations from centres ``C``; scikit-learn's stopping rules
    (labels unchanged, or squared centre shift <= tol)."""
    with _shard_runner(xp) as shards:
        bounds = _bounds_for(data, max_iter, xp)
        run = dataclasses.replace(data, shards=shards, bounds=bounds)
        return _lloyd_run(run, C, max_iter, tol, xp=xp)


class _BoundsSwitch:
    """Whether a Lloyd step uses Hamerly's bounds (NumPy, float64). They leave
    unscored the rows that cannot change cluster, but moving them costs a few
    passes over every row each step: on data without clear clusters most rows
    stay candidates, and at small ``k`` a step with them was up to 1.6x
    slower than one scoring every row (bench/results/kmeans-shapes-2core.md).
    Both give the same labels, so the choice is made by time: the second step
    is plain (the first, from no labels, costs more than later ones), then
    the bounds are used while a bounded step is no slower than the last plain
    one; a slower one turns them off, and they are tried again after
    :attr:`PROBE_EVERY` plain steps, twice as many after each try that fails
    at once (a try measures every row's bounds anew: one step's work, not
    compared)."""

    PROBE_EVERY = 8

    def __init__(self, bounds):
        self.bounds = bounds
        self.plain_s = None  # the last plain step's time (after the first)
        self.off = 0  # plain steps since the bounds were turned off (0: on)
        self.fresh = True  # the next bounded step measures every row's bounds
        self.first = True
        self.wait = self.PROBE_EVERY  # plain steps before the next try
        self.tried = False  # the bounds are on for a try

    def data(self, data, first):
        """``data`` for the next step (``first``: it has no labels to start
        from), with or without the bounds."""
        self.first = first
        if self.bounds is None or first or self.off or self.plain_s is None:
            return dataclasses.replace(data, bounds=None)
        return dataclasses.replace(data, bounds=self.bounds)

    def timed(self, data, seconds):
        """Take the time of the step just made with ``data``."""
        if self.bounds is None or self.first:
            return
        if data.bounds is None:
            self.plain_s = seconds
            if self.off:
                self.off += 1
                if self.off > self.wait:
                    self.off, self.fresh, self.tried = 0, True, True
            return
        if self.fresh:
            self.fresh = False
            return
        if seconds > self.plain_s:
            self.off = 1
            self.wait = 2 * self.wait if self.tried else self.PROBE_EVERY
        else:
            self.wait = self.PROBE_EVERY
        self.tried = False


def _lloyd_run(data, C, max_iter, tol, /, *, xp):
    """:func:`_lloyd`'s iterations (``data.shards`` set for the run; on NumPy
    float64 the bounds used while they pay, :class:`_BoundsSwitch`)."""
    labels_old = sums = None
    strict = False
    n_iter = 0
    switch = _BoundsSwitch(data.bounds)
    for n_iter in range(1, max_iter + 1):
        step_data = switch.data(data, labels_old is None)
        t0 = time.perf_counter()
        labels, C, shift, strict, sums = _iteration(
            step_data, C, labels_old, xp=xp, sums_old=sums
        )
        switch.timed(step_data, time.perf_counter() - t0)
        if strict or shift <= tol:
            break
        labels_old = labels
    if not strict:  # labels that match the final centres
        B = point_factor(C, xp=xp)
        labels = _assign_factored(
            data.A, B, labels, data.rows, xp=xp, shards=data.shards
        )
    inertia, n_used = to_numpy(  # the run's one read-back after the iterations
        xp.stack(
            [
                _inertia(data.X, C, labels, data.w, xp=xp),
                _clusters_used(data, labels, C.shape[0], xp=xp),
            ]
        )
    )
    return C, labels, float(inertia), n_iter, int(n_used)


def _clusters_used(data, labels, k, /, *, xp):
    """How many clusters have at least one point (as a float of ``X``'s dtype)."""
    n = data.X.shape[0]
    ones = xp.ones((n,), dtype=data.X.dtype, device=device(data.X))
    _, counts = dispatch("cluster_sums", xp)(labels, data.X[:, :0], ones, xp=xp, k=k)
    return xp.sum(xp.astype(counts > 0, data.X.dtype))


def _init_kmeanspp(data, k, w_host, rng, /, *, xp):
    """Greedy k-means++ (scikit-learn's): each new centre is the best of
    ``2 + ln k`` candidates drawn with probability ∝ weight × squared distance
    to the nearest centre chosen so far. The uniform draws are made on the host
    up front; the loop over centres stays on the device (no sync)."""
    X, w = data.X, data.w
    n = X.shape[0]
    dev = device(X)
    trials = 2 + int(math.log(k))
    X_norms = sq_norms(X, xp=xp)
    first = int(rng.choice(n, p=w_host / w_host.sum()))
    U = xp.asarray(rng.uniform(size=(k - 1, trials)), dtype=X.dtype, device=dev)
    chosen = [xp.asarray([first], device=dev)]
    closest = sq_distances(X[first : first + 1, :], X, xp=xp, Y_norms=X_norms)[0, :]
    pot = xp.sum(w * closest)
    for i in range(k - 1):
        cand = xp.searchsorted(xp.cumulative_sum(w * closest), U[i, :] * pot)
        cand = xp.clip(cand, 0, n - 1)
        D = xp.minimum(
            closest[None, :],
            sq_distances(xp.take(X, cand, axis=0), X, xp=xp, Y_norms=X_norms),
        )
        pots = xp.sum(w[None, :] * D, axis=1)
        best = xp.argmin(pots, keepdims=True)
        closest = xp.take(D, best, axis=0)[0, :]
        pot = xp.take(pots, best)[0]
        chosen.append(xp.astype(xp.take(cand, best), chosen[0].dtype))
    return xp.take(X, xp.concat(chosen), axis=0)


def _init_random_partition(data, k, rng, /, *, xp):
    """Centres of a uniformly random partition; with very few points an empty
    part takes a random point."""
    X, w = data.X, data.w
    n = X.shape[0]
    dev = device(X)
    lab_host = rng.integers(0, k, size=n)
    counts = np.bincount(lab_host, minlength=k)
    labels = xp.asarray(lab_host, device=dev)
    M = _membership(labels, k, xp=xp, dtype=X.dtype) * w[None, :]
    wsum = xp.sum(M, axis=1)
    C = (M @ X) / xp.where(wsum > 0, wsum, xp.ones_like(wsum))[:, None]
    if np.any(counts == 0):
        fill = np.where(counts == 0, rng.integers(0, n, size=k), -1)
        rows = xp.take(X, xp.asarray(np.maximum(fill, 0), device=dev), axis=0)
        C = xp.where(xp.asarray(fill >= 0, device=dev)[:, None], rows, C)
    return C


def _init_random(data, k, w_host, rng, /, *, xp):
    """scikit-learn's "random": ``k`` distinct rows drawn with probability
    proportional to their weight."""
    n = data.X.shape[0]
    idx = rng.choice(n, size=k, replace=False, p=w_host / w_host.sum())
    return xp.take(data.X, xp.asarray(idx, device=device(data.X)), axis=0)


def _init_centres(data, k, init, w_host, rng, /, *, xp):
    if init == "k-means++":
        return _init_kmeanspp(data, k, w_host, rng, xp=xp)
    if init == "random":
        return _init_random(data, k, w_host, rng, xp=xp)
    if init == "forgy":
        n = data.X.shape[0]
        idx = xp.asarray(rng.choice(n, size=k, replace=False), device=device(data.X))
        return xp.take(data.X, idx, axis=0)
    return _init_random_partition(data, k, rng, xp=xp)


class KMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means clustering (Lloyd's algorithm) with several restarts.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "random", "forgy", "random-partition"}, callable or \
array (n_clusters, n_features)
        "k-means++": greedy D² sampling (scikit-learn's); "random": ``k``
        distinct data points drawn with probability proportional to their
        weight (scikit-learn's); "forgy": ``k`` distinct data points, uniformly;
        "random-partition": centres of a uniformly random partition; a callable:
        ``init(X, n_clusters, random_state=rng)`` on the NumPy copy of ``X``
        with this fit's ``numpy.random.Generator``, returning the centres (once
        per run); an array: these centres (one run).
    n_init : int or "auto", default="auto"
        Runs from different initialisations; the lowest inertia wins. "auto":
        1 for k-means++ and given centres, 10 otherwise (scikit-learn's).
    max_iter : int, default=300
    tol : float, default=1e-4
        Stop when the squared centre shift is at most ``tol`` times the mean
        feature variance (scikit-learn's rule), or when no label changes.
    random_state : int, Generator or None
    memory_budget : float, optional
        Bytes of distance-block workspace (default
        :func:`xpml.utils._array_api.memory_budget`; on NumPy the blocks are
        further cut to cache-sized tiles and run on a thread pool, or one
        after the other when BLAS is limited to one thread, e.g. by
        ``threadpoolctl.threadpool_limits(1)``).
    algorithm : {"lloyd", "elkan"}, default="lloyd"
        Accepted for scikit-learn compatibility; "elkan" runs Lloyd's
        iterations too (the same answer: triangle-inequality bounds only skip
        distance computations). On NumPy in float64 both keep Hamerly's two
        bounds per point (O(n) bookkeeping), which skip the rows that cannot
        change cluster, with a margin for rounding, so the labels are those of
        the full assignment; they are used while a step with them is no
        slower than one without (on data without clear clusters most rows
        stay candidates and they cost more than they save; see
        ``_BoundsSwitch``). Elsewhere every row is scored (on a GPU the
        products cost less than the bookkeeping).
    verbose : int, default=0
        Accepted for scikit-learn compatibility; nothing is printed.
    copy_x : bool, default=True
        Accepted for scikit-learn compatibility: xpml never modifies ``X``
        (scikit-learn centres it in place when ``copy_x=False``), so both
        values behave alike.

    Attributes
    ----------
    cluster_centers_ : array (n_clusters, n_features)
    labels_ : array (n_samples,), int64
    inertia_ : float
        ``Σᵢ wᵢ ‖xᵢ − c_{label(i)}‖²``.
    n_iter_ : int
        Iterations of the best run.
    n_features_in_ : int

    Notes
    -----
    Lloyd: ``label(i) = argminⱼ ‖xᵢ − cⱼ‖²`` (a tie keeps the previous label),
    then ``cⱼ = Σ_{label(i)=j} wᵢ xᵢ / Σ_{label(i)=j} wᵢ``; inertia never increases.

    References
    ----------
    Lloyd (1982); Arthur & Vassilvitskii (2007), *k-means++*; Hamerly (2010),
    *Making k-means even faster* (the bounds).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> km = KMeans(n_clusters=2, init=np.array([[0.0, 0.0], [10.0, 0.0]])).fit(X)
    >>> km.labels_.tolist(), km.cluster_centers_.tolist(), km.inertia_
    ([0, 0, 1, 1], [[0.0, 0.5], [10.0, 0.5]], 1.0)
    >>> km.predict(np.array([[9.0, 9.0]])).tolist()
    [1]
    """

    _distance_based = True
    _parameter_constraints = {
        "algorithm": [Options("lloyd", "elkan")],
        "init": [Options(*INITS), callable, "array-like"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "memory_budget": [None, Interval(Real, 0, None, closed="neither")],
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Options("auto"), Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
        "verbose": ["boolean", Interval(Integral, 0, None, closed="left")],
        "copy_x": ["boolean"],
    }
    _xpml_tags = {
        "data": "unsupervised",
        "test_params": {"n_clusters": 3, "n_init": 2, "random_state": 0},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "the random initialisation draws depend on the number of rows, so "
            "repeating a row is not the same random run as doubling its weight "
            "(scikit-learn's KMeans is excluded from this check for the same reason)",
        },
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        n_init="auto",
        max_iter=300,
        tol=1e-4,
        random_state=None,
        memory_budget=None,
        algorithm="lloyd",
        verbose=0,
        copy_x=True,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.memory_budget = memory_budget
        self.algorithm = algorithm
        self.verbose = verbose
        self.copy_x = copy_x

    def fit(
        self,
        X: ArrayLike,
        y: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> Self:
        """Run Lloyd's iterations from ``n_init`` initialisations; returns self."""
        ctx, X, _, w = self._validate_fit_data(X, None, sample_weight)
        xp = ctx.xp
        n = X.shape[0]
        k = self.n_clusters
        if n < k:
            raise ValueError(
                f"n_samples={n} should be >= n_clusters={k}: KMeans needs at "
                f"least as many samples as clusters"
            )
        if self.algorithm == "elkan" and k == 1:  # scikit-learn's warning
            warn(
                RuntimeWarning,
                "algorithm='elkan' doesn't make sense for a single cluster. Using "
                "'lloyd' instead.",
            )
        if w is None:
            w = xp.ones((n,), dtype=X.dtype, device=ctx.device)
        C0 = self._given_centres(X, ctx)
        data = _Data.make(X, w, k, xp=xp, memory_budget=self.memory_budget)
        tol = self.tol * float(xp.mean(xp.var(X, axis=0)))
        C, labels, inertia, n_iter, n_used = self._runs(data, C0, tol, ctx)
        if n_used < k:
            warn(
                ConvergenceWarning,
                f"Number of distinct clusters ({n_used}) found smaller than "
                f"n_clusters ({k}). Possibly due to duplicate points in X.",
            )
        self.cluster_centers_ = C
        self.labels_ = xp.astype(labels, xp.int64)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        return self._fitted(ctx)

    def get_feature_names_out(self, input_features=None):
        """``kmeans0``, ``kmeans1``, ... one per cluster (the columns of
        :meth:`transform`)."""
        from xpml.kernel_approximation import _class_prefix_names

        return _class_prefix_names(self, "cluster_centers_")

    def _given_centres(self, X, ctx):
        """``init`` as an array of centres on the compute device, or None."""
        if isinstance(self.init, str) or callable(self.init):
            return None
        if self.n_init not in ("auto", 1):  # scikit-learn's warning, one run
            warn(
                RuntimeWarning,
                "Explicit initial center position passed: performing only one "
                f"init in KMeans instead of n_init={self.n_init}.",
            )
        return self._centres_on_device(self.init, X, ctx, "init array")

    def _centres_on_device(self, centres, X, ctx, what):
        k, d = self.n_clusters, X.shape[1]
        C0 = ctx.xp.asarray(to_numpy(centres), dtype=X.dtype, device=ctx.device)
        shape = tuple(C0.shape)
        if shape != (k, d):
            of = (
                f"clusters {k}"
                if len(shape) != 2 or shape[0] != k
                else f"features of the data {d}"
            )
            raise ValueError(  # scikit-learn's words, then what is wrong
                f"The shape of the initial centers {shape} does not match the "
                f"number of {of}: the {what} must be (n_clusters, n_features) "
                f"= {(k, d)}"
            )
        return C0

    def _init_run(self, data, w_host, rng, ctx):
        """Initial centres of one run (``init`` a string or a callable)."""
        if callable(self.init):
            X_host = to_numpy(data.X)
            C = self.init(X_host, self.n_clusters, random_state=rng)
            return self._centres_on_device(C, data.X, ctx, "the centres init returned")
        return _init_centres(data, self.n_clusters, self.init, w_host, rng, xp=ctx.xp)

    def _n_runs(self, given):
        if given:
            return 1
        if self.n_init == "auto":
            return 1 if self.init == "k-means++" else 10
        return self.n_init

    def _runs(self, data, C0, tol, ctx):
        """The best (lowest inertia) of the Lloyd runs."""
        xp = ctx.xp
        rng = check_random_state(self.random_state)
        w_host = None
        if C0 is None and self.init in ("k-means++", "random"):
            w_host = to_numpy(data.w).astype(np.float64)
        best = None
        for _ in range(self._n_runs(C0 is not None)):
            C = C0
            if C is None:
                C = self._init_run(data, w_host, rng, ctx)
            run = _lloyd(data, C, self.max_iter, tol, xp=xp)
            if best is None or run[2] < best[2]:
                best = run
        return best

    def fit_predict(
        self,
        X: ArrayLike,
        y: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> Array:
        """Fit and return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def predict(self, X: ArrayLike) -> Array:
        """Index of the nearest centre (the smallest index on a tie)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        labels = _assign(
            X,
            ctx.take(self.cluster_centers_),
            None,
            xp=xp,
            memory_budget=self.memory_budget,
        )
        return ctx.out(xp.astype(labels, xp.int64))

    def transform(self, X: ArrayLike) -> Array:
        """Euclidean distances to every centre, (n_samples, n_clusters)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        return ctx.out(xp.sqrt(sq_distances(X, ctx.take(self.cluster_centers_), xp=xp)))

    def score(
        self,
        X: ArrayLike,
        y: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
    ) -> float:
        """Minus the inertia of ``X`` against the fitted centres."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        C = ctx.take(self.cluster_centers_)
        labels = _assign(X, C, None, xp=xp, memory_budget=self.memory_budget)
        w = (
            xp.ones((X.shape[0],), dtype=X.dtype, device=ctx.device)
            if sample_weight is None
            else xp.asarray(to_numpy(sample_weight), dtype=X.dtype, device=ctx.device)
        )
        return -float(_inertia(X, C, labels, w, xp=xp))
