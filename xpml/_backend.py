"""The backend switch: where an experiment computes and what it hands back.

Every algorithm in xpml is written once against the array API standard. This
module decides, for each public call, which array library does the work:

* with no backend set, the library of the inputs (all inputs must come from one
  library, otherwise a ``TypeError`` names them);
* under ``set_backend(name)``, a ``with backend(name):`` block, or the
  ``XPML_BACKEND`` / ``XPML_DEVICE`` environment variables, inputs from any
  library are moved to that backend first.

Results come back in the caller's library (``output="input"``, the default) or
stay on the backend (``output="backend"``).

Only this module, the save/load code and the tests convert between libraries;
algorithm code receives arrays that already share one namespace.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import importlib
import os
import threading
from typing import Any

import array_api_compat
import numpy as np

from xpml.utils._array_api import LIBRARIES, namespace_name
from xpml.utils._array_api import device as array_device
from xpml.utils.memory import prepare_heap

__all__ = [
    "BACKENDS",
    "Backend",
    "backend",
    "bind_backend",
    "get_backend",
    "set_backend",
    "Context",
    "enter",
    "to_numpy",
    "move",
    "library_name",
    "float_dtype",
]

# name -> (module to import, extra that installs it); the facts live in LIBRARIES
BACKENDS = {name: (lib.module, lib.extra) for name, lib in LIBRARIES.items()}
_OUTPUTS = ("input", "backend")
_DTYPES = (None, "float32", "float64")


@dataclasses.dataclass(frozen=True)
class Backend:
    """The active backend: a library name, a device, a dtype and an output rule.

    ``name`` is None when no backend was chosen: computations then follow the
    library of their inputs.
    """

    name: str | None = None
    device: Any = None
    dtype: str | None = None
    output: str = "input"

    @property
    def xp(self):
        """The array namespace of this backend (array-api-compat wrapped)."""
        if self.name is None:
            return None
        return _namespace(self.name)

    def __repr__(self):
        return (
            f"Backend(name={self.name!r}, device={self.device!r}, "
            f"dtype={self.dtype!r}, output={self.output!r})"
        )


_IMPORT_LOCK = threading.RLock()  # one thread imports a backend; the others wait


def _import_backend(name):
    with _IMPORT_LOCK:
        return _import_backend_locked(name)


def _import_backend_locked(name):
    if name not in BACKENDS:
        allowed = ", ".join(repr(b) for b in BACKENDS)
        raise ValueError(f"unknown backend {name!r}; allowed backends are {allowed}")
    module, extra = BACKENDS[name]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = f"pip install 'xpml[{extra}]'" if extra else f"pip install {module}"
        raise ImportError(
            f"backend {name!r} needs the {module!r} library, which is not installed "
            f"or failed to import ({exc}); install it with: {hint}"
        ) from exc


def _namespace(name):
    with _IMPORT_LOCK:  # array-api-compat's wrapper modules import lazily too
        return _namespace_locked(name)


def _namespace_locked(name):
    return LIBRARIES[name].namespace(_import_backend(name))


def _resolve_device(name, device):
    """Turn a user's device spelling into the backend's device object."""
    if device is None:
        return None
    if name in LIBRARIES:
        return LIBRARIES[name].resolve_device(device)
    return device


def _make(name, device=None, dtype=None, output="input"):
    if output not in _OUTPUTS:
        raise ValueError(f"output must be one of {_OUTPUTS}; got {output!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}; got {dtype!r}")
    if name is None:
        if device is not None:
            raise ValueError("a device needs a backend name")
        return Backend(None, None, dtype, output)
    _import_backend(name)
    return Backend(name, _resolve_device(name, device), dtype, output)


def _from_environment():
    name = os.environ.get("XPML_BACKEND") or None
    device = os.environ.get("XPML_DEVICE") or None
    if name is None and device is None:
        return Backend()
    return _make(name or "numpy", device)


_state: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "xpml_backend", default=None
)
_global: list[Backend | None] = [None]  # lazily read from the environment


def get_backend() -> Backend:
    """Return the active :class:`Backend` (``name=None`` when inputs decide)."""
    local = _state.get()
    if local is not None:
        return local
    if _global[0] is None:
        _global[0] = _from_environment()
    return _global[0]


def set_backend(name=None, device=None, dtype=None, output="input") -> Backend:
    """Choose the backend for everything that follows.

    Parameters
    ----------
    name : {"numpy", "cupy", "torch", "array_api_strict"} or None
        The array library to compute with. None follows the inputs' library.
    device : str or device, optional
        E.g. ``"cuda"``, ``"cuda:1"`` or ``"cpu"`` for torch, ``0`` for cupy.
    dtype : {"float64", "float32"} or None
        Floating dtype for computations. None keeps float32 inputs float32 and
        computes everything else in float64 where the device has it.
    output : {"input", "backend"}
        Return results (and fitted attributes) in the caller's library, or
        leave them on the backend.

    Returns
    -------
    Backend
        The new active backend.

    Examples
    --------
    >>> import xpml
    >>> xpml.set_backend("numpy").name
    'numpy'
    >>> xpml.set_backend(None).name is None
    True
    """
    new = _make(name, device, dtype, output)
    _global[0] = new
    _state.set(None)
    return new


@contextlib.contextmanager
def backend(name=None, device=None, dtype=None, output="input"):
    """Context manager form of :func:`set_backend`, restored on exit.

    Examples
    --------
    >>> import xpml
    >>> with xpml.backend("numpy", dtype="float32") as b:
    ...     b.dtype
    'float32'
    """
    token = _state.set(_make(name, device, dtype, output))
    try:
        yield _state.get()
    finally:
        _state.reset(token)


def bind_backend(fn):
    """``fn`` wrapped to run under the backend active *here and now*.

    A ``with xpml.backend(...)`` block holds for the thread that entered it (a
    context variable); threads started inside it, such as the workers of a
    ``concurrent.futures.ThreadPoolExecutor``, begin with the global backend
    (:func:`set_backend`). Submit ``xpml.bind_backend(fn)`` to carry the block's
    backend into the worker.

    Examples
    --------
    >>> import xpml
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with xpml.backend("numpy", dtype="float32"), ThreadPoolExecutor(2) as pool:
    ...     pool.submit(xpml.bind_backend(lambda: xpml.get_backend().dtype)).result()
    'float32'
    """
    active = get_backend()

    def run(*args, **kwargs):
        token = _state.set(active)
        try:
            return fn(*args, **kwargs)
        finally:
            _state.reset(token)

    return run


# ----------------------------------------------------------------- conversions
def library_name(x) -> str:
    """Short name of the library an array comes from."""
    for name, lib in LIBRARIES.items():
        if lib.is_array(x):
            return name
    return type(x).__module__.split(".")[0]


def to_numpy(x) -> np.ndarray:
    """Copy-free where possible conversion of any supported array to NumPy."""
    if isinstance(x, np.ndarray):
        return x
    lib = LIBRARIES.get(library_name(x))
    return lib.to_numpy(x) if lib is not None else np.asarray(x)


def move(x, xp, device=None):
    """Return ``x`` as an array of namespace ``xp`` on ``device`` (no copy when
    it is there already).

    Into torch or CuPy, the buffer is handed over by DLPack where both sides
    support it (CuPy <-> torch on a GPU, NumPy -> torch on the CPU): no copy,
    and a GPU array never round-trips through the host. Otherwise, or when
    DLPack refuses, through a NumPy copy on the host. A read-only NumPy array
    is copied first (DLPack cannot mark a buffer read-only).
    """
    if x is None:
        return None
    if _is_namespace(x, xp) and (device is None or _same_device(x, device)):
        return x
    name = _namespace_name(xp)
    if name == "torch" and array_api_compat.is_torch_array(x):
        return x.to(device) if device is not None else x
    if name == "cupy" and array_api_compat.is_cupy_array(x):
        return x
    shared = _by_dlpack(x, xp, name, device)
    if shared is not None:
        return shared
    host = to_numpy(x)
    if name == "torch" and not host.dtype.isnative:
        host = host.astype(host.dtype.newbyteorder("="))  # torch: native order only
    if name == "torch" and not host.flags.writeable:
        host = host.copy()  # torch warns on non-writable buffers
    kwargs = {} if device is None else {"device": device}
    if name == "numpy":
        return host
    return xp.asarray(host, **kwargs)


_DLPACK_CPU = 1  # DLPack's device type of host memory (dlpack.h kDLCPU)
_DLPACK_REFUSALS = (BufferError, TypeError, ValueError, RuntimeError, AttributeError)


def _by_dlpack(x, xp, name, device):
    """``x`` in torch or CuPy through DLPack, on ``x``'s own device, then moved
    to ``device`` inside that library; None where DLPack does not apply."""
    if name not in ("torch", "cupy") or not hasattr(x, "__dlpack__"):
        return None
    if array_api_compat.is_torch_array(x):
        x = x.detach()
    elif isinstance(x, np.ndarray) and not x.flags.writeable:
        x = x.copy()  # the receiver could write into a shared read-only buffer
    try:
        if name == "cupy" and x.__dlpack_device__()[0] == _DLPACK_CPU:
            return None  # CuPy takes device buffers only: the host path uploads
        out = xp.from_dlpack(x)
    except _DLPACK_REFUSALS:
        return None
    if device is not None and not _same_device(out, device):
        out = xp.asarray(out, device=device)
    return out


def _namespace_name(xp):
    return namespace_name(xp)


def _is_namespace(x, xp):
    try:
        return array_api_compat.array_namespace(x) is xp
    except TypeError:
        return False


def _same_device(x, device):
    try:
        return array_device(x) == device
    except Exception:  # pragma: no cover - exotic arrays
        return False


def float_dtype(xp, device=None, requested=None, like=None):
    """The floating dtype to compute in.

    ``requested`` ("float32"/"float64") wins; otherwise float32 inputs stay
    float32 and everything else is float64 where the device has it.
    """
    if requested == "float32":
        return xp.float32
    has64 = _has_float64(xp, device)
    if requested == "float64":
        if not has64:
            raise TypeError(
                "float64 was requested but this device has no float64 support"
            )
        return xp.float64
    if like is not None and like == xp.float32:
        return xp.float32
    return xp.float64 if has64 else xp.float32


def _has_float64(xp, device):
    try:
        info = xp.__array_namespace_info__()
        return "float64" in info.dtypes(device=device, kind="real floating")
    except Exception:  # pragma: no cover - namespaces without inspection API
        return True


# --------------------------------------------------------------------- context
def _is_array(x):
    return array_api_compat.is_array_api_obj(x) and not isinstance(
        x, (int, float, bool)
    )


@dataclasses.dataclass
class Context:
    """Where one public call computes (``xp``, ``device``) and where its results go.

    Made by :func:`enter`; algorithm code reads ``ctx.xp`` and ``ctx.device``,
    moves stored attributes in with ``ctx.take(attr)`` and results out with
    ``ctx.out(result)``.
    """

    xp: Any
    device: Any
    out_xp: Any
    out_device: Any
    dtype: str | None = None

    def take(self, x):
        """Move a stored array (e.g. a fitted attribute) to the compute namespace."""
        return move(x, self.xp, self.device)

    def out(self, x):
        """Move a result to the caller's namespace (identity when they agree)."""
        if x is None or not _is_array(x):
            return x
        if self.out_xp is self.xp:
            return x
        return move(x, self.out_xp, self.out_device)

    @property
    def on_backend(self):
        return self.out_xp is not self.xp


def enter(*arrays, names=None):
    """Resolve the compute namespace for one public call.

    Parameters
    ----------
    *arrays : arrays, array-likes or None
        The call's array arguments (None entries are ignored). Python lists and
        other non-array objects count as NumPy.
    names : sequence of str, optional
        Argument names, used in the mixed-library error.

    Returns
    -------
    ctx : Context
    arrays : list
        The arrays moved to the compute namespace (array-likes become NumPy
        arrays first; None stays None).
    """
    prepare_heap()  # once per process (issue 16); later calls return at once
    names = (
        list(names)
        if names is not None
        else [f"argument {i}" for i in range(len(arrays))]
    )
    libs = {}
    converted = []
    for nm, a in zip(names, arrays):
        if a is None:
            converted.append(None)
            continue
        if type(a).__module__.startswith("scipy.sparse"):
            # one policy (xpml.utils.validation): densified within the memory budget
            from xpml.utils.validation import dense_from_sparse

            a = dense_from_sparse(a, nm)
        if not _is_array(a):
            a = np.asarray(a)
        libs.setdefault(library_name(a), nm)
        converted.append(a)

    be = get_backend()
    input_libs = list(libs)
    if be.name is None:
        if len(input_libs) > 1:
            desc = " and ".join(f"{libs[lib]} is a {lib} array" for lib in input_libs)
            raise TypeError(
                f"mixed array libraries: {desc}. Pass arrays from one library, or set a "
                f"backend (xpml.set_backend('numpy'|'torch'|'cupy'|...)) to convert them."
            )
        first = next((a for a in converted if a is not None), None)
        xp = (
            array_api_compat.array_namespace(first)
            if first is not None
            else _namespace("numpy")
        )
        device = array_device(first) if first is not None else None
        ctx = Context(xp, device, xp, device, be.dtype)
        return ctx, converted

    xp = be.xp
    first = next((a for a in converted if a is not None), None)
    out_xp, out_device = xp, be.device
    if be.output == "input" and first is not None:
        out_xp = array_api_compat.array_namespace(first)
        out_device = array_device(first)
    device = be.device
    moved = [move(a, xp, device) for a in converted]
    if device is None:
        m = next((a for a in moved if a is not None), None)
        device = array_device(m) if m is not None else None
    if out_xp is xp and be.output == "input":
        out_device = out_device if out_device is not None else device
    return Context(xp, device, out_xp, out_device, be.dtype), moved
