"""Exceptions and warnings raised by xpml.

Where scikit-learn has been imported, what xpml raises or warns with is also an
instance of scikit-learn's class of the same name (``NotFittedError``,
``ConvergenceWarning``, ``DataConversionWarning``): ``except
sklearn.exceptions.NotFittedError``, ``pytest.warns(sklearn.exceptions.
ConvergenceWarning)`` and warning filters written for scikit-learn see
xpml's.

The rule: the class is chosen when xpml raises or warns, by whether
``sklearn`` is in ``sys.modules`` then. xpml never imports scikit-learn itself
(importing it takes seconds, which a first ``fit`` that stops early would
otherwise pay). Code that names scikit-learn's class has imported scikit-learn,
so filters, ``pytest.warns`` and ``except`` clauses written with it always
match. Only an error or warning made *before* any scikit-learn import and
tested against scikit-learn's class *after* one (e.g. a recorded warning) is
xpml's class alone; it is always an instance of xpml's class
(``xpml.exceptions.ConvergenceWarning`` and the others), whatever was imported.
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
    """scikit-learn's exceptions module when scikit-learn has been imported in
    this process, else None (never imports scikit-learn: see the module notes)."""
    sk = _sys.modules.get("sklearn.exceptions")
    if sk is None and "sklearn" in _sys.modules:  # a partial import of sklearn
        import sklearn.exceptions as sk  # a small module without imports
    return sk


def _bridge(ours):
    """``ours``, or where scikit-learn has been imported a subclass of both ``ours``
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
