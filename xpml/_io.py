"""Safe save and load: a zip of one JSON document and ``.npy`` arrays.

Nothing in a file is executed: classes are looked up by name in xpml's own
registry (:func:`xpml.base.registered_classes`), arrays are read with their
``.npy`` header checked first, and anything unexpected raises ``ValueError``.
Arrays round-trip bit-exactly (``.npy`` keeps dtype and bytes); Python floats
round-trip exactly through JSON's shortest-repr floats.

File format, version 1
----------------------
A zip archive (deflate) with exactly these entries:

* ``model.json``: ``{"format": "xpml-model", "format_version": 1,
  "xpml_version": "...", "object": NODE}``. A NODE is JSON null, a boolean, a
  number, a string, a list of NODEs, or one of the tagged objects
  ``{"__object__": class name, "module": its module, "params": {name: NODE},
  "state": {attribute: NODE}}``, ``{"__array__": "a<k>"}``,
  ``{"__scalar__": "a<k>"}`` (a NumPy scalar, stored as a 0-d array),
  ``{"__tuple__": [NODE, ...]}``, ``{"__dict__": [[key NODE, NODE], ...]}`` and
  ``{"__complex__": [re, im]}``. The top NODE is an ``__object__``.
* ``arrays/a<k>.npy``: one ``.npy`` file (format 1.0 or 2.0) per array, of a
  boolean, integer, floating, complex or fixed-width string dtype.

``module`` only says where the class is defined, so that a fresh process can
find it: it is imported only when it names a module inside the ``xpml``
package; failing that every xpml module is imported. Nothing outside ``xpml``
is ever imported because a file names it.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import inspect
import json
import keyword
import math
import numbers
import os
import re
import secrets
import stat
import struct
import zipfile
import zlib
from typing import TYPE_CHECKING, Any, BinaryIO

import array_api_compat
import numpy as np

from xpml._backend import get_backend, move, to_numpy

if TYPE_CHECKING:
    from xpml.base import Persistable

__all__ = ["save", "load"]

FORMAT = "xpml-model"
FORMAT_VERSION = 1

#: default budget of uncompressed bytes :func:`load` reads (JSON and arrays)
DEFAULT_MAX_BYTES = 2 * 1024**3
#: environment variable overriding :data:`DEFAULT_MAX_BYTES`
MAX_BYTES_ENV = "XPML_LOAD_MAX_BYTES"
#: largest ``model.json`` read (also bounded by the byte budget)
MAX_JSON_BYTES = 16 * 1024**2
#: deepest nesting of JSON lists and objects accepted
MAX_DEPTH = 64

_CHUNK = 1 << 20
_MAX_NPY_HEADER = 10_000
_MAX_NDIM = 32
_ARRAY_ENTRY = re.compile(r"arrays/(a[0-9]{1,9})\.npy")
_XPML_MODULE = re.compile(r"xpml(\._?[A-Za-z][A-Za-z0-9_]*)*")
_ARRAY_KINDS = "biufcUS"  # bool, ints, floats, complex, fixed-width strings
_NUMERIC_KINDS = "biufc"
#: fitted attributes whose last axis runs over the input features; a class can
#: replace this list with its own ``_xpml_state_shapes`` tuple of names
_FEATURE_AXIS_ATTRS = (
    "coef_",
    "cluster_centers_",
    "support_vectors_",
    "means_",
    "theta_",
    "var_",
    "feature_count_",
    "feature_log_prob_",
    "components_",
    "mean_",
    "covariance_",
    "X_fit_",
    "feature_importances_",
)
#: errors the standard library raises on a malformed zip or stream
_STREAM_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    OSError,
    struct.error,
    NotImplementedError,
    RuntimeError,
    UnicodeError,
    OverflowError,
)


# ----------------------------------------------------------------------- save
def _encode(value, arrays, where):
    from xpml.base import Persistable

    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):  # before float: np.float64 is a float
        key = f"a{len(arrays)}"
        arrays[key] = np.asarray(value)
        return {"__scalar__": key}
    if isinstance(value, numbers.Integral) and not hasattr(value, "shape"):
        return int(value)
    if isinstance(value, float):
        return value
    if array_api_compat.is_array_api_obj(value):
        host = to_numpy(value)
        if host.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(
                f"cannot save {where}: arrays of dtype {host.dtype} are not stored "
                f"(allowed: bool, integer, floating, complex and fixed-width strings)"
            )
        key = f"a{len(arrays)}"
        arrays[key] = np.ascontiguousarray(host)
        return {"__array__": key}
    if isinstance(value, Persistable):
        return _encode_object(value, arrays, where)
    if isinstance(value, (list, tuple)):
        items = [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        return {
            "__dict__": [
                [_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")]
                for k, v in value.items()
            ]
        }
    if isinstance(value, complex):
        return {"__complex__": [value.real, value.imag]}
    raise TypeError(
        f"cannot save {where}: values of type {type(value).__name__} are not stored "
        f"(xpml saves arrays, numbers, strings, lists, dicts and xpml objects; "
        f"callables such as a custom kernel cannot be saved safely)"
    )


def _encode_object(value, arrays, where):
    """Parameters and state (every attribute not starting with ``_cache``)."""
    cls = type(value)
    names = set(value.get_params(deep=False))
    params = {
        k: _encode(v, arrays, f"{where}.{k}")
        for k, v in value.get_params(deep=False).items()
    }
    state = {
        k: _encode(v, arrays, f"{where}.{k}")
        for k, v in vars(value).items()
        if k not in names and not k.startswith("_cache")
    }
    return {
        "__object__": cls.__name__,
        "module": cls.__module__,
        "params": params,
        "state": state,
    }


def _write_zip(fh, doc, arrays):
    with zipfile.ZipFile(fh, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("model.json", json.dumps(doc))
        for key, arr in arrays.items():  # streamed: no second copy in memory
            big = arr.nbytes > (1 << 30)  # zip64 sizes past 2 GiB
            with zf.open(f"arrays/{key}.npy", "w", force_zip64=big) as out:
                np.lib.format.write_array(out, arr, allow_pickle=False)


def _open_temp(folder, base):
    """A new file next to the target, created exclusively (mode 0o666 less the
    umask, as ``open`` gives)."""
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{secrets.token_hex(6)}.tmp")
        try:
            return tmp, open(tmp, "xb")
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", folder)


def _fsync_folder(folder):
    """Make the rename durable (POSIX); a no-op where folders cannot be opened."""
    if not hasattr(os, "O_DIRECTORY"):
        return
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _replace_atomically(target, doc, arrays):
    folder = os.path.dirname(target) or "."
    tmp, fh = _open_temp(folder, os.path.basename(target))
    try:
        with fh:
            _write_zip(fh, doc, arrays)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(OSError):  # keep the old file's permissions
            os.chmod(tmp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(folder)


def save(obj: Persistable, path: str | os.PathLike | BinaryIO) -> None:
    """Save an xpml estimator (fitted or not) to ``path``.

    The file is written in full to a temporary file in the same folder,
    flushed to disk (``fsync``) and then renamed onto ``path`` in one step
    (``os.replace``): a save that fails for any reason (a value that cannot be
    stored, a full disk, a file-size limit, an interrupt) removes the temporary
    file and leaves any previous file at ``path`` untouched. Saving through a
    symbolic link replaces the file it points to; the previous file's
    permissions are kept. An open binary file object is also accepted; it is
    written directly (no atomicity). See the module docstring for the format.

    Parameters
    ----------
    obj : Persistable
        The estimator (or layer, or any :class:`xpml.base.Persistable`).
    path : str, path-like or binary file object

    Raises
    ------
    TypeError
        If a parameter or attribute cannot be stored safely (e.g. a callable);
        nothing is written then.
    OSError
        If the file cannot be written; the previous file is kept.
    """
    from xpml import __version__

    arrays: dict[str, np.ndarray] = {}
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "xpml_version": __version__,
        "object": _encode(obj, arrays, type(obj).__name__),
    }
    if hasattr(path, "write"):
        _write_zip(path, doc, arrays)
        return
    target = os.fspath(path)
    if os.path.islink(target):
        target = os.path.realpath(target)
    if os.path.isdir(target):
        raise IsADirectoryError(
            errno.EISDIR, "cannot save a model onto a folder; give a file path", target
        )
    _replace_atomically(target, doc, arrays)


# ----------------------------------------------------------------------- load
class ModelFileError(ValueError):
    """A file that is not a valid xpml model file (a ``ValueError``)."""

    def __init__(self, path, why):
        super().__init__(f"{path!r} is not a valid xpml model file: {why}")


def _brief(exc):
    """An error's message, cut short (it may quote bytes of the file)."""
    text = str(exc)
    return text if len(text) <= 200 else text[:200] + "..."


class _Budget:
    """Uncompressed bytes still allowed; every byte read is charged here."""

    def __init__(self, limit, path):
        self.limit, self.used, self.path = limit, 0, path

    def ensure(self, n, what):
        if self.used + n > self.limit:
            raise ModelFileError(
                self.path,
                f"{what} takes the content past max_bytes={self.limit} bytes "
                f"(uncompressed); to load a larger model pass a larger max_bytes= "
                f"or set {MAX_BYTES_ENV}",
            )

    def take(self, n, what):
        self.ensure(n, what)
        self.used += n


class _Reader:
    """A zip entry's stream whose reads are charged to the budget."""

    def __init__(self, fh, budget, what):
        self.fh, self.budget, self.what, self.count = fh, budget, what, 0

    def read(self, n):
        data = self.fh.read(n)
        self.count += len(data)
        self.budget.take(len(data), self.what)
        return data


_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


def _npy_header(reader, bad):
    """``(shape, fortran_order, dtype)``, checked, before any allocation."""
    try:
        version = np.lib.format.read_magic(reader)
        read_header = _NPY_HEADERS.get(version)
        if read_header is None:
            raise ValueError(f".npy format {version} is not read (1.0 and 2.0 are)")
        shape, fortran, dtype = read_header(reader, max_header_size=_MAX_NPY_HEADER)
    except ModelFileError:
        raise
    except ValueError as exc:
        raise bad(f"bad .npy header ({_brief(exc)})") from exc
    if (
        dtype.kind not in _ARRAY_KINDS
        or dtype.fields is not None
        or dtype.subdtype is not None
        or dtype.itemsize == 0
    ):
        raise bad(
            f"dtype {dtype} is not allowed (bool, integer, floating, complex and "
            f"fixed-width strings are)"
        )
    if len(shape) > _MAX_NDIM:
        raise bad(f"{len(shape)} dimensions (at most {_MAX_NDIM})")
    return shape, fortran, dtype


def _read_npy(reader, declared, budget, bad):
    """The array of a ``.npy`` stream whose zip entry declares ``declared``
    bytes: the header must account for exactly the rest, within the budget,
    before anything is allocated; the data is then read in chunks."""
    shape, fortran, dtype = _npy_header(reader, bad)
    if shape and max(shape) > budget.limit:
        raise bad(f"shape {shape} is larger than max_bytes={budget.limit}")
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes != declared - reader.count:
        raise bad(
            f"its header declares shape {shape} of {dtype} ({nbytes} bytes) but "
            f"the entry holds {declared - reader.count} bytes of data"
        )
    budget.ensure(nbytes, "an array")
    try:
        flat = np.empty(count, dtype=dtype)
    except MemoryError as exc:
        raise bad(f"its {nbytes} bytes could not be allocated") from exc
    raw, pos = flat.view(np.uint8), 0
    while pos < nbytes:
        chunk = reader.read(min(_CHUNK, nbytes - pos))
        if not chunk:
            raise bad(f"truncated after {pos} of {nbytes} bytes")
        raw[pos : pos + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
        pos += len(chunk)
    if reader.read(1):  # also where zipfile checks the CRC
        raise bad("more data than its header declares")
    return flat.reshape(shape, order="F" if fortran else "C")


def _read_json(zf, info, budget, path):
    limit = min(MAX_JSON_BYTES, budget.limit)
    if info.file_size > limit:
        raise ModelFileError(
            path, f"model.json declares {info.file_size} bytes (at most {limit} read)"
        )
    parts = []
    try:
        with zf.open(info) as fh:
            reader = _Reader(fh, budget, "model.json")
            while chunk := reader.read(_CHUNK):
                parts.append(chunk)
                if reader.count > limit:
                    raise ModelFileError(path, f"model.json is over {limit} bytes")
    except _STREAM_ERRORS as exc:
        raise ModelFileError(path, f"model.json is corrupted ({_brief(exc)})") from exc
    try:
        doc = json.loads(b"".join(parts))
    except RecursionError as exc:
        raise ModelFileError(path, "model.json is nested too deeply") from exc
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digits
        raise ModelFileError(path, f"bad JSON ({_brief(exc)})") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ModelFileError(path, "wrong format tag")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ModelFileError(
            path,
            f"it has format version {doc.get('format_version')!r}; this xpml reads "
            f"version {FORMAT_VERSION}",
        )
    return doc


def _check_directory(zf, limit, path):
    """The entries by name, refused before reading anything when the declared
    sizes exceed the budget or an entry is unexpected, encrypted or compressed
    by anything but deflate."""
    infos = {}
    for info in zf.infolist():
        name = info.filename
        if name in infos:
            raise ModelFileError(path, f"entry {name!r} appears twice")
        if name != "model.json" and not _ARRAY_ENTRY.fullmatch(name):
            raise ModelFileError(path, f"unexpected entry {name!r}")
        if info.flag_bits & 0x1:
            raise ModelFileError(path, f"entry {name!r} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ModelFileError(
                path, f"entry {name!r} uses an unsupported compression"
            )
        infos[name] = info
    if "model.json" not in infos:
        raise ModelFileError(path, "no model.json")
    declared = sum(info.file_size for info in infos.values())
    if declared > limit:
        raise ModelFileError(
            path,
            f"it declares {declared} bytes of uncompressed content, more than "
            f"max_bytes={limit}; to load a larger model pass a larger max_bytes= or "
            f"set {MAX_BYTES_ENV}",
        )
    return infos


def _importable_hint(module):
    """Whether ``module`` (read from a file) may be imported: a module inside the
    ``xpml`` package, never the benchmarks, demos or command line."""
    from xpml.utils.discovery import _SKIP

    return (
        isinstance(module, str)
        and _XPML_MODULE.fullmatch(module) is not None
        and not any(module == s or module.startswith(s + ".") for s in _SKIP)
    )


def _is_abstract(cls):
    from xpml.base import BaseEstimator, Persistable

    return (
        cls in (Persistable, BaseEstimator)
        or bool(cls.__dict__.get("_xpml_abstract", False))
        or inspect.isabstract(cls)
        or (issubclass(cls, BaseEstimator) and not callable(getattr(cls, "fit", None)))
    )


def _resolve_class(name, module, bad):
    """The registered, concrete xpml class called ``name``. Its module is
    imported first when not yet imported (``module`` is a hint, used only when
    it lies inside xpml); failing that every xpml module is imported."""
    from xpml.base import registered_classes

    if not isinstance(name, str) or not name.isidentifier():
        raise bad(f"bad class name {name!r}")
    cls = registered_classes().get(name)
    if cls is None and _importable_hint(module):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
        cls = registered_classes().get(name)
    if cls is None:
        from xpml.utils.discovery import all_estimators

        all_estimators()  # imports every xpml module, registering their classes
        cls = registered_classes().get(name)
    if cls is None:
        raise bad(f"unknown class {name!r} (only xpml classes can be loaded)")
    if _is_abstract(cls):
        raise bad(f"{name} is a base class, not a model that can be loaded")
    return cls


_MISSING = object()


def _check_state_names(cls, params, state, bad):
    """State keys are plain attribute names that hide no method or property."""
    for k in state:
        if (
            not isinstance(k, str)
            or not k.isidentifier()
            or keyword.iskeyword(k)
            or k.startswith("__")
        ):
            raise bad(f"attribute name {k!r} of {cls.__name__} is not allowed")
        if k in params:
            raise bad(f"attribute {k!r} of {cls.__name__} repeats a parameter")
        found = inspect.getattr_static(cls, k, _MISSING)
        if found is not _MISSING and (
            callable(found) or hasattr(type(found), "__get__")
        ):
            raise bad(
                f"attribute {k!r} would hide {cls.__name__}.{k} (a method or "
                f"property); refused"
            )


def _is_numeric_array(v):
    if not array_api_compat.is_array_api_obj(v) or isinstance(v, (bool, int, float)):
        return False
    # other libraries than NumPy have numeric and bool dtypes only
    return not isinstance(v, np.ndarray) or v.dtype.kind in _NUMERIC_KINDS


def _check_feature_shapes(cls, state, bad):
    """``n_features_in_`` is a count, ``feature_names_in_`` that many strings,
    and the per-feature attributes (see ``_FEATURE_AXIS_ATTRS``, or the class's
    ``_xpml_state_shapes``) numeric arrays whose last axis has that length."""
    n = state.get("n_features_in_")
    if "n_features_in_" in state and (
        not isinstance(n, numbers.Integral) or isinstance(n, bool) or n < 0
    ):
        raise bad(f"{cls.__name__}.n_features_in_ is {n!r}, not a count")
    names = state.get("feature_names_in_")
    if names is not None and not (
        isinstance(names, np.ndarray)
        and names.dtype.kind == "U"
        and names.ndim == 1
        and (n is None or names.shape[0] == n)
    ):
        raise bad(
            f"{cls.__name__}.feature_names_in_ must be a 1-D string array with "
            f"n_features_in_={n} entries; got {names!r:.80}"
        )
    for k in getattr(cls, "_xpml_state_shapes", _FEATURE_AXIS_ATTRS):
        v = state.get(k)
        if v is None:
            continue
        if not _is_numeric_array(v):
            raise bad(f"{cls.__name__}.{k} must be a numeric array; got {v!r:.80}")
        shape = tuple(v.shape)
        if n is not None and (not shape or shape[-1] != n):
            raise bad(
                f"{cls.__name__}.{k} has shape {shape}; its last axis must have "
                f"n_features_in_={n} entries"
            )


def _hashable(k, bad):
    k = tuple(k) if isinstance(k, list) else k
    try:
        hash(k)
    except TypeError as exc:
        raise bad(f"mapping key {k!r:.80} is not hashable") from exc
    return k


class _Decoder:
    """Builds values from JSON nodes; every node is checked, nothing is run
    but the ``__init__`` of registered xpml classes (which stores its
    arguments)."""

    def __init__(self, zf, infos, budget, path, target):
        self.zf, self.infos, self.budget, self.path = zf, infos, budget, path
        self.xp, self.device = target

    def bad(self, why):
        return ModelFileError(self.path, why)

    def array(self, key):
        info = self.infos.get(f"arrays/{key}.npy") if isinstance(key, str) else None
        if info is None:
            raise self.bad(f"array {key!r:.80} is missing")

        def bad(why):
            return self.bad(f"array {key!r}: {why}")

        try:
            with self.zf.open(info) as fh:
                reader = _Reader(fh, self.budget, f"array {key!r}")
                return _read_npy(reader, info.file_size, self.budget, bad)
        except _STREAM_ERRORS as exc:
            raise bad(f"corrupted ({_brief(exc)})") from exc

    def decode(self, node, depth):
        if depth > MAX_DEPTH:
            raise self.bad(f"values are nested more than {MAX_DEPTH} levels deep")
        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.decode(v, depth + 1) for v in node]
        if not isinstance(node, dict) or not node:
            raise self.bad(f"unexpected entry {node!r:.80}")
        if "__object__" in node:
            return self.decode_object(node, depth)
        if len(node) != 1:
            raise self.bad(f"unknown entry with keys {sorted(node)!r:.80}")
        ((tag, value),) = node.items()
        if tag == "__array__":
            arr = self.array(value)
            if self.xp is None or arr.dtype.kind not in _NUMERIC_KINDS:
                return arr  # strings (labels, feature names) stay NumPy
            return move(arr, self.xp, self.device)
        if tag == "__scalar__":
            arr = self.array(value)
            if arr.ndim != 0:
                raise self.bad(f"scalar {value!r} has shape {arr.shape}")
            return arr[()]
        if tag == "__complex__":
            if not (
                isinstance(value, list)
                and len(value) == 2
                and all(isinstance(v, (int, float)) for v in value)
            ):
                raise self.bad(f"malformed complex number {value!r:.80}")
            return complex(*value)
        if not isinstance(value, list):
            raise self.bad(f"unknown entry {node!r:.80}")
        if tag == "__tuple__":
            return tuple(self.decode(v, depth + 2) for v in value)
        if tag == "__dict__":
            return self.mapping(value, depth + 2)
        raise self.bad(f"unknown entry with key {tag!r:.80}")

    def mapping(self, items, depth):
        out = {}
        for pair in items:
            if not (isinstance(pair, list) and len(pair) == 2):
                raise self.bad("malformed mapping")
            key = _hashable(self.decode(pair[0], depth + 1), self.bad)
            out[key] = self.decode(pair[1], depth + 1)
        return out

    def decode_object(self, node, depth, expected=None):
        extra = set(node) - {"__object__", "module", "params", "state"}
        if extra:
            raise self.bad(f"unknown keys {sorted(extra)!r:.80} in an object")
        name = node["__object__"]
        cls = _resolve_class(name, node.get("module"), self.bad)
        if expected is not None and not issubclass(cls, expected):
            raise self.bad(f"it holds a {name}, not a {expected.__name__}")
        params, state = node.get("params", {}), node.get("state", {})
        if not isinstance(params, dict) or not isinstance(state, dict):
            raise self.bad(f"malformed entry for {name}")
        allowed = set(cls._get_param_names())
        unknown = set(params) - allowed
        if unknown:
            raise self.bad(f"{name} has no parameters {sorted(unknown)!r:.200}")
        _check_state_names(cls, allowed, state, self.bad)
        obj = cls(**{k: self.decode(v, depth + 2) for k, v in params.items()})
        values = {k: self.decode(v, depth + 2) for k, v in state.items()}
        _check_feature_shapes(cls, values, self.bad)
        vars(obj).update(values)  # plain attributes: no setter or descriptor runs
        return obj


def _max_bytes(value):
    where = "max_bytes"
    if value is None:
        env = os.environ.get(MAX_BYTES_ENV, "").strip()
        if not env:
            return DEFAULT_MAX_BYTES
        where = f"environment variable {MAX_BYTES_ENV}"
        try:
            value = int(env)
        except ValueError:
            raise ValueError(
                f"{where} must be a positive whole number of bytes; got {env!r}"
            ) from None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(
            f"max_bytes must be a positive int (bytes); got {type(value).__name__}"
        )
    if value <= 0:
        raise ValueError(f"{where} must be a positive number of bytes; got {value}")
    return int(value)


def _open_archive(path, name):
    """``(file, ZipFile)``; a missing or unreadable file raises its OSError,
    a folder or anything not a zip archive raises ``ValueError``."""
    if hasattr(path, "read"):
        fh = path
    else:
        if os.path.isdir(path):
            raise ModelFileError(name, "it is a folder, not a file")
        fh = open(path, "rb")  # closed by the caller
    try:
        return fh, zipfile.ZipFile(fh)
    except (*_STREAM_ERRORS, ValueError, KeyError, IndexError, TypeError) as exc:
        if fh is not path:
            fh.close()
        raise ModelFileError(
            name, f"it is truncated or corrupted ({_brief(exc)})"
        ) from exc


#: what a malformed file can make the standard library or NumPy raise; load
#: turns any of them into ModelFileError (a ValueError)
_CONTENT_ERRORS = (
    *_STREAM_ERRORS,
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    RecursionError,
    MemoryError,
)


def load(
    path: str | os.PathLike | BinaryIO,
    *,
    backend: str | None = None,
    device: Any = None,
    max_bytes: int | None = None,
    expected_class: type | None = None,
) -> Any:
    """Load an object saved with ``est.save(path)`` (or :func:`save`).

    A file is untrusted input: nothing in it is executed, and it is checked
    before and while it is read. The class it names must be a registered,
    concrete xpml class (its module is imported if this process has not yet
    done so, but only modules inside ``xpml``); its parameters must be that
    class's parameters; attribute names must be identifiers hiding no method
    or property; ``n_features_in_`` must be a count and per-feature attributes
    (``coef_``, ``cluster_centers_``, ``support_vectors_``, ``means_``,
    ``components_``, ...) numeric arrays whose last axis has that length.

    Budgets, each checked before anything is allocated:

    * ``max_bytes`` of uncompressed content in all (JSON and arrays): the zip
      directory's declared sizes are checked before reading, and every byte
      read is counted, so a header that lies gets no further;
    * ``model.json`` at most ``min(max_bytes, MAX_JSON_BYTES)`` (16 MiB) and
      nested at most ``MAX_DEPTH`` (64) lists/objects deep;
    * each ``.npy`` header is parsed first: dtype bool, integer, floating,
      complex or fixed-width string; shape times item size must equal the
      entry's declared size and fit in what remains of the budget.

    Parameters
    ----------
    path : str, path-like or seekable binary file object
    backend : str, optional
        Put the fitted arrays on this backend ("numpy", "torch", "cupy",
        "array_api_strict"). Default: the active backend, else NumPy.
    device : optional
        Device for ``backend``.
    max_bytes : int, optional
        Budget of uncompressed bytes read. Default: the environment variable
        ``XPML_LOAD_MAX_BYTES`` if set, else 2 GiB (``DEFAULT_MAX_BYTES``).
    expected_class : type, optional
        Refuse a file that holds anything but this class or a subclass
        (``KMeans.load(path)`` passes ``KMeans``).

    Returns
    -------
    object
        The rebuilt estimator (or other :class:`xpml.base.Persistable`).

    Raises
    ------
    ValueError
        If the file is a folder, truncated, corrupted, not an xpml model file,
        over a budget, or holds another class than ``expected_class``. Only
        ``ValueError`` (a ``ModelFileError``) comes from a file's content.
    OSError
        If the file does not exist or cannot be opened.
    """
    from xpml._backend import _make

    limit = _max_bytes(max_bytes)
    be = _make(backend, device) if backend is not None else get_backend()
    xp = be.xp if be.name not in (None,) else None
    name = str(getattr(path, "name", path))
    fh, zf = _open_archive(path, name)
    try:
        infos = _check_directory(zf, limit, name)
        budget = _Budget(limit, name)
        doc = _read_json(zf, infos["model.json"], budget, name)
        root = doc.get("object")
        if not isinstance(root, dict) or "__object__" not in root:
            raise ModelFileError(name, "it holds no xpml object")
        decoder = _Decoder(zf, infos, budget, name, (xp, be.device))
        obj = decoder.decode_object(root, 1, expected_class)
        after_load = getattr(obj, "_after_load", None)
        if after_load is not None:  # what unpickling rebuilds (a tree's stack)
            after_load()
        return obj
    except ModelFileError:
        raise
    except _CONTENT_ERRORS as exc:
        raise ModelFileError(
            name, f"unexpected content ({type(exc).__name__}: {_brief(exc)})"
        ) from exc
    finally:
        zf.close()
        if fh is not path:
            fh.close()
