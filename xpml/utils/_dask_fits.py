"""Dask fits of xpml estimators, on the block engine of :mod:`xpml._dask`.

Each fit maps small per-block statistics over the row chunks, sums them up a
tree, brings the sums to the client in one compute and finishes there with the
single-machine code:

* LinearRegression, Ridge (``solver="svd"``): the ``R`` of a tall-skinny QR of
  the centred, weighted ``[X | y]`` (per-block QR, then QR of stacked ``R``s);
  ``X⁺y = R_x⁺ z`` with ``[R_x | z]`` its rows. Ridge (primal): ``XᵀX``, ``Xᵀy``.
* PCA: the centred Gram (``covariance_eigh`` and truncated solvers, exact) or
  the ``R`` factor (``full``).
* GaussianNB, MultinomialNB, BernoulliNB: per-class sums and counts.
* LinearDiscriminantAnalysis, QuadraticDiscriminantAnalysis
  (:mod:`xpml.utils._dask_discriminant`): class sums, then scatters or ``R``.
* NearestNeighbors, KNeighborsClassifier/Regressor
  (:mod:`xpml.utils._dask_neighbors`): the data stays on the cluster; each
  query block is answered from per-chunk top-k lists merged up a tree.
* forests and bagging (:mod:`xpml.utils._dask_ensemble`): X computed to
  NumPy within the memory budget; members fitted through joblib's backend.
* Lasso (:mod:`xpml.utils._dask_lasso`): the centred Gram, then coordinate
  descent on it.
* KMeans (:mod:`xpml.utils._dask_kmeans`), LogisticRegression
  (:mod:`xpml.utils._dask_logistic`): one pass per iteration.

Means and centred sums come from two passes inside one graph (one compute):
the centring never loses digits to ``Σx² − n x̄²``.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import array_api_compat
import numpy as np

from xpml._dask import along, block_namespace, compute, map_sum, register, rows, tree

__all__ = ["prologue", "Data"]


def _ns(a):
    return array_api_compat.array_namespace(a)


# ----------------------------------------------------------------- prologue
@dataclasses.dataclass
class Data:
    """Validated dask inputs: ``X`` (n, d) in one column chunk, ``y`` and
    ``w`` aligned on its row chunks (``w`` None when no weights were given),
    and the namespace of the blocks."""

    X: Any
    y: Any
    w: Any
    n: int
    d: int
    xp: Any


def _check_block(Xb, yb):
    xp = _ns(Xb)
    bad = xp.sum(xp.astype(~xp.isfinite(Xb), xp.int64))
    if yb is not None and getattr(yb.dtype, "kind", "") == "f":
        bad = bad + xp.sum(xp.astype(~xp.isfinite(yb), xp.int64))
    return (bad,)


def _unique_block(yb):
    from xpml._backend import to_numpy

    return np.unique(to_numpy(yb))


def _union(a, b):
    return np.union1d(a, b)


def _encode_block(yb, classes):
    """Integer codes of one block, in the block's own library."""
    if isinstance(yb, np.ndarray):
        return np.searchsorted(classes, yb).astype(np.int64)
    xp = _ns(yb)  # CuPy labels are numbers: the search runs on the device
    return xp.astype(xp.searchsorted(xp.asarray(classes), yb), xp.int64)


def prologue(est, X, y=None, sw=None, *, classes=False, min_samples=1) -> Data:
    """Check parameters and data (one compute), set ``n_features_in_`` (and
    ``classes_``, with ``y`` replaced by integer codes)."""
    import dask

    est._validate_params()
    X = rows(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D; got a dask array of shape {X.shape}")
    xp = block_namespace(X)
    if not xp.isdtype(X.dtype, "real floating"):
        X = X.astype(np.float64)
    y, sw = along(y, X), along(sw, X)
    n, d = int(X.shape[0]), int(X.shape[1])
    if n < min_samples:
        raise ValueError(f"X has {n} sample(s); at least {min_samples} are needed")
    checks = map_sum(_check_block, (X, y))
    uniq = None
    if classes:
        f = dask.delayed(_unique_block, pure=True)
        uniq = tree([f(b) for b in y.to_delayed().reshape(-1)], _union)
    (bad,), uniq = compute(checks, uniq)
    if int(bad):
        raise ValueError("Input X (or y) contains NaN or infinity")
    est.n_features_in_ = d
    if classes:
        if uniq.shape[0] < 2:
            raise ValueError(f"y has {uniq.shape[0]} class; at least 2 are needed")
        est.classes_ = uniq
        y = y.map_blocks(_encode_block, uniq, dtype=np.int64)
    elif y is not None and not xp.isdtype(y.dtype, "real floating"):
        y = y.astype(X.dtype)
    return Data(X, y, sw, n, d, xp)


# ---------------------------------------------------------- block statistics
def _moment_block(Xb, yb, wb):
    """``(Σ w x, Σ w y, Σ w)`` of one block."""
    xp = _ns(Xb)
    if wb is None:
        wb = xp.ones((Xb.shape[0],), dtype=Xb.dtype)
    sy = xp.zeros((), dtype=Xb.dtype)
    if yb is not None:
        sy = xp.sum(wb * yb if yb.ndim == 1 else wb[:, None] * yb, axis=0)
    return xp.sum(wb[:, None] * Xb, axis=0), sy, xp.sum(wb)


def _means(sums):
    sx, sy, sw = sums
    return sx / sw, sy / sw


def _centred(Xb, yb, wb, x_off, y_off):
    """``√w (X − x̄)`` and ``√w (y − ȳ)`` of one block."""
    xp = _ns(Xb)
    Xc = Xb - x_off
    yc = None if yb is None else yb - y_off
    if wb is not None:
        s = xp.sqrt(wb)
        Xc = Xc * s[:, None]
        yc = None if yc is None else (yc * s if yc.ndim == 1 else yc * s[:, None])
    return Xc, yc


def _gram_block(Xb, yb, wb, x_off, y_off):
    Xc, yc = _centred(Xb, yb, wb, x_off, y_off)
    return Xc.T @ Xc, (Xc.T @ yc if yc is not None else Xc[:0, 0])


def _r_block(Xb, yb, wb, x_off, y_off):
    """``R`` of the reduced QR of the centred ``[X | y]`` block."""
    xp = _ns(Xb)
    Xc, yc = _centred(Xb, yb, wb, x_off, y_off)
    if yc is not None:
        Xc = xp.concat([Xc, yc[:, None] if yc.ndim == 1 else yc], axis=1)
    return xp.linalg.qr(Xc)[1]


def _stack_r(R1, R2):
    xp = _ns(R1)
    return xp.linalg.qr(xp.concat([R1, R2], axis=0))[1]


def offsets(data: Data, fit_intercept: bool) -> tuple:
    """Weighted means ``(x̄, ȳ)`` as delayed values (zeros without an intercept)."""
    import dask

    if fit_intercept:
        sums = map_sum(_moment_block, (data.X, data.y, data.w))
        means = dask.delayed(_means, pure=True, nout=2)(sums)
        return means[0], means[1]
    xp = data.xp
    t = () if data.y is None or data.y.ndim == 1 else (data.y.shape[1],)
    return xp.zeros((data.d,), dtype=data.X.dtype), xp.zeros(t, dtype=data.X.dtype)


def centred_r(data: Data, x_off, y_off) -> Any:
    """Delayed ``R`` of the centred, weighted ``[X | y]`` (tall-skinny QR tree)."""
    import dask

    f = dask.delayed(_r_block, pure=True)
    parts = [f(*b, x_off, y_off) for b in _blocks(data)]
    return tree(parts, _stack_r)


def _blocks(data):
    from xpml._dask import blocks

    return blocks(data.X, data.y, data.w)


def _split_r(R, d, y):
    return R[:, :d], (R[:, d] if y.ndim == 1 else R[:, d:])


# ------------------------------------------------------------ least squares
@register("LinearRegression")
def fit_linear_regression(est, X, y, sample_weight):
    """Least squares ``X⁺y`` from the tall-skinny ``R`` of ``[X | y]``."""
    from xpml.linear_model._base import RankDeficiencyWarning, default_rcond, pinv_solve

    if getattr(est, "positive", False):
        raise TypeError(
            "LinearRegression(positive=True) does not fit dask arrays (its NNLS "
            "solver needs the rows); use positive=False"
        )
    data = prologue(est, X, y, sample_weight)
    x_off, y_off = offsets(data, est.fit_intercept)
    R, x_off, y_off = compute(centred_r(data, x_off, y_off), x_off, y_off)
    xp = data.xp
    Rx, z = _split_r(R, data.d, data.y)
    coef, keep, s = pinv_solve(Rx, z, xp=xp, rcond=est.rcond)
    est.coef_ = coef.T if data.y.ndim == 2 else coef
    est.intercept_ = y_off - x_off @ coef
    est.rank_ = int(xp.sum(xp.astype(keep, xp.int64)))
    est.singular_ = s
    if est.rank_ < min(data.n, data.d):
        rcond = default_rcond(Rx.dtype, xp=xp) if est.rcond is None else est.rcond
        warnings.warn(
            f"X is rank deficient: numerical rank {est.rank_} < min(n_samples, "
            f"n_features)={min(data.n, data.d)} (singular values at or below "
            f"rcond={rcond:.3g} times the largest were dropped); the minimum-norm "
            f"solution is returned",
            RankDeficiencyWarning,
            stacklevel=4,
        )
    return est


@register("Ridge")
def fit_ridge(est, X, y, sample_weight):
    """Primal: ``(XᵀX + αI) w = Xᵀy`` from summed Grams; ``"svd"`` (and
    ``"dual"``, whose ``n × n`` system has no place on a cluster): the filtered
    SVD of the tall-skinny ``R``."""
    from xpml.linear_model._ridge import SKLEARN_SOLVERS as _SKLEARN_SOLVERS
    from xpml.linear_model._ridge import _solve_svd
    from xpml.utils._math import spd_solve

    if getattr(est, "positive", False) or np.ndim(est.alpha):
        raise TypeError(
            "Ridge(positive=True) and per-target alphas do not fit dask arrays; "
            "use one scalar alpha and positive=False"
        )
    data = prologue(est, X, y, sample_weight)
    alpha = float(est.alpha)
    picked = est._pick_solver(data.n, data.d, alpha)
    solver = "svd" if picked in ("svd", "dual") else "primal"
    x_off, y_off = offsets(data, est.fit_intercept)
    xp = data.xp
    if solver == "primal":
        sums = map_sum(_gram_block, (data.X, data.y, data.w), x_off, y_off)
        (G, c), x_off, y_off = compute(sums, x_off, y_off)
        if alpha:
            G = G + alpha * xp.eye(data.d, dtype=G.dtype)
        coef = spd_solve(G, c, xp=xp)
    else:
        R, x_off, y_off = compute(centred_r(data, x_off, y_off), x_off, y_off)
        coef = _solve_svd(*_split_r(R, data.d, data.y), alpha, xp=xp)
    est.coef_ = coef.T if data.y.ndim == 2 else coef
    est.intercept_ = y_off - x_off @ coef
    est.solver_ = est.solver if est.solver in _SKLEARN_SOLVERS else solver
    est.n_iter_ = None
    return est


# ---------------------------------------------------------------------- PCA
@register("PCA")
def fit_pca(est, X, y, sample_weight):
    """Exact PCA from the centred Gram (or the ``R`` factor for ``"full"``)."""
    from xpml.decomposition._pca import _truncated_k, choose_svd_solver

    data = prologue(est, X, min_samples=2)
    xp, n, d = data.xp, data.n, data.d
    solver = choose_svd_solver(est.svd_solver, (n, d), est.n_components)
    truncated = solver in ("randomized", "arpack")
    k = _truncated_k(est.n_components, solver, min(n, d)) if truncated else None
    mean, _ = offsets(Data(data.X, None, None, n, d, xp), True)
    if solver == "full":
        R, mean = compute(centred_r(Data(data.X, None, None, n, d, xp), mean, 0), mean)
        _, s, Vt = xp.linalg.svd(R, full_matrices=False)
        ev = s * s / (n - 1)
    else:
        (G, _), mean = compute(
            map_sum(_gram_block, (data.X, None, None), mean, 0), mean
        )
        lam, V = xp.linalg.eigh(G / (n - 1))
        ev = xp.maximum(xp.flip(lam, axis=0), xp.zeros_like(lam))
        Vt = xp.flip(V, axis=1).T
        s = xp.sqrt(ev * (n - 1))
    _pca_attributes(est, (mean, ev, s, Vt), n, k, solver)
    est._fit_svd_solver = solver
    return est


def _pca_attributes(est, fit, n, k, solver):
    from xpml._backend import to_numpy
    from xpml.decomposition._pca import _n_components_for
    from xpml.linalg import svd_flip

    mean, ev, s, Vt = fit
    xp = _ns(ev)
    _, Vt = svd_flip(None, Vt, xp=xp)
    max_k = min(n, int(Vt.shape[1]))
    ev = ev[:max_k]
    total = xp.sum(ev)
    if k is not None:  # truncated solvers: here exact, scikit-learn's bookkeeping
        rest = float((total - xp.sum(ev[:k])) / (max_k - k)) if k < max_k else 0.0
    else:
        k = _n_components_for(est.n_components, to_numpy(ev / total), max_k)
        rest = float(xp.mean(ev[k:])) if k < max_k else 0.0
    est.n_samples_ = int(n)
    est.n_components_ = k
    est.mean_ = mean
    est.components_ = Vt[:k, :]
    est.explained_variance_ = ev[:k]
    est.explained_variance_ratio_ = ev[:k] / total
    est.singular_values_ = s[:k]
    est.noise_variance_ = rest


# -------------------------------------------------------------- naive Bayes
def _onehot(codes, K, wb, dtype):
    xp = _ns(codes)
    Y = xp.astype(codes[:, None] == xp.arange(K)[None, :], dtype)
    return Y if wb is None else Y * wb[:, None]


def _class_sums_block(Xb, codes, wb, K):
    """``(Σ_k w x, Σ_k w, Σ x, n)`` per class and overall, of one block."""
    xp = _ns(Xb)
    Y = _onehot(codes, K, wb, Xb.dtype)
    n = xp.asarray(float(Xb.shape[0]), dtype=Xb.dtype)
    return Y.T @ Xb, xp.sum(Y, axis=0), xp.sum(Xb, axis=0), n


def _gaussian_moments(sums):
    sx, count, tx, n = sums
    xp = _ns(sx)
    safe = xp.where(count > 0, count, xp.ones_like(count))
    return sx / safe[:, None], tx / n


def _class_spread_block(Xb, codes, wb, theta_mu):
    """``Σ_k w (x − θ_k)²`` per class and ``Σ (x − μ)²`` of one block."""
    xp = _ns(Xb)
    theta, mu = theta_mu
    Y = _onehot(codes, theta.shape[0], wb, Xb.dtype)
    per_class = xp.stack(
        [
            xp.sum(Y[:, k][:, None] * (Xb - theta[k, :]) ** 2, axis=0)
            for k in range(theta.shape[0])
        ]
    )
    return per_class, xp.sum((Xb - mu) ** 2, axis=0)


@register("GaussianNB")
def fit_gaussian_nb(est, X, y, sample_weight):
    """Per-class weighted means and variances, in two passes of one graph."""
    import dask

    from xpml.naive_bayes import _log_prior

    data = prologue(est, X, y, sample_weight, classes=True)
    K = int(est.classes_.shape[0])
    arrays = (data.X, data.y, data.w)
    sums = map_sum(_class_sums_block, arrays, K)
    theta_mu = dask.delayed(_gaussian_moments, pure=True)(sums)
    spread = map_sum(_class_spread_block, arrays, theta_mu)
    (_, count, _, n), (theta, _), (ss, tss) = compute(sums, theta_mu, spread)
    xp = data.xp
    if int(xp.sum(xp.astype(count > 0, xp.int64))) < 2:
        raise ValueError(
            "only one class has a positive total sample weight; at least two "
            "classes are needed"
        )
    safe = xp.where(count > 0, count, xp.ones_like(count))
    eps = float(est.var_smoothing) * float(xp.max(tss / n))
    est.class_count_ = count
    est.theta_ = theta
    est.var_ = ss / safe[:, None] + eps
    est.epsilon_ = eps
    est.class_log_prior_ = _log_prior(count, est.priors, True, xp=xp)
    est.class_prior_ = xp.exp(est.class_log_prior_)
    return est


def _counts_block(Xb, codes, wb, est, K):
    Xb = est._prepare(Xb, xp=_ns(Xb))
    Y = _onehot(codes, K, wb, Xb.dtype)
    return Y.T @ Xb, _ns(Xb).sum(Y, axis=0)


@register("MultinomialNB", "BernoulliNB")
def fit_discrete_nb(est, X, y, sample_weight):
    """Per-class feature counts ``Yᵀ X`` and class counts."""
    import dask

    from xpml.naive_bayes import _log_prior, _log_ratio

    data = prologue(est, X, y, sample_weight, classes=True)
    K = int(est.classes_.shape[0])
    shared = dask.delayed(est, pure=True)
    ((fc, cc),) = compute(map_sum(_counts_block, (data.X, data.y, data.w), shared, K))
    xp, a = data.xp, float(est.alpha)
    est.class_count_ = cc
    est.feature_count_ = fc
    est.class_log_prior_ = _log_prior(cc, est.class_prior, est.fit_prior, xp=xp)
    if type(est).__name__ == "MultinomialNB":
        fc = fc + a
        total = xp.sum(fc, axis=1, keepdims=True) + xp.zeros_like(fc)
        est.feature_log_prob_ = _log_ratio(fc, total, xp=xp)
        return est
    num = fc + a
    den = cc[:, None] + 2.0 * a + xp.zeros_like(num)
    est.feature_log_prob_ = _log_ratio(num, den, xp=xp)
    est._state_log_neg = _log_ratio(den - num, den, xp=xp)
    return est


# ------------------------------------------------------- kernel approximation
@register("Nystroem")
def fit_nystroem(est, X, y, sample_weight):
    """The single-machine draw of landmark indices, then only those ``m`` rows
    are gathered: ``K_LL^{-1/2}`` is computed on the client."""
    from xpml.kernel_approximation import _inverse_sqrt_psd
    from xpml.kernels import kernel_matrix
    from xpml.utils.validation import check_random_state

    data = prologue(est, X)
    xp, n, m = data.xp, data.n, est.n_components
    if m > n:
        warnings.warn(
            f"n_components={m} > n_samples={n}: n_components was set to n_samples",
            UserWarning,
            stacklevel=4,
        )
        m = n
    inds = check_random_state(est.random_state).permutation(n)[:m]
    (basis,) = compute(data.X[inds])
    kernel, p = est._kernel_and_params(data.d)
    K_LL = kernel_matrix(basis, basis, kernel, p, xp=xp, symmetric=True)
    est.normalization_, _ = _inverse_sqrt_psd(K_LL, xp=xp)
    est.components_ = basis
    est.component_indices_ = xp.asarray(inds)
    return est


@register("RandomFourierFeatures")
def fit_rbf_sampler(est, X, y, sample_weight):
    """Random Fourier features: only ``gamma="scale"`` reads the data (its variance)."""
    import math

    from xpml.utils.validation import check_random_state

    data = prologue(est, X)
    xp, d = data.xp, data.d
    gamma = float(est.gamma) if est.gamma != "scale" else None
    if gamma is None:
        (var,) = compute(data.X.var())
        gamma = 1.0 / (d * float(var)) if float(var) > 0 else 1.0
    rng = check_random_state(est.random_state)
    W = (2.0 * gamma) ** 0.5 * rng.standard_normal((d, est.n_components))
    b = rng.uniform(0.0, 2.0 * math.pi, size=est.n_components)
    est.random_weights_ = xp.asarray(W, dtype=data.X.dtype)
    est.random_offset_ = xp.asarray(b, dtype=data.X.dtype)
    est.gamma_ = gamma
    return est


import xpml.utils._dask_discriminant  # noqa: E402,F401  (LDA, QDA)
import xpml.utils._dask_ensemble  # noqa: E402,F401  (forests, bagging)
import xpml.utils._dask_kmeans  # noqa: E402,F401  (registers KMeans)
import xpml.utils._dask_lasso  # noqa: E402,F401  (Lasso)
import xpml.utils._dask_logistic  # noqa: E402,F401  (registers LogisticRegression)
import xpml.utils._dask_neighbors  # noqa: E402,F401  (exact k-NN)
