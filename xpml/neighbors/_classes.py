"""k-nearest-neighbour estimators: NearestNeighbors, KNeighborsClassifier,
KNeighborsRegressor.

All three store the training data at ``fit`` and answer queries with one of the
searches of :mod:`xpml.neighbors._search`:

* ``"brute"`` (and ``"auto"``, and ``"ball_tree"``, accepted with
  scikit-learn's meaning, exact neighbours, and answered by this search):
  exhaustive search over tiled distance blocks, array-API, the GPU path;
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
samples raises ``ValueError``. A 2-D ``y`` of class labels gives a multi-output
classifier (``classes_`` a list per output, ``predict_proba`` a list).

``kneighbors_graph`` and ``radius_neighbors_graph`` return SciPy CSR matrices
when the inputs are NumPy (scikit-learn's type), and a dense array in the
inputs' library otherwise (the array API has no sparse format).
"""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from array_api_compat import array_namespace

from xpml._backend import enter, move, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, RegressorMixin
from xpml.kernels import sq_norms
from xpml.neighbors._metrics import (
    KD_TREE_METRICS,
    METRIC_NAMES,
    DistanceMetricLike,
    block_kneighbors,
    block_radius,
    resolve_metric,
)
from xpml.neighbors._search import (
    build_kd_tree,
    exhaustive_kneighbors,
    exhaustive_radius,
    kd_search_cache,
    kd_tree_kneighbors,
    preload_kd_proposer,
)
from xpml.utils._array_api import device, is_numpy_namespace
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_is_fitted, decode_labels, encode_labels

__all__ = ["NearestNeighbors", "KNeighborsClassifier", "KNeighborsRegressor"]

ALGORITHMS = ("auto", "brute", "ball_tree", "kd_tree", "approx_kd_tree")
WEIGHTS = ("uniform", "distance")
_TREES = ("kd_tree", "approx_kd_tree")


def _check_algorithm(algorithm, metric, plan):
    """scikit-learn's refusals and warning for an (algorithm, metric) pair."""
    if algorithm in _TREES and not isinstance(metric, str):
        return  # callables and DistanceMetric objects: answered by brute force
    if algorithm in _TREES and (
        metric not in KD_TREE_METRICS
        or (plan.mapping is not None and plan.p != "cosine")
    ):
        raise ValueError(
            f"metric={metric!r} (with these metric_params) is not supported by "
            f"algorithm={algorithm!r}: use algorithm='brute' or 'ball_tree', or a "
            f"Minkowski metric without weights"
        )
    if isinstance(plan.p, float) and plan.p < 1:
        if algorithm in ("kd_tree", "ball_tree", "approx_kd_tree"):
            raise ValueError(
                f'algorithm="{algorithm}" does not support 0 < p < 1 for the '
                "Minkowski metric. To resolve this problem either set p >= 1 or "
                'algorithm="brute".'
            )
        warnings.warn(
            "Mind that for 0 < p < 1, Minkowski metrics are not distance metrics. "
            "Continuing the execution with `algorithm='brute'`.",
            UserWarning,
            stacklevel=3,
        )


def _check_precomputed(D, /, *, xp, name="X"):
    """A precomputed distance matrix has no negative entries (one host sync)."""
    if bool(xp.any(D < 0)):
        raise ValueError(
            f"Negative values in data passed to precomputed distance matrix {name}"
        )


def _neighbor_weights(dist, weights, /, *, xp):
    """Per-neighbour weights (b, k): ones, ``1/dist`` (rows with a zero distance
    weight exactly their zero-distance neighbours, as scikit-learn does), or a
    user callable on the distance array."""
    if weights is None or weights == "uniform":
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
    _parameter_constraints = {
        "algorithm": [Options(*ALGORITHMS)],
        "leaf_size": [Interval(Integral, 1, None, closed="left")],
        "max_leaves": [Interval(Integral, 1, None, closed="left")],
        "memory_budget": [None, Interval(Real, 0, None, closed="neither")],
        "n_neighbors": [Interval(Integral, 1, None, closed="left")],
        # scikit-learn's default "minkowski" with p=2 (Euclidean); its callables
        # and DistanceMetric objects too
        "metric": [Options(*METRIC_NAMES), callable, DistanceMetricLike],
        # Minkowski power, scikit-learn's default 2; used by metric="minkowski"
        "p": [None, Interval(Real, 0, None, closed="neither", allow_inf=True)],
        # extra metric keywords, scikit-learn's default None
        "metric_params": [None, dict],
        # scikit-learn's parallelism; accepted and ignored
        "n_jobs": [None, Integral],
    }

    @property
    def _distance_based(self):
        """Refuse data whose squared distances overflow, except where NaN
        marks missing coordinates."""
        return self.metric != "nan_euclidean"

    def _plan(self, *, warn=False):
        return resolve_metric(self.metric, self.p, self.metric_params, warn=warn)

    def _uses_tree(self):
        """The tree algorithms, for the plain Minkowski metrics; the others
        (cosine, callables, DistanceMetric objects) are answered by brute force."""
        return self.algorithm in _TREES and self._plan().exact_minkowski

    def _validate_X(self, X, y=None, *, fit, target="none"):
        """Validated data (and targets at fit); NaN allowed for nan_euclidean,
        distance matrices checked for negative entries."""
        finite = self.metric != "nan_euclidean"
        if fit:
            ctx, X, y, _ = self._validate_fit_data(
                X, y, target=target, ensure_finite=finite
            )
        else:
            ctx, X = self._validate_predict_data(X, ensure_finite=finite)
        if self.metric == "precomputed":
            _check_precomputed(X, xp=ctx.xp)
        return (ctx, X, y) if fit else (ctx, X)

    def _fit_X(self, ctx, X):
        self.n_samples_fit_ = int(X.shape[0])
        plan = self._plan(warn=True)  # validates metric_params and p
        _check_algorithm(self.algorithm, self.metric, plan)
        if self.metric == "precomputed" and X.shape[0] != X.shape[1]:
            raise ValueError(
                f"metric='precomputed' needs a square distance matrix X at fit; got "
                f"shape {tuple(X.shape)}"
            )
        if plan.mapping is not None:  # its parameters fit the features
            plan.mapping(X[:1, :], xp=ctx.xp)
        self._state_fit_X = X
        self.__dict__.pop("_cache_kd_search", None)
        X_host = to_numpy(X) if self._uses_tree() else None
        self._state_tree = (
            None if X_host is None else build_kd_tree(X_host, self.leaf_size)
        )
        if self._state_tree is not None:
            preload_kd_proposer()
        if self._state_tree is not None and self.algorithm == "kd_tree":
            # SciPy's tree for the exact search's fast path, built here as the
            # tree is (a cache: pickled with the model, as scikit-learn's tree
            # is, but not saved by xpml.save: the first query after a load
            # builds it)
            self._cache_kd_search = kd_search_cache(X_host)

    def __getstate__(self):
        state = super().__getstate__()
        if "_cache_kd_search" in self.__dict__:
            state["_cache_kd_search"] = self._cache_kd_search
        return state

    def __setstate__(self, state):
        super().__setstate__(state)
        if state.get("_state_tree") is not None:
            preload_kd_proposer()  # the first query's import, done at load

    def _search(self, ctx, Q, k):
        """(distances in the metric's units, int64 indices) of the k nearest
        training rows."""
        xp = ctx.xp
        X = ctx.take(self._state_fit_X)
        if Q.dtype != X.dtype:
            Q = xp.astype(Q, X.dtype)
        n = int(X.shape[0])
        if k > n:
            raise ValueError(
                f"Expected n_neighbors <= n_samples_fit, but n_neighbors = {k}, "
                f"n_samples_fit = {n}: n_neighbors must be at most the number of "
                f"training samples"
            )
        plan = self._plan()
        if plan.pairwise is not None:
            return block_kneighbors(
                Q, X, k, plan.pairwise, xp=xp, memory_budget=self.memory_budget
            )
        if plan.mapping is not None:
            Q, X = plan.mapping(Q, xp=xp), plan.mapping(X, xp=xp)
        rank, ind = self._search_rank(ctx, Q, X, k, plan.p)
        return plan.to_units(rank, xp=xp), ind

    def _search_rank(self, ctx, Q, X, k, p):
        xp = ctx.xp
        if self._uses_tree():
            max_leaves = self.max_leaves if self.algorithm == "approx_kd_tree" else None
            d2, ind = kd_tree_kneighbors(
                self._state_tree,
                to_numpy(X),
                to_numpy(Q),
                k,
                max_leaves=max_leaves,
                p=p,
                cache=self.__dict__.setdefault("_cache_kd_search", {}),
            )
            return (
                xp.asarray(d2, device=ctx.device),
                xp.asarray(ind, device=ctx.device),
            )
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
            ctx, X = self._validate_X(X, fit=False)
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
        # drop the point itself; when it is not listed (more than k duplicates of
        # it), the first candidate, a duplicate standing for it (scikit-learn's rule)
        first = xp.arange(k + 1, device=ctx.device)[None, :] == 0
        drop = xp.where(xp.any(own, axis=1, keepdims=True), own, first)
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

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """The k nearest neighbours as a graph (n_queries, n_samples_fit).

        ``mode="connectivity"``: ones; ``"distance"``: the distances. A SciPy CSR
        matrix on NumPy (as scikit-learn); on other libraries a dense array in
        the inputs' library (the array API has no sparse matrices). X=None: the
        training points, each excluding itself.
        """
        _check_mode(mode)
        ctx, dist, ind = self._kneighbors(X, n_neighbors)
        xp = ctx.xp
        n_q, k = int(ind.shape[0]), int(ind.shape[1])
        rows = xp.reshape(
            xp.broadcast_to(xp.arange(n_q, device=ctx.device)[:, None], (n_q, k)), (-1,)
        )
        vals = None if mode == "connectivity" else xp.reshape(dist, (-1,))
        return _graph(
            ctx, rows, xp.reshape(ind, (-1,)), vals, (n_q, self.n_samples_fit_)
        )


class NearestNeighbors(_KNeighborsBase):
    """Unsupervised nearest-neighbour search (:meth:`kneighbors`).

    Parameters
    ----------
    n_neighbors : int, default=5
    radius : float, default=1.0
        Default radius of :meth:`radius_neighbors`, in the metric's units.
    algorithm : {"auto", "brute", "ball_tree", "kd_tree", "approx_kd_tree"}, \
default="auto"
        "auto" and "brute": exhaustive search on tiled distance blocks (any
        backend, the GPU path). "ball_tree" is accepted with scikit-learn's
        meaning (exact neighbours) and answered by the exhaustive search: the
        same neighbours and distances as "brute" (there is no ball tree here).
        "kd_tree": exact, CPU (host NumPy), for the Minkowski metrics.
        "approx_kd_tree": the tree visiting at most ``max_leaves`` leaves:
        a bound on each query's work where the exact search would visit many
        leaves (moderate dimensions). In very low dimensions the exact search
        visits fewer and is faster (d = 3, n = 50,000: "kd_tree" 0.5x
        scikit-learn's k-d tree, "approx_kd_tree" 2.6-3.5x; ``xpml bench
        neighbors``).
    leaf_size : int, default=64
        Points per k-d tree leaf (at most). Larger than scikit-learn's 30: this
        tree ranks every leaf box per query (vectorised), so fewer, fuller
        leaves are faster. Accepted and unused with "ball_tree".
    max_leaves : int, default=16
        The approximate mode's accuracy knob: leaves visited per query.
    memory_budget : float, optional
        Bytes of distance-block workspace for the exhaustive search. Default:
        :data:`xpml.kernels.DEFAULT_MEMORY_BUDGET`; on NumPy 16 MiB per CPU
        thread (cache-sized blocks, spread over a thread pool).
    metric : str, callable or DistanceMetric, default="minkowski"
        scikit-learn's brute-force metrics (see :mod:`xpml.neighbors._metrics`):
        "minkowski" (with ``p``, and weights ``w`` in ``metric_params``),
        "euclidean"/"l2", "sqeuclidean", "manhattan"/"cityblock"/"l1",
        "chebyshev"/"infinity", "cosine", "correlation", "seuclidean" (``V``),
        "mahalanobis" (``VI`` or ``V``), "haversine" (2 features: latitude,
        longitude in radians), "canberra", "braycurtis", "hamming",
        "nan_euclidean" (NaN marks a missing coordinate), the boolean
        "jaccard", "dice", "rogerstanimoto", "russellrao", "sokalsneath",
        "yule" (nonzero is true), "precomputed" (``X`` at fit is the square
        distance matrix, queries are distances to the training points), a
        callable ``metric(a, b) -> float`` (called on the host for every pair:
        slow) or an object with ``pairwise(A, B)``. Euclidean, cosine and the
        metrics that are one of them after a linear map rank by one Gram product
        per block; the others by distance blocks within the memory budget.
        The k-d tree serves the Minkowski family without weights (leaf boxes
        bound every such norm); other named metrics raise with "kd_tree", as in
        scikit-learn, except "cosine", which is answered by brute force
        (scikit-learn raises); callables and DistanceMetric objects are answered
        by brute force with every algorithm.
    p : float, default=2
        Minkowski power for metric="minkowski" (1: manhattan, 2: euclidean,
        ``inf``: chebyshev; 0 < p < 1 is accepted with "auto"/"brute", with a
        warning, and refused by the trees, as in scikit-learn).
    metric_params : dict, optional
        The metric's keywords: ``p`` (overrides ``p``, with scikit-learn's
        SyntaxWarning) and ``w`` for "minkowski", ``V`` for "seuclidean",
        ``VI`` or ``V`` for "mahalanobis", keywords of a callable.
    n_jobs : int, optional
        Accepted for scikit-learn's signature and ignored: the exhaustive search
        parallelises over row blocks itself (NumPy) or runs on the device.

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
        n_jobs=None,
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
        self.n_jobs = n_jobs

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Store the training points (and build the tree for the tree algorithms)."""
        ctx, X, _ = self._validate_X(X, fit=True)
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
        radius : float or array (n_queries,), optional
            In the metric's units; an array gives each query its own radius.
            Default: the estimator's ``radius``.
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
        ctx, rows, cols, dist, n_q = self._radius_pairs(X, radius)
        xp = ctx.xp
        if sort_results:
            rows, cols, dist = _sort_pairs(rows, cols, dist, xp=xp)
        counts = np.bincount(to_numpy(rows), minlength=n_q)
        ind = _split_rows(ctx.out(cols), counts)
        return (_split_rows(ctx.out(dist), counts), ind) if return_distance else ind

    def radius_neighbors_graph(
        self, X=None, radius=None, mode="connectivity", sort_results=False
    ):
        """The pairs within ``radius`` as a graph (n_queries, n_samples_fit).

        ``mode="connectivity"``: ones; ``"distance"``: the distances. A SciPy CSR
        matrix on NumPy (as scikit-learn); on other libraries a dense array in
        the inputs' library (the array API has no sparse matrices). X=None: the
        training points, each excluding itself. ``sort_results=True`` stores
        each row's CSR entries by increasing distance, else by index.
        """
        _check_mode(mode)
        ctx, rows, cols, dist, n_q = self._radius_pairs(X, radius)
        if sort_results:
            rows, cols, dist = _sort_pairs(rows, cols, dist, xp=ctx.xp)
        vals = None if mode == "connectivity" else dist
        return _graph(ctx, rows, cols, vals, (n_q, self.n_samples_fit_))

    def _radius_pairs(self, X, radius):
        """(ctx, rows, cols, distances, n_queries) of the pairs within ``radius``."""
        if X is None:
            check_is_fitted(self)
            ctx, (Q,) = enter(self._state_fit_X, names=("X",))
        else:
            ctx, Q = self._validate_X(X, fit=False)
        xp = ctx.xp
        n_q = int(Q.shape[0])
        r = _check_radius(self.radius if radius is None else radius, n_q)
        Xf = ctx.take(self._state_fit_X)
        Q = Q if Q.dtype == Xf.dtype else xp.astype(Q, Xf.dtype)
        plan = self._plan()
        if plan.pairwise is not None:
            thr = (
                r
                if isinstance(r, float)
                else xp.asarray(r, dtype=Xf.dtype, device=ctx.device)
            )
            rows, cols, dist = block_radius(
                Q, Xf, thr, plan.pairwise, xp=xp, memory_budget=self.memory_budget
            )
        else:
            if plan.mapping is not None:
                Q, Xf = plan.mapping(Q, xp=xp), plan.mapping(Xf, xp=xp)
            thr = plan.rank_threshold(r)
            if not isinstance(thr, float):
                thr = xp.asarray(thr, dtype=Xf.dtype, device=ctx.device)
            rows, cols, rank = exhaustive_radius(
                Q, Xf, thr, xp=xp, p=plan.p, memory_budget=self.memory_budget
            )
            dist = plan.to_units(rank, xp=xp)
        if X is None:  # each training point is not its own neighbour
            keep = xp.nonzero(rows != cols)[0]
            rows, cols, dist = (xp.take(a, keep) for a in (rows, cols, dist))
        return ctx, rows, cols, dist, n_q


def _sort_pairs(rows, cols, dist, /, *, xp):
    """Pairs ordered by (row, distance, index): cols already increase per row."""
    order = xp.argsort(dist, stable=True)
    order = xp.take(order, xp.argsort(xp.take(rows, order), stable=True))
    return tuple(xp.take(a, order) for a in (rows, cols, dist))


def _check_radius(r, n_q):
    """A radius >= 0, or host array (n_queries,) of them."""
    if isinstance(r, Real) and not isinstance(r, bool):
        if not r >= 0:
            raise ValueError(f"radius must be a non-negative number; got {r!r}")
        return float(r)
    try:
        arr = np.asarray(to_numpy(r), dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"radius must be a number or an array; got {r!r}") from None
    if arr.ndim == 0:
        return _check_radius(float(arr), n_q)
    if arr.shape != (n_q,) or not np.all(arr >= 0):
        raise ValueError(
            f"radius as an array must hold one non-negative radius per query "
            f"({n_q}); got shape {arr.shape}"
        )
    return arr


def _check_mode(mode):
    if mode not in ("connectivity", "distance"):
        raise ValueError(
            'Unsupported mode, must be one of "connectivity", or "distance" but got '
            f'"{mode}" instead'
        )


def _graph(ctx, rows, cols, vals, shape):
    """A neighbour graph: SciPy CSR when the caller's library is NumPy
    (scikit-learn's type), else a dense array in the caller's library (built
    on the host: one copy of the pairs)."""
    r, c = to_numpy(rows), to_numpy(cols)
    v = np.ones(r.shape[0]) if vals is None else to_numpy(vals)
    if is_numpy_namespace(ctx.out_xp):
        import scipy.sparse

        indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=shape[0]))])
        return scipy.sparse.csr_matrix((v, c, indptr), shape=shape)
    dense = np.zeros(shape, dtype=v.dtype)
    dense[r, c] = v
    return ctx.out(ctx.xp.asarray(dense, device=ctx.device))


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
        # scikit-learn's default "uniform" (None means the same)
        "weights": [None, Options(*WEIGHTS), callable],
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
        n_jobs=None,
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
        self.n_jobs = n_jobs


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
    algorithm, leaf_size, max_leaves, memory_budget, metric, p, metric_params, n_jobs
        As in :class:`NearestNeighbors`.

    Attributes
    ----------
    classes_ : array (n_classes,), or a list of them (one per output of a 2-D y)
    outputs_2d_ : bool
        Whether ``y`` had several outputs (columns).
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

    # a single class is accepted, as scikit-learn does (every prediction is it)
    _xpml_tags = {"one_class_ok": True}

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Store the training points and their class codes (one column of
        codes per output for a 2-D ``y``)."""
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y "
                "is None; pass the class labels of X"
            )
        if _is_multi_output(y):
            classes, codes = _encode_columns(y)
            ctx, X, Y = self._validate_X(X, codes, fit=True, target="multi")
            self.classes_ = classes
            self.outputs_2d_ = True
            self._state_fit_y = ctx.xp.astype(Y, ctx.xp.int64)
        else:
            # one class is allowed (as in scikit-learn: every prediction is it)
            classes, codes = encode_labels(y, name="y", min_classes=1)
            ctx, X, y = self._validate_X(X, codes, fit=True, target="multi")
            self.classes_ = classes
            self.outputs_2d_ = False
            self._state_fit_y = ctx.xp.astype(y, ctx.xp.int64)
        self._fit_X(ctx, X)
        return self._fitted(ctx)

    def _votes(self, X):
        """(ctx, [votes (n_queries, n_classes) per output])."""
        ctx, dist, ind = self._kneighbors(X, None)
        xp = ctx.xp
        y = ctx.take(self._state_fit_y)
        w = _neighbor_weights(dist, self.weights, xp=xp)
        _check_some_weight(w, xp=xp)
        flat = xp.reshape(ind, (-1,))
        classes = self.classes_ if self.outputs_2d_ else [self.classes_]
        votes = []
        for j, cls in enumerate(classes):
            col = y[:, j] if self.outputs_2d_ else y
            codes = xp.reshape(xp.take(col, flat, axis=0), ind.shape)
            labels = xp.arange(int(cls.shape[0]), dtype=codes.dtype, device=ctx.device)
            votes.append(_class_votes(codes, w, labels, xp=xp))
        return ctx, votes

    def predict_proba(self, X: ArrayLike) -> Array | list:
        """Weighted class frequencies among the neighbours, (n_queries,
        n_classes); a list of them, one per output, for a 2-D ``y``."""
        ctx, votes = self._votes(X)
        proba = [ctx.out(v / ctx.xp.sum(v, axis=1, keepdims=True)) for v in votes]
        return proba if self.outputs_2d_ else proba[0]

    def predict(self, X: ArrayLike) -> Array:
        """The class with the largest (weighted) vote; the smallest label on
        ties; (n_queries, n_outputs) for a 2-D ``y``."""
        ctx, votes = self._votes(X)
        xp = ctx.xp
        if not self.outputs_2d_:
            return decode_labels(self.classes_, xp.argmax(votes[0], axis=1), ctx)
        cols = [
            decode_labels(cls, xp.argmax(v, axis=1), ctx)
            for cls, v in zip(self.classes_, votes)
        ]
        if all(isinstance(c, np.ndarray) for c in cols):
            return np.stack(cols, axis=1)
        out_xp = array_namespace(*cols)
        return out_xp.stack(cols, axis=1)


def _class_votes(codes, w, labels, /, *, xp):
    """Weighted votes (n, n_classes) of the neighbours' class ``codes`` (n, k),
    added to zeros one neighbour rank at a time (in rank order, as a sum
    over the ranks adds them: the same values, signs of zero included):
    (n, n_classes) temporaries, not (n, k, n_classes)."""
    shape = (codes.shape[0], labels.shape[0])
    votes = xp.zeros(shape, dtype=w.dtype, device=device(w))
    for j in range(codes.shape[1]):
        hit = xp.astype(codes[:, j : j + 1] == labels[None, :], w.dtype)
        votes = votes + w[:, j : j + 1] * hit
    return votes


def _is_multi_output(y):
    """A 2-D ``y`` with more than one column (one column is flattened later)."""
    shape = getattr(y, "shape", None)
    if shape is None:
        shape = np.asarray(y).shape
    return len(shape) == 2 and shape[1] > 1


def _encode_columns(y):
    """Per output: sorted labels and integer codes (codes as an (n, n_outputs)
    array in ``y``'s library; labels encoded on the host)."""
    y_host = to_numpy(y) if hasattr(y, "shape") else np.asarray(y)
    classes, codes = [], []
    for j in range(y_host.shape[1]):
        cls, c = encode_labels(y_host[:, j], name=f"y[:, {j}]", min_classes=1)
        classes.append(cls)
        codes.append(to_numpy(c))
    codes = np.stack(codes, axis=1)
    if hasattr(y, "shape") and not isinstance(y, np.ndarray):
        xp = array_namespace(y)
        return classes, move(codes, xp, device(y))
    return classes, codes


class KNeighborsRegressor(RegressorMixin, _WeightedKNeighbors):
    """k-nearest-neighbour (weighted) mean of the targets.

    Parameters
    ----------
    n_neighbors : int, default=5
    weights : {"uniform", "distance"} or callable, default="uniform"
        As in :class:`KNeighborsClassifier`.
    algorithm, leaf_size, max_leaves, memory_budget, metric, p, metric_params, n_jobs
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
        ctx, X, y = self._validate_X(X, y, fit=True, target="multi")
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
