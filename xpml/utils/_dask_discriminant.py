"""Dask fits of LinearDiscriminantAnalysis and QuadraticDiscriminantAnalysis.

One graph, one compute: class counts and sums (first pass), then, about the
class means, what each solver needs (second pass):

* LDA "lsqr" / "eigen": the per-class weighted scatters ``S_k`` (and, for
  "eigen", the total scatter about the weighted overall mean); the small
  problem is then the single-machine one (``_lda_lsqr``, ``_lda_eigen``);
* LDA "svd": the ``R`` factor of a tall-skinny QR of the class-centred,
  ``√w``-scaled rows (per-block QR, ``R``s stacked up a tree); the single-
  machine ``_lda_svd`` runs on ``R`` with weights chosen so that its standard
  deviations, whitening and between-class step are the ones of the full data;
* QDA "svd": one ``R`` per class (the class's centred rows), whose SVD has the
  singular values and right singular vectors of the class's centred data;
  "eigen": the per-class scatters.

Singular vectors are defined up to sign: ``scalings_`` (LDA "svd") and
``rotations_`` (QDA "svd") may differ from the single-machine fit by the sign
of a column; the coefficients, scores and predictions do not depend on it.
Shrinkage ``"auto"`` (Ledoit–Wolf) adds a third pass in the same graph: the
per-class fourth moments of the standardised rows. ``covariance_estimator``
(fitted on the rows) is refused with a TypeError.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import array_api_compat
import numpy as np

from xpml._dask import blocks, compute, map_sum, register, tree
from xpml.utils._dask_fits import _onehot, _stack_r, prologue

__all__ = ["fit_lda", "fit_qda"]


def _ns(a):
    return array_api_compat.array_namespace(a)


# ------------------------------------------------------------ block statistics
def _first_block(Xb, codes, wb, K):
    """``(Σ_k w x, Σ_k w)`` per class of one block."""
    xp = _ns(Xb)
    Y = _onehot(codes, K, wb, Xb.dtype)
    return Y.T @ Xb, xp.sum(Y, axis=0)


def _moments(sums):
    """Class means (zero for an empty class) and the weighted overall mean."""
    sx, count = sums
    xp = _ns(sx)
    safe = xp.where(count > 0, count, xp.ones_like(count))
    return sx / safe[:, None], xp.sum(sx, axis=0) / xp.sum(count)


def _class_centred(Xb, codes, means):
    return Xb - _onehot(codes, means.shape[0], None, Xb.dtype) @ means


def _scatter_block(Xb, codes, wb, moments, total):
    """Per-class weighted scatters ``Σ_{i∈k} w (x − μ_k)(x − μ_k)ᵀ`` (K, d, d)
    and, with ``total``, the weighted scatter about the overall mean."""
    xp = _ns(Xb)
    means, mu = moments
    K = means.shape[0]
    Y = _onehot(codes, K, wb, Xb.dtype)
    Xc = _class_centred(Xb, codes, means)
    S = xp.stack([(Xc * Y[:, k][:, None]).T @ Xc for k in range(K)])
    if not total:
        return S, xp.zeros((), dtype=Xb.dtype)
    Xm = Xb - mu
    Xw = Xm if wb is None else Xm * wb[:, None]
    return S, Xw.T @ Xm


def _pooled_r_block(Xb, codes, wb, moments):
    """``R`` of the class-centred, ``√w``-scaled rows of one block."""
    xp = _ns(Xb)
    Xc = _class_centred(Xb, codes, moments[0])
    if wb is not None:
        Xc = Xc * xp.sqrt(wb)[:, None]
    return xp.linalg.qr(Xc)[1]


def _class_r_block(Xb, codes, wb, moments):
    """One ``R`` per class: of the block's rows of that class, centred."""
    xp = _ns(Xb)
    means = moments[0]
    out = []
    for k in range(means.shape[0]):
        rows = xp.nonzero(codes == k)[0]
        out.append(xp.linalg.qr(xp.take(Xb, rows, axis=0) - means[k, :])[1])
    return tuple(out)


def _stack_each(a, b):
    return tuple(_stack_r(r1, r2) for r1, r2 in zip(a, b))


def _r_tree(fn, data, moments):
    """Delayed combination of per-block ``R`` factors (``fn`` per block)."""
    import dask

    f = dask.delayed(fn, pure=True)
    combine = _stack_r if fn is _pooled_r_block else _stack_each
    return tree([f(*b, moments) for b in blocks(data.X, data.y, data.w)], combine)


def _standard_deviations(first, S, total):
    """Per-class (and overall) standard deviations of the features, a tiny one
    replaced by 1 (the single-machine ``shrinkage="auto"`` rule)."""
    from xpml.utils._array_api import eps

    counts = first[1]
    xp = _ns(counts)

    def sd(C):
        v = xp.sqrt(xp.linalg.diagonal(C))
        return xp.where(v > 10 * eps(v.dtype, xp), v, xp.ones_like(v))

    per_class = sd(S[0] / counts[:, None, None])
    return per_class, (sd(S[1] / xp.sum(counts)) if total else per_class[0, :])


def _fourth_block(Xb, codes, wb, moments, sds):
    """``Σ w ‖(x − μ)/σ‖⁴`` per class (and about the overall mean): the fourth
    moments of Ledoit–Wolf's shrinkage, of one block."""
    xp = _ns(Xb)
    (means, mu), (sd_k, sd_t) = moments, sds
    K = means.shape[0]
    Y = _onehot(codes, K, None, Xb.dtype)
    Z = (Xb - Y @ means) / (Y @ sd_k)
    r = xp.sum(Z * Z, axis=1) ** 2
    rt = xp.sum(((Xb - mu) / sd_t) ** 2, axis=1) ** 2
    if wb is not None:
        r, rt = r * wb, rt * wb
    return Y.T @ r, xp.sum(rt)


def _statistics(data, K, *, total=False, r=None, scatter=True, fourth=False):
    """One compute: counts, means, overall mean, ``max |X|`` per column (for
    error messages), the scatters, the ``R`` tree and the Ledoit–Wolf
    moments (standard deviations and fourth moments) asked for."""
    import dask

    arrays = (data.X, data.y, data.w)
    first = map_sum(_first_block, arrays, K)
    moments = dask.delayed(_moments, pure=True, nout=2)(first)
    S = map_sum(_scatter_block, arrays, moments, total) if scatter else None
    R = None if r is None else _r_tree(r, data, moments)
    lw = None
    if fourth:
        sds = dask.delayed(_standard_deviations, pure=True)(first, S, total)
        lw = (sds, map_sum(_fourth_block, arrays, moments, sds))
    top = abs(data.X).max(axis=0)
    (_, counts), (means, mu), S, R, lw, top = compute(first, moments, S, R, lw, top)
    return Stats(counts, means, mu, S, R, lw, top[None, :])


@dataclasses.dataclass
class Stats:
    """What :func:`_statistics` brought to the client: class counts (K,),
    means (K, d), overall mean (d,), scatters (per class (K, d, d), total),
    the ``R`` factor(s), the Ledoit–Wolf moments and ``max |X|`` (1, d)."""

    counts: Any
    means: Any
    mu: Any
    S: Any
    R: Any
    lw: Any
    top: Any


def _ledoit_wolf_cov(S, W, sd, q, /, *, xp):
    """scikit-learn's ``shrinkage="auto"`` covariance (``_cov``) from the
    covariance ``S``, the weight ``W``, the standard deviations ``sd`` and the
    fourth moment ``q = Σ w ‖z‖⁴`` of the standardised rows ``z``."""
    from xpml.discriminant_analysis import _shrink

    d = int(S.shape[0])
    C = S / (sd[:, None] * sd[None, :])
    shrinkage = 0.0
    if d > 1:
        trace = xp.linalg.diagonal(C)
        mu = xp.sum(trace) / d
        delta_ = xp.sum(C * C)
        beta = float((q / W - delta_) / (d * W))
        delta = float((delta_ - 2.0 * mu * xp.sum(trace) + d * mu**2) / d)
        beta = min(beta, delta)
        shrinkage = 0.0 if beta == 0 else beta / delta
    return sd[:, None] * _shrink(C, shrinkage, xp=xp) * sd[None, :]


def _class_cov(est, k, st, xp):
    """Class ``k``'s covariance as the single-machine ``_cov``: empirical,
    shrunk by a float, or Ledoit–Wolf (``"auto"``)."""
    from xpml.discriminant_analysis import _shrink

    W = st.counts[k]
    cov = st.S[0][k, ...] / W
    if est.shrinkage == "auto":
        (sd_k, _), (q, _) = st.lw
        return _ledoit_wolf_cov(cov, W, sd_k[k, :], q[k], xp=xp)
    if est.shrinkage is not None and est.shrinkage != "empirical":
        return _shrink(cov, float(est.shrinkage), xp=xp)
    return cov


def _refuse_unsupported(est, name):
    if getattr(est, "covariance_estimator", None) is not None:
        raise TypeError(
            f"{name}(covariance_estimator=...) does not fit dask arrays (the "
            f"estimator is fitted on the rows); on dask arrays use shrinkage"
        )


# ------------------------------------------------------------------------ LDA
def _lda_covariance(est, st, priors, xp):
    """``Σ_k π_k Σ_k`` as the single-machine ``_covariance``: pooled with
    ``π_k / n_k`` weights, or each class covariance shrunk."""
    counts = st.counts
    if est.shrinkage is None:
        safe = xp.where(counts > 0, counts, xp.ones_like(counts))
        return xp.sum(st.S[0] * (priors / safe)[:, None, None], axis=0)
    Sigma = 0.0
    for k in range(counts.shape[0]):  # a loop over classes (K small matrices)
        Sigma = Sigma + priors[k] * _class_cov(est, k, st, xp)
    return Sigma


def _lda_svd_from_r(est, R, counts, stats, xp):
    """The single-machine ``_lda_svd`` run on ``R`` (m × d): with ``Xc = c·R``
    and weights ``a`` such that its ``Σw``, standard deviations and whitened
    matrix (up to an orthogonal left factor) are those of the full data."""
    from xpml.discriminant_analysis import _lda_svd

    means, priors, top = stats
    W, m = xp.sum(counts), int(R.shape[0])
    Xc = R * xp.sqrt(m / W)
    sw = xp.ones((m,), dtype=R.dtype) * (W / m)
    return _lda_svd(top, Xc, sw, means, priors, tol=float(est.tol), xp=xp)


@register("LinearDiscriminantAnalysis")
def fit_lda(est, X, y, sample_weight):
    """Class sums, then the scatters (or ``R``) about the class means; the
    small problem is solved by the single-machine code."""
    from xpml.discriminant_analysis import (
        _check_weighted_classes,
        _lda_eigen,
        _lda_lsqr,
        _priors,
    )
    from xpml.linear_model._base import check_finite_result

    data = prologue(est, X, y, sample_weight, classes=True, min_samples=2)
    K, xp, solver = int(est.classes_.shape[0]), data.xp, est.solver
    if data.n == K:
        raise ValueError(
            "The number of samples must be more than the number of classes."
        )
    est._check_options(K, data.d)
    _refuse_unsupported(est, "LinearDiscriminantAnalysis")
    svd = solver == "svd"
    st = _statistics(
        data,
        K,
        total=solver == "eigen",
        r=_pooled_r_block if svd else None,
        scatter=not svd or est.store_covariance,
        fourth=est.shrinkage == "auto",
    )
    counts, means, top = st.counts, st.means, st.top
    _check_weighted_classes(counts, est.classes_, xp=xp)
    priors = _priors(est.priors, counts, xp=xp, name="priors", warn=True)
    est.priors_, est.means_ = priors, means
    if st.S is not None:
        est.covariance_ = _lda_covariance(est, st, priors, xp)
    if svd:
        coef, intercept, est.scalings_, s = _lda_svd_from_r(
            est, st.R, counts, (means, priors, top), xp
        )
        est.xbar_ = priors @ means
        est.explained_variance_ratio_ = (s**2 / xp.sum(s**2))[: est._max_components]
    elif solver == "lsqr":
        coef, intercept = _lda_lsqr(top, means, est.covariance_, priors, xp=xp)
    else:
        St = _total_cov(est, st, xp)
        coef, intercept, evals, est.scalings_ = _lda_eigen(
            top, means, est.covariance_, St, priors, xp=xp
        )
        est.explained_variance_ratio_ = (evals / xp.sum(evals))[: est._max_components]
    if not svd:
        check_finite_result(
            coef, top, xp=xp, what="coefficients", owner=type(est).__name__
        )
    _lda_coefficients(est, coef, intercept, K)
    return est


def _total_cov(est, st, xp):
    """ "eigen"'s total covariance about the overall mean, as ``_cov``."""
    from xpml.discriminant_analysis import _shrink

    W = xp.sum(st.counts)
    St = st.S[1] / W
    if est.shrinkage == "auto":
        (_, sd_t), (_, q_t) = st.lw
        return _ledoit_wolf_cov(St, W, sd_t, q_t, xp=xp)
    if est.shrinkage is not None:
        return _shrink(St, float(est.shrinkage), xp=xp)
    return St


def _lda_coefficients(est, coef, intercept, K):
    if K == 2:
        est.coef_ = (coef[1, :] - coef[0, :])[None, :]
        est.intercept_ = (intercept[1] - intercept[0])[None]
        est.theta_ = est.coef_[0, :]
        est.theta0_ = est.intercept_[0]
    else:
        est.coef_, est.intercept_ = coef, intercept


# ------------------------------------------------------------------------ QDA
def _qda_class(est, k, st, xp):
    """Regularised variances (descending) and axes of class ``k``."""
    if est.solver == "svd":
        _, s, Vt = xp.linalg.svd(st.R[k], full_matrices=False)
        r = float(est.reg_param)
        return (1.0 - r) * (s * s) / float(st.counts[k]) + r, Vt.T
    cov = _class_cov(est, k, st, xp)
    vals, vecs = xp.linalg.eigh(cov)
    order = xp.flip(xp.argsort(vals))
    return xp.take(vals, order), xp.take(vecs, order, axis=1)


@register("QuadraticDiscriminantAnalysis")
def fit_qda(est, X, y, sample_weight):
    """Class counts and means, then one ``R`` ("svd") or scatter ("eigen")
    per class; each class's decomposition on the client."""
    from xpml.discriminant_analysis import _priors
    from xpml.linear_model._base import linalg_errors

    if sample_weight is not None:
        raise TypeError("QuadraticDiscriminantAnalysis.fit takes no sample_weight")
    data = prologue(est, X, y, classes=True)
    K, xp, d = int(est.classes_.shape[0]), data.xp, data.d
    est._check_options()
    _refuse_unsupported(est, "QuadraticDiscriminantAnalysis")
    svd = est.solver == "svd"
    st = _statistics(
        data,
        K,
        r=_class_r_block if svd else None,
        scatter=not svd,
        fourth=est.shrinkage == "auto",
    )
    counts, means, top = st.counts, st.means, st.top
    est.priors_ = _priors(est.priors, counts, xp=xp, name="priors")
    labels = np.asarray(est.classes_)
    rotations, scalings = [], []
    for k in range(K):  # a loop over classes: small matrices on the client
        nk = int(counts[k])
        if nk == 1:
            raise ValueError(
                f"y has only 1 sample in class {labels[k]}, covariance is ill defined."
            )
        with linalg_errors(top, xp=xp, what="class covariance", owner="QDA"):
            S2, rot = _qda_class(est, k, st, xp)
        est._check_rank(top, S2, labels[k], nk, d, xp=xp)
        rotations.append(rot)
        scalings.append(S2)
    est.means_, est.rotations_, est.scalings_ = means, rotations, scalings
    if est.store_covariance:
        est.covariance_ = [
            (R_ * s[None, :]) @ R_.T for R_, s in zip(rotations, scalings)
        ]
    return est
