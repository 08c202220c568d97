"""Exceptions and warnings raised by xpml.

Where scikit-learn is installed, what xpml raises or warns with is also an
instance of scikit-learn's class of the same name (``NotFittedError``,
``ConvergenceWarning``, ``DataConversionWarning``), whether or not scikit-learn
was imported first: ``except sklearn.exceptions.NotFittedError``,
``pytest.warns(sklearn.exceptions.ConvergenceWarning)`` and warning filters
written for scikit-learn see xpml's. xpml imports ``sklearn.exceptions`` only
when it raises or warns with one of these (never at import time), so a
program that never hits one pays nothing.
"""

__all__ = [
    "NotFittedError",
    "InvalidParameterError",
    "ConvergenceWarning",
    "SeparableDataWarning",
    "DataConversionWarning",
    "LinAlgError",
    "UndefinedMetricWarning",
    "warn",
    "not_fitted_error",
]

import importlib.util as _importlib_util
import sys as _sys
import warnings as _warnings

import numpy as _np


class NotFittedError(ValueError, AttributeError):
    """Raised when a method needing a fitted estimator is called before ``fit``."""


class InvalidParameterError(ValueError, TypeError):
    """Raised at the start of ``fit`` when a hyperparameter is not allowed."""


class LinAlgError(_np.linalg.LinAlgError):
    """A linear-algebra step failed (a singular or non-finite system); the message
    names the step and the likely cause. A ``ValueError`` (NumPy's LinAlgError
    is one), so code catching either sees it."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


class DataConversionWarning(UserWarning):
    """Input was converted to the form an estimator needs (e.g. a column-vector
    ``y`` flattened to 1-D)."""


class UndefinedMetricWarning(UserWarning):
    """A metric is not defined for the data given (e.g. R² of one sample)."""


class SeparableDataWarning(ConvergenceWarning):
    """Unregularised weights grow without bound because the data are separable."""


_bridged: dict = {}


def _sklearn_exceptions():
    """scikit-learn's exceptions module when scikit-learn is installed, else None."""
    sk = _sys.modules.get("sklearn.exceptions")
    if sk is None and _importlib_util.find_spec("sklearn") is not None:
        import sklearn.exceptions as sk
    return sk


def _bridge(ours):
    """``ours``, or where scikit-learn is installed a subclass of both ``ours``
    and scikit-learn's class of the same name (or, for a subclass such as
    :class:`SeparableDataWarning`, of the bridged parent)."""
    sk = _sklearn_exceptions()
    if sk is None:
        return ours
    cls = _bridged.get(ours.__name__)
    if cls is not None:
        return cls
    theirs = getattr(sk, ours.__name__, None)
    if theirs is None:
        parent = ours.__mro__[1]
        if parent in (Exception, Warning, UserWarning, ValueError):
            return ours
        theirs = _bridge(parent)
    cls = type(ours.__name__, (ours, theirs), {"__module__": __name__})
    cls.__doc__ = ours.__doc__
    _bridged[ours.__name__] = cls
    return cls


def warn(category, message, *, stacklevel=2):
    """``warnings.warn(message, category)`` with ``category`` bridged to
    scikit-learn's class of the same name."""
    _warnings.warn(message, _bridge(category), stacklevel=stacklevel + 1)


def not_fitted_error(message):
    """A :class:`NotFittedError` to raise (bridged to scikit-learn's)."""
    return _bridge(NotFittedError)(message)


def data_conversion_warning():
    """The :class:`DataConversionWarning` class to warn with (bridged to scikit-learn's)."""
    return _bridge(DataConversionWarning)
