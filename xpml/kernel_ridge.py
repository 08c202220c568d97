"""Kernel ridge regression: the dual solve ``α = (K + λI)⁻¹ y`` by Cholesky.

The kernel matrix comes from the Gram engine (:mod:`xpml.kernels`), so every
kernel it knows works here, plus ``"precomputed"`` and callables written on the
array namespace. The solve factors ``K + λI = L Lᵀ`` and applies the factor by
two triangular solves.

Three operations have a LAPACK-backed fast path registered with
:func:`xpml.utils._array_api.fast_path` beside their portable twins (a test
checks that they agree): the factorisation (NumPy: a blocked Cholesky **in
place** on the kernel matrix this module made, so a default fit holds one
``n × n`` array, from one-thread LAPACK and BLAS calls on host threads; PyTorch: ``cholesky_ex``; CuPy: ``cholesky`` with a finiteness
check, since it does not raise), the solve (``potrs`` / ``cholesky_solve`` /
``solve_triangular``) and ``‖L⁻¹‖²_F`` (``trtri`` / ``cholesky_inverse``). The
array API has no triangular solve: the portable path is blocked forward / back
substitution, for each block of ``b`` rows one matrix product with the blocks
already solved and one small ``b×b`` ``xp.linalg.solve`` (GPU friendly).

``effective_dof_ = n − λ‖L⁻¹‖²_F`` needs ``L⁻¹``, a triangular inversion about
as costly as the factorisation, so by default (``compute_dof="lazy"``) it is not
computed in ``fit``: the first read of ``effective_dof_`` rebuilds the factor
from the stored training data (``X_fit_`` and the sample weights) and caches the
value in memory (``_cache_effective_dof``, not saved: after ``xpml.load`` the
first read recomputes it). ``compute_dof=True`` computes it in ``fit`` from the
factor at hand (cheaper when it will be read anyway).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import warnings
from numbers import Real

import array_api_extra as xpx
import numpy as np

from xpml._backend import enter
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, RegressorMixin
from xpml.kernels import (
    EXTRA_KERNELS,
    KERNELS,
    kernel_dot,
    kernel_matrix,
    resolve_kernel_params,
)
from xpml.linalg import (
    _single_threaded_blas,
    _single_threaded_scipy_blas,
    host_threads,
    numpy_potrf,
    numpy_potrs,
    numpy_trtri,
    one_blas_thread,
    thread_pool,
)
from xpml.linear_model._base import (
    check_finite_result,
    linalg_error_types,
    non_finite_error,
)
from xpml.utils._array_api import device, dispatch, fast_path, portable
from xpml.utils._math import all_finite
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_is_fitted

__all__ = ["KernelRidge"]

_BLOCK = 256  # rows per step of the portable blocked substitution
# rows of a diagonal block of the NumPy fast path's blocked Cholesky
_POTRF_PANEL = 1024
_GEMM_ROWS = 2048  # rows of one trailing-update product (a buffer made once)
_STRIP = 256  # rows of a strip of a diagonal block's update (lower part only)
#: up to this order the NumPy fast path factors with one LAPACK ``potrf``
#: (:func:`_potrf_in_place`); above it, by panels (:func:`_cholesky_by_panels`)
_POTRF_WHOLE_MAX = 6144

try:  # SciPy is optional; imported with this module, not by the first fit (issue 16)
    from scipy.linalg import get_blas_funcs as _blas_funcs
    from scipy.linalg import get_lapack_funcs as _lapack_funcs
except ImportError:
    _blas_funcs = _lapack_funcs = None


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


def _spd_example():
    """A 300×300 SPD matrix (two portable blocks) and two right-hand sides."""
    rng = np.random.default_rng(0)
    G = rng.standard_normal((300, 20))
    A = np.exp(-0.05 * ((G[:, None, :] - G[None, :, :]) ** 2).sum(-1)) + np.eye(300)
    return A, rng.standard_normal((300, 2))


def _cholesky_example():
    return (_spd_example()[0],), {"xp": None}


def _factor_example():
    A, B = _spd_example()
    return (np.linalg.cholesky(A), B), {"xp": None}


def _inv_example():
    return (np.linalg.cholesky(_spd_example()[0]),), {"xp": None}


@portable("kernel_ridge.cholesky")
def _cholesky_portable(A, /, *, xp, overwrite=False):
    """Lower Cholesky factor of ``A``, or None when ``A`` is not positive definite.
    ``overwrite`` allows a fast path to factor in place (``A`` is then lost)."""
    try:
        L = xp.linalg.cholesky(A)
    except linalg_error_types():
        return None
    return L if all_finite(L, xp=xp) else None  # some libraries return NaNs


@fast_path("kernel_ridge.cholesky", "numpy", example=_cholesky_example)
def _cholesky_lapack(A, /, *, xp, overwrite=False):
    """LAPACK, in place when allowed (a default fit holds one ``n × n``
    array): one ``potrf`` up to :data:`_POTRF_WHOLE_MAX` rows, by blocks above
    (see :func:`_cholesky_by_panels` for why)."""
    if _lapack_funcs is None:
        return _cholesky_portable(A, xp=xp, overwrite=overwrite)
    A = A.copy() if not overwrite or not A.flags.c_contiguous else A
    if A.shape[0] <= _POTRF_WHOLE_MAX:
        return _potrf_in_place(A)
    return _cholesky_by_panels(A)


def _potrf_in_place(A):
    """The lower Cholesky factor of the C-ordered ``A`` in its own memory (its
    strict upper part zeroed) by one LAPACK ``potrf`` with BLAS's threads; None
    when not positive definite. NumPy's OpenBLAS where it has one (the library
    that made the Gram matrix: :func:`xpml.linalg.numpy_potrf`), else SciPy's
    (``Aᵀ`` is Fortran-ordered: its upper factor ``Lᵀ`` is written in place)."""
    done = numpy_potrf(A)
    if done is not None:
        return A if done else None
    (potrf,) = _lapack_funcs(("potrf",), (A,))
    U, info = potrf(A.T, lower=0, overwrite_a=1, clean=1)
    return U.T if info == 0 else None


def _cholesky_by_panels(A, panel=None, rows=None, threads=None):
    """Right-looking blocked Cholesky in place of the C-ordered ``A`` (its lower
    factor; the strict upper part is zeroed): per block column of ``panel``
    columns, the diagonal block's factor, a ``trsm`` for the panel below and
    GEMM updates of the trailing lower part (about n³/3 flops, as ``potrf``).
    The ``trsm`` and the GEMMs are split in row blocks over ``threads`` host
    threads (default: the CPU count, 1 when BLAS is limited to one thread),
    every BLAS call at one thread.

    Why not one ``potrf`` above :data:`_POTRF_WHOLE_MAX` rows: the
    multithreaded ``dpotrf`` of the OpenBLAS that
    NumPy and SciPy wheels bundle (0.3.31) crashes the process (SIGSEGV) from
    about n = 16,000 on a two-core machine, and below that its threads spend
    much of their time waiting for each other (n = 10,000, SkylakeX kernels:
    3.8 s of CPU at one thread, 9.6–10.3 s at two with the other core busy).
    Independent one-thread calls never wait on a descheduled partner. The
    price: on an idle two-core machine one two-thread ``potrf`` is still faster
    (n = 10,000: 2.2–2.5 s against 2.8–3.0 s wall; 4.2–4.9 s against 5.0–5.5 s
    of CPU), a diagonal block being factored on one thread while the other
    waits, and each GEMM product subtracted in a second pass. Below
    :data:`_POTRF_WHOLE_MAX` that price is the larger part: measured idle on
    the project's 2-core VM (session 15), one ``potrf`` took 39 against 79 ms
    at n = 2,000 and 0.81 against 1.16 s at n = 6,000 (warm calls), and any
    time lost to a busy core is bounded by those lengths.
    """
    panel = _POTRF_PANEL if panel is None else panel
    rows = _GEMM_ROWS if rows is None else rows
    if threads is None:
        threads = 1 if one_blas_thread(np) else host_threads(np)
    plan = _PanelPlan(A.shape[0], panel, rows, threads)
    with contextlib.ExitStack() as limits:
        for limit in (_single_threaded_blas(np), _single_threaded_scipy_blas()):
            if limit is not None:
                limits.enter_context(limit)
        with thread_pool(threads) as pool:
            return _factor_panels(A, plan, pool)


@dataclasses.dataclass
class _PanelPlan:
    """Sizes of the blocked Cholesky and one product buffer per thread (made
    once: fresh memory is slow to touch on a VM that hands freed pages back)."""

    n: int
    panel: int
    rows: int
    threads: int

    def buffers(self, dtype):
        """The panel below a diagonal block, and one product per thread (none
        when one block is the whole matrix)."""
        below = max(self.n - self.panel, 0)
        # a product is a row block (``rows``) or a diagonal block's strip
        # (``_STRIP`` rows), at most ``panel`` columns wide
        size = min(max(self.rows, _STRIP), below) * min(self.panel, below)
        return np.empty(below * self.panel, dtype=dtype), [
            np.empty(size, dtype=dtype) for _ in range(self.threads if below else 0)
        ]


def _factor_panels(A, plan, pool):
    n, panel = plan.n, plan.panel
    below, products = plan.buffers(A.dtype)
    for k in range(0, n, panel):
        e = min(k + panel, n)
        try:
            L = np.linalg.cholesky(A[k:e, k:e])  # NumPy's LAPACK potrf
        except np.linalg.LinAlgError:
            return None
        A[k:e, k:e] = L
        if e == n:
            break
        A[k:e, e:] = 0.0
        P = below[: (n - e) * (e - k)].reshape(n - e, e - k)
        step = -(-(n - e) // plan.threads)
        bounds = [(r, min(r + step, n - e)) for r in range(0, n - e, step)]
        list(pool.map(lambda r, k=k, L=L, P=P: _solve_rows(A, P, L, k, r), bounds))
        groups = _update_groups(n, e, plan)
        list(pool.map(lambda g, P=P, e=e: _update(A, P, e, *g), zip(groups, products)))
    return A


def _solve_rows(A, P, L, k, bounds):
    """Rows ``bounds`` of the panel ``P`` below the diagonal block ``L`` (its
    first row ``k``): ``P Lᵀ = A[e:, k:e]``, by column strips of ``_STRIP``: a
    GEMM with the strips already solved, then a small ``trsm``. SciPy's BLAS
    wrappers hold the GIL, so one ``trsm`` on the whole panel would run the
    threads one after the other; the GEMMs (NumPy) release it."""
    e, p = k + L.shape[0], L.shape[0]
    B = P[bounds[0] : bounds[1]]
    B[...] = A[e + bounds[0] : e + bounds[1], k:e]
    (trsm,) = _blas_funcs(("trsm",), (L,))
    for c in range(0, p, _STRIP):
        d = min(c + _STRIP, p)
        if c:
            B[:, c:d] -= B[:, :c] @ L[c:d, :c].T
        # B[:, c:d] Lᵈᵀ = ...: its transpose solved as Lᵈ Xᵀ = B[:, c:d]ᵀ
        B[:, c:d] = trsm(1.0, L[c:d, c:d].T, B[:, c:d].T, lower=0, trans_a=1).T
    A[e + bounds[0] : e + bounds[1], k:e] = B


def _update_groups(n, e, plan):
    """The trailing update ``A[e:, e:] -= P Pᵀ`` (lower part only) as blocks
    ``(first row, end row, end column, first column)``, dealt to ``threads``
    groups of about equal flops: a diagonal block in strips of ``_STRIP`` rows,
    each up to its own last column (the full square spends a quarter more flops
    at n = 10,000), the rows below it ``rows`` at a time."""
    blocks = []
    for j in range(e, n, plan.panel):
        f = min(j + plan.panel, n)
        blocks += [
            (a, min(a + _STRIP, f), min(a + _STRIP, f), j) for a in range(j, f, _STRIP)
        ]
        blocks += [(a, min(a + plan.rows, n), f, j) for a in range(f, n, plan.rows)]
    blocks.sort(key=lambda b: (b[1] - b[0]) * (b[2] - b[3]), reverse=True)
    groups, loads = [[] for _ in range(plan.threads)], [0] * plan.threads
    for b in blocks:
        i = loads.index(min(loads))
        groups[i].append(b)
        loads[i] += (b[1] - b[0]) * (b[2] - b[3])
    return groups


def _update(A, P, e, blocks, product):
    for a, b, c, j in blocks:
        out = product[: (b - a) * (c - j)].reshape(b - a, c - j)
        np.matmul(P[a - e : b - e], P[j - e : c - e].T, out=out)
        A[a:b, j:c] -= out


@fast_path("kernel_ridge.cholesky", "torch", example=_cholesky_example)
def _cholesky_torch(A, /, *, xp, overwrite=False):
    import torch

    L, info = torch.linalg.cholesky_ex(A)
    return L if int(info) == 0 else None  # one sync


@fast_path("kernel_ridge.cholesky", "cupy", example=_cholesky_example)
def _cholesky_cupy(A, /, *, xp, overwrite=False):
    import cupy

    try:
        L = cupy.linalg.cholesky(A)
    except linalg_error_types():
        return None
    return L if bool(cupy.all(cupy.isfinite(L))) else None  # NaNs, not an error


@portable("kernel_ridge.cho_solve")
def _cho_solve_portable(L, B, /, *, xp):
    """``(L Lᵀ)⁻¹ B`` for 2-D ``B`` by two blocked substitutions."""
    Z = _solve_triangular_portable(L, B, xp=xp)
    return _solve_triangular_portable(L, Z, xp=xp, transpose=True)


@fast_path("kernel_ridge.cho_solve", "numpy", example=_factor_example)
def _cho_solve_lapack(L, B, /, *, xp):
    """LAPACK ``potrs``: NumPy's OpenBLAS where it has one (as the factor's
    ``potrf``, :func:`xpml.linalg.numpy_potrs`), else SciPy's."""
    X = numpy_potrs(L, B)
    if X is not None:
        return X
    if _lapack_funcs is None:
        return _cho_solve_portable(L, B, xp=xp)
    (potrs,) = _lapack_funcs(("potrs",), (L,))
    X, _ = potrs(L.T, B, lower=0)  # Lᵀ is upper and Fortran-ordered: no copy
    return X


@fast_path("kernel_ridge.cho_solve", "torch", example=_factor_example)
def _cho_solve_torch(L, B, /, *, xp):
    import torch

    return torch.cholesky_solve(B, L)


@fast_path("kernel_ridge.cho_solve", "cupy", example=_factor_example)
def _cho_solve_cupy(L, B, /, *, xp):
    from cupyx.scipy.linalg import solve_triangular

    Z = solve_triangular(L, B, lower=True)
    return solve_triangular(L, Z, lower=True, trans="T")


@portable("kernel_ridge.inv_sq_frobenius")
def _inv_sq_frobenius_portable(L, /, *, xp, overwrite=False):
    """``‖L⁻¹‖²_F = tr((L Lᵀ)⁻¹)`` from ``L⁻¹ I`` (blocked substitution)."""
    eye = xp.eye(L.shape[0], dtype=L.dtype, device=device(L))
    Linv = _solve_triangular_portable(L, eye, xp=xp)
    return xp.sum(Linv * Linv)


@fast_path("kernel_ridge.inv_sq_frobenius", "numpy", example=_inv_example)
def _inv_sq_frobenius_lapack(L, /, *, xp, overwrite=False):
    """LAPACK ``trtri`` on ``Lᵀ`` (upper, Fortran-ordered view: same norm), in
    place with ``overwrite`` (``L`` is then lost): NumPy's OpenBLAS where it
    has one (:func:`xpml.linalg.numpy_trtri`), else SciPy's."""
    Linv = L if overwrite and L.flags.writeable else np.array(L, order="C")
    done = numpy_trtri(Linv)
    if done is not None:  # False: a zero on L's diagonal, found before any write
        if not done:
            return _inv_sq_frobenius_portable(L, xp=xp)
        return _squared_norm(Linv)  # L's strict upper part is zero
    if _lapack_funcs is None:
        return _inv_sq_frobenius_portable(L, xp=xp)
    (trtri,) = _lapack_funcs(("trtri",), (L,))
    Linv, info = trtri(L.T, lower=0, overwrite_c=int(bool(overwrite)))
    if info != 0:  # only for a singular L, which a successful potrf never gives
        return _inv_sq_frobenius_portable(L, xp=xp)
    return _squared_norm(Linv)


def _squared_norm(M):
    """``Σ M²`` of a contiguous (C or Fortran) NumPy matrix as one dot product
    of its memory with itself: no ``n × n`` temporary (200 MB at n = 5,000)."""
    v = np.ravel(M, order="K")
    return np.dot(v, v)


@fast_path("kernel_ridge.inv_sq_frobenius", "torch", example=_inv_example)
def _inv_sq_frobenius_torch(L, /, *, xp, overwrite=False):
    import torch

    return torch.trace(torch.cholesky_inverse(L))


@fast_path("kernel_ridge.inv_sq_frobenius", "cupy", example=_inv_example)
def _inv_sq_frobenius_cupy(L, /, *, xp, overwrite=False):
    import cupy
    from cupyx.scipy.linalg import solve_triangular

    Linv = solve_triangular(L, cupy.eye(L.shape[0], dtype=L.dtype), lower=True)
    return xp.sum(Linv * Linv)


def _factor(K, alpha, /, *, xp, overwrite):
    """Cholesky factor of ``K + αI`` (None when not positive definite).

    With ``overwrite`` the shift and the factorisation happen in ``K``'s memory
    where the library allows: ``K`` is lost (the caller made it).
    """
    A = _add_to_diagonal(K, alpha, xp=xp, copy=not overwrite)
    return dispatch("kernel_ridge.cholesky", xp)(A, xp=xp, overwrite=True)


def _dof_from_factor(L, alpha, /, *, xp):
    """``tr(K (K + αI)⁻¹) = n − α‖L⁻¹‖²_F``; ``L`` is used up (inverted in place
    where the library allows)."""
    inv = dispatch("kernel_ridge.inv_sq_frobenius", xp)(L, xp=xp, overwrite=True)
    return L.shape[0] - alpha * inv


def _solve_pinv(K, Y, alpha, /, *, xp):
    """``(K + αI)⁺ Y`` and ``tr(K (K + αI)⁺)``, for a ``K + αI`` that is not
    positive definite (a non-PSD kernel, or α = 0 with a singular ``K``)."""
    Ainv = xp.linalg.pinv(_add_to_diagonal(K, alpha, xp=xp, copy=True))
    return Ainv @ Y, xp.sum(K * Ainv.T)


def _dof_value(dofs, alphas, ctx):
    """The ``effective_dof_`` value: a float for one α, else one per target (an
    array in the caller's library)."""
    if len(set(alphas)) == 1:
        return float(dofs[alphas[0]])
    return ctx.out(ctx.xp.stack([dofs[a] for a in alphas]))


def _warn_pinv():
    warnings.warn(
        "Singular matrix in solving dual problem (K + alpha*I is not positive "
        "definite). Using least-squares solution instead.",
        RuntimeWarning,
        stacklevel=4,
    )


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
"cosine", "chi2", "additive_chi2", "precomputed"} or callable, default="linear"
        A Gram-engine kernel (see :mod:`xpml.kernels`); ``"precomputed"`` means
        ``X`` is the kernel matrix (``(n, n)`` in ``fit``, ``(m, n)`` in
        ``predict``). A callable declaring an ``xp`` keyword is called as
        ``kernel(X_block, Y, xp=xp, **kernel_params)`` and returns the
        ``(b, m)`` block; any other callable as scikit-learn does,
        ``kernel(x, z, **kernel_params)`` on each pair of rows (slow).
    gamma : float or None, default=None
        For rbf, laplacian, poly, sigmoid and chi2; None means
        ``1/n_features`` (1 for chi2).
    degree : float, default=3
        Degree of the poly kernel.
    coef0 : float, default=1
        Constant of the poly and sigmoid kernels.
    kernel_params : dict or None, default=None
        Extra keyword arguments for a callable kernel.
    compute_dof : {"lazy", True, False}, default="lazy"
        When ``effective_dof_`` is computed: "lazy" on its first read (from the
        stored training data: one more kernel matrix and factorisation, then
        cached; a fit that never reads it pays nothing), True during ``fit``
        from the factor at hand (one triangular inversion, about as costly as
        the factorisation), False never (it is None).

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
        target; None when ``compute_dof=False``. Computed on first read by
        default (see ``compute_dof``).
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
        "kernel": [Options(*KERNELS, *EXTRA_KERNELS, "precomputed"), callable],
        "gamma": [Interval(Real, 0, None, closed="left"), None],
        "degree": [Interval(Real, 0, None, closed="left")],
        "coef0": [Interval(Real, None, None)],
        "kernel_params": ["dict", None],
        "compute_dof": ["boolean", Options("lazy")],
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
        compute_dof="lazy",
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
        if not ((a >= 0) & np.isfinite(a)).all():
            raise ValueError(
                f"alpha must be finite and >= 0 for every target; got {a.tolist()!r}"
            )
        vals = [float(v) for v in a]
        return vals * n_targets if len(vals) == 1 else vals

    def _training_kernel(self, X, sqrt_w, /, *, xp):
        """``K`` (or ``S K S`` with sample weights) and whether this call made it
        (then it may be overwritten)."""
        if self.kernel == "precomputed":
            K, own = X, False
        else:
            kernel, p = self._kernel_and_params(int(X.shape[1]))
            K, own = kernel_matrix(X, X, kernel, p, xp=xp, symmetric=True), True
            own = own and not callable(self.kernel)  # a callable may return its input
        if sqrt_w is not None:
            K = K * sqrt_w[:, None]
            K, own = K * sqrt_w[None, :], True
        return K, own

    def _solve(self, K, Y, alphas, /, *, xp, own, src):
        """Dual coefficients ``(K + αI)⁻¹ Y`` (``alphas[j]`` for column ``j``) and
        ``{α: dof}`` (values None unless ``compute_dof=True``). ``own``: ``K`` may
        be overwritten; ``src = (X, √w)`` rebuilds it for the pseudo-inverse
        fallback and names the cause of an overflow."""
        groups = sorted(set(alphas))
        sols, dofs = {}, {}
        for g, a in enumerate(groups):
            last = g == len(groups) - 1
            L = _factor(K, a, xp=xp, overwrite=own and last)
            if L is not None:
                sols[a] = dispatch("kernel_ridge.cho_solve", xp)(L, Y, xp=xp)
                dofs[a] = (
                    _dof_from_factor(L, a, xp=xp) if self.compute_dof is True else None
                )
                continue
            _warn_pinv()
            K = self._training_kernel(*src, xp=xp)[0] if own and last else K
            if not all_finite(K, xp=xp):  # an overflow, not an indefinite kernel
                raise non_finite_error(
                    src[0], xp=xp, what="kernel matrix", owner="KernelRidge"
                )
            sols[a], dofs[a] = _solve_pinv(K, Y, a, xp=xp)
        if len(groups) == 1:
            return sols[groups[0]], dofs
        coef = xp.stack([sols[a][:, j] for j, a in enumerate(alphas)], axis=1)
        return coef, dofs

    # ------------------------------------------------------------------ API
    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
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
        if self.kernel == "precomputed" and int(X.shape[1]) != n:
            raise ValueError(
                f"X must be a square kernel matrix when kernel='precomputed'; got "
                f"shape {tuple(X.shape)}"
            )
        s = xp.sqrt(sw) if sample_weight is not None else None
        K, own = self._training_kernel(X, s, xp=xp)
        Y = y[:, None] if len(y.shape) == 1 else y
        Y = Y * s[:, None] if s is not None else Y
        alphas = self._alphas(int(Y.shape[1]))
        coef, dofs = self._solve(K, Y, alphas, xp=xp, own=own, src=(X, s))
        del K
        check_finite_result(
            coef, X, xp=xp, what="dual coefficients", owner="KernelRidge"
        )
        coef = coef * s[:, None] if s is not None else coef
        self.dual_coef_ = coef[:, 0] if len(y.shape) == 1 else coef
        self.X_fit_ = X
        self.sqrt_sample_weight_ = s
        self.__dict__.pop("_cache_effective_dof", None)
        if self.compute_dof is True:
            self._cache_effective_dof = _dof_value(dofs, alphas, ctx)
        return self._fitted(ctx)

    @property
    def effective_dof_(self):
        """``tr(K (K + αI)⁻¹)`` (see the class docstring): computed on first read
        unless ``compute_dof`` is True (computed in ``fit``) or False (None)."""
        check_is_fitted(self, "dual_coef_")
        if self.compute_dof is False:
            return None
        if "_cache_effective_dof" not in self.__dict__:
            self._cache_effective_dof = self._dof_from_training_data()
        return self._cache_effective_dof

    def _dof_from_training_data(self):
        """Rebuild ``K`` from ``X_fit_`` (and the weights) and factor ``K + αI``."""
        ctx, (X, s) = enter(self.X_fit_, self.sqrt_sample_weight_)
        xp = ctx.xp
        K, own = self._training_kernel(X, s, xp=xp)
        shape = self.dual_coef_.shape
        alphas = self._alphas(1 if len(shape) == 1 else int(shape[1]))
        dofs = {}
        for g, a in enumerate(sorted(set(alphas))):
            last = g == len(set(alphas)) - 1
            L = _factor(K, a, xp=xp, overwrite=own and last)
            if L is None:  # K is intact: the factor failed before touching it
                K = self._training_kernel(X, s, xp=xp)[0] if own and last else K
                dofs[a] = _solve_pinv(K, K[:, :1], a, xp=xp)[1]
            else:
                dofs[a] = _dof_from_factor(L, a, xp=xp)
        return _dof_value(dofs, alphas, ctx)

    def predict(self, X: ArrayLike) -> Array:
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
        return ctx.out(kernel_dot(X, X_fit, kernel, p, coef, xp=xp))
