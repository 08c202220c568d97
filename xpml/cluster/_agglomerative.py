"""Agglomerative (hierarchical) clustering by Lance–Williams updates.

Start with every point its own cluster and the full distance matrix (from the
Gram engine); repeatedly merge the closest pair ``(a, b)`` and replace row ``a``
by the merged cluster's distances to every other cluster, one vector operation
by the Lance–Williams formula (``n_k`` the size of cluster ``k``):

==========  ==========================================================
single      ``d(k, a∪b) = min(d_ka, d_kb)``
complete    ``d(k, a∪b) = max(d_ka, d_kb)``
average     ``d(k, a∪b) = (n_a d_ka + n_b d_kb) / (n_a + n_b)``
ward        ``d²(k, a∪b) = ((n_k+n_a) d²_ka + (n_k+n_b) d²_kb − n_k d²_ab) / (n_k+n_a+n_b)``
centroid    ``d²(k, a∪b) = (n_a d²_ka + n_b d²_kb)/(n_a+n_b) − n_a n_b d²_ab/(n_a+n_b)²``
==========  ==========================================================

Each row's minimum is cached. After a merge only the rows whose nearest
cluster was ``a`` or ``b`` are re-scanned: a fixed number of them (their
positions found by a prefix count, not by a data-dependent ``nonzero``), the
rest (rare) marked stale with a minimum of ``−∞`` so that they surface as the
next closest pair and are re-scanned then. So a merge costs O(n) vector work
and reads back one small array (the pair and its height): one host sync per
merge. The merge history is a SciPy-format linkage matrix
(``scipy.cluster.hierarchy.dendrogram`` draws it). The distance matrix is
``n × n``: this is for data sets of up to some ten thousand points.

On NumPy, where SciPy is installed, the linkage is SciPy's compiled
``scipy.cluster.hierarchy.linkage`` (nearest-neighbour chain for ward,
complete and average, minimum spanning tree for single), behind the
``"linkage"`` dispatch with this module's array-API algorithm as its portable
twin; both give the same linkage matrix (merges in order of height; ties may be
ordered differently).
"""

from __future__ import annotations

import dataclasses
from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import ArrayLike, Self
from xpml.base import BaseEstimator, ClusterMixin
from xpml.exceptions import warn
from xpml.kernels import sq_distances
from xpml.utils._array_api import device, fast_path, portable
from xpml.utils._array_api import dispatch as _dispatch
from xpml.utils._param_validation import Interval, Options

__all__ = [
    "AgglomerativeClustering",
    "connected_linkage_matrix",
    "connectivity_graph",
    "linkage_labels",
    "linkage_matrix",
]

LINKAGES = ("ward", "complete", "average", "single", "centroid")
_SQUARED = ("ward", "centroid")  # the matrix holds squared distances
_RESCAN_ROWS = 32  # rows re-scanned per merge on the device; more go stale


@dataclasses.dataclass
class _Pair:
    """The pair being merged: its distance ``h`` and the cluster sizes
    (``n_k`` a vector over all clusters, for Ward)."""

    h: object
    n_a: float
    n_b: float
    n_k: object


def _lance_williams(linkage, d_a, d_b, pair, /, *, xp):
    """Distances of the merged cluster ``a∪b`` to every cluster (vectors over
    rows); for "ward" and "centroid" the arguments and result are squared."""
    if linkage == "single":
        return xp.minimum(d_a, d_b)
    if linkage == "complete":
        return xp.maximum(d_a, d_b)
    n_a, n_b, h = pair.n_a, pair.n_b, pair.h
    n = n_a + n_b
    if linkage == "average":
        return (n_a * d_a + n_b * d_b) / n
    if linkage == "ward":
        n_k = pair.n_k
        return ((n_k + n_a) * d_a + (n_k + n_b) * d_b - n_k * h) / (n_k + n)
    return (n_a * d_a + n_b * d_b) / n - (n_a * n_b / (n * n)) * h


@dataclasses.dataclass
class _State:
    """The device state of the merge loop: the distance matrix ``D`` (merged
    rows and the diagonal at +∞), the cached minimum and arg-minimum of each
    row, the cluster sizes and ``idx = arange(n)``."""

    D: object
    rowmin: object
    rowarg: object
    sizes: object
    idx: object

    @classmethod
    def start(cls, X, linkage, /, *, xp):
        n = X.shape[0]
        dev = device(X)
        D = sq_distances(X, X, xp=xp)
        D = (D + D.T) / 2  # exactly symmetric: rows and columns are updated alike
        if linkage not in _SQUARED:
            D = xp.sqrt(D)
        idx = xp.arange(n, dtype=xp.int64, device=dev)
        D = xp.where(idx[:, None] == idx[None, :], xp.inf, D)
        sizes = xp.ones((n,), dtype=D.dtype, device=dev)
        return cls(D, xp.min(D, axis=1), xp.argmin(D, axis=1), sizes, idx)


def _closest_pair(state, /, *, xp):
    """``(a, b, h)`` on the host, ``a < b``: the closest pair and its distance,
    read back together (the merge's one host sync). ``h = −∞`` flags a stale
    row ``a`` (see :func:`_rescan`)."""
    a = xp.argmin(state.rowmin, keepdims=True)
    b = xp.take(state.rowarg, a)
    h = xp.take(state.rowmin, a)
    dt = state.D.dtype
    a_h, b_h, h_h = to_numpy(xp.concat([xp.astype(a, dt), xp.astype(b, dt), h]))
    a_h, b_h = int(a_h), int(b_h)
    return min(a_h, b_h), max(a_h, b_h), float(h_h)


def _refresh_stale(state, /, *, xp):
    """Re-scan every stale row (minimum −∞): the rare overflow of :func:`_rescan`."""
    rows = xp.nonzero(state.rowmin == -xp.inf)[0]
    sub = xp.take(state.D, rows, axis=0)
    fresh_min, fresh_arg = xp.min(sub, axis=1), xp.argmin(sub, axis=1)
    stale = state.rowmin == -xp.inf
    count = xp.cumulative_sum(xp.astype(stale, xp.int64))
    rank = xp.where(stale, count - 1, xp.zeros_like(count))
    state.rowmin = xp.where(stale, xp.take(fresh_min, rank), state.rowmin)
    state.rowarg = xp.where(stale, xp.take(fresh_arg, rank), state.rowarg)


def _rescan(state, need, /, *, xp):
    """New minima of the rows flagged ``need``: the first :data:`_RESCAN_ROWS`
    of them are re-scanned (positions by a prefix count and a search: fixed
    shapes, no sync); any others get a minimum of −∞ (stale)."""
    n = need.shape[0]
    c = min(_RESCAN_ROWS, n)
    count = xp.cumulative_sum(xp.astype(need, xp.int64))
    targets = xp.arange(1, c + 1, dtype=count.dtype, device=device(need))
    rows = xp.searchsorted(count, targets)  # n where fewer rows are flagged
    sub = xp.take(state.D, xp.where(rows < n, rows, xp.zeros_like(rows)), axis=0)
    done = need & (count <= c)
    rank = xp.where(done, count - 1, xp.zeros_like(count))
    fresh_min = xp.take(xp.min(sub, axis=1), rank)
    fresh_arg = xp.take(xp.argmin(sub, axis=1), rank)
    stale_min = xp.where(need, -xp.inf, state.rowmin)
    state.rowmin = xp.where(done, fresh_min, stale_min)
    state.rowarg = xp.where(done, fresh_arg, state.rowarg)


def _merge(state, a, b, pair, linkage, /, *, xp):
    """Merge cluster ``b`` into row ``a``: Lance–Williams row and column ``a``,
    row and column ``b`` removed (+∞), the cached row minima updated."""
    import array_api_extra as xpx

    new = _lance_williams(linkage, state.D[a, :], state.D[b, :], pair, xp=xp)
    new = xp.where((state.idx == a) | (state.idx == b), xp.inf, new)
    D = xpx.at(state.D)[a, :].set(new)
    D = xpx.at(D)[:, a].set(new)
    D = xpx.at(D)[b, :].set(xp.inf)
    state.D = xpx.at(D)[:, b].set(xp.inf)
    state.sizes = xpx.at(state.sizes)[a].set(pair.n_a + pair.n_b)
    # rows whose nearest was a or b are re-scanned; the others can only have
    # come nearer to the new cluster a
    # (merged-away rows, whose minimum is +∞, and b itself are left alone;
    # single linkage keeps every other row's minimum: min(d_ka, d_kb) is it)
    if linkage == "single":
        need = state.idx == a
    else:
        need = (state.rowarg == a) | (state.rowarg == b)
        need = need & (state.rowmin < xp.inf) & (state.idx != b)
    closer = (new < state.rowmin) | ((new == state.rowmin) & (a < state.rowarg))
    state.rowarg = xp.where(closer, a, state.rowarg)
    state.rowmin = xp.where(closer, new, state.rowmin)
    _rescan(state, need, xp=xp)
    state.rowmin = xpx.at(state.rowmin)[b].set(xp.inf)


@portable("linkage")
def linkage_matrix(X, /, *, xp, method):
    """SciPy linkage matrix ``Z`` (host NumPy, (n−1)×4) of ``X`` (n, d) by the
    cached-minimum Lance–Williams algorithm: one host sync per merge."""
    n = X.shape[0]
    state = _State.start(X, method, xp=xp)
    ids, sizes = list(range(n)), [1] * n
    Z = np.empty((max(n - 1, 0), 4), dtype=np.float64)
    for step in range(n - 1):
        a, b, h = _closest_pair(state, xp=xp)
        while h == -float("inf"):
            _refresh_stale(state, xp=xp)
            a, b, h = _closest_pair(state, xp=xp)
        pair = _Pair(h, sizes[a], sizes[b], state.sizes)
        _merge(state, a, b, pair, method, xp=xp)
        height = float(np.sqrt(h)) if method in _SQUARED else h
        Z[step] = (
            min(ids[a], ids[b]),
            max(ids[a], ids[b]),
            height,
            sizes[a] + sizes[b],
        )
        ids[a], sizes[a] = n + step, sizes[a] + sizes[b]
    return Z


def _linkage_example():
    X = np.random.default_rng(0).standard_normal((40, 3))
    return (X,), {"xp": None, "method": "ward"}


# imported with the module, not by the first fit (issue 16: some 0.4 s paid by
# the first call otherwise); SciPy is optional
try:
    from scipy.cluster.hierarchy import linkage as _scipy_linkage
except ImportError:  # pragma: no cover - SciPy is installed with the tests
    _scipy_linkage = None


@fast_path("linkage", "numpy", example=_linkage_example)
def _linkage_scipy(X, /, *, xp, method):
    """SciPy's compiled linkage (the portable algorithm when SciPy is missing)."""
    if _scipy_linkage is None or X.shape[0] < 2:  # SciPy refuses a single point
        return linkage_matrix(X, xp=xp, method=method)
    return _scipy_linkage(np.asarray(X), method=method, metric="euclidean")


def _components(A):
    """Connected-component label of each node of the host boolean graph ``A``
    (the smallest node index of its component), by label propagation."""
    n = A.shape[0]
    labels = np.arange(n)
    while True:
        reach = np.where(A, labels[None, :], n).min(axis=1)
        new = np.minimum(labels, reach)
        new = new[new]  # pointer jumping: fewer rounds on long chains
        if np.array_equal(new, labels):
            return labels
        labels = new


def connectivity_graph(connectivity, X_host):
    """scikit-learn's fixed connectivity: the host boolean adjacency (n, n) of
    ``connectivity`` (a dense or sparse matrix, or a callable of ``X``), made
    symmetric without self loops; several components are joined (with a
    warning) by an edge between the closest points of every pair of them.
    Returns ``(A, n_components)``."""
    from xpml.utils.validation import is_sparse

    C = connectivity(X_host) if callable(connectivity) else connectivity
    n = X_host.shape[0]
    C = C.toarray() if is_sparse(C) else to_numpy(C)
    if tuple(C.shape) != (n, n):
        raise ValueError(
            f"Wrong shape for connectivity matrix: {tuple(C.shape)} when X is "
            f"{tuple(X_host.shape)}; connectivity must be (n_samples, n_samples)"
        )
    A = C != 0
    A = A | A.T
    np.fill_diagonal(A, False)
    comp = _components(A)
    roots = np.unique(comp)
    if roots.shape[0] > 1:
        warn(
            UserWarning,
            f"the number of connected components of the connectivity matrix is "
            f"{roots.shape[0]} > 1. Completing it to avoid stopping the tree early.",
        )
        sq = (X_host * X_host).sum(axis=1)
        D = sq[:, None] + sq[None, :] - 2.0 * (X_host @ X_host.T)
        for i, ri in enumerate(roots):
            for rj in roots[i + 1 :]:
                sub = np.where((comp == ri)[:, None] & (comp == rj)[None, :], D, np.inf)
                p, q = np.unravel_index(np.argmin(sub), sub.shape)
                A[p, q] = A[q, p] = True
    return A, int(roots.shape[0])


def _graph_merge(state, a, b, pair, linkage, /, *, xp):
    """Merge cluster ``b`` into ``a`` under the adjacency ``state.A``: for ward
    and centroid the Lance–Williams distance of every pair (exact from the
    centroids) with the merged adjacency; for the others scikit-learn's rule on
    the graph's edges (the combined distance where both were connected, else
    the one edge there is)."""
    import array_api_extra as xpx

    d_a, d_b = state.D[a, :], state.D[b, :]
    e_a, e_b = state.A[a, :], state.A[b, :]
    new = _lance_williams(linkage, d_a, d_b, pair, xp=xp)
    if linkage not in _SQUARED:
        new = xp.where(e_a & e_b, new, xp.where(e_a, d_a, d_b))
    adj = (e_a | e_b) & (state.idx != a) & (state.idx != b)
    D = xpx.at(state.D)[a, :].set(new)
    state.D = xpx.at(D)[:, a].set(new)
    A = xpx.at(state.A)[a, :].set(adj)
    A = xpx.at(A)[:, a].set(adj)
    A = xpx.at(A)[b, :].set(False)
    state.A = xpx.at(A)[:, b].set(False)
    state.sizes = xpx.at(state.sizes)[a].set(pair.n_a + pair.n_b)


def connected_linkage_matrix(X, A_host, /, *, xp, method, n_merges=None):
    """Linkage matrix of ``X`` with merges restricted to connected clusters
    (the host boolean adjacency ``A_host``, connected): each merge takes the
    closest adjacent pair of the distance matrix masked by the cluster
    adjacency and reads back that pair and its height (one host sync). Stops
    after ``n_merges`` merges (default all)."""
    n = X.shape[0]
    state = _State.start(X, method, xp=xp)
    state.A = xp.asarray(A_host, device=device(X))
    dt = state.D.dtype
    ids, sizes = list(range(n)), [1] * n
    n_merges = n - 1 if n_merges is None else n_merges
    Z = np.empty((max(n_merges, 0), 4), dtype=np.float64)
    for step in range(n_merges):
        eff = xp.reshape(xp.where(state.A, state.D, xp.inf), (-1,))
        flat = xp.argmin(eff, keepdims=True)
        row, col = flat // n, flat % n  # each exact in the float dtype
        got = xp.concat([xp.astype(row, dt), xp.astype(col, dt), xp.take(eff, flat)])
        a, b, h = (float(v) for v in to_numpy(got))
        a, b = int(min(a, b)), int(max(a, b))
        pair = _Pair(h, sizes[a], sizes[b], state.sizes)
        _graph_merge(state, a, b, pair, method, xp=xp)
        height = float(np.sqrt(max(h, 0.0))) if method in _SQUARED else h
        Z[step] = (
            min(ids[a], ids[b]),
            max(ids[a], ids[b]),
            height,
            sizes[a] + sizes[b],
        )
        ids[a], sizes[a] = n + step, sizes[a] + sizes[b]
    return Z


def _complete_tree(Z, n):
    """``Z`` itself, or (a tree stopped early) ``Z`` with placeholder rows so
    that :func:`linkage_labels` sees ``n − 1`` rows (only the real ones are
    applied)."""
    if Z.shape[0] == n - 1:
        return Z
    return np.concatenate([Z, np.zeros((n - 1 - Z.shape[0], 4))])


def linkage_labels(Z, n_merges):
    """Flat cluster labels after the first ``n_merges`` merges of a linkage matrix.

    Labels are numbered by first appearance (point 0 is in cluster 0). Each
    merge ``s`` makes node ``n + s`` the parent of its two children; every
    point's cluster is its topmost ancestor, found for all points together by
    pointer jumping (``up ← up[up]``: about log₂ of the tree's depth steps,
    none per point or per merge).

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.array([[0, 1, 1.0, 2], [2, 3, 2.0, 2], [4, 5, 9.0, 4]])
    >>> linkage_labels(Z, 2).tolist()
    [0, 0, 1, 1]
    >>> chain = np.array([[3, 4, 1.0, 2], [2, 5, 2.0, 3], [1, 6, 3.0, 4], [0, 7, 4.0, 5]])
    >>> linkage_labels(chain, 3).tolist(), linkage_labels(chain, 1).tolist()
    ([0, 1, 1, 1, 1], [0, 1, 2, 3, 3])
    """
    Z = np.asarray(Z)
    n = Z.shape[0] + 1
    m = int(n_merges)
    up = np.arange(2 * n - 1)
    children = Z[:m, :2].astype(np.int64)
    up[children] = (n + np.arange(m))[:, None]
    while True:
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    roots = up[:n]
    _, first = np.unique(roots, return_index=True)
    order = np.argsort(np.argsort(first))  # rank of each root by first appearance
    _, inverse = np.unique(roots, return_inverse=True)
    return order[inverse].astype(np.int64)


class AgglomerativeClustering(ClusterMixin, BaseEstimator):
    """Bottom-up hierarchical clustering with Lance–Williams updates.

    Parameters
    ----------
    n_clusters : int or None, default=2
        Cut the tree into this many clusters (give exactly one of
        ``n_clusters`` and ``distance_threshold``).
    linkage : {"ward", "complete", "average", "single", "centroid"}, default="ward"
        Cluster distance: Ward's increase of the within-cluster sum of squares
        (scikit-learn's default), farthest pair, mean pairwise distance,
        nearest pair, or the distance between centroids.
    distance_threshold : float or None, default=None
        Apply the merges whose height is below this value (scikit-learn's
        rule: ``n_clusters_`` is one more than the number of merges at or above
        it; the same as stopping at the first such merge when heights increase).
    connectivity : array (n, n), sparse matrix, callable or None, default=None
        Which points are neighbours (nonzero entries, made symmetric; a callable
        gets the host copy of ``X`` and returns the matrix). Only connected
        clusters merge (scikit-learn's semantics): ward and centroid use their
        exact distance between adjacent clusters; average, complete and single
        combine the distances of the graph's edges only. A graph of several
        components is completed, with a warning, by an edge between the
        closest points of every pair of components. The merge loop masks the
        dense cluster-distance matrix by the cluster adjacency (one host sync
        per merge).
    compute_full_tree : "auto" or bool, default="auto"
        With ``connectivity``: False stops the tree at ``n_clusters`` (then
        ``children_`` has ``n − n_clusters`` rows); "auto" builds it all when
        ``n_clusters < max(100, 0.02 n)`` or ``distance_threshold`` is set.
        Without ``connectivity`` the full tree is always built (as scikit-learn).
    compute_distances : bool, default=False
        Set ``distances_`` (also set with ``distance_threshold``; the heights
        are always in ``linkage_matrix_[:, 2]``).
    metric : {"euclidean", "l2"}, default="euclidean"
        The point distance (both names are Euclidean; other scikit-learn
        metrics are not supported yet).
    memory : object, default=None
        Accepted for scikit-learn compatibility; no tree is cached.

    Attributes
    ----------
    linkage_matrix_ : array (n_samples − 1, 4)
        SciPy format: row ``i`` merges clusters ``Z[i, 0] < Z[i, 1]`` (ids below
        ``n`` are points, ``n + j`` the cluster made at row ``j``) at height
        ``Z[i, 2]`` into a cluster of ``Z[i, 3]`` points.
    children_ : array (n_samples − 1, 2), int64
    distances_ : array (n_samples − 1,)
        Merge heights (with ``compute_distances`` or ``distance_threshold``).
    labels_ : array (n_samples,), int64
        Cluster of each point, numbered by first appearance.
    n_clusters_ : int
    n_leaves_, n_features_in_ : int

    Notes
    -----
    Merges always join the currently closest pair (ties: the smaller row, then
    column index), so for centroid linkage heights can decrease (inversions),
    exactly as in SciPy. The ``n_clusters`` cut is the partition after
    ``n − n_clusters`` merges.

    References
    ----------
    Lance & Williams (1967); Müllner (2011), *Modern hierarchical, agglomerative
    clustering algorithms*.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0], [1.0], [5.0], [7.0]])
    >>> ac = AgglomerativeClustering(n_clusters=2, linkage="average").fit(X)
    >>> ac.labels_.tolist()
    [0, 0, 1, 1]
    >>> ac.linkage_matrix_.tolist()
    [[0.0, 1.0, 1.0, 2.0], [2.0, 3.0, 2.0, 2.0], [4.0, 5.0, 5.5, 4.0]]
    """

    _distance_based = True
    _parameter_constraints = {
        "distance_threshold": [None, Interval(Real, 0, None, closed="left")],
        "linkage": [Options(*LINKAGES)],
        "n_clusters": [None, Interval(Integral, 1, None, closed="left")],
        "connectivity": [None, "array-like", callable],
        "compute_full_tree": [Options("auto"), "boolean"],
        "compute_distances": ["boolean"],
        "metric": [Options("euclidean", "l2")],
        "memory": [object],
    }
    _xpml_tags = {"data": "unsupervised", "test_params": {"n_clusters": 3}}

    def __init__(
        self,
        n_clusters=2,
        *,
        metric="euclidean",
        memory=None,
        connectivity=None,
        compute_full_tree="auto",
        linkage="ward",
        distance_threshold=None,
        compute_distances=False,
    ):
        self.n_clusters = n_clusters
        self.metric = metric
        self.memory = memory
        self.connectivity = connectivity
        self.compute_full_tree = compute_full_tree
        self.linkage = linkage
        self.distance_threshold = distance_threshold
        self.compute_distances = compute_distances

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Build the full merge tree and cut it; returns self."""
        self._check_settings()
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        n = int(X.shape[0])
        if self.n_clusters is not None and self.n_clusters > n:
            raise ValueError(
                f"n_clusters={self.n_clusters} must be at most n_samples={n}"
            )
        Z = self._tree(X, xp)
        if self.n_clusters is not None and Z.shape[0] < n - 1:
            n_merges = Z.shape[0]  # the tree stopped at n_clusters
        elif self.n_clusters is not None:
            n_merges = n - self.n_clusters
        else:
            # scikit-learn's count: n_clusters_ = #(heights >= threshold) + 1
            n_merges = int(np.count_nonzero(Z[:, 2] < self.distance_threshold))
        labels = linkage_labels(_complete_tree(Z, n), n_merges)
        dev = ctx.device
        self.linkage_matrix_ = xp.asarray(Z, device=dev)
        self.children_ = xp.asarray(Z[:, :2].astype(np.int64), device=dev)
        if self.compute_distances or self.distance_threshold is not None:
            self.distances_ = xp.asarray(Z[:, 2].copy(), device=dev)
        self.labels_ = xp.asarray(labels, device=dev)
        self.n_clusters_ = int(n - n_merges)
        self.n_leaves_ = n
        return self._fitted(ctx)

    def _check_settings(self):
        """scikit-learn's checks of the parameters' combinations."""
        self._validate_params()
        if (self.n_clusters is None) == (self.distance_threshold is None):
            raise ValueError(
                "Exactly one of n_clusters and distance_threshold has to be set, and "
                "the other needs to be None; got n_clusters="
                f"{self.n_clusters!r}, distance_threshold={self.distance_threshold!r}"
            )
        if self.distance_threshold is not None and self.compute_full_tree is False:
            raise ValueError(
                "compute_full_tree must be True if distance_threshold is set"
            )

    def _tree(self, X, xp):
        """The linkage matrix: every merge, or (with ``connectivity`` and
        ``compute_full_tree`` False, or "auto" with few clusters) only those up
        to ``n_clusters``, as scikit-learn."""
        if self.connectivity is None:
            return _dispatch("linkage", xp)(X, xp=xp, method=self.linkage)
        n = int(X.shape[0])
        full = self.compute_full_tree
        if self.distance_threshold is not None:
            full = True
        elif full == "auto":
            full = self.n_clusters < max(100, 0.02 * n)
        A, _ = connectivity_graph(self.connectivity, to_numpy(X))
        n_merges = None if full else n - self.n_clusters
        return connected_linkage_matrix(
            X, A, xp=xp, method=self.linkage, n_merges=n_merges
        )
