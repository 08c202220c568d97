"""Issue 16: an unpickled or loaded tree or forest predicts without building
anything.

Its stack (routing table, leaf values) and the table's step and heap caches
are dropped from the pickle and the saved file; they are rebuilt at
unpickling (and by :func:`xpml.load`), so the first predict finds them ready
(spied: no builder runs in it) and answers as the original model does.
"""

import io
import pickle

import numpy as np
import pytest

import xpml
from xpml.ensemble import (
    AdaBoostClassifier,
    RandomForestClassifier,
    RandomForestRegressor,
)
from xpml.tree import DecisionTreeClassifier, DecisionTreeRegressor, _route, _stack


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(600, 7))
    y = (X[:, 0] + X[:, 1] * X[:, 2] > 0).astype(np.int64)
    return X, y


MODELS = [
    DecisionTreeClassifier(random_state=0),
    DecisionTreeRegressor(random_state=0),
    RandomForestClassifier(8, random_state=0),
    RandomForestRegressor(8, random_state=0),
    AdaBoostClassifier(n_estimators=6, random_state=0),
]


def _pickled(model):
    return pickle.loads(pickle.dumps(model))


def _saved(model):
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    return xpml.load(buf)


def _spy(monkeypatch, module, name, calls):
    real = getattr(module, name)

    def spy(*args, **kwargs):
        calls.append(name)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)


@pytest.mark.parametrize("reload", [_pickled, _saved], ids=["pickle", "xpml.load"])
@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
def test_reloaded_model_first_predict_builds_nothing(model, reload, monkeypatch):
    X, y = _data()
    fitted = model.fit(X[:400], y[:400])
    expected = fitted.predict(X[400:])
    loaded = reload(fitted)
    assert "_cache_stack" in vars(loaded)  # rebuilt at unpickling or load
    calls = []
    for name in ("stack_trees", "host_tree", "_host_table"):
        _spy(monkeypatch, _stack, name, calls)
    for name, cache in (("_step_table", "_cache_step"), ("_heap_top", "_cache_heap")):
        real = getattr(_route, name)

        def spy(table, *args, _real=real, _n=name, _c=cache):
            before = table.__dict__.get(_c)
            out = _real(table, *args)
            if table.__dict__.get(_c) is not before:  # built, not found
                calls.append(_n)
            return out

        monkeypatch.setattr(_route, name, spy)
    got = loaded.predict(X[400:])
    assert calls == []
    np.testing.assert_array_equal(got, expected)


def test_forest_members_build_no_stack_of_their_own():
    X, y = _data()
    forest = RandomForestClassifier(4, random_state=0).fit(X, y)
    loaded = pickle.loads(pickle.dumps(forest))
    assert all("_cache_stack" not in vars(m) for m in loaded.estimators_)
    assert loaded._cache_stack.n_trees == 4


def test_pickle_holds_no_stack():
    X, y = _data()
    tree = DecisionTreeClassifier(random_state=0).fit(X, y)
    assert tree.__getstate__()["_cache_stack"] is None  # only the mark


def test_boosting_members_keep_no_stack(monkeypatch):
    """AdaBoost predicts from a stack of its own (the members' votes as leaf
    values): its members' stacks are dropped after fit, so unpickling
    rebuilds that one stack and none of theirs."""
    X, y = _data()
    ada = AdaBoostClassifier(n_estimators=6, random_state=0).fit(X, y)
    expected = ada.predict(X)
    blob = pickle.dumps(ada)
    calls = []
    _spy(monkeypatch, _stack, "stack_trees", calls)
    loaded = pickle.loads(blob)
    assert calls == ["stack_trees"]
    assert all("_cache_stack" not in vars(m) for m in loaded.estimators_)
    np.testing.assert_array_equal(loaded.predict(X), expected)


def test_forest_predict_makes_its_walk_buffers_once(monkeypatch):
    """A forest's predict routes its input slice by slice through buffers
    made once per call (each slice made its own: 8,344 pages first touched
    in the first predict of a 100-tree forest on 20,000 rows, 1,879 now),
    and answers as when every slice had its own."""
    X, y = _data()
    forest = RandomForestClassifier(8, random_state=0).fit(X, y)
    Xt = np.tile(X, (50, 1))  # rows over several slices
    rows = _route._ROUTE_ROW_BYTES // (Xt.shape[1] * Xt.dtype.itemsize)
    assert Xt.shape[0] > 3 * rows
    made = []
    _spy(monkeypatch, _route, "_Walk", made)
    P = forest.predict_proba(Xt)
    assert len(made) == 1
    monkeypatch.setattr(_stack, "reusable_walk", lambda *a, **k: None)
    np.testing.assert_array_equal(P, forest.predict_proba(Xt))
    assert len(made) > 3  # one per slice without the shared buffers
