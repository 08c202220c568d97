"""Utilities: input validation, parameter constraints and estimator discovery."""

from xpml.utils.validation import (
    check_array,
    check_consistent_length,
    check_is_fitted,
    check_random_state,
    check_sample_weight,
)

__all__ = [
    "check_array",
    "check_consistent_length",
    "check_is_fitted",
    "check_random_state",
    "check_sample_weight",
]
