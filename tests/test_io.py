"""Safe save/load and pickling."""

import json
import pickle
import zipfile

import numpy as np
import pytest
from _data import linear

import xpml
from xpml.linear_model import LinearRegression


def _fitted():
    X, y = linear()
    return LinearRegression(fit_intercept=True).fit(X, y), X


def test_round_trip_bit_exact(tmp_path):
    model, X = _fitted()
    path = tmp_path / "m.xpml"
    model.save(path)
    loaded = xpml.load(path)
    assert (
        type(loaded) is LinearRegression and loaded.get_params() == model.get_params()
    )
    for attr in ("coef_", "intercept_", "singular_"):
        a, b = getattr(model, attr), getattr(loaded, attr)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    assert loaded.rank_ == model.rank_ and loaded.n_features_in_ == model.n_features_in_
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


def test_fitted_on_one_backend_loads_into_another(tmp_path):
    torch = pytest.importorskip("torch")
    X, y = linear()
    with xpml.backend("torch", output="backend"):
        model = LinearRegression().fit(X, y)
    assert isinstance(model.coef_, torch.Tensor)
    model.save(tmp_path / "m.xpml")
    on_numpy = xpml.load(tmp_path / "m.xpml")
    assert isinstance(on_numpy.coef_, np.ndarray)
    on_strict = xpml.load(tmp_path / "m.xpml", backend="array_api_strict")
    assert type(on_strict.coef_).__module__.startswith("array_api_strict")
    np.testing.assert_array_equal(on_numpy.coef_, model.coef_.numpy())


def test_truncated_file_clear_error(tmp_path):
    model, _ = _fitted()
    path = tmp_path / "m.xpml"
    model.save(path)
    data = path.read_bytes()
    for cut in (10, len(data) // 2, len(data) - 5):
        bad = tmp_path / f"cut{cut}.xpml"
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match="not a valid xpml model file"):
            xpml.load(bad)


def test_malformed_files_never_run_code(tmp_path):
    def write(doc, name):
        p = tmp_path / name
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("model.json", json.dumps(doc))
        return p

    base = {"format": "xpml-model", "format_version": 1}
    cases = {
        "unknown class": {
            **base,
            "object": {"__object__": "os.system", "params": {}, "state": {}},
        },
        "wrong tag": {"format": "pickle", "object": None},
        "bad param": {
            **base,
            "object": {
                "__object__": "LinearRegression",
                "params": {"evil": 1},
                "state": {},
            },
        },
        "missing array": {**base, "object": {"__array__": "a0"}},
    }
    for name, doc in cases.items():
        with pytest.raises(ValueError, match="not a valid xpml model file|format"):
            xpml.load(write(doc, name.replace(" ", "_")))
    # a pickled object array inside is refused (allow_pickle=False)
    p = tmp_path / "objarr.xpml"
    import io

    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(p, "w") as zf:
        zf.writestr("model.json", json.dumps({**base, "object": {"__array__": "a0"}}))
        zf.writestr("arrays/a0.npy", buf.getvalue())
    with pytest.raises(ValueError, match="could not be read safely"):
        xpml.load(p)
    not_zip = tmp_path / "plain.txt"
    not_zip.write_text("hello")
    with pytest.raises(ValueError, match="truncated or corrupted"):
        xpml.load(not_zip)


def test_unsaveable_parameter_is_refused(tmp_path):
    from xpml.base import BaseEstimator

    class _Holder(BaseEstimator):
        def __init__(self, f=None):
            self.f = f

    with pytest.raises(
        TypeError, match="callables such as a custom kernel cannot be saved"
    ):
        _Holder(f=lambda x: x).save(tmp_path / "x.xpml")


def test_pickle(tmp_path):
    model, X = _fitted()
    again = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
