"""The backend switch (ALGORITHMS.md §0.1)."""

import subprocess
import sys

import numpy as np
import pytest
from _data import linear

import xpml
from xpml._backend import enter, get_backend, to_numpy
from xpml.linear_model import LinearRegression


def test_default_follows_inputs(xp):
    X = xp.asarray(np.ones((3, 2)))
    ctx, (Xc,) = enter(X)
    assert xp.is_native(Xc)
    assert get_backend().name is None


def test_set_backend_and_context_restore():
    xpml.set_backend("numpy")
    assert get_backend().name == "numpy"
    with xpml.backend("torch", dtype="float32", output="backend") as b:
        assert (b.name, b.dtype, b.output) == ("torch", "float32", "backend")
        assert get_backend() is b
    assert get_backend().name == "numpy"


def test_unknown_backend_name():
    with pytest.raises(
        ValueError,
        match=r"unknown backend 'jax'.*'numpy', 'cupy', 'torch', 'array_api_strict'",
    ):
        xpml.set_backend("jax")


def test_missing_backend_library(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake(name, *a, **k):
        if name == "cupy" or name.startswith("cupy."):
            raise ImportError("No module named 'cupy'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", fake)
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    with pytest.raises(
        ImportError, match=r"backend 'cupy' needs the 'cupy' library.*xpml\[cuda12\]"
    ):
        xpml.set_backend("cupy")


def test_invalid_output_and_dtype():
    with pytest.raises(ValueError, match="output must be one of"):
        xpml.set_backend("numpy", output="gpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        xpml.set_backend("numpy", dtype="float16")


def test_mixed_libraries_refused_without_backend():
    torch = pytest.importorskip("torch")
    X, y = linear()
    with pytest.raises(TypeError, match=r"X is a numpy array and y is a torch array"):
        LinearRegression().fit(X, torch.asarray(y))


def test_mixed_libraries_converted_under_backend():
    torch = pytest.importorskip("torch")
    X, y = linear()
    with xpml.backend("numpy"):
        pred = LinearRegression().fit(X, torch.asarray(y)).predict(X)
    assert isinstance(pred, np.ndarray)


def test_torch_backend_computes_with_torch(monkeypatch):
    """Under set_backend('torch'), NumPy input is computed with torch tensors and
    comes back as NumPy."""
    torch = pytest.importorskip("torch")
    from xpml.linear_model import _least_squares

    seen = []
    real = _least_squares.pinv_solve

    def spy(A, b, **kw):
        seen.append((type(A), type(b)))
        return real(A, b, **kw)

    monkeypatch.setattr(_least_squares, "pinv_solve", spy)
    X, y = linear()
    xpml.set_backend("torch")
    model = LinearRegression().fit(X, y)
    pred = model.predict(X)
    assert seen == [(torch.Tensor, torch.Tensor)]
    assert isinstance(pred, np.ndarray) and isinstance(model.coef_, np.ndarray)
    xpml.set_backend(None)
    ref = LinearRegression().fit(X, y).predict(X)
    np.testing.assert_allclose(pred, ref, rtol=1e-12, atol=1e-12)


def test_output_backend_keeps_results_on_backend():
    torch = pytest.importorskip("torch")
    X, y = linear()
    with xpml.backend("torch", output="backend"):
        model = LinearRegression().fit(X, y)
        assert isinstance(model.coef_, torch.Tensor)
        assert isinstance(model.predict(X), torch.Tensor)


def test_dtype_policy(xp):
    X, y = linear()
    X32 = xp.asarray(X.astype(np.float32))
    model = LinearRegression().fit(X32, xp.asarray(y.astype(np.float32)))
    assert "float32" in str(model.predict(X32).dtype), "float32 input stays float32"
    Xi = xp.asarray(np.round(X * 10).astype(np.int64))
    assert "float64" in str(LinearRegression().fit(Xi, xp.asarray(y)).predict(Xi).dtype)
    with xpml.backend(xp.backend, dtype="float32"):
        assert "float32" in str(LinearRegression().fit(X, y).predict(X).dtype)


def test_float32_where_device_lacks_float64():
    strict = pytest.importorskip("array_api_strict")
    X, y = linear()
    with xpml.backend("array_api_strict", device="no_float64", output="backend"):
        pred = (
            LinearRegression()
            .fit(X.astype(np.float32), y.astype(np.float32))
            .predict(X.astype(np.float32))
        )
    assert pred.dtype == strict.float32
    with pytest.raises(TypeError, match="float64 was requested"):
        with xpml.backend("array_api_strict", device="no_float64", dtype="float64"):
            LinearRegression().fit(X.astype(np.float32), y.astype(np.float32))


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"XPML_BACKEND": "torch"}, "torch"),
        ({"XPML_BACKEND": "array_api_strict"}, "array_api_strict"),
        ({}, "None"),
    ],
)
def test_environment_variables(env, expected):
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("XPML_")}
    full.update(env)
    code = "import xpml; print(xpml.get_backend().name)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=full,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == expected


def test_xpml_device_environment_variable():
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("XPML_")}
    full.update({"XPML_BACKEND": "torch", "XPML_DEVICE": "cpu"})
    code = "import xpml; b = xpml.get_backend(); print(b.name, b.device)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=full,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "torch cpu"


def test_to_numpy_round_trip(xp):
    a = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(to_numpy(xp.asarray(a)), a)


def test_first_torch_use_from_many_threads_at_once():
    """Eight threads make the first use of the torch backend together, in fresh
    processes (the import races that crashed with 'partially initialized')."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import threading, numpy as np, xpml
        from xpml.linear_model import Ridge
        X = np.random.default_rng(0).normal(size=(50, 3)); y = X @ np.ones(3)
        errors, start = [], threading.Barrier(8)
        def work():
            try:
                start.wait()
                with xpml.backend("torch"):
                    Ridge().fit(X, y).predict(X)
            except Exception as exc:
                errors.append(repr(exc))
        threads = [threading.Thread(target=work) for _ in range(8)]
        [t.start() for t in threads]; [t.join() for t in threads]
        print(errors or "ok")
        """
    )
    for _ in range(2):
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
        assert r.stdout.strip() == "ok", r.stdout + r.stderr


def test_bind_backend_carries_a_block_into_worker_threads():
    from concurrent.futures import ThreadPoolExecutor

    def name():
        return xpml.get_backend().name

    with xpml.backend("array_api_strict"), ThreadPoolExecutor(2) as pool:
        plain = pool.submit(name).result()
        bound = pool.submit(xpml.bind_backend(name)).result()
    assert bound == "array_api_strict"
    assert plain != "array_api_strict"  # the block is per thread (documented)
    assert xpml.get_backend().name != "array_api_strict"
