"""SVC on the vectorized SMO: scikit-learn parity, KKT, backends, memory budget."""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest

import xpml
from xpml.exceptions import ConvergenceWarning, InvalidParameterError
from xpml.svm import SVC
from xpml.svm._smo import KernelRows, solve_subproblem

sk_svm = pytest.importorskip("sklearn.svm")
datasets = pytest.importorskip("sklearn.datasets")
from sklearn.metrics.pairwise import pairwise_kernels  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

TOL = 1e-6


# ------------------------------------------------------------------ data
@functools.cache
def _dataset(name):
    if name == "breast_cancer":
        X, y = datasets.load_breast_cancer(return_X_y=True)
    elif name == "wine":
        X, y = datasets.load_wine(return_X_y=True)
    else:  # digits: a stratified subset keeps 45 one-vs-one problems quick
        X, y = datasets.load_digits(return_X_y=True)
        keep = np.concatenate([np.flatnonzero(y == c)[:70] for c in range(10)])
        X, y = X[keep], y[keep]
    X = StandardScaler().fit_transform(X)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    cut = int(0.7 * len(y))
    tr, te = perm[:cut], perm[cut:]
    return X[tr], y[tr], X[te], y[te]


def _kernel_params(est):
    if est.kernel == "linear":
        return {}
    p = {"gamma": est._gamma}
    if est.kernel == "poly":
        p.update(degree=est.degree, coef0=est.coef0)
    return p


def _pair_duals(dual_coef, n_support, SV, kernel, params):
    """Dual objective ``Σα − ½ αᵀQα`` of every one-vs-one problem, read from a
    scikit-learn style model (LIBSVM layout)."""
    k = len(n_support)
    start = np.concatenate([[0], np.cumsum(n_support)])
    out = []
    for i in range(k):
        for j in range(i + 1, k):
            si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
            coef = np.concatenate([dual_coef[j - 1, si], dual_coef[i, sj]])
            S = np.concatenate([SV[si], SV[sj]])
            K = pairwise_kernels(S, metric=kernel, **params)
            out.append(np.abs(coef).sum() - 0.5 * coef @ K @ coef)
    return np.array(out)


PARITY_CASES = [
    (d, k)
    for d in ("breast_cancer", "wine", "digits")
    for k in ("linear", "rbf", "poly")
]


@pytest.mark.parametrize(
    "name,kernel", PARITY_CASES, ids=[f"{d}-{k}" for d, k in PARITY_CASES]
)
def test_sklearn_parity(name, kernel):
    Xtr, ytr, Xte, yte = _dataset(name)
    ours = SVC(kernel=kernel, tol=TOL).fit(Xtr, ytr)
    ref = sk_svm.SVC(kernel=kernel, tol=TOL).fit(Xtr, ytr)
    k = len(ref.classes_)
    # identical test predictions, decision values within 1e-3
    np.testing.assert_array_equal(ours.predict(Xte), ref.predict(Xte))
    np.testing.assert_allclose(
        ours.decision_function(Xte), ref.decision_function(Xte), atol=1e-3, rtol=0
    )
    # shapes and sign conventions of the fitted attributes
    assert ours.dual_coef_.shape == ref.dual_coef_.shape
    assert ours.intercept_.shape == ref.intercept_.shape
    assert ours.n_iter_.shape == ref.n_iter_.shape
    np.testing.assert_array_equal(ours.n_support_, ref.n_support_)
    np.testing.assert_array_equal(ours.classes_, ref.classes_)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4)
    # dual objectives within 1e-5 relative (scikit-learn's read from its dual_coef_)
    ref_dual = _pair_duals(
        ref.dual_coef_,
        ref.n_support_,
        ref.support_vectors_,
        kernel,
        _kernel_params(ours),
    )
    np.testing.assert_allclose(ours.dual_objective_, ref_dual, rtol=1e-5)
    # the same layout: our dual_coef_ evaluated like scikit-learn's gives our duals
    mine = _pair_duals(
        ours.dual_coef_,
        ours.n_support_,
        ours.support_vectors_,
        kernel,
        _kernel_params(ours),
    )
    np.testing.assert_allclose(mine, ours.dual_objective_, rtol=1e-8)
    if k == 2:
        n = len(ytr)
        a, b = np.zeros(n, bool), np.zeros(n, bool)
        a[ours.support_], b[ref.support_] = True, True
        assert np.mean(a == b) >= 0.99
        ca = dict(zip(ours.support_.tolist(), ours.dual_coef_[0]))
        cb = dict(zip(ref.support_.tolist(), ref.dual_coef_[0]))
        common = sorted(set(ca) & set(cb))
        np.testing.assert_allclose(
            [ca[i] for i in common], [cb[i] for i in common], atol=1e-3
        )  # same values, same sign convention
    # support vectors grouped by class, by index inside a class (LIBSVM's order)
    np.testing.assert_array_equal(ours.support_, ref.support_) if k > 2 else None
    cls = ytr[ours.support_]
    assert np.all(np.diff(np.searchsorted(ours.classes_, cls)) >= 0)
    for c in ours.classes_:
        s = ours.support_[cls == c]
        np.testing.assert_array_equal(s, np.sort(s))
    if k == 2:
        pass
    else:
        for dshape in ("ovo", "ovr"):
            o = SVC(kernel=kernel, tol=TOL, decision_function_shape=dshape).fit(
                Xtr, ytr
            )
            r = sk_svm.SVC(kernel=kernel, tol=TOL, decision_function_shape=dshape).fit(
                Xtr, ytr
            )
            if name == "digits" and dshape == "ovr":
                continue  # covered above
            np.testing.assert_allclose(
                o.decision_function(Xte), r.decision_function(Xte), atol=1e-3
            )


def _train_margins(est, X, y):
    f = est.decision_function(X)
    ypm = np.where(y == est.classes_[1], 1.0, -1.0)
    return ypm * f, ypm


def test_kkt_conditions_and_equality_constraint():
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    C = 1.0
    est = SVC(kernel="rbf", C=C, tol=TOL).fit(Xtr, ytr)
    margin, ypm = _train_margins(est, Xtr, ytr)
    alpha = np.zeros(len(ytr))
    alpha[est.support_] = np.abs(est.dual_coef_[0])
    eps = 1e-5
    zero, bound = alpha == 0, alpha >= C
    free = ~zero & ~bound
    assert zero.any() and free.any() and bound.any()
    assert np.all(margin[zero] >= 1 - eps)  # outside (or on) the margin
    np.testing.assert_allclose(margin[free], 1.0, atol=eps)  # exactly on it
    assert np.all(margin[bound] <= 1 + eps)  # inside it or misclassified
    assert np.all(alpha <= C)
    # Σ αᵢ yᵢ = 0, and dual_coef_ = αᵢ yᵢ with yᵢ = +1 for classes_[1]
    assert abs(est.dual_coef_.sum()) < 1e-10
    np.testing.assert_array_equal(np.sign(est.dual_coef_[0]), ypm[est.support_])
    # primal = dual at the optimum: the duality gap certifies convergence
    assert est.duality_gap_[0] >= -1e-8
    assert est.duality_gap_[0] <= 1e-4 * abs(est.dual_objective_[0])
    assert est.violation_[0] < TOL and est.fit_status_ == 0


def test_multiclass_equality_constraint_each_pair():
    Xtr, ytr, _, _ = _dataset("wine")
    est = SVC(kernel="rbf", tol=TOL).fit(Xtr, ytr)
    start = np.concatenate([[0], np.cumsum(est.n_support_)])
    for i in range(3):
        for j in range(i + 1, 3):
            s = (
                est.dual_coef_[j - 1, start[i] : start[i + 1]].sum()
                + est.dual_coef_[i, start[j] : start[j + 1]].sum()
            )
            assert abs(s) < 1e-10


def test_retraining_on_support_vectors_reproduces_decision():
    Xtr, ytr, Xte, _ = _dataset("breast_cancer")
    full = SVC(kernel="linear", tol=1e-8).fit(Xtr, ytr)
    sv = SVC(kernel="linear", tol=1e-8).fit(Xtr[full.support_], ytr[full.support_])
    np.testing.assert_allclose(
        sv.decision_function(Xte), full.decision_function(Xte), atol=1e-5
    )
    assert len(sv.support_) == len(full.support_)
    # linear kernel: (w, b) themselves agree
    w_full = full.dual_coef_[0] @ full.support_vectors_
    w_sv = sv.dual_coef_[0] @ sv.support_vectors_
    np.testing.assert_allclose(w_sv, w_full, atol=1e-5)
    np.testing.assert_allclose(sv.intercept_, full.intercept_, atol=1e-5)


# ------------------------------------------------------------- backends
def test_same_predictions_on_every_backend(xp):
    Xtr, ytr, Xte, _ = _dataset("wine")
    ref = SVC(kernel="rbf", tol=1e-8).fit(Xtr, ytr)
    est = SVC(kernel="rbf", tol=1e-8).fit(xp.asarray(Xtr), xp.asarray(ytr))
    pred = est.predict(xp.asarray(Xte))
    assert xp.is_native(pred)
    np.testing.assert_array_equal(xp.to_numpy(pred), ref.predict(Xte))
    np.testing.assert_allclose(
        xp.to_numpy(est.decision_function(xp.asarray(Xte))),
        ref.decision_function(Xte),
        atol=1e-6,
    )


def test_parity_helper_numpy_strict_torch():
    pytest.importorskip("torch")
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    report = xpml.parity.compare(
        SVC(kernel="rbf", tol=1e-8),
        Xtr[:200],
        ytr[:200],
        backends=("numpy", "array_api_strict", "torch"),
    )
    for d in report.diffs.values():  # last-bit differences may reorder SMO steps
        d.pop("attr:n_iter_", None)  # (and shrinking): the solution does not move
        # NumPy computes only the rows of variables that moved: a smaller cache
        d.pop("attr:cache_peak_bytes_", None)
    report.assert_close(rtol=1e-6, atol=1e-8)
    # Platt scaling and pairwise coupling too (three classes)
    Xtr, ytr, _, _ = _dataset("wine")
    report = xpml.parity.compare(
        SVC(probability=True, random_state=0, tol=1e-8),
        Xtr[:60],
        ytr[:60],
        backends=("numpy", "array_api_strict", "torch"),
    )
    for (
        d
    ) in report.diffs.values():  # last-bit kernel differences may reorder SMO steps:
        d.pop("attr:n_iter_", None)  # the step count can differ, the solution does not
        d.pop("attr:cache_peak_bytes_", None)
    report.assert_close(rtol=1e-6, atol=1e-8)
    assert "predict_proba" in report.results["torch"]


def test_fast_and_portable_subproblem_solvers_agree():
    import array_api_strict as xs

    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    y = np.where(rng.random(40) < 0.5, 1.0, -1.0)
    C = np.full(40, 2.0)
    a0 = np.zeros(40)
    v0 = y.copy()
    a1, v1, s1 = solve_subproblem(K, y, a0, C, v0, xp=np, tol=1e-9, max_steps=5000)
    a2, v2, s2 = solve_subproblem(
        *(xs.asarray(z) for z in (K, y, a0, C, v0)), xp=xs, tol=1e-9, max_steps=5000
    )
    np.testing.assert_allclose(np.asarray(a2), a1, atol=1e-12)
    np.testing.assert_allclose(np.asarray(v2), v1, atol=1e-12)
    assert s1 == s2  # same stopping rule, same step count
    assert abs(a1 @ y) < 1e-12


@pytest.mark.parametrize("tol", [0.5, 0.05, 0.0])
def test_host_subproblem_stops_where_the_portable_one_does(tol):
    """The host solver tests only the partner it picked against ``tol`` and
    scans every ``I_low`` score when that one is below it (at a loose inner
    tolerance, most working sets end there); with ``tol = 0`` the clipped
    scores cannot decide and the full test runs. Same steps, same answer as
    the portable solver, which tests the maximum every step."""
    import array_api_strict as xs

    rng = np.random.default_rng(7)
    X = rng.normal(size=(60, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    y = np.where(X[:, 0] + 0.8 * rng.normal(size=60) > 0, 1.0, -1.0)
    C = np.full(60, 1.0)
    a0, v0 = np.zeros(60), y.copy()
    kw = {"tol": tol, "max_steps": 400}
    a1, v1, s1 = solve_subproblem(K, y, a0, C, v0, xp=np, **kw)
    a2, v2, s2 = solve_subproblem(
        *(xs.asarray(z) for z in (K, y, a0, C, v0)), xp=xs, **kw
    )
    assert s1 == s2 and 0 < s1 < 400
    np.testing.assert_allclose(np.asarray(a2), a1, atol=1e-12)
    np.testing.assert_allclose(np.asarray(v2), v1, atol=1e-12)


@pytest.mark.parametrize("tol", [1e-3, 0.0, -0.5])
def test_host_subproblem_takes_no_step_when_optimal_by_a_margin(tol):
    """``v = −y``: every score ``b = m − v`` over ``I_low`` is −2, below any
    of these ``tol``; the clipped scores (all 0) must not be read as a
    violation when ``tol ≤ 0``."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(20, 2))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    y = np.where(rng.random(20) < 0.5, 1.0, -1.0)
    a0 = np.zeros(20)
    a1, v1, steps = solve_subproblem(
        K, y, a0, np.ones(20), -y, xp=np, tol=tol, max_steps=50
    )
    assert steps == 0
    np.testing.assert_array_equal(a1, a0)
    np.testing.assert_array_equal(v1, -y)


def test_working_set_unique_is_numpys():
    """The working set's sorted unique (a sort and a comparison of
    neighbours) is ``np.unique``: repeats, one entry, none."""
    from xpml.svm._smo import _sorted_unique

    rng = np.random.default_rng(9)
    for idx in (
        rng.integers(0, 50, size=120),
        np.array([7]),
        np.zeros(0, dtype=np.int64),
        np.array([3, 3, 3]),
    ):
        got = _sorted_unique(idx)
        np.testing.assert_array_equal(got, np.unique(idx))
        assert got.dtype == idx.dtype


@pytest.mark.parametrize("with_previous_set", [False, True])
def test_numpy_proposal_is_the_portable_one(with_previous_set):
    """The NumPy proposal (its own functions, no packing) returns what the
    portable one reads back from its packed transfer: candidates, the free
    mask of the previous set, the violation, the dual objective and the
    device arrays it came from; on a state with variables at both bounds,
    and with fewer admissible candidates than asked for."""
    import array_api_compat.numpy as cnp

    from xpml.svm._smo import _Problem
    from xpml.utils._array_api import dispatch

    rng = np.random.default_rng(11)
    n = 80
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    C = np.full(n, 2.0)
    alpha = np.clip(rng.normal(1.0, 1.5, size=n), 0.0, 2.0)
    v = rng.normal(size=n)
    B_prev = np.sort(rng.permutation(n)[:20]) if with_previous_set else None
    for h in (5, 70):
        prob = _Problem(y, C, alpha, v, np.asarray(-np.inf))
        fast = dispatch("svm.propose", cnp)(prob, h, B_prev, xp=cnp)
        prob = _Problem(y, C, alpha, v, np.asarray(-np.inf))
        slow = dispatch("svm.propose", cnp, fast=False)(prob, h, B_prev, xp=cnp)
        for f, s in zip(fast[:3], slow[:3]):
            np.testing.assert_array_equal(f, s)
        assert fast[3] == slow[3] and fast[4] == slow[4]  # violation, dual
        for f, s in zip(fast[5], slow[5]):
            if s is None:
                assert f is None
            else:
                np.testing.assert_array_equal(f, s)
        up = np.where(y > 0, alpha < C, alpha > 0)
        assert fast[0].shape[0] == min(h, int(up.sum()))


def test_portable_proposal_keeps_indices_past_float32_precision():
    """A float32 problem of more than 2**24 variables: the portable proposal
    (the one GPU libraries run) returns the violators' exact indices, which
    float32 cannot hold (2**24 + 1 would come back as 2**24)."""
    import array_api_compat.numpy as cnp

    from xpml.svm._smo import _Problem
    from xpml.utils._array_api import dispatch

    n = 2**24 + 8
    y = np.ones(n, dtype=np.float32)
    C = np.ones(n, dtype=np.float32)
    alpha = np.full(n, 0.5, dtype=np.float32)  # all free: in both index sets
    v = np.zeros(n, dtype=np.float32)
    v[[2**24 + 1, 2**24 + 3, 2**24 + 5]] = [3.0, 2.0, 1.0]  # the top of I_up
    v[[2**24 + 7, 5]] = [-4.0, -2.5]  # the top of I_low (scored −v)
    prob = _Problem(y, C, alpha, v, np.asarray(-np.inf, dtype=np.float32))
    got = dispatch("svm.propose", cnp, fast=False)(prob, 3, None, xp=cnp)
    np.testing.assert_array_equal(got[0], [2**24 + 1, 2**24 + 3, 2**24 + 5])
    np.testing.assert_array_equal(got[1][:2], [2**24 + 7, 5])
    assert got[3] == 7.0  # the violation: 3 + 4


# --------------------------------------------------------- memory budget
def test_small_cache_budget_keeps_peak_under_budget():
    rng = np.random.default_rng(0)
    n = 800
    X = rng.normal(size=(n, 5))
    y = (X[:, 0] + 0.5 * X[:, 1] ** 2 + 0.3 * rng.normal(size=n) > 0.5).astype(int)
    budget_mb = 0.4  # 104 rows of 800 values: far below the 5 MB n×n matrix
    small = SVC(kernel="rbf", gamma=0.5, tol=1e-6, cache_size=budget_mb).fit(X, y)
    big = SVC(kernel="rbf", gamma=0.5, tol=1e-6).fit(X, y)
    assert 0 < small.cache_peak_bytes_ <= budget_mb * 2**20
    assert big.cache_peak_bytes_ <= n * n * 8 + 4 * 1024 * n * 8
    np.testing.assert_allclose(
        small.decision_function(X), big.decision_function(X), atol=1e-4
    )
    np.testing.assert_array_equal(small.predict(X), big.predict(X))


def test_kernel_rows_lru_counts_recomputation():
    import array_api_compat

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    xp = array_api_compat.array_namespace(X)
    budget = 300 * 8 * 40  # 40 rows
    rows = KernelRows(
        X,
        "rbf",
        {"gamma": 0.3, "degree": 3, "coef0": 0.0},
        xp=xp,
        memory_budget=budget,
        q=64,
    )
    q = rows.q
    assert rows.cap == q < 64  # the budget lowered the working-set size
    assert rows.size == 0  # nothing allocated before rows are asked for
    B = np.arange(q)
    slots = rows.fetch(B)
    assert rows.size == q  # grown to what was asked for, within the cap
    K = np.exp(-0.3 * ((X[:q, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(rows.block(B), K[:, :q], atol=1e-12)
    np.testing.assert_allclose(rows.product(slots, np.ones(q)), K.sum(0), atol=1e-10)
    rows.fetch(B[:2])
    assert rows.hits == 2
    rows.fetch(np.arange(q, 2 * q))  # evicts the first set
    rows.fetch(B)
    assert rows.computed_rows == 3 * q and rows.hits == 2
    assert rows.peak_bytes <= budget


# --------------------------------------------------------------- kernels
def test_precomputed_and_callable_kernels_match_builtin():
    Xtr, ytr, Xte, _ = _dataset("wine")
    rbf = SVC(kernel="rbf", gamma=0.1, tol=1e-8).fit(Xtr, ytr)
    Ktr = xpml.kernels.gram(Xtr, kernel="rbf", gamma=0.1)
    Kte = xpml.kernels.gram(Xte, Xtr, kernel="rbf", gamma=0.1)
    pre = SVC(kernel="precomputed", tol=1e-8).fit(Ktr, ytr)
    np.testing.assert_allclose(
        pre.decision_function(Kte), rbf.decision_function(Xte), atol=1e-6
    )
    np.testing.assert_array_equal(pre.support_, rbf.support_)
    assert pre.support_vectors_.shape[0] == 0

    def lin_xp(A, B, xp):
        return A @ B.T

    lin = SVC(kernel="linear", tol=1e-8).fit(Xtr, ytr)
    for f in (lin_xp, lambda A, B: A @ B.T):
        c = SVC(kernel=f, tol=1e-8).fit(Xtr, ytr)
        np.testing.assert_allclose(
            c.decision_function(Xte), lin.decision_function(Xte), atol=1e-6
        )


def test_non_psd_sigmoid_kernel_terminates():
    Xtr, ytr, Xte, _ = _dataset("breast_cancer")
    ours = SVC(kernel="sigmoid", gamma=0.5, coef0=-1.0, tol=1e-3).fit(Xtr, ytr)
    ref = sk_svm.SVC(kernel="sigmoid", gamma=0.5, coef0=-1.0, tol=1e-3).fit(Xtr, ytr)
    assert ours.fit_status_ == 0
    assert np.mean(ours.predict(Xte) == ref.predict(Xte)) >= 0.9


@pytest.mark.parametrize("gamma", ["scale", "auto", 0.02])
def test_gamma_meaning(gamma):
    Xtr, ytr, _, _ = _dataset("wine")
    Xtr = Xtr * 3.0
    ours = SVC(gamma=gamma).fit(Xtr, ytr)
    ref = sk_svm.SVC(gamma=gamma).fit(Xtr, ytr)
    assert ours._gamma == pytest.approx(ref._gamma, rel=1e-12)


# --------------------------------------------------------------- weights
@pytest.mark.parametrize("cw", ["balanced", {0: 2.0, 1: 0.5}])
def test_class_weight_and_sample_weight_match_sklearn(cw):
    Xtr, ytr, Xte, _ = _dataset("wine")
    sw = np.random.default_rng(0).uniform(0.2, 2.0, len(ytr))
    ours = SVC(kernel="rbf", tol=TOL, class_weight=cw).fit(Xtr, ytr, sample_weight=sw)
    ref = sk_svm.SVC(kernel="rbf", tol=TOL, class_weight=cw).fit(
        Xtr, ytr, sample_weight=sw
    )
    np.testing.assert_allclose(
        ours.decision_function(Xte), ref.decision_function(Xte), atol=1e-3
    )
    np.testing.assert_allclose(ours.class_weight_, ref.class_weight_)
    np.testing.assert_array_equal(ours.n_support_, ref.n_support_)


def test_zero_sample_weight_drops_the_sample():
    Xtr, ytr, Xte, _ = _dataset("breast_cancer")
    sw = np.ones(len(ytr))
    sw[::5] = 0.0
    a = SVC(tol=1e-8).fit(Xtr, ytr, sample_weight=sw)
    b = SVC(tol=1e-8, gamma=a._gamma).fit(Xtr[sw > 0], ytr[sw > 0])
    np.testing.assert_allclose(
        a.decision_function(Xte), b.decision_function(Xte), atol=1e-6
    )
    assert not np.isin(a.support_, np.flatnonzero(sw == 0)).any()


# --------------------------------------------------------- probabilities
@pytest.mark.filterwarnings("ignore:The `probability` parameter:FutureWarning")
def test_predict_proba_platt_binary_and_multiclass():
    Xtr, ytr, Xte, yte = _dataset("breast_cancer")
    ours = SVC(probability=True, random_state=0).fit(Xtr, ytr)
    ref = sk_svm.SVC(probability=True, random_state=0).fit(Xtr, ytr)
    P, R = ours.predict_proba(Xte), ref.predict_proba(Xte)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-12)
    assert np.all((P > 0) & (P < 1))
    assert np.mean(np.abs(P - R)) < 0.03  # different CV folds: close, not equal
    # monotone in the decision value: Platt's A < 0
    f = ours.decision_function(Xte)
    order = np.argsort(f)
    assert np.all(np.diff(P[order, 1]) >= -1e-12)
    assert ours.probA_.shape == (1,) and ours.probA_[0] < 0
    assert not hasattr(SVC(), "predict_proba")
    np.testing.assert_allclose(ours.predict_log_proba(Xte), np.log(P))

    Xtr, ytr, Xte, _ = _dataset("wine")
    ours = SVC(probability=True, random_state=0).fit(Xtr, ytr)
    ref = sk_svm.SVC(probability=True, random_state=0).fit(Xtr, ytr)
    P, R = ours.predict_proba(Xte), ref.predict_proba(Xte)
    assert P.shape == (len(Xte), 3)
    np.testing.assert_allclose(P.sum(1), 1.0, atol=1e-10)
    assert np.mean(np.abs(P - R)) < 0.05
    assert np.mean(P.argmax(1) == ours.predict(Xte)) >= 0.95


# ---------------------------------------------------- options and errors
def test_max_iter_warns_and_reports_status():
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    with pytest.warns(ConvergenceWarning, match="max_iter"):
        est = SVC(max_iter=5, tol=1e-8).fit(Xtr, ytr)
    assert est.fit_status_ == 1 and est.n_iter_[0] <= 5


def test_verbose_prints_progress(capsys):
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    SVC(verbose=True).fit(Xtr, ytr)
    assert "[SMO]" in capsys.readouterr().out


def test_error_messages_name_argument_and_allowed_values():
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    with pytest.raises(InvalidParameterError, match="kernel"):
        SVC(kernel="cubic").fit(X, y)
    with pytest.raises(InvalidParameterError, match="gamma"):
        SVC(gamma="wide").fit(X, y)
    with pytest.raises(ValueError, match="square kernel matrix"):
        SVC(kernel="precomputed").fit(X, y)
    with pytest.raises(ValueError, match="class_weight.*label 7"):
        SVC(class_weight={7: 1.0}).fit(X, y)
    with pytest.raises(AttributeError, match="probability"):
        SVC().fit(X, y).predict_proba(X)


def test_string_labels_and_break_ties():
    Xtr, ytr, Xte, _ = _dataset("wine")
    names = np.array(["barolo", "grignolino", "barbera"])
    est = SVC(break_ties=True).fit(Xtr, names[ytr])
    ref = sk_svm.SVC(break_ties=True).fit(Xtr, names[ytr])
    np.testing.assert_array_equal(est.predict(Xte), ref.predict(Xte))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SVC().fit(Xtr, names[ytr]).predict(Xte)


def test_demo_runs_and_reports(tmp_path, capsys):
    from xpml.demos import svm as demo

    assert demo.main(["--n", "200", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "poly degree 2" in out and "Primal = dual" in out
    X, y = demo.circles(300, seed=0)
    lin = SVC(kernel="linear").fit(X, y)
    poly = SVC(kernel="poly", degree=2, gamma=1.0, coef0=1.0).fit(X, y)
    assert lin.score(X, y) < 0.7 and poly.score(X, y) > 0.95
    assert poly.n_support_.sum() < 0.3 * len(y)


def test_bench_suite_runs(tmp_path):
    import json

    from xpml.cli import main

    assert (
        main(["bench", "svm", "--quick", "--repeats", "1", "--out", str(tmp_path)]) == 0
    )
    rows = json.loads((tmp_path / "bench-numpy-quick.json").read_text())["results"]
    assert {r["case"] for r in rows} == {"SVC.fit rbf", "SVC.decision_function rbf"}
    assert all(r["ratio"] > 0 for r in rows)


# ------------------------------------------- devices, overflow, small caches
def test_probability_on_a_non_default_device():
    import array_api_strict as xs

    Xtr, ytr, Xte, _ = _dataset("wine")
    dev = xs.Device("device1")
    est = SVC(probability=True, random_state=0, tol=1e-8)
    est.fit(xs.asarray(Xtr, device=dev), xs.asarray(ytr, device=dev))
    P = est.predict_proba(xs.asarray(Xte, device=dev))
    assert P.device == dev
    ref = SVC(probability=True, random_state=0, tol=1e-8).fit(Xtr, ytr)
    P = np.asarray(P.to_device(xs.Device("CPU_DEVICE")))
    np.testing.assert_allclose(P, ref.predict_proba(Xte), atol=1e-8)


def test_overflowing_input_raises_a_clear_error():
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the overflow itself
        with pytest.raises(ValueError, match="dual coefficients or intercepts are not"):
            SVC().fit(Xtr * 1e300, ytr)


@pytest.mark.parametrize("name", ["gamma", "tol", "cache_size", "coef0"])
def test_infinite_hyperparameters_are_rejected(name):
    # C = inf is allowed (a hard margin, as scikit-learn): tests/test_svm_sklearn_api.py
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    with pytest.raises(InvalidParameterError, match=name):
        SVC(**{name: np.inf}).fit(X, y)


def test_zero_class_weight_error_names_class_weight():
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.arange(20) % 2
    with pytest.raises(ValueError, match="class_weight gives class 0"):
        SVC(class_weight={0: 0}).fit(X, y)


@pytest.mark.parametrize("name", ["breast_cancer", "wine"])
def test_linear_coef_matches_sklearn(name):
    Xtr, ytr, _, _ = _dataset(name)
    ours = SVC(kernel="linear", tol=1e-8).fit(Xtr, ytr)
    ref = sk_svm.SVC(kernel="linear", tol=1e-8).fit(Xtr, ytr)
    assert ours.coef_.shape == ref.coef_.shape
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)
    assert not hasattr(SVC(kernel="rbf").fit(Xtr, ytr), "coef_")


@pytest.mark.parametrize("cache_size", [1e-6, 0.001, 0.01])
def test_cache_below_ten_rows_still_fits(cache_size):
    Xtr, ytr, _, _ = _dataset("breast_cancer")
    tiny = SVC(tol=1e-6, cache_size=cache_size).fit(Xtr, ytr)
    big = SVC(tol=1e-6).fit(Xtr, ytr)
    np.testing.assert_allclose(tiny.dual_objective_, big.dual_objective_, rtol=1e-6)
    np.testing.assert_array_equal(tiny.support_, big.support_)


# ------------------------------------------------- shrinking and the cache
def _two_moons(n=600, noise=0.3):
    X, y = datasets.make_moons(n_samples=n, noise=noise, random_state=0)
    return X, y


@pytest.mark.parametrize("kernel", ["rbf", "linear"])
def test_shrinking_does_not_change_the_solution(kernel):
    X, y = _two_moons()
    on = SVC(kernel=kernel, tol=1e-6, shrinking=True).fit(X, y)
    off = SVC(kernel=kernel, tol=1e-6, shrinking=False).fit(X, y)
    ref = sk_svm.SVC(kernel=kernel, tol=1e-6).fit(X, y)
    for est in (on, off):
        assert est.fit_status_ == 0
        np.testing.assert_array_equal(est.support_, ref.support_)
        np.testing.assert_allclose(est.dual_objective_, on.dual_objective_, rtol=1e-7)
        np.testing.assert_allclose(est.dual_coef_, ref.dual_coef_, atol=1e-4)
        np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=1e-4)


def test_shrinking_shrinks_and_reconstructs_the_gradient():
    import array_api_compat.numpy as cnp

    from xpml.svm._smo import smo_solve

    X, y = _two_moons(800, noise=0.1)
    ypm = np.where(y == 1, 1.0, -1.0)
    rows = KernelRows(X, "rbf", {"gamma": 1.0}, xp=cnp, memory_budget=2**24, q=1024)
    res = smo_solve(rows, ypm, np.ones(800), xp=cnp, tol=1e-6, shrinking=True)
    assert res.n_shrink > 0 and res.converged
    # v = y − K (y∘α) everywhere, the shrunk variables' entries included
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(res.v, ypm - K @ (ypm * res.alpha), atol=1e-8)


def test_cache_policy_does_not_change_the_solution():
    X, y = _two_moons(800)
    big = SVC(tol=1e-6, cache_size=200).fit(X, y)
    tiny = SVC(tol=1e-6, cache_size=0.2).fit(X, y)  # 32 rows of 800
    f32 = SVC(tol=1e-6, cache_dtype="float32").fit(X, y)
    assert tiny.cache_peak_bytes_ <= 0.2 * 2**20 < big.cache_peak_bytes_
    # the cache grows with use: far below the 200 MB cap here
    assert big.cache_peak_bytes_ <= 2 * 800 * 800 * 8
    for est in (tiny, f32):
        np.testing.assert_array_equal(est.support_, big.support_)
        np.testing.assert_allclose(est.dual_objective_, big.dual_objective_, rtol=1e-6)
        np.testing.assert_allclose(
            est.decision_function(X), big.decision_function(X), atol=1e-4
        )


def test_host_syncs_per_working_set_under_torch():
    pytest.importorskip("torch")
    import xpml.svm._svc as svc_module
    from xpml.testing import count_syncs

    X, y = _two_moons(400)
    results = []
    original = svc_module.smo_solve

    def spy(*args, **kwargs):
        results.append(original(*args, **kwargs))
        return results[-1]

    svc_module.smo_solve = spy
    try:
        with xpml.backend("torch"), count_syncs() as c:
            est = SVC(tol=1e-6, working_set_size=16).fit(X, y)
    finally:
        svc_module.smo_solve = original
    sets = sum(r.n_outer for r in results)
    assert int(est.n_working_sets_.sum()) == sets
    assert sets >= 10
    # one packed read and the subproblem's round trip per working set, plus
    # shrinking checks and the set-up / final gathering; one upload per
    # working set (B is built on the device, the rows to compute travel with
    # the subproblem's result), none for shrinking
    assert c.syncs <= 4 * sets + 20, (c.syncs, sets, c.by_kind)
    assert c.uploads <= sets + 12, (c.uploads, sets, c.by_kind)


def test_a_stall_while_shrunk_goes_on_in_the_whole_problem(monkeypatch):
    """With variables shrunk, progress is watched through the violation,
    which can hover while the dual still rises (at n = 100,000 it stayed
    near 0.1 for 50 working sets and the fit gave up). A stall there brings
    every variable back and the solve goes on: with the patience cut to 3
    working sets (12 while shrunk), the fit still converges to the solution
    without shrinking (it stopped at a violation of 0.97 before)."""
    from xpml.svm import _smo

    rng = np.random.default_rng(0)
    n = 1500
    X = rng.normal(size=(n, 8))
    y = (X[:, 0] + 0.7 * np.sin(3 * X[:, 1]) + 0.4 * rng.normal(size=n) > 0).astype(int)
    kw = {"gamma": 0.3, "C": 5.0, "tol": 1e-4}
    ref = SVC(shrinking=False, **kw).fit(X, y)
    monkeypatch.setattr(_smo, "_STALL", 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no ConvergenceWarning
        got = SVC(cache_size=1.0, **kw).fit(X, y)  # evicts, so it shrinks
    assert got.fit_status_ == 0 and float(got.violation_[0]) < kw["tol"]
    np.testing.assert_allclose(got.dual_objective_, ref.dual_objective_, rtol=1e-6)


def test_shrinking_waits_for_the_cache_to_evict():
    """``shrinking="evicting"`` (SVC's setting for computed kernels) shrinks
    only once the row cache has evicted a row; the solution is the same."""
    import array_api_compat.numpy as cnp

    from xpml.svm._smo import smo_solve

    X, y = _two_moons(400, noise=0.1)
    ypm = np.where(y == 1, 1.0, -1.0)

    def solve(budget, shrinking):
        rows = KernelRows(X, "rbf", {"gamma": 1.0}, xp=cnp, memory_budget=budget, q=64)
        res = smo_solve(rows, ypm, np.ones(400), xp=cnp, tol=1e-6, shrinking=shrinking)
        return res, rows

    every, _ = solve(2**24, True)
    roomy, rows = solve(2**24, "evicting")  # every row fits: never evicts
    assert every.n_shrink > 0 and roomy.n_shrink == 0 and rows.evictions == 0
    tight, rows = solve(400 * 8 * 80, "evicting")  # 80 rows: evicts
    assert rows.evictions > 0 and tight.n_shrink > 0
    K = np.exp(-((X[:, None] - X[None]) ** 2).sum(-1))
    for res in (roomy, tight):
        assert res.converged
        np.testing.assert_array_equal(res.alpha > 0, every.alpha > 0)
        np.testing.assert_allclose(res.dual, every.dual, rtol=1e-9)
        np.testing.assert_allclose(res.v, ypm - K @ (ypm * res.alpha), atol=1e-8)


def test_row_product_fast_path_streams_the_cache():
    """The NumPy product over all rows in use (zeros where not asked) agrees
    with the portable gather, on both sides of its switch."""
    from xpml.utils._array_api import dispatch

    rng = np.random.default_rng(4)
    buf = rng.normal(size=(30, 50))
    for m in (3, 20):  # a gather (3 of 25 rows in use), then the whole product
        slots = rng.permutation(25)[:m]
        d = rng.normal(size=m)
        ref = d @ buf[slots]
        for fast in (True, False):
            out = dispatch("svm.row_product", np, fast=fast)(
                buf, slots, d, 25, xp=np, chunk=8
            )
            np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)


def test_row_product_gathers_past_the_stream_limit(monkeypatch):
    """Past ``_STREAM_BYTES`` of rows in use the NumPy product gathers the
    rows asked for, even when they are most of those in use (streaming every
    row from beyond the last-level cache costs more), and the answer is the
    same; below it, it streams."""
    import xpml.svm._smo as smo
    from xpml.utils._array_api import dispatch

    rng = np.random.default_rng(12)
    buf = rng.normal(size=(30, 50))
    slots = rng.permutation(25)[:20]  # 20 of 25 rows in use: streamed so far
    d = rng.normal(size=20)
    gathered = []
    real = smo._gathered_product
    monkeypatch.setattr(
        smo, "_gathered_product", lambda *a: gathered.append(1) or real(*a)
    )
    product = dispatch("svm.row_product", np)
    for limit, gathers in ((25 * 50 * 8, False), (25 * 50 * 8 - 1, True)):
        monkeypatch.setattr(smo, "_STREAM_BYTES", limit)
        gathered.clear()
        out = product(buf, slots, d, 25, xp=np, chunk=8, memo={})
        assert bool(gathered) == gathers
        np.testing.assert_allclose(out, d @ buf[slots], rtol=1e-12, atol=1e-12)


def test_in_place_fast_paths_agree_on_separate_buffers():
    """The ops that write into the cache buffer, fast path against portable
    twin, each on its own copy (the common agreement test hands both the
    same buffer, which they both overwrite): kernel rows written straight
    into consecutive slots (NumPy RBF), into scattered slots (the portable
    way), indexed writes and scatters, and growing keeps the old rows."""
    from xpml.utils._array_api import dispatch

    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 4))
    spec = ("rbf", {"gamma": 0.3}, None)
    K = np.exp(-0.3 * ((X[:, None] - X[None]) ** 2).sum(-1))
    for slots in (np.arange(3, 9), np.array([7, 2, 5, 0])):
        rows = rng.permutation(40)[: slots.shape[0]]
        outs = []
        for fast in (True, False):
            buf = np.full((10, 40), np.nan)
            write = dispatch("svm.rows_into", np, fast=fast)
            outs.append(write(buf, X, rows, slots, spec, xp=np, memo={}))
        for out in outs:
            np.testing.assert_allclose(out[slots], K[rows], rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(outs[0], outs[1])  # bit for bit, NaN elsewhere
    block = rng.normal(size=(3, 40))
    for op, args in (
        ("svm.write_rows", (np.array([6, 1, 2]), block)),
        ("svm.scatter", (np.array([1, 4, 6]), block)),
    ):
        fast, slow = (
            dispatch(op, np, fast=f)(np.zeros((10, 40)), *args, xp=np)
            for f in (True, False)
        )
        np.testing.assert_array_equal(fast, slow)
        np.testing.assert_array_equal(fast[args[0]], block)
    old = rng.normal(size=(2, 40))
    grown = dispatch("svm.grow_rows", np)(old.copy(), 5, 8, xp=np)
    assert grown.shape == (5, 40) and grown.base.shape == (8, 40)
    np.testing.assert_array_equal(grown[:2], old)
    again = dispatch("svm.grow_rows", np)(grown, 8, 8, xp=np)  # no copy, no write
    assert np.shares_memory(again, grown)
    np.testing.assert_array_equal(again[:2], old)
    B = rng.permutation(40)[:9]
    memo = {"q": 12}
    fast = dispatch("svm.block", np)(X, B, spec, xp=np, memo=memo)
    slow = dispatch("svm.block", np, fast=False)(X, B, spec, xp=np, memo={})
    np.testing.assert_array_equal(fast, slow)  # the Gram engine's values
    np.testing.assert_array_equal(np.diagonal(fast), 1.0)
    # the factors kept in memo by the first call serve the next ones
    again = dispatch("svm.block", np)(X, B[:5], spec, xp=np, memo=memo)
    assert np.shares_memory(again, fast)  # one buffer for every working set
    np.testing.assert_array_equal(again, slow[:5, :5])
    # and the rows of the cache (the same factors, one memo per X)
    got, ref = (
        dispatch("svm.rows_into", np, fast=f)(
            np.full((10, 40), np.nan), X, B[:4], np.arange(4), spec, xp=np, memo=m
        )
        for f, m in ((True, memo), (False, {}))
    )
    np.testing.assert_array_equal(got, ref)


def test_shrinking_in_groups_matches_no_shrinking_and_sklearn():
    """d = 2, most support vectors at the bound (the bench's d2 shape): several
    shrinkings remove groups of variables at different times, and unshrinking
    brings each group's gradient up to date from the α that moved since its
    removal. Same support vectors, dual and gradient as without shrinking, and
    scikit-learn's support vectors."""
    import array_api_compat.numpy as cnp

    from xpml.svm._smo import smo_solve

    X, y = datasets.make_classification(
        n_samples=1500, n_features=2, n_informative=2, n_redundant=0, random_state=0
    )
    X = StandardScaler().fit_transform(X)
    ypm = np.where(y == 1, 1.0, -1.0)
    gamma = 1.0 / (2 * X.var())

    def solve(shrinking):
        rows = KernelRows(
            X, "rbf", {"gamma": gamma}, xp=cnp, memory_budget=2**24, q=256
        )
        return smo_solve(
            rows, ypm, np.ones(1500), xp=cnp, tol=1e-5, shrinking=shrinking
        )

    on, off = solve(True), solve(False)
    assert on.n_shrink >= 3 and on.converged and off.converged
    np.testing.assert_array_equal(on.alpha > 0, off.alpha > 0)
    np.testing.assert_allclose(on.dual, off.dual, rtol=1e-9)
    K = np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(on.v, ypm - K @ (ypm * on.alpha), atol=1e-8)
    # through SVC with a cache of 100 of the 1500 rows (it shrinks once it evicts)
    ours = SVC(cache_size=1500 * 8 * 100 / 2**20, tol=1e-5).fit(X, y)
    ref = sk_svm.SVC(tol=1e-5).fit(X, y)
    np.testing.assert_array_equal(ours.support_, ref.support_)
    # the decision function, not α: at d = 2 the RBF Gram matrix is close to
    # singular, so the dual's optimum is not unique (α moved by up to 1.1e-3
    # from LIBSVM's between two machines' BLAS roundings, f by 5e-5)
    np.testing.assert_allclose(
        ours.decision_function(X), ref.decision_function(X), atol=2e-4
    )
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-4)
    # the dual objective is unique: LIBSVM's read from its dual_coef_
    params = _kernel_params(ours)
    ref_dual = _pair_duals(
        ref.dual_coef_, ref.n_support_, ref.support_vectors_, "rbf", params
    )
    np.testing.assert_allclose(ours.dual_objective_, ref_dual, rtol=1e-9)


def test_rows_used_once_skip_the_cache_with_the_same_solution(monkeypatch):
    """Where the cache cannot hold every row, a row computed for a variable
    that moved to a bound goes through a scratch block and is not cached
    (``_used_once``); the solution is the one that caches every row: same
    support vectors, dual and gradient (d = 2, most SVs at the bound)."""
    import array_api_compat.numpy as cnp

    import xpml.svm._smo as smo

    X, y = datasets.make_classification(
        n_samples=1500, n_features=2, n_informative=2, n_redundant=0, random_state=1
    )
    X = StandardScaler().fit_transform(X)
    ypm = np.where(y == 1, 1.0, -1.0)
    gamma = 1.0 / (2 * X.var())
    once = []
    product_once = smo._product_once

    def spy(rows, B, d):
        once.append(B.shape[0])
        return product_once(rows, B, d)

    def solve():
        budget = 1500 * 8 * 300  # 300 of the 1500 rows
        rows = KernelRows(
            X, "rbf", {"gamma": gamma}, xp=cnp, memory_budget=budget, q=64
        )
        return smo.smo_solve(
            rows, ypm, np.ones(1500), xp=cnp, tol=1e-5, shrinking=False
        )

    monkeypatch.setattr(smo, "_product_once", spy)
    skipped = solve()
    assert sum(once) > 50 and skipped.converged
    monkeypatch.setattr(smo, "_used_once", lambda rows, B, a, C: np.zeros(len(B), bool))
    cached = solve()
    np.testing.assert_array_equal(skipped.alpha > 0, cached.alpha > 0)
    np.testing.assert_allclose(skipped.dual, cached.dual, rtol=1e-9)
    K = np.exp(-gamma * ((X[:, None] - X[None]) ** 2).sum(-1))
    np.testing.assert_allclose(skipped.v, ypm - K @ (ypm * skipped.alpha), atol=1e-8)


def test_rows_skip_the_cache_once_its_cap_falls():
    """Rows used once may skip the cache whenever it cannot hold every row,
    also when that becomes so while it grows (the old and new buffers would
    not fit together: the cap falls below n)."""
    from array_api_compat import numpy as cnp

    n = 2000
    X = np.random.default_rng(0).normal(size=(n, 3))
    rows = KernelRows(
        X, "rbf", {"gamma": 1.0}, xp=cnp, memory_budget=2400 * n * 8, q=64
    )
    assert rows.cap == n and not rows.uncached_ok
    rows._grow(1200)
    rows._grow(n)
    assert rows.cap < n and rows.uncached_ok
