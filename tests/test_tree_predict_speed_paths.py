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
