"""Utilities: input validation, parameter constraints and estimator discovery.

The names below are imported on first use, so that the low-level helper
modules (``_array_api``, ``_math``, ``_tree``) can be imported by the backend
layer without pulling in validation (which itself needs the backend layer).
"""

import importlib

__all__ = [
    "check_array",
    "check_consistent_length",
    "check_is_fitted",
    "check_random_state",
    "check_sample_weight",
]


def __getattr__(name):
    if name in __all__:
        return getattr(importlib.import_module("xpml.utils.validation"), name)
    raise AttributeError(f"module 'xpml.utils' has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
