"""Pieces shared by the linear models: weighted centring, the pseudo-inverse
solve, symmetric positive-definite solves and small numerically careful helpers."""

from __future__ import annotations

from array_api_compat import device as _device

__all__ = [
    "LinearClassifierMixin",
    "center_data",
    "pinv_solve",
    "spd_solve",
    "psd_lstsq",
    "block_rows",
    "sigmoid",
    "log_sigmoid",
    "logsumexp",
    "softmax",
]


def block_rows(X, /, *, xp):
    """Rows per block for one-pass products over ``X``.

    On NumPy (CPU BLAS) blocks of about 2 MiB keep each block in cache while it
    is used several times; on other libraries (GPU kernels, threaded CPU
    libraries) one block of all rows, i.e. a single large product, is faster.
    """
    import array_api_compat

    n, d = X.shape
    if array_api_compat.is_numpy_namespace(xp):
        return max(256, 2**18 // max(int(d), 1))
    return max(int(n), 1)


def center_data(X, y, sample_weight, /, *, xp, fit_intercept, scale=True):
    """Weighted means and the centred, √w-scaled data of a least-squares problem.

    Returns ``(Xs, ys, X_offset, y_offset, sqrt_w)`` with
    ``Xs = √w (X − x̄)``, ``ys = √w (y − ȳ)``; the offsets are zero without an
    intercept. Minimising ``‖ys − Xs w‖²`` then gives the weighted least-squares
    slope and ``b = ȳ − x̄·w``. With ``scale=False`` the rows are centred but
    not multiplied by ``√w`` (the caller knows the weights are all one).
    """
    w = sample_weight
    if fit_intercept:
        wsum = xp.sum(w)
        X_offset = (
            xp.sum(w[:, None] * X, axis=0) if scale else xp.sum(X, axis=0)
        ) / wsum
        if len(y.shape) == 1:
            y_offset = (xp.sum(w * y) if scale else xp.sum(y)) / wsum
        else:
            y_offset = (
                xp.sum(w[:, None] * y, axis=0) if scale else xp.sum(y, axis=0)
            ) / wsum
    else:
        X_offset = xp.zeros((X.shape[1],), dtype=X.dtype, device=_device(X))
        y_offset = xp.zeros(y.shape[1:], dtype=y.dtype, device=_device(y))
    sw = xp.sqrt(w)
    Xs = X - X_offset if fit_intercept else X
    ys = y - y_offset if fit_intercept else y
    if scale:
        Xs = Xs * sw[:, None]
        ys = ys * (sw if len(y.shape) == 1 else sw[:, None])
    return Xs, ys, X_offset, y_offset, sw


def pinv_solve(A, b, /, *, xp, rcond=None):
    """Minimum-norm least-squares solution ``A⁺ b`` through the thin SVD.

    Singular values below ``rcond · s_max`` (default ``max(n, d) · eps``) are
    treated as zero, so rank-deficient ``A`` gives the minimum-norm solution.
    Returns ``(x, rank, singular_values)``.
    """
    n, d = A.shape
    U, s, Vt = xp.linalg.svd(A, full_matrices=False)
    if rcond is None:
        eps = 1.1920929e-07 if A.dtype == xp.float32 else 2.220446049250313e-16
        rcond = max(n, d) * eps
    cutoff = rcond * s[0] if s.shape[0] else 0.0
    keep = s > cutoff
    s_inv = xp.where(keep, 1.0 / xp.where(keep, s, xp.ones_like(s)), xp.zeros_like(s))
    Utb = U.T @ b
    coef = Vt.T @ (s_inv[:, None] * Utb if len(b.shape) == 2 else s_inv * Utb)
    return coef, keep, s


def spd_solve(A, b, /, *, xp):
    """Solve ``A x = b`` for a symmetric positive (semi-)definite ``A``.

    Uses ``xp.linalg.solve``; when that fails (a singular ``A``) falls back to
    the minimum-norm solution through the eigen-decomposition.
    """
    try:
        return xp.linalg.solve(A, b if len(b.shape) == 2 else b[:, None])[
            (slice(None), slice(None)) if len(b.shape) == 2 else (slice(None), 0)
        ]
    except Exception:  # singular: LinAlgError / torch._C._LinAlgError, backend specific
        lam, V = xp.linalg.eigh(A)
        eps = 2.220446049250313e-16 if A.dtype == xp.float64 else 1.1920929e-07
        keep = lam > (A.shape[0] * eps) * xp.max(xp.abs(lam))
        inv = xp.where(
            keep, 1.0 / xp.where(keep, lam, xp.ones_like(lam)), xp.zeros_like(lam)
        )
        Vtb = V.T @ b
        return V @ (inv[:, None] * Vtb if len(b.shape) == 2 else inv * Vtb)


def psd_lstsq(H, g, /, *, xp):
    """Minimum-norm solution of ``H e = g`` for a symmetric PSD ``H``, through its
    eigen-decomposition; eigenvalues below ``m · eps · λ_max`` count as zero.
    ``g`` may be (m,) or (m, k)."""
    lam, V = xp.linalg.eigh(H)
    eps = 2.220446049250313e-16 if H.dtype == xp.float64 else 1.1920929e-07
    keep = lam > (H.shape[0] * eps) * xp.max(xp.abs(lam))
    inv = xp.where(
        keep, 1.0 / xp.where(keep, lam, xp.ones_like(lam)), xp.zeros_like(lam)
    )
    Vtg = V.T @ g
    return V @ (inv[:, None] * Vtg if len(g.shape) == 2 else inv * Vtg)


def sigmoid(z, /, *, xp):
    """``1 / (1 + e^{−z})`` without overflow for large ``|z|``."""
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def log_sigmoid(z, /, *, xp):
    """``log σ(z) = −log(1 + e^{−z})``, stable for large ``|z|``."""
    return xp.minimum(z, xp.zeros_like(z)) - xp.log1p(xp.exp(-xp.abs(z)))


def logsumexp(a, /, *, xp, axis=-1):
    """``log Σ exp(a)`` along ``axis``, kept-dims; rows of all ``−inf`` give ``−inf``."""
    m = xp.max(a, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    return m + xp.log(xp.sum(xp.exp(a - m), axis=axis, keepdims=True))


def softmax(a, /, *, xp, axis=-1):
    """Row-wise softmax, stable for large entries."""
    m = xp.max(a, axis=axis, keepdims=True)
    e = xp.exp(a - m)
    return e / xp.sum(e, axis=axis, keepdims=True)


class LinearClassifierMixin:
    """``decision_function`` of a linear classifier with ``coef_`` (K', d) and
    ``intercept_`` (K',): one score column per class, or one log-odds column
    (returned 1-D) for two classes."""

    def _decision(self, X, ctx):
        return X @ ctx.take(self.coef_).T + ctx.take(self.intercept_)

    def decision_function(self, X):
        """Scores: (n,) for two classes, (n, K) otherwise."""
        ctx, X = self._validate_predict_data(X)
        Z = self._decision(X, ctx)
        return ctx.out(Z[:, 0] if Z.shape[1] == 1 else Z)
