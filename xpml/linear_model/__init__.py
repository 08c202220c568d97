"""Linear models: least squares, ridge, lasso, logistic regression, perceptron,
and stepwise feature selection."""

from xpml.linear_model._coordinate_descent import Lasso, lasso_path
from xpml.linear_model._feature_selection import SequentialFeatureSelector
from xpml.linear_model._least_squares import LinearRegression
from xpml.linear_model._logistic import LogisticRegression
from xpml.linear_model._perceptron import Perceptron
from xpml.linear_model._ridge import Ridge

__all__ = [
    "LinearRegression",
    "Ridge",
    "Lasso",
    "lasso_path",
    "LogisticRegression",
    "Perceptron",
    "SequentialFeatureSelector",
]
