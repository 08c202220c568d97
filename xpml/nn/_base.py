"""The layer contract shared by every ``xpml.nn`` layer, and small helpers.

A layer is a :class:`~xpml.base.Persistable` (so it saves, loads and clones) with

* ``params`` and ``grads``: dicts of arrays under the same keys (``"W"``,
  ``"b"``, ``"gamma"``, ``"beta"``); empty for layers without parameters;
* ``forward(X)``: the output, remembering what ``backward`` needs;
* ``backward(dY) -> dX``: the chain rule, filling ``grads``;
* ``backward_params(dY)``: ``grads`` alone, without ``dX`` (for the first
  layer with parameters in training);
* ``training``: True in training mode, False in evaluation mode.

Parameters are created at the first ``forward`` (or by ``build``) in the
namespace, device and dtype of the input; random draws are made on the host
with NumPy and moved, so one seed gives the same layer on every backend.
"""

from __future__ import annotations

import numbers

import array_api_compat

from xpml.base import Persistable
from xpml.utils._array_api import device as array_device
from xpml.utils.memory import prepare_heap
from xpml.utils.validation import check_random_state

__all__ = ["Layer", "pair", "call_namespace"]


def call_namespace(*arrays):
    """The array namespace of a layer's or loss's call on ``arrays``. The
    process's first call also prepares the heap, as every estimator's does in
    :func:`xpml._backend.enter` (:func:`xpml.utils.memory.prepare_heap`)."""
    prepare_heap()
    return array_api_compat.array_namespace(*arrays)


def pair(value, name, *, minimum):
    """``value`` as a pair of ints ``(h, w)``; an int is used for both."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (int(value), int(value))
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(
            isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value
        )
    ):
        raise ValueError(f"{name} must be an int or a pair of ints; got {value!r}")
    if min(value) < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value!r}")
    return (int(value[0]), int(value[1]))


class Layer(Persistable):
    """Base class of the layers: parameter dicts, modes and lazy building."""

    _xpml_abstract = True  # a base class: xpml.load refuses to build one

    def __init__(self):
        self.params = {}
        self.grads = {}
        self.training = True

    # -- subclasses override ------------------------------------------------
    def _init_params(self, input_shape, rng):
        """NumPy arrays of the initial parameters for ``input_shape``
        (without the batch axis); {} for layers without parameters."""
        return {}

    def output_shape(self, input_shape):
        """Shape of one output sample for one input sample of ``input_shape``."""
        return tuple(input_shape)

    # -- shared machinery ---------------------------------------------------
    @property
    def built(self):
        return bool(self.params) or not self._has_params

    _has_params = False

    def build(self, input_shape, *, xp, device=None, dtype=None, rng=None):
        """Create the parameters for inputs of ``input_shape`` (no batch axis).

        ``rng`` (a NumPy Generator) defaults to the layer's ``random_state``.
        """
        if not self._has_params:
            return self
        if rng is None:
            rng = check_random_state(getattr(self, "random_state", None))
        dtype = xp.float64 if dtype is None else dtype
        host = self._init_params(tuple(int(s) for s in input_shape), rng)
        self.params = {
            k: xp.asarray(v, dtype=dtype, device=device) for k, v in host.items()
        }
        self.grads = {k: xp.zeros_like(v) for k, v in self.params.items()}
        return self

    def _ensure_built(self, X):
        if not self.built:
            xp = call_namespace(X)
            self.build(
                tuple(X.shape[1:]),
                xp=xp,
                device=array_device(X),
                dtype=X.dtype,
            )

    def train(self, mode=True):
        """Training mode (``mode=False``: evaluation mode); returns self."""
        self.training = bool(mode)
        return self

    def eval(self):
        """Evaluation mode; returns self."""
        return self.train(False)

    def __call__(self, X):
        return self.forward(X)

    def forward(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, dY):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward_params(self, dY):
        """Fill ``grads`` from ``dY`` where the input gradient is not wanted
        (training's first layer with parameters: nothing below it learns, as
        PyTorch skips the gradient of an input that does not require one).
        Layers whose ``dX`` costs work override it; this default calls
        :meth:`backward` and drops its result."""
        self.backward(dY)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_cache")}

    def __setstate__(self, state):
        self.__dict__.update(state)
