"""Pieces shared by the linear models: weighted centring, the pseudo-inverse
solve, the checks that turn an overflow into a clear error, and the linear
classifier mixin. The shared maths (``sigmoid``, ``softmax``, ``logsumexp``,
``spd_solve``, ``psd_lstsq``) lives in :mod:`xpml.utils._math` and is re-exported
here for the modules that import it from this one."""

from __future__ import annotations

import contextlib
import sys

import numpy as np

from xpml._typing import Array, ArrayLike
from xpml.exceptions import LinAlgError
from xpml.linalg import shifted_r_factor_of
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import (
    dispatch,
    eps,
    fast_path,
    finfo,
    is_numpy_namespace,
    portable,
)
from xpml.utils._math import (
    log_sigmoid,
    logsumexp,
    psd_lstsq,
    sigmoid,
    softmax,
    spd_solve,
)
from xpml.utils.validation import dense_from_sparse

__all__ = [
    "class_weight_factors",
    "SklearnInputMixin",
    "non_finite_error",
    "check_finite_result",
    "linalg_errors",
    "linalg_error_types",
    "solve_spd",
    "LinearClassifierMixin",
    "center_data",
    "data_offsets",
    "pinv_solve",
    "default_rcond",
    "RankDeficiencyWarning",
    "spd_solve",
    "psd_lstsq",
    "block_rows",
    "sigmoid",
    "log_sigmoid",
    "logsumexp",
    "softmax",
]


def non_finite_error(X, /, *, xp, what, owner):
    """The error (:class:`xpml.exceptions.LinAlgError`, a ``ValueError``) for non-finite values in ``what``, an intermediate result
    computed from a finite ``X``, naming the likely cause.

    Inputs are checked finite on entry, so a NaN or infinity later comes from an
    overflow (squares of entries beyond ``√max`` of the dtype) or, when ``X`` is
    of ordinary size, from an ill-posed solve. Costs one host sync (only on the
    error path).
    """
    f32 = X.dtype == xp.float32
    name = "float32" if f32 else "float64"
    big = float(finfo(X.dtype, xp).max)
    top = float(xp.max(xp.abs(X))) if X.shape[0] * X.shape[1] else 0.0
    if top * top >= big or top * top * X.shape[1] >= big:
        cause = (
            f"X has entries up to {top:.3g} whose squares (or sums of squares) "
            f"overflow {name} (largest {big:.3g}); scale the features, e.g. with "
            f"a StandardScaler"
        )
    else:
        cause = (
            f"X's entries are at most {top:.3g}, so the solve itself failed; the "
            f"problem is numerically ill-posed (add regularisation or rescale X)"
        )
    return LinAlgError(f"{owner}: non-finite values in the {what}: {cause}")


def check_finite_result(value, X, /, *, xp, what, owner):
    """Raise :func:`non_finite_error` unless ``value`` is all finite.

    One reduction and one host sync: call it once after a solve, never in a loop.
    """
    if not bool(xp.all(xp.isfinite(value))):
        raise non_finite_error(X, xp=xp, what=what, owner=owner)


def linalg_error_types():
    """The ``LinAlgError`` classes of the libraries in use (they share no base)."""
    types = [np.linalg.LinAlgError]  # NumPy, SciPy and CuPy raise this one
    torch = sys.modules.get("torch")
    if torch is not None:
        types.append(torch.linalg.LinAlgError)
    return tuple(types)


@contextlib.contextmanager
def linalg_errors(X, /, *, xp, what, owner):
    """Turn a library's ``LinAlgError`` (SVD / eigenvalues did not converge, a
    singular matrix) raised inside the block into :func:`non_finite_error`'s
    ``ValueError`` naming the cause, chained to the original."""
    try:
        yield
    except linalg_error_types() as exc:
        raise non_finite_error(X, xp=xp, what=what, owner=owner) from exc


def _spd_example():
    rng = np.random.default_rng(0)
    G = rng.standard_normal((40, 8))
    return (G.T @ G + np.eye(8), rng.standard_normal((8, 2))), {"xp": None}


@portable("linear_model.spd_solve_flagged")
def _spd_solve_flagged_portable(A, B, /, *, xp):
    """``(x, ok)`` with ``A x = B`` for 2-D ``B``; ``ok`` is a device scalar
    (1.0 / 0.0) saying the solve succeeded with a finite result, so the caller
    reads one number back instead of a library's info check plus a finiteness
    check."""
    try:
        x = xp.linalg.solve(A, B)
    except linalg_error_types():
        return xp.zeros_like(B), xp.zeros((), dtype=B.dtype, device=_device(B))
    return x, xp.astype(xp.all(xp.isfinite(x)), B.dtype)


@fast_path("linear_model.spd_solve_flagged", "torch", example=_spd_example)
def _spd_solve_flagged_torch(A, B, /, *, xp):
    """``cholesky_ex`` + ``cholesky_solve``: no info check on the host."""
    import torch

    L, info = torch.linalg.cholesky_ex(A)
    x = torch.cholesky_solve(B, L)
    ok = (info == 0) & torch.isfinite(x).all()
    return torch.where(ok, x, torch.zeros_like(x)), ok.to(B.dtype)


def solve_spd(A, b, X, /, *, xp, owner, what="normal equations"):
    """Solve ``A x = b`` for a symmetric positive (semi-)definite ``A`` with one
    host sync when it is regular; otherwise the minimum-norm solution through
    the eigen-decomposition (:func:`psd_lstsq`), and a :func:`non_finite_error`
    naming ``X``'s overflow if that is not finite either."""
    B = b if len(b.shape) == 2 else b[:, None]
    x, ok = dispatch("linear_model.spd_solve_flagged", xp)(A, B, xp=xp)
    if not bool(ok):  # the one sync
        with linalg_errors(X, xp=xp, what=what, owner=owner):
            x = psd_lstsq(A, B, xp=xp)
        check_finite_result(x, X, xp=xp, what=what, owner=owner)
    return x if len(b.shape) == 2 else x[:, 0]


def block_rows(X, /, *, xp):
    """Rows per block for one-pass products over ``X``.

    On NumPy (CPU BLAS) blocks of about 2 MiB keep each block in cache while it
    is used several times; on other libraries (GPU kernels, threaded CPU
    libraries) one block of all rows, i.e. a single large product, is faster.
    """
    n, d = X.shape
    if is_numpy_namespace(xp):
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
    X_offset, y_offset = data_offsets(
        X, y, sample_weight, xp=xp, fit_intercept=fit_intercept, scale=scale
    )
    sw = xp.sqrt(sample_weight)
    Xs = X - X_offset if fit_intercept else X
    ys = y - y_offset if fit_intercept else y
    if scale:
        Xs = Xs * sw[:, None]
        ys = ys * (sw if len(y.shape) == 1 else sw[:, None])
    return Xs, ys, X_offset, y_offset, sw


def data_offsets(X, y, sample_weight, /, *, xp, fit_intercept, scale=True):
    """``(x̄, ȳ)`` of :func:`center_data`: the weighted means (plain means
    with ``scale=False``), zero without an intercept; the data untouched."""
    w = sample_weight
    if not fit_intercept:
        X_offset = xp.zeros((X.shape[1],), dtype=X.dtype, device=_device(X))
        return X_offset, xp.zeros(y.shape[1:], dtype=y.dtype, device=_device(y))
    wsum = xp.sum(w)
    X_offset = (xp.sum(w[:, None] * X, axis=0) if scale else xp.sum(X, axis=0)) / wsum
    if len(y.shape) == 1:
        return X_offset, (xp.sum(w * y) if scale else xp.sum(y)) / wsum
    y_sum = xp.sum(w[:, None] * y, axis=0) if scale else xp.sum(y, axis=0)
    return X_offset, y_sum / wsum


class RankDeficiencyWarning(UserWarning):
    """The design matrix is numerically rank deficient: singular values below
    the cut-off were dropped and the minimum-norm solution returned."""


def default_rcond(dtype, /, *, xp):
    """The default relative cut-off of :func:`pinv_solve`: ``max(1e-6, 100·eps)``.

    ``1e-6`` is scikit-learn's default ``tol`` for ``LinearRegression`` (passed to
    ``scipy.linalg.lstsq`` as ``cond``); the ``100·eps`` floor only matters in
    float32 (``1.2e-5``). Unlike LAPACK's ``max(n, d)·eps`` it does not grow with
    ``n``: at ``n = 500,000`` in float32 that cut-off is 0.06 and drops genuine
    directions, while an SVD's backward error stays near ``eps·σ_max``.
    """
    return max(1e-6, 100.0 * eps(dtype, xp))


def pinv_solve(A, b, /, *, xp, rcond=None, shift=None, scale=None):
    """Minimum-norm least-squares solution ``A⁺ b`` through the thin SVD.

    Singular values at or below ``rcond · s_max`` (default :func:`default_rcond`)
    are treated as zero, so rank-deficient (or nearly collinear) ``A`` gives the
    minimum-norm solution instead of huge cancelling coefficients.
    Returns ``(x, keep, singular_values)``.

    ``shift = (a0, b0)`` and ``scale`` (n,) solve the centred, weighted system
    instead: ``diag(scale)(A − a0)`` against ``diag(scale)(b − b0)``, which a
    tall ``A`` never forms (:func:`xpml.linalg.shifted_r_factor`).

    A tall ``A`` (``n ≥ 2(d + k)`` for ``k`` right-hand sides) is first reduced
    to ``d`` rows: the R factor of ``[A | b] = Q R`` holds ``R_A`` (d × d) and
    ``Qᵀ b`` in its first ``d`` rows, and ``A⁺ b = R_A⁺ Qᵀ b`` since ``Q`` has
    orthonormal columns; the singular values are ``A``'s. That is what LAPACK's
    least-squares drivers do, and it never forms ``U`` (n × d) nor, where the
    library's QR can skip it, ``Q`` (:func:`xpml.linalg.r_factor`).
    """
    A, b = _reduce_tall(A, b, xp=xp, shift=shift, scale=scale)
    U, s, Vt = xp.linalg.svd(A, full_matrices=False)
    if rcond is None:
        rcond = default_rcond(A.dtype, xp=xp)
    cutoff = rcond * s[0] if s.shape[0] else 0.0
    keep = s > cutoff
    s_inv = xp.where(keep, 1.0 / xp.where(keep, s, xp.ones_like(s)), xp.zeros_like(s))
    Utb = U.T @ b
    coef = Vt.T @ (s_inv[:, None] * Utb if len(b.shape) == 2 else s_inv * Utb)
    return coef, keep, s


def _reduce_tall(A, b, /, *, xp, shift=None, scale=None):
    """``(R_A, Qᵀ b)`` from the R factor of ``[A | b]``, shifted and scaled
    as :func:`pinv_solve` says, when ``A`` is tall enough for it to pay, else
    ``(A, b)`` shifted and scaled."""
    n, d = A.shape
    k = 1 if len(b.shape) == 1 else int(b.shape[1])
    if d == 0 or n < 2 * (d + k):
        if shift is not None:
            A, b = A - shift[0], b - shift[1]
        if scale is not None:
            A, b = (
                A * scale[:, None],
                b * (scale if len(b.shape) == 1 else scale[:, None]),
            )
        return A, b
    shifts = None
    if shift is not None:
        shifts = (shift[0], xp.reshape(xp.astype(shift[1], A.dtype), (-1,)))
    B = xp.astype(b[:, None] if len(b.shape) == 1 else b, A.dtype, copy=False)
    R = shifted_r_factor_of((A, B), shifts, xp=xp, scale=scale)
    Qtb = R[:d, d:]
    return R[:d, :d], (Qtb[:, 0] if len(b.shape) == 1 else Qtb)


def _is_scipy_sparse(X):
    return type(X).__module__.startswith("scipy.sparse")


def _scalar_weight(sample_weight):
    """The float of a scalar ``sample_weight`` (a Python number or a 0-d
    array), else None."""
    if isinstance(sample_weight, (int, float, np.number)) and not isinstance(
        sample_weight, bool
    ):
        return float(sample_weight)
    if getattr(sample_weight, "shape", None) == ():
        return float(sample_weight)
    return None


def class_weight_factors(class_weight, classes, codes, /, *, xp, dtype):
    """Per-sample factors ``(n,)`` for scikit-learn's ``class_weight`` (None,
    ``"balanced"``: ``n / (K · n_k)``, or a dict ``{label: weight}``); None
    when ``class_weight`` is None. One host read of the codes."""
    if class_weight is None:
        return None
    from xpml._backend import to_numpy

    labels = to_numpy(classes).tolist()
    K = len(labels)
    if isinstance(class_weight, str):
        if class_weight != "balanced":
            raise ValueError(
                f"class_weight must be 'balanced', a dict or None, got {class_weight!r}"
            )
        counts = np.bincount(to_numpy(codes).astype(np.int64), minlength=K)
        w = counts.sum() / (K * np.maximum(counts, 1))
    else:
        missing = [k for k in class_weight if k not in labels]
        if missing:
            raise ValueError(
                f"The classes, {missing}, are not in class_weight: class_weight keys "
                f"must be labels of y ({labels})"
            )
        w = np.array([float(class_weight.get(c, 1.0)) for c in labels])
    wk = xp.asarray(w, dtype=dtype, device=_device(codes))
    return xp.take(wk, codes, axis=0)


class SklearnInputMixin:
    """Input conventions of scikit-learn's linear models, before xpml's checks.

    * A SciPy sparse ``X`` is densified on the way in, within the memory
      budget (xpml's one policy: :func:`xpml.utils.validation.dense_from_sparse`);
      the linear models here need only the products ``XᵀX`` and ``Xw``, which
      give the same values dense.
    * A scalar ``sample_weight`` weighs every sample by that number.
    """

    _accepts_sparse = True  # scikit-learn's input tag: sparse X is fitted

    def _validate_fit_data(self, X, y=None, sample_weight=None, **kwargs):
        if _is_scipy_sparse(X):  # xpml's one sparse policy: within the budget
            X = dense_from_sparse(X, "X")
        scale = _scalar_weight(sample_weight)
        if scale is not None:
            sample_weight = None
        ctx, X, y, sw = super()._validate_fit_data(X, y, sample_weight, **kwargs)
        if scale is not None and sw is not None:
            sw = sw * scale
        return ctx, X, y, sw

    def _validate_predict_data(self, X, *args, **kwargs):
        if _is_scipy_sparse(X):
            X = dense_from_sparse(X, "X")
        return super()._validate_predict_data(X, *args, **kwargs)


class LinearClassifierMixin:
    """``decision_function`` of a linear classifier with ``coef_`` (K', d) and
    ``intercept_`` (K',): one score column per class, or one log-odds column
    (returned 1-D) for two classes."""

    def _decision(self, X, ctx):
        return X @ ctx.take(self.coef_).T + ctx.take(self.intercept_)

    def decision_function(self, X: ArrayLike) -> Array:
        """Scores: (n,) for two classes, (n, K) otherwise."""
        ctx, X = self._validate_predict_data(X)
        Z = self._decision(X, ctx)
        return ctx.out(Z[:, 0] if Z.shape[1] == 1 else Z)

    def predict(self, X: ArrayLike) -> Array:
        """Class labels (n,): the positive class where the log-odds are > 0 (two
        classes), else the class of the largest score."""
        from xpml.utils.validation import decode_labels

        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        Z = self._decision(X, ctx)
        if Z.shape[1] == 1:
            codes = xp.astype(Z[:, 0] > 0, xp.int64)
        else:
            codes = xp.argmax(Z, axis=1)
        return decode_labels(self.classes_, codes, ctx)
