"""Decision trees: classification (Gini, entropy) and regression (variance),
grown by a vectorised split search, with post-pruning on a validation set."""

from xpml.tree._classes import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    export_text,
)

__all__ = ["DecisionTreeClassifier", "DecisionTreeRegressor", "export_text"]
