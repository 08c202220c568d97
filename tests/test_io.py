"""Safe save/load and pickling."""

import io
import json
import os
import pickle
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _data import linear

import xpml
from xpml.linear_model import LinearRegression


def _linear_doc(state, params=None):
    return {
        "__object__": "LinearRegression",
        "params": params or {},
        "state": state,
    }


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
    buf = io.BytesIO()
    np.save(buf, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with zipfile.ZipFile(p, "w") as zf:
        doc = {**base, "object": _linear_doc({"coef_": {"__array__": "a0"}})}
        zf.writestr("model.json", json.dumps(doc))
        zf.writestr("arrays/a0.npy", buf.getvalue())
    with pytest.raises(ValueError, match="dtype object is not allowed"):
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


# --------------------------------------------------------------- atomic save
_FSIZE_CHILD = r"""
import errno, resource, signal, sys
import numpy as np
from xpml.neighbors import NearestNeighbors

big = NearestNeighbors().fit(np.random.default_rng(0).normal(size=(2000, 50)))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit raises
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))
try:
    big.save(sys.argv[1])
except OSError as exc:
    print("refused", errno.errorcode.get(exc.errno))
else:
    print("saved")
"""


def _child_env():
    root = str(Path(xpml.__file__).resolve().parent.parent)
    return {**os.environ, "PYTHONPATH": root}


def _bits(model):
    return {k: v.tobytes() for k, v in vars(model).items() if hasattr(v, "tobytes")}


def test_save_interrupted_by_file_size_limit_keeps_previous_file(tmp_path):
    pytest.importorskip("resource")
    model, X = _fitted()
    path = tmp_path / "m.xpml"
    model.save(path)
    before = path.read_bytes()
    proc = subprocess.run(
        [sys.executable, "-c", _FSIZE_CHILD, str(path)],
        env=_child_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout.split() == ["refused", "EFBIG"], proc.stdout + proc.stderr
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.xpml"], "temporary file left behind"
    again = xpml.load(path)
    assert _bits(again) == _bits(model)
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def test_failed_save_keeps_previous_file_and_removes_temporary(tmp_path, monkeypatch):
    from xpml import _io

    model, _ = _fitted()
    path = tmp_path / "m.xpml"
    model.save(path)
    before = path.read_bytes()

    def half_then_fail(fh, doc, arrays):
        fh.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(_io, "_write_zip", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        model.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.xpml"]
    model.lam = lambda x: x  # an unsaveable attribute: refused before writing
    with pytest.raises(TypeError, match="cannot save"):
        model.save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["m.xpml"]


def test_save_keeps_permissions_and_links(tmp_path):
    model, _ = _fitted()
    umask = os.umask(0)
    os.umask(umask)
    path = tmp_path / "m.xpml"
    model.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask
    path.chmod(0o640)
    model.save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    link = tmp_path / "link.xpml"
    link.symlink_to(path)
    Ridge = pytest.importorskip("xpml.linear_model").Ridge
    X, y = linear()
    Ridge().fit(X, y).save(link)
    assert link.is_symlink() and type(xpml.load(path)).__name__ == "Ridge"
    with pytest.raises(IsADirectoryError, match="folder"):
        model.save(tmp_path)


def test_save_and_load_through_file_objects(tmp_path):
    model, X = _fitted()
    buf = io.BytesIO()
    model.save(buf)
    buf.seek(0)
    np.testing.assert_array_equal(xpml.load(buf).predict(X), model.predict(X))
