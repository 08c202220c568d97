"""Walking rows of ``X`` down one tree or a whole stacked forest at once.

A :class:`RoutingTable` holds the trees one after another; :func:`route`
gives the leaf every row reaches in every tree (a portable walk with no host
sync, and a NumPy fast path in preallocated buffers beside it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from xpml.utils._array_api import (
    device,
    dispatch,
    fast_path,
    is_numpy_namespace,
    portable,
)

__all__ = ["RoutingTable", "route", "routing_table"]


@dataclasses.dataclass(frozen=True)
class RoutingTable:
    """One or many trees ready to be walked (all arrays in one namespace).

    Trees are stored one after another; ``roots`` (T,) holds their root
    nodes and ``depths`` (T,, host) their depths. Leaves loop back to
    themselves (feature 0, threshold +inf, both children the leaf), so a
    step is four gathers and a comparison with no branch.
    """

    feature: Any  # (N,) split feature, 0 at leaves
    threshold: Any  # (N,) threshold, +inf at leaves
    kids: Any  # (2N,) left and right child of each node, interleaved
    leaf: Any  # (N,) bool
    roots: Any  # (T,)
    depths: np.ndarray
    missing_right: Any = None  # (N,) bool: NaN goes right (None: always left)

    def to(self, xp, dev):
        """The same table with its arrays in namespace ``xp`` on ``dev``."""
        from xpml._backend import move

        arrays = [self.feature, self.threshold, self.kids, self.leaf, self.roots]
        mr = self.missing_right
        mr = None if mr is None else move(mr, xp, dev)
        return RoutingTable(*[move(a, xp, dev) for a in arrays], self.depths, mr)


def routing_table(
    feature, threshold, left, right, depths, *, xp, roots=None, missing_left=None
):
    """A :class:`RoutingTable` from scikit-learn-style node arrays (children −1
    at leaves, children indices global when several trees are concatenated;
    ``missing_left``: scikit-learn's ``missing_go_to_left``, optional)."""
    dev = device(feature)
    leaf = left < 0
    self_ids = xp.arange(int(feature.shape[0]), dtype=feature.dtype, device=dev)
    f = xp.where(leaf, xp.zeros_like(feature), feature)
    inf = xp.full((), xp.inf, dtype=threshold.dtype, device=dev)
    kids = xp.stack(
        [xp.where(leaf, self_ids, left), xp.where(leaf, self_ids, right)], axis=1
    )
    if roots is None:
        roots = xp.zeros(1, dtype=feature.dtype, device=dev)
    return RoutingTable(
        f,
        xp.where(leaf, inf, threshold),
        xp.reshape(kids, (-1,)),
        leaf,
        roots,
        np.atleast_1d(np.asarray(depths, dtype=np.int64)),
        None if missing_left is None else ~xp.astype(missing_left, xp.bool) & ~leaf,
    )


def route(X, table, *, xp, trees=None, compact_every=3, missing=False):
    """Leaf reached by every row of ``X`` in every tree ``trees`` (a slice of
    the table's trees, default all): an array (T, n). See :func:`_route`; on
    NumPy the same walk runs in preallocated buffers (:func:`_route_numpy`).
    ``missing``: ``X`` holds NaN, sent by the table's ``missing_right``."""
    walk = dispatch("tree.route", xp)
    kw = {"missing": True} if missing and table.missing_right is not None else {}
    return walk(X, table, xp=xp, trees=trees, compact_every=compact_every, **kw)


@portable("tree.route")
def _route(X, table, *, xp, trees=None, compact_every=8, missing=False):
    """Leaf reached by every row of ``X`` in every tree ``trees`` (a slice of
    the table's trees, default all): an array (T, n). With ``missing``, a
    NaN goes right at the nodes of ``table.missing_right`` (else left, as
    ``NaN > threshold`` is false).

    On NumPy the rows that reached a leaf are set aside every ``compact_every``
    steps and the rest continue (a boolean mask costs nothing on the host);
    other libraries walk every row for the full depth, with no host sync.
    """
    n, d = int(X.shape[0]), int(X.shape[1])
    trees = slice(None) if trees is None else trees
    roots = table.roots[trees]
    depth = int(table.depths[trees].max())
    T = int(roots.shape[0])
    dev = device(X)
    idt = table.feature.dtype
    Xflat = xp.reshape(X, (-1,))
    node = xp.reshape(roots[:, None] + xp.zeros((1, n), dtype=idt, device=dev), (-1,))
    base = xp.arange(n, dtype=idt, device=dev)[None, :] * d
    base = xp.reshape(base + xp.zeros((T, 1), dtype=idt, device=dev), (-1,))
    compact = is_numpy_namespace(xp) and depth > compact_every
    slot = xp.arange(T * n, dtype=idt, device=dev) if compact else None
    done_slot, done_node = [], []
    for step in range(depth):
        xv = xp.take(Xflat, base + xp.take(table.feature, node))
        gt = xv > xp.take(table.threshold, node)
        if missing:
            gt = gt | (xp.isnan(xv) & xp.take(table.missing_right, node))
        right = xp.astype(gt, idt)
        node = xp.take(table.kids, 2 * node + right)
        if compact and (step + 1) % compact_every == 0 and step + 1 < depth:
            fin = xp.take(table.leaf, node)
            done_slot.append(slot[fin])
            done_node.append(node[fin])
            keep = ~fin
            slot, node, base = slot[keep], node[keep], base[keep]
    if done_slot:
        slot = xp.concat(done_slot + [slot])
        node = xp.take(xp.concat(done_node + [node]), xp.argsort(slot))
    return xp.reshape(node, (T, n))


def _route_example():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    feature = np.array([0, 1, -2, 2, -2, -2, 0, -2, -2], dtype=np.int64)
    threshold = np.array([0.0, -0.5, -2, 0.3, -2, -2, 1.0, -2, -2])
    left = np.array([1, 2, -1, 4, -1, -1, 7, -1, -1], dtype=np.int64)
    right = np.array([6, 3, -1, 5, -1, -1, 8, -1, -1], dtype=np.int64)
    roots = np.array([0, 1, 6], dtype=np.int64)  # three trees sharing nodes
    table = routing_table(
        feature, threshold, left, right, [3, 2, 1], xp=np, roots=roots
    )
    return (X, table), {"xp": np, "compact_every": 1}


# (tree, row) pairs walked together by the NumPy fast path (per-step buffers
# of about 40 bytes a pair): large enough that the ~10 calls of a step cost
# little beside their work (2^15 to 2^18 measured alike, smaller was slower)
_ROUTE_BLOCK = 1 << 16
# rows of X (in bytes) one block of several trees walks: they are read again
# by every tree of the block, so they should stay in cache
_ROUTE_ROW_BYTES = 1 << 19


# the trees' top levels are walked in heap order (children of position h at
# 2h and 2h + 1: the next position is computed, not gathered), as deep as
# this: few rows reach a leaf there, and a tree's part of the tables (2^10
# positions) stays in L1 (6 to 12 measured on one tree, 9 best: 0.92 of
# the walk's time)
_HEAP_LEVELS = 9
# heap tables of at most 2^_HEAP_BITS positions (fewer levels for more trees)
_HEAP_BITS = 22


def _route_nan_example():
    """NaN sent left or right as each node says, compacting every step."""
    rng = np.random.default_rng(1)
    feature = np.array([1, 0, -2, -2, 2, -2, -2], dtype=np.int64)
    threshold = np.array([0.0, 0.5, -2, -2, -0.2, -2, -2])
    left = np.array([1, 2, -1, -1, 5, -1, -1], dtype=np.int64)
    right = np.array([4, 3, -1, -1, 6, -1, -1], dtype=np.int64)
    missing_left = np.array([0, 1, 0, 0, 0, 0, 0], dtype=bool)
    X = rng.normal(size=(200, 3))
    X[rng.random(X.shape) < 0.25] = np.nan
    table = routing_table(
        feature, threshold, left, right, [2], xp=np, missing_left=missing_left
    )
    return (X, table), {"xp": np, "missing": True, "compact_every": 1}


def _route_deep_example():
    """Three deep trees over more (tree, row) pairs than one block: pairs set
    aside along the way, blocks that span two trees."""
    return _deep_example(np.random.default_rng(2), n_trees=3, n=_ROUTE_BLOCK // 2 + 7)


def _route_adjacent_nan_example():
    """Deep trees numbered as the growth numbers them (right child = left + 1,
    the step that gathers the left child only), with NaN in ``X`` sent
    left or right as each node says; one tree over two slices of the rows."""
    rng = np.random.default_rng(4)
    n = _ROUTE_BLOCK + 9  # a little over one slice of rows
    (X, table), kw = _deep_example(rng, n_trees=1, n=n, missing=True)
    X[rng.random(X.shape) < 0.2] = np.nan
    return (X, table), {**kw, "missing": True}


def _deep_example(rng, *, n_trees, n, missing=False):
    """Random complete-ish trees of depth 9 to 13 stacked as a forest
    (``missing``: each split node sends NaN left or right at random)."""
    d = 5
    feats, thrs, lefts, rights, roots, depths = [], [], [], [], [], []
    N = 0
    for t in range(n_trees):
        depth = 9 + 2 * t
        m = 2 ** (depth + 1) - 1
        ids = np.arange(m, dtype=np.int64)
        inner = (ids < m // 2) & (rng.random(m) < 0.8)
        inner[0] = True
        feats.append(np.where(inner, rng.integers(0, d, m), -2))
        thrs.append(np.where(inner, rng.normal(scale=0.5, size=m), -2.0))
        lefts.append(np.where(inner, N + 2 * ids + 1, -1))
        rights.append(np.where(inner, N + 2 * ids + 2, -1))
        roots.append(N)
        depths.append(depth)
        N += m
    left = np.concatenate(lefts)
    table = routing_table(
        *(np.concatenate(a) for a in (feats, thrs, lefts, rights)),
        depths,
        xp=np,
        roots=np.asarray(roots, dtype=np.int64),
        missing_left=rng.random(left.shape[0]) < 0.5 if missing else None,
    )
    return (rng.normal(size=(n, d)), table), {"xp": np, "compact_every": 2}


@fast_path("tree.route", "numpy", example=_route_adjacent_nan_example)
@fast_path("tree.route", "numpy", example=_route_deep_example)
@fast_path("tree.route", "numpy", example=_route_nan_example)
@fast_path("tree.route", "numpy", example=_route_example)
def _route_numpy(
    X, table, *, xp, trees=None, compact_every=3, missing=False, out=None, walk=None
):
    """:func:`_route` on NumPy (``out``: a flat int64 buffer of at least
    T * n entries to write the leaves into; ``walk``: the buffers of
    :func:`reusable_walk`, for a caller that routes slices of one input one
    after another), in blocks of at most ``_ROUTE_BLOCK`` (tree,
    row) pairs: a block of several trees walks a slice of the rows small
    enough (``_ROUTE_ROW_BYTES``) that they stay in cache from tree to tree.
    Each slice is copied column by column into one buffer (pairs at the same
    node then read neighbouring entries), each step writes into buffers made
    once per call, the gathers skip bounds checks (``mode="wrap"``: every
    index is a node of the table or an entry of the slice by construction,
    and wrap's check of an index in range is the cheapest of the three
    modes: 0.40 against clip's 0.54 ns an entry), and every
    ``compact_every`` steps the pairs that reached a leaf are written to the
    result and dropped, when they are at least a quarter of the block's. A
    single tree walks ``X`` in slices of ``_ROUTE_BLOCK`` rows (its steps'
    fixed cost, ~5 µs each, then paid once for most inputs; slices that fit
    a core's L2 were slower). The trees' top levels are walked in heap
    order first (:func:`_heap_top`). See :class:`_Walk` for one step."""
    n, d = int(X.shape[0]), int(X.shape[1])
    trees = slice(None) if trees is None else trees
    roots = np.asarray(table.roots[trees], dtype=np.int64)
    depths = np.asarray(table.depths[trees])
    T = int(roots.shape[0])
    rows, per = _block_shape(n, d, T, X.dtype.itemsize)
    every = max(1, int(compact_every))
    if walk is None:
        size = min(T, per) * rows
        walk = _Walk(X, table, rows, every=every, missing=missing, size=size)
    starts = roots if walk.heap is None else walk.heap[0][trees]
    out = np.empty(T * n, dtype=np.int64) if out is None else out[: T * n]
    for r0 in range(0, n, rows):
        r = np.arange(r0, min(n, r0 + rows), dtype=np.int64)
        at = walk.load(X, r)  # where row r's entries start in walk.X
        for a in range(0, T, per):
            b = min(T, a + per)
            node = walk.ints[0][: (b - a) * int(r.shape[0])]
            node.reshape(b - a, -1)[...] = starts[a:b, None]
            pos = np.arange(a, b, dtype=np.int64)[:, None] * n + r
            base = np.tile(at, b - a)
            node, base, pos = walk.block(node, base, pos.reshape(-1), depths[a:b], out)
            out[pos] = node
    return np.reshape(out, (T, n))


def reusable_walk(X, table, *, missing, compact_every=3):
    """Buffers for :func:`_route_numpy` to route every slice of ``X``'s rows
    (slices of at most :func:`_stack_rows` rows) through all of ``table``'s
    trees with, made once (a forest's predict: 3 MB of buffers, not 3 MB a
    slice, each faulted in afresh on a first call); None for a single tree,
    which reads each slice where it is."""
    T, (n, d) = int(table.roots.shape[0]), X.shape
    if T == 1:
        return None
    rows, _ = _block_shape(int(n), int(d), T, X.dtype.itemsize)
    size = min(T * rows, _ROUTE_BLOCK)  # enough for any slice's blocks
    every = max(1, int(compact_every))
    return _Walk(X, table, rows, every=every, missing=missing, size=size)


def _block_shape(n, d, T, itemsize):
    """Rows of ``X`` in one slice, and trees walked together over it."""
    row_bytes = max(1, d * itemsize)
    rows = n if T == 1 else _ROUTE_ROW_BYTES // row_bytes
    rows = max(1, min(n, rows, _ROUTE_BLOCK))
    return rows, max(1, _ROUTE_BLOCK // rows)


def _stack_rows(d, itemsize):
    """Rows of the column buffer a walk of several trees copies its slices
    into, for rows of ``d`` features of ``itemsize`` bytes (any ``n``)."""
    return max(1, min(_ROUTE_BLOCK, _ROUTE_ROW_BYTES // max(1, d * itemsize)))


def prepare_walk(table, d, itemsize):
    """Build now the per-table caches (:func:`_step_table`, :func:`_heap_top`)
    that the first NumPy walk of C-contiguous rows of ``d`` features of
    ``itemsize`` bytes would build (at fit and at unpickling, so that the
    first predict of a loaded model builds nothing). A table off NumPy has
    none: nothing to do."""
    if not isinstance(table.feature, np.ndarray):
        return
    d = max(1, int(d))
    fmul = 1 if int(table.roots.shape[0]) == 1 else _stack_rows(d, itemsize)
    _step_table(table, fmul, d * fmul)
    _heap_top(table, fmul)


def _step_table(table, fmul, span):
    """Per node, where a step reads and where it goes, when entry ``(i, f)``
    of the rows walked is at ``at[i] + f * fmul`` (``f * fmul`` below
    ``span``): ``(table, mask, shift)``. Where every split node's right
    child follows its left one (the numbering the growth makes) the next
    node is ``left + (x > t)`` and ``table`` packs the left child and the
    column (feature times ``fmul``) in one int64, ``column | left << shift``
    (``mask`` the low bits): one gather for the two, worth its two bit
    operations on small trees too once gathers wrap (a 2.4k-node tree's
    predict: 0.99 of the two gathers' time). Otherwise (or where the packing
    would overflow) ``table`` is the columns and ``mask`` None: the step reads
    the interleaved ``kids``. Computed once per table and layout (a cache
    beside its arrays)."""
    cached = table.__dict__.get("_cache_step")
    if cached is not None and cached[0] == (fmul, span):
        return cached[1]
    column = table.feature * fmul
    left, right = table.kids[0::2], table.kids[1::2]
    shift = max(1, (span - 1).bit_length())
    step = (column, None, 0)
    fits = int(table.feature.shape[0]) < (1 << (62 - shift))
    if fits and bool(np.all((right == left + 1) | table.leaf)):
        step = (np.left_shift(left, shift) | column, (1 << shift) - 1, shift)
    object.__setattr__(table, "_cache_step", ((fmul, span), step))  # a cache
    return step


def _heap_top(table, fmul):
    """The top levels of the table's trees in heap order, as if the ``T``
    trees hung from a complete tree of ``2^k >= T`` leaves: tree ``t``'s root
    at position ``2^k + t``, the children of ``h`` at ``2h`` and ``2h + 1``
    (a leaf's children are itself, as its self-loops say), so one step is
    the same arithmetic for every tree. Returns ``(start, levels, column,
    threshold, missing_right, node)``: ``start`` (T,) the roots' positions,
    the next three per position below ``2^(k + levels)`` (``column`` the
    feature times ``fmul``), ``node`` the table's node at every position
    below ``2^(k + levels + 1)`` (where the walk goes on after ``levels``
    or fewer levels). None when no level fits. Cached beside the table."""
    cached = table.__dict__.get("_cache_heap")
    if cached is not None and cached[0] == fmul:
        return cached[1]
    T = int(table.roots.shape[0])
    k = (T - 1).bit_length()
    levels = min(_HEAP_LEVELS, int(np.max(table.depths)), _HEAP_BITS - 1 - k)
    heap = None
    if levels > 0:
        node = np.zeros(2 << (k + levels), dtype=np.int64)
        start = np.arange(1 << k, (1 << k) + T, dtype=np.int64)
        node[start] = table.roots
        kids = np.reshape(table.kids, (-1, 2))
        for lv in range(k, k + levels):  # positions 2h, 2h + 1 of level lv's h
            node[2 << lv : 4 << lv] = kids[node[1 << lv : 2 << lv]].reshape(-1)
        top = node[: 1 << (k + levels)]
        mr = table.missing_right
        heap = (
            start,
            levels,
            table.feature[top] * fmul,
            table.threshold[top],
            None if mr is None else mr[top],
            node,
        )
    object.__setattr__(table, "_cache_heap", (fmul, heap))  # a cache, not state
    return heap


class _Walk:
    """Buffers and tables of one :func:`_route_numpy` call. A single tree
    reads a C-contiguous ``X`` where it is; otherwise each slice of rows is
    copied column by column into one buffer (pairs of several trees at the
    same node then read neighbouring entries)."""

    def __init__(self, X, table, rows, *, every, missing, size):
        d = int(X.shape[1])
        self.table, self.every, self.d = table, every, d
        self.missing = missing and table.missing_right is not None
        self.direct = int(table.roots.shape[0]) == 1 and X.flags.c_contiguous
        if self.direct:
            self.X, self.cols = np.reshape(X, (-1,)), None
            self.step = _step_table(table, 1, max(1, d))
        else:
            # several trees: the same layout for every n (the step table of
            # a large stack is then built once, not again for a short slice)
            if int(table.roots.shape[0]) > 1:
                rows = max(rows, _stack_rows(d, X.dtype.itemsize))
            self.cols = np.empty((d, rows), dtype=X.dtype)
            self.X = np.reshape(self.cols, (-1,))
            self.step = _step_table(table, rows, max(1, d * rows))
        self.heap = _heap_top(table, 1 if self.direct else int(self.cols.shape[1]))
        self.ints = [np.empty(size, dtype=np.int64) for _ in range(3)]
        self.x = np.empty(size, dtype=X.dtype)
        self.t = np.empty(size, dtype=table.threshold.dtype)
        self.g = np.empty(size, dtype=bool)

    def load(self, X, r):
        """Make rows ``r`` (consecutive) readable; returns where each row's
        entries start in ``self.X``."""
        if self.direct:
            return r * self.d
        m = int(r.shape[0])
        np.copyto(self.cols[:, :m], X[int(r[0]) : int(r[0]) + m].T)
        return r - r[0]

    def block(self, node, base, pos, depths, out):
        """Walk one block from ``node`` (a view of ``self.ints[0]``) as deep
        as its deepest tree (``depths``); writes the pairs set aside to
        ``out[pos]`` and returns the rest ``(node, base, pos)``."""
        depth, start = int(depths.max()), 0
        cur, spare = 0, 1
        if self.heap is not None:  # node holds the roots' heap positions
            nxt = self.ints[1][: int(node.shape[0])]
            start = self._heap_walk(node, base, nxt, depth)
            node, cur, spare = nxt, 1, 0
        for s in range(start, depth):
            k = int(node.shape[0])
            i = self.ints[spare][:k]
            self._step(node, base, i, self.ints[2][:k])
            node, cur, spare = i, spare, cur
            if (s + 1) % self.every == 0 and s + 1 < depth:
                node, base, pos = self._set_aside(node, base, pos, cur, out)
        return node, base, pos

    def _heap_walk(self, h, base, node, depth):
        """The trees' first levels (at most ``depth``) in heap order (see
        :func:`_heap_top`) from the positions ``h`` (overwritten); ``node``
        gets the table's node each pair reached. Returns the levels walked."""
        _, levels, column, threshold, mr, node_at = self.heap
        k, add = int(h.shape[0]), np.add
        j, x, t, g = self.ints[2][:k], self.x[:k], self.t[:k], self.g[:k]
        levels = min(depth, levels)
        first = 0
        if levels and int(self.heap[0].shape[0]) == 1:  # one tree: all at its root
            r, first = int(h[0]), 1
            add(base, int(column[r]), out=j)
            self.X.take(j, out=x, mode="wrap")
            np.greater(x, threshold[r], out=g)
            if self.missing and mr[r]:
                g |= np.isnan(x)
            add(g, 2 * r, out=h)
        for _ in range(first, levels):
            column.take(h, out=j, mode="wrap")
            add(j, base, out=j)
            self.X.take(j, out=x, mode="wrap")
            threshold.take(h, out=t, mode="wrap")
            np.greater(x, t, out=g)
            if self.missing:  # NaN goes right where the node says so
                g |= np.isnan(x) & mr.take(h, mode="wrap")
            add(h, h, out=h)
            add(h, g, out=h)
        node_at.take(h, out=node, mode="wrap")
        return levels

    def _step(self, node, base, nxt, j):
        """One level down: ``nxt`` gets the child of ``node`` each pair goes
        to (``j``: scratch for the entries of the slice read)."""
        tb, add, k = self.table, np.add, int(node.shape[0])
        x, t, g = self.x[:k], self.t[:k], self.g[:k]
        table, mask, shift = self.step
        table.take(node, out=nxt, mode="wrap")  # methods: no wrapper call
        if mask is None:
            add(nxt, base, out=j)
        else:
            np.bitwise_and(nxt, mask, out=j)
            add(j, base, out=j)
        self.X.take(j, out=x, mode="wrap")
        tb.threshold.take(node, out=t, mode="wrap")
        np.greater(x, t, out=g)
        if self.missing:  # NaN goes right where the node says so
            g |= np.isnan(x) & tb.missing_right.take(node, mode="wrap")
        if mask is None:
            add(node, node, out=j)
            add(j, g, out=j)
            tb.kids.take(j, out=nxt, mode="wrap")
        else:  # siblings adjacent: the right one is left + 1
            np.right_shift(nxt, shift, out=nxt)
            add(nxt, g, out=nxt)

    def _set_aside(self, node, base, pos, cur, out):
        """Write the pairs that reached a leaf to ``out`` and drop them, when
        they are at least a quarter of those still walking (an eighth was
        measured slower: dropping costs about one step)."""
        fin = self.table.leaf.take(node, mode="wrap")
        k = int(node.shape[0])
        if 4 * int(np.count_nonzero(fin)) < k:
            return node, base, pos
        done = np.flatnonzero(fin)
        out[pos.take(done, mode="wrap")] = node.take(done, mode="wrap")
        keep = np.flatnonzero(~fin)
        kept = self.ints[1 - cur][: int(keep.shape[0])]
        node.take(keep, out=kept, mode="wrap")
        self.ints[cur], self.ints[1 - cur] = self.ints[1 - cur], self.ints[cur]
        return kept, base.take(keep, mode="wrap"), pos.take(keep, mode="wrap")
