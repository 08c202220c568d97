"""Principal component analysis and truncated SVD, by the SVD of the data.

PCA takes the thin SVD of the *centred* data, ``X − x̄ = U D Vᵀ``, never the
eigen-decomposition of ``XᵀX`` (which squares the condition number). The
principal axes are the rows of ``Vᵀ``, the principal coordinates ``U D``, and the
variance along axis ``j`` is ``D_j² / (n − 1)``. Signs are made deterministic as
in scikit-learn: the largest-magnitude entry of each axis is positive.

TruncatedSVD does the same without centring (latent semantic analysis), exactly
(``algorithm="full"``) or by the randomized range finder of Halko, Martinsson &
Tropp (``algorithm="randomized"``).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from xpml._backend import enter, to_numpy
from xpml.base import BaseEstimator, TransformerMixin
from xpml.linalg import right_singular, svd_flip
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_array, check_is_fitted, check_random_state

__all__ = ["PCA", "TruncatedSVD"]


def _n_components_for(n_components, ratio_host, max_k):
    """Resolve ``n_components``: None → all, an int, or the smallest ``k`` whose
    cumulative explained-variance ratio reaches the fraction."""
    if n_components is None:
        return max_k
    if isinstance(n_components, Integral):
        if n_components > max_k:
            raise ValueError(
                f"n_components={n_components} must be between 1 and min(n_samples, "
                f"n_features)={max_k}, or a float in (0, 1) for a variance fraction"
            )
        return int(n_components)
    cum = np.cumsum(ratio_host)
    return min(int(np.searchsorted(cum, n_components, side="right")) + 1, max_k)


class PCA(TransformerMixin, BaseEstimator):
    """Principal component analysis by the SVD of the centred data.

    Parameters
    ----------
    n_components : int, float in (0, 1) or None, default=None
        Number of components to keep; a float keeps the fewest components whose
        explained variance ratios add up to at least that fraction; None keeps
        ``min(n_samples, n_features)``.
    whiten : bool, default=False
        Scale the projections to unit variance (divide by ``√explained_variance_``).

    Attributes
    ----------
    components_ : array (n_components, n_features)
        Principal axes (rows of ``Vᵀ``), largest-magnitude entry positive.
    explained_variance_ : array (n_components,)
        ``D_j² / (n − 1)``.
    explained_variance_ratio_ : array (n_components,)
        Fractions of the total variance.
    singular_values_ : array (n_components,)
    mean_ : array (n_features,)
    n_components_ : int
    noise_variance_ : float
        Mean of the discarded variances (0 when none is discarded).
    n_samples_, n_features_in_ : int

    Notes
    -----
    ``X − x̄ = U D Vᵀ``; ``transform(X) = (X − x̄) V_k`` (principal coordinates,
    ``= U_k D_k`` on the training data); ``inverse_transform(Z) = Z V_kᵀ + x̄``.

    References
    ----------
    Hastie, Tibshirani & Friedman, *The Elements of Statistical Learning*, §14.5.1.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[2.0, 0.0], [0.0, 1.0], [-2.0, 0.0], [0.0, -1.0]])
    >>> pca = PCA(n_components=1).fit(X)
    >>> pca.components_.tolist(), np.round(pca.explained_variance_ratio_, 3).tolist()
    ([[1.0, 0.0]], [0.8])
    >>> pca.transform(X)[:, 0].tolist()
    [2.0, 0.0, -2.0, 0.0]
    """

    _parameter_constraints = {
        "n_components": [
            None,
            Interval(Integral, 1, None, closed="left"),
            Interval(Real, 0, 1, closed="neither"),
        ],
        "whiten": ["boolean"],
    }
    _xpml_tags = {"data": "unsupervised"}

    def __init__(self, n_components=None, *, whiten=False):
        self.n_components = n_components
        self.whiten = whiten

    def fit(self, X, y=None):
        """Centre ``X`` and take its SVD; returns self."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit, and return the training data's principal coordinates ``U_k D_k``
        (``= (X − x̄) V_k``; ``U`` itself is never formed)."""
        return self.fit(X).transform(X)

    def _fit(self, X):
        ctx, X, _, _ = self._validate_fit_data(X, min_samples=2)
        xp = ctx.xp
        n, d = X.shape
        mean = xp.mean(X, axis=0)
        s, Vt = right_singular(X - mean, xp=xp)
        _, Vt = svd_flip(None, Vt, xp=xp)
        ev = s * s / (n - 1)
        ratio = ev / xp.sum(ev)
        max_k = min(n, d)
        k = _n_components_for(self.n_components, to_numpy(ratio), max_k)
        self.n_samples_ = int(n)
        self.n_components_ = k
        self.mean_ = mean
        self.components_ = Vt[:k, :]
        self.explained_variance_ = ev[:k]
        self.explained_variance_ratio_ = ratio[:k]
        self.singular_values_ = s[:k]
        self.noise_variance_ = float(xp.mean(ev[k:])) if k < max_k else 0.0
        self._fitted(ctx)
        return ctx

    def transform(self, X):
        """Principal coordinates ``(X − x̄) V_k`` (divided by ``√variance`` when whitening)."""
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = (X - ctx.take(self.mean_)) @ ctx.take(self.components_).T
        if self.whiten:
            Z = Z / xp.sqrt(ctx.take(self.explained_variance_))[None, :]
        return ctx.out(Z)

    def inverse_transform(self, X):
        """Back to feature space: ``Z V_kᵀ + x̄`` (undoing the whitening first)."""
        check_is_fitted(self)
        ctx, (Z,) = enter(X, names=("X",))
        xp = ctx.xp
        Z = check_array(Z, xp=xp, name="X", requested=ctx.dtype)
        if int(Z.shape[1]) != self.n_components_:
            raise ValueError(
                f"X has {int(Z.shape[1])} features, but inverse_transform of {type(self).__name__} "
                f"is expecting {self.n_components_} features (one per component)"
            )
        if self.whiten:
            Z = Z * xp.sqrt(ctx.take(self.explained_variance_))[None, :]
        return ctx.out(Z @ ctx.take(self.components_) + ctx.take(self.mean_))


def _randomized_range(X, size, n_iter, rng, /, *, xp, device):
    """Orthonormal basis of (approximately) the range of ``X``: Gaussian test
    matrix drawn on the host, ``n_iter`` QR-normalised power iterations."""
    omega = xp.asarray(
        rng.standard_normal((X.shape[1], size)), dtype=X.dtype, device=device
    )
    Q, _ = xp.linalg.qr(X @ omega)
    for _ in range(n_iter):
        Q, _ = xp.linalg.qr(X.T @ Q)
        Q, _ = xp.linalg.qr(X @ Q)
    return Q


class TruncatedSVD(TransformerMixin, BaseEstimator):
    """Rank-k SVD of uncentred data (latent semantic analysis).

    Parameters
    ----------
    n_components : int, default=2
    algorithm : {"randomized", "full"}, default="randomized"
        "full": the exact thin SVD. "randomized": Halko et al.'s range finder
        with ``n_iter`` power iterations and ``n_oversamples`` extra columns
        (random draws on the host, so every backend gets the same answer).
    n_iter : int, default=5
    n_oversamples : int, default=10
    random_state : int, Generator or None

    Attributes
    ----------
    components_ : array (n_components, n_features)
        Right singular vectors, largest-magnitude entry positive.
    singular_values_ : array (n_components,)
    explained_variance_ : array (n_components,)
        Variance of each column of the training projections ``U_k D_k``.
    explained_variance_ratio_ : array (n_components,)
        Over the total variance of ``X``'s columns.
    n_features_in_ : int

    Notes
    -----
    ``X ≈ U_k D_k V_kᵀ``; ``transform(X) = X V_k``.

    References
    ----------
    Halko, Martinsson & Tropp (2011), *Finding structure with randomness*, SIAM Review.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[3.0, 0.0], [0.0, 1.0], [3.0, 0.0]])
    >>> svd = TruncatedSVD(n_components=1, algorithm="full").fit(X)
    >>> np.round(svd.singular_values_, 6).tolist(), svd.components_.tolist()
    ([4.242641], [[1.0, 0.0]])
    """

    _parameter_constraints = {
        "algorithm": [Options("randomized", "full")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "n_iter": [Interval(Integral, 0, None, closed="left")],
        "n_oversamples": [Interval(Integral, 0, None, closed="left")],
        "random_state": ["random_state"],
    }
    _xpml_tags = {"data": "unsupervised", "test_params": {"random_state": 0}}

    def __init__(
        self,
        n_components=2,
        *,
        algorithm="randomized",
        n_iter=5,
        n_oversamples=10,
        random_state=None,
    ):
        self.n_components = n_components
        self.algorithm = algorithm
        self.n_iter = n_iter
        self.n_oversamples = n_oversamples
        self.random_state = random_state

    def fit(self, X, y=None):
        """Compute the rank-``n_components`` SVD; returns self."""
        self._fit(X)
        return self

    def fit_transform(self, X, y=None):
        """Fit, and return ``U_k D_k``."""
        ctx, Z = self._fit(X)
        return ctx.out(Z)

    def _fit(self, X):
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        n, d = X.shape
        k = self.n_components
        if k > d:
            raise ValueError(
                f"n_components={k} must be at most n_features={d} for TruncatedSVD"
            )
        if self.algorithm == "full":
            U, s, Vt = xp.linalg.svd(X, full_matrices=False)
        else:
            rng = check_random_state(self.random_state)
            size = min(k + self.n_oversamples, n, d)
            Q = _randomized_range(X, size, self.n_iter, rng, xp=xp, device=ctx.device)
            Ub, s, Vt = xp.linalg.svd(Q.T @ X, full_matrices=False)
            U = Q @ Ub
        U, Vt = svd_flip(U[:, :k], Vt[:k, :], xp=xp)
        s = s[:k]
        Z = U * s[None, :]
        ev = xp.var(Z, axis=0)
        self.components_ = Vt
        self.singular_values_ = s
        self.explained_variance_ = ev
        self.explained_variance_ratio_ = ev / xp.sum(xp.var(X, axis=0))
        self._fitted(ctx)
        return ctx, Z

    def transform(self, X):
        """Project onto the right singular vectors: ``X V_k``."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(X @ ctx.take(self.components_).T)

    def inverse_transform(self, X):
        """``Z V_kᵀ``: back to feature space."""
        check_is_fitted(self)
        ctx, (Z,) = enter(X, names=("X",))
        Z = check_array(Z, xp=ctx.xp, name="X", requested=ctx.dtype)
        return ctx.out(Z @ ctx.take(self.components_))
