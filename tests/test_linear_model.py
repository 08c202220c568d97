"""Linear models against scikit-learn, closed forms and the lecture's behaviours."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn import linear_model as sk
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.preprocessing import StandardScaler

from xpml.exceptions import ConvergenceWarning, SeparableDataWarning
from xpml.linear_model import (
    Lasso,
    LinearRegression,
    LogisticRegression,
    Perceptron,
    Ridge,
    SequentialFeatureSelector,
    lasso_path,
)


def _regression(n=60, d=8, seed=0, targets=None):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    W = rng.normal(size=(d,) if targets is None else (d, targets))
    y = X @ W + 0.3 * rng.normal(size=(n,) if targets is None else (n, targets)) + 1.0
    return X, y, rng.uniform(0.2, 2.0, n)


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


# ----------------------------------------------------------- least squares
def test_linear_regression_rank_deficient_is_pinv_and_sklearn(xp):
    rng = np.random.default_rng(1)
    A = rng.normal(size=(40, 3))
    X = np.hstack([A, A[:, :1] + A[:, 1:2], 2.0 * A[:, 2:3]])  # rank 3 of 5
    y = rng.normal(size=40)
    m = LinearRegression().fit(xp.asarray(X), xp.asarray(y))
    coef, b = xp.to_numpy(m.coef_), float(xp.to_numpy(m.intercept_))
    Xc, yc = X - X.mean(0), y - y.mean()
    w = np.linalg.pinv(Xc) @ yc  # minimum-norm solution
    np.testing.assert_allclose(coef, w, rtol=0, atol=1e-8)
    ref = sk.LinearRegression().fit(X, y)
    np.testing.assert_allclose(coef, ref.coef_, rtol=0, atol=1e-8)
    assert abs(b - ref.intercept_) < 1e-8
    assert m.rank_ == 3


@pytest.mark.parametrize("n", [11, 60])  # wide enough for the plain SVD; tall
def test_pinv_solve_reduces_tall_systems_to_the_same_answer(xp, n, monkeypatch):
    """A tall system is solved from the R factor of [A | b] (Qᵀb beside R_A):
    the minimum-norm solution and A's singular values, for several right-hand
    sides and a rank-deficient A, as the pseudo-inverse gives them."""
    import xpml.linear_model._base as base

    rng = np.random.default_rng(3)
    A = rng.normal(size=(n, 4))
    A = np.hstack([A, A[:, :1] - A[:, 3:4]])  # rank 4 of 5
    B = rng.normal(size=(n, 2))
    reduced = []
    real = base.shifted_r_factor_of
    monkeypatch.setattr(
        base,
        "shifted_r_factor_of",
        lambda *a, **kw: reduced.append(1) or real(*a, **kw),
    )
    for b in (B, B[:, 0]):
        x, keep, s = base.pinv_solve(xp.asarray(A), xp.asarray(b), xp=xp.xp)
        np.testing.assert_allclose(
            xp.to_numpy(x), np.linalg.pinv(A, rcond=1e-6) @ b, rtol=0, atol=1e-10
        )
        np.testing.assert_allclose(
            xp.to_numpy(s), np.linalg.svd(A, compute_uv=False), rtol=1e-12, atol=1e-12
        )
        assert int(np.sum(xp.to_numpy(keep))) == 4
    assert len(reduced) == (2 if n == 60 else 0)


@pytest.mark.parametrize("n", [11, 60])  # wide enough for the plain SVD; tall
def test_pinv_solve_centres_and_weights_as_it_reduces(xp, n):
    """``shift`` and ``scale`` solve ``diag(s)(A − a0) x = diag(s)(b − b0)``
    without forming it: the same solution and singular values as the
    pseudo-inverse of the system formed, one and two right-hand sides, tall
    (blockwise on NumPy) and not; the inputs untouched."""
    import xpml.linear_model._base as base

    rng = np.random.default_rng(5)
    A = rng.normal(size=(n, 4)) * [1.0, 10.0, 0.1, 1.0] + 50.0  # far from 0
    B = rng.normal(size=(n, 2)) + 7.0
    w = np.sqrt(rng.uniform(0.2, 3.0, size=n))
    a0, b0 = A.mean(axis=0), B.mean(axis=0)
    for b, c in ((B, b0), (B[:, 0], b0[0])):
        Aj, bj = xp.asarray(A), xp.asarray(b)
        shift = (xp.asarray(a0), xp.asarray(c))
        x, keep, s = base.pinv_solve(Aj, bj, xp=xp.xp, shift=shift, scale=xp.asarray(w))
        As = (A - a0) * w[:, None]
        bs = (b - c) * (w if b.ndim == 1 else w[:, None])
        np.testing.assert_allclose(
            xp.to_numpy(x), np.linalg.pinv(As, rcond=1e-6) @ bs, rtol=1e-9, atol=1e-11
        )
        np.testing.assert_allclose(
            xp.to_numpy(s), np.linalg.svd(As, compute_uv=False), rtol=1e-11
        )
        assert int(np.sum(xp.to_numpy(keep))) == 4
        np.testing.assert_array_equal(xp.to_numpy(Aj), A)  # not modified


def test_tall_r_factor_blocks_through_numpys_lapack_match_np_linalg_qr(monkeypatch):
    """The blocks factored in place by NumPy's own LAPACK (ctypes) give the R
    that ``np.linalg.qr`` gives (the path used where that LAPACK is not
    found), float64 and float32, with a short last block and a block shorter
    than it is wide."""
    import xpml.linalg as la

    if la._numpy_geqrf("d") is None:
        pytest.skip("NumPy's LAPACK not found by name: np.linalg.qr is used")
    rng = np.random.default_rng(2)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
        A = rng.normal(size=(1003, 9)).astype(dtype)
        fast = la._r_factor_numpy(A, xp=np, block_rows=100)
        with monkeypatch.context() as m:
            m.setattr(la, "_numpy_geqrf", lambda char: None)
            slow = la._r_factor_numpy(A, xp=np, block_rows=100)
        assert fast.dtype == slow.dtype == dtype
        np.testing.assert_allclose(fast, slow, rtol=0, atol=tol * np.abs(slow).max())
        blocks = la._block_r_factors(
            (23, 9), dtype, 20, la._rows_of(A[:23])
        )  # the second block: 3 rows
        assert [b.shape for b in blocks] == [(9, 9), (3, 9)]
        np.testing.assert_allclose(
            np.abs(blocks[1]), np.abs(np.linalg.qr(A[20:23], mode="r")), atol=tol * 10
        )


def test_linear_regression_weighted_equals_sklearn(xp):
    X, y, sw = _regression()
    m = LinearRegression().fit(
        xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(sw)
    )
    ref = sk.LinearRegression().fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, rtol=0, atol=1e-8)


# ------------------------------------------------------------------- ridge
@pytest.mark.parametrize("solver", ["primal", "dual", "svd", "auto"])
def test_ridge_equals_sklearn(xp, solver):
    X, y, sw = _regression()
    for weights in (None, sw):
        for fit_intercept in (True, False):
            kw = dict(alpha=2.5, fit_intercept=fit_intercept)
            m = Ridge(solver=solver, **kw).fit(
                xp.asarray(X),
                xp.asarray(y),
                sample_weight=None if weights is None else xp.asarray(weights),
            )
            ref = sk.Ridge(**kw).fit(X, y, sample_weight=weights)
            np.testing.assert_allclose(
                xp.to_numpy(m.coef_), ref.coef_, rtol=0, atol=1e-8
            )
            np.testing.assert_allclose(
                xp.to_numpy(m.intercept_), ref.intercept_, atol=1e-8
            )
            np.testing.assert_allclose(
                xp.to_numpy(m.predict(xp.asarray(X))), ref.predict(X), atol=1e-8
            )


def test_ridge_multi_output_and_wide_data(xp):
    X, Y, _ = _regression(n=20, d=50, targets=3)  # d > n: dual by shape
    m = Ridge(alpha=0.7).fit(xp.asarray(X), xp.asarray(Y))
    assert m.solver_ == "dual"
    ref = sk.Ridge(alpha=0.7).fit(X, Y)
    np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, atol=1e-8)
    np.testing.assert_allclose(xp.to_numpy(m.intercept_), ref.intercept_, atol=1e-8)
    p = Ridge(alpha=0.7, solver="primal").fit(X, Y)
    np.testing.assert_allclose(p.coef_, xp.to_numpy(m.coef_), atol=1e-10)


def test_ridge_intercept_is_not_penalised():
    X, y, _ = _regression()
    m = Ridge(alpha=1e8).fit(X, y + 100.0)  # slopes crushed, intercept = mean
    assert np.abs(m.coef_).max() < 1e-5
    assert abs(float(m.intercept_) - (y + 100.0).mean()) < 1e-4


# ------------------------------------------------------------------- lasso
def test_lasso_equals_sklearn(xp):
    X, y, sw = _regression(n=80, d=10)
    for weights in (None, sw):
        for alpha in (0.01, 0.1, 0.5):
            kw = dict(alpha=alpha, tol=1e-12, max_iter=100_000)
            m = Lasso(**kw).fit(
                xp.asarray(X),
                xp.asarray(y),
                sample_weight=None if weights is None else xp.asarray(weights),
            )
            ref = sk.Lasso(**kw).fit(X, y, sample_weight=weights)
            np.testing.assert_allclose(
                xp.to_numpy(m.coef_), ref.coef_, rtol=0, atol=1e-6
            )
            assert abs(float(xp.to_numpy(m.intercept_)) - ref.intercept_) < 1e-6


def test_lasso_penalty_scale_mapping_and_exact_zeros():
    """``Lasso(alpha)`` minimises ‖y − Xw − b‖² + λ‖w‖₁ with λ = 2nα (the lecture form)."""
    X, y, _ = _regression(n=50, d=6)
    n = len(y)
    alpha = 0.2
    m = Lasso(alpha=alpha, tol=1e-12, max_iter=100_000).fit(X, y)
    lam = 2 * n * alpha

    def f(w, b):
        return np.sum((y - X @ w - b) ** 2) + lam * np.abs(w).sum()

    rng = np.random.default_rng(0)
    best = f(m.coef_, m.intercept_)
    for _ in range(200):  # no nearby point does better
        dw = rng.normal(scale=1e-3, size=6)
        assert f(m.coef_ + dw, m.intercept_ + rng.normal(scale=1e-3)) >= best - 1e-9
    # zeros appear as α grows; at α_max every slope is exactly zero
    a_max = np.abs((X - X.mean(0)).T @ (y - y.mean())).max() / n
    nnz = [
        np.count_nonzero(Lasso(alpha=a).fit(X, y).coef_)
        for a in a_max * np.array([1e-4, 0.3, 0.7, 1.0 + 1e-9])
    ]
    assert nnz == sorted(nnz, reverse=True) and nnz[-1] == 0 and nnz[0] == 6


def test_lasso_path_equals_sklearn(xp):
    X, y, _ = _regression(n=50, d=6)
    al, coefs, gaps = lasso_path(
        xp.asarray(X), xp.asarray(y), n_alphas=8, tol=1e-12, max_iter=100_000
    )
    ref_al, ref_coefs, _ = sk.lasso_path(X, y, alphas=8, tol=1e-12, max_iter=100_000)
    np.testing.assert_allclose(xp.to_numpy(al), ref_al, rtol=1e-12)
    np.testing.assert_allclose(xp.to_numpy(coefs), ref_coefs, atol=1e-6)
    assert xp.is_native(coefs)


def test_lasso_warns_when_budget_too_small():
    X, y, _ = _regression(n=50, d=6)
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        Lasso(alpha=0.001, tol=1e-15, max_iter=2).fit(X, y)


# ---------------------------------------------------------------- logistic
def test_logistic_newton_equals_sklearn_breast_cancer(xp, cancer):
    X, y = cancer
    for C in (1.0, 0.05):
        m = LogisticRegression(C=C, tol=1e-12).fit(xp.asarray(X), xp.asarray(y))
        ref = sk.LogisticRegression(C=C, tol=1e-12, max_iter=10_000).fit(X, y)
        np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, rtol=0, atol=1e-5)
        np.testing.assert_allclose(xp.to_numpy(m.intercept_), ref.intercept_, atol=1e-5)
        np.testing.assert_allclose(
            xp.to_numpy(m.predict_proba(xp.asarray(X))), ref.predict_proba(X), atol=1e-6
        )
    # the exact optimum (sklearn's Newton solver, run to machine precision)
    exact = sk.LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-14).fit(X, y)
    m = LogisticRegression(C=1.0, tol=1e-12).fit(X, y)
    np.testing.assert_allclose(m.coef_, exact.coef_, atol=1e-8)


def test_logistic_multinomial_equals_sklearn(xp):
    X, y = load_wine(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    m = LogisticRegression(C=0.5, tol=1e-12).fit(xp.asarray(X), xp.asarray(y))
    ref = sk.LogisticRegression(C=0.5, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, atol=1e-5)
    np.testing.assert_allclose(
        xp.to_numpy(m.predict_proba(xp.asarray(X))), ref.predict_proba(X), atol=1e-6
    )
    lp = xp.to_numpy(m.predict_log_proba(xp.asarray(X)))
    np.testing.assert_allclose(np.exp(lp), ref.predict_proba(X), atol=1e-6)


def test_logistic_intercept_unpenalised():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = (rng.uniform(size=200) < 0.9).astype(int)  # 90 % positives, X useless
    m = LogisticRegression(C=1e-6).fit(X, y)  # slopes crushed to ~0 ...
    assert np.abs(m.coef_).max() < 1e-3
    p = m.predict_proba(X)[:, 1]  # ... but the base rate is kept
    np.testing.assert_allclose(p, y.mean(), atol=1e-3)


@pytest.mark.parametrize("solver", ["gd", "sgd"])
def test_logistic_first_order_solvers_reach_newton(solver, cancer):
    X, y = cancer
    X = X[:, :5]
    exact = LogisticRegression(C=1.0, tol=1e-12).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        m = LogisticRegression(
            C=1.0,
            solver=solver,
            max_iter=3000 if solver == "gd" else 200,
            tol=1e-9,
            random_state=0,
        ).fit(X, y)
    np.testing.assert_allclose(
        m.coef_, exact.coef_, atol=1e-2 if solver == "gd" else 0.25
    )
    assert (m.predict(X) == exact.predict(X)).mean() > 0.98


def _separable(n=24, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = (X[:, 0] + 0.5 * X[:, 1] > 0.3).astype(int)
    X = X + 0.4 * (2 * y - 1)[:, None] * np.array([1.0, 0.5])  # open a margin
    return X, y


def _max_margin_augmented(X, y):
    """Hard-margin SVM in the augmented space [1, x] (bias penalised like a weight):
    min ½‖u‖² s.t. yᵢ u·aᵢ ≥ 1, by SLSQP."""
    from scipy.optimize import minimize

    A = np.hstack([np.ones((len(X), 1)), X])
    s = 2.0 * y - 1.0
    res = minimize(
        lambda u: 0.5 * u @ u,
        np.zeros(3),
        jac=lambda u: u,
        method="SLSQP",
        constraints=[
            {
                "type": "ineq",
                "fun": lambda u: s * (A @ u) - 1.0,
                "jac": lambda u: s[:, None] * A,
            }
        ],
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert res.success
    return res.x / np.linalg.norm(res.x)


def _elongated(seed=0):
    """Two long, thin, separable clouds: most points are far from the boundary, so the
    early GD direction (pulled by all points) is far from the max-margin one."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(20, 2)) * [3.0, 0.3] + [0.0, 2.0]
    B = rng.normal(size=(20, 2)) * [3.0, 0.3] + [2.0, -1.0]
    return np.vstack([A, B]), np.repeat([1, 0], 20)


def test_logistic_gd_separable_warns_stops_and_turns_to_max_margin():
    X, y = _elongated()
    u = _max_margin_augmented(X, y)
    # cross-check the direction with scikit-learn's SVC on the augmented features
    from sklearn.svm import LinearSVC

    svc = LinearSVC(
        C=1e6, loss="hinge", fit_intercept=False, tol=1e-10, max_iter=1_000_000
    ).fit(np.hstack([np.ones((len(X), 1)), X]), y)
    v = svc.coef_[0] / np.linalg.norm(svc.coef_[0])
    assert np.degrees(np.arccos(np.clip(u @ v, -1, 1))) < 0.5
    angles = []
    for steps in (10, 100, 1000, 10000):
        with pytest.warns(SeparableDataWarning, match="separable"):
            m = LogisticRegression(
                penalty=None, solver="gd", max_iter=steps, learning_rate=1.0
            ).fit(X, y)
        assert m.n_iter_ == steps and not m.converged_
        theta = np.concatenate([m.intercept_, m.coef_[0]])
        assert np.all(np.isfinite(theta))
        angles.append(
            np.degrees(np.arccos(np.clip(theta @ u / np.linalg.norm(theta), -1, 1)))
        )
    assert all(a > b for a, b in zip(angles, angles[1:])), (
        angles
    )  # ~28°, 14°, 7.4°, 4.3°
    assert angles[-1] < 0.25 * angles[0]


def test_logistic_newton_separable_warns_and_stops():
    X, y = _separable()
    with pytest.warns(SeparableDataWarning):
        m = LogisticRegression(penalty=None, max_iter=100).fit(X, y)
    assert m.n_iter_ < 100 and np.all(np.isfinite(m.coef_))
    assert (m.predict(X) == y).all()


def test_logistic_parity_gd_sgd(xp, cancer):
    X, y = cancer
    X, y = X[:120, :6], y[:120]
    for solver in ("gd", "sgd"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ref = LogisticRegression(solver=solver, max_iter=30, random_state=0).fit(
                X, y
            )
            m = LogisticRegression(solver=solver, max_iter=30, random_state=0).fit(
                xp.asarray(X), xp.asarray(y)
            )
        np.testing.assert_allclose(
            xp.to_numpy(m.coef_), ref.coef_, rtol=1e-9, atol=1e-12
        )


# -------------------------------------------------------------- perceptron
def test_perceptron_hand_computed_updates():
    X = np.array([[1.0, 1.0], [-1.0, 0.5], [2.0, -1.0]])
    y = np.array([1, 0, 1])
    m = Perceptron(max_iter=1, shuffle=False, fit_intercept=False).fit(X, y)
    # row 0: score 0 → mistake, w = [1, 1]; row 1: score −0.5, y = −1 → fine;
    # row 2: score 1 > 0 → fine
    np.testing.assert_array_equal(m.coef_, [[1.0, 1.0]])
    assert m.n_mistakes_ == 1


def test_perceptron_equals_sklearn_in_order(xp):
    """Rows in order, no shuffling: the same updates as scikit-learn's Perceptron,
    binary and one-vs-rest."""
    from sklearn.linear_model import Perceptron as SkPerceptron

    X, y = _separable(n=80, seed=5)
    y3 = np.arange(80) % 3
    for labels, epochs in ((y, 1), (y3, 3)):
        m = Perceptron(max_iter=epochs, shuffle=False).fit(
            xp.asarray(X), xp.asarray(labels)
        )
        ref = SkPerceptron(max_iter=epochs, shuffle=False, tol=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref.fit(X, labels)
        np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, rtol=0, atol=1e-12)
        np.testing.assert_allclose(
            xp.to_numpy(m.intercept_), ref.intercept_, atol=1e-12
        )


def test_perceptron_separable_converges(xp):
    X, y = _separable(n=60)
    m = Perceptron(max_iter=200, random_state=0).fit(xp.asarray(X), xp.asarray(y))
    assert m.n_mistakes_ == 0
    assert (xp.to_numpy(m.predict(xp.asarray(X))) == y).all()


# -------------------------------------------------------- feature selection
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_sequential_feature_selector_equals_sklearn(direction):
    from sklearn.feature_selection import SequentialFeatureSelector as SkSFS

    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 7))
    y = 3 * X[:, 1] - 2 * X[:, 4] + X[:, 6] + 0.5 * rng.normal(size=80)
    m = SequentialFeatureSelector(
        LinearRegression(), n_features_to_select=3, direction=direction, cv=4
    ).fit(X, y)
    ref = SkSFS(
        sk.LinearRegression(), n_features_to_select=3, direction=direction, cv=4
    ).fit(X, y)
    np.testing.assert_array_equal(m.support_, ref.get_support())
    assert np.flatnonzero(m.support_).tolist() == [1, 4, 6]
    assert m.transform(X).shape == (80, 3)


def test_sequential_feature_selector_tol_stops():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 6))
    y = 3 * X[:, 2] + 0.1 * rng.normal(size=80)
    m = SequentialFeatureSelector(LinearRegression(), tol=0.01, cv=4).fit(X, y)
    assert np.flatnonzero(m.support_).tolist() == [2]


def test_bad_options_name_allowed_values():
    from xpml.exceptions import InvalidParameterError

    X, y, _ = _regression()
    with pytest.raises(InvalidParameterError, match="solver.*'primal'"):
        Ridge(solver="qr").fit(X, y)
    with pytest.raises(InvalidParameterError, match="solver.*'newton'"):
        LogisticRegression(solver="qr").fit(X, y > 1)
    with pytest.raises(InvalidParameterError, match="direction"):
        SequentialFeatureSelector(LinearRegression(), direction="up").fit(X, y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("targets", [None, 3])
@pytest.mark.parametrize("weighted", [False, True])
def test_ridge_reused_block_buffer_is_bit_identical(dtype, targets, weighted):
    """Ridge's NumPy normal equations (each block centred into one reused
    buffer, issue 16) equal the portable blocks bit for bit, with a short
    last block, 1-D and 2-D y, weights and float32."""
    from xpml.linear_model._ridge import (
        _centred_normal_equations,
        _centred_normal_equations_numpy,
    )

    X, y, sw = _regression(n=1001, d=9, targets=targets)
    X, y, sw = X.astype(dtype), y.astype(dtype), np.sqrt(sw).astype(dtype)
    args = (X, y, X.mean(0), y.mean(0), sw if weighted else None)
    want = _centred_normal_equations(*args, xp=np, rows=256)
    got = _centred_normal_equations_numpy(*args, xp=np, rows=256)
    for a, b in zip(want, got):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(b, a)
    coef = Ridge(alpha=0.5).fit(X, y, sw if weighted else None).coef_
    assert np.all(np.isfinite(coef))


def _spy_blas_threads(monkeypatch, owner, name):
    """Record, at every call of ``owner.name``, whether NumPy's BLAS has one
    thread; skip where it has one anyway."""
    import os

    from xpml.linalg import one_blas_thread

    if (os.cpu_count() or 1) < 2 or one_blas_thread(np):
        pytest.skip("BLAS has one thread here anyway")
    seen = []
    inner = getattr(owner, name)

    def spy(*args, **kwargs):
        seen.append(one_blas_thread(np))
        return inner(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return seen


@pytest.mark.parametrize(
    ("module", "name", "make"),
    [
        # Ridge's NumPy normal equations: cache-sized blocks (block_rows is
        # asked for inside the blocked products)
        ("_ridge", "block_rows", lambda: Ridge(alpha=1.0)),
        # Lasso's coordinate descent: one dot product per coordinate (the
        # duality gap is computed inside the sweeps)
        ("_coordinate_descent", "_duality_gap", lambda: Lasso(alpha=0.01)),
    ],
)
def test_solver_runs_with_one_blas_thread(monkeypatch, module, name, make):
    """The solver limits NumPy's BLAS to one thread while it runs, and gives
    it back after."""
    import importlib

    from xpml.linalg import one_blas_thread

    owner = importlib.import_module(f"xpml.linear_model.{module}")
    seen = _spy_blas_threads(monkeypatch, owner, name)
    X, y, _ = _regression(n=300, d=5)
    make().fit(X, y)
    assert seen and all(seen)
    assert not one_blas_thread(np)


def test_blocked_products_equal_one_block(xp):
    """The cache-blocked one-pass products (NumPy fast path) equal the single-block ones."""
    from xpml.linear_model._logistic import _binary_newton_system
    from xpml.linear_model._ridge import _centred_normal_equations

    X, y, sw = _regression(n=101, d=7)
    Xb, yb, swb = xp.asarray(X), xp.asarray(y), xp.asarray(sw)
    xo, yo = xp.asarray(X.mean(0)), xp.asarray(y.mean())
    one = _centred_normal_equations(Xb, yb, xo, yo, xp.xp.sqrt(swb), xp=xp.xp, rows=101)
    blk = _centred_normal_equations(Xb, yb, xo, yo, xp.xp.sqrt(swb), xp=xp.xp, rows=13)
    for a, b in zip(one, blk):
        np.testing.assert_allclose(
            xp.to_numpy(b), xp.to_numpy(a), rtol=1e-12, atol=1e-12
        )
    z, y01, w = (
        xp.asarray(X @ np.ones(7) * 0.1),
        xp.asarray((y > 1).astype(float)),
        xp.asarray(np.ones(7)),
    )
    one = _binary_newton_system(
        Xb, z, y01, swb, w, lam=0.5, xp=xp.xp, fit_intercept=True, rows=101
    )
    blk = _binary_newton_system(
        Xb, z, y01, swb, w, lam=0.5, xp=xp.xp, fit_intercept=True, rows=10
    )
    for a, b in zip(one, blk):
        np.testing.assert_allclose(
            xp.to_numpy(b), xp.to_numpy(a), rtol=1e-12, atol=1e-12
        )


# ------------------------------------------------ rank cut-off (issue 11.5)
def test_nearly_collinear_columns_share_the_weight_and_warn(xp):
    """x₂ = x₁ + 1e-10·noise: scikit-learn (lstsq, cond=1e-6) gives ~1.0 each;
    the old ``max(n, d)·eps`` cut-off kept σ₂ ~ 1e-9 and gave ±6e7."""
    from xpml.linear_model._base import RankDeficiencyWarning

    rng = np.random.default_rng(0)
    n = 200
    x1 = rng.standard_normal(n)
    X = np.c_[x1, x1 + 1e-10 * rng.standard_normal(n)]
    y = 2 * x1 + 0.1 * rng.standard_normal(n)
    ref = sk.LinearRegression().fit(X, y)
    with pytest.warns(RankDeficiencyWarning, match="rank deficient"):
        reg = LinearRegression().fit(xp.asarray(X), xp.asarray(y))
    assert reg.rank_ == 1
    np.testing.assert_allclose(xp.to_numpy(reg.coef_), ref.coef_, rtol=1e-6)
    np.testing.assert_allclose(float(reg.intercept_), float(ref.intercept_), atol=1e-8)


def test_float32_large_n_keeps_a_real_direction():
    """float32, n = 500,000, σ₂/σ₁ = 0.015: ``max(n, d)·eps`` = 0.06 dropped σ₂
    (rank 1, residual 2.5x the true one); the relative cut-off keeps it."""
    rng = np.random.default_rng(0)
    n = 500_000
    x1 = rng.standard_normal(n)
    X = np.c_[x1, x1 + 0.03 * rng.standard_normal(n)].astype(np.float32)
    y = (x1 + 5 * X[:, 1] + rng.standard_normal(n)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # full rank: no warning
        reg = LinearRegression().fit(X, y)
    assert reg.rank_ == 2
    ref = np.linalg.lstsq(
        np.c_[X.astype(np.float64), np.ones(n)], y.astype(np.float64), rcond=None
    )[0]
    np.testing.assert_allclose(reg.coef_, ref[:2], rtol=1e-3)


def test_ridge_dual_at_alpha_zero_is_least_squares(xp):
    """XXᵀ is singular at α = 0 when n > d: the dual solver routes to the SVD
    (minimum-norm least squares) instead of fitting 28x worse."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 20))
    y = X @ rng.standard_normal(20) + 0.1 * rng.standard_normal(300)
    ref = sk.LinearRegression().fit(X, y)
    r = Ridge(alpha=0.0, solver="dual").fit(xp.asarray(X), xp.asarray(y))
    assert r.solver_ == "svd"
    np.testing.assert_allclose(xp.to_numpy(r.coef_), ref.coef_, rtol=1e-8)


# ------------------------------ logistic Newton: subsample warm start (issue 14)
def _many_rows(n=4096, d=3, seed=0):
    """Enough rows for the subsample warm start (n >= 4 * 1024 at d = 3)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d)) * [1.0, 3.0, 0.3] + [0.5, 0.0, -1.0]
    z = X @ np.array([1.0, -0.4, 2.0]) + 0.3
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(np.int64)
    return X, y, rng.uniform(0.2, 2.0, n)


def _full_newton(monkeypatch, X, y, sw, **kw):
    """The same fit by full Newton steps (no subsample warm start)."""
    from xpml.linear_model import _logistic

    with monkeypatch.context() as m:
        m.setattr(_logistic, "_subsample_stride", lambda n, d: 0)
        return LogisticRegression(**kw).fit(X, y, sample_weight=sw)


def _check_subsample_fit(xp, monkeypatch, kw):
    """Many rows, cold start: the subsample's Newton fit, then BFGS steps from
    its Hessian, reach full Newton's optimum (and scikit-learn's) at the same
    tol, with sample weights."""
    from xpml.linear_model import _logistic

    X, y, sw = _many_rows()
    calls = []
    spy = _logistic.LogisticRegression._solve_quasi_newton
    monkeypatch.setattr(
        _logistic.LogisticRegression,
        "_solve_quasi_newton",
        lambda self, *a, **k: calls.append(1) or spy(self, *a, **k),
    )
    m = LogisticRegression(tol=1e-8, **kw).fit(
        xp.asarray(X), xp.asarray(y), sample_weight=xp.asarray(sw)
    )
    assert calls and m.converged_ and 1 <= int(m.n_iter_[0]) <= 20
    full = _full_newton(monkeypatch, X, y, sw, tol=1e-8, **kw)
    assert not calls[1:]  # the full-Newton reference took the other path
    np.testing.assert_allclose(xp.to_numpy(m.coef_), full.coef_, atol=1e-8)
    np.testing.assert_allclose(xp.to_numpy(m.intercept_), full.intercept_, atol=1e-8)
    ref = sk.LogisticRegression(solver="newton-cholesky", tol=1e-12, **kw)
    ref.fit(X, y, sample_weight=sw)
    np.testing.assert_allclose(xp.to_numpy(m.coef_), ref.coef_, atol=1e-6)
    np.testing.assert_allclose(xp.to_numpy(m.intercept_), ref.intercept_, atol=1e-6)


def test_logistic_subsample_start_reaches_newton_and_sklearn(xp, monkeypatch):
    _check_subsample_fit(xp, monkeypatch, {"C": 1.0})


@pytest.mark.parametrize("kw", [{"C": 0.01, "fit_intercept": False}, {"C": np.inf}])
def test_logistic_subsample_start_no_intercept_no_penalty(monkeypatch, kw):
    """As above (NumPy) without an intercept, and without a penalty."""
    from types import SimpleNamespace

    numpy = SimpleNamespace(asarray=np.asarray, to_numpy=np.asarray)
    _check_subsample_fit(numpy, monkeypatch, kw)


def test_logistic_subsample_start_not_taken_when_warm_or_separable(monkeypatch):
    """warm_start keeps its start (full Newton steps from it); separable data
    (no penalty) fall back to full Newton and warn as before."""
    X, y, _ = _many_rows()
    m = LogisticRegression(warm_start=True, tol=1e-8).fit(X, y)
    m.fit(X, y)
    assert m.n_iter_[0] == 0  # already at the optimum: no step
    Xs = X.copy()
    Xs[:, 0] += 4.0 * (2 * y - 1)  # a wide margin along the first axis
    with pytest.warns(SeparableDataWarning):
        s = LogisticRegression(C=np.inf).fit(Xs, y)
    with pytest.warns(SeparableDataWarning):
        full = _full_newton(monkeypatch, Xs, y, None, C=np.inf)
    assert s.n_iter_[0] == full.n_iter_[0]
    np.testing.assert_array_equal(s.coef_, full.coef_)


@pytest.mark.parametrize("C", [1.0, np.inf])
def test_logistic_binary_newton_runs_with_one_blas_thread(monkeypatch, C):
    """The binary Newton solve (cache-sized row blocks) limits NumPy's BLAS to
    one thread while it runs, and gives it back after; the multinomial solve
    leaves it alone."""
    from xpml.linalg import one_blas_thread
    from xpml.linear_model import _logistic

    calls = [
        _spy_blas_threads(monkeypatch, _logistic.LogisticRegression, name)
        for name in ("_newton_steps", "_solve_quasi_newton")
    ]
    X, y, _ = _many_rows()
    LogisticRegression(solver="newton", C=C).fit(X, y)
    seen = [s for c in calls for s in c]
    assert seen and all(seen)
    assert not one_blas_thread(np)
    for c in calls:
        c.clear()
    X3, y3 = load_wine(return_X_y=True)
    LogisticRegression(solver="newton", max_iter=5).fit(X3 / X3.max(0), y3)
    seen = [s for c in calls for s in c]
    assert seen and not any(seen)


def test_logistic_fused_scores_and_gradient(xp):
    """The one-pass scores' change and gradient (row blocks on NumPy) equal the
    two products ``X e`` and ``Xᵀ ω (σ(z + X e) − y)`` (one block, by hand)."""
    from xpml.linear_model._logistic import _scores_and_gradient

    X, y, sw = _many_rows(n=101)
    rng = np.random.default_rng(1)
    z, e = rng.standard_normal(101), rng.standard_normal(4)
    dz = X @ e[1:] + e[0]
    r = sw * (1 / (1 + np.exp(-(z + dz))) - y)
    want = np.concatenate([[r.sum()], X.T @ r])
    args = [xp.asarray(a) for a in (X, z, e, y.astype(float), sw)]
    for rows in (None, 10, 101):
        got_dz, got_g = _scores_and_gradient(
            *args, xp=xp.xp, fit_intercept=True, rows=rows
        )
        np.testing.assert_allclose(xp.to_numpy(got_dz), dz, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(xp.to_numpy(got_g), want, rtol=1e-12, atol=1e-12)
    _, g = _scores_and_gradient(
        *args[:2], args[2][1:], *args[3:], xp=xp.xp, fit_intercept=False
    )
    r = sw * (1 / (1 + np.exp(-(z + X @ e[1:]))) - y)
    np.testing.assert_allclose(xp.to_numpy(g), X.T @ r, rtol=1e-12, atol=1e-12)


def test_logistic_bfgs_update_secant_and_skip(xp):
    """BFGS: the update is symmetric and satisfies the secant equation
    ``H⁺ s = r``; a step without positive curvature leaves ``H`` unchanged."""
    from xpml.linear_model._logistic import _bfgs_update

    rng = np.random.default_rng(0)
    A = rng.standard_normal((5, 5))
    H = A @ A.T + 5 * np.eye(5)
    s = rng.standard_normal(5)
    r = (H + np.diag(rng.uniform(0.5, 1.0, 5))) @ s
    Hn = xp.to_numpy(_bfgs_update(*(xp.asarray(a) for a in (H, s, r)), xp=xp.xp))
    np.testing.assert_allclose(Hn @ s, r, rtol=1e-12)
    np.testing.assert_allclose(Hn, Hn.T, atol=1e-12)
    same = _bfgs_update(*(xp.asarray(a) for a in (H, s, -r)), xp=xp.xp)
    np.testing.assert_array_equal(xp.to_numpy(same), H)
