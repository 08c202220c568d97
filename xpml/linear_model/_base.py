"""Pieces shared by the linear models: weighted centring and the pseudo-inverse solve."""

from __future__ import annotations

__all__ = ["center_data", "pinv_solve"]


def center_data(X, y, sample_weight, /, *, xp, fit_intercept):
    """Weighted means and the centred, √w-scaled data of a least-squares problem.

    Returns ``(Xs, ys, X_offset, y_offset, sqrt_w)`` with
    ``Xs = √w (X − x̄)``, ``ys = √w (y − ȳ)``; the offsets are zero without an
    intercept. Minimising ``‖ys − Xs w‖²`` then gives the weighted least-squares
    slope and ``b = ȳ − x̄·w``.
    """
    w = sample_weight
    if fit_intercept:
        wsum = xp.sum(w)
        X_offset = xp.sum(w[:, None] * X, axis=0) / wsum
        y_offset = (xp.sum(w * y) if len(y.shape) == 1 else xp.sum(w[:, None] * y, axis=0)) / wsum
    else:
        X_offset = xp.zeros((X.shape[1],), dtype=X.dtype, device=getattr(X, "device", None))
        y_offset = xp.zeros(y.shape[1:], dtype=y.dtype, device=getattr(y, "device", None))
    sw = xp.sqrt(w)
    Xs = (X - X_offset) * sw[:, None]
    ys = (y - y_offset) * (sw if len(y.shape) == 1 else sw[:, None])
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
