"""k-means clustering by Lloyd's iterations.

Each iteration assigns every point to its nearest centre (squared distances from
the Gram engine, in row blocks sized by a memory budget) and moves each centre to
the (weighted) mean of its points, computed as one matrix product with the
one-hot assignment matrix. On a distance tie a point keeps its previous cluster
(on the first assignment: the smallest cluster index). Random draws (initial
centres, partitions) are made on the host with NumPy and moved to the device,
so one seed gives the same clustering on every backend.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import array_api_compat
import numpy as np

from xpml._backend import to_numpy
from xpml.base import BaseEstimator, ClusterMixin, TransformerMixin
from xpml.kernels import (
    block_rows_for,
    point_factor,
    query_factor,
    sq_distances,
    sq_norms,
)
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state

__all__ = ["KMeans"]

INITS = ("k-means++", "forgy", "random-partition")


# ----------------------------------------------------------------- helpers
_CPU_BLOCK_BYTES = 4 * 2**20  # NumPy: cache-sized distance blocks are faster


def _block_rows(X, k, xp, memory_budget):
    if memory_budget is None and array_api_compat.is_numpy_namespace(xp):
        memory_budget = _CPU_BLOCK_BYTES
    return block_rows_for(
        k,
        X.shape[1],
        4 if X.dtype == xp.float32 else 8,
        kernel="linear",
        memory_budget=memory_budget,
    )


def _nearest(Ab, B, prev, /, *, xp):
    """Nearest centre of each row of a block of ``A = [x, 1]`` against
    ``B = [−2c, ‖c‖²]`` (:func:`xpml.kernels.point_factor`; ``prev`` kept on ties)."""
    S = Ab @ B.T
    lab = xp.argmin(S, axis=1)
    if prev is not None:
        sprev = xp.take_along_axis(S, prev[:, None], axis=1)[:, 0]
        smin = xp.take_along_axis(S, lab[:, None], axis=1)[:, 0]
        lab = xp.where(sprev <= smin, prev, lab)
    return lab


def _assign(X, C, previous, /, *, xp, memory_budget=None):
    """Nearest centre of each row (keeping ``previous`` on ties), in row blocks."""
    n = X.shape[0]
    rows = _block_rows(X, C.shape[0], xp, memory_budget)
    A, B = query_factor(X, xp=xp), point_factor(C, xp=xp)
    out = [
        _nearest(
            A[r0 : min(r0 + rows, n), :],
            B,
            None if previous is None else previous[r0 : min(r0 + rows, n)],
            xp=xp,
        )
        for r0 in range(0, n, rows)
    ]
    return out[0] if len(out) == 1 else xp.concat(out)


def _membership(labels, k, /, *, xp, dtype):
    """``M[c, i] = [labels_i = c]``, shape ``(k, n)`` (laid out so each class's
    row is contiguous: about 4x faster to build on NumPy than ``(n, k)``)."""
    ks = xp.arange(k, dtype=labels.dtype, device=array_api_compat.device(labels))
    return xp.astype(ks[:, None] == labels[None, :], dtype)


def _lloyd_step(A, Xw, w, C, previous, rows, /, *, xp):
    """One Lloyd iteration fused over row blocks: assign each block of
    ``A = [x, 1]`` to the old centres, and accumulate the weighted sums
    ``Mᵀ(wX)`` and weights ``Mᵀw`` of the new ones (``M`` the block's one-hot
    assignment)."""
    n = A.shape[0]
    k = C.shape[0]
    B = point_factor(C, xp=xp)
    labels, sums, wsum = [], None, None
    for r0 in range(0, n, rows):
        r1 = min(r0 + rows, n)
        lab = _nearest(
            A[r0:r1, :], B, None if previous is None else previous[r0:r1], xp=xp
        )
        M = _membership(lab, k, xp=xp, dtype=A.dtype)
        s, ws = M @ Xw[r0:r1, :], M @ w[r0:r1]
        sums, wsum = (s, ws) if sums is None else (sums + s, wsum + ws)
        labels.append(lab)
    return (labels[0] if len(labels) == 1 else xp.concat(labels)), sums, wsum


def _new_centres(X, labels, w, C_old, sums, wsum, /, *, xp):
    """Weighted means of the clusters; an empty cluster takes the point farthest
    from its centre (removed from that centre's mean), as scikit-learn does."""
    empty = wsum == 0
    if bool(xp.any(empty)):
        sums, wsum = _relocate_empty(X, labels, w, C_old, sums, wsum, empty, xp=xp)
    return sums / wsum[:, None]


def _relocate_empty(X, labels, w, C_old, sums, wsum, empty, /, *, xp):
    import array_api_extra as xpx

    empty_ids = [int(i) for i in to_numpy(xp.nonzero(empty)[0])]
    resid = xp.sum((X - xp.take(C_old, labels, axis=0)) ** 2, axis=1)
    far = to_numpy(xp.argsort(-resid, stable=True)[: len(empty_ids)])
    lab_host = to_numpy(labels)
    sums, wsum = xp.asarray(sums, copy=True), xp.asarray(wsum, copy=True)
    for new, j in zip(empty_ids, far):
        j = int(j)
        old = int(lab_host[j])
        xj, wj = X[j, :], w[j]
        sums = xpx.at(sums)[old, :].set(sums[old, :] - wj * xj)
        wsum = xpx.at(wsum)[old].set(wsum[old] - wj)
        sums = xpx.at(sums)[new, :].set(wj * xj)
        wsum = xpx.at(wsum)[new].set(wj)
    return sums, wsum


def _inertia(X, C, labels, w, /, *, xp):
    return xp.sum(w * xp.sum((X - xp.take(C, labels, axis=0)) ** 2, axis=1))


def _lloyd(X, w, C, max_iter, tol, /, *, xp, memory_budget=None):
    """Lloyd's iterations from centres ``C``; scikit-learn's stopping rules
    (labels unchanged, or squared centre shift <= tol)."""
    rows = _block_rows(X, C.shape[0], xp, memory_budget)
    Xw = X * w[:, None]
    A = query_factor(X, xp=xp)
    labels_old = None
    strict = False
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        labels, sums, wsum = _lloyd_step(A, Xw, w, C, labels_old, rows, xp=xp)
        C_new = _new_centres(X, labels, w, C, sums, wsum, xp=xp)
        shift = float(xp.sum((C_new - C) ** 2))
        C = C_new
        if labels_old is not None and bool(xp.all(labels == labels_old)):
            strict = True
            break
        if shift <= tol:
            break
        labels_old = labels
    if not strict:  # labels that match the final centres
        labels = _assign(X, C, labels, xp=xp, memory_budget=memory_budget)
    return C, labels, float(_inertia(X, C, labels, w, xp=xp)), n_iter


def _init_kmeanspp(X, k, w, w_host, rng, /, *, xp, device):
    """Greedy k-means++ (scikit-learn's): each new centre is the best of
    ``2 + ln k`` candidates drawn with probability ∝ weight × squared distance
    to the nearest centre chosen so far."""
    n = X.shape[0]
    trials = 2 + int(math.log(k))
    X_norms = sq_norms(X, xp=xp)
    first = int(rng.choice(n, p=w_host / w_host.sum()))
    chosen = [first]
    closest = sq_distances(X[first : first + 1, :], X, xp=xp, Y_norms=X_norms)[0, :]
    pot = float(xp.sum(w * closest))
    for _ in range(1, k):
        r = xp.asarray(rng.uniform(size=trials) * pot, dtype=X.dtype, device=device)
        cand = xp.searchsorted(xp.cumulative_sum(w * closest), r)
        cand = xp.clip(cand, 0, n - 1)
        D = xp.minimum(
            closest[None, :],
            sq_distances(xp.take(X, cand, axis=0), X, xp=xp, Y_norms=X_norms),
        )
        pots = xp.sum(w[None, :] * D, axis=1)
        best = int(xp.argmin(pots))
        closest = D[best, :]
        pot = float(pots[best])
        chosen.append(int(cand[best]))
    idx = xp.asarray(np.asarray(chosen), device=device)
    return xp.take(X, idx, axis=0)


def _init_centres(X, k, init, w, w_host, rng, /, *, xp, device):
    n = X.shape[0]
    if init == "k-means++":
        return _init_kmeanspp(X, k, w, w_host, rng, xp=xp, device=device)
    if init == "forgy":
        idx = xp.asarray(rng.choice(n, size=k, replace=False), device=device)
        return xp.take(X, idx, axis=0)
    # random partition: each point to a uniformly random cluster, centres = means
    lab_host = rng.integers(0, k, size=n)
    counts = np.bincount(lab_host, minlength=k)
    labels = xp.asarray(lab_host, device=device)
    M = _membership(labels, k, xp=xp, dtype=X.dtype) * w[None, :]
    wsum = xp.sum(M, axis=1)
    C = (M @ X) / xp.where(wsum > 0, wsum, xp.ones_like(wsum))[:, None]
    if np.any(
        counts == 0
    ):  # only with very few points: an empty part takes a random point
        fill = np.where(counts == 0, rng.integers(0, n, size=k), -1)
        rows = xp.take(X, xp.asarray(np.maximum(fill, 0), device=device), axis=0)
        C = xp.where(xp.asarray(fill >= 0, device=device)[:, None], rows, C)
    return C


class KMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """k-means clustering (Lloyd's algorithm) with several restarts.

    Parameters
    ----------
    n_clusters : int, default=8
    init : {"k-means++", "forgy", "random-partition"} or array (n_clusters, n_features)
        "k-means++": greedy D² sampling (scikit-learn's); "forgy": ``k``
        distinct data points; "random-partition": centres of a uniformly random
        partition; an array: these centres (one run).
    n_init : int or "auto", default="auto"
        Runs from different initialisations; the lowest inertia wins. "auto":
        1 for k-means++ and given centres, 10 otherwise.
    max_iter : int, default=300
    tol : float, default=1e-4
        Stop when the squared centre shift is at most ``tol`` times the mean
        feature variance (scikit-learn's rule), or when no label changes.
    random_state : int, Generator or None
    memory_budget : float, optional
        Bytes of distance-block workspace (default the Gram engine's).

    Attributes
    ----------
    cluster_centers_ : array (n_clusters, n_features)
    labels_ : array (n_samples,), int64
    inertia_ : float
        ``Σᵢ wᵢ ‖xᵢ − c_{label(i)}‖²``.
    n_iter_ : int
        Iterations of the best run.
    n_features_in_ : int

    Notes
    -----
    Lloyd: ``label(i) = argminⱼ ‖xᵢ − cⱼ‖²`` (a tie keeps the previous label),
    then ``cⱼ = Σ_{label(i)=j} wᵢ xᵢ / Σ_{label(i)=j} wᵢ``; inertia never increases.

    References
    ----------
    Lloyd (1982); Arthur & Vassilvitskii (2007), *k-means++*.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]])
    >>> km = KMeans(n_clusters=2, init=np.array([[0.0, 0.0], [10.0, 0.0]])).fit(X)
    >>> km.labels_.tolist(), km.cluster_centers_.tolist(), km.inertia_
    ([0, 0, 1, 1], [[0.0, 0.5], [10.0, 0.5]], 1.0)
    >>> km.predict(np.array([[9.0, 9.0]])).tolist()
    [1]
    """

    _parameter_constraints = {
        "init": [Options(*INITS), "array-like"],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "memory_budget": [None, Interval(Real, 0, None, closed="neither")],
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "n_init": [Options("auto"), Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
        "tol": [Interval(Real, 0, None, closed="left")],
    }
    _xpml_tags = {
        "data": "unsupervised",
        "test_params": {"n_clusters": 3, "n_init": 2, "random_state": 0},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "the random initialisation draws depend on the number of rows, so "
            "repeating a row is not the same random run as doubling its weight "
            "(scikit-learn's KMeans is excluded from this check for the same reason)",
        },
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        init="k-means++",
        n_init="auto",
        max_iter=300,
        tol=1e-4,
        random_state=None,
        memory_budget=None,
    ):
        self.n_clusters = n_clusters
        self.init = init
        self.n_init = n_init
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.memory_budget = memory_budget

    def fit(self, X, y=None, sample_weight=None):
        """Run Lloyd's iterations from ``n_init`` initialisations; returns self."""
        ctx, X, _, w = self._validate_fit_data(X, None, sample_weight)
        xp = ctx.xp
        n, d = X.shape
        k = self.n_clusters
        if n < k:
            raise ValueError(
                f"n_samples={n} should be >= n_clusters={k}: KMeans needs at "
                f"least as many samples as clusters"
            )
        if w is None:
            w = xp.ones((n,), dtype=X.dtype, device=ctx.device)
        given = not isinstance(self.init, str)
        C0 = None
        if given:
            C0 = xp.asarray(to_numpy(self.init), dtype=X.dtype, device=ctx.device)
            if tuple(C0.shape) != (k, d):
                raise ValueError(
                    f"init array has shape {tuple(C0.shape)}; it must be (n_clusters, "
                    f"n_features) = {(k, d)}"
                )
        n_init = self.n_init
        if n_init == "auto":
            n_init = 1 if given or self.init == "k-means++" else 10
        if given:
            n_init = 1
        rng = check_random_state(self.random_state)
        tol = self.tol * float(xp.mean(xp.var(X, axis=0)))
        best = self._runs(X, w, k, n_init, C0, tol, rng, ctx)
        C, labels, inertia, n_iter = best
        self.cluster_centers_ = C
        self.labels_ = xp.astype(labels, xp.int64)
        self.inertia_ = inertia
        self.n_iter_ = n_iter
        return self._fitted(ctx)

    def _runs(self, X, w, k, n_init, C0, tol, rng, ctx):
        """The best (lowest inertia) of ``n_init`` Lloyd runs."""
        xp = ctx.xp
        given = C0 is not None
        w_host = (
            to_numpy(w).astype(np.float64)
            if not given and self.init == "k-means++"
            else None
        )
        best = None
        for _ in range(n_init):
            C = (
                C0
                if given
                else _init_centres(
                    X, k, self.init, w, w_host, rng, xp=xp, device=ctx.device
                )
            )
            run = _lloyd(
                X, w, C, self.max_iter, tol, xp=xp, memory_budget=self.memory_budget
            )
            if best is None or run[2] < best[2]:
                best = run
        return best

    def fit_predict(self, X, y=None, sample_weight=None):
        """Fit and return ``labels_``."""
        return self.fit(X, sample_weight=sample_weight).labels_

    def predict(self, X):
        """Index of the nearest centre (the smallest index on a tie)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        labels = _assign(
            X,
            ctx.take(self.cluster_centers_),
            None,
            xp=xp,
            memory_budget=self.memory_budget,
        )
        return ctx.out(xp.astype(labels, xp.int64))

    def transform(self, X):
        """Euclidean distances to every centre, (n_samples, n_clusters)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        return ctx.out(xp.sqrt(sq_distances(X, ctx.take(self.cluster_centers_), xp=xp)))

    def score(self, X, y=None, sample_weight=None):
        """Minus the inertia of ``X`` against the fitted centres."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        C = ctx.take(self.cluster_centers_)
        labels = _assign(X, C, None, xp=xp, memory_budget=self.memory_budget)
        w = (
            xp.ones((X.shape[0],), dtype=X.dtype, device=ctx.device)
            if sample_weight is None
            else xp.asarray(to_numpy(sample_weight), dtype=X.dtype, device=ctx.device)
        )
        return -float(_inertia(X, C, labels, w, xp=xp))
