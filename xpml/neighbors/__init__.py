"""Nearest neighbours: exhaustive search on tiled distance blocks, k-d tree, and
an approximate k-d tree mode."""

from xpml.neighbors._classes import (
    KNeighborsClassifier,
    KNeighborsRegressor,
    NearestNeighbors,
)
from xpml.neighbors._search import recall_at_k

__all__ = [
    "NearestNeighbors",
    "KNeighborsClassifier",
    "KNeighborsRegressor",
    "recall_at_k",
]
