"""Ensembles of trees: bagging, random forests and AdaBoost."""

from xpml.ensemble._bagging import (
    BaggingClassifier,
    BaggingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from xpml.ensemble._weight_boosting import AdaBoostClassifier

__all__ = [
    "AdaBoostClassifier",
    "BaggingClassifier",
    "BaggingRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
]
