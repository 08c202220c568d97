"""Level-wise, vectorised growth of decision trees: one tree or a whole forest at once.

Every open node of one depth (across all trees being grown) is processed
together. Nodes are grouped by their number of samples into padded *node
blocks* of length ``L`` (2^k·{1, 1.25, 1.5, 1.75}); for a block of nodes:

1. the candidate features' ranks at each node's samples are gathered into a
   ``(nodes, features, L)`` array, padded with the rank of ``+inf`` (each fit
   ranks every feature once, :func:`_rank_tables`);
2. every feature of every node is sorted at once: small integer keys
   ``rank·2^s + position`` along the last axis (a stable sort by value; rows
   of a few entries go through a sorting network), values read back by rank;
3. ``cumulative_sum`` along the sorted order gives the left child's weighted
   class counts (or weighted sums of ``y``) at every threshold; the right
   child's follow by subtraction from the total (absolute error: the weighted
   median and absolute error of every prefix and suffix, from a walk over
   the nodes' ``y`` ranks, :mod:`xpml.tree._median`);
4. the criterion is scored at every position between *distinct* neighbouring
   values, for all features in one array pass, and ``argmax`` picks the best
   ``(feature, threshold)`` of each node;
5. each node's entries are laid out along its chosen feature (the order of
   step 2): the left child's
   entries are then the first ``p + 1`` of the row, the right child's the rest,
   so the next depth reads its nodes straight out of these rows (no
   compaction, no boolean mask).

Host traffic per block: one upload (where each node's entries start, how many
there are, the drawn features; plus the node means for regression) and one
download (best split, child statistics, which drawn features are constant).
The tree's arrays are assembled on the host with NumPy. A forest node whose
drawn features include constant ones re-draws them (scikit-learn's rule) and is
searched again: one more upload and download for those nodes only.

The split search is exactly scikit-learn's "best" splitter: thresholds midway
between distinct neighbours, ``x <= threshold`` goes left, children must hold
``min_samples_leaf`` samples, a split is kept when its weighted impurity
decrease is at least ``min_impurity_decrease``.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from xpml._backend import to_numpy
from xpml.tree._median import invert_rows, median_of, range_abs_errors, rank_rows
from xpml.utils._array_api import (
    device,
    dispatch,
    eps,
    fast_path,
    is_numpy_namespace,
    itemsize,
    portable,
)
from xpml.utils._array_api import memory_budget as _memory_budget

__all__ = [
    "GrowParams",
    "grow",
    "segment_sum",
]

EPSILON = eps(np.float64, np)  # host-side: impurities are float64 NumPy there
FEATURE_THRESHOLD = 1e-7  # scikit-learn's: neighbours closer than this are not split
# (nodes, features, L) work arrays alive at once in the split search: the
# memory budget divided by this (and the itemsize) bounds one block's size
_LIVE_WORK_ARRAYS = 16
# elements of one work array per chunk of features on a host library: about
# half a megabyte of float64, so the split search's array passes run in cache
_HOST_WORK_ELEMENTS = 1 << 16
# the absolute-error search holds about this many times more (nodes, features,
# L)-sized arrays (the median walk's queries, cumulative sums and partitions)
_ABS_ERROR_WORK_FACTOR = 4
# rows of at most this many entries are sorted by a sorting network (a few
# elementwise min/max passes) rather than a row-wise sort, whose cost per row
# dominates short rows
_NETWORK_SORT = 6


@dataclasses.dataclass(frozen=True)
class GrowParams:
    """Stopping rules and criterion of one growth (already resolved to numbers)."""

    criterion: str  # "gini", "entropy", "squared_error", "poisson", "absolute_error"
    n_classes: int  # 0 for regression
    max_depth: int
    min_samples_split: int
    min_samples_leaf: int
    min_impurity_decrease: float
    purity_threshold: float
    max_features: int
    splitter: str = "best"  # "random": one uniform threshold per feature
    min_weight_leaf: float = 0.0  # fraction of its tree's weight a leaf keeps
    n_outputs: int = 1  # columns of ``y``; above 1, ``y`` is (n, n_outputs)
    class_counts: tuple = ()  # multi-output classification: classes per output

    @property
    def classification(self):
        return self.n_classes > 0

    @property
    def multi(self):
        return self.n_outputs > 1

    def output(self, o):
        """The single-output parameters of output ``o`` (classification)."""
        return dataclasses.replace(
            self, n_classes=self.class_counts[o], n_outputs=1, class_counts=()
        )

    @property
    def offsets(self):
        """Where each output's classes start among the node statistics."""
        return np.concatenate([[0], np.cumsum(self.class_counts)]).astype(np.int64)


def work_elements(dtype, xp) -> int:
    """Elements of one ``(nodes, features, L)`` work array that the memory
    budget (:func:`xpml.utils._array_api.memory_budget`) allows."""
    return max(1 << 16, _memory_budget() // (_LIVE_WORK_ARRAYS * itemsize(dtype, xp)))


# --------------------------------------------------------------- host tables
class _NodeTable:
    """The nodes of all trees being grown, in creation order (host NumPy)."""

    def __init__(self, n_stats, n_const=0):
        self.size = 0
        self.cap = 0
        self.n_stats = n_stats
        self.n_const = n_const  # features known to be constant in the node (forests)
        self.cols = {}
        self._reserve(256)

    def _reserve(self, need):
        if need <= self.cap:
            return
        cap = max(need, 2 * self.cap)
        spec = {
            "tree": (np.int64, 0),
            "depth": (np.int64, 0),
            "feature": (np.int64, -2),
            "threshold": (np.float64, -2.0),
            "left": (np.int64, -1),
            "right": (np.int64, -1),
            "n": (np.int64, 0),
            "W": (np.float64, 0.0),
            "impurity": (np.float64, 0.0),
            "missing_left": (bool, False),  # where NaN goes (missing values)
        }
        new = {}
        for k, (dt, fill) in spec.items():
            a = np.full(cap, fill, dtype=dt)
            if k in self.cols:
                a[: self.size] = self.cols[k][: self.size]
            new[k] = a
        s = np.zeros((cap, self.n_stats))
        if "stats" in self.cols:
            s[: self.size] = self.cols["stats"][: self.size]
        new["stats"] = s
        c = np.zeros((cap, self.n_const), dtype=bool)
        if "const" in self.cols:
            c[: self.size] = self.cols["const"][: self.size]
        new["const"] = c
        self.cols, self.cap = new, cap

    def add(self, **values):
        m = len(values["n"])
        self._reserve(self.size + m)
        ids = np.arange(self.size, self.size + m)
        for k, v in values.items():
            self.cols[k][ids] = v
        self.size += m
        return ids

    def __getitem__(self, k):
        return self.cols[k][: self.size]


def _impurity_host(stats, W, params):
    """Node impurity from its statistics (class counts, or [mean, variance]);
    with several outputs, the mean of the outputs' impurities."""
    if params.classification and params.multi:
        off = params.offsets
        per = [
            _impurity_host(stats[:, off[o] : off[o + 1]], W, params.output(o))
            for o in range(params.n_outputs)
        ]
        return np.mean(per, axis=0)
    if not params.classification:
        return stats[:, -1].copy()  # [means..., impurity]
    p = stats / np.where(W > 0, W, 1.0)[:, None]
    if params.criterion == "gini":
        return np.maximum(1.0 - np.sum(p * p, axis=1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=1)
    return np.maximum(h, 0.0)


def _splittable(depth, n, stats, W, impurity, *, params, W_tree):
    """scikit-learn's stopping rules, plus the purity fraction; ``W_tree``:
    the total weight of each node's tree (for ``min_weight_leaf``)."""
    ok = (depth < params.max_depth) & (n >= params.min_samples_split)
    ok &= W >= 2 * params.min_weight_leaf * W_tree
    ok &= (n >= 2 * params.min_samples_leaf) & (impurity > EPSILON)
    if params.classification and params.purity_threshold < 1.0:
        if params.multi:  # every output's majority must reach the threshold
            off = params.offsets
            top = [np.max(stats[:, a:b], axis=1) for a, b in zip(off[:-1], off[1:])]
            stats = np.min(np.stack(top, axis=1), axis=1, keepdims=True)
        purity = np.max(stats, axis=1) / np.where(W > 0, W, 1.0)
        ok &= purity < params.purity_threshold
    return ok


# ------------------------------------------------------------ growth state
@dataclasses.dataclass
class _Growth:
    """One growth: the data on the device (``X`` flattened with a sentinel row
    ``n`` of +inf that pads node blocks, ``y`` with a 0 appended), the rules,
    the host node table and the per-tree generators of the feature subsets."""

    Xflat: Any
    y: Any
    d: int
    sentinel: Any  # 0-d device array holding n
    params: GrowParams
    table: _NodeTable
    W_root: np.ndarray
    W_dev: Any  # the roots' total weights on the device (R,)
    rngs: list | None
    budget: int
    stats: dict  # node blocks and re-draw rounds, counted for tests and benches
    xp: Any
    missing: bool = False  # X holds NaN: stored as +inf in Xflat (see _start)
    Rflat: Any = None  # each entry's rank within its feature (see _rank_tables)
    XS: Any = None  # the value of each rank, feature after feature
    n_ranks: int = 0  # ranks per feature, the sentinel's included (n + 1)

    @property
    def m(self):
        return min(self.params.max_features, self.d)

    @property
    def subset(self):
        return self.m < self.d


@dataclasses.dataclass(frozen=True)
class _Level:
    """The open nodes of one depth: their table ids, where each node's entries
    start in the device buffers ``samp`` (sample ids) / ``sampw`` (weights)."""

    ids: np.ndarray
    starts: np.ndarray
    samp: Any
    sampw: Any


@dataclasses.dataclass(frozen=True)
class _Block:
    """Nodes searched together: table ids, entry starts and counts, padded length."""

    ids: np.ndarray
    starts: np.ndarray
    lens: np.ndarray
    L: int

    def rows(self, sel):
        return _Block(self.ids[sel], self.starts[sel], self.lens[sel], self.L)


@dataclasses.dataclass(frozen=True)
class _Entries:
    """A block's entries on the device: sample ids (nb, L) padded with the
    sentinel, their weights (0 on padding), the node sizes (nb,), which
    positions are real, and (regression) the node means used to centre ``y``."""

    sids: Any
    ws: Any
    lens: Any
    valid: Any
    mean: Any
    u: Any = None  # (nb, d) uniforms of the random splitter, or None
    chan: Any = None  # (C, nb·L) per-entry channels of the split search
    mw: Any = None  # (nb,) least weight of a child (min_weight_leaf), or None
    yrank: Any = None  # (nb, L) rank of each entry's y in its node (absolute error)
    ysorted: Any = None  # (nb, L) each node's y in rank order (absolute error)
    uleft: Any = None  # (nb, d) random splitter with NaN: missing values go left


# ------------------------------------------------------------------- growth
def grow(
    X, y, samp, sampw, root_lens, *, params, xp, rngs=None, budget=None, missing=False
):
    """Grow ``len(root_lens)`` trees at once.

    Parameters
    ----------
    X : array (n, d), float
    y : array (n,) or (n, n_outputs)
        Integer class codes ``0..K-1`` (classification) or float targets;
        one column per output when ``params.n_outputs > 1`` (class codes of
        output ``o`` in ``0..params.class_counts[o]-1``).
    samp, sampw : arrays (E,)
        Sample indices and their (positive) weights, the roots' samples one
        root after another.
    root_lens : ndarray (R,), host
        Number of entries of each root.
    params : GrowParams
    rngs : list of numpy Generators, one per root
        Draw the random feature subsets (only used when
        ``params.max_features < d``), in each tree's node order, so a tree is
        the same whether grown alone or inside a forest.
    budget : int, optional
        Elements of one work array (default: :func:`work_elements`).
    missing : bool
        ``X`` holds NaN (missing values): each split also learns where they
        go (see :func:`_search_missing`); False skips that work.

    Returns
    -------
    trees : list of dict
        One dict of host NumPy arrays per tree: ``feature``, ``threshold``,
        ``children_left``, ``children_right``, ``value``, ``impurity``,
        ``n_node_samples``, ``weighted_n_node_samples``,
        ``missing_go_to_left`` and ``max_depth``.
        With several outputs ``value`` is (nodes, n_outputs, max classes)
        (class fractions, zero-padded) or (nodes, n_outputs, 1) (means).
    stats : dict
        ``node_blocks`` (blocks searched, one upload and one download each)
        and ``redraws`` (extra rounds for nodes that drew constant features).
    """
    if missing and params.criterion == "absolute_error":
        raise ValueError(
            "criterion='absolute_error' does not take missing values (NaN) in X "
            "in xpml; impute them first, or use another criterion"
        )
    g = _start(X, y, params, rngs, budget, xp=xp)
    if missing:  # NaN sorts as +inf: one run after a row's other real values
        g.missing = True
        g.Xflat = xp.where(xp.isnan(g.Xflat), xp.inf, g.Xflat)
    g.Rflat, g.XS = _rank_tables(g.Xflat, g.d, xp=xp)
    g.n_ranks = int(g.Xflat.shape[0]) // g.d
    level = _grow_roots(g, samp, sampw, np.asarray(root_lens, dtype=np.int64))
    while len(level.ids):
        level = _grow_level(g, level)
    return _split_trees(g.table, len(root_lens), params), dict(g.stats)


def _start(X, y, params, rngs, budget, *, xp):
    n, d = int(X.shape[0]), int(X.shape[1])
    dev = device(X)
    Xflat = xp.concat(
        [xp.reshape(X, (-1,)), xp.full(d, xp.inf, dtype=X.dtype, device=dev)]
    )
    if params.multi:
        y = _multi_targets(y, params, xp)
    else:
        y = xp.concat([y, xp.zeros(1, dtype=y.dtype, device=dev)])
    K = params.n_classes
    subset = min(params.max_features, d) < d
    budget = work_elements(X.dtype, xp) if budget is None else int(budget)
    if params.criterion == "absolute_error":
        budget = max(1, budget // _ABS_ERROR_WORK_FACTOR)
    return _Growth(
        Xflat=Xflat,
        y=y,
        d=d,
        sentinel=xp.full((), n, dtype=xp.int64, device=dev),
        params=params,
        table=_NodeTable(K if K else params.n_outputs + 1, d if subset else 0),
        W_root=np.zeros(0),
        W_dev=None,
        rngs=rngs,
        budget=budget,
        stats={"node_blocks": 0, "redraws": 0},
        xp=xp,
    )


def _rank_tables(Xflat, d, *, xp):
    """Each entry's dense rank within its feature (equal values share one),
    feature after feature: ``R[f·(n+1) + i]`` of sample ``i`` (int32; a node's
    gathers along one feature then stay in one short row), and the value of
    every rank, laid out alike: ``XS[f·(n+1) + r]`` (+inf past the feature's
    last rank). Sorting
    a node's entries along a feature then sorts small integer keys
    ``rank·2^s + position`` (stable, and much cheaper than an argsort of
    floats); values come back from ``XS``."""
    nr = int(Xflat.shape[0]) // d
    dev = device(Xflat)
    # one contiguous row per feature
    XT = xp.reshape(
        xp.reshape(xp.permute_dims(xp.reshape(Xflat, (nr, d)), (1, 0)), (-1,)), (d, nr)
    )
    order = xp.argsort(XT, axis=-1, stable=False)  # ties share a rank: any order
    sv = xp.take_along_axis(XT, order, axis=-1)
    first = xp.ones((d, 1), dtype=xp.bool, device=dev)
    new = xp.concat([first, sv[:, 1:] != sv[:, :-1]], axis=-1)
    dense = xp.cumulative_sum(xp.astype(new, xp.int32), axis=-1, dtype=xp.int32) - 1
    R = xp.reshape(xp.take_along_axis(dense, invert_rows(order, xp=xp), axis=-1), (-1,))
    # where each rank's run starts in the sorted row, in rank order (``nr``
    # past the last rank, clipped to the sentinel's +inf)
    pos = xp.arange(nr, dtype=xp.int64, device=dev)
    starts = xp.sort(xp.where(new, pos, xp.full_like(pos, nr)), axis=-1, stable=False)
    XS = xp.take_along_axis(sv, xp.minimum(starts, xp.full_like(pos, nr - 1)), axis=-1)
    return R, xp.reshape(XS, (-1,))


def _sort_by_rank(g, ranks, L):
    """Sort rows of ``ranks`` (..., L) by (rank, position), as a stable argsort
    of the values would: returns the positions and the ranks in that order
    (int32 keys while ``(rank + 1)·2^s`` fits, ``2^s >= L``)."""
    xp = g.xp
    s = max(0, (L - 1).bit_length())
    dt = xp.int32 if (g.n_ranks + 1) << s < 2**31 else xp.int64
    pos = xp.arange(L, dtype=dt, device=device(ranks))
    key = xp.astype(ranks, dt, copy=False) * (1 << s) + pos
    if L <= _NETWORK_SORT:  # many short rows: a row-wise sort costs per row
        cols = [key[..., i] for i in range(L)]
        for i, j in _sorting_network(L):
            cols[i], cols[j] = (
                xp.minimum(cols[i], cols[j]),
                xp.maximum(cols[i], cols[j]),
            )
        key = xp.stack(cols, axis=-1)
    else:
        key = xp.sort(key, axis=-1, stable=False)  # the keys are distinct
    return xp.bitwise_and(key, (1 << s) - 1), xp.bitwise_right_shift(key, s)


@functools.cache
def _sorting_network(L):
    """Comparators ``(i, j)``, ``i < j``, that sort ``L`` values: Batcher's
    odd-even merge sort of the next power of two, without the comparators
    that touch the missing (+inf) values past ``L``."""
    P = 1 << max(0, (L - 1).bit_length())
    out, p = [], 1
    while p < P:
        k = p
        while k >= 1:
            for j in range(k % p, P - k, 2 * k):
                for i in range(min(k, P - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p) and i + j + k < L:
                        out.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(out)


def _flat_rows(perm, nb, L, xp):
    """Flat indices of ``perm`` (nb, ..., L) positions into (nb·L,) rows."""
    if nb * L >= 2**31:
        perm = xp.astype(perm, xp.int64)
    rows = xp.arange(nb, dtype=perm.dtype, device=device(perm)) * L
    return xp.reshape(perm + xp.reshape(rows, (nb,) + (1,) * (perm.ndim - 1)), (-1,))


def _root_stats(g, samp, sampw, starts, ends):
    """Class counts, or [mean, variance], and total weight of every root (one
    download for all roots)."""
    xp, K = g.xp, g.params.n_classes
    if g.params.multi:
        return _root_stats_multi(g, samp, sampw, starts, ends)
    rows = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        ys, w = xp.take(g.y, samp[s:e]), sampw[s:e]
        if K:
            ks = xp.arange(K, dtype=ys.dtype, device=device(ys))
            oh = xp.astype(ys[:, None] == ks[None, :], w.dtype)
            rows.append(xp.sum(oh * w[:, None], axis=0))
        else:
            tw = xp.sum(w)
            mu = xp.sum(w * ys) / tw
            if g.params.criterion == "poisson":  # half Poisson deviance
                imp = xp.sum(w * _xlogx(ys, xp)) / tw - _xlogx(mu, xp)
            elif g.params.criterion == "absolute_error":  # [median, MAE]
                mu, imp = _root_abs_error(ys, w, mu, xp)
                imp = imp / tw
            else:
                imp = xp.sum(w * (ys - mu) ** 2) / tw
            rows.append(xp.stack([tw, mu, imp]))
    both = xp.stack(rows)
    g.W_dev = xp.sum(both, axis=1) if K else both[:, 0]
    h = np.asarray(to_numpy(both), dtype=np.float64)
    if K:
        return h, h.sum(axis=1)
    return h[:, 1:], h[:, 0].copy()


def _root_abs_error(ys, w, mu, xp):
    """A root's weighted median (scikit-learn's) and ``Σ w |y − median|``
    (computed on ``y − mu``, ``mu`` the weighted mean: no cancellation)."""
    n = int(ys.shape[0])
    rank, ybr = rank_rows(ys[None, :], xp=xp)
    lo = xp.zeros((1, 1, 1), dtype=rank.dtype, device=device(rank))
    sae, t, t_hi = range_abs_errors(
        rank[:, None, :], w[None, None, :], ybr - mu, lo, lo + n, xp=xp, midpoint=True
    )
    return median_of(ybr, t, t_hi, xp=xp)[0, 0, 0], sae[0, 0, 0]


def _grow_roots(g, samp, sampw, root_lens):
    ends = np.cumsum(root_lens)
    starts = ends - root_lens
    stats, W = _root_stats(g, samp, sampw, starts, ends)
    g.W_root = W.copy()
    R = len(root_lens)
    depth0 = np.zeros(R, dtype=np.int64)
    imp = _impurity_host(stats, W, g.params)
    ids = g.table.add(
        tree=np.arange(R), depth=depth0, n=root_lens, W=W, stats=stats, impurity=imp
    )
    is_open = _splittable(depth0, root_lens, stats, W, imp, params=g.params, W_tree=W)
    return _Level(ids[is_open], starts[is_open], samp, sampw)


def _grow_level(g, level):
    """Search every open node of one depth, block by block; add the accepted
    splits' children and return the open ones as the next level.

    The children join the table, and the nodes draw their random numbers,
    in one fixed order of the level (:func:`_level_draws`), whatever the
    blocks: the trees do not depend on how nodes are grouped."""
    lens = g.table["n"][level.ids]
    canon, draws = _level_draws(g, level.ids, lens)
    N = len(lens)
    H, known, row_at = None, None, np.zeros(N, dtype=np.int64)
    pieces, offset = [], 0
    plan = _plan_blocks(lens, g.m, g.budget, fine=g.params.classification)
    for sel, L in plan:
        blk = _Block(level.ids[sel], level.starts[sel], lens[sel], L)
        g.stats["node_blocks"] += 1
        kw = [None if a is None else a[sel] for a in draws]
        h, kn, found_pieces, at = _search_block(g, level, blk, *kw)
        if H is None:
            H = np.zeros((N, h.shape[1]))
            known = None if kn is None else np.zeros((N, kn.shape[1]), dtype=bool)
        H[sel], row_at[sel] = h, offset + at
        if kn is not None:
            known[sel] = kn
        for rs, rw in found_pieces:
            pieces.append((rs, rw))
            offset += int(rs.shape[0]) * L
    every = _Block(level.ids[canon], level.starts[canon], lens[canon], 0)
    kids = _accept(g, every, H[canon], None if known is None else known[canon])
    if kids is None:
        return _Level(np.zeros(0, np.int64), np.zeros(0, np.int64), None, None)
    cids, rows, shift = kids
    xp = g.xp
    samp = xp.concat([xp.reshape(rs, (-1,)) for rs, _ in pieces])
    sampw = xp.concat([xp.reshape(rw, (-1,)) for _, rw in pieces])
    return _Level(cids, row_at[canon][rows] + shift, samp, sampw)


def _level_draws(g, ids, lens):
    """The level's node order (positions into ``ids``) and the random numbers
    of its nodes, drawn from each node's tree generator in that order: the
    feature-subset keys (forests) and the random splitter's uniforms, as
    blocks of :func:`_class_len` nodes drew them one block after another."""
    keys = np.empty((len(ids), g.d)) if g.subset else None
    U = np.empty((len(ids), g.d), dtype=np.int64)
    U = U if g.params.splitter == "random" else None
    plan = _plan(lens, g.m, g.budget, block_len=_class_len)
    canon = np.concatenate([sel for sel, _ in plan])
    if U is None:  # one kind of draw: each tree's rows in one call, the same
        # numbers as block after block (a generator's doubles come in sequence)
        plan = [(canon, 0)]
    for sel, _ in plan:
        if keys is not None:
            keys[sel] = _node_draws(g, ids[sel], lambda r, k: r.random((k, g.d)))
        if U is not None:  # integer multiples of 2^-53: they travel in the int upload
            U[sel] = _node_draws(
                g, ids[sel], lambda r, k: r.integers(0, 1 << 53, size=(k, g.d))
            )
    return canon, (keys, U)


def _node_draws(g, ids, draw):
    """``draw(generator, k)`` rows for the nodes ``ids``, each from its tree's
    generator (the same on every backend)."""
    trees = g.table["tree"][ids]
    out = None
    for t in np.unique(trees):
        rows = np.nonzero(trees == t)[0]
        got = draw(g.rngs[t], len(rows))
        if out is None:
            out = np.empty((len(ids),) + got.shape[1:], dtype=got.dtype)
        out[rows] = got
    return out


def _search_block(g, level, blk, keys=None, U=None):
    """Best split of every node of a block (host summary, one row per node),
    the nodes' known-constant features, and the device rows of entries sorted
    along the chosen feature, with each node's offset in them.

    Forest nodes whose drawn features hold constant ones re-draw those slots
    and are searched again (only they), until no slot can be replaced.
    ``keys`` and ``U``: the nodes' random numbers (:func:`_level_draws`)."""
    nb, L = len(blk.ids), blk.L
    draw = _Draw(g, blk, keys) if g.subset else None
    rows = np.arange(nb)
    h, pieces, size = None, [], 0
    row_at = np.zeros(nb, dtype=np.int64)
    while True:
        F = None if draw is None else draw.F[rows]
        Ur = None if U is None else U[rows]
        hr, rs, rw = _block_round(g, level, blk.rows(rows), F, Ur)
        if h is None:
            h = np.zeros((nb, hr.shape[1]))
        h[rows] = hr
        pieces.append((rs, rw))
        row_at[rows] = size + np.arange(len(rows)) * L
        size += len(rows) * L
        if draw is None:
            return h, None, pieces, row_at
        rows = draw.replace_constant(rows, hr[:, hr.shape[1] - g.m :] > 0)
        if not len(rows):
            return h[:, : h.shape[1] - g.m], draw.known, pieces, row_at
        g.stats["redraws"] += 1


def _block_round(g, level, blk, F, U):
    """One search of a block on the device: one upload (entry starts and
    counts, drawn features, random splitter's uniforms; node means for
    regression), one download."""
    xp = g.xp
    dev = device(level.samp)
    cols = [blk.starts[:, None], blk.lens[:, None]] + ([] if F is None else [F])
    weighed = g.params.min_weight_leaf > 0
    cols += [g.table["tree"][blk.ids][:, None]] if weighed else []
    cols += [] if U is None else [U]
    aux = xp.asarray(np.concatenate(cols, axis=1).astype(np.int64), device=dev)
    ent = _gather_block(g, level, aux, blk.L, blk.ids)
    if g.params.criterion == "absolute_error":
        ent = _rank_targets(g, ent)
    ent = dataclasses.replace(ent, chan=_channels(g, ent))
    if weighed:  # each child's least weight: a fraction of its tree's weight
        tree = aux[:, 2 + (0 if F is None else g.m)]
        mw = g.params.min_weight_leaf * xp.take(g.W_dev, tree)
        ent = dataclasses.replace(ent, mw=mw)
    if U is not None:
        u = xp.astype(aux[:, int(aux.shape[1]) - g.d :], g.Xflat.dtype) * 2.0**-53
        ent = dataclasses.replace(ent, u=u)
        if g.missing:  # the uniform's lowest bit draws where missing values go
            ent = dataclasses.replace(
                ent, uleft=aux[:, int(aux.shape[1]) - g.d :] % 2 == 1
            )
    nb = len(blk.ids)
    if F is None:  # every feature, searched in chunks that fit the budget
        Fd = xp.broadcast_to(xp.arange(g.d, device=dev)[None, :], (nb, g.d))
        vals, extra = None, []
    else:
        Fd = aux[:, 2 : 2 + g.m]
        vals, extra = _gather_features(g, ent, Fd), []
    res, const = _best_split(g, ent, Fd, vals, _chunk(g, nb * blk.L))
    if F is not None:
        extra = [xp.astype(const, g.Xflat.dtype)]
    score, feat, p, thr = res[:4]
    if g.missing:
        rs, rw, cols = _children_stats(g, ent, feat, p, *res[4:])
    else:  # the chosen feature's order (and its class sums), from the search
        rs, rw, cols = _children_stats(g, ent, feat, p, order=res[4], sums=res[5])
    dtype = g.Xflat.dtype
    head = xp.stack([score, xp.astype(feat, dtype), xp.astype(p, dtype), thr], axis=1)
    if g.missing:  # where missing values go: the last column before ``extra``
        cols = cols + [xp.astype(res[4], dtype)[:, None]]
    packed = xp.concat([head] + [xp.astype(c, dtype) for c in cols] + extra, axis=1)
    return np.asarray(to_numpy(packed), dtype=np.float64), rs, rw


def _gather_block(g, level, aux, L, ids):
    """Each node's entries as one row of an (nb, L) block, padded with the
    sentinel sample (weight 0)."""
    xp = g.xp
    nb = int(aux.shape[0])
    dev = device(aux)
    st_d, ln_d = aux[:, 0], aux[:, 1]
    pos = xp.arange(L, dtype=st_d.dtype, device=dev)
    valid = pos[None, :] < ln_d[:, None]
    gi = xp.reshape(
        xp.where(valid, st_d[:, None] + pos[None, :], xp.zeros_like(st_d)[:, None]),
        (-1,),
    )
    sids = xp.where(valid, xp.reshape(xp.take(level.samp, gi), (nb, L)), g.sentinel)
    ws = xp.where(
        valid,
        xp.reshape(xp.take(level.sampw, gi), (nb, L)),
        xp.zeros((nb, L), dtype=level.sampw.dtype, device=dev),
    )
    mean = None
    if not g.params.classification:
        mu = g.table["stats"][ids, 0]
        if g.params.multi:
            mu = g.table["stats"][ids, : g.params.n_outputs]
        mean = xp.asarray(mu, dtype=g.Xflat.dtype, device=dev)
    return _Entries(sids, ws, ln_d, valid, mean)


def _gather_features(g, ent, F):
    """Ranks (nb·m·L,) of the drawn features ``F`` (nb, m) at the block's
    entries (:func:`_rank_tables`)."""
    xp = g.xp
    nb, L = ent.sids.shape
    m = int(F.shape[1])
    idx = xp.reshape(ent.sids, (nb, 1, L)) + xp.reshape(F * g.n_ranks, (nb, m, 1))
    return xp.take(g.Rflat, xp.reshape(idx, (-1,)))


def _constant(g, ent, F, rk):
    """Which features ``F`` (nb, f) are constant in the node (nb, f), from
    their sorted ranks ``rk`` (nb, f, L): the node's entries come first
    (padding holds the largest rank at later positions), so its least and
    largest ranks sit at positions 0 and ``len - 1``."""
    xp = g.xp
    nb, f, L = (int(n) for n in rk.shape)
    last = xp.reshape(ent.lens - 1, (nb, 1, 1))
    last = xp.astype(xp.broadcast_to(last, (nb, f, 1)), xp.int64)
    top = xp.take_along_axis(rk, last, axis=-1)[..., 0]
    fo = xp.astype(F, xp.int64) * g.n_ranks
    hi = xp.take(g.XS, xp.reshape(fo + xp.astype(top, xp.int64), (-1,)))
    lo = xp.take(g.XS, xp.reshape(fo + xp.astype(rk[..., 0], xp.int64), (-1,)))
    return xp.reshape(hi <= lo + FEATURE_THRESHOLD, (nb, f))


class _Draw:
    """The random feature subsets of a block's nodes (host): the first ``m``
    non-constant features of a random order per node (scikit-learn's rule:
    constant features do not use up the draw). Features already known to be
    constant in the node (inherited from its parent) go to the end of the
    order; a drawn feature found constant is replaced by the next of the order."""

    def __init__(self, g, blk, keys):
        d, m = g.d, g.m
        self.known = g.table["const"][blk.ids].copy()
        self.order = np.argsort(keys + 2.0 * self.known, axis=1, kind="stable")
        self.F = self.order[:, :m].copy()
        self.nxt = np.full(len(blk.ids), m)
        self.free = d - self.known.sum(axis=1)

    def replace_constant(self, rows, const):
        """Record the constant slots ``const`` (len(rows), m) found for
        ``rows``; re-draw them in slot order while unknown features remain.
        Returns the rows whose features changed."""
        Fr = self.F[rows]
        r2 = np.broadcast_to(rows[:, None], Fr.shape)
        self.known[r2[const], Fr[const]] = True
        need = np.minimum(
            const.sum(axis=1), np.maximum(self.free[rows] - self.nxt[rows], 0)
        )
        for i in np.nonzero(need)[0]:
            b, k = rows[i], need[i]
            slots = np.nonzero(const[i])[0][:k]
            self.F[b, slots] = self.order[b, self.nxt[b] : self.nxt[b] + k]
            self.nxt[b] += k
        return rows[need > 0]


# ------------------------------------------------------------- split search
def _xlogx(c, xp):
    return c * xp.log(xp.where(c > 0, c, xp.ones_like(c)))


def _chunk(g, row):
    """Features searched together in a block whose nodes hold ``row`` entries
    in all: the work arrays fit the memory budget, and on a host library
    (NumPy) stay about cache-sized, as each array pass is memory-bound there
    (the same splits: chunks only change how the search is cut)."""
    cap = g.budget
    if is_numpy_namespace(g.xp):
        cap = min(cap, _HOST_WORK_ELEMENTS)
    return max(1, cap // max(1, row))


def _best_split(g, ent, F, vals, chunk):
    """:func:`_search` over the candidate features ``F`` (nb, f) in chunks of
    ``chunk``, keeping the first best (ties go to the earlier feature).
    ``vals`` (nb·f·L,), when given, holds the features' ranks at the entries.
    Also returns which features are constant in the node (nb, f), for drawn
    features (forests; None otherwise)."""
    xp = g.xp
    nb, L = ent.sids.shape
    m = int(F.shape[1])
    v3 = None if vals is None else xp.reshape(vals, (nb, m, L))
    best, const = None, []
    for a in range(0, m, chunk):
        b = min(m, a + chunk)
        vc = None
        if v3 is not None:
            vc = vals if b - a == m else xp.reshape(v3[:, a:b, :], (-1,))
        *res, c = _search(g, ent, F[:, a:b], vc)
        const.append(c)
        if best is None:
            best = res
        else:
            better = res[0] > best[0]
            best = tuple(
                None
                if r is None
                else xp.where(xp.reshape(better, (-1,) + (1,) * (r.ndim - 1)), r, b)
                for r, b in zip(res, best)
            )
    return tuple(best), None if const[0] is None else xp.concat(const, axis=1)


def _channels(g, ent):
    """Per-entry quantities the split search accumulates, one row each of a
    (C, nb·L) array: the weight ``w``, then ``w·[y = k]`` for the classes but
    the last (classification) or ``w·(y − ȳ_node)`` (regression). Formed once
    per block at the node entries, then gathered in sorted order in one take."""
    xp = g.xp
    nb, L = ent.sids.shape
    ws = xp.reshape(ent.ws, (-1,))
    if g.params.multi:
        return _channels_multi(g, ent, ws)
    ys = xp.take(g.y, xp.reshape(ent.sids, (-1,)))
    if g.params.classification:
        zero = xp.zeros_like(ws)
        rows = [ws] + [
            xp.where(ys == k, ws, zero) for k in range(g.params.n_classes - 1)
        ]
    else:
        yc = xp.reshape(ys, (nb, L)) - ent.mean[:, None]
        rows = [ws, ws * xp.reshape(yc, (-1,))]
        if ent.yrank is not None:  # exact as a float below 2^24 entries per node
            rows.append(xp.astype(xp.reshape(ent.yrank, (-1,)), ws.dtype))
    return xp.stack(rows)


def _sorted_columns(g, ent, F, ranks):
    """Values of features ``F`` (nb, f), each row sorted by value (nb, f, L),
    the block's channels (:func:`_channels`) in the same order (C, nb, f, L)
    and that order (nb, f, L): positions in the node's row, and the ranks
    in that order (nb, f, L). ``ranks`` (nb·f·L,), when given, holds the
    features' ranks at the entries (:func:`_rank_tables`)."""
    xp = g.xp
    nb, L = ent.sids.shape
    f = int(F.shape[1])
    if ranks is None:
        gidx = xp.reshape(ent.sids, (nb, 1, L)) + xp.reshape(F * g.n_ranks, (nb, f, 1))
        ranks = xp.take(g.Rflat, xp.reshape(gidx, (-1,)))
    perm, rk = _sort_by_rank(g, xp.reshape(ranks, (nb, f, L)), L)
    at = rk + xp.reshape(F * g.n_ranks, (nb, f, 1))
    xs = xp.reshape(xp.take(g.XS, xp.reshape(at, (-1,))), (nb, f, L))
    chans = xp.take(ent.chan, _flat_rows(perm, nb, L, xp), axis=1)
    return xs, xp.reshape(chans, (int(chans.shape[0]), nb, f, L)), perm, rk


def _class_scores(g, cum, wlr):
    """Gini / entropy proxy at every position (maximised): Σ_k c_Lk²/W_L +
    Σ_k c_Rk²/W_R, or Σ c log c − W log W over both children; ``cum`` holds
    the cumulative class weights ``c_Lk`` of every class but the last."""
    params = g.params
    score = dispatch("tree.class_scores", g.xp)
    return score(
        cum,
        *wlr,
        n_classes=params.n_classes,
        gini=params.criterion == "gini",
        missing=g.missing,
        xp=g.xp,
    )


@portable("tree.class_scores")
def _class_scores_portable(cum, wl, wr, /, *, n_classes, gini, missing, xp):
    acc_l = acc_r = None
    rest_l, rest_r = wl, wr
    for k in range(n_classes):
        if k < n_classes - 1:
            ck = cum[k, ...]
            rk = ck[..., -1:] - ck
            rest_l, rest_r = rest_l - ck, rest_r - rk
        else:  # the last class's counts are what the others leave
            ck, rk = rest_l, rest_r
        if gini:
            tl, tr = ck * ck, rk * rk
        else:
            tl, tr = _xlogx(ck, xp), _xlogx(rk, xp)
        acc_l = tl if acc_l is None else acc_l + tl
        acc_r = tr if acc_r is None else acc_r + tr
    if gini:
        one = xp.ones_like(wl)
        return acc_l / xp.where(wl > 0, wl, one) + acc_r / xp.where(wr > 0, wr, one)
    if missing:  # each child's terms together: the mirrored placements of
        # the missing values score exactly equal (the right one wins, as scikit-learn)
        return (acc_l - _xlogx(wl, xp)) + (acc_r - _xlogx(wr, xp))
    return acc_l + acc_r - _xlogx(wl, xp) - _xlogx(wr, xp)


def _class_scores_example():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, (2, 3, 9))
    w = rng.integers(0, 3, (2, 3, 9)).astype(np.float64)
    w[..., -2:] = 0.0  # padding: nothing on the right of the last entries
    cum = np.cumsum(np.stack([w * (y == 0), w * (y == 1)]), axis=-1)
    wl = np.cumsum(w, axis=-1)
    wr = wl[..., -1:] - wl
    return (cum, wl, wr), {"n_classes": 3, "gini": True, "missing": False, "xp": np}


@fast_path("tree.class_scores", "numpy", example=_class_scores_example)
def _class_scores_numpy(cum, wl, wr, /, *, n_classes, gini, missing, xp):
    """The Gini proxy in a few reused buffers, each operation as the portable
    one's (the same scores bit for bit)."""
    if not gini or n_classes < 2:
        return _class_scores_portable(
            cum, wl, wr, n_classes=n_classes, gini=gini, missing=missing, xp=xp
        )
    tmp = np.empty_like(wl)
    acc_l = acc_r = rest_l = rest_r = None
    for k in range(n_classes - 1):
        ck = cum[k, ...]
        rk = np.subtract(ck[..., -1:], ck)
        rest_l = np.subtract(wl if rest_l is None else rest_l, ck, out=rest_l)
        rest_r = np.subtract(wr if rest_r is None else rest_r, rk, out=rest_r)
        if acc_l is None:
            acc_l, acc_r = np.multiply(ck, ck), np.multiply(rk, rk, out=rk)
        else:
            acc_l += np.multiply(ck, ck, out=tmp)
            acc_r += np.multiply(rk, rk, out=rk)
    acc_l += np.multiply(rest_l, rest_l, out=rest_l)
    acc_r += np.multiply(rest_r, rest_r, out=rest_r)
    # x / where(w > 0, w, 1): where w <= 0 the quotient is x itself
    np.divide(acc_l, wl, out=acc_l, where=np.greater(wl, 0))
    np.divide(acc_r, wr, out=acc_r, where=np.greater(wr, 0))
    return np.add(acc_l, acc_r, out=acc_l)


def _sse_scores(g, s1, wlr):
    """Variance proxy (maximised): S_L²/W_L + S_R²/W_R, ``s1`` the cumulative
    weighted sums of ``y − ȳ_node`` (centred per node: no cancellation)."""
    xp = g.xp
    wl, wr = wlr
    r1 = s1[..., -1:] - s1
    one = xp.ones_like(wl)
    return s1 * s1 / xp.where(wl > 0, wl, one) + r1 * r1 / xp.where(wr > 0, wr, one)


def _poisson_scores(g, s, wlr):
    """Half Poisson deviance proxy (maximised, scikit-learn's):
    S_L log(S_L/W_L) + S_R log(S_R/W_R) with ``s`` the cumulative weighted
    sums of ``y``; −inf where a child's mean is not above EPSILON (its
    deviance would be infinite)."""
    xp = g.xp
    wl, wr = wlr
    r = s[..., -1:] - s
    one = xp.ones_like(wl)
    ml, mr = s / xp.where(wl > 0, wl, one), r / xp.where(wr > 0, wr, one)
    score = _xlogx(ml, xp) * wl + _xlogx(mr, xp) * wr
    ninf = xp.full((), -xp.inf, dtype=score.dtype, device=device(score))
    return xp.where((ml > EPSILON) & (mr > EPSILON), score, ninf)


def _rank_targets(g, ent):
    """The block's entries with each node's ``y`` ranks and sorted ``y``
    (padding entries rank among them with weight 0)."""
    xp = g.xp
    nb, L = ent.sids.shape
    ys = xp.reshape(xp.take(g.y, xp.reshape(ent.sids, (-1,))), (nb, L))
    yrank, ysorted = rank_rows(ys, xp=xp)
    return dataclasses.replace(ent, yrank=yrank, ysorted=ysorted)


def _abs_error_scores(g, ent, chans):
    """Absolute-error proxy (maximised, scikit-learn's): −(SAE_L + SAE_R) with
    ``SAE = Σ w |y − median|`` of each child, for every prefix and suffix of
    the sorted rows at once (:mod:`xpml.tree._median`; ``y`` centred per node)."""
    xp = g.xp
    _, nb, f, L = (int(n) for n in chans.shape)
    rank = xp.astype(chans[2, ...], ent.yrank.dtype)
    k = xp.arange(L, dtype=rank.dtype, device=device(rank))
    lo = xp.broadcast_to(xp.concat([xp.zeros_like(k), k + 1]), (nb, f, 2 * L))
    hi = xp.broadcast_to(xp.concat([k + 1, xp.full_like(k, L)]), (nb, f, 2 * L))
    yc = ent.ysorted - ent.mean[:, None]
    sae, _, _ = range_abs_errors(rank, chans[0, ...], yc, lo, hi, xp=xp)
    # splits whose errors agree to 2^-32 of the node's are ties (exact ties are
    # common and rounding would pick among them): the first is kept, as
    # scikit-learn keeps the first of equal errors
    q = sae[..., L - 1 : L] * 2.0**-32  # the whole node: the last prefix
    q = xp.where(q > 0, q, xp.ones_like(q))
    return -xp.round((sae[..., :L] + sae[..., L:]) / q) * q


def _abs_error_children(g, ent, flat, rw, p):
    """Both children's weights, scikit-learn medians and ``Σ w |y − median|``
    (nb, 6): ``[W_L, median_L, SAE_L, W, median_R, SAE_R]``; ``flat`` sorts the
    block's entries along the chosen features, the left child holds ``0..p``."""
    xp = g.xp
    nb, L = rw.shape
    rank = xp.reshape(xp.take(xp.reshape(ent.yrank, (-1,)), flat), (nb, 1, L))
    p1 = xp.reshape(xp.astype(p, rank.dtype) + 1, (nb, 1, 1))
    lo = xp.concat([xp.zeros_like(p1), p1], axis=-1)
    hi = xp.concat([p1, xp.full_like(p1, L)], axis=-1)
    yc = ent.ysorted - ent.mean[:, None]
    sae, t, t_hi = range_abs_errors(
        rank, rw[:, None, :], yc, lo, hi, xp=xp, midpoint=True
    )
    med = median_of(ent.ysorted, t, t_hi, xp=xp)  # raw y: scikit-learn's values
    pos = xp.arange(L, dtype=rank.dtype, device=device(rank))
    wl = xp.sum(xp.where(pos[None, :] < p1[:, 0, :], rw, xp.zeros_like(rw)), axis=1)
    cols = [
        wl,
        med[:, 0, 0],
        sae[:, 0, 0],
        xp.sum(rw, axis=1),
        med[:, 0, 1],
        sae[:, 0, 1],
    ]
    return xp.stack(cols, axis=1)


def _search(g, ent, F, vals):
    """Best split among features ``F`` (nb, f) for a block of nb nodes.

    Returns device arrays (nb,): proxy score (−inf when no valid split), chosen
    feature, position ``p`` (the left child holds sorted positions ``0..p``)
    and threshold.
    """
    xp = g.xp
    xs, chans, perm, rk = _sorted_columns(g, ent, F, vals)
    const = _constant(g, ent, F, rk) if g.subset else None
    cum = xp.cumulative_sum(chans, axis=-1)
    if g.missing:
        return _search_missing(g, ent, F, xs, cum) + (const,)
    best, feat, p, thr, j = _pick(g, ent, F, xs, _scores(g, ent, cum, chans))
    # the chosen feature's order (nb, L), which the children are laid out in
    nb, f, L = (int(n) for n in perm.shape)
    row = xp.arange(nb, dtype=j.dtype, device=device(j)) * f + j  # (node, j) row
    order = xp.take(xp.reshape(perm, (nb * f, L)), row, axis=0)
    sums = None
    if g.params.classification and not g.params.multi:
        sums = _chosen_sums(cum, row * L, p, xp)
    return best, feat, p, thr, order, sums, const


def _chosen_sums(cum, at, p, xp):
    """The cumulative channels (C, nb, f, L) of each node's chosen feature at
    its split position ``p`` and at the row's end: (nb, 2C), the left child's
    sums then the node's (``at``: where the chosen row starts, flat)."""
    C = int(cum.shape[0])
    flat = xp.reshape(cum, (C, -1))
    left = xp.take(flat, at + p, axis=1)
    whole = xp.take(flat, at + (int(cum.shape[-1]) - 1), axis=1)
    return xp.permute_dims(xp.concat([left, whole], axis=0), (1, 0))


def _scores(g, ent, cum, chans=None):
    """Proxy score of the split at every position of the cumulative channels
    ``cum`` (C, nb, f, L) whose last position holds the node totals (and the
    sorted channels ``chans`` themselves, which absolute error needs); −inf
    where a child is lighter than ``min_weight_leaf`` allows."""
    xp = g.xp
    wl = cum[0, ...]
    wr = wl[..., -1:] - wl
    if g.params.multi:
        score = _multi_scores(g, ent, cum, (wl, wr))
    elif g.params.classification:
        score = _class_scores(g, cum[1:, ...], (wl, wr))
    elif g.params.criterion == "poisson":
        score = _poisson_scores(g, cum[1, ...] + wl * ent.mean[:, None, None], (wl, wr))
    elif g.params.criterion == "absolute_error":
        score = _abs_error_scores(g, ent, chans)
    else:
        score = _sse_scores(g, cum[1, ...], (wl, wr))
    if ent.mw is not None:
        mw = xp.reshape(ent.mw, (-1, 1, 1))
        ninf = xp.full((), -xp.inf, dtype=score.dtype, device=device(score))
        score = xp.where((wl >= mw) & (wr >= mw), score, ninf)
    return score


def _search_missing(g, ent, F, xs, cum):
    """:func:`_search` when ``X`` holds NaN (scikit-learn's rule). Missing
    values, stored as +inf, sort into one run after a row's other real values
    (and before the padding), so every threshold is scored twice from the same
    cumulative sums: with the missing values on the right (the plain scores;
    the position before the run is the split "non-missing | missing", of
    threshold +inf) and on the left (the run's channel totals moved to the
    left side). Also returns whether missing values go left (nb,) and, for a
    left split, ``p`` counts the missing run (the children's layout in
    :func:`_children_stats`)."""
    xp = g.xp
    nb, f, L = xs.shape
    C = int(cum.shape[0])
    ln = xp.reshape(ent.lens, (nb, 1))
    nmiss = xp.sum(xp.astype(xp.isinf(xs), ent.lens.dtype), axis=-1) - (L - ln)
    last = ln - 1 - nmiss  # the last non-missing entry (−1: all missing)
    rows = xp.reshape(xp.arange(nb * f, dtype=last.dtype, device=device(xs)), (nb, f))
    at = xp.reshape(rows * L + xp.where(last >= 0, last, xp.zeros_like(last)), (-1,))
    before = xp.take(xp.reshape(cum, (C, nb * f * L)), at, axis=1)
    before = xp.where(xp.reshape(last >= 0, (1, -1)), before, xp.zeros_like(before))
    run = cum[..., -1:] - xp.reshape(before, (C, nb, f, 1))
    shifted = xp.concat([cum[..., :-1] + run, cum[..., -1:]], axis=-1)
    scores = (_scores(g, ent, cum), _scores(g, ent, shifted))
    return _pick_missing(g, ent, (F, xs, nmiss), scores)


def _pick_missing(g, ent, cols, scores):
    """:func:`_pick` over both placements of the missing values ``scores``
    (right, left); within a feature the right placement's positions come
    first (ties go to them, scikit-learn's order)."""
    xp = g.xp
    F, xs, nmiss = cols
    nb, f, L = xs.shape
    dev = device(xs)
    ln = xp.reshape(ent.lens, (nb, 1, 1))
    nm = nmiss[..., None]
    p3 = xp.reshape(xp.arange(L - 1, dtype=ent.lens.dtype, device=dev), (1, 1, L - 1))
    msl = g.params.min_samples_leaf
    x0, x1 = xs[..., :-1], xs[..., 1:]
    if ent.u is None:
        cut = x1 > x0 + FEATURE_THRESHOLD
    else:
        cut, t = _random_cut(g, ent, F, xs, nmiss)
    ok_r = cut & (p3 <= ln - 2) & (p3 + 1 >= msl) & (ln - 1 - p3 >= msl)
    ok_l = cut & (nm > 0) & xp.isfinite(x1)
    ok_l &= (p3 + 1 + nm >= msl) & (ln - 1 - p3 - nm >= msl)
    if ent.uleft is not None:  # the random splitter draws the missing side
        go_l = xp.take_along_axis(ent.uleft, F, axis=-1)[..., None] & (nm > 0)
        ok_r, ok_l = ok_r & ~go_l, ok_l & go_l
    ninf = xp.full((), -xp.inf, dtype=scores[0].dtype, device=dev)
    both = [
        xp.where(ok, s[..., :-1], ninf)
        for ok, s in ((ok_r, scores[0]), (ok_l, scores[1]))
    ]
    score2 = xp.reshape(xp.concat(both, axis=-1), (nb, f * 2 * (L - 1)))
    bi = xp.argmax(score2, axis=-1)
    best = xp.take_along_axis(score2, bi[:, None], axis=-1)[:, 0]
    j, r = bi // (2 * (L - 1)), bi % (2 * (L - 1))
    left, p = r >= L - 1, r % (L - 1)
    at = xp.arange(nb, dtype=j.dtype, device=dev) * (f * L) + j * L + p
    xs_flat = xp.reshape(xs, (-1,))
    v0, v1 = xp.take(xs_flat, at), xp.take(xs_flat, at + 1)
    thr = v0 / 2 + v1 / 2
    thr = xp.where((thr == v1) | xp.isinf(thr) | xp.isnan(thr), v0, thr)
    if ent.u is None:  # "non-missing | missing": every real value goes left
        thr = xp.where(
            xp.isinf(v1), xp.full((), xp.inf, dtype=thr.dtype, device=dev), thr
        )
    else:
        thr = xp.take_along_axis(t, j[:, None], axis=-1)[:, 0]
    feat = xp.take_along_axis(F, j[:, None], axis=-1)[:, 0]
    nmj = xp.take_along_axis(nmiss, j[:, None], axis=-1)[:, 0]
    # no missing value of the feature in the node: they will go to the larger child
    go_left = xp.where(nmj > 0, left, p + 1 > ent.lens - 1 - p)
    return best, feat, xp.where(left, p + nmj, p), thr, go_left


def _pick(g, ent, F, xs, score):
    """Mask invalid positions (not between distinct neighbours, or a child
    smaller than ``min_samples_leaf``) and take each node's best. The last
    position of a row (nothing on its right) is never scored: the search runs
    over positions ``0..L-2``."""
    xp = g.xp
    nb, f, L = xs.shape
    dev = device(xs)
    msl = g.params.min_samples_leaf
    if ent.u is None:
        best_at = dispatch("tree.best_position", xp)
        best, j, p = best_at(score, xs, ent.lens, msl=msl, gap=FEATURE_THRESHOLD, xp=xp)
    else:
        cut, t = _random_cut(g, ent, F, xs)
        best, j, p = _best_position(score, cut, ent.lens, msl=msl, xp=xp)
    feat = xp.take_along_axis(F, j[:, None], axis=-1)[:, 0]
    at = xp.arange(nb, dtype=j.dtype, device=dev) * (f * L) + j * L + p
    xs_flat = xp.reshape(xs, (-1,))
    x0, x1 = xp.take(xs_flat, at), xp.take(xs_flat, at + 1)
    thr = x0 / 2 + x1 / 2
    thr = xp.where((thr == x1) | xp.isinf(thr) | xp.isnan(thr), x0, thr)
    if ent.u is not None:  # the drawn threshold, not the midpoint
        thr = xp.take_along_axis(t, j[:, None], axis=-1)[:, 0]
    return best, feat, p, thr, j


def _best_position(score, cut, lens, /, *, msl, xp):
    """Each node's best score (nb,) over its features and positions
    ``0..L-2`` (nb, f, L) where ``cut`` (nb, f, L-1) allows a split and both
    children keep ``msl`` entries; the first best wins. Returns it, its
    feature slot ``j`` and position ``p``."""
    nb, f, L = (int(n) for n in score.shape)
    dev = device(score)
    ln = xp.reshape(lens, (nb, 1, 1))
    p3 = xp.reshape(xp.arange(L - 1, dtype=lens.dtype, device=dev), (1, 1, L - 1))
    ok = (p3 <= ln - 2) & (p3 + 1 >= msl) & (ln - 1 - p3 >= msl)
    ninf = xp.full((), -xp.inf, dtype=score.dtype, device=dev)
    score2 = xp.reshape(xp.where(ok & cut, score[..., :-1], ninf), (nb, f * (L - 1)))
    bi = xp.argmax(score2, axis=-1)
    best = xp.take_along_axis(score2, bi[:, None], axis=-1)[:, 0]
    return best, bi // (L - 1), bi % (L - 1)


@portable("tree.best_position")
def _best_position_portable(score, keys, lens, /, *, msl, gap, xp):
    """:func:`_best_position` where neighbours of the sorted ``keys`` (nb, f,
    L) differ by more than ``gap``. ``score`` is scratch: the NumPy twin
    overwrites it."""
    cut = keys[..., 1:] > keys[..., :-1] + gap
    return _best_position(score, cut, lens, msl=msl, xp=xp)


def _best_position_example():
    rng = np.random.default_rng(1)
    score = rng.random((3, 2, 8))
    score[0, 1, 3] = score[0, 0, 5] = 2.0  # a tie: the first one wins
    keys = np.sort(np.round(rng.random((3, 2, 8)), 1), axis=-1)
    keys[2] = 0.5  # a node with no split: every position masked
    lens = np.array([8, 6, 7])
    return (score, keys, lens), {"msl": 2, "gap": 1e-7, "xp": np}


@fast_path("tree.best_position", "numpy", example=_best_position_example)
def _best_position_numpy(score, keys, lens, /, *, msl, gap, xp):
    """The masking done in place in ``score`` (its last position too, so the
    argmax runs over the whole row): the same values and the same first best."""
    nb, f, L = score.shape
    cut = np.empty((nb, f, L - 1), dtype=bool)
    if gap:
        np.greater(keys[..., 1:], np.add(keys[..., :-1], gap), out=cut)
    else:
        np.greater(keys[..., 1:], keys[..., :-1], out=cut)
    ln = lens.reshape(nb, 1, 1)
    p3 = np.arange(L - 1, dtype=lens.dtype)
    cut &= (p3 <= ln - 2) & (p3 + 1 >= msl) & (ln - 1 - p3 >= msl)
    np.copyto(score[..., :-1], -np.inf, where=np.logical_not(cut, out=cut))
    score[..., -1] = -np.inf
    flat = score.reshape(nb, f * L)
    bi = np.argmax(flat, axis=-1)
    return flat[np.arange(nb), bi], bi // L, bi % L


def _random_cut(g, ent, F, xs, nmiss=None):
    """scikit-learn's random splitter: a threshold ``t`` drawn uniformly
    between each feature's min and max in the node (the min when it lands on
    the max); the only position scored is the one ``t`` falls after. Constant
    features have none. Returns that mask over positions ``0..L-2``
    (nb, f, L-1) and ``t`` (nb, f)."""
    xp = g.xp
    nb, f, L = xs.shape
    dev = device(xs)
    uf = xp.take_along_axis(ent.u, F, axis=-1)
    last = xp.reshape(ent.lens - 1, (nb, 1)) + xp.zeros(
        (nb, f), dtype=ent.lens.dtype, device=dev
    )
    if nmiss is not None:  # the range of the non-missing values (+inf at the end)
        last = xp.where(last >= nmiss, last - nmiss, xp.zeros_like(last))
    rows = xp.reshape(xp.arange(nb * f, dtype=last.dtype, device=dev), (nb, f)) * L
    lo = xs[..., 0]
    hi = xp.reshape(
        xp.take(xp.reshape(xs, (-1,)), xp.reshape(rows + last, (-1,))), (nb, f)
    )
    if nmiss is not None:  # a feature all missing (+inf) in the node: no range
        lo, hi = (xp.where(xp.isinf(v), xp.zeros_like(v), v) for v in (lo, hi))
    t = lo + uf * (hi - lo)
    t = xp.where(t >= hi, lo, t)
    t3 = t[..., None]
    cut = (xs[..., :-1] <= t3) & (xs[..., 1:] > t3)
    varies = hi > lo + FEATURE_THRESHOLD
    if nmiss is not None:  # constant non-missing values still split off the missing
        varies = (varies | (nmiss > 0)) & (xp.reshape(ent.lens, (nb, 1)) > nmiss)
    return cut & varies[..., None], t


def _children_stats(g, ent, feat, p, go_left=None, *, order=None, sums=None):
    """Sort each node's entries along its chosen feature; statistics of the
    left part (positions ``<= p``) and of the whole node. ``go_left`` (nb,):
    the node's missing values (+inf) sort first instead of last. ``order``
    (nb, L): that sort, when the search has it already; ``sums``
    (:func:`_chosen_sums`), the search's class sums along it."""
    xp, params = g.xp, g.params
    nb, L = ent.sids.shape
    dev = device(ent.sids)
    pos = xp.arange(L, dtype=ent.sids.dtype, device=dev)
    perm = order
    if order is None:
        idx = xp.reshape(ent.sids + feat[:, None] * g.n_ranks, (-1,))
        r = xp.reshape(xp.take(g.Rflat, idx), (nb, L)) + 1
        if go_left is not None:  # missing values (+inf, the sentinel's rank) first
            top = xp.take(g.Rflat, feat * g.n_ranks + (g.n_ranks - 1)) + 1
            first = ent.valid & (r == top[:, None]) & go_left[:, None]
            r = xp.where(first, xp.zeros_like(r), r)
        perm, _ = _sort_by_rank(g, r, L)  # a stable sort by value
    # flat gathers: cheaper than take_along_axis on NumPy, the same values
    flat = _flat_rows(perm, nb, L, xp)
    rs = xp.reshape(xp.take(xp.reshape(ent.sids, (-1,)), flat), (nb, L))
    rw = xp.reshape(xp.take(xp.reshape(ent.ws, (-1,)), flat), (nb, L))
    rwl = xp.where(pos[None, :] <= p[:, None], rw, xp.zeros_like(rw))
    if params.multi:
        return rs, rw, _children_sums_multi(g, ent, rs, (rwl, rw))
    ys = xp.reshape(xp.take(g.y, xp.reshape(rs, (-1,))), (nb, L))
    if sums is not None:
        return rs, rw, _class_sums(sums, ys, rw, p, K=params.n_classes, xp=xp)
    if params.classification:
        ks = xp.arange(params.n_classes, dtype=ys.dtype, device=dev)
        hit = ys[:, :, None] == ks[None, None, :]
        zero = xp.zeros((), dtype=rw.dtype, device=dev)
        cl = xp.sum(xp.where(hit, rwl[:, :, None], zero), axis=1)
        ct = xp.sum(xp.where(hit, rw[:, :, None], zero), axis=1)
        return rs, rw, [cl, ct]
    if params.criterion == "absolute_error":
        return rs, rw, [_abs_error_children(g, ent, flat, rw, p)]
    yc = ys - ent.mean[:, None]
    # the Poisson criterion needs Σ w y log y where squared error needs Σ w yc²
    sq = _xlogx(ys, xp) if params.criterion == "poisson" else yc * yc
    sums = [xp.sum(t, axis=1) for w in (rwl, rw) for t in (w, w * yc, w * sq)]
    return rs, rw, [xp.stack(sums, axis=1)]


def _class_sums(sums, ys, rw, p, *, K, xp):
    """Class weights of the left child and of the node, ``[cl, ct]`` (nb, K)
    each: classes ``0..K-2`` read from the search's cumulative sums, the
    last one accumulated here along the same order (sequential sums: the
    same values as summing the sorted row)."""
    C = int(sums.shape[1]) // 2
    last = xp.where(ys == K - 1, rw, xp.zeros_like(rw))
    cum = xp.cumulative_sum(last, axis=1)
    L = int(rw.shape[1])
    at = xp.arange(int(rw.shape[0]), dtype=p.dtype, device=device(rw)) * L
    flat = xp.reshape(cum, (-1,))
    cl_last = xp.take(flat, at + p)[:, None]
    ct_last = xp.take(flat, at + (L - 1))[:, None]
    cl = xp.concat([sums[:, 1:C], cl_last], axis=1)
    ct = xp.concat([sums[:, C + 1 :], ct_last], axis=1)
    return [cl, ct]


# --------------------------------------------------------------- acceptance
def _accept(g, blk, h, known):
    """Keep the splits whose weighted impurity decrease reaches
    ``min_impurity_decrease``: their children join the table. Returns the open
    children's ids, the block rows they come from and where they start in the
    row (0 for a left child, ``p + 1`` for a right one), or None."""
    table, params = g.table, g.params
    nid = blk.ids
    hp = h[:, 2].astype(np.int64)
    if params.multi:
        node_mean = table["stats"][nid, : params.n_outputs]
        stl, str_, wl, wr = _child_stats_host_multi(h[:, 4:], params, node_mean)
    else:
        stl, str_, wl, wr = _child_stats_host(
            h[:, 4:], params.n_classes, table["stats"][nid, 0], params.criterion
        )
    imp_l = _impurity_host(stl, wl, params)
    imp_r = _impurity_host(str_, wr, params)
    trees = table["tree"][nid]
    parent = table["W"][nid] * table["impurity"][nid]
    decrease = (parent - wl * imp_l - wr * imp_r) / g.W_root[trees]
    accept = np.isfinite(h[:, 0]) & (decrease + EPSILON >= params.min_impurity_decrease)
    if not accept.any():
        return None
    a = np.nonzero(accept)[0]
    c_n = _interleave(hp[a] + 1, blk.lens[a] - hp[a] - 1)
    c_stats = _interleave(stl[a], str_[a])
    c_W = _interleave(wl[a], wr[a])
    c_imp = _interleave(imp_l[a], imp_r[a])
    c_depth = np.repeat(table["depth"][nid[a]] + 1, 2)
    extra = {} if known is None else {"const": np.repeat(known[a], 2, axis=0)}
    cids = table.add(
        tree=np.repeat(trees[a], 2),
        depth=c_depth,
        n=c_n,
        W=c_W,
        stats=c_stats,
        impurity=c_imp,
        **extra,
    )
    pid = nid[a]
    table.cols["feature"][pid] = h[a, 1].astype(np.int64)
    table.cols["threshold"][pid] = h[a, 3]
    if g.missing:  # the device's choice (see _search_missing)
        table.cols["missing_left"][pid] = h[a, h.shape[1] - 1] > 0.5
    else:  # no missing value at fit: NaN will go to the child with more samples
        table.cols["missing_left"][pid] = hp[a] + 1 > blk.lens[a] - hp[a] - 1
    table.cols["left"][pid] = cids[0::2]
    table.cols["right"][pid] = cids[1::2]
    W_tree = np.repeat(g.W_root[trees[a]], 2)
    c_open = _splittable(
        c_depth, c_n, c_stats, c_W, c_imp, params=params, W_tree=W_tree
    )
    if not c_open.any():
        return None
    shift = _interleave(np.zeros(len(a), np.int64), hp[a] + 1)
    return cids[c_open], np.repeat(a, 2)[c_open], shift[c_open]


def _child_stats_host(h, K, node_mean, criterion="squared_error"):
    """Children's statistics from the packed device summary: class counts, or
    ``[mean, variance]`` from the sums of ``w``, ``w(y−ȳ)``, ``w(y−ȳ)²``
    (Poisson: ``[mean, Σ w y log y / W − ȳ log ȳ]`` from ``w y log y``)."""
    if K:
        cl, ct = h[:, :K], h[:, K : 2 * K]
        cr = np.maximum(ct - cl, 0.0)
        return cl, cr, cl.sum(1), cr.sum(1)
    if criterion == "absolute_error":  # [W_L, median_L, SAE_L, W, median_R, SAE_R]
        w_l, m_l, e_l, w_t, m_r, e_r = h[:, :6].T
        w_r = w_t - w_l
        left = np.stack([m_l, e_l / np.where(w_l > 0, w_l, 1.0)], 1)
        right = np.stack([m_r, e_r / np.where(w_r > 0, w_r, 1.0)], 1)
        return left, right, w_l, w_r
    w_l, s1l, s2l, w_t, s1t, s2t = h[:, :6].T
    out = []
    for w, s1, s2 in ((w_l, s1l, s2l), (w_t - w_l, s1t - s1l, s2t - s2l)):
        ws = np.where(w > 0, w, 1.0)
        mean = node_mean + s1 / ws
        if criterion == "poisson":
            xlx = mean * np.log(np.where(mean > 0, mean, 1.0))
            imp = s2 / ws - xlx
            # a constant node's two terms cancel to rounding noise, not 0
            noise = 16 * EPSILON * (np.abs(s2 / ws) + np.abs(xlx))
            imp = np.where(imp > noise, imp, 0.0)
        else:
            imp = np.maximum(s2 / ws - (s1 / ws) ** 2, 0)
        out.append(np.stack([mean, imp], 1))
    return out[0], out[1], w_l, w_t - w_l


# ------------------------------------------------------------ multi-output
# With ``params.n_outputs > 1`` the same node-block passes carry one set of
# channels per output: a node's statistics are the outputs' class counts one
# after another (classification; output ``o``'s codes are shifted by
# ``params.offsets[o]`` so one one-hot covers them all), or the outputs' means
# then the mean of their impurities (regression). A split's score is the sum
# of the outputs' proxies, and a node's impurity the mean of the outputs'
# impurities (scikit-learn's multi-output criteria).
def _multi_targets(y, params, xp):
    """``y`` (n, O) with the classification codes shifted per output and a
    zero row appended for the sentinel sample."""
    dev = device(y)
    if params.classification:
        off = xp.asarray(params.offsets[:-1], dtype=y.dtype, device=dev)
        y = y + off[None, :]
    return xp.concat([y, xp.zeros((1, params.n_outputs), dtype=y.dtype, device=dev)])


def _root_stats_multi(g, samp, sampw, starts, ends):
    """:func:`_root_stats` for several outputs (one download for all roots)."""
    xp, params = g.xp, g.params
    K = params.n_classes
    rows = []
    for s, e in zip(starts.tolist(), ends.tolist()):
        ys, w = xp.take(g.y, samp[s:e], axis=0), sampw[s:e]
        if K:
            ks = xp.arange(K, dtype=ys.dtype, device=device(ys))
            oh = xp.sum(xp.astype(ys[:, :, None] == ks[None, None, :], w.dtype), axis=1)
            rows.append(xp.sum(oh * w[:, None], axis=0))
            continue
        tw = xp.sum(w)
        # per output, the single-output reductions (same order on every library)
        mu = [xp.sum(w * ys[:, o]) / tw for o in range(params.n_outputs)]
        if params.criterion == "poisson":
            imp = [
                xp.sum(w * _xlogx(ys[:, o], xp)) / tw - _xlogx(m, xp)
                for o, m in enumerate(mu)
            ]
        else:
            imp = [xp.sum(w * (ys[:, o] - m) ** 2) / tw for o, m in enumerate(mu)]
        rows.append(xp.stack([tw] + mu + [xp.mean(xp.stack(imp))]))
    both = xp.stack(rows)
    K0 = params.class_counts[0] if K else 0
    g.W_dev = xp.sum(both[:, :K0], axis=1) if K else both[:, 0]
    h = np.asarray(to_numpy(both), dtype=np.float64)
    if K:
        return h, h[:, :K0].sum(axis=1)
    return h[:, 1:], h[:, 0].copy()


def _channels_multi(g, ent, ws):
    """:func:`_channels` for several outputs: ``w``, then each output's
    ``w·[y_o = k]`` (its classes but the last) or ``w·(y_o − ȳ_o)``."""
    xp, params = g.xp, g.params
    nb, L = ent.sids.shape
    ys = xp.take(g.y, xp.reshape(ent.sids, (-1,)), axis=0)
    rows = [ws]
    if params.classification:
        zero = xp.zeros_like(ws)
        for o, k0 in enumerate(params.offsets[:-1].tolist()):
            col = ys[:, o]
            rows += [
                xp.where(col == k0 + k, ws, zero)
                for k in range(params.class_counts[o] - 1)
            ]
        return xp.stack(rows)
    yc = xp.reshape(ys, (nb, L, params.n_outputs)) - ent.mean[:, None, :]
    yc = xp.reshape(yc, (nb * L, params.n_outputs))
    rows += [ws * yc[:, o] for o in range(params.n_outputs)]
    return xp.stack(rows)


def _multi_scores(g, ent, cum, wlr):
    """Sum over the outputs of each output's proxy (``cum``: the cumulative
    channels of :func:`_channels_multi`)."""
    params = g.params
    total = None
    for o in range(params.n_outputs):
        if params.classification:
            a = 1 + int(params.offsets[o]) - o  # each output drops its last class
            sub = _Scorer(g.xp, params.output(o), g.missing)
            s = _class_scores(sub, cum[a : a + params.class_counts[o] - 1, ...], wlr)
        elif params.criterion == "poisson":
            mean = ent.mean[:, o][:, None, None]
            s = _poisson_scores(g, cum[1 + o, ...] + wlr[0] * mean, wlr)
        else:
            s = _sse_scores(g, cum[1 + o, ...], wlr)
        total = s if total is None else total + s
    return total


@dataclasses.dataclass(frozen=True)
class _Scorer:
    """What :func:`_class_scores` reads of a growth: one output's parameters,
    and whether ``X`` holds NaN."""

    xp: Any
    params: GrowParams
    missing: bool = False


def _children_sums_multi(g, ent, rs, wlr):
    """The packed child statistics of :func:`_children_stats` for several
    outputs: class counts of the left part and the whole node, or the sums of
    ``w``, ``w(y_o−ȳ_o)``, ``w(y_o−ȳ_o)²`` (Poisson: ``w y_o log y_o``) of both."""
    xp, params = g.xp, g.params
    nb, L = rs.shape
    O = params.n_outputs
    ys = xp.reshape(xp.take(g.y, xp.reshape(rs, (-1,)), axis=0), (nb, L, O))
    rwl, rw = wlr
    if params.classification:
        ks = xp.arange(params.n_classes, dtype=ys.dtype, device=device(ys))
        oh = xp.sum(
            xp.astype(ys[:, :, :, None] == ks[None, None, None, :], rw.dtype), axis=2
        )
        return [
            xp.sum(oh * rwl[:, :, None], axis=1),
            xp.sum(oh * rw[:, :, None], axis=1),
        ]
    # per output, the single-output sums over (nb, L) rows: the same
    # summation order on every library
    yc = [ys[:, :, o] - ent.mean[:, o][:, None] for o in range(O)]
    if params.criterion == "poisson":
        sq = [_xlogx(ys[:, :, o], xp) for o in range(O)]
    else:
        sq = [c * c for c in yc]
    sums = []
    for w in (rwl, rw):
        sums += [xp.sum(w, axis=1)] + [xp.sum(w * t, axis=1) for t in yc + sq]
    return [xp.stack(sums, axis=1)]


def _child_stats_host_multi(h, params, node_mean):
    """:func:`_child_stats_host` for several outputs."""
    O, K = params.n_outputs, params.n_classes
    if K:
        cl, ct = h[:, :K], h[:, K : 2 * K]
        cr = np.maximum(ct - cl, 0.0)
        K0 = params.class_counts[0]
        return cl, cr, cl[:, :K0].sum(1), cr[:, :K0].sum(1)
    w = 1 + 2 * O
    # each output's [mean, impurity] of both children from its own sums
    per = [
        _child_stats_host(
            h[:, [0, 1 + o, 1 + O + o, w, w + 1 + o, w + 1 + O + o]],
            0,
            node_mean[:, o],
            params.criterion,
        )
        for o in range(O)
    ]

    def side(i):
        means = np.stack([p[i][:, 0] for p in per], axis=1)
        imp = np.mean([p[i][:, 1] for p in per], axis=0)
        return np.concatenate([means, imp[:, None]], axis=1)

    return side(0), side(1), per[0][2], per[0][3]


def _multi_values(stats, W, params):
    """Node values in scikit-learn's multi-output layout: (nodes, O, max K)
    class fractions (zero past an output's classes) or (nodes, O, 1) means."""
    O = params.n_outputs
    if not params.classification:
        return stats[:, :O, None].copy()
    frac = stats / np.where(W > 0, W, 1.0)[:, None]
    off = params.offsets
    value = np.zeros((len(stats), O, max(params.class_counts)))
    for o in range(O):
        value[:, o, : params.class_counts[o]] = frac[:, off[o] : off[o + 1]]
    return value


def _interleave(a, b):
    """``[a0, b0, a1, b1, ...]`` along the first axis."""
    out = np.empty((2 * len(a),) + a.shape[1:], dtype=np.result_type(a, b))
    out[0::2], out[1::2] = a, b
    return out


# ----------------------------------------------------------- block planning
def _class_len(n):
    """Node classes of the level's fixed order (:func:`_level_draws`): 2^k
    or 1.5·2^k, the least that holds ``n``."""
    n = np.maximum(n, 2)
    p = 1 << np.ceil(np.log2(n)).astype(np.int64)
    three_q = (3 * p) // 4
    return np.where((n <= three_q) & (p >= 4), three_q, p)


def _block_len(n):
    """Padded block length for nodes of ``n`` samples: the least of 2^k,
    1.25·2^k, 1.5·2^k, 1.75·2^k that holds them (at most a fifth of a block
    is padding past 8 entries; padding costs every pass of the search)."""
    n = np.maximum(n, 2)
    p = 1 << np.ceil(np.log2(n)).astype(np.int64)
    L = p
    for eighths in (7, 6, 5):  # 2^k·(5/4, 3/2, 7/4) with 2^k = p/2
        q = (eighths * p) // 8
        L = np.where((n <= q) & (p >= 8), q, L)
    return np.where((n <= (3 * p) // 4) & (p == 4), 3, L)


def _plan_blocks(lens, m, budget, *, fine=False):
    """Group nodes by padded length L (ascending) into blocks of at most
    ``budget // (L m)`` nodes: a list of (node positions, L) (:func:`_plan`).

    ``fine``: lengths of :func:`_block_len`, else of :func:`_class_len`.
    Regression keeps the coarser ones: its children's sums are pairwise
    sums along the padded rows, whose rounding depends on their length
    (classification's are sequential, the same at any length)."""
    return _plan(lens, m, budget, block_len=_block_len if fine else _class_len)


def _plan(lens, m, budget, *, block_len, merge=1 << 12):
    """Group nodes by padded length ``L = block_len(n)`` (ascending) into
    blocks of at most ``budget // (L m)`` nodes: a list of (node positions, L).

    A group of short nodes joins the next longer group when the padding this
    adds (``nodes · ΔL · m`` elements) costs less than one more block's fixed
    overhead (about ``merge`` elements of work)."""
    Ls = block_len(lens)
    order = np.argsort(Ls, kind="stable")
    Ls_sorted = Ls[order]
    # merge consecutive length groups while the extra padding stays small
    target = Ls_sorted.copy()
    groups = np.unique(Ls_sorted)
    start = 0
    ends = np.searchsorted(Ls_sorted, groups, side="left")  # where each group starts
    for g_next, end in zip(groups[1:].tolist(), ends[1:].tolist()):
        cnt = end - start  # the nodes shorter than g_next not yet in a group
        if cnt and cnt * (g_next - int(target[start:end].max())) * m <= merge:
            target[start:end] = g_next
        else:
            start = end
    # target is ascending: each run of one length, cut every nb_max nodes
    blocks, i, N = [], 0, len(order)
    while i < N:
        L = int(target[i])
        run_end = int(np.searchsorted(target, L, side="right"))
        j = min(run_end, i + max(1, budget // (L * m)))
        blocks.append((order[i:j], L))
        i = j
    return blocks


def _split_trees(table, R, params):
    tree_of = table["tree"]
    out = []
    for t in range(R):
        sel = np.nonzero(tree_of == t)[0]
        remap = np.full(table.size, -1, dtype=np.int64)
        remap[sel] = np.arange(len(sel))
        left, right = table["left"][sel], table["right"][sel]
        stats, W = table["stats"][sel], table["W"][sel]
        if params.multi:
            value = _multi_values(stats, W, params)
        elif params.classification:
            value = stats / np.where(W > 0, W, 1.0)[:, None]
        else:
            value = stats[:, 0].copy()
        out.append(
            {
                "feature": table["feature"][sel].copy(),
                "threshold": table["threshold"][sel].copy(),
                "children_left": np.where(left >= 0, remap[np.maximum(left, 0)], -1),
                "children_right": np.where(right >= 0, remap[np.maximum(right, 0)], -1),
                "value": value,
                "impurity": table["impurity"][sel].copy(),
                "n_node_samples": table["n"][sel].copy(),
                "weighted_n_node_samples": W.copy(),
                "missing_go_to_left": table["missing_left"][sel].copy(),
                "max_depth": int(table["depth"][sel].max()),
            }
        )
    return out


def segment_sum(ids, weights, n_bins, *, xp):
    """``out[b] = Σ weights[ids == b]`` (a portable ``bincount`` by sorting)."""
    order = xp.argsort(ids, stable=True)
    sid = xp.take(ids, order)
    cw = xp.cumulative_sum(xp.take(weights, order), include_initial=True)
    edges = xp.arange(n_bins + 1, dtype=sid.dtype, device=device(ids))
    bounds = xp.searchsorted(sid, edges)
    return xp.take(cw, bounds[1:]) - xp.take(cw, bounds[:-1])
