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
# a single tree walks X in equal slices of at most this many bytes: a slice
# read at every step stays in a core's L2 (one 3.2 MB X: 3.5 -> 2.9 ms)
_ROUTE_SINGLE_BYTES = 3 << 19


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
    n = _ROUTE_SINGLE_BYTES // (5 * 8) + 9  # X (n, 5) a little over one slice
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
def _route_numpy(X, table, *, xp, trees=None, compact_every=3, missing=False):
    """:func:`_route` on NumPy, in blocks of at most ``_ROUTE_BLOCK`` (tree,
    row) pairs: a block of several trees walks a slice of the rows small
    enough (``_ROUTE_ROW_BYTES``) that they stay in cache from tree to tree.
    Each step writes into buffers made once per call, the gathers skip bounds
    checks (``mode="clip"``: every index is a node of the table or an entry of
    ``X`` by construction), and every ``compact_every`` steps the pairs that
    reached a leaf are written to the result and dropped, when they are at
    least a quarter of the block's. A single tree walks ``X`` in slices of at
    most ``_ROUTE_SINGLE_BYTES``; where siblings are numbered side by side
    (as the growth numbers them) a step gathers the left child only."""
    n, d = int(X.shape[0]), int(X.shape[1])
    trees = slice(None) if trees is None else trees
    roots = np.asarray(table.roots[trees], dtype=np.int64)
    depths = np.asarray(table.depths[trees])
    T = int(roots.shape[0])
    Xflat = np.reshape(X, (-1,))
    row_bytes = max(1, d * Xflat.itemsize)
    if T == 1:
        rows = -(-n // max(1, -(-n * row_bytes // _ROUTE_SINGLE_BYTES)))
    else:
        rows = _ROUTE_ROW_BYTES // row_bytes
    rows = max(1, min(n, rows, _ROUTE_BLOCK))
    per = max(1, _ROUTE_BLOCK // rows)  # trees per block
    every = max(1, int(compact_every))
    walk = _Walk(Xflat, table, d, every=every, missing=missing, size=min(T, per) * rows)
    out = np.empty(T * n, dtype=np.int64)
    for r0 in range(0, n, rows):
        r = np.arange(r0, min(n, r0 + rows), dtype=np.int64)
        for a in range(0, T, per):
            b = min(T, a + per)
            node = walk.ints[0][: (b - a) * int(r.shape[0])]
            node.reshape(b - a, -1)[...] = roots[a:b, None]
            pos = np.reshape(np.arange(a, b, dtype=np.int64)[:, None] * n + r, (-1,))
            base = np.tile(r * d, b - a)
            node, base, pos = walk.block(node, base, pos, int(depths[a:b].max()), out)
            out[pos] = node
    return np.reshape(out, (T, n))


def _left_children(table):
    """The left child of every node as a contiguous array when every split
    node's right child follows its left one (the numbering the growth makes:
    a step is then ``left[node] + (x > t)``), else None; computed once per
    table (a cache beside its arrays)."""
    cached = table.__dict__.get("_cache_left")
    if cached is None:
        left, right = table.kids[0::2], table.kids[1::2]
        adjacent = bool(np.all((right == left + 1) | table.leaf))
        cached = (np.ascontiguousarray(left) if adjacent else None,)
        object.__setattr__(table, "_cache_left", cached)  # a cache, not state
    return cached[0]


class _Walk:
    """Buffers and tables of one :func:`_route_numpy` call."""

    def __init__(self, Xflat, table, d, *, every, missing, size):
        self.X, self.table, self.d, self.every = Xflat, table, d, every
        self.left = _left_children(table)
        self.missing = missing and table.missing_right is not None
        self.ints = [np.empty(size, dtype=np.int64) for _ in range(2)]
        self.x = np.empty(size, dtype=Xflat.dtype)
        self.t = np.empty(size, dtype=table.threshold.dtype)
        self.g = np.empty(size, dtype=bool)

    def block(self, node, base, pos, depth, out):
        """Walk one block ``depth`` steps from ``node`` (a view of
        ``self.ints[0]``); writes the pairs set aside to ``out[pos]`` and
        returns the rest ``(node, base, pos)``."""
        tb, X, add = self.table, self.X, np.add
        feature, threshold, kids, left = tb.feature, tb.threshold, tb.kids, self.left
        cur, spare = 0, 1
        for step in range(depth):
            k = int(node.shape[0])
            i, x, t, g = self.ints[spare][:k], self.x[:k], self.t[:k], self.g[:k]
            feature.take(node, out=i, mode="clip")  # methods: no wrapper call
            add(i, base, out=i)
            X.take(i, out=x, mode="clip")
            threshold.take(node, out=t, mode="clip")
            np.greater(x, t, out=g)
            if self.missing:  # NaN goes right where the node says so
                g |= np.isnan(x) & tb.missing_right.take(node, mode="clip")
            if left is not None:  # siblings adjacent: the right one is left + 1
                left.take(node, out=i, mode="clip")
                add(i, g, out=i)
            else:
                add(node, node, out=node)
                add(node, g, out=node)
                kids.take(node, out=i, mode="clip")
            node, cur, spare = i, spare, cur
            if (step + 1) % self.every == 0 and step + 1 < depth:
                node, base, pos = self._set_aside(node, base, pos, cur, out)
        return node, base, pos

    def _set_aside(self, node, base, pos, cur, out):
        """Write the pairs that reached a leaf to ``out`` and drop them, when
        they are at least a quarter of those still walking (an eighth was
        measured slower: dropping costs about one step)."""
        fin = np.take(self.table.leaf, node, mode="clip")
        k = int(node.shape[0])
        if 4 * int(np.count_nonzero(fin)) < k:
            return node, base, pos
        done = np.flatnonzero(fin)
        out[np.take(pos, done, mode="clip")] = np.take(node, done, mode="clip")
        keep = np.flatnonzero(~fin)
        kept = self.ints[1 - cur][: int(keep.shape[0])]
        np.take(node, keep, out=kept, mode="clip")
        self.ints[cur], self.ints[1 - cur] = self.ints[1 - cur], self.ints[cur]
        base = np.take(base, keep, mode="clip")
        return kept, base, np.take(pos, keep, mode="clip")
