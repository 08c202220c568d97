"""The Gram engine: kernel matrices, computed whole or in row blocks.

Kernels (scikit-learn's parameter meanings, ``gamma=None`` means ``1/d``):

============  ==========================================
linear        ``x·z``
poly          ``(gamma x·z + coef0)^degree``
rbf           ``exp(-gamma ‖x−z‖²)``, or ``sigma`` with ``gamma = 1/(2 sigma²)``
sigmoid       ``tanh(gamma x·z + coef0)``
laplacian     ``exp(-gamma ‖x−z‖₁)``
cosine        ``x·z / (‖x‖ ‖z‖)`` (zero rows give 0)
chi2          ``exp(-gamma Σ_f (x_f−z_f)²/(x_f+z_f))``, ``gamma=None`` means 1
additive_chi2 ``-Σ_f (x_f−z_f)²/(x_f+z_f)`` (both need ``x, z ≥ 0``)
callable      with an ``xp`` keyword: ``f(X_block, Y, xp=xp) -> (b, m)`` on the
              array namespace; otherwise scikit-learn's rule, ``f(x, z) ->
              float`` on each pair of rows (NumPy, on the host: slow)
============  ==========================================

Squared distances use ``‖x‖² + ‖z‖² − 2 x·z`` (one matrix product), clamped at 0,
with exact zeros on the diagonal of ``gram(X)``. :func:`gram_blocks` yields row
blocks whose size follows a memory budget, for consumers that never need the
whole matrix (SVM columns, k-NN, k-means, prediction).
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import numpy as np

from xpml._backend import enter, to_numpy
from xpml.utils._array_api import (
    DEFAULT_MEMORY_BUDGET,
    device,
    dispatch,
    eps,
    fast_path,
    is_cupy_namespace,
    is_numpy_namespace,
    is_torch_namespace,
    portable,
    preload_namespace,
)
from xpml.utils._array_api import itemsize as _itemsize_of
from xpml.utils._array_api import memory_budget as _memory_budget
from xpml.utils.validation import check_array

__all__ = [
    "KERNELS",
    "EXTRA_KERNELS",
    "gram",
    "gram_blocks",
    "block_rows_for",
    "sq_distances",
    "query_factor",
    "point_factor",
    "resolve_kernel_params",
    "is_psd",
    "PSDResult",
    "poly2_features",
    "rbf_taylor_features",
    "DEFAULT_MEMORY_BUDGET",
]

KERNELS = ("linear", "poly", "polynomial", "rbf", "sigmoid", "laplacian")
# further scikit-learn kernel names the engine computes (KernelRidge, Nystroem)
EXTRA_KERNELS = ("cosine", "chi2", "additive_chi2")
# DEFAULT_MEMORY_BUDGET (512 MiB) is re-exported from xpml.utils._array_api; the
# budget in force comes from memory_budget() (XPML_MEMORY_BUDGET overrides it)

# NumPy's array-API wrapper is built here, with the imports, not by the first call
# that computes (issue 16: a one-time 40 ms to 0.6 s; see preload_namespace)
preload_namespace("numpy")


# ------------------------------------------------------------------ primitives
def sq_norms(X, /, *, xp):
    """Row-wise squared Euclidean norms."""
    return xp.sum(X * X, axis=1)


def sq_distances(X, Y, /, *, xp, X_norms=None, Y_norms=None, fast=True):
    """Squared Euclidean distances ``‖x‖² + ‖z‖² − 2 x·z``, clamped at 0.

    Computed as one matrix product of augmented factors
    ``[x, ‖x‖², 1] · [−2z, 1, ‖z‖²]``, so the ``n × m`` result is written once
    and then clamped in place (no further passes over it).
    """
    xn = sq_norms(X, xp=xp) if X_norms is None else X_norms
    yn = sq_norms(Y, xp=xp) if Y_norms is None else Y_norms
    dev = device(X)
    A = xp.concat(
        [X, xn[:, None], xp.ones((X.shape[0], 1), dtype=X.dtype, device=dev)], axis=1
    )
    B = xp.concat(
        [-2.0 * Y, xp.ones((Y.shape[0], 1), dtype=Y.dtype, device=dev), yn[:, None]],
        axis=1,
    )
    return _clamp_min0_(A @ B.T, xp=xp, fast=fast)


def query_factor(X, /, *, xp):
    """``[x, 1]``: left factor of the nearest-point ranking score (see
    :func:`point_factor`)."""
    one = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
    return xp.concat([X, one], axis=1)


def point_factor(Z, /, *, xp, Z_norms=None):
    """``[−2z, ‖z‖²]``: with ``A = query_factor(X)``, ``A @ Bᵀ = ‖x − z‖² − ‖x‖²``.

    The score orders the points ``z`` of every row exactly as the distances do
    (up to rounding), in one matrix product and with no further pass — for
    consumers that only rank (k-means assignment, k-NN candidate selection).
    """
    zn = sq_norms(Z, xp=xp) if Z_norms is None else Z_norms
    return xp.concat([-2.0 * Z, zn[:, None]], axis=1)


# ------------------------------------------- in-place elementwise fast paths
# Each op takes ``inplace``: False (the default, and what the agreement test
# runs) returns a new array; True lets a fast path overwrite its argument, a
# temporary the caller owns. The portable twins always allocate.
def _owned_example():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((30, 20)),), {"xp": None}


def _dot_example():
    args, kw = _owned_example()
    return args, {**kw, "gamma": 0.3, "coef0": 0.5, "degree": 3.0, "kind": "poly"}


@portable("kernels.clamp_min0")
def _clamp_min0_portable(D, /, *, xp, inplace=False):
    return xp.clip(D, 0.0, None)


@fast_path("kernels.clamp_min0", "numpy", example=_owned_example)
def _clamp_min0_numpy(D, /, *, xp, inplace=False):
    return np.maximum(D, 0.0, out=D if inplace else None)


@fast_path("kernels.clamp_min0", "cupy", example=_owned_example)
def _clamp_min0_cupy(D, /, *, xp, inplace=False):
    import cupy

    return cupy.maximum(D, 0.0, out=D if inplace else None)


@fast_path("kernels.clamp_min0", "torch", example=_owned_example)
def _clamp_min0_torch(D, /, *, xp, inplace=False):
    return D.clamp_(min=0.0) if inplace else D.clamp(min=0.0)


@portable("kernels.clamp_exp")
def _clamp_exp_portable(E, /, *, xp, inplace=False):
    return xp.exp(xp.clip(E, None, 0.0))


@fast_path("kernels.clamp_exp", "numpy", example=_owned_example)
def _clamp_exp_numpy(E, /, *, xp, inplace=False):
    T = np.minimum(E, 0.0, out=E if inplace else None)
    return np.exp(T, out=T)


@fast_path("kernels.clamp_exp", "cupy", example=_owned_example)
def _clamp_exp_cupy(E, /, *, xp, inplace=False):
    import cupy

    T = cupy.minimum(E, 0.0, out=E if inplace else None)
    return cupy.exp(T, out=T)


@fast_path("kernels.clamp_exp", "torch", example=_owned_example)
def _clamp_exp_torch(E, /, *, xp, inplace=False):
    T = E.clamp_(max=0.0) if inplace else E.clamp(max=0.0)
    return T.exp_()


@portable("kernels.dot_kernel")
def _dot_kernel_portable(G, /, *, xp, gamma, coef0, degree, kind, inplace=False):
    """``(γG + c)^p`` (poly) or ``tanh(γG + c)`` (sigmoid) of the product ``G``."""
    Z = gamma * G + coef0
    return Z**degree if kind == "poly" else xp.tanh(Z)


def _dot_kernel_ufuncs(lib, G, /, *, gamma, coef0, degree, kind, inplace):
    Z = lib.multiply(G, gamma, out=G if inplace else None)
    lib.add(Z, coef0, out=Z)
    return lib.power(Z, degree, out=Z) if kind == "poly" else lib.tanh(Z, out=Z)


@fast_path("kernels.dot_kernel", "numpy", example=_dot_example)
def _dot_kernel_numpy(G, /, *, xp, gamma, coef0, degree, kind, inplace=False):
    return _dot_kernel_ufuncs(
        np, G, gamma=gamma, coef0=coef0, degree=degree, kind=kind, inplace=inplace
    )


@fast_path("kernels.dot_kernel", "cupy", example=_dot_example)
def _dot_kernel_cupy(G, /, *, xp, gamma, coef0, degree, kind, inplace=False):
    import cupy

    return _dot_kernel_ufuncs(
        cupy, G, gamma=gamma, coef0=coef0, degree=degree, kind=kind, inplace=inplace
    )


@fast_path("kernels.dot_kernel", "torch", example=_dot_example)
def _dot_kernel_torch(G, /, *, xp, gamma, coef0, degree, kind, inplace=False):
    Z = G.mul_(gamma) if inplace else G * gamma
    Z = Z.add_(coef0)
    return Z.pow_(degree) if kind == "poly" else Z.tanh_()


def _dot_kernel_in_place(G, kind, params, /, *, xp):
    """The ``poly`` or ``sigmoid`` kernel finished in place on the products
    ``G`` (ours to overwrite), with ``params``' gamma, coef0 and degree."""
    return dispatch("kernels.dot_kernel", xp)(
        G,
        xp=xp,
        gamma=params["gamma"],
        coef0=params["coef0"],
        degree=params["degree"],
        kind=kind,
        inplace=True,
    )


def _clamp_min0_(D, *, xp, fast=True):
    """``max(D, 0)``, in place on ``D`` (a temporary we own) where the library
    allows; the portable form allocates."""
    return dispatch("kernels.clamp_min0", xp, fast=fast)(D, xp=xp, inplace=True)


def _l1_distances(X, Y, /, *, xp):
    return dispatch("kernels.l1_distances", xp)(X, Y, xp=xp)


def _l1_example():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((30, 4)), rng.standard_normal((20, 4))), {"xp": None}


@portable("kernels.l1_distances")
def _l1_distances_portable(X, Y, /, *, xp):
    """``Σ_j |x_j − z_j|``, one feature at a time: about three ``b × m``
    arrays of workspace instead of the ``b × m × d`` difference tensor."""
    D = xp.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype, device=device(X))
    for j in range(X.shape[1]):
        D = D + xp.abs(X[:, j : j + 1] - Y[:, j][None, :])
    return D


@fast_path("kernels.l1_distances", "numpy", example=_l1_example)
def _l1_distances_numpy(X, Y, /, *, xp):
    """The same sum accumulated with ``out=``: two ``b × m`` arrays."""
    D = np.zeros((X.shape[0], Y.shape[0]), dtype=X.dtype)
    T = np.empty_like(D)
    for j in range(X.shape[1]):
        np.subtract(X[:, j : j + 1], Y[:, j][None, :], out=T)
        D += np.abs(T, out=T)
    return D


def resolve_kernel_params(
    kernel, n_features, gamma=None, degree=3, coef0=1.0, *, sigma=None
):
    """Fill in defaults: ``gamma=None`` means ``1/n_features``; ``sigma`` sets the
    RBF width as ``gamma = 1/(2 sigma²)``."""
    if kernel == "polynomial":
        kernel = "poly"
    if sigma is not None:
        if gamma is not None:
            raise ValueError("give either gamma or sigma for the RBF kernel, not both")
        if kernel != "rbf":
            raise ValueError(
                f"sigma applies to the 'rbf' kernel only; kernel is {kernel!r}"
            )
        if not sigma > 0:
            raise ValueError(f"sigma must be > 0; got {sigma!r}")
        gamma = 1.0 / (2.0 * sigma * sigma)
    if gamma is None:
        gamma = 1.0 if kernel == "chi2" else 1.0 / max(n_features, 1)
    if isinstance(kernel, str) and kernel not in KERNELS + EXTRA_KERNELS:
        allowed = ", ".join(map(repr, KERNELS + EXTRA_KERNELS))
        raise ValueError(
            f"unknown kernel {kernel!r}; allowed kernels are {allowed} or a callable"
        )
    return kernel, {"gamma": float(gamma), "degree": degree, "coef0": float(coef0)}


def _kernel_block(Xb, Y, kernel, p, *, xp, diag_offset=None, Y_factor=None):
    """One block ``K(Xb, Y)``; ``diag_offset`` is the row offset of ``Xb`` in ``Y``
    when ``Y`` is ``X`` itself (its diagonal distances are set to exact zeros)."""
    if callable(kernel):
        if _takes_xp(kernel):
            return kernel(Xb, Y, xp=xp)
        return _pairwise_callable(kernel, Xb, Y, xp=xp, square=diag_offset == 0)
    if kernel == "linear":
        return Xb @ Y.T
    if kernel in ("poly", "sigmoid"):  # the product is ours: finish it in place
        return _dot_kernel_in_place(Xb @ Y.T, kernel, p, xp=xp)
    if kernel == "rbf":
        return _rbf_block(
            Xb, Y, p["gamma"], xp=xp, Y_factor=Y_factor, diag_offset=diag_offset
        )
    if kernel == "laplacian":
        D = _l1_distances(Xb, Y, xp=xp)
        return _clamp_exp_(_scale_(D, -p["gamma"], xp=xp), xp=xp)
    if kernel == "cosine":
        return _unit_rows(Xb, xp=xp) @ _unit_rows(Y, xp=xp).T
    if kernel in ("chi2", "additive_chi2"):
        S = _chi2_sums(Xb, Y, xp=xp)
        return -S if kernel == "additive_chi2" else xp.exp(-p["gamma"] * S)
    raise ValueError(f"unknown kernel {kernel!r}")


def _takes_xp(f):
    """Whether a callable kernel declares an ``xp`` keyword (xpml's block form)."""
    try:
        return "xp" in inspect.signature(f).parameters
    except (TypeError, ValueError):
        return False


def _pairwise_callable(f, Xb, Y, /, *, xp, square=False):
    """scikit-learn's rule for a callable kernel: ``f(x, z)`` on every pair of
    rows, as NumPy rows on the host (a Python loop over pairs, as scikit-learn).
    ``square`` (``Xb`` is ``Y``): the upper triangle and diagonal only, mirrored."""
    Xh, Yh = to_numpy(Xb), to_numpy(Y)
    n, m = Xh.shape[0], Yh.shape[0]
    square = square and n == m
    K = np.zeros((n, m), dtype=np.float64)
    for i in range(n):
        for j in range(i if square else 0, m):
            K[i, j] = f(Xh[i], Yh[j])
    if square:
        K = np.triu(K) + np.triu(K, 1).T
    return xp.asarray(K, dtype=Xb.dtype, device=device(Xb))


def _unit_rows(X, /, *, xp):
    """Rows scaled to unit Euclidean norm; zero rows stay zero."""
    norm = xp.sqrt(xp.sum(X * X, axis=1, keepdims=True))
    return X / xp.where(norm > 0, norm, xp.ones_like(norm))


def _chi2_sums(Xb, Y, /, *, xp):
    """``Σ_f (x_f − z_f)² / (x_f + z_f)`` (0/0 counts 0), one feature at a time
    over the whole (b, m) block. Negative inputs raise, as scikit-learn."""
    if bool(xp.any(Xb < 0)) or bool(xp.any(Y < 0)):
        raise ValueError("X contains negative values; the chi2 kernels need X >= 0")
    S = xp.zeros((Xb.shape[0], Y.shape[0]), dtype=Xb.dtype, device=device(Xb))
    for f in range(Xb.shape[1]):  # a loop over features, vectorised over pairs
        a, b = Xb[:, f][:, None], Y[:, f][None, :]
        den = a + b
        pos = den > 0
        S = S + xp.where(pos, (a - b) ** 2 / xp.where(pos, den, xp.ones_like(den)), 0.0)
    return S


def _rbf_factors(X, Y, gamma, *, xp):
    """Augmented factors with ``A @ B.T = 2γ x·z − γ‖x‖² − γ‖z‖² = −γ‖x−z‖²``.

    ``A = [x, ‖x‖², 1]`` and ``B = [2γ z, −γ, −γ‖z‖²]``: the whole RBF exponent
    is one matrix product with ``d + 2`` columns, with no further passes over
    the ``n × m`` block before the clamp and ``exp``. ``X`` or ``Y`` may be None.
    """
    A = B = None
    if X is not None:
        one = xp.ones((X.shape[0], 1), dtype=X.dtype, device=device(X))
        A = xp.concat([X, sq_norms(X, xp=xp)[:, None], one], axis=1)
    if Y is not None:
        one = xp.ones((Y.shape[0], 1), dtype=Y.dtype, device=device(Y))
        B = xp.concat(
            [(2.0 * gamma) * Y, -gamma * one, -gamma * sq_norms(Y, xp=xp)[:, None]],
            axis=1,
        )
    return A, B


def _rbf_block(Xb, Y, gamma, *, xp, Y_factor=None, diag_offset=None, fast=True):
    """``exp(-γ‖x−z‖²)`` as ``exp(min(0, A @ B.T))`` (see :func:`_rbf_factors`).

    The product is a fresh array, so the clamp and ``exp`` run in place where the
    library allows (:func:`_clamp_exp_`). On the diagonal of ``gram(X)`` the
    exponent is set to exactly 0.
    """
    A, B = _rbf_factors(Xb, Y if Y_factor is None else None, gamma, xp=xp)
    E = A @ (B if Y_factor is None else Y_factor).T
    if diag_offset is not None:
        _zero_diagonal_(E, diag_offset, xp=xp, fast=fast)
    return _clamp_exp_(E, xp=xp, fast=fast)


def _zero_diagonal_(E, offset, *, xp, fast=True):
    """Set ``E[i, offset + i] = 0`` in place (``E`` is a temporary we own).

    Libraries with integer-array assignment (NumPy, CuPy, PyTorch) do it in
    O(b); the portable path applies ``where`` to the ``b × b`` square that holds
    the diagonal and writes it back through a slice.
    """
    size = min(offset + E.shape[0], E.shape[1]) - offset
    if size <= 0:
        return
    idx = xp.arange(size, device=device(E))
    if fast and (
        is_numpy_namespace(xp) or is_cupy_namespace(xp) or is_torch_namespace(xp)
    ):
        E[idx, idx + offset] = 0.0
        return
    eye = idx[:, None] == idx[None, :]
    square = E[:size, offset : offset + size]
    E[:size, offset : offset + size] = xp.where(
        eye, xp.zeros((), dtype=E.dtype, device=device(E)), square
    )


def _clamp_exp_(E, *, xp, fast=True):
    """``exp(min(E, 0))``, overwriting ``E`` (a temporary we own) where the
    library has ``out=``/in-place forms; the portable form allocates."""
    return dispatch("kernels.clamp_exp", xp, fast=fast)(E, xp=xp, inplace=True)


def _scale_(D, c, *, xp):
    """``c·D`` in place on an owned temporary (the ``poly`` op with degree 1)."""
    return dispatch("kernels.dot_kernel", xp)(
        D, xp=xp, gamma=c, coef0=0.0, degree=1.0, kind="poly", inplace=True
    )


def block_rows_for(
    n_cols, n_features, itemsize, *, kernel="rbf", memory_budget=None, block_rows=None
):
    """Rows per block so that one block's workspace fits ``memory_budget`` bytes.

    A block of ``b`` rows against ``m`` columns holds about three ``b×m``
    temporaries (four for the Laplacian kernel, whose L1 distances accumulate
    one feature at a time). ``memory_budget=None`` means
    :func:`xpml.utils._array_api.memory_budget` (512 MiB unless
    ``XPML_MEMORY_BUDGET`` says otherwise).
    """
    if block_rows is not None:
        if int(block_rows) < 1:
            raise ValueError(f"block_rows must be a positive int; got {block_rows!r}")
        return int(block_rows)
    budget = _budget() if memory_budget is None else memory_budget
    if not (budget > 0 and math.isfinite(budget)):
        raise ValueError(
            f"memory_budget must be a positive, finite number of bytes; got {budget!r}"
        )
    per_row = itemsize * max(n_cols, 1) * (4 if kernel == "laplacian" else 3)
    return max(1, int(budget // per_row))


def _prepare(X, Y, names=("X", "Y")):
    ctx, (X, Y) = enter(X, Y, names=names)
    X = check_array(X, xp=ctx.xp, name=names[0], requested=ctx.dtype)
    if Y is not None:
        Y = check_array(Y, xp=ctx.xp, name=names[1], requested=ctx.dtype)
        if Y.shape[1] != X.shape[1]:
            raise ValueError(
                f"{names[1]} has {Y.shape[1]} features but {names[0]} has {X.shape[1]}; "
                f"they must have the same number of columns"
            )
        if Y.dtype != X.dtype:
            common = ctx.xp.result_type(X.dtype, Y.dtype)
            X, Y = ctx.xp.astype(X, common), ctx.xp.astype(Y, common)
    return ctx, X, Y


def iter_kernel_blocks(X, Y, kernel, params, *, xp, block_rows, symmetric):
    """Yield ``(start, stop, K[start:stop])`` over row blocks (arrays already
    validated and in one namespace). ``symmetric`` means ``Y is X``."""
    n = X.shape[0]
    Y_factor = (
        _rbf_factors(None, Y, params["gamma"], xp=xp)[1] if kernel == "rbf" else None
    )
    for start in range(0, n, block_rows):
        stop = min(start + block_rows, n)
        Kb = _kernel_block(
            X[start:stop, :],
            Y,
            kernel,
            params,
            xp=xp,
            diag_offset=start if symmetric else None,
            Y_factor=Y_factor,
        )
        yield start, stop, Kb


def gram_blocks(
    X,
    Y=None,
    kernel="rbf",
    *,
    gamma=None,
    degree=3,
    coef0=1.0,
    sigma=None,
    block_rows=None,
    memory_budget=None,
):
    """Yield ``(start, stop, K_block)`` with ``K_block = K(X[start:stop], Y)``.

    Blocks come in the compute namespace (see :mod:`xpml._backend`); the block
    size follows ``memory_budget`` (bytes) unless ``block_rows`` is given.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.arange(12.0).reshape(6, 2)
    >>> [(a, b, K.shape) for a, b, K in gram_blocks(X, kernel="linear", block_rows=4)]
    [(0, 4, (4, 6)), (4, 6, (2, 6))]
    """
    ctx, X, Yv = _prepare(X, Y)
    symmetric = Y is None
    Yv = X if symmetric else Yv
    kernel, p = resolve_kernel_params(
        kernel, X.shape[1], gamma, degree, coef0, sigma=sigma
    )
    rows = block_rows_for(
        Yv.shape[0],
        X.shape[1],
        _itemsize_of(X.dtype, ctx.xp),
        kernel=kernel,
        memory_budget=memory_budget,
        block_rows=block_rows,
    )
    yield from iter_kernel_blocks(
        X, Yv, kernel, p, xp=ctx.xp, block_rows=rows, symmetric=symmetric
    )


def _budget():
    return _memory_budget()


def kernel_matrix(
    X, Y, kernel, params, *, xp, symmetric=False, block_rows=None, memory_budget=None
):
    """The whole ``K(X, Y)`` for validated arrays in one namespace.

    The output itself is the only ``n × m`` workspace of the linear, polynomial,
    sigmoid and RBF kernels, so by default it is computed in one piece; with
    ``block_rows`` or ``memory_budget`` given (and always for the Laplacian and
    callable kernels, whose workspace is larger) row blocks are written into a
    preallocated output.
    """
    n = X.shape[0]
    one_piece = (
        block_rows is None
        and memory_budget is None
        and isinstance(kernel, str)
        and kernel != "laplacian"
    )
    rows = (
        n
        if one_piece
        else block_rows_for(
            Y.shape[0],
            X.shape[1],
            _itemsize_of(X.dtype, xp),
            kernel=kernel,
            memory_budget=memory_budget,
            block_rows=block_rows,
        )
    )
    if rows >= n:
        return _kernel_block(
            X, Y, kernel, params, xp=xp, diag_offset=0 if symmetric else None
        )
    K = None
    for start, stop, Kb in iter_kernel_blocks(
        X, Y, kernel, params, xp=xp, block_rows=rows, symmetric=symmetric
    ):
        if K is None:
            K = xp.empty((n, Y.shape[0]), dtype=Kb.dtype, device=device(Kb))
        K[start:stop, :] = Kb
    return K


def gram(
    X,
    Y=None,
    kernel="rbf",
    *,
    gamma=None,
    degree=3,
    coef0=1.0,
    sigma=None,
    block_rows=None,
    memory_budget=None,
):
    """Kernel (Gram) matrix ``K[i, j] = k(X[i], Y[j])`` (``Y = X`` when None).

    Parameters
    ----------
    X : array (n, d)
    Y : array (m, d), optional
    kernel : {"linear", "poly", "rbf", "sigmoid", "laplacian"} or callable
        A callable gets ``(X_block, Y, xp=xp)`` and returns the block.
    gamma, degree, coef0 : kernel parameters (scikit-learn's meaning;
        ``gamma=None`` is ``1/d``).
    sigma : float, optional
        RBF width; ``gamma = 1/(2 sigma²)``.
    block_rows, memory_budget : int, optional
        Compute in row blocks of this many rows, or sized to this many bytes.

    Returns
    -------
    K : array (n, m), in the caller's library.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0]])
    >>> np.round(gram(X, kernel="rbf", gamma=1.0), 4)
    array([[1.    , 0.3679],
           [0.3679, 1.    ]])
    """
    ctx, X, Yv = _prepare(X, Y)
    symmetric = Y is None
    Yv = X if symmetric else Yv
    kernel, p = resolve_kernel_params(
        kernel, X.shape[1], gamma, degree, coef0, sigma=sigma
    )
    K = kernel_matrix(
        X,
        Yv,
        kernel,
        p,
        xp=ctx.xp,
        symmetric=symmetric,
        block_rows=block_rows,
        memory_budget=memory_budget,
    )
    return ctx.out(K)


# ------------------------------------------------------------------- validity
@dataclasses.dataclass
class PSDResult:
    """Outcome of :func:`is_psd`.

    ``witness`` is a vector ``v`` with ``vᵀKv < 0`` (an eigenvector of the
    smallest eigenvalue) when the matrix is not PSD, else None.
    """

    is_psd: bool
    min_eigenvalue: float
    witness: object
    symmetric: bool
    tol: float

    def __bool__(self):
        return self.is_psd


def is_psd(K, *, tol=None):
    """Check that a Gram matrix is symmetric positive semi-definite.

    Parameters
    ----------
    K : array (n, n)
    tol : float, optional
        Eigenvalues above ``-tol`` count as zero. Default
        ``n · eps · max|λ|``.

    Returns
    -------
    PSDResult
        ``is_psd``, ``min_eigenvalue``, a ``witness`` with ``vᵀKv < 0`` when
        not PSD, and whether ``K`` was symmetric.

    Examples
    --------
    >>> import numpy as np
    >>> r = is_psd(np.array([[1.0, 2.0], [2.0, 1.0]]))
    >>> r.is_psd, round(r.min_eigenvalue, 6)
    (False, -1.0)
    """
    ctx, (K,) = enter(K, names=("K",))
    xp = ctx.xp
    K = check_array(K, xp=xp, name="K", requested=ctx.dtype)
    n, m = K.shape
    if n != m:
        raise ValueError(f"K must be square; got shape {(n, m)}")
    scale = float(xp.max(xp.abs(K))) if n else 0.0
    u = eps(K.dtype, xp)
    asym = float(xp.max(xp.abs(K - K.T))) if n else 0.0
    symmetric = asym <= 10 * u * max(scale, 1.0) * max(n, 1)
    w, V = xp.linalg.eigh((K + K.T) / 2.0)
    lam = float(w[0])
    if tol is None:
        tol = n * u * max(abs(float(w[-1])), abs(lam), 1e-300)
    ok = symmetric and lam >= -tol
    witness = None if ok or not symmetric else ctx.out(V[:, 0])
    if not symmetric and lam >= -tol:
        # an asymmetric matrix is never a valid Gram matrix; no quadratic-form witness
        witness = None
    return PSDResult(bool(ok), lam, witness, bool(symmetric), float(tol))


# -------------------------------------------------------- explicit feature maps
def poly2_features(X, *, coef0=1.0):
    """Explicit map ``φ`` with ``φ(x)·φ(z) = (x·z + coef0)²``.

    Features: ``x_i²``, ``√2 x_i x_j`` (i<j), ``√(2c) x_i``, ``c``.
    """
    ctx, (X,) = enter(X, names=("X",))
    xp = ctx.xp
    X = check_array(X, xp=xp, name="X", requested=ctx.dtype)
    if coef0 < 0:
        raise ValueError(f"coef0 must be >= 0 for a real feature map; got {coef0!r}")
    n, d = X.shape
    pairs = [
        X[:, i : i + 1] * X[:, j : j + 1] * math.sqrt(2.0)
        for i in range(d)
        for j in range(i + 1, d)
    ]
    parts = (
        [X * X]
        + pairs
        + [
            math.sqrt(2.0 * coef0) * X,
            xp.full((n, 1), float(coef0), dtype=X.dtype, device=ctx.device),
        ]
    )
    return ctx.out(xp.concat(parts, axis=1))


def rbf_taylor_features(x, *, gamma=1.0, order=10):
    """Truncated Taylor features of the 1-D RBF kernel.

    ``exp(-γ(x−z)²) = exp(-γx²) exp(-γz²) Σ_k (2γ)^k x^k z^k / k!``, so
    ``φ_k(x) = exp(-γx²) √((2γ)^k / k!) x^k`` for ``k = 0..order``.
    """
    ctx, (x,) = enter(x, names=("x",))
    xp = ctx.xp
    x = check_array(x, xp=xp, name="x", ndim=(1, 2), requested=ctx.dtype)
    if len(x.shape) == 2:
        if x.shape[1] != 1:
            raise ValueError(
                f"x must be 1-D data (n,) or (n, 1); got shape {tuple(x.shape)}"
            )
        x = x[:, 0]
    coefs = [
        math.sqrt((2.0 * gamma) ** k / math.factorial(k)) for k in range(order + 1)
    ]
    cols = [c * x**k for k, c in enumerate(coefs)]
    return ctx.out(xp.exp(-gamma * x * x)[:, None] * xp.stack(cols, axis=1))


# rows of one kernel block in kernel_dot's NumPy path: one buffer of about
# this many bytes, reused by every block (cache-sized; see _kernel_dot_numpy)
_DOT_BLOCK_BYTES = 2 * 2**20
# kernels whose block kernel_dot's NumPy path writes into its reused buffer
_IN_PLACE_KERNELS = ("linear", "poly", "sigmoid", "rbf")


def kernel_dot(X, Y, kernel, params, right, /, *, xp, block_rows=None):
    """``K(X, Y) @ right`` computed in row blocks of ``X``, never holding the
    whole ``K`` (prediction of kernel models).

    Blocks have at most ``block_rows`` rows (default: as many as the memory
    budget allows, :func:`block_rows_for`); on NumPy they are smaller still
    (see :func:`_kernel_dot_numpy`).
    """
    if block_rows is None:
        block_rows = block_rows_for(
            int(Y.shape[0]), int(Y.shape[1]), _itemsize_of(X.dtype, xp), kernel=kernel
        )
    impl = dispatch("kernels.kernel_dot", xp)
    return impl(X, Y, kernel, params, right, xp=xp, block_rows=block_rows)


def _kernel_dot_example(kernel, right_cols):
    def example():
        rng = np.random.default_rng(0)
        X, Y = rng.standard_normal((70, 5)), rng.standard_normal((40, 5))
        p = {"gamma": 0.3, "coef0": 0.5, "degree": 3.0}
        right = rng.standard_normal((40, *right_cols))
        return (X, Y, kernel, p, right), {"xp": None, "block_rows": 16}

    return example


@portable("kernels.kernel_dot")
def _kernel_dot_portable(X, Y, kernel, params, right, /, *, xp, block_rows):
    """One fresh kernel block per ``block_rows`` rows, times ``right``."""
    parts = [
        Kb @ right
        for _, _, Kb in iter_kernel_blocks(
            X, Y, kernel, params, xp=xp, block_rows=block_rows, symmetric=False
        )
    ]
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)


@fast_path("kernels.kernel_dot", "numpy", example=_kernel_dot_example("rbf", (3,)))
@fast_path("kernels.kernel_dot", "numpy", example=_kernel_dot_example("rbf", ()))
@fast_path("kernels.kernel_dot", "numpy", example=_kernel_dot_example("poly", (2,)))
@fast_path("kernels.kernel_dot", "numpy", example=_kernel_dot_example("sigmoid", ()))
@fast_path("kernels.kernel_dot", "numpy", example=_kernel_dot_example("linear", (1,)))
def _kernel_dot_numpy(X, Y, kernel, params, right, /, *, xp, block_rows):
    """The same products, each block written into one reused buffer of about
    ``_DOT_BLOCK_BYTES`` and its product straight into the output.

    Issue 16: a fresh ``block_rows × m`` block per call (16 MB for SVC) is
    memory the process has to map and fault in on its first call; one small
    buffer is faulted in once and stays in cache between the kernel's passes
    (product, clamp, ``exp``, product with ``right``). Each row's values are
    the ones :func:`_kernel_block` computes (the same factors and operations).
    """
    if not (isinstance(kernel, str) and kernel in _IN_PLACE_KERNELS):
        return _kernel_dot_portable(
            X, Y, kernel, params, right, xp=xp, block_rows=block_rows
        )
    n, m = int(X.shape[0]), int(Y.shape[0])
    rows = max(1, min(block_rows, _DOT_BLOCK_BYTES // (X.dtype.itemsize * max(m, 1))))
    out = np.empty((n, *right.shape[1:]), dtype=np.result_type(X.dtype, right.dtype))
    buf = np.empty((min(rows, n), m), dtype=X.dtype)
    L, R = _factors_in_place(X, Y, kernel, params)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        E = _block_in_place(L[start:stop], R, kernel, params, buf[: stop - start])
        np.matmul(E, right, out=out[start:stop])
    return out


def _factors_in_place(X, Y, kernel, params):
    """NumPy: the factors ``L, R`` with ``K(X, Y) = f(L @ R.T)`` that
    :func:`_block_in_place` takes (the RBF's augmented factors, else ``X, Y``)."""
    if kernel == "rbf":
        return _rbf_factors(X, Y, params["gamma"], xp=np)
    return X, Y


def _block_in_place(L, R, kernel, params, out):
    """NumPy: the kernel block of factors ``L, R`` (:func:`_factors_in_place`)
    written into ``out`` (a C-contiguous ``(len(L), len(R))`` array of their
    dtype) for the kernels in ``_IN_PLACE_KERNELS``; returns
    ``out``. The values are those :func:`_kernel_block` computes (no diagonal
    fix-up: for blocks of ``K(X, Y)``)."""
    E = np.matmul(L, R.T, out=out)
    if kernel == "rbf":
        return _clamp_exp_numpy(E, xp=np, inplace=True)
    if kernel == "linear":
        return E
    return _dot_kernel_in_place(E, kernel, params, xp=np)
