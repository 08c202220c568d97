"""The sync-counting instrument, on hand-made code whose counts are known."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import xpml
from xpml.base import BaseEstimator

torch = pytest.importorskip("torch")
from xpml.testing import SYNC_KINDS, UPLOAD_KINDS, count_syncs  # noqa: E402


@pytest.fixture
def t():
    return torch.arange(6, dtype=torch.float64)


SYNCS = [
    ("item", lambda t: t[0].item()),
    ("float", lambda t: float(t[1])),
    ("int", lambda t: int(t[1])),
    ("bool", lambda t: bool(t[1] > 0)),
    ("bool", lambda t: 1 if t[2] > 0 else 0),
    ("bool", lambda t: 2.0 in t),
    ("index", lambda t: [10, 11, 12][t.to(torch.int64)[1]]),
    ("tolist", lambda t: t.tolist()),
    ("numpy", lambda t: t.numpy()),
    ("numpy", lambda t: np.asarray(t)),
    ("repr", lambda t: repr(t)),
    ("mask_index", lambda t: t[t > 2]),
    ("mask_index", lambda t: t.clone().__setitem__(t > 2, 0.0)),
    ("nonzero", lambda t: torch.nonzero(t)),
    ("nonzero", lambda t: t.nonzero()),
    ("nonzero", lambda t: torch.argwhere(t)),
    ("nonzero", lambda t: torch.where(t > 2)),
    ("unique", lambda t: torch.unique(t)),
    ("masked_select", lambda t: torch.masked_select(t, t > 1)),
    ("bincount", lambda t: torch.bincount(t.to(torch.int64))),
    ("repeat_interleave", lambda t: torch.repeat_interleave(t, t.to(torch.int64))),
    ("compare", lambda t: torch.equal(t, t)),
    ("compare", lambda t: torch.allclose(t, t)),
    ("linalg", lambda t: torch.linalg.cholesky(torch.eye(3, dtype=t.dtype))),
    ("linalg", lambda t: torch.linalg.solve(torch.eye(2, dtype=t.dtype), t[:2])),
    ("linalg", lambda t: torch.linalg.eigh(torch.eye(2, dtype=t.dtype))),
]


@pytest.mark.parametrize(
    "kind, code", SYNCS, ids=[f"{k}-{i}" for i, (k, _) in enumerate(SYNCS)]
)
def test_each_sync_is_counted_once_with_its_kind(t, kind, code):
    with count_syncs() as c:
        code(t)
    assert c.syncs == 1, c.summary()
    assert c.by_kind[kind] == 1, c.summary()
    assert kind in SYNC_KINDS
    assert c.uploads == 0


NO_SYNCS = [
    lambda t: t + 1.0,
    lambda t: torch.where(t > 2, t, 0.0),  # three-argument where: no sync
    lambda t: t[1:3],
    lambda t: t[torch.tensor([0, 2])],  # integer indices already on the device
    lambda t: torch.repeat_interleave(t, 2),  # constant repeats
    lambda t: torch.linalg.cholesky_ex(torch.eye(3, dtype=t.dtype)),
    lambda t: (t.shape, t.dtype, t.device, len(t), t.ndim),
    lambda t: t.to(torch.float32),
    lambda t: torch.asarray(t),  # already a tensor
]


@pytest.mark.parametrize("code", NO_SYNCS)
def test_device_only_code_has_no_sync(t, code):
    with count_syncs() as c:
        code(t)
    assert c.syncs == 0, c.summary()


def test_uploads_of_host_data(t):
    a = np.ones(3)
    with count_syncs() as c:
        torch.asarray(a)
        torch.tensor([1.0, 2.0])
        torch.as_tensor(a)
        torch.from_numpy(a)
        torch.from_dlpack(a)
        torch.asarray(0.5)  # a Python scalar travels too
        torch.asarray(t)  # not an upload
        torch.zeros(3)  # made on the device
    assert c.by_kind["upload_host"] == 6, c.summary()
    assert c.uploads == 6 and c.syncs == 0
    assert set(c.by_kind) <= set(UPLOAD_KINDS)


def test_host_indices_and_values_are_uploads(t):
    with count_syncs() as c:
        t[np.array([0, 2])]  # the index array travels
        t[[1, 3]]
        t[1:3]  # a slice: nothing travels
        t.clone().__setitem__(np.array([0, 1]), 5.0)  # the index travels
        t.clone().__setitem__(0, 1.0)  # a Python scalar is a kernel argument
    assert c.by_kind["upload_host"] == 3 and c.syncs == 0, c.summary()


def test_ops_count_calls_not_metadata(t):
    with count_syncs() as c:
        u = t + 1.0  # add
        v = torch.exp(u)  # exp
        v.sum()  # sum
        _ = (v.shape, v.dtype, v.device, len(v))
    assert c.ops == 3, c.summary()
    assert c.syncs == 0 and c.uploads == 0


def test_ops_count_includes_syncs_and_uploads(t):
    with count_syncs() as c:
        float(t.sum())  # sum, __float__
        torch.asarray([1.0])  # asarray
    assert (c.ops, c.syncs, c.uploads) == (3, 1, 1)


def test_a_loop_pays_one_sync_per_iteration(t):
    def converge(x, k):
        for _ in range(k):
            x = x * 0.5
            if float(x.max()) < 1e-12:  # a convergence check each iteration
                break
        return x

    for k in (1, 4, 9):
        with count_syncs() as c:
            converge(t, k)
        assert c.syncs == k and c.by_kind["float"] == k
        assert c.ops == 3 * k  # mul, max, __float__


def test_nothing_counted_outside_the_block(t):
    with count_syncs() as c:
        t.sum()
    float(t[0])
    torch.from_numpy(np.ones(2))
    assert (c.ops, c.syncs, c.uploads) == (1, 0, 0)


def test_torch_restored_after_an_error():
    from_numpy = torch.from_numpy
    with pytest.raises(RuntimeError, match="boom"):
        with count_syncs():
            raise RuntimeError("boom")
    assert torch.from_numpy is from_numpy
    assert not torch.overrides._is_torch_function_mode_enabled()


def test_numpy_code_is_not_counted():
    x = np.arange(5.0)
    with count_syncs() as c:
        float(x.sum())
    assert (c.ops, c.syncs, c.uploads) == (0, 0, 0)


def test_sites_name_the_xpml_line():
    import array_api_compat

    from xpml.utils import _math

    xp = array_api_compat.array_namespace(torch.zeros(1))
    src, first = inspect.getsourcelines(_math.all_finite)
    line = first + next(i for i, s in enumerate(src) if "bool(" in s)
    with count_syncs(sites=True) as c:
        _math.all_finite(torch.ones(3), xp=xp)
    assert c.top() == [(f"xpml/utils/_math.py:{line} bool", 1)]
    assert c.top_sites(1) == c.top(1)


def test_sites_off_by_default(t):
    with count_syncs() as c:
        float(t[0])
    assert c.syncs == 1 and not c.sites


class _Known(BaseEstimator):
    """Fit: one sync, one upload; predict: one fitted array taken."""

    def __init__(self, scale=1.0):
        self.scale = scale

    def fit(self, X, y=None):
        ctx, X, _, _ = self._validate_fit_data(X)
        xp = ctx.xp
        total = float(xp.sum(X))  # 1 sync
        shift = xp.asarray(np.full(X.shape[1], total), device=ctx.device)  # 1 upload
        self.coef_ = xp.mean(X, axis=0) * self.scale + shift * 0.0
        return self._fitted(ctx)

    def predict(self, X):
        ctx, X = self._validate_predict_data(X)
        return ctx.out(X @ ctx.take(self.coef_))


def test_estimator_edges_are_counted_apart():
    X = np.arange(12.0).reshape(4, 3)
    with xpml.backend("torch"):
        with count_syncs() as fit:
            est = _Known().fit(X)
        with count_syncs() as pred:
            out = est.predict(X)
    assert isinstance(out, np.ndarray) and isinstance(est.coef_, np.ndarray)
    # inside fit: exactly the algorithm's sync and upload
    assert (fit.syncs, fit.uploads) == (1, 1), fit.summary()
    assert fit.by_kind["float"] == 1 and fit.by_kind["upload_host"] == 1
    # the edges: X moved in and checked for NaN, coef_ moved out
    assert fit.edge["upload_host"] >= 1 and fit.edge["bool"] >= 1
    assert fit.edge["numpy"] >= 1 and fit.edge_ops > 0
    # predict: the fitted coefficient re-uploaded once, no sync inside
    assert pred.syncs == 0 and pred.by_kind["upload_fitted"] == 1, pred.summary()
    assert pred.uploads == 1
    # with output="backend" the fitted state stays on the device
    with xpml.backend("torch", output="backend"):
        est = _Known().fit(X)
        with count_syncs() as pred:
            est.predict(X)
    assert pred.uploads == 0 and pred.syncs == 0


class _Outer(BaseEstimator):
    """Fits two inner estimators on its own data (an ensemble in miniature)."""

    def fit(self, X, y=None):
        ctx, X, _, _ = self._validate_fit_data(X)
        self.members_ = [_Known().fit(X), _Known().fit(X)]
        return self._fitted(ctx)


def test_inner_estimators_have_no_edges_of_their_own():
    X = np.arange(12.0).reshape(4, 3)
    with xpml.backend("torch"):
        with count_syncs() as one:
            _Known().fit(X)
        with count_syncs() as outer:
            _Outer().fit(X)
    # each member: its sync and upload, plus its input validation (the NaN
    # check), all inside the outer fit
    assert outer.by_kind["float"] == 2 and outer.by_kind["upload_host"] == 2
    assert outer.by_kind["bool"] == 2 * one.edge["bool"], outer.summary()
    assert outer.edge["bool"] == one.edge["bool"]  # the outer call's own check


def test_summary_lists_kinds_and_sites(t):
    with count_syncs(sites=True) as c:
        float(t[0])
        float(t[1])
    text = c.summary()
    assert "syncs=2" in text and "float=2" in text and "test_testing.py:" in text


@pytest.mark.gpu
def test_a_gpu_read_back_is_one_sync():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU: run by ci/gpu_check.sh on a GPU machine")
    g = torch.arange(4.0, device="cuda")
    with count_syncs() as c:
        g.cpu().numpy()  # the move is the sync, numpy() of its result is free
        torch.asarray(np.ones(2), device="cuda")
        torch.ones(2).to("cuda")
    assert c.by_kind["to_host"] == 1 and c.syncs == 1, c.summary()
    assert c.by_kind["upload_host"] == 1 and c.by_kind["upload_device"] == 1
