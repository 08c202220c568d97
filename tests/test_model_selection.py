"""Splitting and cross-validation, on every library."""

import numpy as np
import pytest
from _data import linear

from xpml.linear_model import LinearRegression
from xpml.model_selection import (
    KFold,
    StratifiedKFold,
    cross_val_score,
    train_test_split,
)


def test_train_test_split_keeps_library_and_rows(xp):
    X, y = linear(n=20)
    Xtr, Xte, ytr, yte = train_test_split(
        xp.asarray(X), xp.asarray(y), test_size=0.25, random_state=0
    )
    assert xp.is_native(Xtr) and xp.is_native(yte)
    assert Xtr.shape == (15, 4) and Xte.shape == (5, 4)
    # rows stay paired and nothing is lost
    both = np.concatenate([xp.to_numpy(Xte), xp.to_numpy(Xtr)])
    assert sorted(map(tuple, both)) == sorted(map(tuple, X))
    ref = train_test_split(X, y, test_size=0.25, random_state=0)
    np.testing.assert_array_equal(xp.to_numpy(Xte), ref[1])


def test_split_sizes_and_errors():
    X = np.arange(10)
    a, b = train_test_split(X, train_size=6, test_size=3, random_state=1)
    assert len(a) == 6 and len(b) == 3
    a, b = train_test_split(X, shuffle=False, test_size=2)
    np.testing.assert_array_equal(b, [8, 9])
    with pytest.raises(ValueError, match="test_size"):
        train_test_split(X, test_size=1.5)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        train_test_split(X, np.arange(9))


def test_stratified_split_keeps_proportions():
    y = np.array([0] * 80 + [1] * 20)
    _, _, ytr, yte = train_test_split(
        np.zeros((100, 1)), y, test_size=0.2, stratify=y, random_state=0
    )
    assert (yte == 1).sum() == 4 and (ytr == 1).sum() == 16


def test_kfold_partitions():
    folds = list(KFold(3).split(np.zeros(10)))
    tests = np.concatenate([te for _, te in folds])
    np.testing.assert_array_equal(np.sort(tests), np.arange(10))
    for tr, te in folds:
        assert set(tr).isdisjoint(te) and len(tr) + len(te) == 10
    with pytest.raises(ValueError, match="n_splits=11 greater than n_samples=10"):
        list(KFold(11).split(np.zeros(10)))


def test_stratified_kfold_balances_classes():
    y = np.array([0] * 30 + [1] * 15)
    for _, te in StratifiedKFold(3, shuffle=True, random_state=0).split(
        np.zeros(45), y
    ):
        assert (y[te] == 0).sum() == 10 and (y[te] == 1).sum() == 5


def test_cross_val_score(xp):
    X, y = linear(n=40, noise=0.0)
    s = cross_val_score(LinearRegression(), xp.asarray(X), xp.asarray(y), cv=4)
    assert s.shape == (4,)
    np.testing.assert_allclose(s, 1.0, atol=1e-12)
    mse = cross_val_score(
        LinearRegression(), X, y, cv=KFold(5), scoring="neg_mean_squared_error"
    )
    np.testing.assert_allclose(mse, 0.0, atol=1e-20)
    with pytest.raises(ValueError, match="unknown scoring"):
        cross_val_score(LinearRegression(), X, y, scoring="nope")
