"""Fitted trees stacked for prediction: one routing table on the device.

The trees of an estimator (one tree, a forest, the members of a boosting or
bagging ensemble) are concatenated into one :class:`~xpml.tree._route.RoutingTable`
(children indices shifted, roots recorded) and their leaf values into one
array, built once and kept in the estimator's ``_cache_stack`` attribute
(not pickled but rebuilt at unpickling, with its routing caches; not saved
by ``xpml.save``: the first predict after ``xpml.load`` builds it). Prediction then walks all trees of a chunk at
once and never re-uploads a fitted array; the stack is rebuilt only when the
fitted arrays change (refit, pruning, load) or the call computes on another
namespace or device.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
from array_api_compat import array_namespace

from xpml._backend import move, to_numpy
from xpml.tree._route import (
    _ROUTE_ROW_BYTES,
    RoutingTable,
    _route_numpy,
    prepare_walk,
    reusable_walk,
    route,
)
from xpml.utils._array_api import (
    device,
    dispatch,
    fast_path,
    is_numpy_namespace,
    namespace_name,
    portable,
)

__all__ = [
    "TreeStack",
    "stack_trees",
    "cached_stack",
    "host_tree",
    "mark_stack",
    "restore_stack",
]

TREE_ARRAYS = (
    "feature",
    "threshold",
    "children_left",
    "children_right",
    "value",
    "impurity",
    "n_node_samples",
    "weighted_n_node_samples",
    "missing_go_to_left",
)


@dataclasses.dataclass(frozen=True)
class TreeStack:
    """Trees ready to predict: routing table and leaf values ``(N, ...)`` in
    one namespace, the fitted arrays they were built from (``sources``), and
    where they live (``where``)."""

    table: RoutingTable
    value: Any
    sources: tuple
    where: tuple

    @property
    def n_trees(self):
        return int(self.table.roots.shape[0])

    def leaves(self, X, *, xp, trees=None, missing=False):
        """Leaf of every row of ``X`` in every tree (a slice): (T, n);
        ``missing``: ``X`` holds NaN (routed by ``missing_go_to_left``)."""
        return route(X, self.table, xp=xp, trees=trees, missing=missing)

    def top_codes(self, xp):
        """Index of each node's largest value along axis 1 (a single-output
        classifier's class code at each node; ties: the first), computed
        once per stack."""
        codes = self.__dict__.get("_top_codes")
        if codes is None:
            codes = xp.argmax(self.value, axis=1)
            object.__setattr__(self, "_top_codes", codes)  # a cache, not state
        return codes

    def per_chunk(self, n, max_elements=1 << 19):
        """Trees in one chunk of :meth:`chunks` over ``n`` rows."""
        k = math.prod(int(s) for s in self.value.shape[1:])  # values per node
        return max(1, max_elements // max(1, n * k))

    def chunks(self, X, *, xp, max_elements=1 << 19, missing=False):
        """Yield ``(first tree, leaf values (T_c, n, ...))`` over chunks of
        trees holding about ``max_elements`` (tree, row, value) entries each:
        small enough to stay in cache on a CPU."""
        n = int(X.shape[0])
        per_chunk = self.per_chunk(n, max_elements)
        for a in range(0, self.n_trees, per_chunk):
            b = min(self.n_trees, a + per_chunk)
            leaves = self.leaves(X, xp=xp, trees=slice(a, b), missing=missing)
            rows = xp.take(self.value, xp.reshape(leaves, (-1,)), axis=0)
            yield a, xp.reshape(rows, (b - a, n) + tuple(rows.shape[1:]))

    def value_sum(self, X, *, xp, mask=None, missing=False, max_elements=1 << 19):
        """Σ_t mask[t, i] · value of the leaf row ``i`` of ``X`` reaches in
        tree ``t`` (``mask``: host (T, n), default all ones), shape (n, ...):
        the trees summed one after another within each chunk of
        :meth:`chunks`, then the chunks' sums in order."""
        walk = dispatch("tree.value_sum", xp)
        return walk(
            X, self, xp=xp, mask=mask, missing=missing, max_elements=max_elements
        )


@portable("tree.value_sum")
def _value_sum(X, stack, *, xp, mask=None, missing=False, max_elements=1 << 19):
    """:meth:`TreeStack.value_sum`: each chunk's leaf values gathered at once
    and summed over its trees."""
    total = None
    for a, rows in stack.chunks(X, xp=xp, missing=missing, max_elements=max_elements):
        if mask is not None:
            mk = xp.asarray(
                mask[a : a + int(rows.shape[0])], dtype=rows.dtype, device=device(X)
            )
            extra = (1,) * (len(rows.shape) - 2)  # per-output axes
            rows = rows * xp.reshape(mk, tuple(mk.shape) + extra)
        s = xp.sum(rows, axis=0)
        total = s if total is None else total + s
    return total


def _value_sum_example(*, mask, missing, n_outputs=1):
    """A small forest over rows in three slices and trees in chunks of two
    (``mask``: random out-of-bag rows; ``missing``: NaN in ``X``)."""
    from xpml.ensemble import RandomForestClassifier

    rng = np.random.default_rng(5)
    d = 64  # rows of 512 bytes: slices of _ROUTE_ROW_BYTES // 512 rows
    n = 2 * (_ROUTE_ROW_BYTES // (8 * d)) + 37
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + X[:, 1] > 0).astype(np.int64)
    if n_outputs > 1:
        y = np.stack([y, (X[:, 2] > 0.3).astype(np.int64) * 2], axis=1)
    if missing:
        X[rng.random(X.shape) < 0.1] = np.nan
    forest = RandomForestClassifier(5, max_depth=6, random_state=0).fit(X, y)
    stack = stack_trees([host_tree(m) for m in forest.estimators_], np, "cpu")
    k = math.prod(int(s) for s in stack.value.shape[1:])
    kw = {"xp": np, "missing": missing, "max_elements": 2 * n * k + 1}
    if mask:
        kw["mask"] = rng.random((5, n)) < 0.4
    return (X, stack), kw


@fast_path(
    "tree.value_sum",
    "numpy",
    example=lambda: _value_sum_example(mask=False, missing=False, n_outputs=2),
)
@fast_path(
    "tree.value_sum",
    "numpy",
    example=lambda: _value_sum_example(mask=True, missing=True),
)
@fast_path(
    "tree.value_sum",
    "numpy",
    example=lambda: _value_sum_example(mask=False, missing=False),
)
def _value_sum_numpy(X, stack, *, xp, mask=None, missing=False, max_elements=1 << 19):
    """:func:`_value_sum` on NumPy, slice of rows by slice: every tree
    routed over the slice at once (the routing copies the slice once, not
    once per chunk), each tree's leaf values gathered into one reused buffer
    and added in :func:`_value_sum`'s order (so the same sums to the bit),
    with no (T_c, n, ...) temporary."""
    n, d = int(X.shape[0]), int(X.shape[1])
    T, per = stack.n_trees, stack.per_chunk(n, max_elements)
    vs = tuple(int(s) for s in stack.value.shape[1:])
    rows = max(1, min(n, _ROUTE_ROW_BYTES // max(1, d * X.dtype.itemsize)))
    total = np.empty((n,) + vs, dtype=stack.value.dtype)
    leaves = np.empty(T * rows, dtype=np.int64)
    buf = np.empty((2, rows) + vs, dtype=stack.value.dtype)
    walk = reusable_walk(X[:rows], stack.table, missing=missing)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        m, tot = r1 - r0, total[r0:r1]
        lv = _route_numpy(
            X[r0:r1], stack.table, xp=np, missing=missing, out=leaves, walk=walk
        )
        mk = None if mask is None else mask[:, r0:r1].astype(stack.value.dtype)
        for a in range(0, T, per):
            s = tot if a == 0 else buf[0, :m]
            b = min(T, a + per)
            _chunk_sum(
                stack.value, lv[a:b], None if mk is None else mk[a:b], s, buf[1, :m]
            )
            if a:
                np.add(tot, s, out=tot)
    return total


def _chunk_sum(value, leaves, mk, s, tmp):
    """``s`` = Σ over the chunk's trees (``leaves`` (T_c, m)) of their leaf
    values, each times its row of ``mk`` (T_c, m) when given."""
    for t in range(int(leaves.shape[0])):
        v = s if t == 0 else tmp
        value.take(leaves[t], axis=0, out=v, mode="wrap")
        if mk is not None:
            np.multiply(v, mk[t].reshape((-1,) + (1,) * (v.ndim - 1)), out=v)
        if t:
            np.add(s, v, out=s)


def host_tree(est) -> dict:
    """A fitted tree estimator's arrays as host NumPy (a dict, plus ``max_depth``)."""
    t = {
        k: to_numpy(getattr(est, f"tree_{k}_"))
        for k in TREE_ARRAYS
        if hasattr(est, f"tree_{k}_")
    }
    if "missing_go_to_left" not in t:  # fitted before missing values were known
        n = t["children_left"]
        t["missing_go_to_left"] = np.zeros(len(n), dtype=np.int64)
    t["max_depth"] = est.max_depth_
    return t


def stack_trees(trees, xp, dev, sources=(), np_dtype=None, *, n_features=None):
    """Stack host trees (dicts of NumPy arrays) and move them to ``xp`` on
    ``dev`` in one upload; thresholds and values in ``np_dtype``
    (default: the trees' own). With ``n_features``, also the routing caches
    a walk of rows of that many features in the thresholds' precision
    builds (:func:`~xpml.tree._route.prepare_walk`)."""
    sizes = np.asarray([len(t["feature"]) for t in trees], dtype=np.int64)
    offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    thr = np.concatenate([t["threshold"] for t in trees])
    value = np.concatenate([t["value"] for t in trees], axis=0)
    if np_dtype is not None:
        thr, value = thr.astype(np_dtype), value.astype(np_dtype)
    host = _host_table(trees, thr, offs, sizes)
    stack = TreeStack(*_upload(host, value, xp, dev), tuple(sources), _where(xp, dev))
    if n_features is not None:
        prepare_walk(stack.table, n_features, thr.dtype.itemsize)
    return stack


def _host_table(trees, thr, offs, sizes):
    """:func:`~xpml.tree._route.routing_table` of the concatenated host trees
    (children shifted by each tree's offset ``offs``), built in place in its
    final arrays: the first predict of a process touches fresh memory for
    the table only (``thr``, the concatenated thresholds, is taken over)."""
    N = int(sizes.sum())
    cat = np.concatenate
    kids = np.empty((N, 2), dtype=np.int64)
    cat([t["children_left"] for t in trees], out=kids[:, 0], casting="unsafe")
    cat([t["children_right"] for t in trees], out=kids[:, 1], casting="unsafe")
    leaf = kids[:, 0] < 0
    kids += np.repeat(offs, sizes)[:, None]
    at = np.flatnonzero(leaf)
    kids[at, 0] = at  # leaves loop back to themselves
    kids[at, 1] = at
    feature = cat([t["feature"] for t in trees]).astype(np.int64, copy=False)
    feature[at] = 0
    thr[at] = np.inf
    missing_right = ~cat([_missing_left(t) for t in trees]).astype(bool, copy=False)
    missing_right &= ~leaf
    depths = np.asarray([t["max_depth"] for t in trees], dtype=np.int64)
    return RoutingTable(
        feature, thr, kids.reshape(-1), leaf, offs, depths, missing_right
    )


def _missing_left(t):
    ml = t.get("missing_go_to_left")
    return np.zeros(len(t["feature"]), dtype=bool) if ml is None else ml


def _upload(host, value, xp, dev):
    """Move a host table and values in one upload: node indices ride in the
    float array when it holds them exactly (else a second, integer upload).
    On NumPy the host arrays are used as they are (nothing to upload)."""
    if is_numpy_namespace(xp):
        return host, value
    N, T = int(host.feature.shape[0]), int(host.roots.shape[0])
    mr = host.missing_right.astype(np.int64)
    ints = np.concatenate([host.feature, host.kids, host.roots, mr])
    floats = np.concatenate([host.threshold, value.reshape(-1)])
    exact = 2 ** (np.finfo(floats.dtype).nmant + 1)
    if ints.size and int(ints.max()) < exact:
        both = move(np.concatenate([floats, ints.astype(floats.dtype)]), xp, dev)
        flts, ints = both[: floats.size], xp.astype(both[floats.size :], xp.int64)
    else:
        flts, ints = move(floats, xp, dev), move(ints, xp, dev)
    kids = ints[N : 3 * N]
    leaf = kids[0::2] == xp.arange(N, dtype=kids.dtype, device=dev)  # self-loops
    table = RoutingTable(
        ints[:N],
        flts[:N],
        kids,
        leaf,
        ints[3 * N : 3 * N + T],
        host.depths,
        ints[3 * N + T :] == 1,
    )
    return table, xp.reshape(flts[N:], value.shape)


def _where(xp, dev):
    return (namespace_name(xp), str(dev))


def cached_stack(owner, members, ctx, values=None) -> TreeStack:
    """``owner``'s stack of the fitted trees ``members`` in the compute
    namespace of ``ctx``: the cached one while it is current, else built
    (one upload) and cached. ``values(t, tree)``, when given, replaces the
    leaf values of member ``t`` (host arrays)."""
    stack = getattr(owner, "_cache_stack", None)
    sources = tuple(m.tree_feature_ for m in members)
    if (
        stack is not None
        and stack.where == _where(ctx.xp, ctx.device)
        and len(stack.sources) == len(sources)
        and all(a is b for a, b in zip(stack.sources, sources))
    ):
        return stack
    trees = [host_tree(m) for m in members]
    if values is not None:
        trees = [{**tr, "value": values(t, tr)} for t, tr in enumerate(trees)]
    stack = stack_trees(trees, ctx.xp, ctx.device, sources)
    owner._cache_stack = stack
    return stack


def restore_stack(owner, members, n_features, values=None):
    """Rebuild ``owner``'s stack of ``members`` (see :func:`cached_stack`,
    ``values`` as there) where their fitted arrays live, with its routing
    caches: called when a model whose stack was dropped from its pickle is
    unpickled or loaded, so that its first predict builds nothing (as
    scikit-learn's trees are rebuilt at unpickling)."""
    src = members[0].tree_feature_
    xp = array_namespace(src)
    trees = [host_tree(m) for m in members]
    if values is not None:
        trees = [{**tr, "value": values(t, tr)} for t, tr in enumerate(trees)]
    sources = tuple(m.tree_feature_ for m in members)
    owner._cache_stack = stack_trees(
        trees, xp, device(src), sources, n_features=n_features
    )


class StackOwner:
    """Pickling (and :func:`xpml.load`) for an estimator that predicts from a
    stack of fitted trees: the stack is left out of the state with a mark
    (:func:`mark_stack`), and an owner that had one gets it back from
    ``_after_load`` (its own: which members, which leaf values) when
    unpickled, as when loaded; so its first predict builds nothing."""

    def __getstate__(self):
        return mark_stack(self, super().__getstate__())

    def __setstate__(self, state):
        state, stacked = pop_mark(state)
        super().__setstate__(state)
        if stacked:
            self._after_load()

    def _after_load(self):
        raise NotImplementedError


def mark_stack(owner, state):
    """``owner``'s pickled ``state`` (its stack left out, as every ``_cache``
    attribute) with a mark that it had one: :func:`restore_stack` then
    rebuilds it at unpickling."""
    if "_cache_stack" in owner.__dict__:
        state["_cache_stack"] = None
    return state


def pop_mark(state):
    """``(state without the mark, whether it had one)``: see :func:`mark_stack`."""
    state = dict(state)
    return state, state.pop("_cache_stack", False) is None
