"""The Gram engine (ALGORITHMS.md §0.2)."""

import numpy as np
import pytest
from sklearn.metrics import pairwise

import xpml
from xpml.kernels import (
    _clamp_exp_,
    _rbf_block,
    _zero_diagonal_,
    gram,
    gram_blocks,
    is_psd,
    poly2_features,
    rbf_taylor_features,
)

RTOL = 1e-12  # float64


def _data(seed=0, n=40, m=25, d=5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)), rng.normal(size=(m, d))


CASES = [
    ("linear", {}, lambda X, Y: pairwise.linear_kernel(X, Y)),
    (
        "poly",
        {"degree": 3, "gamma": 0.3, "coef0": 1.5},
        lambda X, Y: pairwise.polynomial_kernel(X, Y, degree=3, gamma=0.3, coef0=1.5),
    ),
    ("poly", {}, lambda X, Y: pairwise.polynomial_kernel(X, Y)),
    ("rbf", {"gamma": 0.2}, lambda X, Y: pairwise.rbf_kernel(X, Y, gamma=0.2)),
    ("rbf", {}, lambda X, Y: pairwise.rbf_kernel(X, Y)),
    (
        "sigmoid",
        {"gamma": 0.1, "coef0": 0.5},
        lambda X, Y: pairwise.sigmoid_kernel(X, Y, gamma=0.1, coef0=0.5),
    ),
    (
        "laplacian",
        {"gamma": 0.4},
        lambda X, Y: pairwise.laplacian_kernel(X, Y, gamma=0.4),
    ),
]


@pytest.mark.parametrize(
    "kernel,params,ref", CASES, ids=[c[0] + str(i) for i, c in enumerate(CASES)]
)
def test_gram_equals_sklearn(xp, kernel, params, ref):
    X, Y = _data()
    K = gram(xp.asarray(X), xp.asarray(Y), kernel=kernel, **params)
    assert xp.is_native(K)
    np.testing.assert_allclose(xp.to_numpy(K), ref(X, Y), rtol=RTOL, atol=1e-14)
    Ks = gram(xp.asarray(X), kernel=kernel, **params)
    np.testing.assert_allclose(xp.to_numpy(Ks), ref(X, X), rtol=RTOL, atol=1e-14)


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid", "laplacian"])
def test_tiled_equals_untiled(xp, kernel):
    X, Y = _data(1, n=37)
    full = xp.to_numpy(gram(xp.asarray(X), kernel=kernel))
    tiled = xp.to_numpy(gram(xp.asarray(X), kernel=kernel, block_rows=5))
    np.testing.assert_allclose(tiled, full, rtol=1e-13, atol=1e-15)
    budget = xp.to_numpy(
        gram(xp.asarray(X), xp.asarray(Y), kernel=kernel, memory_budget=4096)
    )
    np.testing.assert_allclose(
        budget,
        xp.to_numpy(gram(xp.asarray(X), xp.asarray(Y), kernel=kernel)),
        rtol=1e-13,
        atol=1e-15,
    )


def test_rbf_diagonal_exactly_one(xp):
    X, _ = _data(2, n=30)
    K = xp.to_numpy(gram(xp.asarray(X * 100), kernel="rbf", gamma=1e-4, block_rows=7))
    np.testing.assert_array_equal(np.diag(K), 1.0)


def test_sigma_form():
    X, _ = _data()
    np.testing.assert_allclose(
        gram(X, kernel="rbf", sigma=2.0), gram(X, kernel="rbf", gamma=1 / 8), rtol=1e-15
    )
    with pytest.raises(ValueError, match="either gamma or sigma"):
        gram(X, kernel="rbf", sigma=1.0, gamma=1.0)


def test_callable_kernel(xp):
    X, Y = _data()

    def cubic(A, B, *, xp):
        return (A @ B.T) ** 3

    K = gram(xp.asarray(X), xp.asarray(Y), kernel=cubic, block_rows=9)
    np.testing.assert_allclose(xp.to_numpy(K), (X @ Y.T) ** 3, rtol=1e-13)


def test_blocks_follow_budget():
    X, _ = _data(n=100)
    blocks = list(gram_blocks(X, kernel="rbf", memory_budget=100 * 8 * 3 * 10))
    assert [(a, b) for a, b, _ in blocks] == [
        (i, min(i + 10, 100)) for i in range(0, 100, 10)
    ]
    assert all(K.shape == (b - a, 100) for a, b, K in blocks)


@pytest.mark.parametrize("kernel", ["rbf", "poly", "sigmoid", "linear", "laplacian"])
def test_kernel_dot_in_blocks_matches_gram_product(kernel, xp, monkeypatch):
    """``K(X, Y) @ right`` in row blocks (NumPy: a reused buffer, here forced
    to 3-row blocks) equals the whole Gram matrix times ``right``; the inputs
    are left as they were."""
    from xpml import kernels

    monkeypatch.setattr(kernels, "_DOT_BLOCK_BYTES", 3 * 25 * 8)
    X, Y = _data(n=40, m=25)
    right = np.random.default_rng(1).normal(size=(25, 2))
    kernel_name, p = kernels.resolve_kernel_params(kernel, 5, 0.2, 2, 0.5)
    K = gram(X, Y, kernel=kernel, gamma=0.2, degree=2, coef0=0.5)
    args = [xp.asarray(a) for a in (X, Y, right)]
    for r, want in ((args[2], K @ right), (args[2][:, 0], K @ right[:, 0])):
        got = kernels.kernel_dot(
            args[0], args[1], kernel_name, p, r, xp=xp.xp, block_rows=7
        )
        np.testing.assert_allclose(xp.to_numpy(got), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(xp.to_numpy(args[0]), X)


def test_unknown_kernel_message():
    X, _ = _data()
    with pytest.raises(
        ValueError, match=r"unknown kernel 'rbff'; allowed kernels are 'linear'"
    ):
        gram(X, kernel="rbff")


def test_gram_bad_inputs():
    X, Y = _data()
    with pytest.raises(ValueError, match="same number of columns"):
        gram(X, Y[:, :3])
    Xn = X.copy()
    Xn[1, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        gram(Xn)
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead: X"):
        gram(X[:, 0])
    with pytest.raises(ValueError, match="memory_budget must be a positive"):
        gram(X, memory_budget=0)


def test_fast_paths_agree_with_portable(xp):
    """The in-place NumPy/CuPy/torch paths give the portable path's numbers."""
    X, Y = _data(3)
    A, B = xp.asarray(X), xp.asarray(Y)
    for sym in (None, 0, 10):
        Z = B if sym is None else A
        fast = _rbf_block(A[10:30, :], Z, 0.3, xp=xp.xp, diag_offset=sym, fast=True)
        slow = _rbf_block(A[10:30, :], Z, 0.3, xp=xp.xp, diag_offset=sym, fast=False)
        np.testing.assert_array_equal(xp.to_numpy(fast), xp.to_numpy(slow))

    def owned(a):  # a writable temporary, as the kernels' own products are
        return xp.xp.asarray(xp.asarray(a), copy=True)

    np.testing.assert_array_equal(
        xp.to_numpy(_clamp_exp_(owned(X @ Y.T), xp=xp.xp, fast=True)),
        xp.to_numpy(_clamp_exp_(owned(X @ Y.T), xp=xp.xp, fast=False)),
    )
    M1, M2 = owned(X @ X.T), owned(X @ X.T)
    _zero_diagonal_(M1, 0, xp=xp.xp, fast=True)
    _zero_diagonal_(M2, 0, xp=xp.xp, fast=False)
    np.testing.assert_array_equal(xp.to_numpy(M1), xp.to_numpy(M2))


def test_gram_does_not_modify_inputs():
    X, _ = _data()
    X.flags.writeable = False
    K = gram(X, kernel="rbf")
    assert K.flags.writeable


# ------------------------------------------------------------------ validity
def test_valid_kernels_are_psd(xp):
    X, _ = _data(4, n=30, d=2)
    for kernel in ("linear", "poly", "rbf", "laplacian"):
        r = is_psd(gram(xp.asarray(X), kernel=kernel))
        assert r.is_psd and r.witness is None, kernel


def test_box_kernel_is_not_psd(xp):
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(60, 2))

    def box(A, B, *, xp):
        # 1 when every coordinate is within 0.25: not a valid kernel
        d = xp.max(xp.abs(A[:, None, :] - B[None, :, :]), axis=2)
        return xp.astype(d <= 0.25, A.dtype)

    K = gram(xp.asarray(X), kernel=box)
    r = is_psd(K)
    assert not r.is_psd and r.min_eigenvalue < -1e-6
    v = xp.to_numpy(r.witness)
    assert v @ xp.to_numpy(K) @ v < 0


def test_tanh_kernel_is_not_psd_and_can_be_negative_on_diagonal():
    X = np.random.default_rng(1).normal(size=(40, 2))
    K = gram(X, kernel="sigmoid", gamma=1.0, coef0=-2.0)
    assert np.min(np.diag(K)) < 0
    r = is_psd(K)
    assert not r.is_psd
    assert r.witness @ K @ r.witness < 0


def test_closure_properties():
    X = np.random.default_rng(2).normal(size=(30, 3))
    K1, K2 = gram(X, kernel="rbf", gamma=0.5), gram(X, kernel="poly", degree=2)
    f = np.sin(X[:, 0]) + 2
    for K in (K1 + K2, K1 * K2, 3.0 * K1, f[:, None] * K1 * f[None, :]):
        assert is_psd(K).is_psd


def test_asymmetric_is_not_psd():
    r = is_psd(np.array([[1.0, 0.5], [0.0, 1.0]]))
    assert not r.is_psd and not r.symmetric


# -------------------------------------------------------- explicit feature maps
def test_poly2_feature_map(xp):
    X, Y = _data(5, n=10, m=8, d=3)
    for c in (0.0, 1.0, 2.5):
        P, Q = (
            poly2_features(xp.asarray(X), coef0=c),
            poly2_features(xp.asarray(Y), coef0=c),
        )
        np.testing.assert_allclose(
            xp.to_numpy(P @ Q.T), (X @ Y.T + c) ** 2, rtol=1e-14, atol=1e-13
        )


def test_rbf_taylor_features_converge():
    x = np.linspace(-1, 1, 15)
    K = np.exp(-0.5 * (x[:, None] - x[None, :]) ** 2)
    errs = []
    for order in (2, 5, 10, 20):
        F = rbf_taylor_features(x, gamma=0.5, order=order)
        errs.append(np.abs(F @ F.T - K).max())
    assert errs == sorted(errs, reverse=True) and errs[-1] < 1e-14


def test_backend_switch_moves_gram():
    torch = pytest.importorskip("torch")
    X, _ = _data()
    with xpml.backend("torch", output="backend"):
        assert isinstance(gram(X), torch.Tensor)
    with xpml.backend("torch"):
        assert isinstance(gram(X), np.ndarray)


def test_sq_distances_match_scipy_and_fast_path(xp):
    from scipy.spatial.distance import cdist

    from xpml.kernels import sq_distances

    X, Y = _data(6)
    A, B = xp.asarray(X), xp.asarray(Y)
    fast = xp.to_numpy(sq_distances(A, B, xp=xp.xp, fast=True))
    slow = xp.to_numpy(sq_distances(A, B, xp=xp.xp, fast=False))
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_allclose(fast, cdist(X, Y, "sqeuclidean"), rtol=1e-12, atol=1e-12)
    assert (xp.to_numpy(sq_distances(A, A, xp=xp.xp)) >= 0).all()


def test_ranking_factors_give_distance_less_query_norm(xp):
    from scipy.spatial.distance import cdist

    from xpml.kernels import point_factor, query_factor

    X, Y = _data(7)
    S = query_factor(xp.asarray(X), xp=xp.xp) @ point_factor(xp.asarray(Y), xp=xp.xp).T
    ref = cdist(X, Y, "sqeuclidean") - (X * X).sum(1)[:, None]
    np.testing.assert_allclose(xp.to_numpy(S), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(
        np.argsort(xp.to_numpy(S), axis=1, kind="stable")[:, :3],
        np.argsort(cdist(X, Y), axis=1, kind="stable")[:, :3],
    )


# ------------------------------------------------ memory claims (issue 11.8)
def _peak_bytes(fn):
    """Peak bytes allocated during ``fn()`` (NumPy's buffers are traced)."""
    import tracemalloc

    fn()  # warm-up: imports and caches are not the kernel's workspace
    tracemalloc.start()
    try:
        out = fn()
        return tracemalloc.get_traced_memory()[1], out
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("budget", [2**20, 4 * 2**20])
def test_laplacian_gram_stays_within_its_budget(budget):
    """Workspace beside the output is at most ``memory_budget`` (it was 1.8x:
    the b × m × d difference tensor was counted as d + 3 rows)."""
    X = np.random.default_rng(0).normal(size=(600, 12))
    peak, K = _peak_bytes(lambda: gram(X, kernel="laplacian", memory_budget=budget))
    assert peak - K.nbytes <= budget


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid", "laplacian"])
def test_whole_gram_workspace_is_the_output(kernel):
    """linear, poly, sigmoid and rbf finish the product in place (the output is
    the only n × m array, +5% for the small factors); the Laplacian adds one
    b × m buffer on NumPy."""
    X = np.random.default_rng(0).normal(size=(800, 10))
    peak, K = _peak_bytes(lambda: gram(X, kernel=kernel))
    bound = 2.05 if kernel == "laplacian" else 1.05
    assert peak <= bound * K.nbytes


@pytest.mark.parametrize(
    ("op", "kw"),
    [
        ("kernels.clamp_min0", {}),
        ("kernels.clamp_exp", {}),
        (
            "kernels.dot_kernel",
            {"gamma": 0.3, "coef0": 0.5, "degree": 3.0, "kind": "poly"},
        ),
        (
            "kernels.dot_kernel",
            {"gamma": 0.3, "coef0": 0.5, "degree": 3.0, "kind": "sigmoid"},
        ),
    ],
)
def test_in_place_fast_paths_agree_with_portable(xp, op, kw):
    from xpml.utils._array_api import dispatch

    E = np.random.default_rng(0).normal(size=(30, 20))
    ns = xp.xp
    slow = dispatch(op, ns, fast=False)(xp.asarray(E), xp=ns, **kw)
    owned = ns.asarray(xp.asarray(E), copy=True)
    fast = dispatch(op, ns)(owned, xp=ns, inplace=True, **kw)
    np.testing.assert_allclose(xp.to_numpy(fast), xp.to_numpy(slow), rtol=1e-14)


@pytest.mark.parametrize("kernel", ["cosine", "chi2", "additive_chi2"])
def test_extra_kernel_names_equal_sklearn(xp, kernel):
    """scikit-learn's "cosine" and chi2 kernels (chi2's gamma=None means 1)."""
    rng = np.random.default_rng(0)
    X, Y = rng.uniform(size=(30, 4)), rng.uniform(size=(20, 4))
    X[0] = 0.0  # a zero row: cosine gives 0, chi2's 0/0 terms count 0
    K = xpml.kernels.gram(xp.asarray(X), xp.asarray(Y), kernel, block_rows=7)
    np.testing.assert_allclose(
        xp.to_numpy(K), pairwise.pairwise_kernels(X, Y, metric=kernel), atol=1e-12
    )


def test_callable_kernel_follows_sklearn_rules():
    """A callable without an ``xp`` keyword gets pairs of rows (scikit-learn's
    rule); one declaring ``xp`` gets whole row blocks."""
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(6, 3)), rng.normal(size=(4, 3))
    seen = []

    def pair(x, z):
        seen.append(x.shape)
        return float(np.exp(-np.sum((x - z) ** 2)))

    K = xpml.kernels.gram(X, Y, pair)
    assert set(seen) == {(3,)}
    np.testing.assert_allclose(K, pairwise.rbf_kernel(X, Y, gamma=1.0), atol=1e-14)
    K2 = xpml.kernels.gram(X, Y, lambda A, B, xp: A @ B.T)
    np.testing.assert_allclose(K2, X @ Y.T, atol=1e-14)
