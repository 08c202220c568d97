"""Every estimator computes on, returns on and keeps its state on its inputs' device.

array_api_strict offers devices other than the default one
(``array_api_strict.Device("device1")``) and refuses to combine arrays from two
devices, so an array made without ``device=`` inside an algorithm (``xp.zeros``,
``xp.asarray`` of host data) fails loudly here, as it would on a second GPU.
Each registered estimator (the registry, parameters and data of
``tests/test_common.py``) is fitted and used with ``device1`` inputs, three
ways: no backend set; ``xpml.backend("array_api_strict", device=DEVICE)``; and
NumPy inputs under ``xpml.backend("array_api_strict", device="device1",
output="backend")``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_common import ESTIMATORS, _data, _make

import xpml
from xpml._backend import library_name
from xpml.parity import DEFAULT_METHODS
from xpml.utils._tree import tree_leaves

xps = pytest.importorskip("array_api_strict")
DEVICE = xps.Device("device1")

_CLASSES = dict(ESTIMATORS)
# further parameter settings whose code paths make arrays of their own
EXTRA = [
    ("SVC", {"probability": True, "random_state": 0}),
    ("SVC", {"kernel": "linear"}),
    ("KMeans", {"n_clusters": 3, "init": "forgy", "random_state": 0}),
    ("KNeighborsClassifier", {"weights": "distance"}),
    ("PCA", {"whiten": True}),
    ("LinearSVC", {"loss": "hinge", "random_state": 0}),
]

# estimator id -> why it cannot keep all of its state in the inputs' library
HOST_STATE: dict[str, str] = {}


def _cases():
    out = [(name, None) for name, _ in ESTIMATORS]
    return out + EXTRA


def _id(case):
    name, params = case
    if params is None:
        return name
    return f"{name}({','.join(f'{k}={v!r}' for k, v in params.items())})"


CASES = _cases()
IDS = [_id(c) for c in CASES]


def _build(case):
    name, params = case
    cls = _CLASSES[name]
    est = _make(cls) if params is None else cls(**params)
    X, y = _data(est)
    return est, X, y


def _on_device(a):
    return xps.asarray(a, device=DEVICE)


MODES = ("inputs", "backend", "backend-numpy")


def _run(est, X, y, mode):
    """Fit and call every prediction method; returns {method: result}."""
    if mode == "backend-numpy":
        ctx = xpml.backend("array_api_strict", device="device1", output="backend")
    else:
        X, y = _on_device(X), None if y is None else _on_device(y)
        ctx = (
            xpml.backend("array_api_strict", device=DEVICE)
            if mode == "backend"
            else xpml.backend(None)
        )
    out = {}
    with ctx:
        est.fit(X) if y is None else est.fit(X, y)
        for m in DEFAULT_METHODS + ("kneighbors",):
            if hasattr(est, m):
                try:
                    out[m] = getattr(est, m)(X)
                except (AttributeError, NotImplementedError):
                    pass
        if y is not None and hasattr(est, "score"):
            out["score"] = est.score(X, y)
    return out


def _misplaced(results, est):
    """Names of results and state arrays not on DEVICE."""
    bad = []
    for m, r in results.items():
        if m == "score":
            if not isinstance(r, float):
                bad.append(f"score returned {type(r).__name__}, not a float")
            continue
        for i, a in enumerate(r if isinstance(r, tuple) else (r,)):
            if library_name(a) != "array_api_strict":
                bad.append(f"{m}[{i}] is a {library_name(a)} array")
            elif a.device != DEVICE:
                bad.append(f"{m}[{i}] on {a.device}")
    for path, leaf in tree_leaves(est):
        if library_name(leaf) == "array_api_strict" and leaf.device != DEVICE:
            bad.append(f"{path} on {leaf.device}")
    return bad


_FITTED: dict = {}


def _fitted(case, mode):
    """The estimator fitted and used in ``mode``, and its results (one run per
    test session: both tests below read it)."""
    key = (_id(case), mode)
    if key not in _FITTED:
        est, X, y = _build(case)
        _FITTED[key] = est, _run(est, X, y, mode)
    return _FITTED[key]


# the extra settings run with device inputs only (their NumPy-input path is
# the registry estimator's)
PLACEMENTS = [
    pytest.param(c, m, id=f"{i}-{m}")
    for c, i in zip(CASES, IDS)
    for m in MODES
    if c[1] is None or m != "backend-numpy"
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case, mode", PLACEMENTS)
def test_results_and_state_stay_on_the_device(case, mode):
    est, results = _fitted(case, mode)
    assert results or hasattr(est, "labels_"), "nothing was computed"
    bad = _misplaced(results, est)
    assert not bad, f"not on {DEVICE}: {bad}"


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            c,
            id=i,
            marks=[pytest.mark.xfail(strict=True, reason=HOST_STATE[i])]
            if i in HOST_STATE
            else [],
        )
        for c, i in zip(CASES, IDS)
    ],
)
def test_fitted_state_is_in_the_inputs_library(case):
    """No NumPy arrays left in the state of a model fitted on device arrays."""
    est, _ = _fitted(case, "inputs")
    host = [
        p for p, leaf in tree_leaves(est) if library_name(leaf) != "array_api_strict"
    ]
    assert not host, f"fitted state held in another library: {host}"


def test_backend_accepts_the_device_object_and_its_name():
    for spelling in (DEVICE, "device1"):
        with xpml.backend("array_api_strict", device=spelling) as b:
            assert b.device == DEVICE
            ctx, (a,) = xpml._backend.enter(np.ones(3))
            assert ctx.device == DEVICE and a.device == DEVICE


def test_check_can_fail():
    """An array made without ``device=`` is caught: the check is not vacuous."""
    a = _on_device(np.ones(3))
    with pytest.raises(ValueError, match="device"):
        a + xps.zeros(3)
    assert _misplaced({"predict": xps.zeros(3)}, object()) == [
        "predict[0] on " + str(xps.zeros(3).device)
    ]


# ------------------------------------------------- move() between libraries
@pytest.fixture
def torch_ns(monkeypatch):
    """array-api-compat's torch namespace, its from_dlpack spied on."""
    torch = pytest.importorskip("torch")
    import array_api_compat

    xt = array_api_compat.array_namespace(torch.zeros(1))
    calls = []
    real = xt.from_dlpack

    def spy(x, *args, **kwargs):
        calls.append(type(x).__name__)
        return real(x, *args, **kwargs)

    monkeypatch.setattr(xt, "from_dlpack", spy)
    return torch, xt, calls


def test_move_numpy_to_torch_by_dlpack_without_a_copy(torch_ns):
    from xpml._backend import move

    torch, xt, calls = torch_ns
    a = np.arange(12.0).reshape(3, 4)[:, 1:]  # strided view: DLPack keeps strides
    t = move(a, xt)
    assert calls == ["ndarray"]
    assert isinstance(t, torch.Tensor) and t.dtype == torch.float64
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.data_ptr() == a.ctypes.data  # the same buffer
    t32 = move(np.arange(3, dtype=np.int32), xt, torch.device("cpu"))
    assert t32.dtype == torch.int32 and t32.device == torch.device("cpu")


def test_move_read_only_numpy_is_not_shared_writably(torch_ns):
    from xpml._backend import move

    torch, xt, calls = torch_ns
    a = np.arange(4.0)
    a.flags.writeable = False
    t = move(a, xt)
    assert calls == ["ndarray"]  # DLPack, of a private copy
    t[0] = 99.0
    assert a[0] == 0.0 and not a.flags.writeable


def test_move_falls_back_to_the_host_when_dlpack_refuses(torch_ns):
    from xpml._backend import move

    torch, xt, calls = torch_ns
    a = np.arange(5.0, dtype=">f8")  # big-endian: NumPy cannot export it
    t = move(a, xt)
    assert calls == ["ndarray"]  # tried
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.dtype == torch.float64


def test_move_torch_back_to_numpy_is_equal(torch_ns):
    from xpml._backend import move

    torch, xt, _ = torch_ns
    t = torch.linspace(0, 1, 5, dtype=torch.float64, requires_grad=True)
    a = move(t, np)
    assert isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, t.detach().numpy())


@pytest.mark.gpu
def test_move_between_cupy_and_torch_stays_on_the_gpu():
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: run by ci/gpu_check.sh on a GPU machine")
    import array_api_compat

    from xpml._backend import move

    c = cupy.arange(6, dtype=cupy.float64)
    t = move(c, array_api_compat.array_namespace(torch.zeros(1)))
    assert t.is_cuda and t.data_ptr() == c.data.ptr
    back = move(t * 2, array_api_compat.array_namespace(c))
    assert isinstance(back, cupy.ndarray)
    cupy.testing.assert_array_equal(back, c * 2)
