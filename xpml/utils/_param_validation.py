"""Declared hyperparameter constraints, checked at the start of ``fit``.

An estimator lists its allowed values once, next to the class::

    _parameter_constraints = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "kernel": [Options("linear", "rbf"), callable],
        "random_state": ["random_state"],
    }

Each entry is a list of alternatives; a value passes when one of them accepts it.
Alternatives are an :class:`Interval`, an :class:`Options`, a type, ``None``,
``callable``, or one of the strings "boolean", "random_state", "array-like".
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from xpml.exceptions import InvalidParameterError

__all__ = ["Interval", "Options", "validate_params"]


@dataclass(frozen=True)
class Interval:
    """Numbers of ``type`` in an interval; ``None`` bounds are unbounded.

    NaN is never accepted, and neither is ±inf unless ``allow_inf`` (an unbounded
    side means "any finite number": infinity breaks the arithmetic of a fit).
    """

    type: type
    left: float | None
    right: float | None
    closed: str = "both"  # "both", "left", "right", "neither"
    allow_inf: bool = False

    def accepts(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, self.type):
            return False
        if isinstance(v, numbers.Real) and v != v:  # NaN
            return False
        if (
            not self.allow_inf
            and isinstance(v, numbers.Real)
            and v in (float("inf"), float("-inf"))
        ):
            return False
        lo_ok = self.left is None or (
            v >= self.left if self.closed in ("both", "left") else v > self.left
        )
        hi_ok = self.right is None or (
            v <= self.right if self.closed in ("both", "right") else v < self.right
        )
        return lo_ok and hi_ok

    def __str__(self):
        kind = {numbers.Integral: "an int", numbers.Real: "a float"}.get(
            self.type, self.type.__name__
        )
        lb = "[" if self.closed in ("both", "left") else "("
        rb = "]" if self.closed in ("both", "right") else ")"
        lo = "-inf" if self.left is None else self.left
        hi = "inf" if self.right is None else self.right
        finite = "" if self.allow_inf else "finite "
        return f"{kind.replace('a ', 'a ' + finite, 1)} in the range {lb}{lo}, {hi}{rb}"


class Options:
    """One of a fixed set of values (usually strings)."""

    def __init__(self, *values):
        self.values = tuple(values)

    def accepts(self, v):
        return isinstance(v, (str, bool, numbers.Number, type(None))) and any(
            v == o and type(v) is type(o) for o in self.values
        )

    def __str__(self):
        return "one of {" + ", ".join(repr(v) for v in self.values) + "}"


def _accepts(constraint, v):
    if constraint is None:
        return v is None
    if constraint is callable:
        return callable(v) and not isinstance(v, type)
    if isinstance(constraint, (Interval, Options)):
        return constraint.accepts(v)
    if constraint == "boolean":
        return isinstance(v, (bool, np.bool_))
    if constraint == "random_state":
        return (
            v is None
            or isinstance(v, (np.random.Generator, np.random.RandomState))
            or (isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0)
        )
    if constraint == "array-like":
        return hasattr(v, "shape") or isinstance(v, (list, tuple))
    if constraint == "dict":
        return isinstance(v, dict)
    if isinstance(constraint, type):
        return isinstance(v, constraint)
    raise TypeError(f"unknown constraint {constraint!r}")


def _describe(constraint):
    if constraint is None:
        return "None"
    if constraint is callable:
        return "a callable"
    if isinstance(constraint, (Interval, Options)):
        return str(constraint)
    if constraint == "boolean":
        return "a bool"
    if constraint == "random_state":
        return "an int >= 0, a numpy Generator or None"
    if constraint == "array-like":
        return "an array-like"
    if constraint == "dict":
        return "a dict"
    if isinstance(constraint, type):
        return f"an instance of {constraint.__name__}"
    return str(constraint)


def validate_params(owner, params, constraints):
    """Raise :class:`InvalidParameterError` for the first parameter no
    alternative accepts; the message lists what is allowed."""
    for name, alternatives in constraints.items():
        if name not in params:
            continue
        v = params[name]
        if any(_accepts(c, v) for c in alternatives):
            continue
        allowed = " or ".join(_describe(c) for c in alternatives)
        raise InvalidParameterError(
            f"The {name!r} parameter of {owner} must be {allowed}. Got {v!r} instead."
        )
