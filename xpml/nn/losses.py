"""Losses: softmax cross-entropy (fused), logistic (binary) and mean squared error.

A loss has ``forward(Z, y) -> scalar array`` (the mean over samples) and
``backward() -> dZ``, the gradient of that mean with respect to the network
output ``Z``.
"""

from __future__ import annotations

from xpml.base import Persistable
from xpml.nn._base import call_namespace
from xpml.utils._array_api import device as array_device
from xpml.utils._math import sigmoid, softmax

__all__ = ["SoftmaxCrossEntropy", "LogisticLoss", "MSELoss", "LOSSES", "get_loss"]


class _Loss(Persistable):
    def __call__(self, Z, y):
        return self.forward(Z, y)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_cache")}

    def __setstate__(self, state):
        self.__dict__.update(state)


class SoftmaxCrossEntropy(_Loss):
    """Cross-entropy of the softmax of logits ``Z (n, k)`` against class codes ``y``.

    Fused with the softmax: ``log p = Z − max Z − log Σ exp(Z − max Z)`` never
    overflows, and the gradient is simply ``(softmax(Z) − onehot(y)) / n``.

    Examples
    --------
    >>> import numpy as np
    >>> loss = SoftmaxCrossEntropy()
    >>> round(float(loss.forward(np.zeros((2, 4)), np.array([0, 3]))), 6)   # log 4
    1.386294
    >>> loss.backward().tolist()[0]
    [-0.375, 0.125, 0.125, 0.125]
    """

    def forward(self, Z, y):
        xp = call_namespace(Z)
        n, k = Z.shape
        shifted = Z - xp.max(Z, axis=1, keepdims=True)
        log_p = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
        classes = xp.arange(k, dtype=xp.int64, device=array_device(Z))
        onehot = xp.astype(
            xp.reshape(xp.astype(y, xp.int64), (-1, 1)) == classes, Z.dtype
        )
        self._cache = (xp.exp(log_p), onehot)
        return -xp.sum(onehot * log_p) / n

    def backward(self):
        P, onehot = self._cache
        return (P - onehot) / P.shape[0]

    @staticmethod
    def proba(Z, *, xp):
        return softmax(Z, xp=xp)


class LogisticLoss(_Loss):
    """Binary cross-entropy of ``sigmoid(z)`` against ``y ∈ {0, 1}``, from logits.

    ``ℓ = log(1 + e^z) − y z`` (via ``logaddexp``), gradient ``(σ(z) − y) / n``.
    ``Z`` may be ``(n,)`` or ``(n, 1)``.

    Examples
    --------
    >>> import numpy as np
    >>> loss = LogisticLoss()
    >>> round(float(loss.forward(np.zeros((2, 1)), np.array([0.0, 1.0]))), 6)   # log 2
    0.693147
    >>> loss.backward().tolist()
    [[0.25], [-0.25]]
    """

    def forward(self, Z, y):
        xp = call_namespace(Z)
        y = xp.reshape(xp.astype(y, Z.dtype), Z.shape)
        self._cache = (sigmoid(Z, xp=xp), y)
        zero = xp.zeros((), dtype=Z.dtype, device=array_device(Z))  # broadcast
        return xp.mean(xp.logaddexp(zero, Z) - y * Z)

    def backward(self):
        P, y = self._cache
        return (P - y) / P.shape[0]

    @staticmethod
    def proba(Z, *, xp):
        p = xp.reshape(sigmoid(Z, xp=xp), (-1, 1))
        return xp.concat([1.0 - p, p], axis=1)


class MSELoss(_Loss):
    """Mean squared error over all entries: ``mean((Z − y)²)``; gradient ``2 (Z − y) / Z.size``.

    Examples
    --------
    >>> import numpy as np
    >>> loss = MSELoss()
    >>> float(loss.forward(np.array([[1.0], [3.0]]), np.array([0.0, 0.0])))
    5.0
    >>> loss.backward().tolist()
    [[1.0], [3.0]]
    """

    def forward(self, Z, y):
        xp = call_namespace(Z)
        R = Z - xp.reshape(xp.astype(y, Z.dtype), Z.shape)
        self._cache = R
        return xp.mean(R * R)

    def backward(self):
        R = self._cache
        size = 1
        for s in R.shape:
            size *= int(s)
        return (2.0 / size) * R


LOSSES = {
    "cross_entropy": SoftmaxCrossEntropy,
    "logistic": LogisticLoss,
    "mse": MSELoss,
}


def get_loss(loss):
    """A loss object from its name (``"cross_entropy"``, ``"logistic"``, ``"mse"``) or itself."""
    if isinstance(loss, _Loss):
        return loss
    if loss not in LOSSES:
        raise ValueError(
            f"loss must be a loss object or one of {sorted(LOSSES)}; got {loss!r}"
        )
    return LOSSES[loss]()
