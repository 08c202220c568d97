"""KernelRidge: scikit-learn parity, primal = dual, effective dof, the sine behaviour."""

import functools
import warnings

import array_api_compat.numpy as xnp
import numpy as np
import pytest

from xpml.exceptions import InvalidParameterError
from xpml.kernel_ridge import KernelRidge, _solve_triangular_portable
from xpml.kernels import poly2_features
from xpml.utils._array_api import dispatch

sk_kr = pytest.importorskip("sklearn.kernel_ridge")

KERNELS = [
    ("linear", {}),
    ("rbf", {"gamma": 0.3}),
    ("poly", {"degree": 2, "gamma": 0.5, "coef0": 1.0}),
    ("sigmoid", {"gamma": 0.01, "coef0": 0.5}),
    ("laplacian", {"gamma": 0.2}),
]


def _data(n=80, d=5, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    Y = np.stack([np.sin(X[:, 0]) + 0.1 * rng.normal(size=n) for _ in range(k)], axis=1)
    Y += X[:, 1:2] * np.arange(k)
    return X, Y, rng.normal(size=(30, d)), rng.uniform(0.1, 2.0, size=n)


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / max(np.abs(b).max(), 1e-300)


@pytest.mark.parametrize("kernel,params", KERNELS, ids=[k for k, _ in KERNELS])
def test_matches_sklearn_numpy(kernel, params):
    """Predictions and dual coefficients equal scikit-learn's to 1e-8 (relative),
    single and multi-output, with and without sample weights."""
    X, Y, Xt, sw = _data()
    for y in (Y, Y[:, 0]):
        for w in (None, sw):
            ours = KernelRidge(alpha=0.5, kernel=kernel, **params).fit(
                X, y, sample_weight=w
            )
            ref = sk_kr.KernelRidge(alpha=0.5, kernel=kernel, **params).fit(
                X, y, sample_weight=w
            )
            assert ours.predict(Xt).shape == ref.predict(Xt).shape
            assert _rel(ours.predict(Xt), ref.predict(Xt)) < 1e-8
            assert _rel(ours.dual_coef_, ref.dual_coef_) < 1e-8


def test_matches_sklearn_on_every_backend(xp):
    """rbf, multi-output, per-target alpha and sample weights: scikit-learn's
    predictions to 1e-8 on numpy, read-only numpy, array_api_strict and torch."""
    X, Y, Xt, sw = _data(n=300)  # > one 256-row block of the portable substitution
    for alpha, w in ((0.7, None), ([0.1, 1.0, 10.0], sw)):
        ref = sk_kr.KernelRidge(alpha=alpha, kernel="rbf", gamma=0.2).fit(
            X, Y, sample_weight=w
        )
        ours = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.2).fit(
            xp.asarray(X),
            xp.asarray(Y),
            sample_weight=None if w is None else xp.asarray(w),
        )
        pred = ours.predict(xp.asarray(Xt))
        assert xp.is_native(pred)
        assert _rel(xp.to_numpy(pred), ref.predict(Xt)) < 1e-8


def test_precomputed_and_callable_kernels_agree_with_builtin(xp):
    X, Y, Xt, _ = _data()
    gamma = 0.3
    base = KernelRidge(alpha=0.2, kernel="rbf", gamma=gamma).fit(X, Y).predict(Xt)

    def d2(A, B):
        return ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)

    K, Kt = np.exp(-gamma * d2(X, X)), np.exp(-gamma * d2(Xt, X))
    pre = KernelRidge(alpha=0.2, kernel="precomputed").fit(xp.asarray(K), xp.asarray(Y))
    assert _rel(xp.to_numpy(pre.predict(xp.asarray(Kt))), base) < 1e-10
    ref = sk_kr.KernelRidge(alpha=0.2, kernel="precomputed").fit(K, Y)
    assert _rel(xp.to_numpy(pre.predict(xp.asarray(Kt))), ref.predict(Kt)) < 1e-8

    def my_rbf(A, B, *, xp, width):
        sq = (
            xp.sum(A * A, axis=1)[:, None]
            + xp.sum(B * B, axis=1)[None, :]
            - 2.0 * (A @ B.T)
        )
        return xp.exp(-sq / (2.0 * width**2))

    width = (1.0 / (2.0 * gamma)) ** 0.5
    cal = KernelRidge(alpha=0.2, kernel=my_rbf, kernel_params={"width": width})
    got = cal.fit(xp.asarray(X), xp.asarray(Y)).predict(xp.asarray(Xt))
    assert _rel(xp.to_numpy(got), base) < 1e-10


def test_primal_equals_dual_with_explicit_feature_map(xp):
    """Ridge on the explicit degree-2 map φ (φ·φ' = (x·z + c)²) and kernel ridge
    with the poly kernel (gamma=1, degree=2, coef0=c) predict the same."""
    X, Y, Xt, _ = _data(n=60, d=4)
    c, lam = 1.5, 0.3
    Phi = xp.to_numpy(poly2_features(xp.asarray(X), coef0=c))
    Phit = xp.to_numpy(poly2_features(xp.asarray(Xt), coef0=c))
    W = np.linalg.solve(Phi.T @ Phi + lam * np.eye(Phi.shape[1]), Phi.T @ Y)
    dual = KernelRidge(alpha=lam, kernel="poly", gamma=1.0, degree=2, coef0=c)
    got = xp.to_numpy(dual.fit(xp.asarray(X), xp.asarray(Y)).predict(xp.asarray(Xt)))
    assert _rel(got, Phit @ W) < 1e-8
    # and the dual coefficients map back to the primal weights: w = Φᵀc
    assert _rel(Phi.T @ xp.to_numpy(dual.dual_coef_), W) < 1e-8


def test_effective_dof_equals_eigenvalue_formula():
    X, Y, _, sw = _data(n=70)
    for alpha in (1e-3, 0.1, 1.0, 100.0):
        kr = KernelRidge(alpha=alpha, kernel="rbf", gamma=0.5).fit(X, Y[:, 0])
        mu = np.linalg.eigvalsh(np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)))
        assert abs(kr.effective_dof_ - np.sum(mu / (mu + alpha))) < 1e-8 * len(X)
    # weighted: the dof of S K S
    kr = KernelRidge(alpha=0.3, kernel="linear").fit(X, Y[:, 0], sample_weight=sw)
    s = np.sqrt(sw)
    mu = np.linalg.eigvalsh((X @ X.T) * np.outer(s, s))
    assert abs(kr.effective_dof_ - np.sum(mu / (mu + 0.3))) < 1e-8
    # one value per target when the alphas differ
    kr = KernelRidge(alpha=[0.1, 1.0, 10.0], kernel="linear").fit(X, Y)
    assert np.asarray(kr.effective_dof_).shape == (3,)
    assert np.all(np.diff(np.asarray(kr.effective_dof_)) < 0)
    assert KernelRidge(compute_dof=False).fit(X, Y).effective_dof_ is None


def test_fifteen_noisy_sine_points_sigma_and_lambda_behaviour():
    """Small σ memorises (training error ~0, dof ~n); large σ flattens (dof ~1,
    training error ~ the spread of y); λ trades the same way."""
    rng = np.random.default_rng(0)
    x = np.sort(rng.uniform(0.0, 1.0, 15))[:, None]
    y = np.sin(2 * np.pi * x[:, 0]) + 0.2 * rng.normal(size=15)

    def fit(sigma, lam):
        kr = KernelRidge(alpha=lam, kernel="rbf", gamma=1.0 / (2 * sigma**2)).fit(x, y)
        return np.sqrt(np.mean((kr.predict(x) - y) ** 2)), kr.effective_dof_, kr

    err_small, dof_small, _ = fit(0.001, 1e-3)
    err_mid, dof_mid, _ = fit(0.15, 1e-3)
    err_big, dof_big, big = fit(10.0, 1e-3)
    assert err_small < 1e-2 and dof_small > 14.9  # memorised
    assert err_big > 0.5 * np.std(y) and dof_big < 3.0  # flattened
    assert dof_small > dof_mid > dof_big
    grid = np.linspace(0, 1, 200)[:, None]
    f = big.predict(grid)  # no wiggles: nearly a line
    line = np.polyval(np.polyfit(grid[:, 0], f, 1), grid[:, 0])
    assert np.abs(f - line).max() < 0.05 * np.ptp(y)
    # λ: more regularisation, fewer effective parameters, larger training error
    errs, dofs = zip(*[fit(0.15, lam)[:2] for lam in (1e-6, 1e-3, 1e-1, 10.0)])
    assert all(np.diff(dofs) < 0) and all(np.diff(errs) > 0)


def test_fast_and_portable_cholesky_paths_agree(xp):
    """The registered fast paths (SciPy LAPACK / torch / CuPy) and the portable
    blocked substitution agree with NumPy's dense answers."""
    rng = np.random.default_rng(1)
    n = 300  # two blocks of the portable substitution
    A = rng.normal(size=(n, n))
    A = A @ A.T / n + np.eye(n)
    B = rng.normal(size=(n, 3))
    ns = xp.xp
    Ax, Bx = xp.asarray(A), xp.asarray(B)
    ref = np.linalg.solve(A, B)
    tr = np.trace(np.linalg.inv(A))
    for fast in (True, False):
        L = dispatch("kernel_ridge.cholesky", ns, fast=fast)(Ax, xp=ns)
        np.testing.assert_allclose(xp.to_numpy(L), np.linalg.cholesky(A), atol=1e-12)
        X = dispatch("kernel_ridge.cho_solve", ns, fast=fast)(L, Bx, xp=ns)
        assert _rel(xp.to_numpy(X), ref) < 1e-10
        inv = dispatch("kernel_ridge.inv_sq_frobenius", ns, fast=fast)(L, xp=ns)
        assert abs(float(inv) - tr) < 1e-10 * tr
    np.testing.assert_array_equal(xp.to_numpy(Ax), A)  # overwrite=False kept A
    Lt = np.linalg.cholesky(A)
    Z = xp.to_numpy(
        _solve_triangular_portable(xp.asarray(Lt), Bx, xp=ns, transpose=True)
    )
    assert _rel(Z, np.linalg.solve(Lt.T, B)) < 1e-12


@pytest.mark.parametrize("fast", [True, False])
def test_not_positive_definite_factor_is_none(fast):
    A = np.diag([1.0, -1.0, 2.0])
    assert dispatch("kernel_ridge.cholesky", xnp, fast=fast)(A, xp=xnp) is None


def test_numpy_factor_is_in_place_when_allowed():
    pytest.importorskip("scipy")
    rng = np.random.default_rng(2)
    G = rng.normal(size=(50, 50))
    A = G @ G.T + 50 * np.eye(50)
    L = dispatch("kernel_ridge.cholesky", xnp)(A.copy(), xp=xnp)
    A2 = A.copy()
    L2 = dispatch("kernel_ridge.cholesky", xnp)(A2, xp=xnp, overwrite=True)
    assert np.shares_memory(L2, A2)
    np.testing.assert_allclose(L2, L, rtol=0, atol=0)


def test_fit_without_scipy_uses_the_portable_solves(monkeypatch):
    """SciPy is imported with the module (issue 16: not in the first fit); when
    it is missing the LAPACK fast paths hand over to the portable twins, with
    the same dual coefficients and effective dof (rtol 1e-10)."""
    import xpml.kernel_ridge as kr_module

    X, Y, _, _ = _data(n=300)  # two portable blocks
    params = {"alpha": 0.5, "kernel": "rbf", "gamma": 0.3, "compute_dof": True}
    ref = KernelRidge(**params).fit(X, Y)
    monkeypatch.setattr(kr_module, "_lapack_funcs", None)
    kr = KernelRidge(**params).fit(X, Y)
    assert _rel(kr.dual_coef_, ref.dual_coef_) < 1e-10
    np.testing.assert_allclose(kr.effective_dof_, ref.effective_dof_, rtol=1e-10)


def test_not_positive_definite_falls_back_to_least_squares():
    X, Y, Xt, _ = _data(n=40)
    K = X @ X.T  # rank 5: singular at alpha=0
    y = Y[:, 0]
    with pytest.warns(RuntimeWarning, match="least-squares"):
        kr = KernelRidge(alpha=0.0, kernel="precomputed").fit(K, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk_kr.KernelRidge(alpha=0.0, kernel="precomputed").fit(K, y)
    assert _rel(kr.predict(Xt @ X.T), ref.predict(Xt @ X.T)) < 1e-6
    assert abs(kr.effective_dof_ - 5.0) < 1e-6  # tr(K K⁺) = rank


def test_float32_and_input_not_modified():
    X, Y, Xt, _ = _data()
    K = (X @ X.T).copy()
    K0 = K.copy()
    KernelRidge(alpha=1.0, kernel="precomputed").fit(
        K, Y, sample_weight=np.ones(len(X))
    )
    KernelRidge(alpha=1.0, kernel="precomputed").fit(K, Y)
    np.testing.assert_array_equal(K, K0)
    kr = KernelRidge(alpha=1.0, kernel="rbf").fit(
        X.astype(np.float32), Y.astype(np.float32)
    )
    p = kr.predict(Xt.astype(np.float32))
    assert p.dtype == np.float32
    ref = KernelRidge(alpha=1.0, kernel="rbf").fit(X, Y).predict(Xt)
    assert _rel(p, ref) < 1e-4


def test_errors_name_the_argument():
    X, Y, _, _ = _data()
    with pytest.raises(ValueError, match="square kernel matrix"):
        KernelRidge(kernel="precomputed").fit(X, Y)
    with pytest.raises(ValueError, match="alpha has 2 values but y has 3"):
        KernelRidge(alpha=[1.0, 2.0]).fit(X, Y)
    with pytest.raises(InvalidParameterError, match="'kernel'.*'rbf'"):
        KernelRidge(kernel="gaussian").fit(X, Y)
    with pytest.raises(InvalidParameterError, match="'alpha'"):
        KernelRidge(alpha=-1.0).fit(X, Y)


def test_predict_in_row_blocks_under_a_small_memory_budget(monkeypatch):

    X, Y, Xt, _ = _data()
    kr = KernelRidge(alpha=0.5, kernel="rbf", gamma=0.3).fit(X, Y)
    whole = kr.predict(Xt)
    monkeypatch.setenv("XPML_MEMORY_BUDGET", str(8 * 80 * 3 * 7))  # 7 rows a block
    np.testing.assert_allclose(kr.predict(Xt), whole, rtol=1e-13, atol=1e-13)


# ---------------------------------------------- memory and lazy dof (11.8, 14.3)
def _peak_bytes(fn):
    import tracemalloc

    fn()  # warm-up: SciPy's import and caches are not the fit's workspace
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "params",
    [
        {"kernel": "rbf"},
        {"kernel": "linear"},
        {"kernel": "poly"},
        {"kernel": "laplacian"},
        {"kernel": "rbf", "compute_dof": True},
        {"kernel": "rbf", "weighted": True},
    ],
    ids=["rbf", "linear", "poly", "laplacian", "dof-in-fit", "weighted"],
)
def test_fit_peak_is_at_most_twice_the_kernel_matrix(params):
    """The kernel matrix and its factor at most (was 4x by default); on NumPy
    the shift and the Cholesky factor overwrite the matrix (about 1x)."""
    params = dict(params)
    weighted = params.pop("weighted", False)
    rng = np.random.default_rng(0)
    n = 900
    X, y = rng.normal(size=(n, 8)), rng.normal(size=n)
    sw = rng.uniform(0.5, 2.0, size=n) if weighted else None
    peak = _peak_bytes(lambda: KernelRidge(**params).fit(X, y, sample_weight=sw))
    assert peak <= 2.05 * n * n * 8


def test_effective_dof_is_lazy_and_survives_save_load(tmp_path):
    import xpml

    X, Y, _, sw = _data(n=60)
    kr = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.5).fit(
        X, Y[:, 0], sample_weight=sw
    )
    assert "_cache_effective_dof" not in vars(kr)  # a default fit inverts nothing
    eager = KernelRidge(alpha=0.3, kernel="rbf", gamma=0.5, compute_dof=True)
    eager.fit(X, Y[:, 0], sample_weight=sw)
    assert "_cache_effective_dof" in vars(eager)
    s = np.sqrt(sw)
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1)) * np.outer(s, s)
    mu = np.linalg.eigvalsh(K)
    ref = np.sum(mu / (mu + 0.3))
    assert abs(kr.effective_dof_ - ref) < 1e-9 * len(X)
    assert abs(eager.effective_dof_ - ref) < 1e-9 * len(X)
    path = tmp_path / "kr.xpml"
    eager.save(path)
    back = xpml.load(path)
    assert "_cache_effective_dof" not in vars(back)
    assert abs(back.effective_dof_ - ref) < 1e-9 * len(X)
    with pytest.raises(Exception, match="not fitted"):
        _ = KernelRidge().effective_dof_


@pytest.mark.parametrize("panel", [64, 100, 300])
@pytest.mark.parametrize("threads, rows", [(1, 2048), (2, 48), (3, 70), (2, 10)])
def test_numpy_cholesky_by_panels_equals_one_potrf(panel, threads, rows, monkeypatch):
    """The NumPy fast path's blocked Cholesky (one-thread LAPACK / BLAS calls on
    host threads: panels solved in row blocks and column strips, the trailing
    update in strips of the diagonal block and row blocks below) gives the lower
    factor of a single LAPACK call to rounding, its upper part zero; None when
    not positive definite."""
    pytest.importorskip("scipy")
    import xpml.kernel_ridge as kr_module

    # several strips per panel; rows=10: row blocks shorter than a strip
    monkeypatch.setattr(kr_module, "_STRIP", 24)
    rng = np.random.default_rng(3)
    G = rng.normal(size=(250, 250))
    A = G @ G.T / 250 + np.eye(250)
    by_panels = functools.partial(
        kr_module._cholesky_by_panels, panel=panel, rows=rows, threads=threads
    )
    L = by_panels(A.copy())
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=0, atol=1e-12)
    assert not np.triu(L, 1).any()
    A[200, 200] = -5.0  # a negative pivot in the last panel
    assert by_panels(A.copy()) is None


@pytest.mark.parametrize("library", ["numpy's OpenBLAS", "scipy"])
@pytest.mark.parametrize("dtype, atol", [(np.float64, 1e-12), (np.float32, 2e-5)])
def test_numpy_cholesky_in_one_potrf_in_place(dtype, atol, library, monkeypatch):
    """Up to _POTRF_WHOLE_MAX rows the NumPy fast path is one LAPACK potrf in
    the memory of the C-ordered input (NumPy's OpenBLAS through ctypes, or
    SciPy's where NumPy has none): the lower factor, its upper part zero,
    None when not positive definite."""
    pytest.importorskip("scipy")
    import xpml.kernel_ridge as kr_module
    from xpml.linalg import numpy_lapack

    if library == "scipy":
        monkeypatch.setattr(kr_module, "numpy_potrf", lambda A: None)
    elif numpy_lapack("potrf", np.dtype(dtype).char) is None:
        pytest.skip("this NumPy is not built on a wheel's OpenBLAS")

    rng = np.random.default_rng(4)
    G = rng.normal(size=(120, 120))
    A = (G @ G.T / 120 + np.eye(120)).astype(dtype)
    work = A.copy()
    L = kr_module._potrf_in_place(work)
    assert L.dtype == dtype and np.shares_memory(L, work) and L.flags.c_contiguous
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=0, atol=atol)
    assert not np.triu(L, 1).any()
    A[100, 100] = -5.0
    assert kr_module._potrf_in_place(A.copy()) is None


def test_numpy_cholesky_takes_panels_above_the_size_rule(monkeypatch):
    """The fast path's two routes: one potrf up to _POTRF_WHOLE_MAX rows, the
    panels above; both leave a caller's matrix alone unless overwrite is
    given, and give the same factor to rounding."""
    pytest.importorskip("scipy")
    import xpml.kernel_ridge as kr_module

    rng = np.random.default_rng(5)
    G = rng.normal(size=(250, 250))
    A = G @ G.T / 250 + np.eye(250)
    before = A.copy()
    routes = []
    for name in ("_potrf_in_place", "_cholesky_by_panels"):
        real = getattr(kr_module, name)
        monkeypatch.setattr(
            kr_module,
            name,
            lambda M, real=real, name=name: routes.append(name) or real(M),
        )
    fast = kr_module._cholesky_lapack
    L1 = fast(A, xp=np)
    monkeypatch.setattr(kr_module, "_POTRF_WHOLE_MAX", 100)
    L2 = fast(A, xp=np)
    assert routes == ["_potrf_in_place", "_cholesky_by_panels"]
    np.testing.assert_array_equal(A, before)
    np.testing.assert_allclose(L1, L2, rtol=0, atol=1e-12)
    L3 = fast(A, xp=np, overwrite=True)
    assert np.shares_memory(L3, A)


def test_scipy_lapack_route_gives_the_same_fit(monkeypatch):
    """Where NumPy's OpenBLAS routines are missing, SciPy's potrf / potrs /
    trtri give the same dual coefficients and effective_dof_ to rounding."""
    pytest.importorskip("scipy")
    import xpml.kernel_ridge as kr_module

    rng = np.random.default_rng(6)
    X, y = rng.normal(size=(150, 4)), rng.normal(size=150)

    def fit():
        kr = KernelRidge(alpha=0.5, kernel="rbf", gamma=0.3, compute_dof=True)
        kr.fit(X, y)
        return np.asarray(kr.dual_coef_), kr.effective_dof_

    own, own_dof = fit()
    for name in ("numpy_potrf", "numpy_potrs", "numpy_trtri"):
        monkeypatch.setattr(kr_module, name, lambda *args: None)
    theirs, their_dof = fit()
    np.testing.assert_allclose(own, theirs, rtol=1e-10, atol=1e-12)
    assert abs(own_dof - their_dof) < 1e-10 * len(X)
