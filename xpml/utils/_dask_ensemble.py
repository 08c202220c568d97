"""Forests and bagging with dask: the members are fitted on the workers
through joblib's dask backend, not on dask arrays.

Trees need random access to all rows: with a ``distributed.Client`` active,
``with joblib.parallel_backend("dask"): forest.fit(X, y)`` ships ``X`` (NumPy)
and fits the members on the cluster's workers (``parallel_map`` in
:mod:`xpml.ensemble._base` follows the active joblib backend). A dask ``X`` is
computed to NumPy first, only when ``X``, ``y`` and the weights fit the
memory budget (:func:`xpml.utils._array_api.memory_budget`); a larger one is
refused with a TypeError.
"""

from __future__ import annotations

import math

from xpml._dask import compute, is_dask_array, register, rows

__all__ = ["fit_in_memory"]

ENSEMBLES = (
    "RandomForestClassifier",
    "RandomForestRegressor",
    "BaggingClassifier",
    "BaggingRegressor",
)


def _nbytes(a):
    if a is None:
        return 0
    if is_dask_array(a):
        return int(math.prod(a.shape)) * a.dtype.itemsize
    return int(getattr(a, "nbytes", 0))


@register(*ENSEMBLES)
def fit_in_memory(est, X, y, sample_weight):
    """Compute ``X``, ``y`` and the weights to NumPy (within the memory
    budget) and fit as usual: the members go wherever joblib's active backend
    sends them."""
    from xpml.utils._array_api import memory_budget

    X = rows(X)
    size = sum(_nbytes(a) for a in (X, y, sample_weight))
    budget = memory_budget()
    if size > budget:
        raise TypeError(
            f"{type(est).__name__}.fit needs all rows in memory: the dask arrays X, "
            f"y and sample_weight take {size} bytes, over the memory budget of "
            f"{budget} bytes (XPML_MEMORY_BUDGET); fit on a sample, or raise the "
            f"budget. With a distributed.Client, joblib.parallel_backend('dask') "
            f"fits the members on the workers."
        )
    X, y, sample_weight = compute(X, y, sample_weight)
    return est.fit(X, y, sample_weight=sample_weight)
