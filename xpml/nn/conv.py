"""Conv2D and 2-D pooling as contractions over the window tensor (NHWC).

The window tensor ``(N, H_out, W_out, k_h, k_w, C)`` is stored as the matrix
``A (N·H_out·W_out, k_h·k_w·C)`` (:func:`window_matrix`). The array API has no
``as_strided``, so the portable path gathers the ``k_h·k_w`` strided slices of
the padded input and stacks them; on NumPy and PyTorch a fast path copies one
strided view (``as_strided`` / ``unfold``). A convolution is then one
contraction ``einsum('nhwijc,ijco->nhwo')``, written as the matrix product
``A W`` (:func:`contract`), whose result is already NHWC.

Backward (ALGORITHMS.md §0.3): ``dW = Aᵀ dZ`` reuses the forward's windows; the
bias gradient sums ``dZ`` over ``n, h, w``; ``dX`` either correlates ``dZ`` --
zero-upsampled by the stride and padded by ``k − 1 − pad`` -- with the
180°-rotated, in/out-transposed kernel, or scatters ``W dZᵀ`` back onto the
input windows, one kernel offset at a time (:func:`fold`, into a
channels-first buffer: ``dX`` is an NHWC view of it); :class:`Conv2D` takes
the faster of the two for its shape and library (:func:`choose_input_grad`).
Pooling gradients are scattered back the same way: max pooling routes them to
the arg-max (split evenly between ties), average pooling spreads
``1 / (k_h k_w)``.

On NumPy the layer's products run a block of images at a time (~1 MB of
windows, built in cache just before their product, blocks split among
threads; see :data:`BLOCK_BYTES`). Each thread pads its block into a small
zero-margined buffer whose window view is made once, so no padded copy of a
whole batch is made. With stride 1, "fold" works on the flattened padded grid,
where a kernel offset is a shift by a whole number of rows: one product
``W dZ_gridᵀ`` whose ``k_h·k_w`` shifted terms are one strided view, summed
(:func:`input_grad_stride1`), with ``dW`` from the block's input windows in
the same pass; "correlate" copies the padded ``dZ``'s windows ``B`` once per
block and takes both ``dX = B W_rot`` and ``dW`` (``Xᵀ B``, read back
flipped) from them, so its backward copies one window matrix rather than two
(:func:`conv_backward_s1`).

At stride 1 with enough channels and pixels (:data:`ROW_SPLIT_MIN_VALUES`),
where NumPy's OpenBLAS is found, neither window matrix is made: each block
copies only its windows along the width (``k_w·C`` values, a ``k_h``-th of
the window matrix, :class:`_RowWindows`), in which kernel row ``i``'s part of
the window matrix is a plain matrix shifted by ``i`` image rows; the forward,
``dX`` and ``dW`` are then ``k_h`` products each, summed in place by CBLAS
``gemm`` (:func:`xpml.linalg.numpy_gemm`) -- 23.4 -> 21.2 ms for the bench's
float32 layer on one thread (issue 14). Each of those products is made in
as few pieces of rows as keep it within the size OpenBLAS runs on its faster
path for small products, where it has one (:meth:`xpml.linalg.Gemm.row_pieces`;
the bench's layer: 784 rows an image in two pieces, 21.4 -> 17.7 ms on one
thread, 11.9 -> 10.1 ms on two; session 21). The backward's products are
batches of NumPy's ``matmul`` over a stack of pieces (:func:`_row_groups`),
whose sums are one more pass: a call per product through ctypes takes the
GIL back after each ~12 µs product, and two threads waiting on each other
for it made the bench's backward 7.4-9.0 ms on two threads against 6.7-7.4
batched (the same 11.1-11.2 on one). The forward keeps its calls per product
accumulating in place (batched with a summing pass, 6.3 -> 7.0 ms on one
thread).

With a stride past 1 a :class:`Conv2D` layer keeps one scratch buffer
(:class:`Workspace`) for ``dX``'s large intermediate (``W dZᵀ``, or the padded
``dZ``'s windows a group of images at a time), reused by later calls (issue
16: fresh memory is page-faulted in on first touch).
"""

from __future__ import annotations

import concurrent.futures
import functools
import math
import os

import array_api_compat
import array_api_extra as xpx
import numpy as np

from xpml.linalg import (
    CBLAS_NO_TRANS,
    CBLAS_ROW_MAJOR,
    _single_threaded_blas,
    host_threads,
    numpy_gemm,
    one_blas_thread,
    thread_pool,
)
from xpml.nn._base import Layer, call_namespace, pair
from xpml.nn.init import get_initialiser
from xpml.utils._array_api import device as array_device
from xpml.utils._array_api import dispatch, fast_path, portable

__all__ = [
    "Conv2D",
    "MaxPool2D",
    "AvgPool2D",
    "windows",
    "window_matrix",
    "contract",
    "offset_stack",
    "dilate_pad",
    "fold",
    "conv2d",
    "conv2d_backward",
    "conv_forward",
    "conv_weight_grad",
    "bias_grad",
    "input_grad_stride1",
    "conv_backward_s1",
    "Workspace",
    "choose_input_grad",
]


class Workspace:
    """A flat NumPy scratch buffer that a layer owns, reused across its calls.

    :meth:`take` returns a view of its first ``prod(shape)`` elements (a new
    buffer of ``max(size, reserve)`` elements when the held one is too small or
    of another dtype). Only NumPy fast paths use it; the portable paths and
    other libraries allocate as before. Whatever a view held is overwritten by
    the next :meth:`take`.
    """

    def __init__(self):
        self.buffer = None
        self.reserve = 0

    def take(self, shape, dtype):
        size = math.prod(shape)
        buf = self.buffer
        if buf is None or buf.dtype != dtype or buf.size < size:
            buf = np.empty(max(size, self.reserve), dtype=dtype)
            self.buffer = buf
        return buf[:size].reshape(shape)


# ---------------------------------------------------------------- primitives
def dilate_pad(X, /, stride, pad_h, pad_w, *, xp, fill=0.0, channels_first=False):
    """Insert ``stride − 1`` zeros between rows/columns of NHWC ``X`` and pad.

    ``pad_h = (top, bottom)`` and ``pad_w = (left, right)`` may be negative,
    which crops. With ``channels_first`` the result is laid out ``(C, N, H, W)``
    (a fresh contiguous array, which makes the window slices contiguous rows).
    """
    N, H, W, C = X.shape
    sh, sw = stride
    Hu, Wu = (H - 1) * sh + 1, (W - 1) * sw + 1
    (t, b), (l, r) = pad_h, pad_w
    plain = (sh, sw) == (1, 1) and min(t, b, l, r) >= 0 and max(t, b, l, r) == 0
    if plain and not channels_first:
        return X
    T, L = max(t, 0), max(l, 0)
    Hp, Wp = T + Hu + max(b, 0), L + Wu + max(r, 0)
    dev = array_device(X)
    if channels_first:
        out = xp.full((C, N, Hp, Wp), fill, dtype=X.dtype, device=dev)
        out = xpx.at(out)[:, :, T : T + Hu : sh, L : L + Wu : sw].set(
            xp.permute_dims(X, (3, 0, 1, 2))
        )
        h_axis = 2
    else:
        out = xp.full((N, Hp, Wp, C), fill, dtype=X.dtype, device=dev)
        out = xpx.at(out)[:, T : T + Hu : sh, L : L + Wu : sw, :].set(X)
        h_axis = 1
    if min(t, b, l, r) < 0:
        rows = slice(max(-t, 0), Hp - max(-b, 0))
        cols = slice(max(-l, 0), Wp - max(-r, 0))
        out = out[:, :, rows, cols] if h_axis == 2 else out[:, rows, cols, :]
    return out


def out_size(n, k, s, p):
    """Output length of a window sweep: ``⌊(n + 2p − k) / s⌋ + 1``."""
    return (n + 2 * p - k) // s + 1


def _offset_slices(Xp, kernel, stride, h_axis):
    """The ``k_h·k_w`` strided slices of ``Xp``, one per kernel offset ``(i, j)``."""
    (kh, kw), (sh, sw) = kernel, stride
    Hp, Wp = Xp.shape[h_axis], Xp.shape[h_axis + 1]
    Ho, Wo = (Hp - kh) // sh + 1, (Wp - kw) // sw + 1
    lead = (slice(None),) * h_axis
    return [
        Xp[
            lead
            + (
                slice(i, i + sh * (Ho - 1) + 1, sh),
                slice(j, j + sw * (Wo - 1) + 1, sw),
                Ellipsis,
            )
        ]
        for i in range(kh)
        for j in range(kw)
    ], (Ho, Wo)


def _windows_example():
    X = np.random.default_rng(0).standard_normal((2, 7, 6, 3))
    return (X, (3, 2), (2, 1)), {"xp": None}


@portable("nn.conv_windows")
def _window_matrix_portable(Xp, /, kernel, stride, *, xp, work=None):
    slices, (Ho, Wo) = _offset_slices(Xp, kernel, stride, 1)
    N, C = Xp.shape[0], Xp.shape[3]
    A = xp.stack(slices, axis=3)  # (N, H_out, W_out, k_h·k_w, C)
    return xp.reshape(A, (N * Ho * Wo, kernel[0] * kernel[1] * C))


def _windows_work_example():
    args, kw = _windows_example()
    return args, {**kw, "work": Workspace()}


@fast_path("nn.conv_windows", "numpy", example=_windows_work_example)
def _window_matrix_numpy(Xp, /, kernel, stride, *, xp, work=None):
    # one strided view (see _window_view) and one copy
    V = _window_view(np.ascontiguousarray(Xp), kernel, stride)
    N, Ho, Wo, kh, kwC = V.shape
    if work is None:
        return np.reshape(V, (N * Ho * Wo, kh * kwC))  # the copy
    A = work.take(V.shape, Xp.dtype)
    np.copyto(A, V)  # the same copy, into the layer's buffer
    return np.reshape(A, (N * Ho * Wo, kh * kwC))


@fast_path("nn.conv_windows", "torch", example=_windows_example)
def _window_matrix_torch(Xp, /, kernel, stride, *, xp, work=None):
    (kh, kw), (sh, sw) = kernel, stride
    V = Xp.unfold(1, kh, sh).unfold(2, kw, sw)  # (N, H_out, W_out, C, k_h, k_w)
    N, Ho, Wo, C = V.shape[:4]
    return V.permute(0, 1, 2, 4, 5, 3).reshape(N * Ho * Wo, kh * kw * C)


def window_matrix(Xp, /, kernel, stride, *, xp, work=None):
    """The window tensor of padded NHWC ``Xp``, as the matrix
    ``A (N·H_out·W_out, k_h·k_w·C)``.

    Row ``(n, h, w)``, column ``(i, j, c)`` holds ``X_pad[n, h·s_h + i, w·s_w + j, c]``:
    the window tensor ``(N, H_out, W_out, k_h, k_w, C)`` of ALGORITHMS.md §0.3
    stored contiguously, so the convolution below is one matrix product whose
    result is already NHWC (see :func:`windows`). Built by stacking the
    ``k_h·k_w`` strided slices, or on NumPy and PyTorch by copying one strided
    view (``as_strided`` / ``unfold``); on NumPy into ``work`` (a
    :class:`Workspace`) when one is given.
    """
    (kh, kw), (sh, sw) = kernel, stride
    Ho, Wo = (Xp.shape[1] - kh) // sh + 1, (Xp.shape[2] - kw) // sw + 1
    A = dispatch("nn.conv_windows", xp)(Xp, kernel, stride, xp=xp, work=work)
    return A, (Ho, Wo)


def windows(X, /, kernel, stride, padding=(0, 0), *, xp):
    """The window tensor ``(N, H_out, W_out, k_h, k_w, C)`` of NHWC ``X``: a
    reshape of :func:`window_matrix`."""
    ph, pw = padding
    Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp)
    A, (Ho, Wo) = window_matrix(Xp, kernel, stride, xp=xp)
    return xp.reshape(A, (X.shape[0], Ho, Wo, kernel[0], kernel[1], X.shape[3]))


def contract(A, W, /, out_shape, *, xp):
    """``einsum('nhwijc,ijco->nhwo', windows, W)``: one matrix product ``A W``
    over the window matrix ``A`` (:func:`window_matrix`); the result is NHWC."""
    K, Co = W.shape[0] * W.shape[1] * W.shape[2], W.shape[3]
    Z = A @ xp.reshape(W, (K, Co))  # (N·H_out·W_out, C_out)
    return xp.reshape(Z, tuple(out_shape) + (Co,))


def offset_stack(Xp, /, kernel, stride, *, xp):
    """The windows of NHWC ``Xp`` stacked offset-first: ``(k_h·k_w, N, H_out, W_out, C)``
    (for pooling, which reduces over the offsets)."""
    slices, _ = _offset_slices(Xp, kernel, stride, 1)
    return xp.stack(slices, axis=0)


def _fold_geometry(cols, kernel, padded_hw, stride, channels_first):
    (kh, kw), (sh, sw) = kernel, stride
    if channels_first:
        _, C, N, Ho, Wo = cols.shape
        shape, lead = (C, N) + tuple(padded_hw), (slice(None), slice(None))
    else:
        _, N, Ho, Wo, C = cols.shape
        shape, lead = (N,) + tuple(padded_hw) + (C,), (slice(None),)
    at = [
        lead
        + (
            slice(i, i + sh * (Ho - 1) + 1, sh),
            slice(j, j + sw * (Wo - 1) + 1, sw),
            Ellipsis,
        )
        for i in range(kh)
        for j in range(kw)
    ]
    return shape, at


def _fold_example():
    cols = np.random.default_rng(0).standard_normal((6, 2, 3, 4, 3))
    return (cols, (3, 2), (7, 6), (2, 1)), {"xp": None}


@portable("nn.conv_fold")
def _fold_portable(cols, /, kernel, padded_hw, stride, *, xp, channels_first=False):
    shape, at = _fold_geometry(cols, kernel, padded_hw, stride, channels_first)
    out = xp.zeros(shape, dtype=cols.dtype, device=array_device(cols))
    for k, where in enumerate(at):
        out = xpx.at(out)[where].add(cols[k, ...])
    return out


@fast_path("nn.conv_fold", "numpy", example=_fold_example)
def _fold_numpy(cols, /, kernel, padded_hw, stride, *, xp, channels_first=False):
    # in-place adds into a buffer this function owns
    shape, at = _fold_geometry(cols, kernel, padded_hw, stride, channels_first)
    out = np.zeros(shape, dtype=cols.dtype)
    for k, where in enumerate(at):
        view = out[where]
        np.add(view, cols[k, ...], out=view)
    return out


@fast_path("nn.conv_fold", "torch", example=_fold_example)
def _fold_torch(cols, /, kernel, padded_hw, stride, *, xp, channels_first=False):
    shape, at = _fold_geometry(cols, kernel, padded_hw, stride, channels_first)
    out = xp.zeros(shape, dtype=cols.dtype, device=array_device(cols))
    for k, where in enumerate(at):
        out[where].add_(cols[k, ...])
    return out


def fold(cols, /, kernel, padded_hw, stride, *, xp, channels_first=False):
    """Adjoint of the window gathering: add each window back to where it came from.

    ``cols`` is ``(k_h·k_w, N, H_out, W_out, C)`` (as from :func:`offset_stack`)
    and the result the padded-size NHWC array ``(N, H_p, W_p, C)``; with
    ``channels_first`` they are ``(k_h·k_w, C, N, H_out, W_out)`` and
    ``(C, N, H_p, W_p)``.
    """
    return dispatch("nn.conv_fold", xp)(
        cols, kernel, padded_hw, stride, xp=xp, channels_first=channels_first
    )


def _crop(Xp, padding):
    ph, pw = padding
    return Xp[:, ph : Xp.shape[1] - ph, pw : Xp.shape[2] - pw, :]


def conv2d(X, W, b=None, /, *, stride=(1, 1), padding=(0, 0), xp, work=None):
    """NHWC convolution (cross-correlation) of ``X`` with ``W (k_h, k_w, C_in, C_out)``.

    Returns ``(Z, A)``: the output and the window matrix (kept for backward; a
    view of ``work``'s buffer when a :class:`Workspace` is given).
    """
    ph, pw = padding
    Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp)
    A, (Ho, Wo) = window_matrix(Xp, W.shape[:2], stride, xp=xp, work=work)
    Z = contract(A, W, (X.shape[0], Ho, Wo), xp=xp)
    if b is not None and b.dtype == Z.dtype:
        # Z is the product's fresh array; adding b along rows of W_out·C_out
        # rather than C_out values at a time is several times faster on NumPy
        N, Wo, Co = X.shape[0], Z.shape[2], Z.shape[3]
        rows = xp.reshape(Z, (N * Ho, Wo * Co))
        rows += xp.reshape(xp.broadcast_to(b, (Wo, Co)), (Wo * Co,))
        Z = xp.reshape(rows, Z.shape)  # in case reshape copied
    elif b is not None:
        Z = Z + b
    return Z, A


def conv2d_backward(
    dZ,
    A,
    W,
    /,
    input_hw,
    *,
    stride=(1, 1),
    padding=(0, 0),
    xp,
    input_grad="fold",
    work=None,
):
    """Gradients ``(dX, dW, db)`` of :func:`conv2d` given the upstream ``dZ``.

    ``input_grad`` picks how ``dX`` is computed (:data:`INPUT_GRAD`): "correlate"
    (the rotated-kernel correlation) or "fold" (scattering); they agree to
    rounding. "auto": as :func:`choose_input_grad` decides.
    With a :class:`Workspace` ``work`` (NumPy), ``dX``'s large intermediate is
    built in its buffer once ``dW`` is formed: if ``A`` lives there too it is
    overwritten.
    """
    N, Ho, Wo, Co = dZ.shape
    dZm = xp.reshape(dZ, (N * Ho * Wo, Co))
    dW = xp.reshape(A.T @ dZm, W.shape)  # the forward's windows against dZ
    db = bias_grad(dZ, xp=xp)
    input_grad = choose_input_grad(input_grad, xp, stride, W.shape[2], W.shape[3])
    dX = INPUT_GRAD[input_grad](dZ, W, input_hw, stride, padding, xp=xp, work=work)
    return dX, dW, db


def bias_grad(dZ, /, *, xp):
    """``db``: ``dZ`` summed over ``n, h, w`` -- along rows of ``W_out·C_out``
    first (long runs), then over ``W_out``."""
    N, Ho, Wo, Co = dZ.shape
    rows = xp.sum(xp.reshape(dZ, (N * Ho, Wo * Co)), axis=0)
    return xp.sum(xp.reshape(rows, (Wo, Co)), axis=0)


def input_grad_correlate(dZ, W, /, input_hw, stride, padding, *, xp, work=None):
    """``dX`` as in ALGORITHMS.md §0.3: correlate ``dZ`` -- zero-upsampled by the
    stride and padded by ``k − 1 − pad`` -- with the 180°-rotated, in/out-transposed
    kernel (stride 1: :func:`input_grad_stride1`)."""
    if tuple(stride) == (1, 1):
        return input_grad_stride1(
            dZ, W, input_hw, padding, xp=xp, method="correlate", work=work
        )
    return _correlate_windows(dZ, W, input_hw, stride, padding, xp=xp, work=work)


def _correlate_windows(dZ, W, /, input_hw, stride, padding, *, xp, work=None):
    # the correlation as a stride-1 convolution through the window machinery
    N, Ho, Wo, Co = dZ.shape
    kh, kw = W.shape[:2]
    (H, Wd), (sh, sw), (ph, pw) = input_hw, stride, padding
    top, left = kh - 1 - ph, kw - 1 - pw
    bottom = H + kh - 1 - top - ((Ho - 1) * sh + 1)
    right = Wd + kw - 1 - left - ((Wo - 1) * sw + 1)
    dZp = dilate_pad(dZ, (sh, sw), (top, bottom), (left, right), xp=xp)
    W_rot = xp.permute_dims(xp.flip(W, axis=(0, 1)), (0, 1, 3, 2))
    # with a workspace, images in groups whose windows fit its reserve (the
    # forward's window matrix): the same rows of the same products
    per_image = H * Wd * kh * kw * Co
    step = N if work is None else max(1, min(N, work.reserve // per_image))
    parts = []
    for i in range(0, N, step):
        A_dZ, _ = window_matrix(
            dZp[i : i + step, ...], (kh, kw), (1, 1), xp=xp, work=work
        )
        parts.append(contract(A_dZ, W_rot, (A_dZ.shape[0] // (H * Wd), H, Wd), xp=xp))
    return parts[0] if len(parts) == 1 else xp.concat(parts, axis=0)


def _cols_example():
    rng = np.random.default_rng(0)
    return (rng.standard_normal((12, 3)), rng.standard_normal((20, 3))), {
        "xp": None,
        "work": Workspace(),
    }


@portable("nn.conv_cols")
def _cols_portable(Wm, dZm, /, *, xp, work=None):
    """``W dZᵀ``, ``(k_h·k_w·C_in, N·H_out·W_out)``: what :func:`fold` scatters."""
    return Wm @ dZm.T


@fast_path("nn.conv_cols", "numpy", example=_cols_example)
def _cols_numpy(Wm, dZm, /, *, xp, work=None):
    shape = (Wm.shape[0], dZm.shape[0])
    out = None if work is None else work.take(shape, np.result_type(Wm, dZm))
    return np.matmul(Wm, dZm.T, out=out)


def input_grad_fold(dZ, W, /, input_hw, stride, padding, *, xp, work=None):
    """The same ``dX`` by scattering: each output's gradient ``W dZ`` is added back
    onto its input window (col2im), skipping the zeros of the upsampled ``dZ``
    (stride 1: :func:`input_grad_stride1`)."""
    if tuple(stride) == (1, 1):
        return input_grad_stride1(
            dZ, W, input_hw, padding, xp=xp, method="fold", work=work
        )
    return _fold_windows(dZ, W, input_hw, stride, padding, xp=xp, work=work)


def _fold_windows(dZ, W, /, input_hw, stride, padding, *, xp, work=None):
    N, Ho, Wo, Co = dZ.shape
    kh, kw, Ci, _ = W.shape
    (H, Wd), (ph, pw) = input_hw, padding
    dZm = xp.reshape(dZ, (N * Ho * Wo, Co))
    # one product (k_h·k_w·C_in, N·H_out·W_out) = (k_h·k_w, C_in, N, H_out, W_out):
    # each offset's block is contiguous with rows of W_out, so the fold adds long
    # runs (per-offset products would be nine small multithreaded GEMMs)
    colsT = dispatch("nn.conv_cols", xp)(
        xp.reshape(W, (kh * kw * Ci, Co)), dZm, xp=xp, work=work
    )
    colsT = xp.reshape(colsT, (kh * kw, Ci, N, Ho, Wo))
    dXc = fold(
        colsT, (kh, kw), (H + 2 * ph, Wd + 2 * pw), stride, xp=xp, channels_first=True
    )
    # NHWC view of the channels-first buffer
    return xp.permute_dims(dXc[:, :, ph : ph + H, pw : pw + Wd], (1, 2, 3, 0))


INPUT_GRAD = {"correlate": input_grad_correlate, "fold": input_grad_fold}
INPUT_GRAD_CHOICES = ("auto", *INPUT_GRAD)


def choose_input_grad(input_grad, xp, stride, c_in, c_out):
    """The ``dX`` method ``input_grad="auto"`` stands for (others unchanged).

    "correlate" on NumPy with stride 1 when ``2 C_in ≥ C_out``, else "fold".
    Timed in turns on the project's 2-core CPU, 3 × 3 kernels
    (bench/results/conv-input-grad-2core.md; fold's time over correlate's):
    1.10–1.35 at 16 → 32, 32 → 64, 64 → 64 and 32 → 32 channels (0.98 once),
    1.27–1.71 at 16 → 8, but 0.62–0.99 at 1 → 16, 3 → 16, 4 → 64 and 8 → 32:
    correlate's product ``(rows, k²·C_out) × (k²·C_out, C_in)`` is skinny when
    ``C_in`` is small, fold's has inner dimension ``C_out``. At stride 2,
    0.39–0.57 (fold skips the zeros of the upsampled ``dZ``). With PyTorch
    tensors fold was faster or within 4 % everywhere (0.18–1.04), so every
    library but NumPy keeps "fold". The rule picked the faster method in 46
    of 52 NumPy cases, and one at most 10 % slower in the others.
    """
    if input_grad != "auto":
        return input_grad
    numpy = array_api_compat.is_numpy_namespace(xp)
    s1 = tuple(stride) == (1, 1)
    return "correlate" if numpy and s1 and 2 * int(c_in) >= int(c_out) else "fold"


# ------------------------------------------ NumPy: a block of images at a time
# The bench's window matrix (64·28·28 × 144 float32, 29 MB) is far beyond the
# cache, and OpenBLAS runs its narrow products (C_out = 32 columns) at half its
# square rate from memory. On NumPy the layer's products therefore run over
# blocks of a few images, each block's windows (or dZ grid) built just before
# its product while they are in cache; nothing of the window matrix's size is
# made. Blocks are split into one contiguous group per thread (BLAS limited to
# one thread meanwhile: NumPy releases the GIL inside it), unless the caller
# limits BLAS to one thread (threadpoolctl), which asks for one core.
BLOCK_BYTES = 2**20
"""Scratch of one image block on NumPy (its windows, or its dZ grid and product)."""


def _map_image_groups(task, n, per_image, scratch, *, xp):
    """``[task(blocks, scratch(step)) for each thread's group]``: blocks
    ``(i0, i1)`` of ``step`` images out of ``n``, whose scratch (made by
    ``scratch(step)``) is about :data:`BLOCK_BYTES`. Every group's scratch is
    made here, in the calling thread (issue 16): a worker thread's
    allocations come from glibc's arena of that thread, 4 KB pages that a
    fresh process faults in at its first calls, where the calling thread's
    heap was made ready by :func:`xpml.utils.memory.prepare_heap`. The
    bench's layer (fwd+bwd, 64 images, 2 threads) in a fresh process: its
    first call took 2,460 page faults before, 1,840-2,230 after (the rest
    are its outputs and OpenBLAS's own packing buffers), and with the layer
    preparing the heap itself (:func:`xpml.nn._base.call_namespace`) 55-530."""
    step = max(1, min(n, BLOCK_BYTES // max(per_image, 1)))
    blocks = _image_blocks(0, n, step)
    threads = 1 if one_blas_thread(xp) else min(host_threads(xp), len(blocks))
    limits = _single_threaded_blas(xp) if threads > 1 else None
    if limits is None:
        return [task(blocks, scratch(step))]
    # the images split evenly, then each thread's into blocks: split by
    # blocks, a short last block left one thread 4 images behind the other
    # (30 against 34 of 64), ~0.45 ms of a 4 ms forward (issue 14)
    bounds = [t * n // threads for t in range(threads + 1)]
    groups = [_image_blocks(lo, hi, step) for lo, hi in zip(bounds, bounds[1:])]
    scratches = [scratch(step) for _ in groups]
    with limits:  # the calling thread runs the last group
        pool = _workers(os.getpid(), threads - 1)
        futures = [
            pool.submit(task, group, own)
            for group, own in zip(groups[:-1], scratches[:-1])
        ]
        try:
            last = task(groups[-1], scratches[-1])
        finally:  # no worker still writing (or sharing the cores) after we return
            concurrent.futures.wait(futures)
        return [f.result() for f in futures] + [last]


def _image_blocks(lo, hi, step):
    """``[(i0, i1), …]``: images ``lo … hi − 1`` in blocks of at most ``step``."""
    return [(i, min(i + step, hi)) for i in range(lo, hi, step)]


@functools.cache
def _workers(pid, count):
    """The process's ``count`` worker threads for :func:`_map_image_groups`,
    made once (a pool costs ~1 ms to start, and a layer call maps three or
    four times); keyed by process id, so a forked child starts its own."""
    return thread_pool(count, "xpml-conv")


def _window_view(Xp, kernel, stride):
    """The windows of contiguous NHWC ``Xp`` as one read-only strided view
    ``(N, H_out, W_out, k_h, k_w·C)``: for a kernel row the ``k_w·C`` values of
    a window are contiguous, whatever the stride (NumPy)."""
    (kh, kw), (sh, sw) = kernel, stride
    N, Hp, Wp, C = Xp.shape
    Ho, Wo = (Hp - kh) // sh + 1, (Wp - kw) // sw + 1
    sN, sH, sW, sC = Xp.strides
    return np.lib.stride_tricks.as_strided(
        Xp, (N, Ho, Wo, kh, kw * C), (sN, sh * sH, sw * sW, sH, sC), writeable=False
    )


def _window_sizes(X, kernel, stride, pad=((0, 0), (0, 0))):
    """``(H_out, W_out, bytes)``: the window grid of each image of NHWC ``X``
    padded by ``pad`` and one image's window matrix in bytes, as
    :class:`_BlockWindows` lays them out (without allocating its buffers)."""
    ((t, b), (l, r)), (H, Wd, C) = pad, X.shape[1:]
    (kh, kw), (sh, sw) = kernel, stride
    Ho, Wo = (t + H + b - kh) // sh + 1, (l + Wd + r - kw) // sw + 1
    return Ho, Wo, Ho * Wo * kh * kw * C * X.dtype.itemsize


class _BlockWindows:
    """One thread's buffers for the window matrix of a block of images (NumPy):
    with padding ``pad = ((top, bottom), (left, right))``, the block is copied
    into a zero-margined image buffer (in cache) whose window view was made
    once; without, the windows are read from the view of the whole input."""

    def __init__(self, step, X, kernel, stride, pad=((0, 0), (0, 0))):
        ((t, b), (l, r)), (H, Wd, C) = pad, X.shape[1:]
        self.X, self.interior = X, (slice(t, t + H), slice(l, l + Wd))
        self.P = None
        if max(t, b, l, r) > 0:
            self.P = np.zeros((step, t + H + b, l + Wd + r, C), dtype=X.dtype)
        source = np.ascontiguousarray(X) if self.P is None else self.P
        self.V = _window_view(source, kernel, stride)
        self.A = np.empty((step,) + self.V.shape[1:], dtype=X.dtype)
        self.K = kernel[0] * self.V.shape[4]
        self.bytes = self.A[0].nbytes  # one image's window matrix
        self.per = self.V.shape[1] * self.V.shape[2]  # and its windows

    def fill(self, i0, i1):
        """The window matrix of images ``i0 … i1 − 1``, in this thread's buffer."""
        n, A = i1 - i0, self.A[: i1 - i0]
        if self.P is None:
            np.copyto(A, self.V[i0:i1])
        else:
            self.P[:n, self.interior[0], self.interior[1], :] = self.X[i0:i1]
            np.copyto(A, self.V[:n])  # the margins stay zero
        return np.reshape(A, (-1, self.K))


#: the kernel-row split (:class:`_RowWindows`) is taken for a stride-1 layer
#: whose window rows of one kernel row hold at least this many values
#: (``k_w·C``) over images of at least :data:`ROW_SPLIT_MIN_PIXELS` outputs;
#: below either, its ``k_h`` products per image are too thin for their calls.
#: Measured on 2 cores, float32, 3 × 3 kernels (fwd+bwd, window matrix ->
#: split): 28², 16 -> 32 channels 23.4 -> 21.2 ms on one thread; 18², 16 -> 32
#: 9.5 -> 7.6; but 14², 32 -> 64 9.4 -> 10.4 on two threads, 32², 8 -> 8
#: 4.8 -> 5.7, 8², 16 -> 32 1.4 -> 3.2
ROW_SPLIT_MIN_VALUES = 48
ROW_SPLIT_MIN_PIXELS = 256


def _row_split_gemm(kernel, stride, channels, grid, *arrays):
    """NumPy's :class:`~xpml.linalg.Gemm` for the kernel-row split of a
    convolution over ``grid = (rows, columns)`` outputs an image, with
    ``channels`` values per pixel of the windowed array; None where it does
    not apply (a stride, thin rows, small images, mixed or other dtypes, no
    OpenBLAS of NumPy's: the window matrix then)."""
    if tuple(stride) != (1, 1) or kernel[1] * channels < ROW_SPLIT_MIN_VALUES:
        return None
    if grid[0] * grid[1] < ROW_SPLIT_MIN_PIXELS:
        return None
    dtypes = {a.dtype for a in arrays if a is not None}
    return numpy_gemm(dtypes.pop().char) if len(dtypes) == 1 else None


class _RowWindows:
    """One thread's buffers for the kernel-row split of a stride-1
    convolution (NumPy). The block of images is copied into a zero-margined
    buffer ``P`` (as in :class:`_BlockWindows`), and from it the windows along
    the width alone, ``Q[n, y, x] = P[n, y, x : x + k_w]`` (``k_w·C`` values: a
    ``k_h``-th of a window). Kernel row ``i``'s part of image ``n``'s window
    matrix is then the ``H_out·W_out`` rows of ``Q[n]`` from row ``i·W_out``
    on: a matrix BLAS reads where it lies. A product with the window matrix
    becomes ``k_h`` products summed in place (:func:`~xpml.linalg.numpy_gemm`),
    and the copy made per image is ``k_h`` times smaller (issue 14)."""

    def __init__(self, step, X, kernel, pad):
        ((t, b), (l, r)), (H, Wd, C) = pad, X.shape[1:]
        self.X, self.interior = X, (slice(t, t + H), slice(l, l + Wd))
        self.P = np.zeros((step, t + H + b, l + Wd + r, C), dtype=X.dtype)
        self.K = kernel[1] * C  # values in a row of the windows
        self.V = _row_window_view(self.P, kernel[1])
        self.Q = np.empty(self.V.shape, dtype=X.dtype)
        self._kh, self._base = kernel[0], self.Q.ctypes.data
        self._rows = (self.V.shape[1] - kernel[0] + 1) * self.V.shape[2]  # outputs

    def fill(self, i0, i1):
        """The row windows of images ``i0 … i1 − 1`` (the margins stay zero)."""
        n = i1 - i0
        self.P[:n, self.interior[0], self.interior[1], :] = self.X[i0:i1]
        np.copyto(self.Q[:n], self.V[:n])

    def kernel_row_addresses(self, m):
        """Addresses of each kernel row's window rows of the block's ``m``-th
        image (leading dimension :attr:`K`), for CBLAS."""
        start = self._base + m * self.Q.strides[0]
        return [start + i * self.Q.strides[1] for i in range(self._kh)]

    def kernel_rows(self, n):
        """``(n, k_h, H_out·W_out, K)``, read-only: kernel row ``i``'s part of
        the window matrix of each of the block's first ``n`` images, a view
        of the row windows (rows of :attr:`K` values)."""
        sN, sH, sW, sK = self.Q.strides  # kernel row i: i image rows on
        shape = (n, self._kh, self._rows, self.K)
        return np.lib.stride_tricks.as_strided(
            self.Q, shape, (sN, sH, sW, sK), writeable=False
        )


def _row_window_view(P, kw):
    """``(N, H, W − k_w + 1, k_w·C)``: the windows along the width of NHWC ``P``,
    read-only."""
    N, H, Wd, C = P.shape
    sN, sH, sW, sC = P.strides
    shape = (N, H, Wd - kw + 1, kw * C)
    return np.lib.stride_tricks.as_strided(P, shape, (sN, sH, sW, sC), writeable=False)


def _row_window_bytes(X, kw, pad):
    """One image's row windows (:class:`_RowWindows`) in bytes."""
    ((t, b), (l, r)), (H, Wd, C) = pad, X.shape[1:]
    return (t + H + b) * (l + Wd + r - kw + 1) * kw * C * X.dtype.itemsize


def _conv_forward_rows(X, W, b, pad, gemm, *, xp):
    """:func:`conv_forward` at stride 1 by kernel rows (:class:`_RowWindows`):
    each image's output is ``k_h`` products with its row windows summed in
    place, the bias written first."""
    (kh, kw, C, Co), N = W.shape, X.shape[0]
    Wm = np.ascontiguousarray(np.reshape(W, (kh, kw * C, Co)))
    Ho, Wo, _ = _window_sizes(X, (kh, kw), (1, 1), pad)
    rows, size = Ho * Wo, X.dtype.itemsize
    Z = np.empty((N * rows, Co), dtype=X.dtype)
    w0, z0 = Wm.ctypes.data, Z.ctypes.data

    cblas, order, plain = gemm.cblas, CBLAS_ROW_MAJOR, CBLAS_NO_TRANS
    betas = [0.0 if b is None else 1.0] + [1.0] * (kh - 1)  # the bias first

    def task(blocks, windows):
        K = windows.K
        Wi = [w0 + i * K * Co * size for i in range(kh)]
        pieces = gemm.row_pieces(rows, Co, K)
        for i0, i1 in blocks:
            windows.fill(i0, i1)
            if b is not None:
                Z[i0 * rows : i1 * rows] = b
            for m in range(i1 - i0):
                out = z0 + (i0 + m) * rows * Co * size
                A_rows = windows.kernel_row_addresses(m)
                for r0, r in pieces:  # Z += A_i W_i, a piece of rows at a time
                    Zr = out + r0 * Co * size
                    for i, A in enumerate(A_rows):
                        args = (r, Co, K, 1.0, A + r0 * K * size, K, Wi[i], Co)
                        cblas(order, plain, plain, *args, betas[i], Zr, Co)

    scratch = functools.partial(_RowWindows, X=X, kernel=(kh, kw), pad=pad)
    _map_image_groups(task, N, _row_window_bytes(X, kw, pad), scratch, xp=xp)
    return np.reshape(Z, (N, Ho, Wo, Co))


def _row_groups(pieces):
    """``[(start, size, count), …]``: runs of consecutive pieces of rows
    (``Gemm.row_pieces``) of one size, so that each run is one batch of
    products (NumPy's ``matmul`` over a stack: one call, which releases the
    GIL once, where a call per product took it back every ~12 µs and two
    threads waited on each other for it -- the ``dW`` products of a block of
    six of the bench's images, one block a thread: 873 µs against 415; issue
    14)."""
    groups = []
    for lo, size in pieces:
        if groups and groups[-1][1] == size:
            groups[-1][2] += 1
        else:
            groups.append([lo, size, 1])
    return [tuple(g) for g in groups]


def _summed_products(A, Wb, T, out, count):
    """``out = Σ_i A_i Wb_i`` over the ``k_h`` kernel rows, for ``count``
    pieces of rows at once: ``A`` ``(k_h, count·size, K)`` (one image's
    kernel-row windows), ``Wb`` ``(k_h, 1, K, n)``, ``out`` ``(count, size,
    n)``; ``T`` is scratch of at least ``(k_h, count·size, n)``."""
    kh, rows_, K = A.shape
    size = rows_ // count
    T = np.reshape(T[:, :rows_], (kh, count, size, out.shape[-1]))
    np.matmul(np.reshape(A, (kh, count, size, K)), Wb, out=T)
    np.sum(T, axis=0, out=out)


def _backward_s1_rows(X, dZ, W, pad, gemm, *, xp):
    """``(dX, dW)`` of :func:`conv_backward_s1` ("correlate") by kernel rows:
    the row windows ``B_i`` of the padded ``dZ`` give ``dX = Σ_i B_i W_rot,i``
    per image and ``dW_rot,iᵀ = Σ B_iᵀ X`` over a block's images at once,
    a piece of rows at a time (:func:`_row_groups`)."""
    (kh, kw, Ci, Co), (N, H, Wd, _) = W.shape, X.shape
    W_rot = np.flip(W, axis=(0, 1)).swapaxes(2, 3)  # (k_h, k_w, C_out, C_in)
    W_rot = np.reshape(W_rot, (kh, 1, kw * Co, Ci))
    Xr = np.reshape(np.ascontiguousarray(X), (N, H * Wd, Ci))
    dX = np.empty(Xr.shape, dtype=X.dtype)
    rows, K = H * Wd, kw * Co
    groups = _row_groups(gemm.row_pieces(rows, Ci, K))
    most = max(count for _, _, count in groups)

    def scratch(step):
        windows = _RowWindows(step, dZ, (kh, kw), pad)
        T = np.empty((kh, rows, Ci), dtype=X.dtype)  # dX's k_h products
        P = np.empty((step, kh, most, K, Ci), dtype=X.dtype)  # dW's products
        return windows, T, P, np.zeros((kh, K, Ci), dtype=X.dtype)

    def task(blocks, own):
        windows, T, P, G = own  # G: this thread's dW_rotᵀ
        for i0, i1 in blocks:
            n = i1 - i0
            windows.fill(i0, i1)
            B = windows.kernel_rows(n)
            for m in range(n):  # dX = Σ_i B_i W_rot,i
                for lo, size, count in groups:
                    hi = lo + size * count
                    out = np.reshape(dX[i0 + m, lo:hi], (count, size, Ci))
                    _summed_products(B[m, :, lo:hi], W_rot, T, out, count)
            for lo, size, count in groups:  # G_i += Σ B_iᵀ X, the block's images
                hi = lo + size * count
                Bt = np.reshape(B[:, :, lo:hi], (n, kh, count, size, K))
                Xt = np.reshape(Xr[i0:i1, lo:hi], (n, 1, count, size, Ci))
                Pt = P[:n, :, :count]
                np.matmul(np.swapaxes(Bt, -1, -2), Xt, out=Pt)
                G += np.sum(Pt, axis=(0, 2))
        return G

    parts = _map_image_groups(task, N, _row_window_bytes(dZ, kw, pad), scratch, xp=xp)
    G = np.reshape(sum(parts[1:], parts[0]), (kh, kw, Co, Ci))
    dW = np.flip(G, axis=(0, 1)).swapaxes(2, 3)
    return np.reshape(dX, X.shape), np.ascontiguousarray(dW)


def _both_sides(padding):
    """``(ph, pw)`` as ``((ph, ph), (pw, pw))``."""
    return tuple((p, p) for p in padding)


def _forward_example():
    rng = np.random.default_rng(0)
    X, W, b = (
        rng.standard_normal((5, 7, 6, 3)),
        rng.standard_normal((3, 2, 3, 4)),
        rng.standard_normal(4),
    )
    return (X, W, b, (2, 1), (1, 0)), {"xp": None}


@portable("nn.conv_forward")
def _conv_forward_portable(X, W, b, /, stride, padding, *, xp):
    return conv2d(X, W, b, stride=stride, padding=padding, xp=xp)[0]


@fast_path("nn.conv_forward", "numpy", example=_forward_example)
def _conv_forward_numpy(X, W, b, /, stride, padding, *, xp):
    kernel, Co = W.shape[:2], W.shape[3]
    pad = _both_sides(padding)
    Ho, Wo, per_image = _window_sizes(X, kernel, stride, pad)
    gemm = _row_split_gemm(kernel, stride, X.shape[3], (Ho, Wo), X, W, b)
    if gemm is not None:
        return _conv_forward_rows(X, W, b, pad, gemm, xp=xp)
    Wm = np.reshape(W, (-1, Co))
    per = Ho * Wo
    Z = np.empty((X.shape[0] * per, Co), dtype=np.result_type(X, W))
    in_place = b is not None and b.dtype == Z.dtype
    if in_place:
        b_row = np.reshape(np.broadcast_to(b, (Wo, Co)), (-1,))

    def task(blocks, windows):
        for i0, i1 in blocks:
            Zb = np.matmul(windows.fill(i0, i1), Wm, out=Z[i0 * per : i1 * per])
            if in_place:  # along rows of W_out·C_out (long runs), in cache
                Zb = np.reshape(Zb, (-1, b_row.shape[0]))
                Zb += b_row

    scratch = functools.partial(
        _BlockWindows, X=X, kernel=kernel, stride=stride, pad=pad
    )
    _map_image_groups(task, X.shape[0], per_image, scratch, xp=xp)
    if b is not None and not in_place:
        Z = Z + b
    return np.reshape(Z, (X.shape[0], Ho, Wo, Co))


def conv_forward(X, W, b=None, /, *, stride=(1, 1), padding=(0, 0), xp):
    """The output of :func:`conv2d` alone (its window matrix is not kept): on
    NumPy a block of images at a time, elsewhere through :func:`conv2d`."""
    return dispatch("nn.conv_forward", xp)(X, W, b, stride, padding, xp=xp)


def _weight_grad_example():
    rng = np.random.default_rng(1)
    X, dZ = rng.standard_normal((5, 7, 6, 3)), rng.standard_normal((5, 4, 5, 4))
    return (X, dZ, (3, 2), (2, 1), (1, 0)), {"xp": None}


@portable("nn.conv_weight_grad")
def _weight_grad_portable(X, dZ, /, kernel, stride, padding, *, xp):
    (ph, pw), Co = padding, dZ.shape[3]
    Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp)
    A, _ = window_matrix(Xp, kernel, stride, xp=xp)
    dW = A.T @ xp.reshape(dZ, (-1, Co))
    return xp.reshape(dW, (kernel[0], kernel[1], X.shape[3], Co))


@fast_path("nn.conv_weight_grad", "numpy", example=_weight_grad_example)
def _weight_grad_numpy(X, dZ, /, kernel, stride, padding, *, xp):
    Co, pad = dZ.shape[3], _both_sides(padding)
    per, per_image = dZ.shape[1] * dZ.shape[2], _window_sizes(X, kernel, stride, pad)[2]
    dZm = np.reshape(dZ, (-1, Co))

    def task(blocks, windows):
        dW = 0
        for i0, i1 in blocks:
            dW = dW + windows.fill(i0, i1).T @ dZm[i0 * per : i1 * per]
        return dW

    scratch = functools.partial(
        _BlockWindows, X=X, kernel=kernel, stride=stride, pad=pad
    )
    parts = _map_image_groups(task, X.shape[0], per_image, scratch, xp=xp)
    return np.reshape(sum(parts[1:], parts[0]), (*kernel, X.shape[3], Co))


def conv_weight_grad(X, dZ, /, kernel, *, stride=(1, 1), padding=(0, 0), xp):
    """``dW = Aᵀ dZ`` of :func:`conv2d` from its input ``X`` (the window matrix
    ``A`` rebuilt; on NumPy a block of images at a time, accumulated)."""
    return dispatch("nn.conv_weight_grad", xp)(X, dZ, kernel, stride, padding, xp=xp)


# ------------------------------------------- stride 1: dX on NumPy, by blocks
# "fold": with stride 1 every kernel offset (i, j) moves a whole image by
# i·W_g + j rows of its flattened (N·H_g·W_g, C) padded grid, so a shifted window
# is a contiguous range of grid rows. One product ``W dZ_gridᵀ`` (k_h·k_w·C_in,
# rows) gives every offset's term channels-first, and each term is added onto
# the grid shifted by its offset: k_h·k_w adds of C_in long contiguous runs
# instead of short strided ones.
# "correlate": the rotated-kernel correlation as a stride-1 convolution of the
# padded dZ, whose windows are copied a block of images at a time (in cache)
# from one strided view and multiplied straight into NHWC dX, as the forward.
def _fold_geometry_s1(kernel, input_hw, padding):
    """The padded input's grid ``(H_g, W_g)`` (``dZ`` at its origin), where
    ``dX`` is read from it, and the flat row offset of each kernel offset."""
    kh, kw = kernel
    (H, Wd), (ph, pw) = input_hw, padding
    grid, crop = (H + 2 * ph, Wd + 2 * pw), (ph, pw)
    offsets = [i * grid[1] + j for i in range(kh) for j in range(kw)]
    return grid, crop, offsets


def _stride1_example():
    rng = np.random.default_rng(0)
    dZ = rng.standard_normal((2, 5, 4, 3))  # 6×5 input, 3×2 kernel, padding (1, 0)
    W = rng.standard_normal((3, 2, 2, 3))
    return (dZ, W, (6, 5), (1, 0)), {"xp": None}


def _stride1_correlate_example():
    args, kw = _stride1_example()
    return args, {**kw, "method": "correlate", "work": Workspace()}


@portable("nn.conv_input_grad_s1")
def _input_grad_s1_portable(
    dZ, W, /, input_hw, padding, *, xp, method="fold", work=None
):
    general = _fold_windows if method == "fold" else _correlate_windows
    return general(dZ, W, input_hw, (1, 1), padding, xp=xp, work=work)


def _shifted_terms(cols, kernel, grid_w, rows):
    """The view ``S (k_h, k_w, C_in, rows)`` with ``S[i, j, c, p]`` the term of
    offset ``(i, j)`` that lands on grid row ``p``: ``cols[(i, j, c), p − o_ij]``
    with ``o_ij = i·W_g + j``, for a ``cols`` whose rows start after ``max o``
    zeros (and end in zeros). Offsets are linear in ``(i, j)``, so this is one
    strided view and the fold is its sum over ``(i, j)``."""
    (kh, kw), Lc = kernel, cols.shape[1]
    Ci, item = cols.shape[0] // (kh * kw), cols.itemsize
    o_max = (kh - 1) * grid_w + kw - 1
    strides = ((kw * Ci * Lc - grid_w) * item, (Ci * Lc - 1) * item, Lc * item, item)
    return np.lib.stride_tricks.as_strided(
        cols[:, o_max:], (kh, kw, Ci, rows), strides, writeable=False
    )


def _grid_block(dZ, Wm, bufs, geometry, out):
    """``dX`` of one block of images by "fold", written channels-first into
    ``out`` ``(C_in, n, H, W)``; ``bufs`` are the thread's flat grid and
    product buffers (zero where nothing is written) and the product's shifted
    terms (:func:`_shifted_terms`, made once: as_strided costs ~40 µs)."""
    grid, crop, kernel = geometry
    n, Ho, Wo, Co = dZ.shape
    rows, o_max = n * grid[0] * grid[1], (kernel[0] - 1) * grid[1] + kernel[1] - 1
    L = rows - o_max  # grid rows that hold a term of every offset
    G = bufs[0][: rows * Co].reshape(rows, Co)
    cols = bufs[1]  # (k_h·k_w·C_in, o_max + step·cells): zero margins
    G.reshape(n, grid[0], grid[1], Co)[:, :Ho, :Wo, :] = dZ  # margins stay zero
    np.matmul(Wm, G[:L].T, out=cols[:, o_max : o_max + L])
    cols[:, o_max + L :] = 0  # past a short block's rows
    dXt = np.sum(bufs[2][..., :rows], axis=(0, 1))
    H, Wd = out.shape[2:]
    dXt = np.reshape(dXt, (-1, n) + tuple(grid))
    out[...] = dXt[:, :, crop[0] : crop[0] + H, crop[1] : crop[1] + Wd]


def _fold_s1_numpy(dZ, W, input_hw, padding, *, xp, X=None):
    """``(dX, dW)`` by "fold", ``dW`` (from ``X``'s windows, in the same image
    blocks) only when ``X`` is given, else None."""
    # a block of images at a time (their grids and products stay in cache), the
    # blocks split among threads (see _map_image_groups)
    grid, crop, offsets = _fold_geometry_s1(W.shape[:2], input_hw, padding)
    kh, kw, Ci, Co = W.shape
    N, (H, Wd), dtype = dZ.shape[0], input_hw, np.result_type(dZ, W)
    Wm, dZm = np.reshape(W, (-1, Co)), np.reshape(dZ, (-1, Co))
    per = dZ.shape[1] * dZ.shape[2]  # windows of one image
    cells = grid[0] * grid[1]
    dXt = np.empty((Ci, N, H, Wd), dtype=dtype)
    geometry, pad = (grid, crop, (kh, kw)), _both_sides(padding)

    def scratch(step):
        cols = np.zeros((Wm.shape[0], offsets[-1] + step * cells), dtype=dtype)
        terms = _shifted_terms(cols, (kh, kw), grid[1], step * cells)
        bufs = (np.zeros(step * cells * Co, dtype=dtype), cols, terms)
        windows = None if X is None else _BlockWindows(step, X, (kh, kw), (1, 1), pad)
        return bufs, windows

    def task(blocks, own):
        bufs, windows = own
        dW = 0
        for i0, i1 in blocks:
            if windows is not None:  # dZ's block is in cache for both
                dW = dW + windows.fill(i0, i1).T @ dZm[i0 * per : i1 * per]
            _grid_block(dZ[i0:i1], Wm, bufs, geometry, dXt[:, i0:i1])
        return dW

    per_image = cells * (Co + Wm.shape[0] + Ci) * np.dtype(dtype).itemsize
    parts = _map_image_groups(task, N, per_image, scratch, xp=xp)
    dX = np.transpose(dXt, (1, 2, 3, 0))  # NHWC view
    if X is None:
        return dX, None
    return dX, np.reshape(sum(parts[1:], parts[0]), W.shape)


def _correlate_s1_numpy(dZ, W, input_hw, padding, *, xp):
    kh, kw, Ci, Co = W.shape
    N, (H, Wd) = dZ.shape[0], input_hw
    pad = _correlate_pad(dZ.shape[1:3], (kh, kw), input_hw, padding)
    W_rot = np.reshape(np.swapaxes(np.flip(W, axis=(0, 1)), 2, 3), (-1, Ci))
    dX = np.empty((N * H * Wd, Ci), dtype=np.result_type(dZ, W))
    per = H * Wd

    def task(blocks, windows):
        for i0, i1 in blocks:
            np.matmul(windows.fill(i0, i1), W_rot, out=dX[i0 * per : i1 * per])

    scratch = functools.partial(
        _BlockWindows, X=dZ, kernel=(kh, kw), stride=(1, 1), pad=pad
    )
    per_image = _window_sizes(dZ, (kh, kw), (1, 1), pad)[2]
    _map_image_groups(task, N, per_image, scratch, xp=xp)
    return np.reshape(dX, (N, H, Wd, Ci))


def _correlate_pad(out_hw, kernel, input_hw, padding):
    """How stride-1 ``dZ`` is padded for the correlation: ``k − 1 − pad`` on
    top and left, and what makes the windows cover the input on the far side."""
    return tuple(
        (k - 1 - p, n + k - 1 - (k - 1 - p) - m)
        for m, k, n, p in zip(out_hw, kernel, input_hw, padding, strict=True)
    )


@fast_path("nn.conv_input_grad_s1", "numpy", example=_stride1_example)
@fast_path("nn.conv_input_grad_s1", "numpy", example=_stride1_correlate_example)
def _input_grad_s1_numpy(dZ, W, /, input_hw, padding, *, xp, method="fold", work=None):
    if method == "fold":
        return _fold_s1_numpy(dZ, W, input_hw, padding, xp=xp)[0]
    pad = _correlate_pad(dZ.shape[1:3], W.shape[:2], input_hw, padding)
    if min(min(pad)) < 0:  # a crop of dZ rather than a pad: the general path
        return _input_grad_s1_portable(
            dZ, W, input_hw, padding, xp=xp, method=method, work=work
        )
    return _correlate_s1_numpy(dZ, W, input_hw, padding, xp=xp)


def input_grad_stride1(dZ, W, /, input_hw, padding, *, xp, method="fold", work=None):
    """``dX`` of a stride-1 convolution by ``method`` ("fold" or "correlate"): on
    NumPy by blocks (see above), elsewhere through the window matrix (with
    ``work``, in its buffer)."""
    return dispatch("nn.conv_input_grad_s1", xp)(
        dZ, W, input_hw, padding, xp=xp, method=method, work=work
    )


# ------------------------- stride 1, "correlate": dX and dW from one window copy
# The padded dZ's windows B (rows (n, y, x) of the input, columns (i', j', o))
# give dX = B W_rot, and also dW: with i' = k_h − 1 − i,
# ``dW[i, j, c, o] = Σ_{n,y,x} X[n, y, x, c] B[(n, y, x), (i', j', o)]``, i.e.
# ``Xᵀ B`` read back flipped. On NumPy both products run on each block's B
# while it is in cache, so the backward copies one window matrix, not two.
def _backward_s1_example():
    rng = np.random.default_rng(2)
    X, dZ = rng.standard_normal((3, 6, 5, 2)), rng.standard_normal((3, 6, 4, 4))
    return (X, dZ, rng.standard_normal((3, 4, 2, 4)), (1, 1)), {"xp": None}


def _backward_s1_fold_example():
    args, kw = _backward_s1_example()
    return args, {**kw, "method": "fold"}


@portable("nn.conv_backward_s1")
def _backward_s1_portable(X, dZ, W, /, padding, *, xp, method="correlate"):
    stride, kernel = (1, 1), W.shape[:2]
    dW = conv_weight_grad(X, dZ, kernel, stride=stride, padding=padding, xp=xp)
    dX = INPUT_GRAD[method](dZ, W, X.shape[1:3], stride, padding, xp=xp)
    return dX, dW


@fast_path("nn.conv_backward_s1", "numpy", example=_backward_s1_example)
@fast_path("nn.conv_backward_s1", "numpy", example=_backward_s1_fold_example)
def _backward_s1_numpy(X, dZ, W, /, padding, *, xp, method="correlate"):
    if method == "fold":
        return _fold_s1_numpy(dZ, W, X.shape[1:3], padding, xp=xp, X=X)
    (kh, kw, Ci, Co), (N, H, Wd, _) = W.shape, X.shape
    pad = _correlate_pad(dZ.shape[1:3], (kh, kw), (H, Wd), padding)
    if min(min(pad)) < 0 or not X.dtype == dZ.dtype == W.dtype:
        return _backward_s1_portable(X, dZ, W, padding, xp=xp)  # apart
    gemm = _row_split_gemm((kh, kw), (1, 1), Co, (H, Wd), X, dZ, W)
    if gemm is not None:
        return _backward_s1_rows(X, dZ, W, pad, gemm, xp=xp)
    W_rot = np.reshape(np.swapaxes(np.flip(W, axis=(0, 1)), 2, 3), (-1, Ci))
    Xm = np.reshape(np.ascontiguousarray(X), (-1, Ci))
    dX, per = np.empty_like(Xm), H * Wd

    def task(blocks, windows):
        dW_rot = 0
        for i0, i1 in blocks:
            B = windows.fill(i0, i1)
            np.matmul(B, W_rot, out=dX[i0 * per : i1 * per])
            dW_rot = dW_rot + Xm[i0 * per : i1 * per].T @ B  # (C_in, k_h·k_w·C_out)
        return dW_rot

    scratch = functools.partial(
        _BlockWindows, X=dZ, kernel=(kh, kw), stride=(1, 1), pad=pad
    )
    per_image = _window_sizes(dZ, (kh, kw), (1, 1), pad)[2]
    parts = _map_image_groups(task, N, per_image, scratch, xp=xp)
    dW_rot = np.reshape(sum(parts[1:], parts[0]), (Ci, kh, kw, Co))
    dW = np.transpose(np.flip(dW_rot, axis=(1, 2)), (1, 2, 0, 3))
    return np.reshape(dX, X.shape), np.ascontiguousarray(dW)


def conv_backward_s1(X, dZ, W, /, padding, *, xp, method="correlate"):
    """``(dX, dW)`` of a stride-1 convolution of ``X``, ``dX`` by ``method``. On
    NumPy in one pass over image blocks: "correlate" takes both from each
    block's windows of the padded ``dZ`` (see above), "fold" forms ``dW`` from
    the block's input windows beside its fold; elsewhere by
    :func:`conv_weight_grad` and :data:`INPUT_GRAD`."""
    return dispatch("nn.conv_backward_s1", xp)(X, dZ, W, padding, xp=xp, method=method)


# -------------------------------------------------------------------- layers
class Conv2D(Layer):
    """2-D convolution of NHWC input as one contraction over the window tensor.

    Parameters
    ----------
    out_channels : int
    kernel_size : int or (int, int)
    stride : int or (int, int), default=1
    padding : int or (int, int), default=0
        Zeros added on each side of the height and width.
    in_channels : int, optional
        Inferred at the first forward when None.
    init : {"he", "xavier", ...} or callable, default="he"
        Initialiser of the weights (fan-in ``k_h k_w C_in``); the bias starts at 0.
    input_grad : {"auto", "fold", "correlate"}, default="auto"
        How ``backward`` computes ``dX``: scattering ``W dZ`` back onto the input
        windows ("fold", col2im: with a stride past 1 it skips the zeros that
        "correlate" multiplies), or correlating the stride-upsampled, padded
        ``dZ`` with the rotated kernel ("correlate", ALGORITHMS.md §0.3; ``dW``
        comes from the same windows). "auto" takes "correlate" on NumPy with
        stride 1 when ``2 C_in ≥ C_out`` and "fold" otherwise, the faster of
        the two where measured (:func:`choose_input_grad`). Both equal PyTorch
        autograd to rounding (tested over the same grid).
    random_state : int, Generator or None
        Seed used when the layer is built on its own (a Sequential passes its own).

    Attributes
    ----------
    params : dict
        ``"W"`` (k_h, k_w, C_in, C_out) and ``"b"`` (C_out,).
    grads : dict
        Same keys and shapes.

    Notes
    -----
    ``Z[n,h,w,o] = Σᵢⱼc cols[n,h,w,i,j,c] W[i,j,c,o] + b[o]`` with
    ``cols[n,h,w,i,j,c] = X_pad[n, h·s_h + i, w·s_w + j, c]`` and
    ``H_out = ⌊(H + 2p − k)/s⌋ + 1``.

    Examples
    --------
    >>> import numpy as np
    >>> conv = Conv2D(4, 3, padding=1, random_state=0)
    >>> Z = conv.forward(np.ones((2, 5, 6, 3)))
    >>> Z.shape, conv.params["W"].shape
    ((2, 5, 6, 4), (3, 3, 3, 4))
    >>> conv.backward(np.ones_like(Z)).shape
    (2, 5, 6, 3)
    """

    _has_params = True

    def __init__(
        self,
        out_channels,
        kernel_size,
        stride=1,
        padding=0,
        *,
        in_channels=None,
        init="he",
        input_grad="auto",
        random_state=None,
    ):
        super().__init__()
        self.input_grad = input_grad
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.in_channels = in_channels
        self.init = init
        self.random_state = random_state

    def _geometry(self):
        return (
            pair(self.kernel_size, "kernel_size", minimum=1),
            pair(self.stride, "stride", minimum=1),
            pair(self.padding, "padding", minimum=0),
        )

    def _input_grad(self):
        if self.input_grad not in INPUT_GRAD_CHOICES:
            raise ValueError(
                f"input_grad must be one of {sorted(INPUT_GRAD_CHOICES)}; got "
                f"{self.input_grad!r}"
            )
        return self.input_grad

    def _init_params(self, input_shape, rng):
        import numpy as np

        if len(input_shape) != 3:
            raise ValueError(
                f"Conv2D expects NHWC input (n, height, width, channels); got "
                f"samples of shape {input_shape}"
            )
        c_in = input_shape[2]
        if self.in_channels is not None and c_in != self.in_channels:
            raise ValueError(
                f"Conv2D was given in_channels={self.in_channels} but the input "
                f"has {c_in} channels"
            )
        (kh, kw), _, _ = self._geometry()
        shape = (kh, kw, c_in, self.out_channels)
        W = get_initialiser(self.init)(
            shape, kh * kw * c_in, kh * kw * self.out_channels, rng
        )
        return {"W": W, "b": np.zeros(self.out_channels)}

    def output_shape(self, input_shape):
        (kh, kw), (sh, sw), (ph, pw) = self._geometry()
        H, W, _ = input_shape
        return (out_size(H, kh, sh, ph), out_size(W, kw, sw, pw), self.out_channels)

    def _workspace(self, X):
        """The layer's scratch buffer (see :class:`Workspace`) for ``dX`` with a
        stride past 1, reserved for ``W dZᵀ`` ("fold") or the padded ``dZ``'s
        windows of as many images as the forward's window matrix holds
        ("correlate"); stride-1 ``dX`` and the forward's windows work in image
        blocks on NumPy and do not use it."""
        (kh, kw), (sh, sw), (ph, pw) = self._geometry()
        N, H, Wd, Ci = X.shape
        rows = N * out_size(H, kh, sh, ph) * out_size(Wd, kw, sw, pw)
        work = getattr(self, "_cache_work", None) or Workspace()
        work.reserve = rows * kh * kw * max(Ci, self.out_channels)
        self._cache_work = work
        return work

    def forward(self, X):
        self._input_grad()  # fail before any work on a bad option
        self._ensure_built(X)
        xp = call_namespace(X)
        _, stride, padding = self._geometry()
        W, b = self.params["W"], self.params["b"]
        self._cache = X  # dW rebuilds the windows
        if X.shape[0] == 0:  # an empty batch: no windows to make
            shape = (0, *self.output_shape(tuple(X.shape[1:])))
            return xp.zeros(shape, dtype=xp.result_type(X, W), device=array_device(X))
        return conv_forward(X, W, b, stride=stride, padding=padding, xp=xp)

    def backward(self, dZ):
        xp = call_namespace(dZ)
        X = self._cache
        _, stride, padding = self._geometry()
        W = self.params["W"]
        c_in, c_out = int(X.shape[3]), int(W.shape[3])
        method = choose_input_grad(self._input_grad(), xp, stride, c_in, c_out)
        if X.shape[0] == 0 or tuple(stride) != (1, 1):
            self.backward_params(dZ)
            if X.shape[0] == 0:  # an empty batch contributes nothing
                return xp.zeros(X.shape, dtype=dZ.dtype, device=array_device(dZ))
            grad, work = INPUT_GRAD[method], self._workspace(X)
            return grad(dZ, W, tuple(X.shape[1:3]), stride, padding, xp=xp, work=work)
        self.grads["b"] = bias_grad(dZ, xp=xp)
        # stride 1: dW and dX in one pass (see conv_backward_s1)
        dX, self.grads["W"] = conv_backward_s1(X, dZ, W, padding, xp=xp, method=method)
        return dX

    def backward_params(self, dZ):
        """``grads`` alone: ``dW`` from the input's windows (:func:`conv_weight_grad`)
        and the bias gradient, no ``dX``."""
        xp = call_namespace(dZ)
        X, W = self._cache, self.params["W"]
        _, stride, padding = self._geometry()
        self.grads["b"] = bias_grad(dZ, xp=xp)
        if X.shape[0] == 0:
            self.grads["W"] = xp.zeros_like(W)
            return
        where = {"stride": stride, "padding": padding, "xp": xp}
        self.grads["W"] = conv_weight_grad(X, dZ, W.shape[:2], **where)


class _Pool2D(Layer):
    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding

    def _geometry(self):
        k = pair(self.kernel_size, "kernel_size", minimum=1)
        s = k if self.stride is None else pair(self.stride, "stride", minimum=1)
        p = pair(self.padding, "padding", minimum=0)
        if p[0] > k[0] // 2 or p[1] > k[1] // 2:
            raise ValueError(
                f"padding must be at most half the kernel size; got "
                f"padding={self.padding!r} with kernel_size={self.kernel_size!r}"
            )
        return k, s, p

    def output_shape(self, input_shape):
        (kh, kw), (sh, sw), (ph, pw) = self._geometry()
        H, W, C = input_shape
        return (out_size(H, kh, sh, ph), out_size(W, kw, sw, pw), C)

    def _windows(self, X, fill, xp):
        k, s, (ph, pw) = self._geometry()
        Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp, fill=fill)
        self._cache_geometry = (k, tuple(Xp.shape[1:3]), s, (ph, pw))
        return offset_stack(Xp, k, s, xp=xp)

    def _unwindow(self, cols, xp):
        k, padded_hw, s, padding = self._cache_geometry
        return _crop(fold(cols, k, padded_hw, s, xp=xp), padding)


class MaxPool2D(_Pool2D):
    """Max pooling over ``k_h × k_w`` windows of NHWC input.

    Parameters
    ----------
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Defaults to ``kernel_size``.
    padding : int or (int, int), default=0
        Implicit ``-inf`` padding; at most half the kernel.

    Notes
    -----
    The gradient goes to the arg-max of each window; on ties it is split
    evenly among the maxima (PyTorch gives it all to one of them).

    Examples
    --------
    >>> import numpy as np
    >>> pool = MaxPool2D(2)
    >>> X = np.arange(16.0).reshape(1, 4, 4, 1)
    >>> pool.forward(X)[0, :, :, 0].tolist()
    [[5.0, 7.0], [13.0, 15.0]]
    >>> pool.backward(np.ones((1, 2, 2, 1)))[0, :, :, 0].tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        cols = self._windows(X, -float("inf"), xp)  # (k_h k_w, N, H_out, W_out, C)
        Y = xp.max(cols, axis=0)
        mask = xp.astype(cols == Y, X.dtype)
        self._cache_share = mask / xp.sum(mask, axis=0)  # ties share evenly
        return Y

    def backward(self, dY):
        xp = call_namespace(dY)
        return self._unwindow(self._cache_share * dY, xp)


class AvgPool2D(_Pool2D):
    """Average pooling over ``k_h × k_w`` windows of NHWC input.

    Parameters
    ----------
    kernel_size : int or (int, int)
    stride : int or (int, int), optional
        Defaults to ``kernel_size``.
    padding : int or (int, int), default=0
        Zero padding, counted in the average (PyTorch's ``count_include_pad=True``).

    Notes
    -----
    Each input in a window receives ``dY / (k_h k_w)``.

    Examples
    --------
    >>> import numpy as np
    >>> AvgPool2D(2).forward(np.arange(16.0).reshape(1, 4, 4, 1))[0, :, :, 0].tolist()
    [[2.5, 4.5], [10.5, 12.5]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        return xp.mean(self._windows(X, 0.0, xp), axis=0)

    def backward(self, dY):
        xp = call_namespace(dY)
        (kh, kw), _, _ = self._geometry()
        g = xp.broadcast_to(dY / (kh * kw), (kh * kw,) + tuple(dY.shape))
        return self._unwindow(g, xp)
