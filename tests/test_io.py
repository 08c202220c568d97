"""Safe save/load and pickling."""

import io
import json
import os
import pickle
import stat
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from _data import linear

import xpml
from xpml.linear_model import LinearRegression


def _linear_doc(state, params=None):
    return {
        "__object__": "LinearRegression",
        "module": LinearRegression.__module__,
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


# ------------------------------------------------------- bounded, checked load
_HEAD = {"format": "xpml-model", "format_version": 1}


def _deflate(*parts):
    """A raw deflate stream of ``(data, repeats)`` parts made cheaply: each part
    is compressed once, ends on a full flush (byte-aligned, no history) and is
    repeated; an empty final block closes the stream."""
    out = []
    for data, reps in parts:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        out.append((c.compress(data) + c.flush(zlib.Z_FULL_FLUSH)) * reps)
    out.append(zlib.compressobj(9, zlib.DEFLATED, -15).flush())
    return b"".join(out)


def _raw_zip(path, entries):
    """Write a zip by hand so a test can lie: ``entries`` are ``(name, payload,
    crc, declared uncompressed size, method)`` with the payload already
    compressed (raw deflate for method 8, as is for method 0)."""
    out, central = bytearray(), bytearray()
    for name, payload, crc, size, method in entries:
        n, offset = name.encode(), len(out)
        out += struct.pack(
            "<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0x21,
            crc, len(payload), size, len(n), 0,
        ) + n + payload  # fmt: skip
        central += struct.pack(
            "<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, method, 0, 0x21,
            crc, len(payload), size, len(n), 0, 0, 0, 0, 0, offset,
        ) + n  # fmt: skip
    end = struct.pack(
        "<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
        len(central), len(out), 0,
    )  # fmt: skip
    path.write_bytes(bytes(out + central + end))
    return path


def _json_entry(doc):
    raw = json.dumps(doc).encode()
    return ("model.json", raw, zlib.crc32(raw), len(raw), 0)


def _npy_header(shape, dtype="<f8"):
    buf = io.BytesIO()
    header = {"descr": dtype, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def _coef_file(path, entry):
    """A LinearRegression file whose ``coef_`` is the array entry given."""
    doc = {**_HEAD, "object": _linear_doc({"coef_": {"__array__": "a0"}})}
    return _raw_zip(path, [_json_entry(doc), entry])


GiB = 1024**3
_ZEROS = bytes(1 << 24)  # 16 MiB


def _crafted_files(folder):
    """``{name: (path, max_bytes)}`` of small files that would inflate or
    allocate far past the budget."""
    files = {}
    bomb = _deflate((_ZEROS, 3 * GiB // len(_ZEROS)))  # ~3 MB inflating to 3 GiB
    files["declares 3 GiB"] = (
        _coef_file(folder / "bomb.xpml", ("arrays/a0.npy", bomb, 0, 3 * GiB, 8)),
        None,
    )
    head = _npy_header((16,))
    lying = _deflate((head + bytes(128), 1), (_ZEROS, 3 * GiB // len(_ZEROS)))
    files["declares 256 bytes, inflates to 3 GiB"] = (
        _coef_file(folder / "lie.xpml", ("arrays/a0.npy", lying, 0, len(head) + 128, 8)),
        None,
    )  # fmt: skip
    huge = _npy_header((GiB // 8,))  # 1 GiB of float64 in a 1 MB entry
    stored = huge + bytes(1 << 20)
    files["npy header claims 1 GiB"] = (
        _coef_file(folder / "shape.xpml", ("arrays/a0.npy", stored, zlib.crc32(stored), len(stored), 0)),
        None,
    )  # fmt: skip
    short = _deflate((huge, 1), (_ZEROS[: 1 << 20], 1))
    crc = zlib.crc32(huge + _ZEROS[: 1 << 20])  # right for what it holds
    files["declares 1 GiB, holds 1 MB"] = (
        _coef_file(folder / "short.xpml", ("arrays/a0.npy", short, crc, len(huge) + GiB, 8)),
        None,
    )  # fmt: skip
    files["1 GiB over max_bytes=512 MiB"] = (folder / "short.xpml", 512 * 1024**2)
    return files


_BOMB_CHILD = r"""
import json, resource, sys, time
import xpml
import xpml.linear_model  # the arrays, not the class lookup, are under test

cases = json.loads(sys.argv[1])
report = {}
for name, (path, max_bytes) in cases.items():
    t = time.perf_counter()
    try:
        xpml.load(path, **({} if max_bytes is None else {"max_bytes": max_bytes}))
        outcome = "loaded"
    except ValueError as exc:
        outcome = "ValueError: " + str(exc)
    except BaseException as exc:
        outcome = type(exc).__name__ + ": " + str(exc)
    report[name] = [outcome, time.perf_counter() - t]
# ru_maxrss survives exec on Linux (it starts at the parent's peak), so read
# this address space's own high-water mark where /proc has it
try:
    hwm = [ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")]
    report["peak_rss_mb"] = int(hwm[0].split()[1]) / 1024
except (OSError, IndexError):
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(report))
"""


def test_crafted_files_refused_fast_with_little_memory(tmp_path):
    """Each file is a few MB that would inflate to GiBs; each is refused with
    ValueError, and the whole child process peaks under 200 MB of resident
    memory (measured there: VmHWM, else getrusage); times are reported, not
    asserted."""
    pytest.importorskip("resource")
    files = _crafted_files(tmp_path)
    assert max(p.stat().st_size for p, _ in files.values()) < 4 * 1024**2
    cases = {k: [str(p), m] for k, (p, m) in files.items()}
    proc = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, json.dumps(cases)],
        env={k: v for k, v in _child_env().items() if k != "XPML_LOAD_MAX_BYTES"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    peak = report.pop("peak_rss_mb")
    print(f"\npeak RSS {peak:.0f} MB; seconds per file:")
    for name, (outcome, seconds) in report.items():
        print(f"  {seconds:.3f} s  {name}: {outcome.split('file: ')[-1][:100]}")
        assert outcome.startswith("ValueError: "), (name, outcome)
        assert "not a valid xpml model file" in outcome
    assert "max_bytes" in report["declares 3 GiB"][0]
    assert "crc" in report["declares 256 bytes, inflates to 3 GiB"][0].lower()
    assert "declares shape" in report["npy header claims 1 GiB"][0]
    assert "truncated" in report["declares 1 GiB, holds 1 MB"][0]
    assert "max_bytes=536870912" in report["1 GiB over max_bytes=512 MiB"][0]
    assert peak < 200, f"peak RSS {peak:.0f} MB"


def test_budget_parameter_and_environment_variable(tmp_path, monkeypatch):
    model, X = _fitted()
    path = tmp_path / "m.xpml"
    model.save(path)
    with pytest.raises(ValueError, match="max_bytes=100;.*XPML_LOAD_MAX_BYTES"):
        xpml.load(path, max_bytes=100)
    with pytest.raises(ValueError, match="max_bytes=100;"):
        LinearRegression.load(path, max_bytes=100)
    monkeypatch.setenv("XPML_LOAD_MAX_BYTES", "100")
    with pytest.raises(ValueError, match="max_bytes=100;"):
        xpml.load(path)
    np.testing.assert_array_equal(
        xpml.load(path, max_bytes=10**6).predict(X), model.predict(X)
    )
    monkeypatch.setenv("XPML_LOAD_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match="XPML_LOAD_MAX_BYTES must be a positive"):
        xpml.load(path)
    monkeypatch.delenv("XPML_LOAD_MAX_BYTES")
    with pytest.raises(ValueError, match="max_bytes must be a positive"):
        xpml.load(path, max_bytes=0)
    with pytest.raises(TypeError, match="max_bytes must be a positive int"):
        xpml.load(path, max_bytes=1e9)


def test_npy_headers_checked_before_allocating(tmp_path):
    def stored(name, data):
        return _coef_file(tmp_path / name, ("arrays/a0.npy", data, zlib.crc32(data), len(data), 0))  # fmt: skip

    cases = {
        "shape": (_npy_header((GiB,)) + bytes(64), "declares shape"),
        "dtype": (_npy_header((2,), "|O") + bytes(16), "dtype object"),
        "struct": (_npy_header((2,), [("a", "<f8")]) + bytes(16), "not allowed"),
        "datetime": (_npy_header((2,), "<M8[s]") + bytes(16), "not allowed"),
        "ndim": (_npy_header((1,) * 40) + bytes(8), "dimensions"),
        "magic": (b"\x93NUMPY\x09\x00" + bytes(64), "bad .npy header"),
        "short": (_npy_header((4,)) + bytes(8), "declares shape"),
    }
    for name, (data, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            xpml.load(stored(f"{name}.xpml", data))


def test_deep_nesting_refused(tmp_path):
    for depth, message in ((70, "nested more than 64"), (100_000, "nested too deeply")):
        text = (
            '{"format": "xpml-model", "format_version": 1, "object": '
            '{"__object__": "LinearRegression", "params": {}, "state": {"x_": '
            + "[" * depth + "]" * depth + "}}}"
        )  # fmt: skip
        raw = text.encode()
        p = _raw_zip(tmp_path / f"d{depth}.xpml", [("model.json", raw, zlib.crc32(raw), len(raw), 0)])  # fmt: skip
        with pytest.raises(ValueError, match=message):
            xpml.load(p)


def test_folder_and_missing_file(tmp_path):
    with pytest.raises(ValueError, match="is a folder"):
        xpml.load(tmp_path)
    with pytest.raises(FileNotFoundError):
        xpml.load(tmp_path / "nothing.xpml")


def test_class_checked(tmp_path):
    from _data import blobs

    from xpml.base import BaseEstimator
    from xpml.cluster import KMeans
    from xpml.svm import SVC

    X, y = blobs()
    path = tmp_path / "svc.xpml"
    SVC().fit(X, y).save(path)
    assert type(SVC.load(path)) is SVC and type(BaseEstimator.load(path)) is SVC
    with pytest.raises(ValueError, match="it holds a SVC, not a KMeans"):
        KMeans.load(path)
    for name in ("BaseEstimator", "Layer"):
        doc = {**_HEAD, "object": {"__object__": name, "params": {}, "state": {}}}
        p = _raw_zip(tmp_path / f"{name}.xpml", [_json_entry(doc)])
        with pytest.raises(ValueError, match="base class"):
            xpml.load(p)


def test_attribute_names_checked(tmp_path):
    cases = {
        "predict": "would hide LinearRegression.predict",
        "score": "would hide",
        "__class__": "not allowed",
        "for": "not allowed",
        "a-b": "not allowed",
        "fit_intercept": "repeats a parameter",
    }
    for i, (attr, message) in enumerate(cases.items()):
        doc = {**_HEAD, "object": _linear_doc({attr: 1})}
        with pytest.raises(ValueError, match=message):
            xpml.load(_raw_zip(tmp_path / f"{i}.xpml", [_json_entry(doc)]))


def _with_coef(tmp_path, name, coef, n_features=4):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, coef)
    data = buf.getvalue()
    state = {"coef_": {"__array__": "a0"}, "n_features_in_": n_features}
    doc = {**_HEAD, "object": _linear_doc(state)}
    entry = ("arrays/a0.npy", data, zlib.crc32(data), len(data), 0)
    return _raw_zip(tmp_path / name, [_json_entry(doc), entry])


def test_fitted_shapes_and_dtypes_checked(tmp_path):
    ok = xpml.load(_with_coef(tmp_path, "ok.xpml", np.ones(4)))
    assert ok.coef_.shape == (4,) and ok.n_features_in_ == 4
    bad = {
        "wide": (np.ones(5), "coef_ has shape \\(5,\\); its last axis"),
        "scalar": (np.float64(1.0), "coef_ has shape \\(\\)"),
        "strings": (np.array(["a", "b", "c", "d"]), "coef_ must be a numeric array"),
    }
    for name, (coef, message) in bad.items():
        with pytest.raises(ValueError, match=message):
            xpml.load(_with_coef(tmp_path, f"{name}.xpml", np.asarray(coef)))
    with pytest.raises(ValueError, match="n_features_in_ is 'four'"):
        xpml.load(_with_coef(tmp_path, "n.xpml", np.ones(4), "four"))


def _walk(node, out, depth=0):
    """Every ``(container, key)`` slot of a JSON document."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in list(items):
        out.append((node, k))
        if isinstance(v, (dict, list)):
            _walk(v, out, depth + 1)
    return out


def _junk_arrays():
    out = {}
    for key, arr in {
        "a900": np.array(["x", "yy"]),
        "a901": np.zeros((2, 3, 5), dtype=np.int8),
        "a902": np.float32(3.0),
        "a903": np.zeros((0, 7)),
        "a904": np.array([True, False]),
    }.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(arr))
        out[f"arrays/{key}.npy"] = buf.getvalue()
    return out


_JUNK = [
    None, True, -1, 2**70, 1e308, float("nan"), "x", "", [], {}, [[1, 2]],
    {"__array__": "a900"}, {"__array__": "a901"}, {"__array__": "a903"},
    {"__array__": "a904"}, {"__array__": 7}, {"__scalar__": "a901"},
    {"__scalar__": "a902"}, {"__tuple__": 5}, {"__tuple__": [1, [2]]},
    {"__dict__": [[[], 1]]}, {"__dict__": [[{"__dict__": []}, 1]]},
    {"__dict__": [[1]]}, {"__dict__": 3}, {"__complex__": ["a", 1]},
    {"__complex__": [1, 2]}, {"__object__": "SVC"}, {"__object__": 5},
    {"__object__": "SVC", "params": [], "state": {}},
    {"__object__": "KMeans", "params": {"n_clusters": "many"}, "state": {}},
    {"__object__": "Sequential", "params": {"layers": 3}},
    {"__object__": "BaseEstimator"}, {"__object__": "os.system"},
    {"__object__": "SVC", "module": "os", "state": {"predict": 1}},
    {"__array__": "a0", "extra": 1}, {"predict": 1}, {"__class__": 1},
]  # fmt: skip


def test_fuzzed_files_raise_only_value_error(tmp_path):
    """Random byte flips and random replaced JSON nodes either load or raise
    ValueError: never TypeError, KeyError, zipfile.BadZipFile and so on."""
    from _data import blobs

    from xpml.svm import SVC

    X, y = blobs()
    path = tmp_path / "svc.xpml"
    SVC(probability=True).fit(X, y).save(path)
    data, rng = path.read_bytes(), np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}

    def attempt(p):
        try:
            xpml.load(p)
            outcomes["loaded"] += 1
        except ValueError:
            outcomes["refused"] += 1

    for i in range(150):
        bad = bytearray(data)
        for pos in rng.integers(0, len(bad), size=rng.integers(1, 4)):
            bad[pos] ^= int(rng.integers(1, 256))
        (tmp_path / "flip.xpml").write_bytes(bytes(bad))
        attempt(tmp_path / "flip.xpml")
    with zipfile.ZipFile(path) as zf:
        doc = json.loads(zf.read("model.json"))
        entries = {n: zf.read(n) for n in zf.namelist() if n != "model.json"}
    entries.update(_junk_arrays())
    for i in range(300):
        mutated = json.loads(json.dumps(doc))
        slots = _walk(mutated, [])
        for j in rng.integers(0, len(slots), size=rng.integers(1, 3)):
            container, key = slots[j]
            container[key] = _JUNK[rng.integers(len(_JUNK))]
        p = tmp_path / "node.xpml"
        with zipfile.ZipFile(p, "w") as zf:
            zf.writestr("model.json", json.dumps(mutated))
            for name, raw in entries.items():
                zf.writestr(name, raw)
        attempt(p)
    assert outcomes["refused"] > 200, outcomes


def test_string_arrays_stay_numpy_on_another_backend(tmp_path):
    pytest.importorskip("torch")
    pd = pytest.importorskip("pandas")
    from _data import blobs

    from xpml.svm import SVC

    X, y = blobs()
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    labels = np.array(["ant", "bee", "cat"])[y]
    model = SVC(kernel="linear").fit(frame, labels)
    model.save(tmp_path / "m.xpml")
    for backend in ("torch", "array_api_strict"):
        again = xpml.load(tmp_path / "m.xpml", backend=backend)
        assert again.classes_.dtype.kind == "U" and isinstance(
            again.classes_, np.ndarray
        )
        np.testing.assert_array_equal(again.feature_names_in_, model.feature_names_in_)
        assert not isinstance(again.support_vectors_, np.ndarray)
    np.testing.assert_array_equal(
        xpml.load(tmp_path / "m.xpml").predict(frame), model.predict(frame)
    )


def test_feature_names_checked(tmp_path):
    for i, names in enumerate((["a", "b"], [["a"] * 4], [1.0, 2.0, 3.0, 4.0])):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(names))
        data = buf.getvalue()
        state = {"feature_names_in_": {"__array__": "a0"}, "n_features_in_": 4}
        doc = {**_HEAD, "object": _linear_doc(state)}
        entry = ("arrays/a0.npy", data, zlib.crc32(data), len(data), 0)
        p = _raw_zip(tmp_path / f"{i}.xpml", [_json_entry(doc), entry])
        with pytest.raises(ValueError, match="feature_names_in_ must be a 1-D string"):
            xpml.load(p)


def test_readers_never_see_a_partial_file(tmp_path):
    """Threads saving two models over one path while another thread loads it:
    every load sees one whole file or the other."""
    import threading

    from xpml.neighbors import NearestNeighbors

    X = np.random.default_rng(0).normal(size=(500, 20))  # ~80 kB, not instant
    small, _ = _fitted()
    big = NearestNeighbors().fit(X)
    path = tmp_path / "m.xpml"
    small.save(path)
    seen, errors, done = set(), [], threading.Event()

    def writer(model):
        for _ in range(15):
            model.save(path)

    def reader():
        while not done.is_set():
            try:
                seen.add(type(xpml.load(path)).__name__)
            except Exception as exc:  # any failure is the bug under test
                errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(m,)) for m in (small, big)]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert errors == []
    assert seen <= {"LinearRegression", "NearestNeighbors"} and seen
    assert sorted(os.listdir(tmp_path)) == ["m.xpml"]
