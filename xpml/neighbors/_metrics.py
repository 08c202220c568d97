"""Distance metrics of the neighbour estimators, as scikit-learn names them.

A metric is resolved once (:func:`resolve_metric`) into a :class:`MetricPlan`
that says how the searches of :mod:`xpml.neighbors._search` answer it:

* **Minkowski family** (``minkowski``, ``euclidean``, ``manhattan``,
  ``chebyshev``, ...): searched as they are (exhaustive or k-d tree).
* **a linear map, then a Minkowski or cosine search**: ``minkowski`` with a
  weight vector ``w`` (``Σ w_j |q_j − x_j|^p``: coordinates scaled by
  ``w^(1/p)``), ``seuclidean`` (scaled by ``1/√V``), ``mahalanobis``
  (``(q − x)ᵀ VI (q − x) = ‖Lᵀ(q − x)‖²`` with ``VI = L Lᵀ``: rows mapped by
  ``L``; a ``VI`` that is not positive definite is a distance block), ``correlation`` (cosine after centring each row), ``haversine``
  (the great-circle angle is ``2 arcsin(c / 2)`` of the chord ``c`` between the
  points on the unit sphere: Euclidean search on the 3-D embedding);
* **distance blocks** (:func:`block_kneighbors`, :func:`block_radius`), in row
  blocks within the memory budget: ``canberra``, ``hamming`` (one feature at a
  time over the ``(b, m)`` block), ``braycurtis`` (two L1 blocks), the boolean
  metrics from the counts ``n_TT = B_q B_xᵀ`` of one product of 0/1 matrices,
  ``nan_euclidean`` (three products over the present coordinates),
  ``precomputed`` (the queries *are* the distances), and callables
  ``metric(a, b) -> float`` or objects with ``pairwise(A, B)`` (scikit-learn's
  ``DistanceMetric``), both called on the host: a Python loop over pairs for a
  callable, so it is slow.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import warnings
from numbers import Real

import numpy as np

from xpml._backend import to_numpy
from xpml.kernels import _l1_distances, _unit_rows
from xpml.utils._array_api import device, itemsize
from xpml.utils._array_api import memory_budget as memory_budget_bytes

__all__ = [
    "MetricPlan",
    "resolve_metric",
    "block_kneighbors",
    "block_radius",
    "MINKOWSKI",
    "BLOCK_METRICS",
    "MAPPED_METRICS",
    "KD_TREE_METRICS",
    "METRIC_NAMES",
]

# name: the Minkowski p it stands for (None: the estimator's p)
MINKOWSKI = {
    "minkowski": None,
    "euclidean": 2,
    "l2": 2,
    "sqeuclidean": 2,
    "manhattan": 1,
    "cityblock": 1,
    "l1": 1,
    "chebyshev": math.inf,
    "infinity": math.inf,
}
MAPPED_METRICS = ("cosine", "correlation", "seuclidean", "mahalanobis", "haversine")
BOOLEAN_METRICS = (
    "jaccard",
    "dice",
    "rogerstanimoto",
    "russellrao",
    "sokalsneath",
    "yule",
)
BLOCK_METRICS = (
    "canberra",
    "braycurtis",
    "hamming",
    "nan_euclidean",
    "precomputed",
    *BOOLEAN_METRICS,
)
METRIC_NAMES = (*MINKOWSKI, *MAPPED_METRICS, *BLOCK_METRICS)
# scikit-learn's KDTree metrics (and cosine, which xpml's tree algorithms answer
# by brute force)
KD_TREE_METRICS = (*MINKOWSKI, "cosine")


class DistanceMetricLike(abc.ABC):
    """Any object with a ``pairwise(A, B)`` method (scikit-learn's
    ``DistanceMetric``): an accepted ``metric``."""

    @abc.abstractmethod
    def pairwise(self, A, B):
        """Distances (len(A), len(B))."""

    @classmethod
    def __subclasshook__(cls, C):
        return callable(getattr(C, "pairwise", None)) or NotImplemented


@dataclasses.dataclass(frozen=True)
class MetricPlan:
    """How a metric is searched.

    ``p``: the search's rank measure (a Minkowski power, ``math.inf``, or
    "cosine"), None for a block metric; ``mapping``: rows -> rows applied to
    queries and training points before the search; ``pairwise``: the block
    metric ``(Qb, X, *, xp) -> (b, m)`` distances; ``units``: "root" (the rank
    is ``r^p`` of the distance), "identity", or "haversine".
    """

    name: str
    p: object = None
    mapping: object = None
    pairwise: object = None
    units: str = "identity"

    @property
    def exact_minkowski(self):
        """Plain Minkowski (no weights): the k-d tree's metrics."""
        return self.mapping is None and self.p is not None and self.p != "cosine"

    def to_units(self, rank, /, *, xp):
        """Distances in the metric's units from the search's rank measures."""
        if self.units == "haversine":
            return 2 * xp.asin(xp.clip(xp.sqrt(rank) / 2, 0.0, 1.0))
        if self.units == "identity" or self.p in (1, math.inf):
            return rank
        return xp.sqrt(rank) if self.p == 2 else rank ** (1.0 / self.p)

    def rank_threshold(self, radius):
        """The rank-measure threshold of a radius in the metric's units (a
        float, or a host array of per-query radii)."""
        r = np.asarray(radius, dtype=np.float64)
        if self.units == "haversine":
            t = np.where(
                r >= math.pi, 4.0, (2 * np.sin(np.minimum(r, math.pi) / 2)) ** 2
            )
        elif self.units == "identity" or self.p in (1, math.inf):
            t = r
        else:
            t = r**self.p
        return float(t) if t.ndim == 0 else t


# ---------------------------------------------------------------- resolving
def _check_keys(name, params, allowed):
    extra = sorted(set(params) - set(allowed))
    if extra:
        raise ValueError(
            f"metric_params has unsupported keys {extra} for metric={name!r}: "
            f"allowed {sorted(allowed) or 'none'}"
        )


def _minkowski_p(p, params, warn=False):
    if warn and "p" in params and p is not None and p != params["p"]:
        warnings.warn(
            "Parameter p is found in metric_params. The corresponding parameter "
            "from __init__ is ignored.",
            SyntaxWarning,
            stacklevel=4,
        )
    q = params.get("p", 2 if p is None else p)
    if isinstance(q, bool) or not isinstance(q, Real) or not q > 0:
        raise ValueError(f"p must be a positive number or inf; got {q!r}")
    return math.inf if q == math.inf else float(q)


def _feature_vector(params, key, name):
    v = np.asarray(params[key], dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(v)) or not np.all(v >= 0):
        raise ValueError(
            f"metric_params[{key!r}] for metric={name!r} must be finite and >= 0"
        )
    return v


def _scale_mapping(scale):
    """Rows scaled coordinate-wise by a host vector."""

    def mapping(X, /, *, xp):
        _check_width(scale, X, "metric_params")
        return X * xp.asarray(scale, dtype=X.dtype, device=device(X))[None, :]

    return mapping


def _matrix_mapping(L):
    def mapping(X, /, *, xp):
        _check_width(L, X, "metric_params")
        return X @ xp.asarray(L, dtype=X.dtype, device=device(X))

    return mapping


def _check_width(a, X, what):
    if a.shape[0] != X.shape[1]:
        raise ValueError(
            f"{what} has {a.shape[0]} coordinates but X has {X.shape[1]} features"
        )


def _mahalanobis_factor(params):
    if "VI" in params:
        VI = np.asarray(params["VI"], dtype=np.float64)
    elif "V" in params:
        VI = np.linalg.inv(np.asarray(params["V"], dtype=np.float64))
    else:
        raise ValueError("metric='mahalanobis' needs metric_params 'VI' (or 'V')")
    VI = (VI + VI.T) / 2
    try:
        return np.linalg.cholesky(VI), VI
    except np.linalg.LinAlgError:  # indefinite: no linear map, see _quadratic_form
        return None, VI


def _quadratic_form(VI):
    """``√max(0, (q − x)ᵀ VI (q − x))`` as a Gram-style block (three products),
    for a ``VI`` that is not positive definite (scikit-learn accepts it)."""

    def block(Qb, X, /, *, xp):
        _check_width(VI, X, "metric_params 'VI'")
        A = xp.asarray(VI, dtype=X.dtype, device=device(X))
        QA = Qb @ A
        d2 = (
            xp.sum(QA * Qb, axis=1)[:, None]
            + xp.sum((X @ A) * X, axis=1)[None, :]
            - 2 * (QA @ X.T)
        )
        return xp.sqrt(xp.clip(d2, 0.0, None))

    return block


def _centre_rows(X, /, *, xp):
    return _unit_rows(X - xp.mean(X, axis=1, keepdims=True), xp=xp)


def _sphere(X, /, *, xp):
    """(latitude, longitude) in radians -> points on the unit sphere."""
    if X.shape[1] != 2:
        raise ValueError(
            f"metric='haversine' needs 2 features (latitude, longitude in "
            f"radians); X has {X.shape[1]}"
        )
    lat, lon = X[:, 0], X[:, 1]
    return xp.stack(
        [xp.cos(lat) * xp.cos(lon), xp.cos(lat) * xp.sin(lon), xp.sin(lat)], axis=1
    )


def _resolve_minkowski(name, p, params, warn):
    _check_keys(name, params, ("p", "w") if name == "minkowski" else ())
    q = MINKOWSKI[name]
    q = _minkowski_p(p, params, warn) if q is None else q
    units = "identity" if name == "sqeuclidean" else "root"
    if params.get("w") is None:
        return MetricPlan(name, p=q, units=units)
    w = _feature_vector(params, "w", name)
    scale = w if q == math.inf else w ** (1.0 / q)
    return MetricPlan(name, p=q, mapping=_scale_mapping(scale), units=units)


def _resolve_mapped(name, params):
    if name == "cosine":
        _check_keys(name, params, ())
        return MetricPlan(name, p="cosine", mapping=_unit_rows)
    if name == "correlation":
        _check_keys(name, params, ())
        return MetricPlan(name, p="cosine", mapping=_centre_rows)
    if name == "seuclidean":
        _check_keys(name, params, ("V",))
        if "V" not in params:
            raise ValueError("metric='seuclidean' needs metric_params 'V'")
        V = _feature_vector(params, "V", name)
        return MetricPlan(
            name, p=2, mapping=_scale_mapping(1 / np.sqrt(V)), units="root"
        )
    if name == "mahalanobis":
        _check_keys(name, params, ("V", "VI"))
        L, VI = _mahalanobis_factor(params)
        if L is None:
            return MetricPlan(name, pairwise=_quadratic_form(VI))
        return MetricPlan(name, p=2, mapping=_matrix_mapping(L), units="root")
    _check_keys(name, params, ())
    return MetricPlan(name, p=2, mapping=_sphere, units="haversine")


def resolve_metric(metric, p, metric_params, *, warn=False):
    """The :class:`MetricPlan` of an estimator's ``metric``, ``p`` and
    ``metric_params`` (scikit-learn's meanings; ``metric_params["p"]``
    overrides ``p``, with scikit-learn's SyntaxWarning when ``warn``)."""
    params = dict(metric_params or {})
    if isinstance(metric, DistanceMetricLike):
        return MetricPlan("DistanceMetric", pairwise=_distance_metric_block(metric))
    if callable(metric):
        return MetricPlan("callable", pairwise=_callable_block(metric, params))
    if metric in MINKOWSKI:
        return _resolve_minkowski(metric, p, params, warn)
    if metric in MAPPED_METRICS:
        return _resolve_mapped(metric, params)
    if metric in BLOCK_METRICS:
        _check_keys(metric, params, ())
        return MetricPlan(metric, pairwise=_BLOCKS[metric])
    raise ValueError(
        f"metric must be one of {METRIC_NAMES} or a callable; got {metric!r}"
    )


# ------------------------------------------------------------- block metrics
def _per_feature_sum(Qb, X, term, /, *, xp):
    """``Σ_j term(q_j, x_j)`` over a (b, m) block, one feature at a time."""
    D = xp.zeros((Qb.shape[0], X.shape[0]), dtype=Qb.dtype, device=device(Qb))
    for j in range(Qb.shape[1]):
        D = D + term(Qb[:, j : j + 1], X[:, j][None, :])
    return D


def _canberra(Qb, X, /, *, xp):
    def term(q, x):
        den = xp.abs(q) + xp.abs(x)
        safe = xp.where(den > 0, den, xp.ones_like(den))
        return xp.where(den > 0, xp.abs(q - x) / safe, xp.zeros_like(den))

    return _per_feature_sum(Qb, X, term, xp=xp)


def _hamming(Qb, X, /, *, xp):
    def term(q, x):
        return xp.astype(q != x, Qb.dtype)

    return _per_feature_sum(Qb, X, term, xp=xp) / Qb.shape[1]


def _braycurtis(Qb, X, /, *, xp):
    """``Σ|q − x| / Σ|q + x|``: two L1 blocks (the second against ``−X``)."""
    return _l1_distances(Qb, X, xp=xp) / _l1_distances(Qb, -X, xp=xp)


def _safe_ratio(num, den, /, *, xp):
    """``num / den`` with 0 where ``den`` is 0 (SciPy's convention)."""
    ok = den != 0
    return xp.where(ok, num / xp.where(ok, den, xp.ones_like(den)), xp.zeros_like(num))


def _boolean_counts(Qb, X, /, *, xp):
    """(n_TT, n_TF, n_FT, n_FF, d) for nonzero-as-true rows: one product."""
    Bq = xp.astype(Qb != 0, Qb.dtype)
    Bx = xp.astype(X != 0, Qb.dtype)
    ntt = Bq @ Bx.T
    nq = xp.sum(Bq, axis=1)[:, None]
    nx = xp.sum(Bx, axis=1)[None, :]
    d = Qb.shape[1]
    return ntt, nq - ntt, nx - ntt, d - nq - nx + ntt, d


def _boolean(name):
    def block(Qb, X, /, *, xp):
        tt, tf, ft, ff, d = _boolean_counts(Qb, X, xp=xp)
        ne = tf + ft
        if name == "jaccard":
            return _safe_ratio(ne, tt + ne, xp=xp)
        if name == "dice":
            return _safe_ratio(ne, 2 * tt + ne, xp=xp)
        if name == "rogerstanimoto":
            return _safe_ratio(2 * ne, tt + ff + 2 * ne, xp=xp)
        if name == "russellrao":
            return (d - tt) / d
        if name == "sokalsneath":
            return _safe_ratio(2 * ne, tt + 2 * ne, xp=xp)
        return _safe_ratio(2 * tf * ft, tt * ff + tf * ft, xp=xp)  # yule

    return block


def _nan_euclidean(Qb, X, /, *, xp):
    """scikit-learn's ``√(d / n_present · Σ_present (q − x)²)`` from three
    products over the coordinates present in both rows (NaN where none is)."""
    mq = xp.astype(~xp.isnan(Qb), Qb.dtype)
    mx = xp.astype(~xp.isnan(X), Qb.dtype)
    q0 = xp.where(mq > 0, Qb, xp.zeros_like(Qb))
    x0 = xp.where(mx > 0, X, xp.zeros_like(X))
    sq = (q0 * q0) @ mx.T + mq @ (x0 * x0).T - 2 * (q0 @ x0.T)
    present = mq @ mx.T
    sq = xp.clip(sq, 0.0, None)
    nan = xp.asarray(math.nan, dtype=Qb.dtype, device=device(Qb))
    ratio = xp.where(
        present > 0, Qb.shape[1] / xp.where(present > 0, present, 1.0), nan
    )
    return xp.sqrt(sq * ratio)


def _precomputed(Qb, X, /, *, xp):
    return Qb


_BLOCKS = {
    "canberra": _canberra,
    "braycurtis": _braycurtis,
    "hamming": _hamming,
    "nan_euclidean": _nan_euclidean,
    "precomputed": _precomputed,
    **{name: _boolean(name) for name in BOOLEAN_METRICS},
}


def _callable_block(metric, params):
    """scikit-learn's callable rule, ``metric(a, b, **metric_params) -> float``
    for every pair of rows, on the host: a Python loop over pairs (slow)."""

    def block(Qb, X, /, *, xp):
        q, x = to_numpy(Qb), to_numpy(X)
        D = np.array([[metric(a, b, **params) for b in x] for a in q], dtype=np.float64)
        return xp.asarray(
            D.reshape(q.shape[0], x.shape[0]), dtype=Qb.dtype, device=device(Qb)
        )

    return block


def _distance_metric_block(metric):
    def block(Qb, X, /, *, xp):
        D = np.asarray(metric.pairwise(to_numpy(Qb), to_numpy(X)))
        return xp.asarray(D, dtype=Qb.dtype, device=device(Qb))

    return block


# ----------------------------------------------------------------- searches
def _rows_per_block(X, memory_budget, /, *, xp):
    """Query rows per distance block: about four (b, m) arrays in the budget."""
    per_row = 4 * itemsize(X.dtype, xp) * max(1, int(X.shape[0]))
    return max(1, int(memory_budget_bytes(memory_budget) // per_row))


def block_kneighbors(Q, X, k, pairwise, /, *, xp, memory_budget=None):
    """(distances, int64 indices) of the ``k`` nearest training rows under a
    block metric, ordered by (distance, index), in budgeted row blocks."""
    from xpml.neighbors._search import topk_smallest

    rows, n_q = _rows_per_block(X, memory_budget, xp=xp), int(Q.shape[0])
    dist, ind = [], []
    for r0 in range(0, n_q, rows):
        D = pairwise(Q[r0 : min(r0 + rows, n_q), :], X, xp=xp)
        D = xp.where(xp.isnan(D), xp.full_like(D, math.inf), D)
        v, i = topk_smallest(D, k, xp=xp, method="sort")
        dist.append(v)
        ind.append(xp.astype(i, xp.int64))
    if len(dist) == 1:
        return dist[0], ind[0]
    return xp.concat(dist, axis=0), xp.concat(ind, axis=0)


def block_radius(Q, X, radius, pairwise, /, *, xp, memory_budget=None):
    """(rows, cols, distances) of the pairs within ``radius`` (per query when
    ``radius`` is an array (n_queries,)) under a block metric, by (row, col)."""
    rows_per = _rows_per_block(X, memory_budget, xp=xp)
    parts = []
    for r0 in range(0, int(Q.shape[0]), rows_per):
        r1 = min(r0 + rows_per, int(Q.shape[0]))
        D = pairwise(Q[r0:r1, :], X, xp=xp)
        thr = radius[r0:r1, None] if hasattr(radius, "shape") else radius
        rows, cols = xp.nonzero(D <= thr)
        d = xp.take(xp.reshape(D, (-1,)), rows * int(X.shape[0]) + cols)
        parts.append((xp.astype(rows, xp.int64) + r0, xp.astype(cols, xp.int64), d))
    return tuple(xp.concat([part[i] for part in parts]) for i in range(3))
