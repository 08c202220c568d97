"""Instruments for checking how an algorithm uses its device.

:func:`count_syncs` counts, while a block of code runs on the torch backend,
the host synchronisations (a tensor read back as a Python number or a NumPy
array, or an operation whose output shape depends on the data), the
host-to-device uploads and the array operations. A sync stalls a GPU until all
queued work is done, so an algorithm that syncs once per inner iteration runs
at the speed of the round trip, not of the device; the counts measured on the
CPU are the ones a GPU would pay.

Examples
--------
>>> import pytest; _ = pytest.importorskip("torch")
>>> import numpy as np, xpml
>>> from xpml.linear_model import Ridge
>>> from xpml.testing import count_syncs
>>> X, y = np.eye(4), np.arange(4.0)
>>> with xpml.backend("torch"), count_syncs() as c:
...     _ = Ridge().fit(X, y)
>>> c.syncs >= 0 and c.ops > 0
True
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import sys
import weakref
from collections.abc import Iterator

import numpy as np

__all__ = ["SyncCount", "count_syncs", "SYNC_KINDS", "UPLOAD_KINDS"]

#: kinds of host synchronisation, as named in :attr:`SyncCount.by_kind`
SYNC_KINDS = (
    "item",  # Tensor.item()
    "float",  # float(t)
    "int",  # int(t)
    "bool",  # bool(t), `if t:`, `while t:`, `v in t`
    "index",  # operator.index(t): a tensor used as a Python index
    "complex",  # complex(t)
    "tolist",  # Tensor.tolist()
    "numpy",  # Tensor.numpy(), np.asarray(t)
    "repr",  # printing a tensor (format, str, repr)
    "mask_index",  # t[mask] / t[mask] = v with a boolean tensor mask
    "nonzero",  # nonzero, argwhere, where(cond): output shape depends on data
    "unique",  # unique, unique_consecutive
    "masked_select",
    "repeat_interleave",  # with tensor repeats: output size read back
    "bincount",  # output length from the data's maximum
    "compare",  # torch.equal / allclose / is_nonzero return a Python bool
    "linalg",  # factorisations that check their info code on the host
    "to_host",  # device tensor moved to the CPU
)
#: kinds of host-to-device upload, as named in :attr:`SyncCount.by_kind`
UPLOAD_KINDS = (
    "upload_host",  # a tensor made from host data, a host index array in t[i]
    "upload_fitted",  # a stored (fitted) array moved in by ``Context.take``
    "upload_device",  # a CPU tensor moved to an accelerator
)

_METADATA = frozenset(
    {
        "__get__",
        "__set__",
        "__len__",
        "dim",
        "ndimension",
        "size",
        "numel",
        "stride",
        "is_contiguous",
        "is_floating_point",
        "is_complex",
        "element_size",
        "data_ptr",
        "get_device",
        "__dlpack_device__",
    }
)


@dataclasses.dataclass
class SyncCount:
    """What :func:`count_syncs` saw.

    Attributes
    ----------
    ops : int
        Array operations inside the computation: torch functions and tensor
        methods, syncs and uploads included, attribute reads such as ``shape``
        and ``dtype`` not.
    by_kind : collections.Counter
        Syncs and uploads inside the computation, by kind (see
        :data:`SYNC_KINDS` and :data:`UPLOAD_KINDS`).
    edge_ops : int
        Operations at the edges of public calls (see :func:`count_syncs`).
    edge : collections.Counter
        Syncs and uploads at the edges, by kind.
    sites : collections.Counter
        ``"path.py:line kind"`` -> count for the syncs and uploads inside the
        computation, the line being the innermost one in the xpml package (or
        the caller's when no xpml code is on the stack); filled only with
        ``sites=True``.
    """

    ops: int = 0
    by_kind: collections.Counter = dataclasses.field(
        default_factory=collections.Counter
    )
    edge_ops: int = 0
    edge: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    sites: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    @property
    def syncs(self) -> int:
        """Host synchronisations inside the computation."""
        return sum(self.by_kind[k] for k in SYNC_KINDS)

    @property
    def uploads(self) -> int:
        """Host-to-device uploads inside the computation (fitted state included)."""
        return sum(self.by_kind[k] for k in UPLOAD_KINDS)

    @property
    def edge_syncs(self) -> int:
        """Host synchronisations at the edges (validation, output conversion)."""
        return sum(self.edge[k] for k in SYNC_KINDS)

    @property
    def edge_uploads(self) -> int:
        """Uploads at the edges (the inputs moved to the backend)."""
        return sum(self.edge[k] for k in UPLOAD_KINDS)

    def top(self, n: int = 10) -> list[tuple[str, int]]:
        """The ``n`` call sites with the most syncs and uploads (needs ``sites=True``)."""
        return self.sites.most_common(n)

    top_sites = top  # the name docs/DEVELOPING.md uses

    def summary(self) -> str:
        """A few lines for a failure message or a log."""
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(self.by_kind.items()) if v)
        lines = [
            f"syncs={self.syncs} uploads={self.uploads} ops={self.ops} "
            f"(edges: syncs={self.edge_syncs} uploads={self.edge_uploads} "
            f"ops={self.edge_ops})",
            f"by kind: {kinds or 'none'}",
        ]
        lines += [f"  {c:6d}  {s}" for s, c in self.top()]
        return "\n".join(lines)


# ------------------------------------------------------------ classification
def _edge_codes():
    """Code objects whose calls are the edges of a public call: the inputs
    moved in and validated, results and fitted attributes moved out."""
    from xpml import _backend, base
    from xpml.utils import validation

    edges = {
        _backend.enter: "in",
        base.BaseEstimator._validate_fit_data: "in",
        base.BaseEstimator._validate_predict_data: "in",
        validation.check_array: "in",
        validation.check_sample_weight: "in",
        validation.encode_labels: "in",
        _backend.Context.out: "out",
        base.BaseEstimator._fitted: "out",
        validation.decode_labels: "out",
        _backend.Context.take: "take",
    }
    return {f.__code__: where for f, where in edges.items()}


def _sync_table(torch):
    """torch callables -> the sync kind they always are."""
    T = torch.Tensor
    table = {
        T.item: "item",
        T.__float__: "float",
        T.__int__: "int",
        T.__bool__: "bool",
        T.__index__: "index",
        T.__contains__: "bool",
        T.__complex__: "complex",
        T.tolist: "tolist",
        T.numpy: "numpy",
        T.__array__: "numpy",
        T.__repr__: "repr",
        T.__format__: "repr",
        T.__str__: "repr",
        torch.nonzero: "nonzero",
        T.nonzero: "nonzero",
        torch.argwhere: "nonzero",
        T.argwhere: "nonzero",
        torch.unique: "unique",
        T.unique: "unique",
        torch.unique_consecutive: "unique",
        T.unique_consecutive: "unique",
        torch.masked_select: "masked_select",
        T.masked_select: "masked_select",
        torch.bincount: "bincount",
        T.bincount: "bincount",
        torch.equal: "compare",
        T.equal: "compare",
        torch.allclose: "compare",
        T.allclose: "compare",
        torch.is_nonzero: "compare",
        T.is_nonzero: "compare",
    }
    # documented to synchronise with the CPU (they check an info code)
    for name in (
        "cholesky eig eigh eigvals eigvalsh inv solve svd svdvals pinv "
        "matrix_rank cond lu_factor ldl_factor"
    ).split():
        table[getattr(torch.linalg, name)] = "linalg"
    for name in ("cholesky", "inverse", "svd", "pinverse"):
        table[getattr(torch, name)] = "linalg"
    for name in ("cholesky", "inverse", "svd", "pinverse"):
        table[getattr(T, name)] = "linalg"
    return table


def _is_host_data(obj, torch) -> bool:
    return not isinstance(obj, torch.Tensor)


def _index_kind(args, torch):
    """``t[index]`` / ``t[index] = value``: a boolean tensor mask gives an
    output sized by the data (a sync); host index arrays and lists travel to
    the device (an upload; torch takes no host arrays as values)."""
    index = args[1]
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items):
        return "mask_index"
    host = any(isinstance(i, (list, np.ndarray)) for i in items)
    return "upload_host" if host else None


def _target_device(args, kwargs, torch):
    """The device a ``Tensor.to`` call moves to, or None."""
    for a in (*args, kwargs.get("device"), kwargs.get("other")):
        if isinstance(a, torch.device):
            return a
        if isinstance(a, torch.Tensor):
            return a.device
        if isinstance(a, (str, int)) and not isinstance(a, bool):
            try:
                return torch.device(a)
            except (RuntimeError, TypeError):
                continue
    return None


def _transfer_kind(src, dst):
    if dst is None or src.type == dst.type:
        return None
    return "to_host" if dst.type == "cpu" else "upload_device"


class _Classifier:
    """Maps one torch call to its sync or upload kind (or None)."""

    def __init__(self, torch):
        self.torch = torch
        self.table = _sync_table(torch)
        T = torch.Tensor
        self.factories = {torch.asarray, torch.tensor, torch.as_tensor}
        self.getset = {T.__getitem__, T.__setitem__}
        self.moves = {T.to, T.cuda, T.cpu}

    def kind(self, func, args, kwargs):
        torch = self.torch
        k = self.table.get(func)
        if k is not None:
            return k
        if func in self.factories:
            data = args[0] if args else kwargs.get("data", kwargs.get("obj"))
            if _is_host_data(data, torch):
                return "upload_host"
            return _transfer_kind(data.device, _device_kw(kwargs, torch))
        if func in self.getset:
            return _index_kind(args, torch)
        if func is torch.where and len(args) + len(kwargs) == 1:
            return "nonzero"
        if func in (torch.repeat_interleave, torch.Tensor.repeat_interleave):
            rep = args[1] if len(args) > 1 else kwargs.get("repeats")
            tensor_rep = isinstance(rep, torch.Tensor) and rep.numel() > 1
            return "repeat_interleave" if tensor_rep else None
        if func in self.moves and args and isinstance(args[0], torch.Tensor):
            if func is torch.Tensor.cpu:
                dst = torch.device("cpu")
            elif func is torch.Tensor.cuda:
                dst = torch.device("cuda")
            else:
                dst = _target_device(args[1:], kwargs, torch)
            return _transfer_kind(args[0].device, dst)
        return None


def _device_kw(kwargs, torch):
    d = kwargs.get("device")
    return None if d is None else torch.device(d)


# ------------------------------------------------------------------ counting
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# machinery, not the algorithm: a site is the algorithm line that called it
_SKIPPED = {
    os.path.join(_PACKAGE, *f.split("/"))
    for f in ("testing.py", "_backend.py", "utils/_array_api.py")
}


def _site(frame) -> str:
    """The innermost line of xpml code on the stack (else the innermost caller)."""
    first = None
    while frame is not None:
        path = frame.f_code.co_filename
        if path not in _SKIPPED:
            if path.startswith(_PACKAGE):
                rel = os.path.relpath(path, os.path.dirname(_PACKAGE))
                return f"{rel}:{frame.f_lineno}"
            if first is None and "torch" not in path and "array_api" not in path:
                first = f"{os.path.basename(path)}:{frame.f_lineno}"
        frame = frame.f_back
    return first or "?"


def _where(frame, edges, stop) -> str | None:
    """The innermost edge ("in", "out", "take") on the stack, or None. The
    edges of an estimator used inside another's method (ensemble members, a
    selector's inner fits) are part of the outer computation: None."""
    while frame is not None and frame is not stop:
        where = edges.get(frame.f_code)
        if where is not None:
            return where if where == "take" or _outermost(frame, stop) else None
        frame = frame.f_back
    return None


def _outermost(frame, stop) -> bool:
    """Whether every estimator method on the stack belongs to one object."""
    from xpml.base import Persistable

    owner = None
    while frame is not None and frame is not stop:
        obj = frame.f_locals.get("self")
        if isinstance(obj, Persistable):
            if owner is not None and obj is not owner:
                return False
            owner = obj
        frame = frame.f_back
    return True


def _record(count, kind, where, frame, sites):
    if where in ("in", "out"):
        count.edge_ops += 1
        if kind is not None:
            count.edge[kind] += 1
        return
    count.ops += 1
    if kind is None:
        return
    if where == "take" and kind == "upload_host":
        kind = "upload_fitted"
    count.by_kind[kind] += 1
    if sites:
        count.sites[f"{_site(frame)} {kind}"] += 1


def _mode_class():
    import torch
    from torch.overrides import TorchFunctionMode

    class _CountingMode(TorchFunctionMode):
        def __init__(self, count, classifier, edges, stop, sites):
            super().__init__()
            self.count, self.classifier = count, classifier
            self.edges, self.stop, self.sites = edges, stop, sites
            self.downloaded = weakref.WeakSet()  # results of device -> CPU moves

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if getattr(func, "__name__", "") in _METADATA:
                return func(*args, **kwargs)
            kind = self.classifier.kind(func, args, kwargs)
            if kind == "numpy" and args[0] in self.downloaded:
                kind = None  # x.cpu().numpy(): the move was the sync
            self.note(kind)
            out = func(*args, **kwargs)
            if kind == "to_host" and isinstance(out, torch.Tensor):
                self.downloaded.add(out)
            return out

        def note(self, kind):
            frame = sys._getframe(2)
            where = _where(frame, self.edges, self.stop)
            _record(self.count, kind, where, frame, self.sites)

    return torch, _CountingMode


def _factory_slots(torch):
    """(module, name) of every reference to ``from_numpy`` / ``from_dlpack``
    that code reaches: torch's own and array-api-compat's copies."""
    import importlib

    mods = [torch, importlib.import_module("torch.utils.dlpack")]
    try:
        mods.append(importlib.import_module("array_api_compat.torch"))
    except ImportError:  # pragma: no cover - array-api-compat is a dependency
        pass
    names = ("from_numpy", "from_dlpack")
    return [(m, n) for m in mods for n in names if hasattr(m, n)]


@contextlib.contextmanager
def _spy_host_factories(torch, mode):
    """``from_numpy`` and ``from_dlpack`` take no part in torch's function
    modes: wrap them for the duration of the block."""
    patched = _factory_slots(torch)
    saved = [getattr(m, n) for m, n in patched]

    def wrap(fn):
        def spy(obj, *args, **kwargs):
            if not isinstance(obj, torch.Tensor):
                mode.note("upload_host")
            return fn(obj, *args, **kwargs)

        return spy

    try:
        for (m, n), fn in zip(patched, saved):
            setattr(m, n, wrap(fn))
        yield
    finally:
        for (m, n), fn in zip(patched, saved):
            setattr(m, n, fn)


@contextlib.contextmanager
def count_syncs(*, sites: bool = False) -> Iterator[SyncCount]:
    """Count host syncs, uploads and array operations of torch code in a block.

    Run the code under the torch backend (``xpml.backend("torch")``, CPU is
    enough: the counts are what a GPU would pay) or on torch tensors.

    What is counted, inside the computation:

    * **syncs**: a tensor read back on the host (``item``, ``float``,
      ``int``, ``bool``, ``operator.index``, ``tolist``, ``numpy``,
      ``np.asarray``, printing), operations whose output shape depends on the
      data (boolean-mask indexing and assignment, ``nonzero``, ``argwhere``,
      one-argument ``where``, ``unique``, ``masked_select``, ``bincount``,
      ``repeat_interleave`` with tensor repeats), ``equal`` / ``allclose``,
      torch.linalg factorisations documented to synchronise (``cholesky``,
      ``solve``, ``inv``, ``eigh``, ``svd``, ...; the ``_ex`` variants do
      not), and device-to-CPU moves;
    * **uploads**: tensors made from host data (``asarray``, ``tensor``,
      ``as_tensor``, ``from_numpy``, ``from_dlpack`` of a non-tensor, Python
      scalars and lists included), host index arrays or lists in ``t[i]``,
      stored (fitted) arrays moved in through ``Context.take`` (kind
      ``"upload_fitted"``), CPU-to-accelerator moves;
    * **ops**: every torch function or tensor method call (syncs and uploads
      included; reads of ``shape``, ``dtype``, ``device`` and the like not).

    The edges of a public call are counted apart (``edge``, ``edge_ops``): the
    inputs moved to the backend and validated (``enter``,
    ``_validate_fit_data``, ``_validate_predict_data``, ``check_array``,
    ``check_sample_weight``, ``encode_labels``) and the results and fitted
    attributes moved back (``Context.out``, ``_fitted``, ``decode_labels``).
    They cost a constant per call. An estimator used inside another's method
    (an ensemble's members, a selector's inner fits) has no edges of its own:
    its validation and conversions count inside the outer computation.

    Parameters
    ----------
    sites : bool, default=False
        Also record where each sync and upload happens (:meth:`SyncCount.top`).

    Yields
    ------
    SyncCount
        Filled in while the block runs.

    Notes
    -----
    Nested torch calls made by a counted call are not counted again (the mode
    is off while torch runs a call). ``from_numpy`` and
    ``from_dlpack`` are wrapped in torch, ``torch.utils.dlpack`` and
    array-api-compat's torch namespace for the duration of the block (not
    thread-safe); other code that imported them by name escapes.
    """
    torch, mode_class = _mode_class()
    count = SyncCount()
    stop = sys._getframe(2)  # the frame of the ``with`` statement
    mode = mode_class(count, _Classifier(torch), _edge_codes(), stop, sites)
    with _spy_host_factories(torch, mode), mode:
        yield count
