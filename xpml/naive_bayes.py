"""Naive Bayes: Bernoulli and multinomial event models, and Gaussian NB.

Features are independent given the class, so the joint log-likelihood is a sum
over features and classification is one matrix product:
``log p(y = k | x) = log π_k + Σ_j log p(x_j | k) − log Z(x)``.

Smoothing ``α`` (Laplace for ``α = 1``, Lidstone/Dirichlet otherwise) is the
posterior-mean estimate ``(count + α) / (N + αV)``. With ``α = 0`` a feature
never seen in class ``k`` has ``log p = −∞``; a document containing it gets
``log p(x | k) = −∞`` (computed with the convention ``0 · log 0 = 0``, so absent
features contribute nothing and never make a NaN). When **every** class is
``−∞`` for a row (each class has an unseen feature there) the evidence is
self-contradictory; such rows fall back to the class prior: their posterior is
``π`` and ``predict`` returns the most probable class a priori. No NaN leaks out.
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

from xpml._backend import to_numpy
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.linear_model._base import logsumexp
from xpml.utils._array_api import device as _device
from xpml.utils._param_validation import Interval
from xpml.utils.validation import decode_labels

__all__ = ["BernoulliNB", "MultinomialNB", "GaussianNB"]


def _onehot(codes, K, dtype, /, *, xp):
    return xp.astype(
        codes[:, None] == xp.arange(K, device=_device(codes))[None, :], dtype
    )


def _log_prior(class_count, param, fit_prior, /, *, xp):
    """``log π``: from ``class_prior`` (normalised), the class frequencies, or uniform."""
    K = class_count.shape[0]
    if param is not None:
        p = np.asarray(
            to_numpy(param) if hasattr(param, "shape") else param, dtype=np.float64
        )
        if p.shape != (K,):
            raise ValueError(
                f"class_prior/priors must have one entry per class, shape ({K},); "
                f"got shape {p.shape}"
            )
        if np.any(p < 0) or p.sum() <= 0:
            raise ValueError(
                f"class_prior/priors must be non-negative and not all zero; "
                f"got {p.tolist()}"
            )
        prior = xp.asarray(
            p / p.sum(), dtype=class_count.dtype, device=_device(class_count)
        )
        return xp.log(prior)
    if fit_prior:
        return xp.log(class_count) - xp.log(xp.sum(class_count))
    return xp.full(
        (K,), -math.log(K), dtype=class_count.dtype, device=_device(class_count)
    )


def _log_ratio(num, den, /, *, xp):
    """``log(num / den)`` with ``−∞`` (and no warning, no NaN) where ``num = 0``."""
    pos = num > 0
    one = xp.ones_like(num)
    return xp.where(
        pos,
        xp.log(xp.where(pos, num, one)) - xp.log(xp.where(pos, den, one)),
        xp.full_like(num, -float("inf")),
    )


def _masked_log_matmul(A, L, /, *, xp):
    """``A @ Lᵀ`` with the convention ``0 · (−∞) = 0``: entries of ``L`` that are
    ``−∞`` contribute ``−∞`` only where ``A > 0``. ``A`` (n, d) ≥ 0, ``L`` (K, d)."""
    finite = xp.isfinite(L)
    out = A @ xp.where(finite, L, xp.zeros_like(L)).T
    hits = xp.astype(A > 0, A.dtype) @ xp.astype(~finite, A.dtype).T
    return xp.where(hits > 0, xp.full_like(out, -float("inf")), out)


def _posterior_log(jll, log_prior, /, *, xp):
    """Normalised log posteriors; rows where every class is ``−∞`` get the prior."""
    all_inf = xp.all(jll == -float("inf"), axis=1)
    jll = xp.where(all_inf[:, None], log_prior[None, :] + xp.zeros_like(jll), jll)
    return jll - logsumexp(jll, xp=xp, axis=1), jll


class _BaseNB(ClassifierMixin, BaseEstimator):
    """Shared predict / predict_proba from a joint log-likelihood."""

    _xpml_tags = {}

    def _joint_log_likelihood(self, X, ctx):  # pragma: no cover - abstract
        raise NotImplementedError

    def _log_post(self, X):
        ctx, X = self._validate_predict_data(X)
        jll = self._joint_log_likelihood(X, ctx)
        logp, jll = _posterior_log(jll, ctx.take(self.class_log_prior_), xp=ctx.xp)
        return ctx, logp, jll

    def predict_joint_log_proba(self, X):
        """``log p(x, y = k)`` (n, K), un-normalised (may hold ``−∞``; see the module notes)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(self._joint_log_likelihood(X, ctx))

    def predict_log_proba(self, X):
        """Log posteriors (n, K)."""
        ctx, logp, _ = self._log_post(X)
        return ctx.out(logp)

    def predict_proba(self, X):
        """Posteriors (n, K), columns in ``classes_`` order."""
        ctx, logp, _ = self._log_post(X)
        return ctx.out(ctx.xp.exp(logp))

    def predict(self, X):
        """Most probable classes (n,)."""
        ctx, _, jll = self._log_post(X)
        return decode_labels(self.classes_, ctx.xp.argmax(jll, axis=1), ctx)


class _DiscreteNB(_BaseNB):
    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left")],
        "class_prior": [None, "array-like"],
        "fit_prior": ["boolean"],
    }

    def _counts(self, X, y, sample_weight):
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        X = self._prepare(X, xp=xp)
        Y = _onehot(codes, K, X.dtype, xp=xp) * sw[:, None]
        self.class_count_ = xp.sum(Y, axis=0)
        self.feature_count_ = Y.T @ X
        self.class_log_prior_ = _log_prior(
            self.class_count_, self.class_prior, self.fit_prior, xp=xp
        )
        return ctx, xp


class MultinomialNB(_DiscreteNB):
    """Multinomial naive Bayes for counts (e.g. word counts).

    Parameters
    ----------
    alpha : float ≥ 0, default=1.0
        Additive smoothing: ``p_kj = (N_kj + α) / (N_k + αd)``. ``α = 0`` is
        allowed (maximum likelihood; see the module notes on ``−∞``).
    fit_prior : bool, default=True
        Learn class priors from the data; False gives uniform priors.
    class_prior : array-like (K,) or None
        Fixed priors (override ``fit_prior``).

    Attributes
    ----------
    classes_ : array (K,)
    class_count_ : array (K,)
    feature_count_ : array (K, d)
    class_log_prior_ : array (K,)
    feature_log_prob_ : array (K, d)
        ``log p_kj`` (``−∞`` for unseen features when ``α = 0``).
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.naive_bayes import MultinomialNB
    >>> X = np.array([[2, 1, 0], [3, 0, 0], [0, 1, 3], [0, 2, 2]]); y = np.array([0, 0, 1, 1])
    >>> nb = MultinomialNB(alpha=0.0).fit(X, y)
    >>> nb.predict_proba(np.array([[1, 0, 0], [1, 0, 1]])).round(3).tolist()
    [[1.0, 0.0], [0.5, 0.5]]
    """

    _xpml_tags = {"data": "counts", "poor_score": True, "positive_only": True}

    def __init__(self, *, alpha=1.0, fit_prior=True, class_prior=None):
        self.alpha = alpha
        self.fit_prior = fit_prior
        self.class_prior = class_prior

    @staticmethod
    def _prepare(X, /, *, xp):
        if bool(xp.any(X < 0)):
            raise ValueError(
                "Negative values in data passed to MultinomialNB (input X); "
                "counts must be >= 0"
            )
        return X

    def fit(self, X, y, sample_weight=None):
        """Count features per class and smooth; returns self."""
        ctx, xp = self._counts(X, y, sample_weight)
        fc = self.feature_count_ + float(self.alpha)
        total = xp.sum(fc, axis=1, keepdims=True) + xp.zeros_like(fc)
        self.feature_log_prob_ = _log_ratio(fc, total, xp=xp)
        return self._fitted(ctx)

    def _joint_log_likelihood(self, X, ctx):
        xp = ctx.xp
        X = self._prepare(X, xp=xp)
        return _masked_log_matmul(
            X, ctx.take(self.feature_log_prob_), xp=xp
        ) + ctx.take(self.class_log_prior_)


class BernoulliNB(_DiscreteNB):
    """Bernoulli naive Bayes for binary features (present / absent).

    Parameters
    ----------
    alpha : float ≥ 0, default=1.0
        Smoothing: ``p_kj = (N_kj + α) / (N_k + 2α)``.
    binarize : float or None, default=0.0
        Threshold: features ``> binarize`` count as present. None: ``X`` is
        already binary.
    fit_prior : bool, default=True
    class_prior : array-like (K,) or None

    Attributes
    ----------
    classes_, class_count_, feature_count_, class_log_prior_ : as :class:`MultinomialNB`
    feature_log_prob_ : array (K, d)
        ``log p_kj`` (probability that feature ``j`` is present in class ``k``).
    n_features_in_ : int

    Notes
    -----
    ``log p(x | k) = Σ_j x_j log p_kj + (1 − x_j) log(1 − p_kj)``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.naive_bayes import BernoulliNB
    >>> X = np.array([[1, 1, 0], [1, 0, 0], [0, 1, 1], [0, 0, 1]]); y = np.array([0, 0, 1, 1])
    >>> BernoulliNB().fit(X, y).predict(np.array([[1, 0, 0], [0, 0, 1]])).tolist()
    [0, 1]
    """

    _parameter_constraints = {
        **_DiscreteNB._parameter_constraints,
        "binarize": [None, Interval(Real, None, None)],  # finite: NaN compares false
    }
    _xpml_tags = {"poor_score": True}

    def __init__(self, *, alpha=1.0, binarize=0.0, fit_prior=True, class_prior=None):
        self.alpha = alpha
        self.binarize = binarize
        self.fit_prior = fit_prior
        self.class_prior = class_prior

    def _prepare(self, X, /, *, xp):
        if self.binarize is None:
            return X
        return xp.astype(X > float(self.binarize), X.dtype)

    def fit(self, X, y, sample_weight=None):
        """Count present features per class and smooth; returns self."""
        ctx, xp = self._counts(X, y, sample_weight)
        a = float(self.alpha)
        num = self.feature_count_ + a
        den = self.class_count_[:, None] + 2.0 * a
        den = den + xp.zeros_like(num)
        self.feature_log_prob_ = _log_ratio(num, den, xp=xp)
        self._state_log_neg = _log_ratio(
            den - num, den, xp=xp
        )  # log(1 − p), exact at p = 1
        return self._fitted(ctx)

    def _joint_log_likelihood(self, X, ctx):
        xp = ctx.xp
        X = self._prepare(X, xp=xp)
        log_p = ctx.take(self.feature_log_prob_)
        log_q = ctx.take(self._state_log_neg)
        present = _masked_log_matmul(X, log_p, xp=xp)
        absent = _masked_log_matmul(1.0 - X, log_q, xp=xp)
        return present + absent + ctx.take(self.class_log_prior_)


class GaussianNB(_BaseNB):
    """Gaussian naive Bayes: one normal distribution per feature and class.

    Parameters
    ----------
    priors : array-like (K,) or None, default=None
    var_smoothing : float, default=1e-9
        ``var_smoothing · max_j Var(x_j)`` is added to every variance
        (scikit-learn's rule), for stability.

    Attributes
    ----------
    classes_ : array (K,)
    class_count_ : array (K,)
    class_prior_ : array (K,)
    class_log_prior_ : array (K,)
    theta_ : array (K, d)
        Class means.
    var_ : array (K, d)
        Class variances (maximum likelihood, weighted) plus ``epsilon_``.
    epsilon_ : float
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.naive_bayes import GaussianNB
    >>> X = np.array([[-1.0, -1.0], [-2.0, -1.0], [1.0, 1.0], [2.0, 1.0]]); y = np.array([0, 0, 1, 1])
    >>> GaussianNB().fit(X, y).predict(np.array([[-0.8, -1.0]])).tolist()
    [0]
    """

    _parameter_constraints = {
        "priors": [None, "array-like"],
        "var_smoothing": [Interval(Real, 0, None, closed="left")],
    }

    def __init__(self, *, priors=None, var_smoothing=1e-9):
        self.priors = priors
        self.var_smoothing = var_smoothing

    def fit(self, X, y, sample_weight=None):
        """Estimate per-class means and variances; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        eps = float(self.var_smoothing) * float(xp.max(xp.var(X, axis=0)))
        Y = _onehot(codes, K, X.dtype, xp=xp) * sw[:, None]
        count = xp.sum(Y, axis=0)
        if int(xp.sum(xp.astype(count > 0, xp.int64))) < 2:
            raise ValueError(
                "only one class has a positive total sample weight; at least "
                "two classes are needed"
            )
        safe = xp.where(count > 0, count, xp.ones_like(count))
        theta = (Y.T @ X) / safe[:, None]
        var = xp.stack(
            [
                xp.sum(Y[:, k][:, None] * (X - theta[k, :]) ** 2, axis=0) / safe[k]
                for k in range(K)
            ],
            axis=0,
        )
        self.class_count_ = count
        self.theta_ = theta
        self.var_ = var + eps
        self.epsilon_ = eps
        self.class_log_prior_ = _log_prior(count, self.priors, True, xp=xp)
        self.class_prior_ = xp.exp(self.class_log_prior_)
        return self._fitted(ctx)

    def _joint_log_likelihood(self, X, ctx):
        xp = ctx.xp
        theta, var = ctx.take(self.theta_), ctx.take(self.var_)
        cols = []
        for k in range(theta.shape[0]):  # loop over classes, vectorised over n, d
            v = var[k, :]
            n_ij = -0.5 * xp.sum(xp.log(2.0 * math.pi * v))
            cols.append(n_ij - 0.5 * xp.sum((X - theta[k, :]) ** 2 / v, axis=1))
        return xp.stack(cols, axis=1) + ctx.take(self.class_log_prior_)
