"""Splitting data and cross-validation, on every backend.

Index arrays are drawn on the host with NumPy (small, once) and applied with
``take`` in each array's own library, so a seed gives the same split everywhere.
"""

from __future__ import annotations

import numbers

import array_api_compat
import numpy as np

from xpml._backend import to_numpy
from xpml.base import clone
from xpml.utils._array_api import device as array_device
from xpml.utils.validation import (
    check_consistent_length,
    check_random_state,
    num_samples,
)

__all__ = [
    "train_test_split",
    "KFold",
    "StratifiedKFold",
    "cross_val_score",
    "check_cv",
]


def take_rows(a, idx):
    """Rows ``idx`` (a NumPy integer array) of ``a``, in ``a``'s own library."""
    if a is None:
        return None
    if isinstance(a, np.ndarray):
        return a[idx]
    if not array_api_compat.is_array_api_obj(a):
        return [a[i] for i in idx]
    xp = array_api_compat.array_namespace(a)
    return xp.take(a, xp.asarray(idx, device=array_device(a)), axis=0)


def _split_sizes(n, test_size, train_size):
    def size(v, name):
        if v is None:
            return None
        if isinstance(v, numbers.Integral) and not isinstance(v, bool):
            if not 0 < v < n:
                raise ValueError(
                    f"{name}={v} must be between 1 and n_samples - 1 = {n - 1}"
                )
            return int(v)
        if isinstance(v, numbers.Real) and 0.0 < v < 1.0:
            return int(np.ceil(v * n)) if name == "test_size" else int(np.floor(v * n))
        raise ValueError(
            f"{name} must be an int in [1, n) or a float in (0, 1); got {v!r}"
        )

    n_test, n_train = size(test_size, "test_size"), size(train_size, "train_size")
    if n_test is None and n_train is None:
        n_test = int(np.ceil(0.25 * n))
    if n_test is None:
        n_test = n - n_train
    if n_train is None:
        n_train = n - n_test
    if n_train + n_test > n or n_train < 1 or n_test < 1:
        raise ValueError(
            f"train_size={n_train} and test_size={n_test} do not fit {n} samples; "
            f"each needs at least one sample"
        )
    return n_train, n_test


def train_test_split(
    *arrays,
    test_size=None,
    train_size=None,
    random_state=None,
    shuffle=True,
    stratify=None,
):
    """Split arrays into random train and test subsets (scikit-learn's API).

    Returns ``[a_train, a_test, b_train, b_test, ...]``, each in its input's
    library.

    >>> import numpy as np
    >>> X, y = np.arange(20).reshape(10, 2), np.arange(10)
    >>> Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0)
    >>> Xtr.shape, Xte.shape
    ((7, 2), (3, 2))
    """
    if not arrays:
        raise ValueError("train_test_split needs at least one array")
    check_consistent_length(*arrays, names=[f"array {i}" for i in range(len(arrays))])
    n = num_samples(arrays[0], "array 0")
    n_train, n_test = _split_sizes(n, test_size, train_size)
    rng = check_random_state(random_state)
    if not shuffle:
        if stratify is not None:
            raise ValueError("stratify needs shuffle=True")
        train, test = np.arange(n_train), np.arange(n_train, n_train + n_test)
    elif stratify is not None:
        y = to_numpy(stratify) if hasattr(stratify, "shape") else np.asarray(stratify)
        classes, codes = np.unique(y, return_inverse=True)
        # allocate test places per class in proportion, largest remainders first
        counts = np.bincount(codes)
        exact = counts * n_test / n
        alloc = np.floor(exact).astype(int)
        rest = n_test - alloc.sum()
        alloc[np.argsort(-(exact - alloc), kind="stable")[:rest]] += 1
        test_parts, train_parts = [], []
        for c in range(len(classes)):
            members = rng.permutation(np.flatnonzero(codes == c))
            test_parts.append(members[: alloc[c]])
            train_parts.append(members[alloc[c] :])
        test = rng.permutation(np.concatenate(test_parts))
        train = rng.permutation(np.concatenate(train_parts))[:n_train]
    else:
        perm = rng.permutation(n)
        test, train = perm[:n_test], perm[n_test : n_test + n_train]
    out = []
    for a in arrays:
        out += [take_rows(a, train), take_rows(a, test)]
    return out


class KFold:
    """K consecutive folds, optionally shuffled; yields NumPy index arrays.

    >>> [len(te) for _, te in KFold(3).split(range(10))]
    [4, 3, 3]
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None):
        if not isinstance(n_splits, numbers.Integral) or n_splits < 2:
            raise ValueError(f"n_splits must be an int >= 2; got {n_splits!r}")
        self.n_splits, self.shuffle, self.random_state = (
            int(n_splits),
            shuffle,
            random_state,
        )

    def get_n_splits(self, X=None, y=None, groups=None):
        return self.n_splits

    def _folds(self, n, y=None):
        idx = np.arange(n)
        if self.shuffle:
            idx = check_random_state(self.random_state).permutation(n)
        sizes = np.full(self.n_splits, n // self.n_splits)
        sizes[: n % self.n_splits] += 1
        start = 0
        for s in sizes:
            yield idx[start : start + s]
            start += s

    def split(self, X, y=None, groups=None):
        n = num_samples(X)
        if self.n_splits > n:
            raise ValueError(
                f"Cannot have n_splits={self.n_splits} greater than n_samples={n}"
            )
        for test in self._folds(n, y):
            mask = np.ones(n, dtype=bool)
            mask[test] = False
            yield np.flatnonzero(mask), np.sort(test)


class StratifiedKFold(KFold):
    """K folds keeping class proportions (each class dealt round-robin)."""

    def _folds(self, n, y=None):
        if y is None:
            raise ValueError("StratifiedKFold.split needs y")
        y = to_numpy(y) if hasattr(y, "shape") else np.asarray(y)
        _, codes = np.unique(y, return_inverse=True)
        rng = check_random_state(self.random_state) if self.shuffle else None
        fold_of = np.empty(n, dtype=np.int64)
        offset = 0
        for c in range(codes.max() + 1):
            members = np.flatnonzero(codes == c)
            if rng is not None:
                members = rng.permutation(members)
            fold_of[members] = (np.arange(len(members)) + offset) % self.n_splits
            offset += len(members)
        for k in range(self.n_splits):
            yield np.flatnonzero(fold_of == k)


def check_cv(cv=5, y=None, *, classifier=False):
    """An int becomes (Stratified)KFold; a splitter is returned unchanged."""
    if cv is None:
        cv = 5
    if isinstance(cv, numbers.Integral):
        return StratifiedKFold(cv) if classifier and y is not None else KFold(cv)
    if hasattr(cv, "split"):
        return cv
    raise ValueError(f"cv must be an int, a splitter with .split() or None; got {cv!r}")


def _scorer(scoring):
    if scoring is None:
        return lambda est, X, y: est.score(X, y)
    if callable(scoring):
        return scoring
    from xpml import metrics

    table = {
        "accuracy": lambda est, X, y: metrics.accuracy_score(y, est.predict(X)),
        "r2": lambda est, X, y: metrics.r2_score(y, est.predict(X)),
        "neg_mean_squared_error": lambda est, X, y: (
            -metrics.mean_squared_error(y, est.predict(X))
        ),
        "neg_log_loss": lambda est, X, y: (
            -metrics.log_loss(y, est.predict_proba(X), labels=to_numpy(est.classes_))
        ),
    }
    if scoring not in table:
        raise ValueError(
            f"unknown scoring {scoring!r}; allowed: {sorted(table)} or a callable"
        )
    return table[scoring]


def cross_val_score(estimator, X, y=None, *, cv=5, scoring=None):
    """Scores of ``estimator`` refitted on each training fold, one per fold (NumPy).

    >>> import numpy as np
    >>> from xpml.linear_model import LinearRegression
    >>> X = np.arange(20.0).reshape(10, 2); y = X @ np.array([1.0, 2.0])
    >>> np.round(cross_val_score(LinearRegression(), X, y, cv=2), 6).tolist()
    [1.0, 1.0]
    """
    is_clf = getattr(estimator, "_estimator_type", None) == "classifier"
    splitter = check_cv(cv, y, classifier=is_clf)
    score = _scorer(scoring)
    out = []
    for train, test in splitter.split(X, y):
        est = clone(estimator).fit(take_rows(X, train), take_rows(y, train))
        out.append(score(est, take_rows(X, test), take_rows(y, test)))
    return np.asarray(out, dtype=np.float64)
