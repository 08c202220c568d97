"""Weight initialisers, drawn on the host with a NumPy Generator.

Each initialiser takes a shape, the fan-in and fan-out and a Generator and
returns a NumPy float64 array; layers move it to the device, so a seed gives
identical networks on every backend.

>>> import numpy as np
>>> W = he_normal((400, 300), 400, 300, np.random.default_rng(0))
>>> round(float(W.std() * np.sqrt(400 / 2)), 2)
1.0
"""

from __future__ import annotations

import math

__all__ = [
    "he_normal",
    "he_uniform",
    "xavier_normal",
    "xavier_uniform",
    "INITIALISERS",
    "get_initialiser",
]


def he_normal(shape, fan_in, fan_out, rng):
    """He et al. (2015): ``N(0, 2 / fan_in)``, for ReLU networks."""
    return rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)


def he_uniform(shape, fan_in, fan_out, rng):
    """He uniform: ``U(-a, a)`` with ``a = sqrt(6 / fan_in)``."""
    a = math.sqrt(6.0 / fan_in)
    return rng.uniform(-a, a, size=shape)


def xavier_normal(shape, fan_in, fan_out, rng):
    """Glorot & Bengio (2010): ``N(0, 2 / (fan_in + fan_out))``."""
    return rng.standard_normal(shape) * math.sqrt(2.0 / (fan_in + fan_out))


def xavier_uniform(shape, fan_in, fan_out, rng):
    """Glorot uniform: ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``."""
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=shape)


INITIALISERS = {
    "he": he_normal,
    "he_normal": he_normal,
    "he_uniform": he_uniform,
    "xavier": xavier_uniform,
    "glorot": xavier_uniform,
    "xavier_uniform": xavier_uniform,
    "xavier_normal": xavier_normal,
}


def get_initialiser(init):
    """The initialiser called ``init`` (or ``init`` itself when callable)."""
    if callable(init):
        return init
    if init not in INITIALISERS:
        raise ValueError(
            f"init must be a callable or one of {sorted(INITIALISERS)}; got {init!r}"
        )
    return INITIALISERS[init]
