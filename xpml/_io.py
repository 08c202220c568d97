"""Safe save and load: a zip of one JSON document and ``.npy`` arrays.

Nothing in a file is executed or imported: classes are looked up by name in
xpml's own registry (:func:`xpml.base.registered_classes`), arrays are read with
``allow_pickle=False``, and anything unexpected raises ``ValueError``.
Arrays round-trip bit-exactly (``.npy`` keeps dtype and bytes); Python floats
round-trip exactly through JSON's shortest-repr floats.
"""

from __future__ import annotations

import io
import json
import numbers
import zipfile

import array_api_compat
import numpy as np

from xpml._backend import get_backend, move, to_numpy

__all__ = ["save", "load"]

FORMAT = "xpml-model"
FORMAT_VERSION = 1


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
        if host.dtype.kind == "O":
            raise TypeError(
                f"cannot save {where}: object arrays are not stored (not safe to load)"
            )
        key = f"a{len(arrays)}"
        arrays[key] = np.ascontiguousarray(host)
        return {"__array__": key}
    if isinstance(value, Persistable):
        cls = type(value)
        params = {
            k: _encode(v, arrays, f"{where}.{k}")
            for k, v in value.get_params(deep=False).items()
        }
        names = set(value.get_params(deep=False))
        state = {
            k: _encode(v, arrays, f"{where}.{k}")
            for k, v in vars(value).items()
            if k not in names and not k.startswith("_cache")
        }
        return {"__object__": cls.__name__, "params": params, "state": state}
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


def save(obj, path):
    """Save an xpml estimator (fitted or not) to ``path``.

    Raises
    ------
    TypeError
        If a parameter or attribute cannot be stored safely (e.g. a callable).
    """
    from xpml import __version__

    arrays: dict[str, np.ndarray] = {}
    doc = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "xpml_version": __version__,
        "object": _encode(obj, arrays, type(obj).__name__),
    }
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("model.json", json.dumps(doc))
        for key, arr in arrays.items():
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr, allow_pickle=False)
            zf.writestr(f"arrays/{key}.npy", buf.getvalue())


class _Decoder:
    def __init__(self, zf, path, xp, device):
        self.zf, self.path, self.xp, self.device = zf, path, xp, device
        self.names = set(zf.namelist())

    def bad(self, why):
        return ValueError(f"{self.path!r} is not a valid xpml model file: {why}")

    def array(self, key):
        name = f"arrays/{key}.npy"
        if not isinstance(key, str) or name not in self.names:
            raise self.bad(f"array {key!r} is missing")
        try:
            with self.zf.open(name) as fh:
                arr = np.lib.format.read_array(
                    io.BytesIO(fh.read()), allow_pickle=False
                )
        except ValueError as exc:
            raise self.bad(f"array {key!r} could not be read safely ({exc})") from exc
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise self.bad(f"array {key!r} is corrupted ({exc})") from exc
        return arr

    def decode(self, node):
        from xpml.base import registered_classes

        if node is None or isinstance(node, (bool, str, int, float)):
            return node
        if isinstance(node, list):
            return [self.decode(v) for v in node]
        if not isinstance(node, dict) or len(node) == 0:
            raise self.bad(f"unexpected entry {node!r}")
        if "__array__" in node:
            arr = self.array(node["__array__"])
            return arr if self.xp is None else move(arr, self.xp, self.device)
        if "__scalar__" in node:
            return self.array(node["__scalar__"])[()]
        if "__tuple__" in node:
            return tuple(self.decode(v) for v in node["__tuple__"])
        if "__dict__" in node:
            items = node["__dict__"]
            if not isinstance(items, list) or not all(
                isinstance(p, list) and len(p) == 2 for p in items
            ):
                raise self.bad("malformed mapping")
            return {_hashable(self.decode(k)): self.decode(v) for k, v in items}
        if "__complex__" in node:
            re_, im = node["__complex__"]
            return complex(re_, im)
        if "__object__" in node:
            name = node["__object__"]
            registry = registered_classes()
            if name not in registry:
                raise self.bad(
                    f"unknown class {name!r} (only xpml classes can be loaded)"
                )
            cls = registry[name]
            params = node.get("params", {})
            state = node.get("state", {})
            if not isinstance(params, dict) or not isinstance(state, dict):
                raise self.bad(f"malformed entry for {name}")
            allowed = set(cls._get_param_names())
            unknown = set(params) - allowed
            if unknown:
                raise self.bad(f"{name} has no parameters {sorted(unknown)}")
            obj = cls(**{k: self.decode(v) for k, v in params.items()})
            for k, v in state.items():
                if not isinstance(k, str) or k.startswith("__"):
                    raise self.bad(f"bad attribute name {k!r}")
                setattr(obj, k, self.decode(v))
            return obj
        raise self.bad(f"unknown entry with keys {sorted(node)}")


def _hashable(k):
    return tuple(k) if isinstance(k, list) else k


def load(path, *, backend=None, device=None):
    """Load an object saved with ``est.save(path)``.

    Parameters
    ----------
    path : str or path-like
    backend : str, optional
        Put the fitted arrays on this backend ("numpy", "torch", "cupy",
        "array_api_strict"). Default: the active backend, else NumPy.
    device : optional
        Device for ``backend``.

    Raises
    ------
    ValueError
        If the file is truncated, corrupted or not an xpml model file. No code
        from the file is ever run.
    """
    from xpml._backend import _make

    be = _make(backend, device) if backend is not None else get_backend()
    xp = be.xp if be.name not in (None,) else None
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(
            f"{str(path)!r} is not a valid xpml model file: it is truncated or corrupted ({exc})"
        ) from exc
    with zf:
        try:
            raw = zf.read("model.json")
        except KeyError as exc:
            raise ValueError(
                f"{str(path)!r} is not a valid xpml model file: no model.json"
            ) from exc
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise ValueError(
                f"{str(path)!r} is not a valid xpml model file: it is truncated or corrupted ({exc})"
            ) from exc
        try:
            doc = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{str(path)!r} is not a valid xpml model file: bad JSON ({exc})"
            ) from exc
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ValueError(
                f"{str(path)!r} is not a valid xpml model file: wrong format tag"
            )
        if doc.get("format_version") != FORMAT_VERSION:
            raise ValueError(
                f"{str(path)!r} has format version {doc.get('format_version')!r}; this xpml "
                f"reads version {FORMAT_VERSION}"
            )
        return _Decoder(zf, str(path), xp, be.device).decode(doc.get("object"))
