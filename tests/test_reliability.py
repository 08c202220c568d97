"""Issue 11's smaller findings: distance overflow, layer sizes, n_jobs=0."""

from __future__ import annotations

import numpy as np
import pytest

from xpml.exceptions import InvalidParameterError


def _data():
    X = np.random.default_rng(0).normal(size=(40, 3))
    return X, (X[:, 0] > 0).astype(int)


@pytest.mark.parametrize("name", ["KNeighborsClassifier", "NearestNeighbors", "KMeans"])
def test_distance_estimators_refuse_overflowing_data(name, xp):
    import xpml.cluster
    import xpml.neighbors

    cls = getattr(xpml.neighbors, name, None) or getattr(xpml.cluster, name)
    X, y = _data()
    est = cls(n_clusters=2) if name == "KMeans" else cls()
    labels = (xp.asarray(y),) if "Classifier" in name else ()
    with pytest.raises(ValueError, match="squared distances of X overflow"):
        est.fit(xp.asarray(X * 1e300), *labels)
    fitted = est.fit(xp.asarray(X), *labels)
    method = "kneighbors" if name == "NearestNeighbors" else "predict"
    with pytest.raises(ValueError, match="overflow"):
        getattr(fitted, method)(xp.asarray(X * 1e300))


def test_hidden_layer_sizes_must_be_positive():
    from xpml.nn import NeuralNetClassifier

    X, y = _data()
    with pytest.raises(ValueError, match="hidden_layer_sizes must hold ints >= 1"):
        NeuralNetClassifier(hidden_layer_sizes=(0,)).fit(X, y)


@pytest.mark.parametrize(
    "make",
    [
        lambda: __import__("xpml.ensemble", fromlist=["x"]).BaggingClassifier(n_jobs=0),
        lambda: __import__("xpml.ensemble", fromlist=["x"]).RandomForestClassifier(
            n_jobs=0
        ),
        lambda: __import__("xpml.linear_model", fromlist=["x"]).LogisticRegression(
            n_jobs=0
        ),
    ],
)
def test_n_jobs_zero_is_refused(make):
    X, y = _data()
    with pytest.raises(InvalidParameterError, match="n_jobs"):
        make().fit(X, y)
