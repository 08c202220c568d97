"""Find every public xpml estimator (used by the common test suite and the CLI)."""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["all_estimators", "import_errors", "plugin_modules"]

#: modules that failed to import during the last :func:`all_estimators` call
import_errors: dict = {}

_SKIP = {"xpml.bench", "xpml.demos", "xpml.__main__", "xpml.cli"}


def all_estimators(type_filter=None):
    """Sorted ``(name, class)`` pairs of public estimators in xpml.

    Parameters
    ----------
    type_filter : {"classifier", "regressor", "transformer", "clusterer"}, optional
    """
    import xpml
    from xpml.base import BaseEstimator

    import_errors.clear()
    for info in pkgutil.walk_packages(
        xpml.__path__,
        prefix="xpml.",
        onerror=lambda name: import_errors.setdefault(name, "?"),
    ):
        if any(info.name == s or info.name.startswith(s + ".") for s in _SKIP):
            continue
        try:
            importlib.import_module(info.name)
        except (
            Exception
        ) as exc:  # reported by tests/test_common.py::test_every_module_imports
            import_errors[info.name] = f"{type(exc).__name__}: {exc}"
    seen = {}
    stack = list(BaseEstimator.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if cls.__name__.startswith("_") or not cls.__module__.startswith("xpml."):
            continue
        if getattr(cls, "_xpml_abstract", False) or cls.__dict__.get(
            "_xpml_abstract", False
        ):
            continue
        if type_filter and getattr(cls, "_estimator_type", None) != type_filter:
            continue
        seen[cls.__name__] = cls
    return sorted(seen.items())


def plugin_modules(package, key, entry):
    """``{module.<key>: module}`` for the public modules of ``package`` (a
    package module) that define both ``key`` and ``entry``; used to find the
    benchmark suites and the demos."""
    found = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{package.__name__}.{info.name}")
        if hasattr(mod, key) and hasattr(mod, entry):
            found[getattr(mod, key)] = mod
    return dict(sorted(found.items()))
