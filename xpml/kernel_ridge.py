"""Kernel ridge regression: the dual solve ``α = (K + λI)⁻¹ y`` by Cholesky.

The kernel matrix comes from the Gram engine (:mod:`xpml.kernels`), so every
kernel it knows works here, plus ``"precomputed"`` and callables written on the
array namespace. The solve factors ``K + λI = L Lᵀ`` with
``xp.linalg.cholesky`` and applies the factor by two triangular solves.

The array API has no triangular solve. The portable path is blocked forward /
back substitution: for each block of ``b`` rows, subtract the contribution of
the blocks already solved (one matrix product) and solve the small ``b×b``
diagonal block with ``xp.linalg.solve``. That is ``O(n²k + nb²)`` work in
``n/b`` sequential steps of matrix products (GPU friendly); the ``b×b`` solves
use a general LU, which is backward stable on a triangular matrix. NumPy
(SciPy's LAPACK ``trtrs`` and ``trtri``, when SciPy is installed) and PyTorch
(``torch.linalg.solve_triangular``) take a native fast path behind
:func:`_solve_triangular` / :func:`_inv_sq_frobenius`; a test checks that the
paths agree.

``effective_dof_ = n − λ‖L⁻¹‖²_F`` needs ``L⁻¹``: one triangular inversion,
about as costly as the factorisation itself, so ``compute_dof=False`` roughly
halves the solve time for large ``n``.
"""

from __future__ import annotations

import functools
import warnings
from numbers import Real

import array_api_compat
import array_api_extra as xpx

from xpml.base import BaseEstimator, RegressorMixin
from xpml.kernels import (
    KERNELS,
    block_rows_for,
    iter_kernel_blocks,
    kernel_matrix,
    resolve_kernel_params,
)
from xpml.utils._param_validation import Interval, Options

__all__ = ["KernelRidge"]

_BLOCK = 256  # rows per step of the portable blocked substitution


# ------------------------------------------------------------- linear algebra
def _add_to_diagonal(K, value, /, *, xp, copy):
    """``K + value·I`` without forming ``I``: a strided update of the flat view.

    ``copy=False`` may write into ``K`` (only for matrices this module made).
    """
    n = K.shape[0]
    flat = xp.reshape(K, (n * n,))
    flat = xpx.at(flat, slice(None, None, n + 1)).add(
        value, copy=True if copy else None
    )
    return xp.reshape(flat, (n, n))


def _solve_triangular_portable(L, B, /, *, xp, transpose=False, block=_BLOCK):
    """Solve ``L X = B`` (``Lᵀ X = B`` with ``transpose``) for lower-triangular
    ``L`` and 2-D ``B`` by blocked substitution (standard functions only)."""
    n = L.shape[0]
    starts = list(range(0, n, block))
    done = []
    if not transpose:
        for s in starts:
            e = min(s + block, n)
            r = B[s:e, :]
            if done:
                r = r - L[s:e, :s] @ xp.concat(done, axis=0)
            done.append(xp.linalg.solve(L[s:e, s:e], r))
        return xp.concat(done, axis=0)
    for s in reversed(starts):  # Lᵀ is upper triangular: go from the bottom up
        e = min(s + block, n)
        r = B[s:e, :]
        if done:
            r = r - L[e:, s:e].T @ xp.concat(done[::-1], axis=0)
        done.append(xp.linalg.solve(L[s:e, s:e].T, r))
    return xp.concat(done[::-1], axis=0)


def _solve_triangular(L, B, /, *, xp, transpose=False, portable=False):
    """``L⁻¹B`` or ``L⁻ᵀB``: LAPACK (NumPy via SciPy) or torch where available,
    else the portable blocked substitution."""
    if not portable and array_api_compat.is_numpy_namespace(xp):
        try:
            from scipy.linalg import solve_triangular
        except ImportError:  # SciPy is optional: fall through to the portable path
            pass
        else:
            return solve_triangular(
                L, B, lower=True, trans="T" if transpose else "N", check_finite=False
            )
    if not portable and array_api_compat.is_torch_namespace(xp):
        import torch

        if transpose:
            return torch.linalg.solve_triangular(L.mT, B, upper=True)
        return torch.linalg.solve_triangular(L, B, upper=False)
    return _solve_triangular_portable(L, B, xp=xp, transpose=transpose)


def _cho_solve(L, B, /, *, xp, portable=False):
    """``(L Lᵀ)⁻¹ B``."""
    Z = _solve_triangular(L, B, xp=xp, portable=portable)
    return _solve_triangular(L, Z, xp=xp, transpose=True, portable=portable)


def _inv_sq_frobenius(L, /, *, xp, portable=False):
    """``‖L⁻¹‖²_F = tr((L Lᵀ)⁻¹)``: LAPACK ``trtri`` on NumPy, else ``L⁻¹I``."""
    if not portable and array_api_compat.is_numpy_namespace(xp):
        try:
            from scipy.linalg import get_lapack_funcs
        except ImportError:
            pass
        else:
            (trtri,) = get_lapack_funcs(("trtri",), (L,))
            # a C-ordered L is a Fortran-ordered upper Lᵀ: invert that, no copy
            # (same Frobenius norm)
            Linv, info = (
                trtri(L.T, lower=0) if L.flags.c_contiguous else trtri(L, lower=1)
            )
            if info == 0:
                return xp.sum(Linv * Linv)
    n = L.shape[0]
    eye = xp.eye(n, dtype=L.dtype, device=array_api_compat.device(L))
    Linv = _solve_triangular(L, eye, xp=xp, portable=portable)
    return xp.sum(Linv * Linv)


def _cholesky(A, /, *, xp):
    """Lower Cholesky factor of ``A``, or None when ``A`` is not positive definite
    (NumPy/torch raise; CuPy returns NaNs, hence the finiteness check)."""
    try:
        L = xp.linalg.cholesky(A)
    except Exception:  # LinAlgError has no common base class across libraries
        return None
    if not bool(xp.all(xp.isfinite(L))):
        return None
    return L


def _solve_dual(K, Y, alpha, /, *, xp, compute_dof, overwrite, portable=False):
    """``(K + αI)⁻¹ Y`` and ``tr(K (K + αI)⁻¹)`` (None unless ``compute_dof``).

    Falls back to the pseudo-inverse (with a warning) when ``K + αI`` is not
    positive definite, e.g. for a non-PSD kernel with a small α.
    """
    n = K.shape[0]
    A = _add_to_diagonal(K, alpha, xp=xp, copy=not overwrite)
    L = _cholesky(A, xp=xp)
    if L is not None:
        coef = _cho_solve(L, Y, xp=xp, portable=portable)
        # tr(K(K+αI)⁻¹) = tr(I − α(K+αI)⁻¹) = n − α‖L⁻¹‖²_F
        dof = (
            n - alpha * _inv_sq_frobenius(L, xp=xp, portable=portable)
            if compute_dof
            else None
        )
        return coef, dof
    warnings.warn(
        "Singular matrix in solving dual problem (K + alpha*I is not positive definite). "
        "Using least-squares solution instead.",
        RuntimeWarning,
        stacklevel=3,
    )
    if overwrite:  # K was overwritten in place: recover it for the trace below
        K = _add_to_diagonal(A, -alpha, xp=xp, copy=True)
    Ainv = xp.linalg.pinv(A)
    coef = Ainv @ Y
    dof = xp.sum(K * Ainv.T) if compute_dof else None
    return coef, dof


# ----------------------------------------------------------------- estimator
class KernelRidge(RegressorMixin, BaseEstimator):
    """Kernel ridge regression (ridge regression in a kernel's feature space).

    Minimises ``Σᵢ wᵢ (yᵢ − f(xᵢ))² + α‖f‖²_H``; the solution is
    ``f(x) = Σᵢ cᵢ k(x, xᵢ)`` with ``c = (K + αI)⁻¹ y``, found by a Cholesky
    factorisation of ``K + αI``.

    Parameters
    ----------
    alpha : float or array-like of shape (n_targets,), default=1.0
        Regularisation strength λ (>= 0); one value per target is allowed.
    kernel : {"linear", "poly", "polynomial", "rbf", "sigmoid", "laplacian", \
"precomputed"} or callable, default="linear"
        A Gram-engine kernel (see :mod:`xpml.kernels`); ``"precomputed"`` means
        ``X`` is the kernel matrix (``(n, n)`` in ``fit``, ``(m, n)`` in
        ``predict``). A callable is called as ``kernel(X_block, Y, xp=xp,
        **kernel_params)`` and returns the ``(b, m)`` block.
    gamma : float or None, default=None
        For rbf, laplacian, poly and sigmoid; None means ``1/n_features``.
    degree : float, default=3
        Degree of the poly kernel.
    coef0 : float, default=1
        Constant of the poly and sigmoid kernels.
    kernel_params : dict or None, default=None
        Extra keyword arguments for a callable kernel.
    compute_dof : bool, default=True
        Compute ``effective_dof_``. It costs one triangular inversion
        (about as much as the factorisation); turn it off for speed.

    Attributes
    ----------
    dual_coef_ : array of shape (n_samples,) or (n_samples, n_targets)
        The dual coefficients ``c``.
    X_fit_ : array of shape (n_samples, n_features)
        The training data (the training kernel matrix when precomputed),
        needed for prediction.
    effective_dof_ : float or array of shape (n_targets,) or None
        ``tr(K (K + αI)⁻¹)`` (with sample weights, of the weighted kernel
        ``S K S``, ``S = diag(√w)``); an array when ``alpha`` differs per
        target; None when ``compute_dof=False``.
    n_features_in_ : int

    Notes
    -----
    With sample weights ``w``: ``c = S (S K S + αI)⁻¹ S y`` (scikit-learn's
    convention). ``effective_dof_`` is ``Σ μⱼ/(μⱼ + α)`` over the eigenvalues
    μ of K: ``n`` at α = 0 (interpolation), falling to 0 as α grows. When
    ``K + αI`` is not positive definite (a non-PSD kernel, or α = 0 with a
    singular K) the pseudo-inverse is used with a ``RuntimeWarning``.

    References
    ----------
    Saunders, Gammerman & Vovk, "Ridge regression learning algorithm in dual
    variables", ICML 1998.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.kernel_ridge import KernelRidge
    >>> X = np.linspace(0, 1, 10)[:, None]
    >>> y = np.sin(2 * np.pi * X[:, 0])
    >>> kr = KernelRidge(alpha=1e-3, kernel="rbf", gamma=10.0).fit(X, y)
    >>> round(float(np.abs(kr.predict(X) - y).max()), 2)
    0.01
    >>> round(float(kr.effective_dof_), 2)
    7.73
    """

    _parameter_constraints = {
        "alpha": [Interval(Real, 0, None, closed="left"), "array-like"],
        "kernel": [Options(*KERNELS, "precomputed"), callable],
        "gamma": [Interval(Real, 0, None, closed="left"), None],
        "degree": [Interval(Real, 0, None, closed="left")],
        "coef0": [Interval(Real, None, None)],
        "kernel_params": ["dict", None],
        "compute_dof": ["boolean"],
    }
    _xpml_tags = {"multi_output": True}

    def __init__(
        self,
        alpha=1.0,
        *,
        kernel="linear",
        gamma=None,
        degree=3,
        coef0=1,
        kernel_params=None,
        compute_dof=True,
    ):
        self.alpha = alpha
        self.kernel = kernel
        self.gamma = gamma
        self.degree = degree
        self.coef0 = coef0
        self.kernel_params = kernel_params
        self.compute_dof = compute_dof

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.pairwise = self.kernel == "precomputed"
        return tags

    # -------------------------------------------------------------- helpers
    def _kernel_and_params(self, n_features):
        kernel = self.kernel
        if callable(kernel) and self.kernel_params:
            kernel = functools.partial(kernel, **self.kernel_params)
        return resolve_kernel_params(
            kernel, n_features, self.gamma, self.degree, self.coef0
        )

    def _alphas(self, n_targets):
        """The regularisation per target, as Python floats (validated)."""
        if isinstance(self.alpha, Real):
            return [float(self.alpha)] * n_targets
        from xpml._backend import to_numpy

        a = to_numpy(self.alpha).reshape(-1)
        if a.shape[0] not in (1, n_targets):
            raise ValueError(
                f"alpha has {a.shape[0]} values but y has {n_targets} target(s); give one "
                f"alpha or one per target"
            )
        if not (a >= 0).all():
            raise ValueError(f"alpha must be >= 0 for every target; got {a.tolist()!r}")
        vals = [float(v) for v in a]
        return vals * n_targets if len(vals) == 1 else vals

    # ------------------------------------------------------------------ API
    def fit(self, X, y, sample_weight=None):
        """Fit the dual coefficients.

        Parameters
        ----------
        X : array of shape (n_samples, n_features), or (n_samples, n_samples)
            when ``kernel="precomputed"``
        y : array of shape (n_samples,) or (n_samples, n_targets)
        sample_weight : array of shape (n_samples,), optional

        Returns
        -------
        self
        """
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="multi")
        xp = ctx.xp
        n = int(X.shape[0])
        precomputed = self.kernel == "precomputed"
        if precomputed:
            if int(X.shape[1]) != n:
                raise ValueError(
                    f"X must be a square kernel matrix when kernel='precomputed'; got shape "
                    f"{tuple(X.shape)}"
                )
            K = X
        else:
            kernel, p = self._kernel_and_params(int(X.shape[1]))
            K = kernel_matrix(X, X, kernel, p, xp=xp, symmetric=True)
        Y = y[:, None] if len(y.shape) == 1 else y
        alphas = self._alphas(int(Y.shape[1]))
        weighted = sample_weight is not None
        if weighted:
            s = xp.sqrt(sw)
            K = K * (s[:, None] * s[None, :])
            Y = Y * s[:, None]
        # K may be overwritten in place when this call made it and needs it once
        own_K = weighted or not (precomputed or callable(self.kernel))
        if len(set(alphas)) == 1:
            coef, dof = _solve_dual(
                K, Y, alphas[0], xp=xp, compute_dof=self.compute_dof, overwrite=own_K
            )
            dof = None if dof is None else float(dof)
        else:
            cols, dofs = [], []
            for j, a in enumerate(alphas):
                c, d = _solve_dual(
                    K,
                    Y[:, j : j + 1],
                    a,
                    xp=xp,
                    compute_dof=self.compute_dof,
                    overwrite=False,
                )
                cols.append(c)
                dofs.append(d)
            coef = xp.concat(cols, axis=1)
            dof = None if not self.compute_dof else xp.stack(dofs)
        if weighted:
            coef = coef * s[:, None]
        self.dual_coef_ = coef[:, 0] if len(y.shape) == 1 else coef
        self.X_fit_ = X
        self.effective_dof_ = dof
        return self._fitted(ctx)

    def predict(self, X):
        """``K(X, X_fit) @ dual_coef_``, in row blocks under the Gram engine's
        memory budget.

        Parameters
        ----------
        X : array of shape (n_queries, n_features), or (n_queries, n_samples_fit)
            when ``kernel="precomputed"``

        Returns
        -------
        y_pred : array of shape (n_queries,) or (n_queries, n_targets)
        """
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        coef = ctx.take(self.dual_coef_)
        if self.kernel == "precomputed":
            return ctx.out(X @ coef)
        X_fit = ctx.take(self.X_fit_)
        if X.dtype != X_fit.dtype:
            X = xp.astype(X, X_fit.dtype)
        kernel, p = self._kernel_and_params(int(X_fit.shape[1]))
        rows = block_rows_for(
            int(X_fit.shape[0]),
            int(X_fit.shape[1]),
            4 if X.dtype == xp.float32 else 8,
            kernel=kernel,
        )
        parts = [
            Kb @ coef
            for _, _, Kb in iter_kernel_blocks(
                X, X_fit, kernel, p, xp=xp, block_rows=rows, symmetric=False
            )
        ]
        return ctx.out(parts[0] if len(parts) == 1 else xp.concat(parts, axis=0))
