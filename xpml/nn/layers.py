"""Dense, BatchNorm1D, Flatten and the activations.

Each layer is a few lines: ``forward`` is one contraction or one elementwise
map, ``backward`` is its chain rule written out.
"""

from __future__ import annotations

from xpml.nn._base import Layer, call_namespace
from xpml.nn.init import get_initialiser
from xpml.utils._array_api import device as array_device
from xpml.utils._math import sigmoid, softmax

__all__ = [
    "Dense",
    "BatchNorm1D",
    "Flatten",
    "ReLU",
    "Sigmoid",
    "Tanh",
    "Identity",
    "Softmax",
    "sigmoid",
    "softmax",
]


class Dense(Layer):
    """Fully connected layer ``Y = X W + b``.

    Parameters
    ----------
    units : int
        Number of outputs.
    in_features : int, optional
        Number of inputs; inferred at the first forward when None.
    init : {"he", "xavier", ...} or callable, default="he"
        Initialiser of ``W`` (see :mod:`xpml.nn.init`); ``b`` starts at zero.
    random_state : int, Generator or None
        Seed used when the layer is built on its own (a Sequential passes its own).

    Attributes
    ----------
    params : dict
        ``"W"`` (in_features, units) and ``"b"`` (units,).
    grads : dict
        Gradients of the loss with respect to ``params``, same keys and shapes.

    Notes
    -----
    ``dW = Xᵀ dY``, ``db = Σₙ dY``, ``dX = dY Wᵀ``.

    Examples
    --------
    >>> import numpy as np
    >>> layer = Dense(2, random_state=0)
    >>> layer.forward(np.ones((3, 4))).shape
    (3, 2)
    >>> layer.backward(np.ones((3, 2))).shape, layer.grads["W"].shape
    ((3, 4), (4, 2))
    """

    _has_params = True

    def __init__(self, units, *, in_features=None, init="he", random_state=None):
        super().__init__()
        self.units = units
        self.in_features = in_features
        self.init = init
        self.random_state = random_state

    def _init_params(self, input_shape, rng):
        if len(input_shape) != 1:
            raise ValueError(
                f"Dense expects 2-D input (n_samples, features); got samples of "
                f"shape {input_shape}. Put a Flatten layer before it."
            )
        d = input_shape[0]
        if self.in_features is not None and d != self.in_features:
            raise ValueError(
                f"Dense was given in_features={self.in_features} but the input "
                f"has {d} features"
            )
        W = get_initialiser(self.init)((d, self.units), d, self.units, rng)
        return {"W": W, "b": W[0] * 0.0}

    def output_shape(self, input_shape):
        return (self.units,)

    def forward(self, X):
        self._ensure_built(X)
        self._cache_X = X
        return X @ self.params["W"] + self.params["b"]

    def backward(self, dY):
        self.backward_params(dY)
        return dY @ self.params["W"].T

    def backward_params(self, dY):
        xp = call_namespace(dY)
        X = self._cache_X
        self.grads["W"] = X.T @ dY
        self.grads["b"] = xp.sum(dY, axis=0)


class BatchNorm1D(Layer):
    """Batch normalisation over the sample axis of 2-D input.

    Training mode normalises with the batch mean and (biased) variance and
    updates the running statistics; evaluation mode uses the running ones.

    Parameters
    ----------
    num_features : int, optional
        Inferred at the first forward when None.
    momentum : float, default=0.1
        ``running = (1 - momentum) · running + momentum · batch`` (the running
        variance takes the unbiased batch variance, as in PyTorch).
    eps : float, default=1e-5

    Attributes
    ----------
    params : dict
        ``"gamma"`` and ``"beta"``, each (num_features,).
    running_mean, running_var : arrays (num_features,)

    Notes
    -----
    ``x̂ = (x − μ)/√(σ² + ε)``, ``y = γ x̂ + β``;
    ``dx = (γ / (n √(σ² + ε))) (n dy − Σdy − x̂ Σ(dy x̂))``.

    Examples
    --------
    >>> import numpy as np
    >>> bn = BatchNorm1D()
    >>> Y = bn.forward(np.array([[1.0, 2.0], [3.0, 6.0]]))
    >>> np.round(Y, 4).tolist()
    [[-1.0, -1.0], [1.0, 1.0]]
    >>> bn.running_mean.tolist()
    [0.2, 0.4]
    """

    _has_params = True

    def __init__(self, num_features=None, *, momentum=0.1, eps=1e-5):
        super().__init__()
        self.num_features = num_features
        self.momentum = momentum
        self.eps = eps

    def build(self, input_shape, *, xp, device=None, dtype=None, rng=None):
        super().build(input_shape, xp=xp, device=device, dtype=dtype, rng=rng)
        d = int(input_shape[0])
        dtype = xp.float64 if dtype is None else dtype
        self.running_mean = xp.zeros((d,), dtype=dtype, device=device)
        self.running_var = xp.ones((d,), dtype=dtype, device=device)
        return self

    def _init_params(self, input_shape, rng):
        import numpy as np

        if len(input_shape) != 1:
            raise ValueError(
                f"BatchNorm1D expects 2-D input (n_samples, features); got samples "
                f"of shape {input_shape}"
            )
        d = input_shape[0]
        if self.num_features is not None and d != self.num_features:
            raise ValueError(
                f"BatchNorm1D was given num_features={self.num_features} but the "
                f"input has {d} features"
            )
        return {"gamma": np.ones(d), "beta": np.zeros(d)}

    def forward(self, X):
        self._ensure_built(X)
        xp = call_namespace(X)
        if self.training:
            n = X.shape[0]
            if n == 0:
                raise ValueError(
                    "BatchNorm1D needs at least one sample per batch in training "
                    "mode (the batch mean of none is undefined); got an empty batch"
                )
            mean = xp.mean(X, axis=0)
            var = xp.mean((X - mean) ** 2, axis=0)
            m = self.momentum
            unbiased = var * (n / (n - 1)) if n > 1 else var
            self.running_mean = (1 - m) * self.running_mean + m * mean
            self.running_var = (1 - m) * self.running_var + m * unbiased
        else:
            mean, var = self.running_mean, self.running_var
        inv_std = 1.0 / xp.sqrt(var + self.eps)
        Xhat = (X - mean) * inv_std
        self._cache = (Xhat, inv_std, self.training)
        return self.params["gamma"] * Xhat + self.params["beta"]

    def backward(self, dY):
        xp = call_namespace(dY)
        Xhat, inv_std, training = self._cache
        self.grads["gamma"] = xp.sum(dY * Xhat, axis=0)
        self.grads["beta"] = xp.sum(dY, axis=0)
        dXhat = dY * self.params["gamma"]
        if not training:
            return dXhat * inv_std
        n = dY.shape[0]
        return (inv_std / n) * (
            n * dXhat - xp.sum(dXhat, axis=0) - Xhat * xp.sum(dXhat * Xhat, axis=0)
        )


class Flatten(Layer):
    """Reshape ``(N, ...)`` to ``(N, prod(...))``.

    Examples
    --------
    >>> import numpy as np
    >>> Flatten().forward(np.zeros((2, 3, 4, 5))).shape
    (2, 60)
    """

    def output_shape(self, input_shape):
        size = 1
        for s in input_shape:
            size *= int(s)
        return (size,)

    def forward(self, X):
        xp = call_namespace(X)
        self._cache_shape = tuple(X.shape)
        # the size spelled out: ``-1`` is ambiguous for an empty batch
        return xp.reshape(X, (X.shape[0], *self.output_shape(X.shape[1:])))

    def backward(self, dY):
        xp = call_namespace(dY)
        return xp.reshape(dY, self._cache_shape)


def _zero(X, xp):
    """A 0-d zero of ``X``'s dtype and device, broadcast by ``where`` (no
    array of ``X``'s size made and filled for it)."""
    return xp.zeros((), dtype=X.dtype, device=array_device(X))


class ReLU(Layer):
    """``max(x, 0)``; the gradient at 0 is taken as 0 (as in PyTorch).

    Examples
    --------
    >>> import numpy as np
    >>> ReLU().forward(np.array([[-1.0, 2.0]])).tolist()
    [[0.0, 2.0]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        self._cache_mask = X > 0
        return xp.where(self._cache_mask, X, _zero(X, xp))

    def backward(self, dY):
        xp = call_namespace(dY)
        return xp.where(self._cache_mask, dY, _zero(dY, xp))


class Sigmoid(Layer):
    """``σ(x) = 1 / (1 + e⁻ˣ)``; ``dσ = σ (1 − σ)``.

    Examples
    --------
    >>> import numpy as np
    >>> Sigmoid().forward(np.array([[0.0]])).tolist()
    [[0.5]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        self._cache_Y = sigmoid(X, xp=xp)
        return self._cache_Y

    def backward(self, dY):
        Y = self._cache_Y
        return dY * Y * (1.0 - Y)


class Tanh(Layer):
    """``tanh(x)``; ``d tanh = 1 − tanh²``.

    Examples
    --------
    >>> import numpy as np
    >>> Tanh().forward(np.array([[0.0]])).tolist()
    [[0.0]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        self._cache_Y = xp.tanh(X)
        return self._cache_Y

    def backward(self, dY):
        Y = self._cache_Y
        return dY * (1.0 - Y * Y)


class Identity(Layer):
    """The linear activation ``f(x) = x``.

    Examples
    --------
    >>> import numpy as np
    >>> Identity().forward(np.array([[3.0]])).tolist()
    [[3.0]]
    """

    def forward(self, X):
        return X

    def backward(self, dY):
        return dY


class Softmax(Layer):
    """Row-wise softmax ``sᵢ = exp(xᵢ) / Σⱼ exp(xⱼ)``.

    For training a classifier use logits and the fused
    :class:`~xpml.nn.losses.SoftmaxCrossEntropy` loss instead (stabler).

    Notes
    -----
    ``dx = s ⊙ (dy − Σⱼ dyⱼ sⱼ)``.

    Examples
    --------
    >>> import numpy as np
    >>> Softmax().forward(np.array([[0.0, 0.0]])).tolist()
    [[0.5, 0.5]]
    """

    def forward(self, X):
        xp = call_namespace(X)
        self._cache_Y = softmax(X, xp=xp)
        return self._cache_Y

    def backward(self, dY):
        xp = call_namespace(dY)
        S = self._cache_Y
        return S * (dY - xp.sum(dY * S, axis=-1, keepdims=True))
