"""Shared maths: the numerically careful pieces every family uses.

One definition each, written on the array API:

* ``sigmoid`` / ``log_sigmoid`` / ``softmax`` / ``log_softmax`` / ``logsumexp``
  never overflow (the exponent is always ``≤ 0``);
* ``spd_solve`` / ``psd_lstsq`` solve symmetric positive (semi-)definite
  systems and check the result explicitly, since CuPy's ``linalg.solve`` returns
  NaN for a singular matrix where NumPy and PyTorch raise;
* ``encode_labels_against`` maps labels to codes against a fitted ``classes_``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from xpml.exceptions import LinAlgError
from xpml.utils._array_api import device, eps

__all__ = [
    "sigmoid",
    "log_sigmoid",
    "logsumexp",
    "softmax",
    "log_softmax",
    "spd_solve",
    "psd_lstsq",
    "all_finite",
    "encode_labels_against",
]


def sigmoid(z: Any, /, *, xp: Any) -> Any:
    """``1 / (1 + e^{−z})`` without overflow for large ``|z|``."""
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def log_sigmoid(z: Any, /, *, xp: Any) -> Any:
    """``log σ(z) = −log(1 + e^{−z})``, stable for large ``|z|``."""
    return xp.minimum(z, xp.zeros_like(z)) - xp.log1p(xp.exp(-xp.abs(z)))


def logsumexp(a: Any, /, *, xp: Any, axis: int = -1, keepdims: bool = True) -> Any:
    """``log Σ exp(a)`` along ``axis``; rows of all ``−inf`` give ``−inf``."""
    m = xp.max(a, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, xp.zeros_like(m))
    out = m + xp.log(xp.sum(xp.exp(a - m), axis=axis, keepdims=True))
    return out if keepdims else xp.squeeze(out, axis=axis)


def log_softmax(a: Any, /, *, xp: Any, axis: int = -1) -> Any:
    """``a − logsumexp(a)`` along ``axis``."""
    return a - logsumexp(a, xp=xp, axis=axis)


def softmax(a: Any, /, *, xp: Any, axis: int = -1) -> Any:
    """``exp(a) / Σ exp(a)`` along ``axis``, shifted by the maximum."""
    e = xp.exp(a - xp.max(a, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def all_finite(a: Any, /, *, xp: Any) -> bool:
    """Whether every entry of ``a`` is finite (one host synchronisation)."""
    return bool(xp.all(xp.isfinite(a)))


def psd_lstsq(H: Any, g: Any, /, *, xp: Any) -> Any:
    """Minimum-norm solution of ``H e = g`` for a symmetric PSD ``H``, through
    its eigen-decomposition; eigenvalues below ``m · eps · λ_max`` count as
    zero. ``g`` may be (m,) or (m, k)."""
    lam, V = xp.linalg.eigh(H)
    cut = (H.shape[0] * eps(H.dtype, xp)) * xp.max(xp.abs(lam))
    keep = lam > cut
    inv = xp.where(keep, 1.0 / xp.where(keep, lam, xp.ones_like(lam)), 0.0 * lam)
    Vtg = V.T @ g
    return V @ (inv[:, None] * Vtg if len(g.shape) == 2 else inv * Vtg)


def _cholesky_ok(A: Any, /, *, xp: Any) -> Any:
    """Whether ``A`` is numerically positive definite: its Cholesky pivots are
    finite and every squared pivot is above ``m · eps · max diag(A)`` (pivots
    bound the smallest eigenvalue from above, so this is ``psd_lstsq``'s cut).
    A 0-d boolean array (no synchronisation)."""
    L = xp.linalg.cholesky(A)
    piv = xp.linalg.diagonal(L) ** 2
    cut = (A.shape[0] * eps(A.dtype, xp)) * xp.max(xp.abs(xp.linalg.diagonal(A)))
    return xp.all(xp.isfinite(piv)) & xp.all(piv > cut)


def _solve(A: Any, b: Any, /, *, xp: Any) -> Any:
    if len(b.shape) == 2:
        return xp.linalg.solve(A, b)
    return xp.linalg.solve(A, b[:, None])[:, 0]


def spd_solve(A: Any, b: Any, /, *, xp: Any, what: str = "the linear system") -> Any:
    """Solve ``A x = b`` for a symmetric positive (semi-)definite ``A``.

    A Cholesky factorisation decides whether ``A`` is numerically positive
    definite (it raises on NumPy and PyTorch, returns NaN on CuPy, or shows a
    pivot below ``m · eps · max diag(A)``: all are checked); if so,
    ``xp.linalg.solve``; otherwise the minimum-norm solution through the
    eigen-decomposition (:func:`psd_lstsq`). Non-finite results, from non-finite
    ``A`` or ``b`` (an overflow upstream), raise
    :class:`xpml.exceptions.LinAlgError` naming ``what`` was being solved.
    One host synchronisation on the regular path.
    """
    try:
        ok = _cholesky_ok(A, xp=xp)
        x = _solve(A, b, xp=xp)
        if bool(ok & xp.all(xp.isfinite(x))):  # the one synchronisation
            return x
    except Exception:  # noqa: BLE001 - each library raises its own error type
        pass
    try:
        x = psd_lstsq(A, b, xp=xp)
    except Exception as exc:  # eigh failed to converge: non-finite input
        raise LinAlgError(
            f"could not solve {what}: the matrix holds non-finite values "
            f"(an overflow, e.g. features too large to square); scale the data"
        ) from exc
    if not all_finite(x, xp=xp):
        raise LinAlgError(
            f"could not solve {what}: the solution is not finite (the matrix or "
            f"right-hand side overflowed); scale the data"
        )
    return x


def encode_labels_against(classes: Any, y: Any, /, *, xp: Any, name: str = "y") -> Any:
    """Integer codes of labels ``y`` in the sorted fitted ``classes``.

    Numeric labels are matched on the device (one synchronisation to check that
    every label is known); other labels (strings, objects) on the host with
    NumPy. Unknown labels raise ``ValueError`` naming them.
    """
    if isinstance(classes, np.ndarray) and classes.dtype.kind not in "biuf":
        y_host = np.asarray(y)
        codes = np.searchsorted(classes, y_host)
        codes = np.minimum(codes, classes.shape[0] - 1)
        bad = classes[codes] != y_host
        if np.any(bad):
            raise _unknown(name, y_host[bad], classes)
        return xp.asarray(codes.astype(np.int64))
    from xpml._backend import move

    classes = move(classes, xp, device(y))
    if classes.dtype != y.dtype:
        classes = xp.astype(classes, y.dtype)
    codes = xp.searchsorted(classes, y)
    last = xp.asarray(classes.shape[0] - 1, dtype=codes.dtype, device=device(y))
    codes = xp.minimum(codes, last)
    hit = xp.take(classes, codes) == y
    if not bool(xp.all(hit)):
        from xpml._backend import to_numpy

        raise _unknown(name, to_numpy(y)[~to_numpy(hit)], to_numpy(classes))
    return xp.astype(codes, xp.int64)


def _unknown(name: str, labels: Any, classes: Any) -> ValueError:
    unknown = sorted(set(np.asarray(labels).tolist()))[:10]
    return ValueError(
        f"{name} contains labels {unknown} not seen in fit; the fitted classes are "
        f"{np.asarray(classes).tolist()}"
    )
