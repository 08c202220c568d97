"""Optimisers: SGD, momentum and Adam, with explicit state (as optax).

An optimiser holds only its hyperparameters. Its state is data the caller
keeps: ``state = opt.init(params)`` makes it, and
``params, state = opt.update(params, grads, state)`` returns new parameters
and a new state, writing into nothing. ``params`` and ``grads`` are lists of
dicts of arrays (one dict per layer, as ``layer.params`` / ``layer.grads``);
the state is ``{"t": steps taken, "slots": [per-layer dicts]}``, so it can be
moved between libraries, saved and compared like any other fitted value.
``opt.step(layers, state)`` is the same update applied to layers in place of
their ``params``; it returns the new state.
"""

from __future__ import annotations

from typing import Any

import array_api_compat

from xpml.base import Persistable

__all__ = ["SGD", "Momentum", "Adam", "OPTIMISERS", "get_optimiser"]

Params = list[dict[str, Any]]


class _Optimiser(Persistable):
    _n_slots = 0  # state arrays per parameter (velocity; first and second moments)

    def _check(self) -> None:
        lr = self.learning_rate
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not lr > 0:
            raise ValueError(f"learning_rate must be a float > 0; got {lr!r}")

    def init(self, params: Params) -> dict:
        """The state before the first step: zero slots shaped like ``params``."""

        def zeros(p):
            return array_api_compat.array_namespace(p).zeros_like(p)

        slots = [
            {k: tuple(zeros(p) for _ in range(self._n_slots)) for k, p in d.items()}
            for d in params
        ]
        return {"t": 0, "slots": slots}

    def update(self, params: Params, grads: Params, state: dict) -> tuple[Params, dict]:
        """One step: ``(new params, new state)``; the inputs are not modified."""
        self._check()
        t = state["t"] + 1
        new_params, new_slots = [], []
        for p_d, g_d, s_d in zip(params, grads, state["slots"], strict=True):
            pairs = {k: self._rule(p_d[k], g_d[k], s_d[k], t) for k in p_d}
            new_params.append({k: v[0] for k, v in pairs.items()})
            new_slots.append({k: v[1] for k, v in pairs.items()})
        return new_params, {"t": t, "slots": new_slots}

    def step(self, layers: list, state: dict | None = None) -> dict:
        """Update the ``params`` of ``layers`` from their ``grads``; returns the
        new state (``init`` is called when ``state`` is None)."""
        params = [dict(layer.params) for layer in layers]
        if state is None:
            state = self.init(params)
        grads = [{k: layer.grads[k] for k in layer.params} for layer in layers]
        new_params, state = self.update(params, grads, state)
        for layer, p in zip(layers, new_params, strict=True):
            layer.params = p
        return state


class SGD(_Optimiser):
    """Plain gradient descent ``θ ← θ − η g``.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.nn import Dense
    >>> layer = Dense(1, random_state=0); _ = layer.forward(np.ones((1, 1)))
    >>> layer.params["W"], layer.grads["W"] = np.array([[1.0]]), np.array([[2.0]])
    >>> layer.grads["b"] = np.array([0.0])
    >>> state = SGD(0.1).step([layer]); layer.params["W"].tolist(), state["t"]
    ([[0.8]], 1)
    """

    def __init__(self, learning_rate=0.01):
        self.learning_rate = learning_rate

    def _rule(self, p, g, slots, t):
        return p - self.learning_rate * g, slots


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

    _n_slots = 1

    def _rule(self, p, g, slots, t):
        v = self.momentum * slots[0] + g
        return p - self.learning_rate * v, (v,)


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

    _n_slots = 2

    def _rule(self, p, g, slots, t):
        xp = array_api_compat.array_namespace(p)
        b1, b2 = self.beta1, self.beta2
        m = b1 * slots[0] + (1 - b1) * g
        v = b2 * slots[1] + (1 - b2) * (g * g)
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        return p - self.learning_rate * m_hat / (xp.sqrt(v_hat) + self.eps), (m, v)


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
