"""Conv2D and 2-D pooling as contractions over the window tensor (NHWC).

The array API has no ``as_strided``, so the window tensor
``(N, H_out, W_out, k_h, k_w, C)`` is built by gathering the ``k_h·k_w``
strided slices of the padded input and stacking them (:func:`windows`). A
convolution is then one contraction ``einsum('nhwijc,ijco->nhwo')``, written as
a reshape and a matrix product (:func:`contract`), which is what ``einsum``
does anyway and is portable to every array-API library.

Backward (ALGORITHMS.md §0.3): ``dW`` contracts the same windows with ``dZ``;
``dX`` correlates ``dZ`` -- zero-upsampled by the stride and padded by
``k − 1 − pad`` -- with the 180°-rotated, in/out-transposed kernel; the bias
gradient sums ``dZ`` over ``n, h, w``. Pooling gradients are scattered back
window by window (:func:`fold`): max pooling routes them to the arg-max
(split evenly between ties), average pooling spreads ``1 / (k_h k_w)``.
"""

from __future__ import annotations

import array_api_compat
import array_api_extra as xpx

from xpml.nn._base import Layer, pair
from xpml.nn.init import get_initialiser

__all__ = ["Conv2D", "MaxPool2D", "AvgPool2D", "windows", "contract", "dilate_pad", "fold",
           "conv2d", "conv2d_backward"]


# ---------------------------------------------------------------- primitives
def dilate_pad(X, /, stride, pad_h, pad_w, *, xp, fill=0.0):
    """Insert ``stride − 1`` zeros between rows/columns of NHWC ``X`` and pad.

    ``pad_h = (top, bottom)`` and ``pad_w = (left, right)`` may be negative,
    which crops.
    """
    N, H, W, C = X.shape
    sh, sw = stride
    Hu, Wu = (H - 1) * sh + 1, (W - 1) * sw + 1
    (t, b), (l, r) = pad_h, pad_w
    if (sh, sw) == (1, 1) and min(t, b, l, r) >= 0 and max(t, b, l, r) == 0:
        return X
    T, L = max(t, 0), max(l, 0)
    out = xp.full((N, T + Hu + max(b, 0), L + Wu + max(r, 0), C), fill, dtype=X.dtype,
                  device=array_api_compat.device(X))
    out = xpx.at(out)[:, T:T + Hu:sh, L:L + Wu:sw, :].set(X)
    if min(t, b, l, r) < 0:
        out = out[:, max(-t, 0):out.shape[1] - max(-b, 0), max(-l, 0):out.shape[2] - max(-r, 0), :]
    return out


def out_size(n, k, s, p):
    """Output length of a window sweep: ``⌊(n + 2p − k) / s⌋ + 1``."""
    return (n + 2 * p - k) // s + 1


def windows(Xp, /, kernel, stride, *, xp):
    """The window tensor ``(N, H_out, W_out, k_h, k_w, C)`` of padded NHWC ``Xp``.

    Gathers the ``k_h·k_w`` strided slices (one per kernel offset) and stacks them.
    """
    N, Hp, Wp, C = Xp.shape
    (kh, kw), (sh, sw) = kernel, stride
    Ho, Wo = (Hp - kh) // sh + 1, (Wp - kw) // sw + 1
    slices = [Xp[:, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw, :]
              for i in range(kh) for j in range(kw)]
    return xp.reshape(xp.stack(slices, axis=3), (N, Ho, Wo, kh, kw, C))


def contract(cols, W, /, *, xp):
    """``einsum('nhwijc,ijco->nhwo', cols, W)`` as one reshape and matrix product."""
    N, Ho, Wo = cols.shape[:3]
    K = cols.shape[3] * cols.shape[4] * cols.shape[5]
    Z = xp.reshape(cols, (N * Ho * Wo, K)) @ xp.reshape(W, (K, W.shape[3]))
    return xp.reshape(Z, (N, Ho, Wo, W.shape[3]))


def fold(cols, /, padded_hw, stride, *, xp):
    """Adjoint of :func:`windows`: add each window back to where it came from.

    Returns the padded-size NHWC array ``(N, H_p, W_p, C)``.
    """
    N, Ho, Wo, kh, kw, C = cols.shape
    sh, sw = stride
    out = xp.zeros((N, padded_hw[0], padded_hw[1], C), dtype=cols.dtype,
                   device=array_api_compat.device(cols))
    for i in range(kh):
        for j in range(kw):
            out = xpx.at(out)[:, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw, :].add(
                cols[:, :, :, i, j, :])
    return out


def _crop(Xp, padding):
    ph, pw = padding
    return Xp[:, ph:Xp.shape[1] - ph, pw:Xp.shape[2] - pw, :]


def conv2d(X, W, b=None, /, *, stride=(1, 1), padding=(0, 0), xp):
    """NHWC convolution (cross-correlation) of ``X`` with ``W (k_h, k_w, C_in, C_out)``.

    Returns ``(Z, cols)``, the output and the window tensor (kept for backward).
    """
    ph, pw = padding
    Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp)
    cols = windows(Xp, W.shape[:2], stride, xp=xp)
    Z = contract(cols, W, xp=xp)
    return (Z if b is None else Z + b), cols


def conv2d_backward(dZ, cols, W, /, input_hw, *, stride=(1, 1), padding=(0, 0), xp):
    """Gradients ``(dX, dW, db)`` of :func:`conv2d` given the upstream ``dZ``."""
    N, Ho, Wo, Co = dZ.shape
    kh, kw, Ci, _ = W.shape
    K = kh * kw * Ci
    dZ2 = xp.reshape(dZ, (N * Ho * Wo, Co))
    dW = xp.reshape(xp.reshape(cols, (N * Ho * Wo, K)).T @ dZ2, W.shape)
    db = xp.sum(dZ2, axis=0)
    # dX: full correlation of the stride-dilated dZ with the rotated kernel
    (H, Wd), (sh, sw), (ph, pw) = input_hw, stride, padding
    top, left = kh - 1 - ph, kw - 1 - pw
    bottom = H + kh - 1 - top - ((Ho - 1) * sh + 1)
    right = Wd + kw - 1 - left - ((Wo - 1) * sw + 1)
    dZp = dilate_pad(dZ, (sh, sw), (top, bottom), (left, right), xp=xp)
    W_rot = xp.permute_dims(xp.flip(W, axis=(0, 1)), (0, 1, 3, 2))
    dX = contract(windows(dZp, (kh, kw), (1, 1), xp=xp), W_rot, xp=xp)
    return dX, dW, db


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

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, *, in_channels=None,
                 init="he", random_state=None):
        super().__init__()
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.in_channels = in_channels
        self.init = init
        self.random_state = random_state

    def _geometry(self):
        return (pair(self.kernel_size, "kernel_size", minimum=1),
                pair(self.stride, "stride", minimum=1),
                pair(self.padding, "padding", minimum=0))

    def _init_params(self, input_shape, rng):
        import numpy as np

        if len(input_shape) != 3:
            raise ValueError(f"Conv2D expects NHWC input (n, height, width, channels); got "
                             f"samples of shape {input_shape}")
        c_in = input_shape[2]
        if self.in_channels is not None and c_in != self.in_channels:
            raise ValueError(f"Conv2D was given in_channels={self.in_channels} but the input "
                             f"has {c_in} channels")
        (kh, kw), _, _ = self._geometry()
        shape = (kh, kw, c_in, self.out_channels)
        W = get_initialiser(self.init)(shape, kh * kw * c_in, kh * kw * self.out_channels, rng)
        return {"W": W, "b": np.zeros(self.out_channels)}

    def output_shape(self, input_shape):
        (kh, kw), (sh, sw), (ph, pw) = self._geometry()
        H, W, _ = input_shape
        return (out_size(H, kh, sh, ph), out_size(W, kw, sw, pw), self.out_channels)

    def forward(self, X):
        self._ensure_built(X)
        xp = array_api_compat.array_namespace(X)
        _, stride, padding = self._geometry()
        Z, cols = conv2d(X, self.params["W"], self.params["b"], stride=stride, padding=padding,
                         xp=xp)
        self._cache = (cols, tuple(X.shape[1:3]))
        return Z

    def backward(self, dZ):
        xp = array_api_compat.array_namespace(dZ)
        cols, input_hw = self._cache
        _, stride, padding = self._geometry()
        dX, self.grads["W"], self.grads["b"] = conv2d_backward(
            dZ, cols, self.params["W"], input_hw, stride=stride, padding=padding, xp=xp)
        return dX


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
            raise ValueError(f"padding must be at most half the kernel size; got "
                             f"padding={self.padding!r} with kernel_size={self.kernel_size!r}")
        return k, s, p

    def output_shape(self, input_shape):
        (kh, kw), (sh, sw), (ph, pw) = self._geometry()
        H, W, C = input_shape
        return (out_size(H, kh, sh, ph), out_size(W, kw, sw, pw), C)

    def _windows(self, X, fill, xp):
        k, s, (ph, pw) = self._geometry()
        Xp = dilate_pad(X, (1, 1), (ph, ph), (pw, pw), xp=xp, fill=fill)
        cols = windows(Xp, k, s, xp=xp)
        self._cache_geometry = (tuple(Xp.shape[1:3]), s, (ph, pw))
        return cols

    def _unwindow(self, cols, xp):
        padded_hw, s, padding = self._cache_geometry
        return _crop(fold(cols, padded_hw, s, xp=xp), padding)


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
        xp = array_api_compat.array_namespace(X)
        cols = self._windows(X, -float("inf"), xp)
        N, Ho, Wo, kh, kw, C = cols.shape
        flat = xp.reshape(cols, (N, Ho, Wo, kh * kw, C))
        Y = xp.max(flat, axis=3)
        mask = xp.astype(flat == Y[:, :, :, None, :], X.dtype)
        self._cache_share = mask / xp.sum(mask, axis=3, keepdims=True)
        return Y

    def backward(self, dY):
        xp = array_api_compat.array_namespace(dY)
        share = self._cache_share
        N, Ho, Wo, kk, C = share.shape
        kh, kw = pair(self.kernel_size, "kernel_size", minimum=1)
        g = xp.reshape(share * dY[:, :, :, None, :], (N, Ho, Wo, kh, kw, C))
        return self._unwindow(g, xp)


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
        xp = array_api_compat.array_namespace(X)
        cols = self._windows(X, 0.0, xp)
        return xp.mean(cols, axis=(3, 4))

    def backward(self, dY):
        xp = array_api_compat.array_namespace(dY)
        (kh, kw), _, _ = self._geometry()
        N, Ho, Wo, C = dY.shape
        g = xp.broadcast_to((dY / (kh * kw))[:, :, :, None, None, :], (N, Ho, Wo, kh, kw, C))
        return self._unwindow(g, xp)
