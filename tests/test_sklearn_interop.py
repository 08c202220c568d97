"""scikit-learn's meta-tools work on xpml estimators with NumPy data."""

import numpy as np
import pytest
from _data import linear
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

from xpml.exceptions import InvalidParameterError, NotFittedError
from xpml.linear_model import LinearRegression


def test_clone_pipeline_gridsearch_cross_val():
    X, y = linear(n=60)
    est = LinearRegression(fit_intercept=False)
    c = clone(est)
    assert c.get_params() == est.get_params() and c is not est
    pipe = Pipeline([("scale", StandardScaler()), ("lr", LinearRegression())]).fit(X, y)
    assert pipe.score(X, y) > 0.99
    gs = GridSearchCV(LinearRegression(), {"fit_intercept": [True, False]}, cv=3).fit(
        X, y
    )
    assert gs.best_params_ == {"fit_intercept": True}
    scores = cross_val_score(LinearRegression(), X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.99)


def test_set_params_and_repr():
    est = LinearRegression().set_params(fit_intercept=False)
    assert repr(est) == "LinearRegression(fit_intercept=False)"
    with pytest.raises(ValueError, match="Invalid parameter 'bogus'"):
        est.set_params(bogus=1)


def test_invalid_parameter_value_lists_allowed():
    X, y = linear()
    with pytest.raises(
        InvalidParameterError,
        match=r"'fit_intercept' parameter of LinearRegression must be a bool",
    ):
        LinearRegression(fit_intercept="yes").fit(X, y)


def test_not_fitted_error_is_caught_as_sklearn_error():
    from sklearn.exceptions import NotFittedError as SkNotFitted

    X, _ = linear()
    with pytest.raises(NotFittedError):
        LinearRegression().predict(X)
    with pytest.raises(SkNotFitted):
        LinearRegression().predict(X)
