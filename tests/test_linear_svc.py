"""LinearSVC (trust-region Newton / proximal-point Newton) against scikit-learn's
LinearSVC (LIBLINEAR) solved to high precision, closed-form KKT conditions,
sample and class weights, every backend, overflow, host syncs."""

import warnings

import numpy as np
import pytest

from xpml.exceptions import ConvergenceWarning, InvalidParameterError
from xpml.svm._linear import LinearSVC

sk_svm = pytest.importorskip("sklearn.svm")
sk_datasets = pytest.importorskip("sklearn.datasets")


def _data(n=300, k=3, d=10, seed=0):
    X, y = sk_datasets.make_classification(
        n_samples=n,
        n_features=d,
        n_informative=min(6, d - 2),
        n_redundant=0,
        n_classes=k,
        n_clusters_per_class=1,
        flip_y=0.05,
        random_state=seed,
    )
    X = (X - X.mean(0)) / X.std(0) + 0.5  # an offset the intercept absorbs
    return X, y


def _sklearn(X, y, sample_weight=None, **kw):
    """LIBLINEAR solved to high precision (tol 1e-8, no iteration cap in reach)."""
    kw.setdefault("dual", True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = sk_svm.LinearSVC(tol=1e-8, max_iter=1_000_000, random_state=0, **kw)
        return est.fit(X, y, sample_weight=sample_weight)


def _primal(est, X, y, loss, C=1.0, sw=None, scaling=1.0):
    """½‖(w, b/s)‖² + C Σ sᵢ L per one-vs-rest subproblem (LIBLINEAR's objective,
    the intercept a regularised weight of the constant feature s)."""
    coef = np.atleast_2d(est.coef_)
    b = np.atleast_1d(est.intercept_)
    sw = np.ones(len(y)) if sw is None else sw
    classes = np.unique(y)
    out = []
    for r in range(coef.shape[0]):
        pos = classes[1] if coef.shape[0] == 1 else classes[r]
        yy = np.where(y == pos, 1.0, -1.0)
        xi = np.maximum(0.0, 1.0 - yy * (X @ coef[r] + b[r]))
        L = xi * xi if loss == "squared_hinge" else xi
        reg = coef[r] @ coef[r] + (b[r] / scaling) ** 2
        out.append(0.5 * reg + C * np.sum(sw * L))
    return np.array(out)


@pytest.mark.parametrize("dual", [False, True])
@pytest.mark.parametrize("k", [2, 3])
def test_squared_hinge_coefficients_match_liblinear(dual, k):
    """The squared-hinge objective is strictly convex, so w is unique: ours at
    tol 1e-8 within 1e-4 relative (max-norm) of LIBLINEAR's at tol 1e-8."""
    X, y = _data(k=k)
    ours = LinearSVC(dual=dual, C=0.5, tol=1e-8).fit(X, y)
    ref = _sklearn(X, y, C=0.5, dual=dual)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=0, atol=1e-4 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4 * scale)
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    assert ours.coef_.shape == ref.coef_.shape


@pytest.mark.parametrize("k", [2, 3])
def test_hinge_objective_matches_liblinear(k):
    """Hinge: w is unique too but LIBLINEAR's DCD reaches it slowly; compare the
    primal objective to 1e-6 relative and the predictions exactly."""
    X, y = _data(n=250, k=k)
    ours = LinearSVC(loss="hinge", C=0.5, tol=1e-8, max_iter=5000).fit(X, y)
    ref = _sklearn(X, y, loss="hinge", C=0.5)
    p_ours = _primal(ours, X, y, "hinge", C=0.5)
    p_ref = _primal(ref, X, y, "hinge", C=0.5)
    np.testing.assert_allclose(p_ours, p_ref, rtol=1e-6)
    assert np.all(p_ours <= p_ref * (1 + 1e-9))  # never worse than LIBLINEAR
    np.testing.assert_array_equal(ours.predict(X), ref.predict(X))
    np.testing.assert_allclose(ours.primal_objective_, p_ours, rtol=1e-10)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_duality_gap_and_kkt(loss):
    """primal − dual ≥ 0 and ≈ 0 at a tight tol; the dual KKT conditions hold;
    w = Σ αᵢyᵢxᵢ (exactly for the hinge, to the final gradient otherwise)."""
    X, y = _data(n=200, k=2)
    est = LinearSVC(loss=loss, C=0.5, fit_intercept=False, tol=1e-8, max_iter=5000)
    est.fit(X, y)
    gap = float(est.primal_objective_[0] - est.dual_objective_[0])
    assert -1e-9 <= gap <= 1e-7 * float(est.primal_objective_[0])
    yy = np.where(y == 1, 1.0, -1.0)
    margin = yy * est.decision_function(X)
    a = est.dual_coef_ * yy  # dual_coef_ holds αᵢyᵢ
    assert np.all(a >= 0)
    assert np.all(a[margin > 1 + 1e-6] < 1e-10)
    if loss == "hinge":
        assert np.all(a <= 0.5 + 1e-12)
        np.testing.assert_allclose(a[margin < 1 - 1e-6], 0.5)
        np.testing.assert_allclose(est.coef_[0], est.dual_coef_ @ X, atol=1e-10)
    else:  # squared hinge: α = 2C ξ
        np.testing.assert_allclose(a, 2 * 0.5 * np.maximum(1 - margin, 0), atol=1e-12)
        np.testing.assert_allclose(est.coef_[0], est.dual_coef_ @ X, atol=1e-6)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_sample_weights_match_liblinear(loss):
    X, y = _data(n=200, k=3)
    sw = np.random.default_rng(0).uniform(0.0, 3.0, size=len(y))
    sw[:5] = 0.0
    ours = LinearSVC(loss=loss, tol=1e-8, max_iter=5000).fit(X, y, sample_weight=sw)
    ref = _sklearn(X, y, sample_weight=sw, loss=loss)
    p_ours = _primal(ours, X, y, loss, sw=sw)
    np.testing.assert_allclose(p_ours, _primal(ref, X, y, loss, sw=sw), rtol=1e-6)
    if loss == "squared_hinge":
        scale = np.abs(ref.coef_).max()
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-4 * scale)


def test_sample_weights_equal_repetition():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = (X[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(int)
    w = rng.integers(0, 3, size=40)
    kw = dict(C=0.3, tol=1e-10, max_iter=20000)
    a = LinearSVC(**kw).fit(X, y, sample_weight=w.astype(float))
    b = LinearSVC(**kw).fit(np.repeat(X, w, axis=0), np.repeat(y, w))
    np.testing.assert_allclose(a.coef_, b.coef_, atol=1e-8)
    np.testing.assert_allclose(a.intercept_, b.intercept_, atol=1e-8)


@pytest.mark.parametrize("class_weight", ["balanced", {0: 2.0, 2: 0.5}])
def test_class_weight_matches_liblinear(class_weight):
    X, y = _data(n=300, k=3)
    keep = np.r_[np.flatnonzero(y != 1), np.flatnonzero(y == 1)[:30]]
    X, y = X[keep], y[keep]  # unbalanced
    ours = LinearSVC(class_weight=class_weight, tol=1e-8).fit(X, y)
    ref = _sklearn(X, y, class_weight=class_weight)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-4 * scale)
    yb = (y == 1).astype(int)
    ours = LinearSVC(class_weight="balanced", tol=1e-8).fit(X, yb)
    ref = _sklearn(X, yb, class_weight="balanced")
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-4 * scale)


def test_intercept_scaling_matches_liblinear():
    X, y = _data(n=200, k=3)
    for scaling in (0.5, 10.0):
        ours = LinearSVC(intercept_scaling=scaling, tol=1e-8).fit(X, y)
        ref = _sklearn(X, y, intercept_scaling=scaling)
        scale = np.abs(ref.coef_).max()
        np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-4 * scale)
        np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4 * scale)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_same_model_on_every_backend(xp, loss):
    """Coefficients to 1e-8 of the NumPy fit and identical predictions (3 classes)."""
    X, y = _data(n=120, k=3, d=5, seed=1)
    y = np.array([3, 5, 7])[y]
    kw = dict(loss=loss, C=0.5, tol=1e-6, max_iter=2000)
    ref = LinearSVC(**kw).fit(X, y)
    got = LinearSVC(**kw).fit(xp.asarray(X), xp.asarray(y))
    pred = got.predict(xp.asarray(X))
    assert xp.is_native(pred)
    np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(X))
    np.testing.assert_allclose(xp.to_numpy(got.coef_), ref.coef_, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_overflowing_inputs_raise_a_clear_error(loss):
    """Issue 11.4: X × 1e300 overflows the solve; say so instead of predicting
    one class."""
    X, y = _data(n=100, k=2)
    with pytest.raises(ValueError, match="non-finite values.*Rescale X"):
        LinearSVC(loss=loss).fit(X * 1e300, y)


def test_syncs_per_newton_step_do_not_grow_with_n():
    """Torch backend: host reads per Newton step are a handful and the same at
    n = 400 and n = 4000 (one status read per step, one per 4 CG steps)."""
    pytest.importorskip("torch")
    import xpml
    from xpml.testing import count_syncs

    per_step = []
    for n in (400, 4000):
        X, y = _data(n=n, k=3, d=20)
        with xpml.backend("torch"), count_syncs() as c:
            est = LinearSVC(tol=1e-6).fit(X, y)
        per_step.append(c.syncs / est.n_iter_)
    assert max(per_step) <= 8, per_step


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_curvature_rows_give_the_full_hessian_products(loss, monkeypatch):
    """Hessian products over the gathered rows with curvature equal the
    products over all rows (1e-12), and a fit that always gathers gives the
    model of one that always uses all rows (the code before the gather):
    coefficients within 1e-6 of their scale at tol 1e-8, objectives to 1e-9
    relative."""
    import xpml.svm._linear as lin

    X, y = _data(n=200, k=2, d=6, seed=2)
    Z = np.c_[X, np.ones(len(X))]
    Y = np.where(y == 1, 1.0, -1.0)[:, None]
    kind = "prox_hinge" if loss == "hinge" else "squared_hinge"
    C = np.full_like(Y, 0.5)
    prob = lin._Loss(Z, Y, C, kind, a=0.2 * C, mu=0.1)
    near = LinearSVC(loss=loss, C=0.5, tol=1e-2).fit(X, y)  # a point near the optimum
    W = np.c_[near.coef_, near.intercept_]
    _, _, h = lin._loss_terms(prob, W, xp=np)
    count = int(np.sum(np.any(h > 0, axis=1)))
    assert 0 < count < len(X)
    monkeypatch.setattr(lin, "_GATHER_MAX", 1.0)  # gather whatever the count
    S = np.random.default_rng(1).normal(size=W.shape)
    Zi, hi = lin._curvature_rows(prob, h, count, xp=np)
    assert Zi.shape[0] == count
    full = lin._hess_vec((Z, h), S, xp=np)
    np.testing.assert_allclose(lin._hess_vec((Zi, hi), S, xp=np), full, atol=1e-12)

    kw = dict(loss=loss, C=0.5, tol=1e-8, max_iter=5000)
    got = LinearSVC(**kw).fit(X, y)
    monkeypatch.setattr(lin, "_GATHER_MAX", -1.0)  # every product over all rows
    ref = LinearSVC(**kw).fit(X, y)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(got.primal_objective_, ref.primal_objective_, rtol=1e-9)


def test_convergence_warning_and_errors():
    X, y = _data(n=100, k=2)
    with pytest.warns(ConvergenceWarning, match="max_iter=1"):
        est = LinearSVC(max_iter=1, tol=1e-12).fit(X, y)
    assert est.n_iter_ == 1
    with pytest.raises(InvalidParameterError, match="'loss'.*'hinge'.*'squared_hinge'"):
        LinearSVC(loss="log").fit(X, y)
    with pytest.raises(InvalidParameterError, match="'penalty'"):
        LinearSVC(penalty="l1").fit(X, y)
    with pytest.raises(InvalidParameterError, match="'C'"):
        LinearSVC(C=0.0).fit(X, y)
    with pytest.raises(ValueError, match="dual=False.*hinge"):
        LinearSVC(loss="hinge", dual=False).fit(X, y)
    with pytest.raises(ValueError, match="class_weight.*label 9"):
        LinearSVC(class_weight={9: 1.0}).fit(X, y)
    with pytest.raises(ValueError, match="class"):
        LinearSVC().fit(X, np.zeros(len(X)))


@pytest.mark.parametrize("dual", [True, False])
def test_symmetric_data_closed_form(dual):
    """Four symmetric points: the hard-margin solution w = (1/3, 1/3), α = 1/18
    each. Every projected gradient is equal at α = 0, so a spread test
    (max PG − min PG) would stop at once; the max |PG| test does not."""
    X = np.array([[-2.0, -1.0], [-1.0, -2.0], [1.0, 2.0], [2.0, 1.0]])
    y = np.array([0, 0, 1, 1])
    est = LinearSVC(loss="hinge", fit_intercept=False, tol=1e-10).fit(X, y)
    np.testing.assert_allclose(est.coef_, [[1 / 3, 1 / 3]], rtol=1e-9)
    np.testing.assert_allclose(est.dual_coef_, [-1, -1, 1, 1] / np.float64(18))
    sq = LinearSVC(fit_intercept=False, dual=dual, tol=1e-10).fit(X, y)
    # squared hinge, C = 1: w = (a, a) minimising a² + 4(1 − 3a)²: a = 12/37
    np.testing.assert_allclose(sq.coef_, [[12 / 37, 12 / 37]], rtol=1e-8)


# ------------------------------------------------ blocked dual coordinate descent
def _dcd_reference(Z, yy, U, Dg, epochs, rng, shrinking=True, tol=0.0):
    """Unblocked DCD (Hsieh et al. 2008), one coordinate at a time with
    ``w`` updated after each: the order and shrinking rules of the blocked
    solver (permutation of the sorted active set per epoch, shrunk coordinates
    leave it at the end of the epoch)."""
    n = Z.shape[0]
    alpha, w = np.zeros(n), np.zeros(Z.shape[1])
    qd = np.einsum("ij,ij->i", Z, Z) + Dg
    eligible = np.flatnonzero(U > 0)
    active, lo, hi = eligible, -np.inf, np.inf
    for _ in range(epochs):
        perm = rng.permutation(active)
        keep = np.ones(len(perm), bool)
        pgmax, pgmin = -np.inf, np.inf
        for s, i in enumerate(perm):
            G = yy[i] * (w @ Z[i]) - 1 + Dg[i] * alpha[i]
            PG = G
            if alpha[i] == 0:
                if G > hi:
                    keep[s] = False
                    continue
                PG = min(G, 0)
            elif alpha[i] >= U[i]:
                if G < lo:
                    keep[s] = False
                    continue
                PG = max(G, 0)
            pgmax, pgmin = max(pgmax, PG), min(pgmin, PG)
            if abs(PG) > 1e-12:
                new = min(max(alpha[i] - G / qd[i], 0), U[i])
                w += (new - alpha[i]) * yy[i] * Z[i]
                alpha[i] = new
        active = np.sort(perm[keep])
        if pgmax - pgmin <= tol:
            if len(active) == len(eligible):
                break
            active, lo, hi = eligible, -np.inf, np.inf
        elif shrinking:
            lo = pgmin if pgmin < 0 else -np.inf
            hi = pgmax if pgmax > 0 else np.inf
    return w, alpha


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("block", [1, 7, 128])
@pytest.mark.parametrize("shrinking", [True, False])
def test_blocked_dcd_iterates_equal_unblocked_dcd(loss, block, shrinking):
    """After 1, 3 and 12 epochs (shrinking at work, not converged) the blocked
    solver's w and α equal one-coordinate-at-a-time DCD's to 1e-12."""
    import xpml.svm._linear as lin

    X, y = _data(n=90, k=2, d=6, seed=3)
    Z = np.c_[X, np.ones(len(X))]
    yy = np.where(y == 1, 1.0, -1.0)
    C = np.linspace(0.2, 2.0, len(X))
    C[::17] = 0.0  # zero-cost samples stay at α = 0
    if loss == "hinge":
        U, Dg = C.copy(), np.zeros_like(C)
    else:
        U = np.where(C > 0, np.inf, 0.0)
        Dg = np.where(C > 0, 0.5 / np.where(C > 0, C, 1), 0.0)
    prob = lin._Loss(Z, yy[:, None], C[:, None], loss)
    for epochs in (1, 3, 12):
        opts = lin._DCDOptions(0.0, epochs, block=block, shrinking=shrinking)
        W, alpha, _, it, ok = lin._solve_dcd(
            prob, opts, np.random.default_rng(5), xp=np
        )
        w_ref, a_ref = _dcd_reference(
            Z, yy, U, Dg, epochs, np.random.default_rng(5), shrinking
        )
        assert it == epochs and not ok
        np.testing.assert_allclose(W[0], w_ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(alpha[:, 0], a_ref, rtol=0, atol=1e-12)
        assert np.all(alpha[C == 0] == 0)


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_dcd_matches_liblinear(loss, k):
    """solver="dcd" against LIBLINEAR's dual solver at the same C, loss, tol
    and intercept_scaling: objective to 1e-6 relative, coefficients to 1e-3 of
    their scale (both stop at tol = 1e-5 on the spread of the projected
    gradient, so neither is exact), duality gap small."""
    X, y = _data(n=200, k=k, d=6, seed=1)
    kw = dict(loss=loss, C=0.5, tol=1e-5, intercept_scaling=2.0)
    ours = LinearSVC(solver="dcd", random_state=0, max_iter=100_000, **kw).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = sk_svm.LinearSVC(dual=True, random_state=0, max_iter=10**6, **kw).fit(
            X, y
        )
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-3 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-3 * scale)
    p_ours = _primal(ours, X, y, loss, C=0.5, scaling=2.0)
    p_ref = _primal(ref, X, y, loss, C=0.5, scaling=2.0)
    np.testing.assert_allclose(p_ours, p_ref, rtol=1e-4)
    np.testing.assert_allclose(ours.primal_objective_, p_ours, rtol=1e-10)
    gap = ours.primal_objective_ - ours.dual_objective_
    assert np.all(gap >= -1e-9) and np.all(gap <= 1e-3 * p_ours), gap


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_dcd_same_model_on_every_backend(xp, loss):
    """The DCD iterates are the same arithmetic on every library: coefficients
    and duals to 1e-9 of the NumPy fit, identical predictions."""
    X, y = _data(n=120, k=3, d=5, seed=1)
    y = np.array([3, 5, 7])[y]
    kw = dict(loss=loss, C=0.5, tol=1e-4, solver="dcd", random_state=0, max_iter=150)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # hinge: slow tail
        ref = LinearSVC(**kw).fit(X, y)
        got = LinearSVC(**kw).fit(xp.asarray(X), xp.asarray(y))
    assert got.n_iter_ == ref.n_iter_
    np.testing.assert_array_equal(
        xp.to_numpy(got.predict(xp.asarray(X))), ref.predict(X)
    )
    np.testing.assert_allclose(xp.to_numpy(got.coef_), ref.coef_, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(
        xp.to_numpy(got.dual_coef_), ref.dual_coef_, rtol=1e-9, atol=1e-9
    )


def test_dcd_errors_and_warning():
    X, y = _data(n=100, k=2)
    with pytest.raises(ValueError, match="dual=False.*solver='dcd'"):
        LinearSVC(solver="dcd", dual=False).fit(X, y)
    with pytest.raises(InvalidParameterError, match="'solver'.*'newton'.*'dcd'"):
        LinearSVC(solver="cd").fit(X, y)
    with pytest.warns(ConvergenceWarning, match="max_iter=2 epochs"):
        est = LinearSVC(solver="dcd", max_iter=2, tol=1e-12).fit(X, y)
    assert est.n_iter_ == 2
    with pytest.raises(ValueError, match="non-finite values.*Rescale X"):
        LinearSVC(solver="dcd").fit(X * 1e300, y)


def test_dcd_syncs_per_block_do_not_grow_with_n():
    """Torch backend: one download per block of 128 coordinates (the Gram and
    margins together) at n = 400 and n = 4000, plus a few per fit."""
    pytest.importorskip("torch")
    import xpml
    import xpml.svm._linear as lin
    from xpml.testing import count_syncs

    blocks = [0]
    original = lin._dcd_block

    def counted(*args):
        blocks[0] += 1
        return original(*args)

    lin._dcd_block = counted
    try:
        per_block = []
        for n in (400, 4000):
            X, y = _data(n=n, k=2, d=20)
            blocks[0] = 0
            with xpml.backend("torch"), count_syncs() as c:
                LinearSVC(solver="dcd", max_iter=3, tol=1e-12).fit(X, y)
            per_block.append((c.syncs - 6) / blocks[0])
    finally:
        lin._dcd_block = original
    assert max(per_block) <= 2, per_block
