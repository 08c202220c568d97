"""The NumPy walk of a single tree starts in heap order (its top
``_HEAP_LEVELS`` levels: the next position computed, not gathered) and goes
on through the routing table. Its leaves must be the portable walk's and
scikit-learn's: trees deeper and shallower than the heap part, leaves
inside it, siblings numbered apart (scikit-learn's depth-first order), NaN
sent left or right, ``X`` in either memory order. Leaves exact."""

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier as SkTree

from xpml.tree import DecisionTreeClassifier
from xpml.tree._route import _HEAP_LEVELS, _route, _route_numpy, routing_table
from xpml.tree._stack import host_tree, stack_trees


def _leaf_depths(table):
    """Depth of every leaf of a one-tree table (root 0)."""
    kids = np.reshape(table.kids, (-1, 2))
    depth = np.zeros(kids.shape[0], dtype=np.int64)
    for v in range(kids.shape[0]):  # parents come before their children
        if not table.leaf[v]:
            depth[kids[v]] = depth[v] + 1
    return depth[table.leaf]


def _noisy_data(rng, n=6000, d=6, nan=0.0):
    X = rng.normal(size=(n, d))
    y = (X[:, 0] * X[:, 1] + 0.5 * rng.normal(size=n) > 0).astype(np.int64)
    X[:200, 2] = 9.0 + rng.random(200)  # a few rows that end high up
    y[:200] = 2
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("nan", [0.0, 0.15])
def test_single_tree_heap_walk_equals_portable(order, nan):
    """A full-depth xpml tree (deeper than the heap part, with leaves in
    it), NaN in ``X`` or not: the NumPy walk reaches the portable walk's
    leaves, reading ``X`` in place (C order) or through its column copy
    (F order)."""
    rng = np.random.default_rng(21)
    X, y = _noisy_data(rng, nan=nan)
    est = DecisionTreeClassifier(random_state=0).fit(X, y)
    table = stack_trees([host_tree(est)], np, "cpu").table
    depths = _leaf_depths(table)
    assert depths.max() > _HEAP_LEVELS + 3 and depths.min() < _HEAP_LEVELS
    if nan:  # both directions for NaN occur among the heap part's splits
        assert table.missing_right.any() and (~table.missing_right & ~table.leaf).any()
    Xq = np.asarray(X, order=order)
    missing = bool(nan)
    fast = _route_numpy(Xq, table, xp=np, missing=missing)
    slow = _route(X, table, xp=np, missing=missing)
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast[0], est.apply(X))


@pytest.mark.parametrize("max_depth", [4, _HEAP_LEVELS, None])
def test_single_tree_heap_walk_siblings_apart_like_sklearn(max_depth):
    """scikit-learn's trees (a right child does not follow its left one),
    shallower than, as deep as and deeper than the heap part: the NumPy walk
    gives scikit-learn's own leaves."""
    rng = np.random.default_rng(22)
    X, y = _noisy_data(rng)
    X = X.astype(np.float32).astype(np.float64)  # scikit-learn walks float32
    sk = SkTree(max_depth=max_depth, random_state=0).fit(X, y)
    t = sk.tree_
    table = routing_table(
        t.feature.astype(np.int64),
        t.threshold,
        t.children_left.astype(np.int64),
        t.children_right.astype(np.int64),
        [t.max_depth],
        xp=np,
    )
    leaves = _route_numpy(X, table, xp=np)
    np.testing.assert_array_equal(leaves[0], sk.apply(X))


@pytest.mark.parametrize("trees", [None, slice(3, 10)])
def test_stack_heap_walk_equals_portable(trees):
    """A stack of 11 trees (not a power of two), some shallower than the heap
    part and some deeper, NaN in ``X``, all trees or a slice of them not
    starting at the first: the NumPy walk (the trees hung below one
    complete tree, in blocks of several trees over slices of the rows)
    reaches the portable walk's leaves."""
    from xpml.ensemble import RandomForestClassifier

    rng = np.random.default_rng(23)
    X, y = _noisy_data(rng, n=5000, nan=0.1)
    shallow = RandomForestClassifier(4, max_depth=3, random_state=0).fit(X, y)
    deep = RandomForestClassifier(7, random_state=1).fit(X, y)
    members = deep.estimators_[:4] + shallow.estimators_ + deep.estimators_[4:]
    table = stack_trees([host_tree(m) for m in members], np, "cpu").table
    assert table.depths.min() < _HEAP_LEVELS < table.depths.max()
    fast = _route_numpy(X, table, xp=np, trees=trees, missing=True)
    slow = _route(X, table, xp=np, trees=trees, missing=True)
    np.testing.assert_array_equal(fast, slow)
    first = 0 if trees is None else trees.start
    for t, row in enumerate(fast):  # each member's own walk agrees
        member = members[first + t]
        np.testing.assert_array_equal(row - table.roots[first + t], member.apply(X))
