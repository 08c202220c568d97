"""Agglomerative (hierarchical) clustering by Lance–Williams updates.

Start with every point its own cluster and the full distance matrix (from the
Gram engine); repeatedly merge the closest pair ``(a, b)`` and replace row ``a``
by the merged cluster's distances to every other cluster, one vector operation
by the Lance–Williams formula:

==========  ==========================================================
single      ``d(k, a∪b) = min(d_ka, d_kb)``
complete    ``d(k, a∪b) = max(d_ka, d_kb)``
average     ``d(k, a∪b) = (n_a d_ka + n_b d_kb) / (n_a + n_b)``
centroid    ``d²(k, a∪b) = (n_a d²_ka + n_b d²_kb)/(n_a+n_b) − n_a n_b d²_ab/(n_a+n_b)²``
==========  ==========================================================

Each row's minimum is cached and only rows whose nearest cluster was ``a`` or
``b`` are re-scanned, so a merge costs O(n) vector work plus those rows; the
Python loop runs over the ``n − 1`` merges. The merge history is a SciPy-format
linkage matrix (``scipy.cluster.hierarchy.dendrogram`` draws it). The distance
matrix is ``n × n``: this is for data sets of up to some ten thousand points.
"""

from __future__ import annotations

from numbers import Integral, Real

import array_api_compat
import numpy as np

from xpml.base import BaseEstimator, ClusterMixin
from xpml.kernels import sq_distances
from xpml.utils._param_validation import Interval, Options

__all__ = ["AgglomerativeClustering", "linkage_labels"]

LINKAGES = ("single", "complete", "average", "centroid")


def _lance_williams(linkage, d_a, d_b, d_ab, n_a, n_b, /, *, xp):
    """Distances of the merged cluster ``a∪b`` to every cluster (vectors over rows);
    for "centroid" the arguments and result are squared distances."""
    if linkage == "single":
        return xp.minimum(d_a, d_b)
    if linkage == "complete":
        return xp.maximum(d_a, d_b)
    n = n_a + n_b
    if linkage == "average":
        return (n_a * d_a + n_b * d_b) / n
    return (n_a * d_a + n_b * d_b) / n - (n_a * n_b / (n * n)) * d_ab


def _merge_rows(old, fixed, need, /, *, xp):
    """``old`` with the entries where ``need`` is set replaced, in order, by
    ``fixed`` (a gather, since the array API has no fancy-index assignment)."""
    n = old.shape[0]
    rank = xp.cumulative_sum(xp.astype(need, xp.int64)) - 1
    where = xp.where(
        need,
        n + rank,
        xp.arange(n, dtype=xp.int64, device=array_api_compat.device(old)),
    )
    return xp.take(xp.concat([old, xp.astype(fixed, old.dtype)]), where)


def _linkage(X, linkage, /, *, xp):
    """SciPy linkage matrix ``Z`` (host NumPy, (n−1)×4) of ``X`` (n, d)."""
    import array_api_extra as xpx

    n = X.shape[0]
    dev = array_api_compat.device(X)
    D = sq_distances(X, X, xp=xp)
    if linkage != "centroid":
        D = xp.sqrt(D)
    inf = xp.asarray(float("inf"), dtype=D.dtype, device=dev)
    idx = xp.arange(n, dtype=xp.int64, device=dev)
    D = xp.where(idx[:, None] == idx[None, :], inf, D)
    rowarg = xp.argmin(D, axis=1)
    rowmin = xp.min(D, axis=1)
    ids = list(range(n))
    sizes = [1] * n
    Z = np.empty((max(n - 1, 0), 4), dtype=np.float64)
    for step in range(n - 1):
        a = int(xp.argmin(rowmin))
        b = int(rowarg[a])
        h = rowmin[a]
        if b < a:
            a, b = b, a
        new = _lance_williams(
            linkage, D[a, :], D[b, :], h, float(sizes[a]), float(sizes[b]), xp=xp
        )
        new = xp.where((idx == a) | (idx == b), inf, new)
        D = xpx.at(D)[a, :].set(new)
        D = xpx.at(D)[:, a].set(new)
        D = xpx.at(D)[b, :].set(inf)
        D = xpx.at(D)[:, b].set(inf)
        height = float(xp.sqrt(h)) if linkage == "centroid" else float(h)
        lo, hi = sorted((ids[a], ids[b]))
        Z[step] = (lo, hi, height, sizes[a] + sizes[b])
        ids[a] = n + step
        sizes[a] += sizes[b]
        # cached row minima: rows whose nearest was a or b are re-scanned; the
        # others can only have come nearer to the new cluster a
        need = (rowarg == a) | (rowarg == b)
        closer = (new < rowmin) | ((new == rowmin) & (a < rowarg))
        rowarg = xp.where(closer, a, rowarg)
        rowmin = xp.where(closer, new, rowmin)
        rows = xp.nonzero(need)[0]
        if rows.shape[0]:
            sub = xp.take(D, rows, axis=0)
            rowarg = _merge_rows(rowarg, xp.argmin(sub, axis=1), need, xp=xp)
            rowmin = _merge_rows(rowmin, xp.min(sub, axis=1), need, xp=xp)
        rowmin = xpx.at(rowmin)[b].set(inf)
    return Z


def linkage_labels(Z, n_merges):
    """Flat cluster labels after the first ``n_merges`` merges of a linkage matrix.

    Labels are numbered by first appearance (point 0 is in cluster 0).

    Examples
    --------
    >>> import numpy as np
    >>> Z = np.array([[0, 1, 1.0, 2], [2, 3, 2.0, 2], [4, 5, 9.0, 4]])
    >>> linkage_labels(Z, 2).tolist()
    [0, 0, 1, 1]
    """
    Z = np.asarray(Z)
    n = Z.shape[0] + 1
    parent = list(range(2 * n - 1))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for step in range(int(n_merges)):
        a, b = int(Z[step, 0]), int(Z[step, 1])
        parent[find(a)] = n + step
        parent[find(b)] = n + step
    roots = np.array([find(i) for i in range(n)])
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
    linkage : {"single", "complete", "average", "centroid"}, default="single"
        Cluster distance: nearest pair, farthest pair, mean pairwise distance,
        or the distance between centroids.
    distance_threshold : float or None, default=None
        Apply merges, in order, while their height is below this value.

    Attributes
    ----------
    linkage_matrix_ : array (n_samples − 1, 4)
        SciPy format: row ``i`` merges clusters ``Z[i, 0] < Z[i, 1]`` (ids below
        ``n`` are points, ``n + j`` the cluster made at row ``j``) at height
        ``Z[i, 2]`` into a cluster of ``Z[i, 3]`` points.
    children_ : array (n_samples − 1, 2), int64
    distances_ : array (n_samples − 1,)
        Merge heights.
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

    _parameter_constraints = {
        "distance_threshold": [None, Interval(Real, 0, None, closed="left")],
        "linkage": [Options(*LINKAGES)],
        "n_clusters": [None, Interval(Integral, 1, None, closed="left")],
    }
    _xpml_tags = {"data": "unsupervised", "test_params": {"n_clusters": 3}}

    def __init__(self, n_clusters=2, *, linkage="single", distance_threshold=None):
        self.n_clusters = n_clusters
        self.linkage = linkage
        self.distance_threshold = distance_threshold

    def fit(self, X, y=None):
        """Build the full merge tree and cut it; returns self."""
        if (self.n_clusters is None) == (self.distance_threshold is None):
            self._validate_params()
            raise ValueError(
                "exactly one of n_clusters and distance_threshold must be given (the other "
                f"None); got n_clusters={self.n_clusters!r}, "
                f"distance_threshold={self.distance_threshold!r}"
            )
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        n = int(X.shape[0])
        if self.n_clusters is not None and self.n_clusters > n:
            raise ValueError(
                f"n_clusters={self.n_clusters} must be at most n_samples={n}"
            )
        Z = _linkage(X, self.linkage, xp=xp)
        if self.n_clusters is not None:
            n_merges = n - self.n_clusters
        else:
            below = Z[:, 2] < self.distance_threshold
            n_merges = int(np.argmin(below)) if not below.all() else n - 1
        labels = linkage_labels(Z, n_merges)
        dev = ctx.device
        self.linkage_matrix_ = xp.asarray(Z, device=dev)
        self.children_ = xp.asarray(Z[:, :2].astype(np.int64), device=dev)
        self.distances_ = xp.asarray(Z[:, 2].copy(), device=dev)
        self.labels_ = xp.asarray(labels, device=dev)
        self.n_clusters_ = int(n - n_merges)
        self.n_leaves_ = n
        return self._fitted(ctx)
