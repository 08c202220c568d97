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
Shrinkage ``"auto"`` (Ledoit–Wolf needs fourth moments) and
``covariance_estimator`` (fitted on the rows) are refused with a TypeError.
"""

from __future__ import annotations

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


def _statistics(data, K, *, total=False, r=None, scatter=True):
    """One compute: counts, means, overall mean, ``max |X|`` per column (for
    error messages), the scatters and the ``R`` tree asked for."""
    import dask

    arrays = (data.X, data.y, data.w)
    first = map_sum(_first_block, arrays, K)
    moments = dask.delayed(_moments, pure=True, nout=2)(first)
    S = map_sum(_scatter_block, arrays, moments, total) if scatter else None
    R = None if r is None else _r_tree(r, data, moments)
    top = abs(data.X).max(axis=0)
    (_, counts), (means, mu), S, R, top = compute(first, moments, S, R, top)
    return counts, means, mu, S, R, top[None, :]


def _refuse_unsupported(est, name):
    if getattr(est, "covariance_estimator", None) is not None or (
        est.shrinkage == "auto"
    ):
        raise TypeError(
            f"{name}(shrinkage='auto') and covariance_estimator do not fit dask "
            f"arrays (Ledoit-Wolf needs fourth moments, an estimator the rows); "
            f"on dask arrays use shrinkage=None or a float"
        )


# ------------------------------------------------------------------------ LDA
def _lda_covariance(est, S, counts, priors, xp):
    """``Σ_k π_k Σ_k`` as the single-machine ``_covariance``: pooled with
    ``π_k / n_k`` weights, or each class covariance shrunk by a float."""
    from xpml.discriminant_analysis import _shrink

    if est.shrinkage is None:
        safe = xp.where(counts > 0, counts, xp.ones_like(counts))
        return xp.sum(S * (priors / safe)[:, None, None], axis=0)
    Sigma = 0.0
    for k in range(S.shape[0]):  # a loop over classes (K small matrices)
        cov = _shrink(S[k, ...] / counts[k], float(est.shrinkage), xp=xp)
        Sigma = Sigma + priors[k] * cov
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
        _shrink,
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
    counts, means, mu, S, R, top = _statistics(
        data,
        K,
        total=solver == "eigen",
        r=_pooled_r_block if svd else None,
        scatter=not svd or est.store_covariance,
    )
    _check_weighted_classes(counts, est.classes_, xp=xp)
    priors = _priors(est.priors, counts, xp=xp, name="priors", warn=True)
    est.priors_, est.means_ = priors, means
    if S is not None:
        est.covariance_ = _lda_covariance(est, S[0], counts, priors, xp)
    if svd:
        coef, intercept, est.scalings_, s = _lda_svd_from_r(
            est, R, counts, (means, priors, top), xp
        )
        est.xbar_ = priors @ means
        est.explained_variance_ratio_ = (s**2 / xp.sum(s**2))[: est._max_components]
    elif solver == "lsqr":
        coef, intercept = _lda_lsqr(top, means, est.covariance_, priors, xp=xp)
    else:
        St = S[1] / xp.sum(counts)
        if est.shrinkage is not None:
            St = _shrink(St, float(est.shrinkage), xp=xp)
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


def _lda_coefficients(est, coef, intercept, K):
    if K == 2:
        est.coef_ = (coef[1, :] - coef[0, :])[None, :]
        est.intercept_ = (intercept[1] - intercept[0])[None]
        est.theta_ = est.coef_[0, :]
        est.theta0_ = est.intercept_[0]
    else:
        est.coef_, est.intercept_ = coef, intercept


# ------------------------------------------------------------------------ QDA
def _qda_class(est, k, stats, xp):
    """Regularised variances (descending) and axes of class ``k``."""
    from xpml.discriminant_analysis import _shrink

    S, R, counts = stats
    nk = float(counts[k])
    if est.solver == "svd":
        _, s, Vt = xp.linalg.svd(R[k], full_matrices=False)
        r = float(est.reg_param)
        return (1.0 - r) * (s * s) / nk + r, Vt.T
    cov = S[k, ...] / nk
    if est.shrinkage is not None and est.shrinkage != "empirical":
        cov = _shrink(cov, float(est.shrinkage), xp=xp)
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
    counts, means, _, S, R, top = _statistics(
        data, K, r=_class_r_block if svd else None, scatter=not svd
    )
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
            S2, rot = _qda_class(est, k, (None if S is None else S[0], R, counts), xp)
        est._check_rank(top, S2, labels[k], nk, d, xp=xp)
        rotations.append(rot)
        scalings.append(S2)
    est.means_, est.rotations_, est.scalings_ = means, rotations, scalings
    if est.store_covariance:
        est.covariance_ = [
            (R_ * s[None, :]) @ R_.T for R_, s in zip(rotations, scalings)
        ]
    return est
