"""Forward and backward stepwise feature selection by cross-validated score."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from array_api_compat import array_namespace

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, TransformerMixin
from xpml.exceptions import InvalidParameterError
from xpml.linear_model._ridge import Ridge as _Ridge
from xpml.model_selection import cross_val_score
from xpml.utils._array_api import device
from xpml.utils._param_validation import Interval, Options, validate_params
from xpml.utils.validation import check_is_fitted

__all__ = ["SequentialFeatureSelector"]


def _columns(X, idx, /, *, xp):
    """Columns ``idx`` (host ints) of ``X``, in ``X``'s library."""
    return xp.take(
        X,
        xp.asarray(np.asarray(idx, dtype=np.int64), device=device(X)),
        axis=1,
    )


class SequentialFeatureSelector(TransformerMixin, BaseEstimator):
    """Greedy stepwise feature selection scored by cross-validation.

    Forward selection starts from no feature and adds, one at a time, the
    feature whose addition gives the best mean cross-validated score;
    backward elimination starts from all features and removes the one whose
    removal scores best. Scores come from :func:`xpml.model_selection.cross_val_score`.

    Parameters
    ----------
    estimator : estimator
        Any xpml (or scikit-learn) estimator; cloned for each fit.
    n_features_to_select : "auto", int or float, default="auto"
        How many features to keep. An int is a count, a float in (0, 1) a
        fraction of ``d``. "auto": half of the features when ``tol`` is None;
        otherwise keep going while the score improves by more than ``tol``.
    tol : float or None, default=None
        With "auto", the smallest score improvement worth a step.
    direction : {"forward", "backward"}, default="forward"
    scoring : str, callable or None
        As in :func:`xpml.model_selection.cross_val_score` (None: ``estimator.score``).
    cv : int >= 2, splitter (an object with ``split``) or None, default=5

    Attributes
    ----------
    support_ : bool array (d,)
        The selected features (NumPy).
    n_features_to_select_ : int
    scores_ : list of float
        Best mean CV score after each step.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.linear_model import LinearRegression, SequentialFeatureSelector
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 5)); y = 3 * X[:, 1] - 2 * X[:, 4] + 0.1 * rng.normal(size=60)
    >>> sfs = SequentialFeatureSelector(LinearRegression(), n_features_to_select=2, cv=3).fit(X, y)
    >>> np.flatnonzero(sfs.support_).tolist()
    [1, 4]
    """

    _parameter_constraints = {
        "cv": [Interval(Integral, 2, None), None],  # or a splitter (see below)
        "direction": [Options("forward", "backward")],
        "n_features_to_select": [
            Options("auto"),
            Interval(Integral, 1, None),
            Interval(Real, 0, 1, closed="neither"),
        ],
        "scoring": [None, str, callable],
        "tol": [None, Real],
    }
    _xpml_tags = {
        "data": "regression",
        "test_params": {
            "estimator": _Ridge(alpha=1.0),
            "n_features_to_select": 2,
            "cv": 2,
        },
    }

    def __init__(
        self,
        estimator=None,
        *,
        n_features_to_select="auto",
        tol=None,
        direction="forward",
        scoring=None,
        cv=5,
    ):
        self.estimator = estimator
        self.n_features_to_select = n_features_to_select
        self.tol = tol
        self.direction = direction
        self.scoring = scoring
        self.cv = cv

    def _validate_params(self):
        """The declared checks, plus: ``cv`` may also be a splitter, and ``estimator``
        must have ``fit``."""
        params = self.get_params(deep=False)
        if hasattr(self.cv, "split") and not isinstance(self.cv, str):  # a splitter
            params.pop("cv")
        validate_params(type(self).__name__, params, self._parameter_constraints)
        if not hasattr(self.estimator, "fit"):
            raise InvalidParameterError(
                f"The 'estimator' parameter of {type(self).__name__} must be an estimator "
                f"with a fit method. Got {self.estimator!r} instead."
            )

    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Select features greedily; returns self."""
        ctx, X, y, _ = self._validate_fit_data(X, y, target="none")
        if y is None:
            raise ValueError(
                "SequentialFeatureSelector requires y to be passed, but y is None"
            )
        xp = ctx.xp
        d = int(X.shape[1])
        auto_tol = self.n_features_to_select == "auto" and self.tol is not None
        if self.n_features_to_select == "auto":
            k = d - 1 if auto_tol else max(d // 2, 1)
        elif isinstance(self.n_features_to_select, Integral):
            if self.n_features_to_select > d:
                raise ValueError(
                    f"n_features_to_select={self.n_features_to_select} must be at "
                    f"most the number of features of X, n_features={d}"
                )
            k = int(self.n_features_to_select)
        else:
            k = max(int(self.n_features_to_select * d), 1)
        forward = self.direction == "forward"
        current = set() if forward else set(range(d))
        steps = k if forward else d - k
        scores = []
        best_prev = -np.inf
        for _ in range(steps):
            candidates = sorted(set(range(d)) - current) if forward else sorted(current)
            results = []
            for j in candidates:
                cols = sorted(current | {j}) if forward else sorted(current - {j})
                s = cross_val_score(
                    self.estimator,
                    _columns(X, cols, xp=xp),
                    y,
                    cv=self.cv,
                    scoring=self.scoring,
                )
                results.append((float(np.mean(s)), j))
            best, j = max(results, key=lambda t: (t[0], -t[1]))
            if auto_tol and best - best_prev <= self.tol:
                break
            current = current | {j} if forward else current - {j}
            scores.append(best)
            best_prev = best
        support = np.zeros(d, dtype=bool)
        support[sorted(current)] = True
        self._cache_columns = np.flatnonzero(support)  # host copy: no read-back later
        self.support_ = xp.asarray(support, device=ctx.device)  # X's library
        self.n_features_to_select_ = len(current)
        self.scores_ = scores
        return self._fitted(ctx)

    def _columns_host(self):
        """Selected column indices on the host (read from ``support_`` once when
        the model was loaded or moved, not fitted here)."""
        if getattr(self, "_cache_columns", None) is None:
            self._cache_columns = np.flatnonzero(to_numpy(self.support_))
        return self._cache_columns

    def get_support(self, indices=False):
        """The selected features as a bool mask, or their indices (int64), in
        ``support_``'s library and device."""
        check_is_fitted(self)
        xp = array_namespace(self.support_)
        if indices:
            cols = np.asarray(self._columns_host(), dtype=np.int64)
            return xp.asarray(cols, device=device(self.support_))
        return xp.asarray(self.support_, copy=True)

    def transform(self, X: ArrayLike) -> Array:
        """The selected columns of ``X``, in the caller's library."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(_columns(X, self._columns_host(), xp=ctx.xp))
