"""Explicit feature maps whose inner products approximate a kernel, for large n.

* :class:`RandomFourierFeatures` (Rahimi & Recht 2007): for the RBF kernel
  ``exp(-γ‖x−z‖²) = E_ω[cos(ωᵀx + b) cos(ωᵀz + b)]·2`` with ``ω ~ N(0, 2γI)``,
  ``b ~ U(0, 2π)``; averaging ``D`` draws gives ``z(x) = √(2/D) cos(Wᵀx + b)``.
* :class:`Nystroem` (Williams & Seeger 2001): with ``m`` landmark rows ``L``,
  ``z(x) = K(x, L) K_LL^{-1/2}``, so ``z(x)·z(x') = K(x, L) K_LL⁺ K(L, x')``,
  exact on the landmarks and on the span of their features.

Random numbers are drawn on the host with NumPy and moved to the device, so a
seed gives the same features on every backend.
"""

from __future__ import annotations

import functools
import math
import warnings
from numbers import Integral, Real

from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, TransformerMixin
from xpml.kernels import (
    EXTRA_KERNELS,
    KERNELS,
    kernel_dot,
    kernel_matrix,
    resolve_kernel_params,
)
from xpml.linear_model._base import check_finite_result, linalg_errors
from xpml.utils._array_api import eps
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state

__all__ = ["RandomFourierFeatures", "Nystroem"]


def _inverse_sqrt_psd(K, /, *, xp, rcond=None):
    """Symmetric ``K^{-1/2}`` of a PSD matrix by ``eigh``, eigenvalues at or
    below ``rcond · λ_max`` (default ``m · eps``) treated as zero (a
    pseudo-inverse square root; negative eigenvalues of a non-PSD kernel are cut
    too). Returns the matrix and the number of eigenvalues kept."""
    m = K.shape[0]
    w, V = xp.linalg.eigh((K + K.T) / 2.0)
    if rcond is None:
        rcond = m * eps(K.dtype, xp)
    cut = rcond * xp.max(xp.abs(w))
    keep = w > cut
    inv_sqrt = xp.where(
        keep, 1.0 / xp.sqrt(xp.where(keep, w, xp.ones_like(w))), xp.zeros_like(w)
    )
    return (V * inv_sqrt[None, :]) @ V.T, keep


def _class_prefix_names(est, fitted):
    """scikit-learn's output names ``<classname><i>``, one per row of the
    fitted array ``fitted`` (the number of output columns)."""
    import numpy as np

    from xpml.utils.validation import check_is_fitted

    check_is_fitted(est)
    n = int(getattr(est, fitted).shape[0])
    prefix = type(est).__name__.lower()
    return np.asarray([f"{prefix}{i}" for i in range(n)], dtype=object)


def _transform_inputs(est, X, first, second):
    """Validated ``X`` and two fitted arrays in the compute namespace, ``X`` cast
    to the fitted arrays' dtype."""
    ctx, X = est._validate_predict_data(X)
    A, B = ctx.take(getattr(est, first)), ctx.take(getattr(est, second))
    if X.dtype != A.dtype:
        X = ctx.xp.astype(X, A.dtype)
    return ctx, X, A, B


class RandomFourierFeatures(TransformerMixin, BaseEstimator):
    """Random Fourier features approximating the RBF kernel ``exp(-γ‖x−z‖²)``.

    Parameters
    ----------
    gamma : float or "scale", default=1.0
        RBF parameter; "scale" means ``1 / (n_features · X.var())``.
    n_components : int, default=100
        Number of random features ``D``.
    random_state : int, numpy Generator or None, default=None
        Seeds the draws (on the host, so every backend gets the same features).

    Attributes
    ----------
    random_weights_ : array of shape (n_features, n_components)
        ``ω ~ N(0, 2γ I)``, one column per feature.
    random_offset_ : array of shape (n_components,)
        ``b ~ U(0, 2π)``.
    gamma_ : float
        The γ used (resolves "scale").
    n_features_in_ : int

    Notes
    -----
    ``z(x) = √(2/D) cos(Wᵀx + b)``; ``E[z(x)·z(x')] = k(x, x')`` and the error
    of one entry falls like ``1/√D``.

    References
    ----------
    Rahimi & Recht, "Random features for large-scale kernel machines", NIPS 2007.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.kernel_approximation import RandomFourierFeatures
    >>> X = np.random.default_rng(0).normal(size=(5, 3))
    >>> Z = RandomFourierFeatures(gamma=0.5, n_components=20000, random_state=0).fit_transform(X)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.abs(Z @ Z.T - K).max() < 0.05)
    True
    """

    _parameter_constraints = {
        "gamma": [Interval(Real, 0, None, closed="left"), Options("scale")],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }
    _xpml_tags = {"test_params": {"random_state": 0, "n_components": 20}}

    def __init__(self, *, gamma=1.0, n_components=100, random_state=None):
        self.gamma = gamma
        self.n_components = n_components
        self.random_state = random_state

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Draw the random weights and offsets; returns self."""
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        d = int(X.shape[1])
        if self.gamma == "scale":
            var = float(xp.var(X))
            gamma = 1.0 / (d * var) if var > 0 else 1.0
        else:
            gamma = float(self.gamma)
        rng = check_random_state(self.random_state)
        W = (2.0 * gamma) ** 0.5 * rng.standard_normal((d, self.n_components))
        b = rng.uniform(0.0, 2.0 * math.pi, size=self.n_components)
        self.random_weights_ = xp.asarray(W, dtype=X.dtype, device=ctx.device)
        self.random_offset_ = xp.asarray(b, dtype=X.dtype, device=ctx.device)
        self.gamma_ = gamma
        return self._fitted(ctx)

    def transform(self, X: ArrayLike) -> Array:
        """``√(2/D) cos(X W + b)``.

        Returns
        -------
        Z : array of shape (n_samples, n_components)
        """
        ctx, X, W, b = _transform_inputs(self, X, "random_weights_", "random_offset_")
        xp = ctx.xp
        scale = (2.0 / self.random_weights_.shape[1]) ** 0.5
        return ctx.out(scale * xp.cos(X @ W + b[None, :]))

    def get_feature_names_out(self, input_features=None):
        """``randomfourierfeatures0``, ... one per output column."""
        return _class_prefix_names(self, "random_offset_")


class Nystroem(TransformerMixin, BaseEstimator):
    """Nyström approximation of a kernel map from ``m`` random landmark rows.

    Parameters
    ----------
    kernel : {"rbf", "linear", "poly", "polynomial", "sigmoid", "laplacian", \
"cosine", "chi2", "additive_chi2", "precomputed"} \
or callable, default="rbf"
        A Gram-engine kernel (see :mod:`xpml.kernels`); "precomputed": ``X``
        is the kernel matrix (``K(X_train, X_train)`` in fit, ``K(X,
        X_train)`` in transform). A callable declaring an ``xp`` keyword is
        called on row blocks, ``kernel(X_block, Y, xp=xp, **kernel_params)``;
        any other callable as scikit-learn does, ``kernel(x, z,
        **kernel_params)`` on each pair of rows (slow).
    gamma : float or None, default=None
        None means ``1/n_features`` (1 for "chi2").
    coef0 : float or None, default=None
        None means 1 (poly and sigmoid).
    degree : float or None, default=None
        None means 3 (poly).
    kernel_params : dict or None, default=None
        Extra keyword arguments for a callable kernel.
    n_components : int, default=100
        Number of landmarks ``m`` (capped at ``n_samples`` with a warning).
    random_state : int, numpy Generator or None, default=None
        Seeds the choice of landmarks (a host permutation).

    Attributes
    ----------
    components_ : array of shape (m, n_features)
        The landmark rows.
    component_indices_ : array of shape (m,)
        Their row indices in the training data.
    normalization_ : array of shape (m, m)
        ``K_LL^{-1/2}`` (symmetric; eigenvalues below ``m·eps·λ_max`` cut).
    n_features_in_ : int

    Notes
    -----
    ``z(x) = K(x, L) K_LL^{-1/2}``, so ``Z Zᵀ = K_nL K_LL⁺ K_Ln``; with all
    ``n`` rows as landmarks and a non-singular ``K`` this is ``K`` exactly.
    The inverse square root is taken by ``eigh`` with small (and negative)
    eigenvalues cut, where scikit-learn clamps singular values at 1e-12;
    the two agree whenever ``K_LL`` is well conditioned.

    References
    ----------
    Williams & Seeger, "Using the Nyström method to speed up kernel machines",
    NIPS 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.kernel_approximation import Nystroem
    >>> X = np.random.default_rng(0).normal(size=(40, 3))
    >>> Z = Nystroem(gamma=0.5, n_components=40, random_state=0).fit_transform(X)
    >>> K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.abs(Z @ Z.T - K).max() < 1e-8)
    True
    """

    _parameter_constraints = {
        "kernel": [Options(*KERNELS, *EXTRA_KERNELS, "precomputed"), callable],
        "gamma": [Interval(Real, 0, None, closed="left"), None],
        "coef0": [Interval(Real, None, None), None],
        "degree": [Interval(Real, 1, None, closed="left"), None],
        "kernel_params": ["dict", None],
        "n_components": [Interval(Integral, 1, None, closed="left")],
        "random_state": ["random_state"],
    }
    _xpml_tags = {"test_params": {"random_state": 0, "n_components": 10}}

    def __init__(
        self,
        kernel="rbf",
        *,
        gamma=None,
        coef0=None,
        degree=None,
        kernel_params=None,
        n_components=100,
        random_state=None,
    ):
        self.kernel = kernel
        self.gamma = gamma
        self.coef0 = coef0
        self.degree = degree
        self.kernel_params = kernel_params
        self.n_components = n_components
        self.random_state = random_state

    def _check_kernel_args(self):
        if callable(self.kernel) or self.kernel == "precomputed":
            if any(v is not None for v in (self.gamma, self.coef0, self.degree)):
                raise ValueError(
                    "Don't pass gamma, coef0 or degree to Nystroem if using a "
                    "callable or precomputed kernel (pass kernel_params instead)"
                )

    def _kernel_and_params(self, n_features):
        kernel = self.kernel
        if callable(kernel) and self.kernel_params:
            kernel = functools.partial(kernel, **self.kernel_params)
        return resolve_kernel_params(
            kernel,
            n_features,
            self.gamma,
            3 if self.degree is None else self.degree,
            1.0 if self.coef0 is None else self.coef0,
        )

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> Self:
        """Pick the landmarks and compute ``K_LL^{-1/2}``; returns self."""
        ctx, X, _, _ = self._validate_fit_data(X)
        self._check_kernel_args()
        xp = ctx.xp
        n = int(X.shape[0])
        m = self.n_components
        if m > n:
            warnings.warn(
                f"n_components={m} > n_samples={n}: n_components was set to n_samples, "
                f"which results in inefficient evaluation of the full kernel.",
                UserWarning,
                stacklevel=2,
            )
            m = n
        rng = check_random_state(self.random_state)
        inds = xp.asarray(rng.permutation(n)[:m], device=ctx.device)
        basis = xp.take(X, inds, axis=0)
        if self.kernel == "precomputed":  # X is K(X, X): K_LL is a sub-block
            K_LL = xp.take(basis, inds, axis=1)
        else:
            kernel, p = self._kernel_and_params(int(X.shape[1]))
            K_LL = kernel_matrix(basis, basis, kernel, p, xp=xp, symmetric=True)
        owner = type(self).__name__
        with linalg_errors(X, xp=xp, what="landmark kernel matrix", owner=owner):
            N, _ = _inverse_sqrt_psd(K_LL, xp=xp)
        check_finite_result(N, X, xp=xp, what="normalization_ K_LL^{-1/2}", owner=owner)
        self.normalization_ = N
        self.components_ = basis
        self.component_indices_ = inds
        return self._fitted(ctx)

    def transform(self, X: ArrayLike) -> Array:
        """``K(X, L) K_LL^{-1/2}``, computed in row blocks.

        Returns
        -------
        Z : array of shape (n_samples, n_components)
        """
        ctx, X, L, N = _transform_inputs(self, X, "components_", "normalization_")
        xp = ctx.xp
        if self.kernel == "precomputed":  # X is K(X_new, X_train)
            inds = ctx.take(self.component_indices_)
            return ctx.out(xp.take(X, inds, axis=1) @ N.T)
        kernel, p = self._kernel_and_params(int(L.shape[1]))
        return ctx.out(kernel_dot(X, L, kernel, p, N.T, xp=xp))

    def get_feature_names_out(self, input_features=None):
        """``nystroem0``, ... one per output column."""
        return _class_prefix_names(self, "components_")
