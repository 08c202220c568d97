"""k-nearest-neighbour estimators: NearestNeighbors, KNeighborsClassifier,
KNeighborsRegressor.

All three store the training data at ``fit`` and answer queries with one of the
searches of :mod:`xpml.neighbors._search`:

* ``"brute"`` (and ``"auto"``): exhaustive search over tiled distance blocks,
  array-API, the GPU path;
* ``"kd_tree"``: exact k-d tree search on the CPU (host NumPy; data on another
  device is copied to the host and back), worth it in low dimensions;
* ``"approx_kd_tree"``: the same tree visiting at most ``max_leaves`` leaves per
  query. At the defaults ``max_leaves=16``, ``leaf_size=64`` recall@5 against
  the exact neighbours of 1,000 queries among 5,000 standard Gaussian points is
  1.000 in 3-D, 0.954 in 8-D and 0.706 in 16-D (measured in
  ``tests/test_neighbors.py`` and reported by ``xpml bench neighbors``): a
  low-dimensional tool, like the exact tree.

Ties: neighbours are ordered by (distance, training index), so among equally
distant training points the one with the smaller index is taken first.
scikit-learn's brute force keeps the same set except at a tie on the k-th
distance, where its chunked search may keep a larger index; its predictions on
digits are equal to ours for k = 1, 5, 15 (tested). Votes tied between classes
go to the smallest class label. ``n_neighbors`` larger than the number of training
samples raises ``ValueError``.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from xpml._backend import enter, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, RegressorMixin
from xpml.kernels import _unit_rows, sq_norms
from xpml.neighbors._search import (
    build_kd_tree,
    exhaustive_kneighbors,
    exhaustive_radius,
    kd_tree_kneighbors,
)
from xpml.utils._array_api import device
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_is_fitted, decode_labels

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]

ALGORITHMS = ("auto", "brute", "kd_tree", "approx_kd_tree")
WEIGHTS = ("uniform", "distance")
METRICS = {
    # name: the Minkowski p it stands for (None: the estimator's p), or "cosine"
    "minkowski": None,
    "euclidean": 2,
    "l2": 2,
    "sqeuclidean": 2,
    "manhattan": 1,
    "cityblock": 1,
    "l1": 1,
    "chebyshev": math.inf,
    "infinity": math.inf,
    "cosine": "cosine",
}


def _resolve_metric(metric, p, metric_params):
    """The search's ``p`` (a number, ``math.inf``, or "cosine") for the
    estimator's metric; ``metric_params`` may hold only ``p`` (which overrides
    the ``p`` argument, as in scikit-learn)."""
    params = dict(metric_params or {})
    extra = sorted(set(params) - {"p"})
    if extra:
        raise ValueError(
            f"metric_params has unsupported keys {extra}: only 'p' (the Minkowski "
            f"power) is supported"
        )
    q = METRICS[metric]
    if q is None:
        q = params.get("p", 2 if p is None else p)
        if isinstance(q, bool) or not isinstance(q, Real) or not q > 0:
            raise ValueError(f"p must be a positive number or inf; got {q!r}")
        q = math.inf if q == math.inf else float(q)
    return q


def _to_metric_units(rank, metric, p, /, *, xp):
    """Distances in the metric's units from the search's rank measures."""
    if metric == "sqeuclidean" or p == "cosine" or p == 1 or p == math.inf:
        return rank
    if p == 2:
        return xp.sqrt(rank)
    return rank ** (1.0 / p)


def _from_metric_units(radius, metric, p):
    """The rank-measure threshold of a radius in the metric's units."""
    if metric == "sqeuclidean" or p == 1 or p == math.inf:
        return float(radius)
    if p == "cosine":
        return float(radius)
    return float(radius) ** p


def _neighbor_weights(dist, weights, /, *, xp):
    """Per-neighbour weights (b, k): ones, ``1/dist`` (rows with a zero distance
    weight exactly their zero-distance neighbours, as scikit-learn does), or a
    user callable on the distance array."""
    if weights == "uniform":
        return xp.ones(dist.shape, dtype=dist.dtype, device=device(dist))
    if weights == "distance":
        zero = dist == 0
        any_zero = xp.any(zero, axis=1, keepdims=True)
        safe = xp.where(zero, xp.ones_like(dist), dist)
        return xp.where(any_zero, xp.astype(zero, dist.dtype), 1.0 / safe)
    return weights(dist)


def _check_some_weight(w, /, *, xp):
    """scikit-learn's error when a callable gives every neighbour of a query
    weight 0 (its classifier raises; a vote would be meaningless)."""
    if bool(xp.any(xp.sum(w, axis=1) == 0)):
        raise ValueError(
            "All neighbors of some sample is getting zero weights. Please modify "
            "'weights' to avoid this case if you are using a user-defined function."
        )


class _KNeighborsBase(BaseEstimator):
    _distance_based = True
    _parameter_constraints = {
        "algorithm": [Options(*ALGORITHMS)],
        "leaf_size": [Interval(Integral, 1, None, closed="left")],
        "max_leaves": [Interval(Integral, 1, None, closed="left")],
        "memory_budget": [None, Interval(Real, 0, None, closed="neither")],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        # scikit-learn's default "minkowski" with p=2 (Euclidean)
        "metric": [Options(*METRICS)],
        # Minkowski power, scikit-learn's default 2; used by metric="minkowski"
        "p": [None, Interval(Real, 0, None, closed="neither", allow_inf=True)],
        # extra metric keywords, scikit-learn's default None; only {"p": ...}
        "metric_params": [None, dict],
    }

    def _metric_p(self):
        return _resolve_metric(self.metric, self.p, self.metric_params)

    def _uses_tree(self):
        """The tree algorithms, for the Minkowski family; cosine (not a
        Minkowski norm: leaf boxes do not bound it) always searches by brute."""
        return self.algorithm in ("kd_tree", "approx_kd_tree") and (
            self._metric_p() != "cosine"
        )

    def _fit_X(self, ctx, X):
        self.n_samples_fit_ = int(X.shape[0])
        self._metric_p()  # validates metric_params and p
        self._state_fit_X = X
        self._state_tree = (
            build_kd_tree(to_numpy(X), self.leaf_size) if self._uses_tree() else None
        )

    def _search(self, ctx, Q, k):
        """(distances in the metric's units, int64 indices) of the k nearest
        training rows."""
        xp = ctx.xp
        X = ctx.take(self._state_fit_X)
        if Q.dtype != X.dtype:
            Q = xp.astype(Q, X.dtype)
        p = self._metric_p()
        rank, ind = self._search_rank(ctx, Q, X, k, p)
        return _to_metric_units(rank, self.metric, p, xp=xp), ind

    def _search_rank(self, ctx, Q, X, k, p):
        xp = ctx.xp
        n = int(X.shape[0])
        if k > n:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                f"n_samples_fit = {n}: n_neighbors must be at most the number of training samples"
            )
        if self._uses_tree():
            max_leaves = self.max_leaves if self.algorithm == "approx_kd_tree" else None
            d2, ind = kd_tree_kneighbors(
                self._state_tree,
                to_numpy(X),
                to_numpy(Q),
                k,
                max_leaves=max_leaves,
                p=p,
            )
            return (
                xp.asarray(d2, device=ctx.device),
                xp.asarray(ind, device=ctx.device),
            )
        if p == "cosine":
            Q, X = _unit_rows(Q, xp=xp), _unit_rows(X, xp=xp)
        norms = sq_norms(X, xp=xp) if p == 2 else None
        return exhaustive_kneighbors(
            Q, X, k, xp=xp, X_norms=norms, memory_budget=self.memory_budget, p=p
        )

    def _kneighbors(self, X, n_neighbors):
        """Validated query; X=None means the training points, each without itself."""
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
            raise ValueError(f"n_neighbors must be a positive int; got {k!r}")
        k = int(k)
        if X is not None:
            ctx, X = self._validate_predict_data(X)
            d2, ind = self._search(ctx, X, k)
            return ctx, d2, ind
        check_is_fitted(self)
        ctx, (Xf,) = enter(self._state_fit_X, names=("X",))
        xp = ctx.xp
        n = int(Xf.shape[0])
        if k >= n:
            raise ValueError(
                f"Expected n_neighbors < n_samples_fit when X is None (each point is not "
                f"its own neighbour), but n_neighbors = {k}, n_samples_fit = {n}"
            )
        d2, ind = self._search(ctx, Xf, k + 1)
        own = ind == xp.arange(n, dtype=ind.dtype, device=ctx.device)[:, None]
        # drop the point itself, or the farthest candidate when it is not listed
        last = xp.arange(k + 1, device=ctx.device)[None, :] == k
        drop = xp.where(xp.any(own, axis=1, keepdims=True), own, last)
        keep = xp.argsort(xp.astype(drop, xp.int32), axis=1, stable=True)[:, :k]
        return (
            ctx,
            xp.take_along_axis(d2, keep, axis=1),
            xp.take_along_axis(ind, keep, axis=1),
        )

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The ``n_neighbors`` nearest training points of each query.

        Parameters
        ----------
        X : array (n_queries, d), optional
            Queries. None means the training points, each excluding itself.
        n_neighbors : int, optional
            Default: the estimator's ``n_neighbors``.
        return_distance : bool, default=True

        Returns
        -------
        distances : array (n_queries, n_neighbors)
            Distances in the metric's units (Euclidean, not squared, for the
            default; squared for "sqeuclidean"), increasing (only when
            ``return_distance``).
        indices : array (n_queries, n_neighbors), int64
            Training indices ordered by (distance, index).
        """
        ctx, dist, ind = self._kneighbors(X, n_neighbors)
        if not return_distance:
            return ctx.out(ind)
        return ctx.out(dist), ctx.out(ind)


class NearestNeighbors(_KNeighborsBase):
    """Unsupervised nearest-neighbour search (:meth:`kneighbors`).

    Parameters
    ----------
    n_neighbors : int, default=5
    radius : float, default=1.0
        Default radius of :meth:`radius_neighbors`, in the metric's units.
    algorithm : {"auto", "brute", "kd_tree", "approx_kd_tree"}, default="auto"
        "auto" and "brute": exhaustive search on tiled distance blocks (any
        backend, the GPU path). "kd_tree": exact, CPU (host NumPy).
        "approx_kd_tree": the tree visiting at most ``max_leaves`` leaves.
    leaf_size : int, default=64
        Points per k-d tree leaf (at most). Larger than scikit-learn's 30: this
        tree ranks every leaf box per query (vectorised), so fewer, fuller
        leaves are faster.
    max_leaves : int, default=16
        The approximate mode's accuracy knob: leaves visited per query.
    memory_budget : float, optional
        Bytes of distance-block workspace for the exhaustive search. Default:
        :data:`xpml.kernels.DEFAULT_MEMORY_BUDGET`; on NumPy 16 MiB per CPU
        thread (cache-sized blocks, spread over a thread pool).
    metric : str, default="minkowski"
        "minkowski" (with ``p``), "euclidean"/"l2", "sqeuclidean",
        "manhattan"/"cityblock"/"l1", "chebyshev"/"infinity", "cosine".
        Euclidean and cosine rank by one Gram product per block; the other
        Minkowski metrics by a (b, m) accumulation over the features within the
        memory budget. The k-d tree serves the Minkowski family (leaf boxes
        bound every such norm); "cosine" is not a norm of the difference, so
        with a tree algorithm it searches by brute force (scikit-learn raises).
    p : float, default=2
        Minkowski power for metric="minkowski" (1: manhattan, 2: euclidean,
        ``inf``: chebyshev; 0 < p < 1 is accepted, as in scikit-learn).
    metric_params : dict, optional
        Only ``{"p": ...}``, which overrides ``p``.

    Attributes
    ----------
    n_samples_fit_ : int
    n_features_in_ : int

    Notes
    -----
    Distances ``‖x − z‖ = √(‖x‖² + ‖z‖² − 2 x·z)`` (clamped at 0) come from the
    Gram engine. See the module docstring for the tie rule.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [3.0], [6.0]])
    >>> nn = NearestNeighbors(n_neighbors=2).fit(X)
    >>> dist, ind = nn.kneighbors(np.array([[2.0]]))
    >>> dist.tolist(), ind.tolist()      # 1 and 3 are equally near: index 1 first
    ([[1.0, 1.0]], [[1, 2]])
    """

    _xpml_tags = {"data": "unsupervised"}
    _parameter_constraints = {
        **_KNeighborsBase._parameter_constraints,
        # default radius of radius_neighbors, scikit-learn's default 1.0
        "radius": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(
        self,
        n_neighbors=5,
        *,
        radius=1.0,
        algorithm="auto",
        leaf_size=64,
        max_leaves=16,
        memory_budget=None,
        metric="minkowski",
        p=2,
        metric_params=None,
    ):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.max_leaves = max_leaves
        self.memory_budget = memory_budget
        self.metric = metric
        self.p = p
        self.metric_params = metric_params

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Store the training points (and build the tree for the tree algorithms)."""
        ctx, X, _, _ = self._validate_fit_data(X)
        self._fit_X(ctx, X)
        return self._fitted(ctx)

    def radius_neighbors(
        self, X=None, radius=None, return_distance=True, sort_results=False
    ):
        """Every training point within ``radius`` of each query (exhaustive
        search on every algorithm).

        Parameters
        ----------
        X : array (n_queries, d), optional
            Queries. None means the training points, each excluding itself.
        radius : float, optional
            In the metric's units. Default: the estimator's ``radius``.
        return_distance : bool, default=True
        sort_results : bool, default=False
            Order each query's neighbours by (distance, index); otherwise by
            index. Needs ``return_distance``.

        Returns
        -------
        distances : ndarray of object (n_queries,)
            Per query, an array of the distances (only when ``return_distance``).
        indices : ndarray of object (n_queries,)
            Per query, an int64 array of training indices.
        """
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True.")
        r = self.radius if radius is None else radius
        if isinstance(r, bool) or not isinstance(r, Real) or not r >= 0:
            raise ValueError(f"radius must be a non-negative number; got {r!r}")
        ctx, rows, cols, dist, n_q = self._radius_pairs(X, r)
        xp = ctx.xp
        if sort_results:  # by (row, distance, index): cols already increase per row
            order = xp.argsort(dist, stable=True)
            order = xp.take(order, xp.argsort(xp.take(rows, order), stable=True))
            rows, cols, dist = (xp.take(a, order) for a in (rows, cols, dist))
        counts = np.bincount(to_numpy(rows), minlength=n_q)
        ind = _split_rows(ctx.out(cols), counts)
        return (_split_rows(ctx.out(dist), counts), ind) if return_distance else ind

    def _radius_pairs(self, X, r):
        """(ctx, rows, cols, distances, n_queries) of the pairs within ``r``."""
        if X is None:
            check_is_fitted(self)
            ctx, (Q,) = enter(self._state_fit_X, names=("X",))
        else:
            ctx, Q = self._validate_predict_data(X)
        xp = ctx.xp
        Xf = ctx.take(self._state_fit_X)
        Q = Q if Q.dtype == Xf.dtype else xp.astype(Q, Xf.dtype)
        p = self._metric_p()
        if p == "cosine":
            Q, Xf = _unit_rows(Q, xp=xp), _unit_rows(Xf, xp=xp)
        thr = _from_metric_units(r, self.metric, p)
        rows, cols, rank = exhaustive_radius(
            Q, Xf, thr, xp=xp, p=p, memory_budget=self.memory_budget
        )
        if X is None:  # each training point is not its own neighbour
            keep = xp.nonzero(rows != cols)[0]
            rows, cols, rank = (xp.take(a, keep) for a in (rows, cols, rank))
        dist = _to_metric_units(rank, self.metric, p, xp=xp)
        return ctx, rows, cols, dist, int(Q.shape[0])


def _split_rows(flat, counts):
    """scikit-learn's ragged result: an object array of per-query slices."""
    ends = np.cumsum(counts)
    out = np.empty(len(counts), dtype=object)
    out[:] = [flat[int(e - c) : int(e)] for c, e in zip(counts, ends)]
    return out


class _WeightedKNeighbors(_KNeighborsBase):
    """Parameters shared by the k-NN classifier and regressor."""

    _parameter_constraints = {
        **_KNeighborsBase._parameter_constraints,
        "weights": [Options(*WEIGHTS), callable],
    }

    def __init__(
        self,
        n_neighbors=5,
        *,
        weights="uniform",
        algorithm="auto",
        leaf_size=64,
        max_leaves=16,
        memory_budget=None,
        metric="minkowski",
        p=2,
        metric_params=None,
    ):
        self.n_neighbors = n_neighbors
        self.weights = weights
        self.algorithm = algorithm
        self.leaf_size = leaf_size
        self.max_leaves = max_leaves
        self.memory_budget = memory_budget
        self.metric = metric
        self.p = p
        self.metric_params = metric_params


class KNeighborsClassifier(ClassifierMixin, _WeightedKNeighbors):
    """k-nearest-neighbour vote.

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {"uniform", "distance"} or callable, default="uniform"
        "distance" weighs a neighbour by ``1/‖x − z‖``; when some neighbours are
        at distance 0, only they vote (with weight 1). A callable maps the
        distance array (n_queries, k) to weights of the same shape; a query
        whose neighbours all get weight 0 raises ``ValueError`` (scikit-learn's
        message).
    algorithm, leaf_size, max_leaves, memory_budget, metric, p, metric_params
        As in :class:`NearestNeighbors`.

    Attributes
    ----------
    classes_ : array (n_classes,)
    n_samples_fit_, n_features_in_ : int

    Notes
    -----
    ``P(c | x) = Σ_{j ∈ N_k(x)} w_j [y_j = c] / Σ_j w_j``; ``predict`` takes the
    class with the largest vote, the smallest label on a tie.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [10.0], [11.0]])
    >>> y = np.array([0, 0, 0, 1, 1])
    >>> KNeighborsClassifier(n_neighbors=3).fit(X, y).predict(np.array([[1.5], [9.0]])).tolist()
    [0, 1]
    """

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Store the training points and their class codes."""
        ctx, X, y, _ = self._validate_fit_data(X, y, target="classes")
        self._fit_X(ctx, X)
        self._state_fit_y = y
        return self._fitted(ctx)

    def _votes(self, X):
        ctx, dist, ind = self._kneighbors(X, None)
        xp = ctx.xp
        codes = xp.take(ctx.take(self._state_fit_y), xp.reshape(ind, (-1,)), axis=0)
        codes = xp.reshape(codes, ind.shape)
        w = _neighbor_weights(dist, self.weights, xp=xp)
        _check_some_weight(w, xp=xp)
        n_classes = int(self.classes_.shape[0])
        classes = xp.arange(n_classes, dtype=codes.dtype, device=ctx.device)
        onehot = xp.astype(codes[:, :, None] == classes[None, None, :], w.dtype)
        return ctx, xp.sum(w[:, :, None] * onehot, axis=1)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Weighted class frequencies among the neighbours, (n_queries, n_classes)."""
        ctx, votes = self._votes(X)
        return ctx.out(votes / ctx.xp.sum(votes, axis=1, keepdims=True))

    def predict(self, X: ArrayLike) -> Array:
        """The class with the largest (weighted) vote; the smallest label on ties."""
        ctx, votes = self._votes(X)
        return decode_labels(self.classes_, ctx.xp.argmax(votes, axis=1), ctx)


class KNeighborsRegressor(RegressorMixin, _WeightedKNeighbors):
    """k-nearest-neighbour (weighted) mean of the targets.

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {"uniform", "distance"} or callable, default="uniform"
        As in :class:`KNeighborsClassifier`.
    algorithm, leaf_size, max_leaves, memory_budget, metric, p, metric_params
        As in :class:`NearestNeighbors`.

    Attributes
    ----------
    n_samples_fit_, n_features_in_ : int

    Notes
    -----
    ``ŷ(x) = Σ_{j ∈ N_k(x)} w_j y_j / Σ_j w_j``.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]])
    >>> y = np.array([0.0, 1.0, 2.0, 3.0])
    >>> KNeighborsRegressor(n_neighbors=2).fit(X, y).predict(np.array([[0.4]])).tolist()
    [0.5]
    """

    _xpml_tags = {"multi_output": True}

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Store the training points and targets."""
        ctx, X, y, _ = self._validate_fit_data(X, y, target="multi")
        self._fit_X(ctx, X)
        self._state_fit_y = y
        return self._fitted(ctx)

    def predict(self, X: ArrayLike) -> Array:
        """Weighted mean target of the neighbours, (n_queries,) or (n_queries, n_targets)."""
        ctx, dist, ind = self._kneighbors(X, None)
        xp = ctx.xp
        y = ctx.take(self._state_fit_y)
        w = _neighbor_weights(dist, self.weights, xp=xp)
        w = w / xp.sum(w, axis=1, keepdims=True)
        Y = xp.take(y, xp.reshape(ind, (-1,)), axis=0)
        if len(y.shape) == 1:
            return ctx.out(xp.sum(w * xp.reshape(Y, ind.shape), axis=1))
        Y = xp.reshape(Y, (ind.shape[0], ind.shape[1], y.shape[1]))
        return ctx.out(xp.sum(w[:, :, None] * Y, axis=1))
