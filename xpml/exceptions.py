"""Exceptions and warnings raised by xpml."""

__all__ = ["NotFittedError", "InvalidParameterError", "ConvergenceWarning",
           "SeparableDataWarning", "DataConversionWarning"]


class NotFittedError(ValueError, AttributeError):
    """Raised when a method needing a fitted estimator is called before ``fit``."""


class InvalidParameterError(ValueError, TypeError):
    """Raised at the start of ``fit`` when a hyperparameter is not allowed."""


class ConvergenceWarning(UserWarning):
    """An iterative solver stopped before meeting its tolerance."""


class DataConversionWarning(UserWarning):
    """Input was converted to the form an estimator needs (e.g. a column-vector
    ``y`` flattened to 1-D)."""


class SeparableDataWarning(ConvergenceWarning):
    """Unregularised weights grow without bound because the data are separable."""


_bridged: dict = {}


def not_fitted_error(message):
    """A :class:`NotFittedError` to raise; when scikit-learn is already imported
    it also subclasses scikit-learn's ``NotFittedError``, so code that catches
    either (``check_estimator`` among it) works, without xpml importing
    scikit-learn itself."""
    import sys

    sk = sys.modules.get("sklearn.exceptions")
    if sk is None:
        return NotFittedError(message)
    cls = _bridged.get("cls")
    if cls is None:
        cls = type("NotFittedError", (NotFittedError, sk.NotFittedError),
                   {"__module__": __name__})
        _bridged["cls"] = cls
    return cls(message)
