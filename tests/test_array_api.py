"""The backend-helper module, the shared maths and the tree walker; every
registered fast path checked against its portable twin."""

from __future__ import annotations

import importlib
import pkgutil

import numpy as np
import pytest

import xpml
from xpml._backend import to_numpy
from xpml.exceptions import LinAlgError
from xpml.utils import _array_api as aa
from xpml.utils import _math
from xpml.utils._tree import tree_leaves, tree_map


def _import_all():
    """Import every xpml module so that every fast path is registered."""
    for info in pkgutil.walk_packages(xpml.__path__, "xpml."):
        if ".demos." in info.name or ".bench." in info.name or "__main__" in info.name:
            continue
        importlib.import_module(info.name)


def test_namespace_names(xp):
    assert aa.namespace_name(xp.xp) == xp.backend
    checks = {
        "numpy": aa.is_numpy_namespace,
        "torch": aa.is_torch_namespace,
        "cupy": aa.is_cupy_namespace,
        "array_api_strict": aa.is_strict_namespace,
    }
    for name, check in checks.items():
        assert check(xp.xp) is (name == xp.backend)


def test_bare_and_wrapped_namespaces_agree():
    import array_api_compat.numpy as wrapped
    import torch

    assert aa.is_numpy_namespace(np) and aa.is_numpy_namespace(wrapped)
    assert aa.is_torch_namespace(torch) and not aa.is_numpy_namespace(torch)


def test_dtype_facts(xp):
    a = xp.asarray(np.zeros(3, dtype=np.float32))
    assert aa.itemsize(a.dtype, xp.xp) == 4
    assert aa.itemsize(xp.xp.int64, xp.xp) == 8
    assert aa.itemsize(xp.xp.bool, xp.xp) == 1
    assert aa.eps(xp.xp.float32, xp.xp) == float(np.finfo(np.float32).eps)
    assert aa.eps(xp.xp.float64, xp.xp) == float(np.finfo(np.float64).eps)
    assert str(aa.device(a)) == str(xp.xp.asarray(a).device)


def test_memory_budget(monkeypatch):
    monkeypatch.delenv("XPML_MEMORY_BUDGET", raising=False)
    assert aa.memory_budget() == aa.DEFAULT_MEMORY_BUDGET == 512 * 2**20
    assert aa.memory_budget(1000) == 1000
    for text, value in [("2G", 2 * 2**30), ("256MiB", 256 * 2**20), ("4096", 4096)]:
        monkeypatch.setenv("XPML_MEMORY_BUDGET", text)
        assert aa.memory_budget() == value
        assert aa.memory_budget(7) == 7
    monkeypatch.setenv("XPML_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="XPML_MEMORY_BUDGET"):
        aa.memory_budget()


def _modules_after(code):
    """Whether array-api-compat's NumPy wrapper and CuPy are imported after
    running ``code`` in a fresh interpreter (no XPML_ settings)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("XPML_")}
    probe = (
        code + "; import sys; "
        "print('array_api_compat.numpy' in sys.modules, 'cupy' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize(
    "module", ["xpml.kernels", "xpml.kernel_ridge", "xpml.linear_model", "xpml.linalg"]
)
def test_namespace_built_at_import_not_first_call(module):
    """Issue 16: the modules that compute build NumPy's wrapped namespace when
    imported (the first fit does not pay for it); ``import xpml`` stays light,
    and a library that is not imported is not imported by the preload."""
    assert _modules_after("import xpml") == ["False", "False"]
    assert _modules_after(f"import {module}") == ["True", "False"]
    before = _modules_after(
        "from xpml.utils._array_api import preload_namespace; "
        "preload_namespace('cupy'); preload_namespace('torch')"
    )
    assert before == ["False", "False"]


def test_dispatch_picks_fast_then_portable():
    @aa.portable("_test_op")
    def slow(x, /, *, xp):
        return x + 1

    @aa.fast_path("_test_op", "numpy")
    def quick(x, /, *, xp):
        return x + 1

    import array_api_strict

    assert aa.dispatch("_test_op", np) is quick
    assert aa.dispatch("_test_op", np, fast=False) is slow
    assert aa.dispatch("_test_op", array_api_strict) is slow
    with pytest.raises(LookupError):
        aa.dispatch("_no_such_op", np)


def _fast_path_cases():
    _import_all()
    cases = []
    for op, (libs, n_examples) in sorted(aa.registered_ops().items()):
        if op.startswith("_test"):
            continue
        for lib in libs:
            cases.append(pytest.param(op, lib, id=f"{op}-{lib}"))
    return cases


def _convert(value, lib):
    if isinstance(value, np.ndarray):
        return lib.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_convert(v, lib) for v in value)
    if isinstance(value, dict):
        return {k: _convert(v, lib) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("op", "library"), _fast_path_cases())
def test_fast_path_agrees_with_portable(op, library, xp):
    """Every fast path returns what its portable twin returns, on its library."""
    if xp.backend != library or xp.name == "numpy_readonly":
        # examples hold the solvers' own scratch buffers, which are writable
        pytest.skip(f"{op}'s fast path serves {library}, not {xp.name}")
    entry = aa._op_entry(op)
    assert entry.examples, f"fast path {op!r} registered without an example input"
    for example in entry.examples:
        args, kwargs = example()
        args, kwargs = _convert(args, xp), _convert(kwargs, xp)
        if "xp" in kwargs:
            kwargs["xp"] = xp.xp
        fast = aa.dispatch(op, xp.xp)(*args, **kwargs)
        slow = entry.portable(*args, **kwargs)
        for f, s in zip(tree_leaves(fast), tree_leaves(slow), strict=True):
            np.testing.assert_allclose(
                to_numpy(f[1]), to_numpy(s[1]), rtol=1e-10, atol=1e-12
            )


# ------------------------------------------------------------- shared maths


def test_sigmoid_softmax_match_scipy(xp):
    from scipy.special import expit, log_expit, log_softmax, softmax
    from scipy.special import logsumexp as sp_lse

    z = np.array([[-800.0, -3.0, 0.0, 2.5, 900.0], [1.0, 2.0, 3.0, 4.0, 5.0]])
    Z = xp.asarray(z)
    x = xp.xp
    np.testing.assert_allclose(to_numpy(_math.sigmoid(Z, xp=x)), expit(z), rtol=1e-15)
    np.testing.assert_allclose(
        to_numpy(_math.log_sigmoid(Z, xp=x)), log_expit(z), rtol=1e-14
    )
    np.testing.assert_allclose(
        to_numpy(_math.softmax(Z, xp=x)), softmax(z, axis=-1), rtol=1e-14, atol=1e-300
    )
    np.testing.assert_allclose(
        to_numpy(_math.log_softmax(Z, xp=x)), log_softmax(z, axis=-1), rtol=1e-14
    )
    np.testing.assert_allclose(
        to_numpy(_math.logsumexp(Z, xp=x, keepdims=False)), sp_lse(z, axis=-1)
    )


def test_spd_solve_regular_singular_and_overflow(xp):
    rng = np.random.default_rng(0)
    B = rng.normal(size=(6, 4))
    A = B @ B.T + 6 * np.eye(6)
    b = rng.normal(size=6)
    got = to_numpy(_math.spd_solve(xp.asarray(A), xp.asarray(b), xp=xp.xp))
    np.testing.assert_allclose(got, np.linalg.solve(A, b), rtol=1e-12)
    S = B @ B.T  # rank 4: the minimum-norm solution
    got = to_numpy(_math.spd_solve(xp.asarray(S), xp.asarray(b), xp=xp.xp))
    np.testing.assert_allclose(got, np.linalg.pinv(S) @ b, rtol=1e-8, atol=1e-10)
    bad = A.copy()
    bad[0, 0] = np.inf
    with pytest.raises(LinAlgError, match="normal equations"):
        _math.spd_solve(
            xp.asarray(bad), xp.asarray(b), xp=xp.xp, what="the normal equations"
        )


def test_encode_labels_against(xp):
    classes = xp.asarray(np.array([-1, 3, 7]))
    y = xp.asarray(np.array([7, -1, 3, 3]))
    codes = _math.encode_labels_against(classes, y, xp=xp.xp)
    assert to_numpy(codes).tolist() == [2, 0, 1, 1]
    with pytest.raises(ValueError, match=r"labels \[5\] not seen in fit"):
        _math.encode_labels_against(classes, xp.asarray(np.array([5, 3])), xp=xp.xp)
    names = np.array(["a", "b"])
    assert to_numpy(
        _math.encode_labels_against(names, np.array(["b", "a"]), xp=np)
    ).tolist() == [1, 0]


# ----------------------------------------------------------------- the walker


def test_tree_map_and_leaves_follow_one_state_rule():
    from xpml.linear_model import Ridge

    est = Ridge(alpha=2.0).fit(np.eye(3), np.arange(3.0))
    est._cache_scratch = np.ones(5)
    leaves = dict(tree_leaves(est))
    assert "coef_" in leaves and "_cache_scratch" not in leaves
    doubled = tree_map(lambda a: a * 2, {"m": est, "t": (np.ones(2), 3)})
    np.testing.assert_array_equal(doubled["m"].coef_, est.coef_ * 2)
    assert doubled["m"] is not est and doubled["m"].alpha == 2.0
    assert not hasattr(doubled["m"], "_cache_scratch")
    assert doubled["t"][1] == 3
    assert dict(tree_leaves({"a": [np.ones(1), 2.0]}, numbers_too=True)).keys() == {
        "['a'][0]",
        "['a'][1]",
    }
