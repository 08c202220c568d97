"""Exact k nearest neighbours fitted on dask arrays, on the block engine.

``fit`` keeps the training data where it is (the dask arrays, in a private
``_cache_dask_fit`` attribute) and sets the fitted attributes of the
single-machine fit. Each query block is then answered in three steps, as
tasks on the cluster, without gathering ``X``:

1. against each training chunk, the chunk's top ``k`` (a NearestNeighbors
   with the estimator's metric, fitted on that chunk): distances, global
   indices, and the candidate rows and targets;
2. the candidates of the chunks merged up a binary tree, keeping for each
   query the ``k`` smallest by (distance, index) — the single-machine order;
3. ``kneighbors``: the merged lists; ``predict`` / ``predict_proba``: the
   estimator fitted on the union of the block's candidates (sorted by global
   index, so ties keep their order) answers the block: each query's ``k``
   nearest of the whole training set are among them.

A query block moves ``k`` candidate rows per query and chunk, never a chunk
of ``X``. Indices equal the single-machine ones (ties by index) as long as
distances equal up to the last bit; the per-chunk distances are computed in
the chunk's own matrix products, which on data without near-ties (closer
than rounding) gives the same order.

The estimator refers to the dask arrays, it does not hold the data: pickling
or saving it keeps the fitted attributes only (a copy answers no queries).
"""

from __future__ import annotations

import numpy as np

from xpml._dask import compute, is_dask_array, register, rows, tree
from xpml.utils._dask_fits import prologue

__all__ = ["fit_neighbors", "answer"]

NEIGHBOR_METHODS = ("kneighbors", "predict", "predict_proba")


def _searcher(est):
    """A NearestNeighbors with ``est``'s search parameters."""
    from xpml.neighbors import NearestNeighbors

    own = NearestNeighbors().get_params()
    return NearestNeighbors(**{k: v for k, v in est.get_params().items() if k in own})


# ------------------------------------------------------------------- tasks
def _chunk_top(Q, Xj, yj, offset, search):
    """Top ``k`` of one training chunk for the queries ``Q``: distances,
    global indices, candidate rows and targets (``search = (searcher, k)``)."""
    from xpml._backend import to_numpy
    from xpml.base import clone

    searcher, k = search
    Xj, kj = to_numpy(Xj), min(k, int(Xj.shape[0]))
    dist, ind = clone(searcher).fit(Xj).kneighbors(to_numpy(Q), n_neighbors=kj)
    dist, ind = np.asarray(dist), np.asarray(ind)
    ys = None if yj is None else to_numpy(yj)[ind]
    return dist, ind + offset, Xj[ind], ys


def _merge(a, b, *, k):
    """The ``k`` smallest candidates of each query by (distance, index)."""
    both = [None if x is None else np.concatenate([x, y], axis=1) for x, y in zip(a, b)]
    order = np.lexsort((both[1], both[0]), axis=1)[:, :k]
    return tuple(
        None
        if x is None
        else np.take_along_axis(x, order if x.ndim == 2 else order[..., None], 1)
        for x in both
    )


def _drop_own(dist, gi, first, k):
    """``X=None``: drop each training point from its own list (or the farthest
    candidate when it is not listed), as the single-machine fit."""
    own = gi == (first + np.arange(gi.shape[0]))[:, None]
    last = np.arange(gi.shape[1])[None, :] == k
    drop = np.where(np.any(own, axis=1, keepdims=True), own, last)
    keep = np.argsort(drop.astype(np.int32), axis=1, kind="stable")[:, :k]
    return np.take_along_axis(dist, keep, 1), np.take_along_axis(gi, keep, 1)


def _union_fit(est, cand, classes):
    """``est`` fitted on the union of the candidates (sorted by global index);
    None when they hold one class only (the answer is then that class)."""
    from xpml.base import clone

    _, gi, Xc, yc = cand
    gi, first = np.unique(gi.reshape(-1), return_index=True)
    rows_ = Xc.reshape(-1, Xc.shape[-1])[first]
    ys = yc.reshape((-1,) + yc.shape[2:])[first]
    if classes is not None and np.unique(ys).shape[0] < 2:
        return None, int(ys[0])
    return clone(est).fit(rows_, ys), None


def _answer_block(Q, cand, spec):
    """The final answer of one query block (kneighbors: distances and indices
    side by side in float64, exact up to 2⁵³)."""
    from xpml._backend import to_numpy

    est, method, k, classes, first = spec
    if method == "kneighbors":
        dist, gi = cand[0], cand[1]
        if first is not None:
            dist, gi = _drop_own(dist, gi, first, k)
        return np.concatenate([dist, gi.astype(np.float64)], axis=1)
    fitted, only = _union_fit(est, cand, classes)
    Q = to_numpy(Q)
    if classes is None:
        return np.asarray(fitted.predict(Q))
    K = classes.shape[0]
    if method == "predict":
        codes = np.full(Q.shape[0], only) if fitted is None else fitted.predict(Q)
        return classes[np.asarray(codes)]
    proba = np.zeros((Q.shape[0], K))
    if fitted is None:
        proba[:, only] = 1.0
    else:
        proba[:, np.asarray(fitted.classes_)] = np.asarray(fitted.predict_proba(Q))
    return proba


# --------------------------------------------------------------------- fit
@register("NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor")
def fit_neighbors(est, X, y, sample_weight):
    """Check the data and parameters (one compute, plus the first rows for a
    single-machine probe fit that sets the fitted attributes); keep the dask
    arrays for the queries."""
    from xpml.base import clone

    name = type(est).__name__
    if sample_weight is not None:
        raise TypeError(f"{name}.fit takes no sample_weight")
    if est.get_params().get("metric") == "precomputed":
        raise TypeError(
            f"{name}(metric='precomputed') does not fit dask arrays (a distance "
            f"matrix has no row blocks to search); pass the data points"
        )
    classify = getattr(est, "_estimator_type", None) == "classifier"
    if classify and y is not None and np.ndim(y) == 2:
        raise TypeError(f"{name} fits dask arrays with a 1-D y only")
    data = prologue(est, X, y, classes=classify)
    X2, y2 = compute(data.X[:2], None if data.y is None else data.y[:2])
    y2 = np.array([0, 1]) if classify else y2  # a probe: any two classes
    probe = clone(est).fit(X2) if y2 is None else clone(est).fit(X2, y2)
    for key, value in vars(probe).items():
        if key.endswith("_") and not key.startswith("_") and key != "classes_":
            setattr(est, key, value)
    est.n_samples_fit_ = data.n
    est._cache_dask_fit = (data.X, data.y)
    return est


# ----------------------------------------------------------------- queries
def _spec_shapes(est, method, k, nq, dtype):
    """Shape and dtype of one block's answer (``nq`` queries)."""
    if method == "kneighbors":
        return (nq, 2 * k), np.float64
    X, y = est._cache_dask_fit
    classes = getattr(est, "classes_", None)
    if classes is None:
        return (nq,) + tuple(y.shape[1:]), dtype
    if method == "predict":
        return (nq,), classes.dtype
    return (nq, classes.shape[0]), np.float64


def _query_graph(est, Q, k, method, exclude_self):
    """Per query block: chunk tops, merged up a tree, then the answer."""
    import functools

    import dask
    import dask.array as da

    from xpml._dask import blocks
    from xpml.base import clone

    X, y = est._cache_dask_fit
    searcher = _searcher(est)
    starts = np.concatenate([[0], np.cumsum(X.chunks[0])[:-1]]).tolist()
    train = blocks(X, y)
    top, answer_ = dask.delayed(_chunk_top, pure=True), dask.delayed(_answer_block)
    classes = getattr(est, "classes_", None)
    shared = dask.delayed(clone(est), pure=True)  # parameters only, not the data
    q_starts = np.concatenate([[0], np.cumsum(Q.chunks[0])[:-1]]).tolist()
    parts = []
    for (Qb,), nq, q0 in zip(blocks(Q), Q.chunks[0], q_starts):
        kk = k + 1 if exclude_self else k
        cands = [
            top(Qb, Xj, yj, s, (searcher, kk)) for (Xj, yj), s in zip(train, starts)
        ]
        spec = (shared, method, k, classes, q0 if exclude_self else None)
        shape, dtype = _spec_shapes(est, method, k, nq, Q.dtype)
        value = answer_(Qb, tree(cands, functools.partial(_merge, k=kk)), spec)
        parts.append(da.from_delayed(value, shape=shape, dtype=dtype))
    return da.concatenate(parts, axis=0)


def answer(est, method, args, kwargs):
    """``est.method(...)`` of a dask-fitted neighbours estimator: lazy for a
    dask query, NumPy for an in-memory one."""
    import dask.array as da

    from xpml._backend import to_numpy

    call = dict(zip(("X", "n_neighbors", "return_distance"), args), **kwargs)
    Q = call.get("X")
    X, _ = est._cache_dask_fit
    lazy, exclude_self = is_dask_array(Q), Q is None
    if Q is None:
        Q = X
    elif not is_dask_array(Q):
        Q = np.asarray(to_numpy(Q))
        Q = da.from_array(Q, chunks=(X.chunks[0][0], Q.shape[1]))
    Q = rows(Q)
    if Q.ndim != 2 or Q.shape[1] != est.n_features_in_:
        raise ValueError(
            f"X has {Q.shape[-1]} features, but {type(est).__name__} is expecting "
            f"{est.n_features_in_} features as input"
        )
    k = int(call.get("n_neighbors") or est.n_neighbors)
    n = est.n_samples_fit_
    if k > n - (1 if exclude_self else 0):
        raise ValueError(
            f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
            f"n_samples_fit = {n}"
        )
    out = _query_graph(est, Q, k, method, exclude_self)
    if method == "kneighbors":
        dist, ind = out[:, :k].astype(Q.dtype), out[:, k:].astype(np.int64)
        out = (dist, ind) if call.get("return_distance", True) else ind
    if lazy:
        return out
    return compute(*out) if isinstance(out, tuple) else compute(out)[0]
