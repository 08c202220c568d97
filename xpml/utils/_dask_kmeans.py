"""KMeans on dask arrays: Lloyd's iterations with one persist and one small
compute per iteration, and k-means|| initialisation.

Each iteration maps the single-machine Lloyd step (:func:`xpml.cluster._kmeans._lloyd_step`:
assignment with the previous label kept on ties, per-cluster sums) over the
row blocks; the labels stay on the workers (persisted), only the ``k × d``
sums, the weights and the count of changed labels come to the client, which
moves the centres and applies scikit-learn's stopping rules exactly as the
single-machine loop does. An empty cluster takes the point farthest from its
old centre, found as a per-block top-m merged on the client (a rare extra
compute).

k-means|| (Bahmani et al., 2012): start from one uniformly drawn point; in
each of ``rounds`` rounds keep every point independently with probability
``min(1, ℓ·w·D²/φ)`` (``ℓ = 2k``, ``φ`` the current weighted cost); weight the
candidates by the total weight of the points nearest them, and reduce them to
``k`` centres with the single-machine weighted k-means++ on the client.
``k-means++`` itself would need ``k`` passes over the data.
"""

from __future__ import annotations

import array_api_compat
import numpy as np

from xpml._dask import blocks, compute, on, persist, placement, register, tree
from xpml.utils._dask_fits import prologue
from xpml.utils.validation import check_random_state

__all__ = ["fit_kmeans"]

_ROUNDS = 5


def _ns(a):
    return array_api_compat.array_namespace(a)


def _weights(Xb, wb):
    xp = _ns(Xb)
    return xp.ones((Xb.shape[0],), dtype=Xb.dtype) if wb is None else wb


# -------------------------------------------------------------- block steps
def _lloyd_block(Xb, wb, prev, C, budget):
    """Labels of one block and its ``(sums, weights, changed)`` statistics."""
    from xpml.cluster._kmeans import _Data, _lloyd_step

    xp = _ns(Xb)
    wb = _weights(Xb, wb)
    data = _Data.make(Xb, wb, C.shape[0], xp=xp, memory_budget=budget)
    labels, sums, wsum = _lloyd_step(data, C, prev, xp=xp)
    changed = xp.sum(xp.astype(labels != prev, xp.int64)) if prev is not None else 0
    return labels, (sums, wsum, changed)


def _label_block(Xb, prev, C, budget):
    from xpml.cluster._kmeans import _assign_factored, _block_rows
    from xpml.kernels import point_factor, query_factor

    xp = _ns(Xb)
    rows = _block_rows(Xb, C.shape[0], xp, budget)
    A, B = query_factor(Xb, xp=xp), point_factor(C, xp=xp)
    return _assign_factored(A, B, prev, rows, xp=xp)


def _inertia_block(Xb, wb, labels, C):
    xp = _ns(Xb)
    r = xp.sum((Xb - xp.take(C, labels, axis=0)) ** 2, axis=1)
    return (xp.sum(_weights(Xb, wb) * r),)


def _farthest_block(Xb, wb, labels_start, C, m):
    """The ``m`` points of one block farthest from their centre: residuals,
    global indices, rows, weights and labels."""
    labels, start = labels_start
    xp = _ns(Xb)
    r = xp.sum((Xb - xp.take(C, labels, axis=0)) ** 2, axis=1)
    top = xp.argsort(-r, stable=True)[:m]
    w = _weights(Xb, wb)
    return (
        xp.take(r, top),
        top + start,
        xp.take(Xb, top, axis=0),
        xp.take(w, top),
        xp.take(labels, top),
    )


# ---------------------------------------------------------------- the loop
class _Lloyd:
    """The persisted state of one run: X's row blocks and the current labels."""

    def __init__(self, parts, starts, budget, like):
        self.parts, self.starts, self.budget = parts, starts, budget
        self.where = placement(like)
        self.n, self.d = int(like.shape[0]), int(like.shape[1])
        self.dtype = like.dtype

    def step(self, C, labels_old):
        import dask

        f = dask.delayed(_lloyd_block, pure=True, nout=2)
        prev = labels_old or [None] * len(self.parts)
        out = self.each(f, prev, C, self.budget)
        labels, stats = [], []
        for o, where in zip(out, self.where):  # the split stays with its block
            with on(where):
                labels.append(o[0])
                stats.append(o[1])
        labels, stats = persist(labels, tree(stats))
        (stats,) = compute(stats)
        return labels, stats

    def each(self, f, per_block, *consts, weights=True):
        """``f(x_block, [w_block,] [per_block[i],] *consts)`` for every block,
        each task on the worker holding its block of X."""
        out = []
        none = per_block is None
        per_block = [None] * len(self.parts) if none else per_block
        for (xb, wb), p, where in zip(self.parts, per_block, self.where):
            args = ((xb, wb) if weights else (xb,)) + (() if none else (p,))
            with on(where):
                out.append(f(*args, *consts))
        return out

    def relocate(self, labels, C_old, sums, wsum):
        """scikit-learn's empty-cluster rule: each empty cluster takes the
        point farthest from its old centre (removed from that cluster)."""
        import dask

        xp = _ns(sums)
        empty = [int(i) for i in np.nonzero(np.asarray(wsum == 0))[0]]
        m = len(empty)
        f = dask.delayed(_farthest_block, pure=True)
        tops = compute(*self.each(f, list(zip(labels, self.starts)), C_old, m))
        r, _, rows_, w, lab = (xp.concat([t[i] for t in tops]) for i in range(5))
        order = xp.argsort(-r, stable=True)[:m]
        sums, wsum = xp.asarray(sums, copy=True), xp.asarray(wsum, copy=True)
        for new, j in zip(empty, [int(j) for j in order]):
            old, xj, wj = int(lab[j]), rows_[j, :], w[j]
            sums[old, :] -= wj * xj
            wsum[old] -= wj
            sums[new, :], wsum[new] = wj * xj, wj
        return sums / wsum[:, None]

    def run(self, C, max_iter, tol):
        """Lloyd's loop with the single-machine stopping rules."""
        from xpml.cluster._kmeans import _means

        labels_old, strict, n_iter = None, False, 0
        for n_iter in range(1, max_iter + 1):
            labels, (sums, wsum, changed) = self.step(C, labels_old)
            xp = _ns(sums)
            C_new = _means(sums, wsum, C, xp=xp)
            strict = labels_old is not None and int(changed) == 0
            if bool(xp.any(wsum == 0)):
                C_new = self.relocate(labels, C, sums, wsum)
            shift = float(xp.sum((C_new - C) ** 2))
            C = C_new
            if strict or shift <= tol:
                break
            labels_old = labels
        return self.finish(C, labels, strict, n_iter)

    def finish(self, C, labels, strict, n_iter):
        import dask

        if not strict:  # labels that match the final centres
            f = dask.delayed(_label_block, pure=True)
            labels = [
                f(xb, p, C, self.budget) for (xb, _), p in zip(self.parts, labels)
            ]
        g = dask.delayed(_inertia_block, pure=True)
        inertia = tree([g(xb, wb, p, C) for (xb, wb), p in zip(self.parts, labels)])
        labels, (inertia,) = compute(labels, inertia)
        xp = _ns(C)
        return C, xp.concat(list(labels)), float(inertia), n_iter


# ------------------------------------------------------------ initialisation
def _cost_block(Xb, wb, C):
    from xpml.kernels import sq_distances

    xp = _ns(Xb)
    D = xp.min(sq_distances(Xb, C, xp=xp), axis=1)
    return (xp.sum(_weights(Xb, wb) * xp.maximum(D, xp.zeros_like(D))),)


def _sample_block(Xb, wb, seed, C, rate):
    """The rows kept with probability ``min(1, rate · w · D²)``."""
    from xpml.kernels import sq_distances

    xp = _ns(Xb)
    D = xp.maximum(xp.min(sq_distances(Xb, C, xp=xp), axis=1), 0.0)
    p = np.asarray(array_api_compat.to_device(rate * _weights(Xb, wb) * D, "cpu"))
    keep = np.random.default_rng(seed).uniform(size=p.shape[0]) < p
    return xp.take(Xb, xp.asarray(np.nonzero(keep)[0]), axis=0)


def _nearest_weight_block(Xb, wb, C):
    from xpml.kernels import sq_distances

    xp = _ns(Xb)
    lab = xp.argmin(sq_distances(Xb, C, xp=xp), axis=1)
    M = xp.astype(lab[None, :] == xp.arange(C.shape[0])[:, None], Xb.dtype)
    return (M @ _weights(Xb, wb),)


def _row(parts, starts, i):
    b = int(np.searchsorted(starts, i, side="right")) - 1
    return parts[b][0][i - starts[b] : i - starts[b] + 1]


def _kmeans_parallel(lloyd, k, rng):
    """k-means|| candidates, reduced to ``k`` centres on the client."""
    import dask

    from xpml.cluster import KMeans

    (C,) = compute(_row(lloyd.parts, lloyd.starts, int(rng.integers(lloyd.n))))
    cost = dask.delayed(_cost_block, pure=True)
    sample = dask.delayed(_sample_block, pure=True)
    for _ in range(_ROUNDS):
        ((phi,),) = compute(tree(lloyd.each(cost, None, C)))
        if float(phi) <= 0:
            break
        seeds = [int(s) for s in rng.integers(2**63, size=len(lloyd.parts))]
        picked = compute(*lloyd.each(sample, seeds, C, 2.0 * k / float(phi)))
        C = _ns(C).concat([C, *picked], axis=0)
    nearest = dask.delayed(_nearest_weight_block, pure=True)
    ((weights,),) = compute(tree(lloyd.each(nearest, None, C)))
    if C.shape[0] <= k:
        raise ValueError(
            f"k-means|| found only {C.shape[0]} distinct candidates for "
            f"n_clusters={k}; pass init='forgy' or an array of centres"
        )
    km = KMeans(n_clusters=k, init="k-means++", n_init=1, random_state=rng)
    return km.fit(C, sample_weight=weights).cluster_centers_


def _init(est, lloyd, rng, xp):
    """Initial centres: the given array, ``k`` distinct rows, or k-means||."""
    from xpml._backend import to_numpy

    k, parts, starts, n = est.n_clusters, lloyd.parts, lloyd.starts, lloyd.n
    if not isinstance(est.init, str):
        C = xp.asarray(to_numpy(est.init), dtype=lloyd.dtype)
        if tuple(C.shape) != (k, lloyd.d):
            raise ValueError(
                f"init array has shape {tuple(C.shape)}; it must be (n_clusters, "
                f"n_features) = {(k, lloyd.d)}"
            )
        return C
    if est.init == "forgy":
        idx = rng.choice(n, size=k, replace=False)
        return xp.concat(list(compute(*[_row(parts, starts, int(i)) for i in idx])))
    if est.init == "k-means++":
        return _kmeans_parallel(lloyd, k, rng)
    raise ValueError(
        f"init={est.init!r} is not available on dask arrays (it draws one label "
        f"per sample on the client); use 'k-means++' (run as k-means||), "
        f"'forgy' or an array of centres"
    )


@register("KMeans")
def fit_kmeans(est, X, y, sample_weight):
    """Lloyd's iterations on the cluster from ``n_init`` initialisations."""
    data = prologue(est, X, None, sample_weight)
    k, n, xp = est.n_clusters, data.n, data.xp
    if n < k:
        raise ValueError(f"n_samples={n} should be >= n_clusters={k}")
    Xp, wp = persist(data.X, data.w)
    parts = [(b[0], b[1]) for b in blocks(Xp, wp)]
    starts = np.cumsum((0,) + Xp.chunks[0])[:-1]
    (var,) = compute(Xp.var(axis=0).mean())
    tol = est.tol * float(var)
    rng = check_random_state(est.random_state)
    runs = 1 if not isinstance(est.init, str) else est.n_init
    runs = (1 if est.init == "k-means++" else 10) if runs == "auto" else runs
    lloyd, best = _Lloyd(parts, starts, est.memory_budget, Xp), None
    for _ in range(runs):
        C = _init(est, lloyd, rng, xp)
        run = lloyd.run(C, est.max_iter, tol)
        if best is None or run[2] < best[2]:
            best = run
    C, labels, inertia, n_iter = best
    est.cluster_centers_ = C
    est.labels_ = xp.astype(labels, xp.int64)
    est.inertia_ = inertia
    est.n_iter_ = n_iter
    return est
