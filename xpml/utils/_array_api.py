"""Backend facts in one place: devices, dtypes, library tests, the memory budget
and the dispatch of library-specific fast paths.

Algorithm code asks this module, never the arrays or namespaces directly:

* ``device(x)``: the device an array lives on (all libraries, dask included);
* ``namespace_name(xp)`` and ``is_numpy_namespace(xp)`` / ``is_cupy_namespace``
  / ``is_torch_namespace`` / ``is_strict_namespace`` / ``is_dask_namespace``:
  which library a namespace is, without substring tests on ``xp.__name__``;
* ``itemsize(dtype, xp)``, ``finfo(dtype, xp)``, ``eps(dtype, xp)``;
* ``memory_budget(override)``: the one workspace budget in bytes (default
  512 MiB, ``XPML_MEMORY_BUDGET`` in the environment overrides it);
* ``portable`` / ``fast_path`` / ``dispatch``: a fast path for one library is
  registered beside its portable twin, with an ``example`` input from which the
  test suite checks that the two agree (``tests/test_array_api.py``).

* ``LIBRARIES``: what xpml knows of each backend library (the module to
  import, the pip extra that installs it, how to recognise its arrays, copy
  them to NumPy, and spell its devices). ``xpml._backend`` reads only this.

The model is scikit-learn's ``utils/_array_api.py`` and array-api-extra: a
small public wrapper over a portable implementation. Adding a backend means one
:class:`Library` entry here and one line in the test fixture
(``tests/conftest.py``); see ``docs/DEVELOPING.md``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any

import array_api_compat

__all__ = [
    "device",
    "namespace_name",
    "is_numpy_namespace",
    "is_cupy_namespace",
    "is_torch_namespace",
    "is_strict_namespace",
    "is_dask_namespace",
    "itemsize",
    "finfo",
    "eps",
    "DEFAULT_MEMORY_BUDGET",
    "memory_budget",
    "portable",
    "fast_path",
    "dispatch",
    "registered_ops",
    "Library",
    "LIBRARIES",
    "preload_namespace",
]

# ---------------------------------------------------------------- libraries

_LIBRARIES = ("numpy", "cupy", "torch", "array_api_strict", "dask", "jax", "sparse")


def namespace_name(xp: Any) -> str:
    """The library behind namespace ``xp``: ``"numpy"``, ``"cupy"``, ``"torch"``,
    ``"array_api_strict"``, ``"dask"``, ``"jax"`` or the module's own name.

    array-api-compat's wrapped namespaces (``array_api_compat.numpy``,
    ``array_api_compat.torch``, ...) and the bare libraries give the same name.
    """
    name = getattr(xp, "__name__", "")
    if name.startswith("array_api_compat."):
        name = name[len("array_api_compat.") :]
    root = name.split(".", 1)[0]
    if root in _LIBRARIES:
        return root
    return name


def is_numpy_namespace(xp: Any) -> bool:
    """Whether ``xp`` is NumPy (bare or array-api-compat wrapped)."""
    return namespace_name(xp) == "numpy"


def is_cupy_namespace(xp: Any) -> bool:
    """Whether ``xp`` is CuPy (bare or array-api-compat wrapped)."""
    return namespace_name(xp) == "cupy"


def is_torch_namespace(xp: Any) -> bool:
    """Whether ``xp`` is PyTorch (bare or array-api-compat wrapped)."""
    return namespace_name(xp) == "torch"


def is_strict_namespace(xp: Any) -> bool:
    """Whether ``xp`` is array-api-strict."""
    return namespace_name(xp) == "array_api_strict"


def is_dask_namespace(xp: Any) -> bool:
    """Whether ``xp`` is dask.array (bare or array-api-compat wrapped)."""
    return namespace_name(xp) == "dask"


# ------------------------------------------------------------- the backends


def _numpy_device(device: Any) -> Any:
    if device not in ("cpu", None):
        raise ValueError(f"backend 'numpy' has only the device 'cpu'; got {device!r}")
    return "cpu"


def _torch_device(device: Any) -> Any:
    import torch

    return torch.device(device)


def _cupy_device(device: Any) -> Any:
    import cupy

    if isinstance(device, str):  # "cuda", "cuda:1", "1"
        tail = device.rsplit(":", 1)[-1]
        device = int(tail) if tail.isdigit() else 0
    return cupy.cuda.Device(int(device)) if isinstance(device, int) else device


def _strict_device(device: Any) -> Any:
    import array_api_strict

    return array_api_strict.Device(device) if isinstance(device, str) else device


def _strict_to_numpy(x: Any) -> Any:
    import array_api_strict
    import numpy as np

    cpu = array_api_strict.Device("CPU_DEVICE")
    if x.device != cpu:
        x = array_api_strict.asarray(x, device=cpu, copy=True)
    return np.asarray(x)


def _is_strict_array(x: Any) -> bool:
    return type(x).__module__.split(".", 1)[0] == "array_api_strict"


@dataclasses.dataclass(frozen=True)
class Library:
    """What xpml needs to know of one backend library.

    ``namespace(module)`` gives the array-API namespace from the imported
    module; ``is_array(x)`` recognises its arrays; ``to_numpy(x)`` copies one
    to the host; ``resolve_device(spelling)`` turns a user's device spelling
    (``"cuda:1"``, ``0``) into the library's device object.
    """

    name: str
    module: str
    extra: str | None
    namespace: Callable[[Any], Any]
    is_array: Callable[[Any], bool]
    to_numpy: Callable[[Any], Any]
    resolve_device: Callable[[Any], Any]


def _wrapped(module: Any) -> Any:
    return array_api_compat.array_namespace(module.empty(0))


LIBRARIES: dict[str, Library] = {
    lib.name: lib
    for lib in (
        Library(
            "numpy",
            "numpy",
            None,
            _wrapped,
            array_api_compat.is_numpy_array,
            lambda x: x,
            _numpy_device,
        ),
        Library(
            "cupy",
            "cupy",
            "cuda12",
            _wrapped,
            array_api_compat.is_cupy_array,
            lambda x: x.get(),
            _cupy_device,
        ),
        Library(
            "torch",
            "torch",
            "torch",
            _wrapped,
            array_api_compat.is_torch_array,
            lambda x: x.detach().cpu().numpy(),
            _torch_device,
        ),
        Library(
            "array_api_strict",
            "array_api_strict",
            "test",
            lambda module: module,
            _is_strict_array,
            _strict_to_numpy,
            _strict_device,
        ),
    )
}
"""The backends, by name: the single place that knows each library."""


def preload_namespace(name: str = "numpy") -> None:
    """Build the array-API namespace of library ``name`` now, if it is imported.

    array-api-compat builds its wrapper of NumPy on the first call that asks
    for it: some 40 ms beside SciPy and scikit-learn, and over half a second
    in a bare interpreter, since building it touches every lazily loaded NumPy
    submodule (``f2py``, ``testing``, ``ma`` ...). The modules that compute
    (the Gram engine, the linear models) call this when they are imported, so
    that the cost is paid with the other imports and not by the first ``fit``
    (issue 16). ``import xpml`` itself does not: it stays light. A library
    that is not imported is left alone.
    """
    lib = LIBRARIES[name]
    module = sys.modules.get(lib.module)
    if module is not None:
        lib.namespace(module)


# ------------------------------------------------------------------ arrays


def device(x: Any) -> Any:
    """The device of array ``x`` (``"cpu"`` for NumPy and dask arrays)."""
    return array_api_compat.device(x)


def finfo(dtype: Any, xp: Any) -> Any:
    """``xp.finfo(dtype)``: ``eps``, ``max``, ``tiny`` ... of a real float dtype."""
    return xp.finfo(dtype)


def eps(dtype: Any, xp: Any) -> float:
    """Machine epsilon of a real float dtype, as a Python float."""
    return float(xp.finfo(dtype).eps)


def itemsize(dtype: Any, xp: Any) -> int:
    """Bytes per element of ``dtype`` (floats, integers and bool)."""
    if dtype == xp.bool:
        return 1
    info = xp.finfo(dtype) if xp.isdtype(dtype, "real floating") else xp.iinfo(dtype)
    return int(info.bits) // 8


# ----------------------------------------------------------- memory budget

DEFAULT_MEMORY_BUDGET = 512 * 2**20
"""Bytes of workspace a call may allocate beside its inputs and outputs."""

_BUDGET_ENV = "XPML_MEMORY_BUDGET"


def _parse_bytes(text: str) -> int:
    units = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    scale = units.get(t[-1:], 1)
    number = t[:-1] if t[-1:] in units else t
    return int(float(number) * scale)


def memory_budget(override: int | float | None = None) -> int:
    """The workspace budget in bytes.

    ``override`` (an estimator's ``memory_budget`` parameter) wins; otherwise
    the environment variable ``XPML_MEMORY_BUDGET`` (bytes, or with a unit:
    ``"2G"``, ``"256MiB"``); otherwise :data:`DEFAULT_MEMORY_BUDGET`.
    """
    if override is not None:
        return int(override)
    text = os.environ.get(_BUDGET_ENV)
    if not text:
        return DEFAULT_MEMORY_BUDGET
    try:
        value = _parse_bytes(text)
    except (ValueError, IndexError):
        value = -1
    if value <= 0:
        raise ValueError(
            f"{_BUDGET_ENV}={text!r} is not a positive size; use bytes or a size "
            f"with a unit such as '512M' or '2G'"
        )
    return value


# ------------------------------------------------------------ fast paths


@dataclasses.dataclass
class _Op:
    portable: Callable | None = None
    fast: dict[str, Callable] = dataclasses.field(default_factory=dict)
    examples: list[Callable] = dataclasses.field(default_factory=list)


_OPS: dict[str, _Op] = {}


def portable(op: str) -> Callable[[Callable], Callable]:
    """Register the portable (array API only) implementation of ``op``."""

    def register(fn: Callable) -> Callable:
        entry = _OPS.setdefault(op, _Op())
        old = entry.portable
        if old is not None and old.__qualname__ != fn.__qualname__:
            raise RuntimeError(
                f"portable implementation of {op!r} registered twice "
                f"({old.__module__}.{old.__qualname__} and {fn.__qualname__})"
            )
        entry.portable = fn  # the same function again: a module imported twice
        return fn

    return register


def fast_path(
    op: str, *libraries: str, example: Callable[[], tuple] | None = None
) -> Callable[[Callable], Callable]:
    """Register a fast implementation of ``op`` for the named libraries.

    It must take the same arguments as the portable twin and return the same
    result to rounding. ``example`` is a zero-argument function returning
    ``(args, kwargs)`` on NumPy arrays, from which the test suite checks that
    the two agree on every library the fast path serves (arrays are moved to
    each library; the ``xp`` keyword is replaced by that library's namespace).
    """
    if not libraries:
        raise ValueError(f"fast_path({op!r}) names no library")

    def register(fn: Callable) -> Callable:
        entry = _OPS.setdefault(op, _Op())
        for lib in libraries:
            entry.fast[lib] = fn
        if example is not None:
            entry.examples.append(example)
        return fn

    return register


def dispatch(op: str, xp: Any, *, fast: bool = True) -> Callable:
    """The implementation of ``op`` to call with namespace ``xp``: the fast path
    registered for its library when there is one (and ``fast``), else the
    portable one."""
    entry = _OPS.get(op)
    if entry is None or entry.portable is None:
        raise LookupError(f"no portable implementation registered for {op!r}")
    if fast:
        impl = entry.fast.get(namespace_name(xp))
        if impl is not None:
            return impl
    return entry.portable


def registered_ops() -> dict[str, tuple[tuple[str, ...], int]]:
    """``{op: (libraries with a fast path, number of examples)}``, for tests."""
    return {k: (tuple(v.fast), len(v.examples)) for k, v in _OPS.items()}


def _op_entry(op: str) -> _Op:
    return _OPS[op]
