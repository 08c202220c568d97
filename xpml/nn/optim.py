"""Optimisers: SGD, momentum and Adam.

``step(layers)`` updates every layer's ``params`` from its ``grads``
(functionally: new arrays, nothing written in place). State (velocities,
moments) is created lazily on the first step, keyed by layer index and
parameter name.
"""

from __future__ import annotations

import array_api_compat

from xpml.base import Persistable

__all__ = ["SGD", "Momentum", "Adam", "OPTIMISERS", "get_optimiser"]


def _slots(layers):
    for i, layer in enumerate(layers):
        for key in layer.params:
            yield f"{i}/{key}", layer, key


class _Optimiser(Persistable):
    def _check(self):
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"learning_rate must be a float > 0; got {lr!r}")

    def step(self, layers):
        """Update the parameters of ``layers`` from their gradients."""
        self._check()
        if not hasattr(self, "state"):
            self.state, self.t = {}, 0
        self.t += 1
        for slot, layer, key in _slots(layers):
            layer.params[key] = self._update(slot, layer.params[key], layer.grads[key])

    def reset(self):
        """Forget the state (velocities, moments, step count)."""
        self.__dict__.pop("state", None)
        self.__dict__.pop("t", None)
        return self


class SGD(_Optimiser):
    """Plain gradient descent ``θ ← θ − η g``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.nn import Dense
    >>> layer = Dense(1, random_state=0); _ = layer.forward(np.ones((1, 1)))
    >>> layer.params["W"], layer.grads["W"] = np.array([[1.0]]), np.array([[2.0]])
    >>> layer.grads["b"] = np.array([0.0])
    >>> SGD(0.1).step([layer]); layer.params["W"].tolist()
    [[0.8]]
    """

    def __init__(self, learning_rate=0.01):
        self.learning_rate = learning_rate

    def _update(self, slot, p, g):
        return p - self.learning_rate * g


class Momentum(_Optimiser):
    """Heavy-ball momentum ``v ← μ v + g``, ``θ ← θ − η v`` (PyTorch's form).

    Examples
    --------
    >>> opt = Momentum(0.1, momentum=0.9)
    >>> opt.momentum
    0.9
    """

    def __init__(self, learning_rate=0.01, momentum=0.9):
        self.learning_rate = learning_rate
        self.momentum = momentum

    def _update(self, slot, p, g):
        v = self.state.get(slot)
        v = g if v is None else self.momentum * v + g
        self.state[slot] = v
        return p - self.learning_rate * v


class Adam(_Optimiser):
    """Adam (Kingma & Ba 2015) with bias-corrected moments.

    ``m ← β₁m + (1−β₁)g``, ``v ← β₂v + (1−β₂)g²``,
    ``θ ← θ − η m̂ / (√v̂ + ε)`` with ``m̂ = m/(1−β₁ᵗ)``, ``v̂ = v/(1−β₂ᵗ)``.

    Examples
    --------
    >>> Adam().learning_rate
    0.001
    """

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8):
        self.learning_rate = learning_rate
        self.beta1 = beta1
        self.beta2 = beta2
        self.eps = eps

    def _update(self, slot, p, g):
        xp = array_api_compat.array_namespace(p)
        b1, b2 = self.beta1, self.beta2
        m, v = self.state.get(slot, (None, None))
        m = (1 - b1) * g if m is None else b1 * m + (1 - b1) * g
        v = (1 - b2) * (g * g) if v is None else b2 * v + (1 - b2) * (g * g)
        self.state[slot] = (m, v)
        m_hat = m / (1 - b1**self.t)
        v_hat = v / (1 - b2**self.t)
        return p - self.learning_rate * m_hat / (xp.sqrt(v_hat) + self.eps)


OPTIMISERS = {"sgd": SGD, "momentum": Momentum, "adam": Adam}


def get_optimiser(optimizer, learning_rate=None):
    """An optimiser from its name (``"sgd"``, ``"momentum"``, ``"adam"``) or itself."""
    if isinstance(optimizer, _Optimiser):
        return optimizer
    if optimizer not in OPTIMISERS:
        raise ValueError(
            f"optimizer must be an optimiser object or one of "
            f"{sorted(OPTIMISERS)}; got {optimizer!r}"
        )
    cls = OPTIMISERS[optimizer]
    return cls() if learning_rate is None else cls(learning_rate=learning_rate)
