"""The prediction paths behind tree and forest speed: the class code of each
leaf gathered directly (single-output ``predict``), and the NumPy routing's
blocks of several trees over slices of the rows (forest ``apply`` and
``predict_proba``), checked against the one-tree walk and a plain loop.
Tolerances: leaves and labels exact; probabilities to 1e-12."""

import numpy as np
from sklearn.tree import DecisionTreeClassifier as SkTree

from xpml.ensemble import RandomForestClassifier
from xpml.tree import DecisionTreeClassifier


def test_tree_predict_is_first_argmax_of_proba_with_ties(xp):
    """A leaf whose classes tie predicts the first of them, as the argmax of
    ``predict_proba`` and scikit-learn do."""
    X = np.array([[0.0], [0.0], [1.0], [1.0], [1.0], [2.0], [2.0], [2.0]])
    y = np.array([2, 1, 0, 2, 2, 1, 0, 0])  # leaf x=0: classes 1 and 2 tie
    est = DecisionTreeClassifier(max_depth=2).fit(xp.asarray(X), xp.asarray(y))
    ref = SkTree(max_depth=2, random_state=0).fit(X, y)
    Xq = xp.asarray(X)
    proba = xp.to_numpy(est.predict_proba(Xq))
    labels = xp.to_numpy(est.predict(Xq))
    np.testing.assert_array_equal(labels, ref.predict(X))
    np.testing.assert_array_equal(labels, np.array([0, 1, 2])[proba.argmax(axis=1)])
    assert labels[0] == 1  # the tie went to the first class


def test_forest_blocks_route_like_each_tree():
    """A forest walked in blocks of several trees over row slices (more pairs
    than one block, NaN routed) reaches the leaves each member reaches on
    its own, and its probabilities are the members' mean."""
    rng = np.random.default_rng(3)
    n, d, T = 2000, 3, 17  # 34,000 (tree, row) pairs: two blocks
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(np.int64)
    X[rng.random(X.shape) < 0.1] = np.nan
    forest = RandomForestClassifier(T, max_depth=5, random_state=0).fit(X, y)
    leaves = forest.apply(X)
    assert leaves.shape == (n, T)
    for t, member in enumerate(forest.estimators_):
        np.testing.assert_array_equal(leaves[:, t], member.apply(X))
    mean = np.mean([m.predict_proba(X) for m in forest.estimators_], axis=0)
    np.testing.assert_allclose(forest.predict_proba(X), mean, rtol=0, atol=1e-12)


def _value_sum_cases():
    """Stacks and arguments for the NumPy value sum: the registered examples
    (classifier forests over three slices of rows, chunks of two trees, a
    mask with NaN in X, two outputs) and a masked regression forest."""
    from xpml.ensemble import RandomForestRegressor
    from xpml.tree import _stack

    for kw in ({}, {"mask": True, "missing": True}, {"n_outputs": 2, "mask": True}):
        yield _stack._value_sum_example(**{"mask": False, "missing": False, **kw})
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8))
    y = 3 * X[:, 0] + rng.normal(size=3000)
    forest = RandomForestRegressor(13, max_depth=8, random_state=0).fit(X, y)
    trees = [_stack.host_tree(m) for m in forest.estimators_]
    stack = _stack.stack_trees(trees, np, "cpu")
    mask = rng.random((13, 3000)) < 0.4
    yield (X, stack), {"xp": np, "mask": mask, "max_elements": 3 * 3000 + 5}


def test_forest_value_sum_numpy_equals_portable_to_the_bit():
    """The NumPy value sum (slices of rows, one reused buffer per tree) adds
    the leaf values in the portable order (trees in turn within a chunk,
    then the chunks), so its sums are the same to the bit; summing all trees
    in one chunk instead is not (the grouping is visible)."""
    from xpml.tree._stack import _value_sum, _value_sum_numpy

    for (X, stack), kw in _value_sum_cases():
        fast, slow = _value_sum_numpy(X, stack, **kw), _value_sum(X, stack, **kw)
        assert fast.shape == slow.shape and fast.dtype == slow.dtype
        np.testing.assert_array_equal(fast, slow)
        one_chunk = _value_sum(X, stack, **{**kw, "max_elements": 1 << 40})
        assert not np.array_equal(one_chunk, slow)


def test_forest_oob_and_proba_unchanged_by_value_sum_path(monkeypatch):
    """Forest predict_proba and the out-of-bag attributes, NaN in X, are
    the same to the bit whether the stack sums values on the NumPy path or
    the portable one."""
    from xpml.tree import _stack

    rng = np.random.default_rng(7)
    X = rng.normal(size=(4000, 6))
    y = (X[:, 0] - X[:, 1] > 0.2).astype(np.int64) + (X[:, 2] > 1)
    X[rng.random(X.shape) < 0.05] = np.nan

    def fit_predict():
        f = RandomForestClassifier(9, max_depth=7, oob_score=True, random_state=1)
        f.fit(X, y)
        return f.predict_proba(X), f.oob_decision_function_, f.oob_score_

    fast = fit_predict()
    monkeypatch.setattr(_stack, "dispatch", lambda op, xp: _stack._value_sum)
    slow = fit_predict()
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)


def _sklearn_host_tree(sk):
    """A fitted scikit-learn tree as a host tree dict (depth-first numbering:
    a right child does not follow its left sibling)."""
    t = sk.tree_
    return {
        "feature": t.feature.astype(np.int64),
        "threshold": t.threshold,
        "children_left": t.children_left.astype(np.int64),
        "children_right": t.children_right.astype(np.int64),
        "value": t.value[:, 0, :],
        "missing_go_to_left": t.missing_go_to_left.astype(np.int64),
        "max_depth": int(t.max_depth),
    }


def test_stack_of_trees_numbered_apart_routes_like_sklearn():
    """A stack holding a tree whose siblings are not adjacent (scikit-learn's
    depth-first numbering) beside xpml trees (adjacent) is walked through the
    interleaved children, forest-sized or single: every tree's leaves are
    the ones scikit-learn's and xpml's own ``apply`` give."""
    from xpml.tree._stack import host_tree, stack_trees

    rng = np.random.default_rng(11)
    X = rng.normal(size=(5000, 4))
    y = (X[:, 0] * X[:, 1] > 0).astype(np.int64)
    sk = SkTree(max_depth=9, random_state=0).fit(X, y)
    forest = RandomForestClassifier(3, max_depth=9, random_state=0).fit(X, y)
    mine = [host_tree(m) for m in forest.estimators_]
    for trees in (
        [_sklearn_host_tree(sk)],
        mine[:1] + [_sklearn_host_tree(sk)] + mine[1:],
    ):
        stack = stack_trees(trees, np, "cpu")
        leaves = stack.leaves(X, xp=np) - stack.table.roots[:, None]
        expected = [m.apply(X) for m in forest.estimators_]
        expected = (
            [sk.apply(X)]
            if len(trees) == 1
            else expected[:1] + [sk.apply(X)] + expected[1:]
        )
        np.testing.assert_array_equal(leaves, np.stack(expected))
