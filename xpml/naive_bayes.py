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

``partial_fit`` learns from batches: the discrete models add counts; Gaussian NB
pools each class's weighted mean and variance with the batch's (Chan, Golub &
LeVeque's update), so batches give ``fit`` on their union (``ε`` is taken from
the latest batch, as scikit-learn).

SciPy sparse ``X`` stays sparse in :class:`MultinomialNB` and
:class:`BernoulliNB` on the NumPy backend (no backend set, or ``"numpy"``): the
counts are ``Yᵀ X`` and the log-likelihoods ``X Lᵀ`` (Bernoulli's absent term as
``Σ_j L_kj − X Lᵀ``), products SciPy computes without densifying. Elsewhere
(GaussianNB, other backends) sparse ``X`` follows xpml's one policy: converted
to a dense array within the memory budget (:mod:`xpml.utils.validation`).
"""

from __future__ import annotations

import math
import warnings
from numbers import Real

import numpy as np

from xpml._backend import enter, get_backend, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.linear_model._base import logsumexp
from xpml.utils._array_api import device as _device
from xpml.utils._math import encode_labels_against
from xpml.utils._param_validation import Interval
from xpml.utils.validation import (
    check_consistent_length,
    check_feature_names,
    check_is_fitted,
    check_n_features,
    check_sample_weight,
    decode_labels,
    dense_from_sparse,
    encode_labels,
    is_sparse,
    set_feature_names,
)

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
                f"Number of priors must match number of classes: class_prior/priors "
                f"needs shape ({K},); got shape {p.shape}"
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
    if fit_prior:  # an unseen class gets log 0 = −∞, without a warning
        total = xp.sum(class_count) + xp.zeros_like(class_count)
        return _log_ratio(class_count, total, xp=xp)
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
    if is_sparse(A):  # SciPy's sparse-dense products give dense NumPy arrays
        finite = np.isfinite(L)
        out = np.asarray(A @ np.where(finite, L, 0.0).T)
        if finite.all():  # the usual alpha > 0: no −∞ to place (host array)
            return out
        hits = np.asarray((A > 0).astype(A.dtype) @ (~finite).astype(A.dtype).T)
        return np.where(hits > 0, -np.inf, out)
    finite = xp.isfinite(L)
    out = A @ xp.where(finite, L, xp.zeros_like(L)).T
    hits = xp.astype(A > 0, A.dtype) @ xp.astype(~finite, A.dtype).T
    return xp.where(hits > 0, xp.full_like(out, -float("inf")), out)


def _complement_log_matmul(X, L, /, *, xp):
    """``(1 − X) @ Lᵀ`` with the convention of :func:`_masked_log_matmul`; for a
    sparse ``X`` as ``Σ_j L_kj − X Lᵀ`` (``−∞`` where some ``x_j < 1`` meets a
    ``−∞`` of ``L``), so ``1 − X`` is never formed densely."""
    if not is_sparse(X):
        return _masked_log_matmul(1.0 - X, L, xp=xp)
    finite = np.isfinite(L)
    Lf, inf = np.where(finite, L, 0.0), (~finite).astype(X.dtype)
    out = np.sum(Lf, axis=1)[None, :] - np.asarray(X @ Lf.T)
    if finite.all():
        return out
    at_least_one = (X >= 1).astype(X.dtype)  # sparse: 0 >= 1 is False
    hits = np.sum(inf, axis=1)[None, :] - np.asarray(at_least_one @ inf.T)
    return np.where(hits > 0, -np.inf, out)


def _class_sums(Y, X, /):
    """``Yᵀ X`` (K, d): per-class feature sums, ``X`` dense or SciPy sparse."""
    if is_sparse(X):
        return np.asarray((X.T @ Y).T)
    return Y.T @ X


def _keeps_sparse(X):
    """Sparse ``X`` stays sparse on the NumPy backend (SciPy's matrices live on
    the host); any other backend takes the dense policy."""
    return is_sparse(X) and get_backend().name in (None, "numpy")


def _sparse_X(X, name="X"):
    """A float CSR copy of a sparse ``X`` (never the caller's), checked finite."""
    X = X.tocsr()
    dtype = np.float32 if X.dtype == np.float32 else np.float64
    if X.dtype.kind == "c":
        raise ValueError(f"Complex data not supported; {name} has dtype {X.dtype}")
    X = X.astype(dtype, copy=True)
    X.sum_duplicates()
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(
            f"Found array with shape={X.shape} while a minimum of 1 sample and 1 "
            f"feature is required: {name} is empty"
        )
    if not np.all(np.isfinite(X.data)):
        what = "NaN" if np.any(np.isnan(X.data)) else "infinity"
        raise ValueError(
            f"Input {name} contains {what}; xpml estimators need finite values in {name}"
        )
    return X


def _validate_sparse_fit(est, X, y, sample_weight):
    """``_validate_fit_data(target="none")`` for a sparse ``X`` kept sparse."""
    est._validate_params()
    check_consistent_length(X, y, sample_weight, names=("X", "y", "sample_weight"))
    set_feature_names(est, X)
    X = _sparse_X(X)
    ctx, (y, sw) = enter(y, sample_weight, names=("y", "sample_weight"))
    est.n_features_in_ = int(X.shape[1])
    sw = check_sample_weight(sw, int(X.shape[0]), xp=ctx.xp, dtype=X.dtype)
    return ctx, X, y, sw


def _posterior_log(jll, log_prior, /, *, xp):
    """Normalised log posteriors; rows where every class is ``−∞`` get the prior."""
    all_inf = xp.all(jll == -float("inf"), axis=1)
    jll = xp.where(all_inf[:, None], log_prior[None, :] + xp.zeros_like(jll), jll)
    return jll - logsumexp(jll, xp=xp, axis=1), jll


def _first_call(est, classes, name="classes"):
    """scikit-learn's rule for ``partial_fit``'s ``classes``: required on the first
    call (it sets ``classes_``), equal to ``classes_`` afterwards. True on the first."""
    if classes is not None:
        wanted, _ = encode_labels(classes, name=name, min_classes=1)
        if getattr(est, "classes_", None) is not None:
            old, new = to_numpy(est.classes_), to_numpy(wanted)
            if old.shape != new.shape or not np.all(old == new):
                raise ValueError(
                    f"`classes={new.tolist()!r}` is not the same as on last call "
                    f"to partial_fit, was: {old.tolist()!r}"
                )
            return False
        est.classes_ = wanted
        return True
    if getattr(est, "classes_", None) is None:
        raise ValueError("classes must be passed on the first call to partial_fit.")
    return False


def _validate_partial(est, X, y, classes, sample_weight, *, name="classes"):
    """``partial_fit``'s validation: ``(ctx, X, codes, sample_weight, first)``,
    the codes taken against ``classes_`` (a batch may hold any subset of it).
    ``classes=None, name="codes"`` (``fit``): ``y`` already holds the codes."""
    coded = name == "codes"
    first = True if coded else _first_call(est, classes, name)
    n_prev = None if first else est.n_features_in_
    if _keeps_sparse(X) and hasattr(est, "_smooth"):  # the discrete models
        ctx, X, y, sw = _validate_sparse_fit(est, X, y, sample_weight)
    else:
        ctx, X, y, sw = est._validate_fit_data(X, y, sample_weight, target="none")
    xp = ctx.xp
    if n_prev is not None and X.shape[1] != n_prev:
        raise ValueError(
            f"X has {X.shape[1]} features, but {type(est).__name__} is expecting "
            f"{n_prev} features as input (the number of features of earlier "
            f"partial_fit data)"
        )
    if sw is None:
        sw = xp.ones((X.shape[0],), dtype=X.dtype, device=ctx.device)
    if len(y.shape) == 2 and y.shape[1] == 1:  # a column vector (fit warned)
        y = xp.reshape(y, (-1,)) if not isinstance(y, np.ndarray) else y.ravel()
    if coded:  # encoded once by fit: no second encoding (uploads, a sync)
        return ctx, X, y, sw, first
    try:
        codes = encode_labels_against(est.classes_, y, xp=xp)
    except ValueError as e:
        raise ValueError(
            f"The target label(s) in y do not exist in the initial classes: {e}"
        ) from None
    return ctx, X, codes, sw, first


def _check_alpha(alpha, force_alpha, d, /):
    """``alpha`` as a float64 NumPy scalar or (d,) array, scikit-learn's checks:
    non-negative, one entry per feature; below 1e-10 raised to 1e-10 (with a
    warning) unless ``force_alpha``."""
    a = np.asarray(
        to_numpy(alpha) if hasattr(alpha, "shape") else alpha, dtype=np.float64
    )
    if a.ndim and a.shape != (d,):
        raise ValueError(
            f"When alpha is an array, it should contains `n_features`. "
            f"Got {a.size} elements instead of {d}."
        )
    if np.any(a < 0):
        raise ValueError("All values in alpha must be greater than 0.")
    if np.any(a < 1e-10) and not force_alpha:
        warnings.warn(
            "alpha too small will result in numeric errors, setting alpha = 1.0e-10. "
            "Use `force_alpha=True` to keep alpha unchanged.",
            UserWarning,
            stacklevel=3,
        )
        a = np.maximum(a, 1e-10)
    return a


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

    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Log posteriors (n, K)."""
        ctx, logp, _ = self._log_post(X)
        return ctx.out(logp)

    def predict_proba(self, X: ArrayLike) -> Array:
        """Posteriors (n, K), columns in ``classes_`` order."""
        ctx, logp, _ = self._log_post(X)
        return ctx.out(ctx.xp.exp(logp))

    def predict(self, X: ArrayLike) -> Array:
        """Most probable classes (n,)."""
        ctx, _, jll = self._log_post(X)
        return decode_labels(self.classes_, ctx.xp.argmax(jll, axis=1), ctx)


class _DiscreteNB(_BaseNB):
    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "force_alpha": ["boolean"],
        "class_prior": [None, "array-like"],
        "fit_prior": ["boolean"],
    }

    def _validate_predict_data(self, X, **kwargs):
        """Sparse ``X`` stays sparse on the NumPy backend (see the module notes)."""
        if not _keeps_sparse(X):
            return super()._validate_predict_data(X, **kwargs)
        check_is_fitted(self)
        check_feature_names(self, X)
        X = _sparse_X(X)
        check_n_features(self, X)
        ctx, _ = enter()
        return ctx, X

    def _check_alpha(self):
        """``alpha`` after scikit-learn's checks (its private method's name and
        result: a float64 scalar or (d,) array, small values raised unless
        ``force_alpha``)."""
        d = getattr(self, "n_features_in_", None)  # needed for an array alpha only
        return _check_alpha(self.alpha, self.force_alpha, d)

    def _alpha(self, like, /, *, xp):
        """The smoothing ``α`` (scalar or (d,)) as an array like ``like``."""
        a = _check_alpha(self.alpha, self.force_alpha, like.shape[1])
        if a.ndim == 0:  # a Python float: no upload
            return float(a)
        return xp.asarray(a, dtype=like.dtype, device=_device(like))

    def _accumulate(self, ctx, X, codes, sw, first):
        """Add the batch's counts (to zero on the first call) and re-smooth."""
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        X = self._prepare(X, xp=xp)
        Y = _onehot(codes, K, X.dtype, xp=xp) * sw[:, None]
        class_count, feature_count = xp.sum(Y, axis=0), _class_sums(Y, X)
        if not first:
            class_count = class_count + ctx.take(self.class_count_)
            feature_count = feature_count + ctx.take(self.feature_count_)
        self.class_count_, self.feature_count_ = class_count, feature_count
        self.class_log_prior_ = _log_prior(
            class_count, self.class_prior, self.fit_prior, xp=xp
        )
        self._smooth(xp=xp)
        return self._fitted(ctx)

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Count features per class and smooth; returns self. A single class is
        allowed (scikit-learn's degenerate case)."""
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        self.classes_ = None  # start afresh: the classes are those of y
        self.classes_, codes = encode_labels(y, name="y", min_classes=1)
        return self._accumulate(
            *_validate_partial(self, X, codes, None, sample_weight, name="codes")
        )

    def partial_fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        classes=None,
        sample_weight: ArrayLike | None = None,
    ) -> Self:
        """Add one batch's counts (``classes``: every label, needed on the first
        call); returns self. Equivalent to ``fit`` on all batches together."""
        return self._accumulate(*_validate_partial(self, X, y, classes, sample_weight))


class MultinomialNB(_DiscreteNB):
    """Multinomial naive Bayes for counts (e.g. word counts).

    Parameters
    ----------
    alpha : float ≥ 0 or array-like (d,), default=1.0
        Additive smoothing: ``p_kj = (N_kj + α_j) / (N_k + Σ_j α_j)``. ``α = 0``
        is allowed (maximum likelihood; see the module notes on ``−∞``).
    force_alpha : bool, default=True
        Keep ``alpha`` as given; False raises values below 1e-10 to 1e-10 with
        a warning (scikit-learn's rule).
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

    _xpml_tags = {
        "data": "counts",
        "poor_score": True,
        "positive_only": True,
        "one_class_ok": True,
    }

    def __init__(
        self, *, alpha=1.0, force_alpha=True, fit_prior=True, class_prior=None
    ):
        self.alpha = alpha
        self.force_alpha = force_alpha
        self.fit_prior = fit_prior
        self.class_prior = class_prior

    @staticmethod
    def _prepare(X, /, *, xp):
        negative = np.any(X.data < 0) if is_sparse(X) else xp.any(X < 0)
        if bool(negative):
            raise ValueError(
                "Negative values in data passed to MultinomialNB (input X); "
                "counts must be >= 0"
            )
        return X

    def _smooth(self, *, xp):
        fc = self.feature_count_ + self._alpha(self.feature_count_, xp=xp)
        total = xp.sum(fc, axis=1, keepdims=True) + xp.zeros_like(fc)
        self.feature_log_prob_ = _log_ratio(fc, total, xp=xp)

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
    alpha : float ≥ 0 or array-like (d,), default=1.0
        Smoothing: ``p_kj = (N_kj + α) / (N_k + 2α)``.
    force_alpha : bool, default=True
        As :class:`MultinomialNB`.
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
    _xpml_tags = {"poor_score": True, "one_class_ok": True}

    def __init__(
        self,
        *,
        alpha=1.0,
        force_alpha=True,
        binarize=0.0,
        fit_prior=True,
        class_prior=None,
    ):
        self.alpha = alpha
        self.force_alpha = force_alpha
        self.binarize = binarize
        self.fit_prior = fit_prior
        self.class_prior = class_prior

    def _prepare(self, X, /, *, xp):
        if self.binarize is None:
            return X
        if is_sparse(X):
            if self.binarize < 0:  # zeros become ones: the dense policy
                return self._prepare(dense_from_sparse(X), xp=xp)
            return (X > float(self.binarize)).astype(X.dtype)
        return xp.astype(X > float(self.binarize), X.dtype)

    def _smooth(self, *, xp):
        a = self._alpha(self.feature_count_, xp=xp)
        num = self.feature_count_ + a
        den = self.class_count_[:, None] + 2.0 * a
        den = den + xp.zeros_like(num)
        self.feature_log_prob_ = _log_ratio(num, den, xp=xp)
        self._state_log_neg = _log_ratio(
            den - num, den, xp=xp
        )  # log(1 − p), exact at p = 1

    def _joint_log_likelihood(self, X, ctx):
        xp = ctx.xp
        X = self._prepare(X, xp=xp)
        log_p = ctx.take(self.feature_log_prob_)
        log_q = ctx.take(self._state_log_neg)
        present = _masked_log_matmul(X, log_p, xp=xp)
        absent = _complement_log_matmul(X, log_q, xp=xp)
        return present + absent + ctx.take(self.class_log_prior_)


class GaussianNB(_BaseNB):
    """Gaussian naive Bayes: one normal distribution per feature and class.

    Parameters
    ----------
    priors : array-like (K,) or None, default=None
        Fixed class priors: non-negative, summing to one (checked as
        scikit-learn); None uses the (weighted) class frequencies.
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

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Estimate per-class means and variances; returns self."""
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        return self._accumulate(ctx, X, codes, sw, True)

    def partial_fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        classes=None,
        sample_weight: ArrayLike | None = None,
    ) -> Self:
        """Update the class means and variances with one batch (Chan et al.'s
        pooled update; ``classes`` needed on the first call); returns self."""
        return self._accumulate(*_validate_partial(self, X, y, classes, sample_weight))

    def _accumulate(self, ctx, X, codes, sw, first):
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        eps = float(self.var_smoothing) * float(xp.max(xp.var(X, axis=0)))
        onehot = _onehot(codes, K, X.dtype, xp=xp)
        W = onehot * sw[:, None]
        n_b = xp.sum(W, axis=0)
        safe = xp.where(n_b > 0, n_b, xp.ones_like(n_b))[:, None]
        mu_b = (W.T @ X) / safe
        Xc = X - onehot @ mu_b  # each row minus its class's mean
        var_b = (W.T @ (Xc * Xc)) / safe
        if first:
            n, mu, var = n_b, mu_b, var_b
        else:
            n0, mu0 = ctx.take(self.class_count_), ctx.take(self.theta_)
            var0 = ctx.take(self.var_) - self.epsilon_
            n = n0 + n_b
            tot = xp.where(n > 0, n, xp.ones_like(n))[:, None]
            mu = (n0[:, None] * mu0 + n_b[:, None] * mu_b) / tot
            ssd = n0[:, None] * var0 + n_b[:, None] * var_b
            var = (ssd + (n0[:, None] * n_b[:, None] / tot) * (mu_b - mu0) ** 2) / tot
        self.class_count_, self.theta_ = n, mu
        self.var_, self.epsilon_ = var + eps, eps
        self.class_log_prior_ = _log_prior(n, self._checked_priors(K), True, xp=xp)
        self.class_prior_ = xp.exp(self.class_log_prior_)
        return self._fitted(ctx)

    def _checked_priors(self, K):
        """``priors`` checked as scikit-learn: one per class, non-negative, sum 1."""
        if self.priors is None:
            return None
        p = np.asarray(
            to_numpy(self.priors) if hasattr(self.priors, "shape") else self.priors,
            dtype=np.float64,
        )
        if p.shape != (K,):
            raise ValueError(
                f"Number of priors must match number of classes: priors has shape "
                f"{p.shape}, there are {K} classes"
            )
        if not np.isclose(p.sum(), 1.0):
            raise ValueError(
                f"The sum of the priors should be 1 (priors sum to {p.sum()})"
            )
        if np.any(p < 0):
            raise ValueError(f"Priors must be non-negative; got {p.tolist()}")
        return p

    def _joint_log_likelihood(self, X, ctx):
        xp = ctx.xp
        theta, var = ctx.take(self.theta_), ctx.take(self.var_)
        cols = []
        for k in range(theta.shape[0]):  # loop over classes, vectorised over n, d
            v = var[k, :]
            n_ij = -0.5 * xp.sum(xp.log(2.0 * math.pi * v))
            cols.append(n_ij - 0.5 * xp.sum((X - theta[k, :]) ** 2 / v, axis=1))
        return xp.stack(cols, axis=1) + ctx.take(self.class_log_prior_)
