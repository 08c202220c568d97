"""Dask arrays through the same estimators: the private block engine.

Every public estimator method that takes data (``fit``, ``predict``,
``transform``, ``score``, ...) is wrapped once, when its class is created
(:func:`route`, called from ``BaseEstimator.__init_subclass__``). A call with
no dask array goes straight through; a call with one comes here:

* ``predict`` / ``predict_proba`` / ``decision_function`` / ``transform`` /
  ``kneighbors`` of any fitted estimator: ``map_blocks`` over the row chunks,
  each block handled by the fitted single-machine estimator (NumPy or CuPy
  blocks, whatever the chunks hold);
* ``fit``: the dask fit registered for the class (:func:`register`, the table
  lives in :mod:`xpml.utils._dask_fits`); others raise ``TypeError`` naming
  the supported ones;
* ``kneighbors`` / ``predict`` / ``predict_proba`` of a k-NN estimator fitted
  on dask arrays (its data stays on the cluster, :data:`DASK_FIT`), for dask
  or in-memory queries: :mod:`xpml.utils._dask_neighbors`.

The engine only ever maps a function over row blocks (:func:`blocks`), sums
the small per-block statistics up a binary tree of delayed additions
(:func:`tree`), and brings the final small result to the client in one
:func:`compute`; the client then solves the small problem with the existing
single-machine code. The sample axis is never rechunked into one chunk (only
the feature axis is, into one), and no block of ``X`` is gathered.

dask itself is imported only when a dask array is seen.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "is_dask_array",
    "route",
    "register",
    "supported",
    "rows",
    "along",
    "blocks",
    "tree",
    "compute",
    "persist",
    "placement",
    "on",
    "block_namespace",
]

_FIT: dict[str, Callable] = {}

ROW_METHODS = (
    "predict",
    "predict_proba",
    "predict_log_proba",
    "predict_joint_log_proba",
    "decision_function",
    "transform",
    "inverse_transform",
    "score_samples",
)
_FIT_METHODS = ("fit", "fit_transform", "fit_predict")
_ROUTED = ROW_METHODS + _FIT_METHODS + ("score", "kneighbors")
_NEIGHBOR_METHODS = ("kneighbors", "predict", "predict_proba")
# the attribute of an estimator whose fit keeps its data on the cluster (exact
# k-NN): its queries are answered there (not state: never saved or moved)
DASK_FIT = "_cache_dask_fit"


# ------------------------------------------------------------------ routing
def is_dask_array(x: Any) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (without importing dask)."""
    return type(x).__module__.startswith("dask.array")


def route(cls: type) -> type:
    """Wrap ``cls``'s data-taking public methods so that a dask argument is
    routed to this engine; other calls run the method unchanged."""
    for name in _ROUTED:
        fn = getattr(cls, name, None)
        if callable(fn) and not getattr(fn, "_xpml_dask", False):
            setattr(cls, name, _routed(name, fn))
    return cls


def _routed(name, fn):
    @functools.wraps(fn)
    def method(self, *args, **kwargs):
        if any(map(is_dask_array, args)) or any(map(is_dask_array, kwargs.values())):
            return _dispatch(self, name, args, kwargs)
        if DASK_FIT in self.__dict__:  # fitted on dask arrays, kept there
            if name in _FIT_METHODS:
                del self.__dict__[DASK_FIT]
            elif name in _NEIGHBOR_METHODS:
                return _neighbors(self, name, args, kwargs)
        return fn(self, *args, **kwargs)

    method._xpml_dask = True
    return method


def register(*names: str) -> Callable[[Callable], Callable]:
    """Register ``fn(est, X, y, sample_weight)`` as the dask fit of the
    estimator classes ``names``."""

    def add(fn: Callable) -> Callable:
        for name in names:
            _FIT[name] = fn
        return fn

    return add


def supported() -> list[str]:
    """Names of the estimators whose ``fit`` accepts dask arrays."""
    import xpml.utils._dask_fits  # noqa: F401  (fills the table)

    return sorted(_FIT)


def _import_dask():
    try:
        import dask
        import dask.array as da
    except ImportError as exc:  # pragma: no cover - dask is an extra
        raise ImportError(
            f"dask arrays need dask ({exc}); install it with: pip install 'xpml[dask]'"
        ) from exc
    return dask, da


def _dispatch(est, name, args, kwargs):
    _import_dask()
    if name in _FIT_METHODS:
        return _fit(est, name, *args, **kwargs)
    if name == "score":
        return _score(est, *args, **kwargs)
    if DASK_FIT in est.__dict__ and name in _NEIGHBOR_METHODS:
        return _neighbors(est, name, args, kwargs)
    if name == "kneighbors":
        return _kneighbors(est, *args, **kwargs)
    return map_rows(est, name, args[0] if args else kwargs.pop("X"), args[1:], kwargs)


def _fit(est, name, X, y=None, sample_weight=None, **params):
    names = supported()
    fit = _FIT.get(type(est).__name__)
    if fit is None or params:
        raise TypeError(
            f"{type(est).__name__}.{name} does not accept dask arrays"
            f"{' with ' + ', '.join(params) if params and fit else ''}; the "
            f"estimators that fit on dask arrays are: {', '.join(names)}. Any "
            f"fitted estimator predicts and transforms dask arrays block by block."
        )
    fit(est, X, y, sample_weight)
    if name == "fit":
        return est
    if name == "fit_transform":
        return est.transform(X)
    _, da = _import_dask()
    return da.from_array(est.labels_, chunks=(rows(X).chunks[0],))


def _neighbors(est, name, args, kwargs):
    from xpml.utils._dask_neighbors import answer

    _import_dask()
    return answer(est, name, args, kwargs)


# ------------------------------------------------------------------- blocks
def rows(X: Any) -> Any:
    """``X`` with one chunk across its columns (the sample axis untouched) and
    known chunk sizes."""
    if X.ndim == 2 and X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    if any(math.isnan(c) for c in X.chunks[0]):
        X = X.compute_chunk_sizes()
    return X


def along(v: Any, X: Any) -> Any:
    """``v`` (dask, NumPy or None) as a dask array with ``X``'s row chunks."""
    if v is None:
        return None
    _, da = _import_dask()
    if not is_dask_array(v):
        v = np.asarray(v)
        return da.from_array(v, chunks=(X.chunks[0],) + v.shape[1:])
    v = rows(v)
    if v.chunks[0] != X.chunks[0]:
        v = v.rechunk({0: X.chunks[0]})
    return v


def blocks(*arrays: Any) -> list[tuple]:
    """One tuple of delayed blocks per row chunk (None where an array is None)."""
    cols = []
    for a in arrays:
        if a is None:
            cols.append(None)
            continue
        d = a.to_delayed()
        cols.append(list(d.reshape(-1) if a.ndim == 1 else d[:, 0]))
    n = next(len(c) for c in cols if c is not None)
    return [tuple(None if c is None else c[i] for c in cols) for i in range(n)]


def block_namespace(X: Any) -> Any:
    """The array namespace of ``X``'s chunks (NumPy or CuPy, compat-wrapped)."""
    import array_api_compat

    return array_api_compat.array_namespace(X._meta)


def _add(a, b):
    return tuple(x + y for x, y in zip(a, b))


def tree(parts: list, combine: Callable = _add) -> Any:
    """Combine per-block delayed results pairwise up a binary tree (depth
    ``log2`` of the number of blocks), in block order."""
    dask, _ = _import_dask()
    step = dask.delayed(combine, pure=True)
    while len(parts) > 1:
        parts = [
            step(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0]


def placement(X: Any) -> list:
    """For each row block of ``X``, the workers holding it when ``X`` is
    persisted on a distributed cluster (None otherwise)."""
    keys = [k[0] if isinstance(k, list) else k for k in X.__dask_keys__()]
    try:
        from distributed import default_client

        who = default_client().who_has(X)
    except (ImportError, ValueError):
        return [None] * len(keys)
    return [tuple(who.get(k) or who.get(str(k)) or ()) or None for k in keys]


def on(workers: Any) -> Any:
    """Tasks created in this block prefer ``workers`` (where their data block
    lives): the scheduler does not move data blocks to balance load. A loose
    restriction: if those workers are gone, others run the task."""
    import contextlib

    dask, _ = _import_dask()
    if not workers:
        return contextlib.nullcontext()
    return dask.annotate(workers=list(workers), allow_other_workers=True)


def map_sum(fn: Callable, arrays: tuple, *consts: Any) -> Any:
    """``Σ_blocks fn(*blocks, *consts)`` as one delayed value (``fn`` returns a
    tuple of arrays; they are added element-wise). Each block's task runs where
    the block of the first array lives."""
    dask, _ = _import_dask()
    f = dask.delayed(fn, pure=True)
    parts = []
    for b, where in zip(blocks(*arrays), placement(arrays[0])):
        with on(where):
            parts.append(f(*b, *consts))
    return tree(parts)


def compute(*values: Any) -> tuple:
    """Bring small results to the client: the engine's one compute call."""
    dask, _ = _import_dask()
    return dask.compute(*values)


def persist(*values: Any) -> tuple:
    """Keep intermediates on the workers between iterations."""
    dask, _ = _import_dask()
    return dask.persist(*values)


# ------------------------------------------------------------ row methods
def _probe(est, name, X, args, kwargs):
    """The method's output on one row of zeros: its width and dtype."""
    xp = block_namespace(X)
    row = xp.zeros((1, X.shape[1]), dtype=X.dtype)
    try:
        return getattr(est, name)(row, *args, **kwargs)
    except Exception:  # zeros refused (e.g. a log of 0): use the first real row
        return getattr(est, name)(X[:1].compute(), *args, **kwargs)


def _apply(block, est, name, args, kwargs):
    return getattr(est, name)(block, *args, **kwargs)


def map_rows(est: Any, name: str, X: Any, args=(), kwargs=None) -> Any:
    """``est.name(X)`` as a lazy dask array: the fitted estimator applied to
    each row block (the estimator travels once, as one shared graph key)."""
    dask, da = _import_dask()
    kwargs = dict(kwargs or {})
    X = rows(X)
    probe = _probe(est, name, X, args, kwargs)
    shared = dask.delayed(est, pure=True)
    if probe.ndim == 1:
        chunks, drop = (X.chunks[0],), 1
    else:
        chunks, drop = (X.chunks[0],) + tuple((w,) for w in probe.shape[1:]), None
    return da.map_blocks(
        _apply,
        X,
        shared,
        name,
        tuple(args),
        kwargs,
        dtype=probe.dtype,
        chunks=chunks,
        drop_axis=drop,
        meta=probe[:0],
    )


def _neighbours_block(block, est, k):
    """Distances and indices side by side, in float64 (indices exact to 2⁵³)."""
    import array_api_compat

    dist, ind = est.kneighbors(block, n_neighbors=k)
    xp = array_api_compat.array_namespace(dist)
    f64 = xp.float64
    return xp.concat([xp.astype(dist, f64), xp.astype(ind, f64)], axis=1)


def _kneighbors(est, X=None, n_neighbors=None, return_distance=True):
    """``kneighbors`` of dask queries against a fitted in-memory index: one
    pass, distances and indices side by side (indices exact in float64 up to
    2⁵³), split lazily."""
    dask, da = _import_dask()
    X = rows(X)
    k = int(n_neighbors or est.n_neighbors)
    both = da.map_blocks(
        _neighbours_block,
        X,
        dask.delayed(est, pure=True),
        k,
        dtype=np.float64,
        chunks=(X.chunks[0], (2 * k,)),
        meta=block_namespace(X).empty((0, 0), dtype=np.float64),
    )
    ind = both[:, k:].astype(np.int64)
    return (both[:, :k].astype(X.dtype), ind) if return_distance else ind


# -------------------------------------------------------------------- score
def _score(est, X, y, sample_weight=None):
    """Accuracy (classifiers) or R² (regressors), reduced on the cluster."""
    _, da = _import_dask()
    kind = getattr(est, "_estimator_type", None)
    if kind not in ("classifier", "regressor"):
        raise TypeError(
            f"{type(est).__name__}.score does not accept dask arrays; only "
            f"classifiers (accuracy) and regressors (R²) score dask arrays"
        )
    pred = est.predict(X)
    y = along(y, pred)
    w = along(sample_weight, pred)
    w = da.ones(pred.shape[0], chunks=pred.chunks[0]) if w is None else w
    if kind == "classifier":
        (acc,) = compute((w * (pred == y)).sum() / w.sum())
        return float(acc)
    wc = w if y.ndim == 1 else w[:, None]
    mean = (wc * y).sum(axis=0) / w.sum()
    res = (wc * (y - pred) ** 2).sum(axis=0)
    tot = (wc * (y - mean) ** 2).sum(axis=0)
    res, tot = compute(res, tot)
    r2 = np.where(tot > 0, 1.0 - res / np.where(tot > 0, tot, 1.0), 0.0)
    return float(np.mean(r2))
