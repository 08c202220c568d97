"""pandas input: ``feature_names_in_`` and scikit-learn's column checks, on
every registered estimator that takes a 2-D table."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from test_common import ESTIMATORS, IDS, _data, _fit, _make

pd = pytest.importorskip("pandas")


def _tabular(cls):
    return _make(cls)


def _predictor(est):
    for m in ("predict", "transform", "decision_function", "predict_proba"):
        if hasattr(est, m):
            return getattr(est, m)
    pytest.skip("no prediction method")


@pytest.mark.parametrize("cls", [c for _, c in ESTIMATORS], ids=IDS)
def test_feature_names_in_and_column_checks(cls):
    est = _tabular(cls)
    X, y = _data(est)
    cols = [f"f{i}" for i in range(X.shape[1])]
    df = pd.DataFrame(X, columns=cols)
    _fit(est, df, y)
    assert est.feature_names_in_.tolist() == cols
    predict = _predictor(est)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        predict(df)  # same columns: no warning
    with pytest.raises(ValueError, match="same order as they were in fit"):
        predict(df[cols[::-1]])
    renamed = df.rename(columns={"f0": "other"})
    with pytest.raises(ValueError, match="(?s)unseen at fit time:\n- other"):
        predict(renamed)
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        predict(X)


def test_names_dropped_refit_and_non_string_columns():
    from xpml.linear_model import Ridge

    X = np.random.default_rng(0).normal(size=(20, 3))
    y = X @ np.ones(3)
    est = Ridge().fit(pd.DataFrame(X, columns=["a", "b", "c"]), y)
    est.fit(X, y)
    assert not hasattr(est, "feature_names_in_")
    with pytest.warns(UserWarning, match="fitted without feature names"):
        est.predict(pd.DataFrame(X, columns=["a", "b", "c"]))
    est.fit(pd.DataFrame(X), y)  # integer column names: no names recorded
    assert not hasattr(est, "feature_names_in_")
    with pytest.raises(TypeError, match="only supported if all input features"):
        est.fit(pd.DataFrame(X, columns=["a", 1, "c"]), y)


def test_saved_model_keeps_feature_names(tmp_path):
    import xpml
    from xpml.linear_model import Ridge

    X = np.random.default_rng(0).normal(size=(20, 3))
    est = Ridge().fit(pd.DataFrame(X, columns=["a", "b", "c"]), X[:, 0])
    est.save(tmp_path / "m.xpml")
    loaded = xpml.load(tmp_path / "m.xpml")
    assert loaded.feature_names_in_.tolist() == ["a", "b", "c"]
    with pytest.raises(ValueError, match="same order"):
        loaded.predict(pd.DataFrame(X, columns=["c", "b", "a"]))
