"""One walker over nested arrays, with one rule for what is state.

Fitted estimators, layers and optimiser states hold arrays inside dicts, lists,
tuples and other xpml objects. Moving them between libraries, saving them,
comparing them across backends and training networks all walk the same
structure, so they share this walker and its rule:

* containers: ``dict`` (values), ``list``, ``tuple``;
* an xpml object (:class:`xpml.base.Persistable`): its **state**, i.e. every
  attribute that does not start with ``_cache`` (caches are rebuilt, never
  moved, saved or compared). Constructor parameters are walked too, since some
  hold trained objects (``Sequential(layers=...)``); a function applied to
  "arrays of the compute library" leaves a caller's parameter arrays alone;
* leaves: arrays of any array-API library (Python and NumPy scalars are not
  arrays here).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Iterator
from typing import Any

import array_api_compat

__all__ = ["is_array", "state_items", "tree_map", "tree_update", "tree_leaves"]


def is_array(v: Any) -> bool:
    """Whether ``v`` is an array of an array-API library (not a Python number)."""
    return array_api_compat.is_array_api_obj(v) and not isinstance(
        v, (bool, numbers.Number)
    )


def _is_object(v: Any) -> bool:
    from xpml.base import Persistable

    return isinstance(v, Persistable)


def state_items(obj: Any) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of each state attribute of an xpml object: every
    attribute that does not start with ``_cache``."""
    for name, value in vars(obj).items():
        if not name.startswith("_cache"):
            yield name, value


def tree_map(fn: Callable[[Any], Any], value: Any) -> Any:
    """``value`` with ``fn`` applied to every array inside it.

    Containers are rebuilt; xpml objects are shallow-copied with their state
    mapped (caches dropped). The input is not modified.
    """
    if is_array(value):
        return fn(value)
    if isinstance(value, dict):
        return {k: tree_map(fn, v) for k, v in value.items()}
    if isinstance(value, list):
        return [tree_map(fn, v) for v in value]
    if isinstance(value, tuple):
        return tuple(tree_map(fn, v) for v in value)
    if _is_object(value):
        new = copy.copy(value)
        new.__dict__ = {k: tree_map(fn, v) for k, v in state_items(value)}
        return new
    return value


def tree_update(obj: Any, fn: Callable[[Any], Any]) -> Any:
    """Apply ``fn`` to every array in the state of xpml object ``obj``, in place
    (the object keeps its identity; nested containers are rebuilt). Returns
    ``obj``."""
    for name, value in list(state_items(obj)):
        setattr(obj, name, tree_map(fn, value))
    return obj


def tree_leaves(value: Any, *, prefix: str = "", numbers_too: bool = False) -> list:
    """``[(path, leaf), ...]`` for every array inside ``value`` (and, with
    ``numbers_too``, every non-boolean number), in a stable order. Paths read
    like Python: ``coef_``, ``estimators_[3].tree_``, ``state['m']``."""
    out: list = []
    _leaves(value, prefix, numbers_too, out)
    return out


def _leaves(value: Any, path: str, numbers_too: bool, out: list) -> None:
    if is_array(value):
        out.append((path, value))
    elif numbers_too and isinstance(value, numbers.Number):
        if not isinstance(value, bool):
            out.append((path, value))
    elif isinstance(value, dict):
        for k, v in value.items():
            _leaves(v, f"{path}[{k!r}]", numbers_too, out)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _leaves(v, f"{path}[{i}]", numbers_too, out)
    elif _is_object(value):
        for k, v in state_items(value):
            _leaves(v, f"{path}.{k}" if path else k, numbers_too, out)
