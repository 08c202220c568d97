"""Exceptions and warnings raised by xpml."""

__all__ = [
    "NotFittedError",
    "InvalidParameterError",
    "ConvergenceWarning",
    "SeparableDataWarning",
    "DataConversionWarning",
    "LinAlgError",
]

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


class SeparableDataWarning(ConvergenceWarning):
    """Unregularised weights grow without bound because the data are separable."""


_bridged: dict = {}


def _bridge(ours):
    """``ours``, or, when scikit-learn is already imported, a subclass of both
    ``ours`` and scikit-learn's class of the same name, so code catching or
    filtering either (``check_estimator`` among it) sees it. xpml never imports
    scikit-learn itself."""
    import sys

    sk = sys.modules.get("sklearn.exceptions")
    if sk is None:
        return ours
    cls = _bridged.get(ours.__name__)
    if cls is None:
        cls = type(
            ours.__name__, (ours, getattr(sk, ours.__name__)), {"__module__": __name__}
        )
        _bridged[ours.__name__] = cls
    return cls


def not_fitted_error(message):
    """A :class:`NotFittedError` to raise (bridged to scikit-learn's)."""
    return _bridge(NotFittedError)(message)


def data_conversion_warning():
    """The :class:`DataConversionWarning` class to warn with (bridged to scikit-learn's)."""
    return _bridge(DataConversionWarning)
