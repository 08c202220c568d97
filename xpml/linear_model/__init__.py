"""Linear models: least squares, ridge, lasso, logistic regression, perceptron."""

from xpml.linear_model._least_squares import LinearRegression

__all__ = ["LinearRegression"]
