"""SciPy sparse input: one policy (xpml.utils.validation.dense_from_sparse).

Every estimator fits a sparse ``X`` as it fits its dense form (the conversion is
exact, so results agree to rounding: rtol 1e-10, where naive Bayes sums counts
in SciPy's order); above the memory budget the error names the argument, the
shape, the dense size and the budget; the caller's matrix is never modified;
sparse ``y`` is refused.
"""

import copy

import numpy as np
import pytest
import scipy.sparse as sp

import xpml
from xpml.cluster import KMeans
from xpml.decomposition import PCA, TruncatedSVD
from xpml.kernel_ridge import KernelRidge
from xpml.linear_model import LogisticRegression, Ridge
from xpml.naive_bayes import BernoulliNB, GaussianNB, MultinomialNB
from xpml.neighbors import KNeighborsClassifier
from xpml.svm import SVC
from xpml.tree import DecisionTreeClassifier
from xpml.utils.validation import check_array, dense_from_sparse, is_sparse

FORMATS = ("csr", "csc", "coo", "lil", "dok", "bsr", "dia")
CONTAINERS = [
    getattr(sp, f"{f}_{kind}") for f in FORMATS for kind in ("matrix", "array")
]
RTOL = 1e-10  # same numbers up to the order of the sums


def _data(seed=0, n=60, d=8):
    rng = np.random.default_rng(seed)
    X = rng.poisson(0.6, size=(n, d)).astype(np.float64)  # mostly zeros
    X[:, 3] = 0.0  # a feature never seen: −∞ log-probabilities at alpha=0
    y = rng.integers(0, 3, size=n)
    return X, y


# estimator, fit target ("classes", "real", None), methods compared
CASES = {
    "MultinomialNB": (lambda: MultinomialNB(alpha=0.0), "classes", "predict_log_proba"),
    "BernoulliNB": (lambda: BernoulliNB(alpha=0.0), "classes", "predict_log_proba"),
    "BernoulliNB-raw": (
        lambda: BernoulliNB(binarize=None),
        "classes",
        "predict_joint_log_proba",
    ),
    "GaussianNB": (GaussianNB, "classes", "predict_log_proba"),
    "Ridge": (Ridge, "real", "predict"),
    "LogisticRegression": (LogisticRegression, "classes", "predict_proba"),
    "KMeans": (
        lambda: KMeans(n_clusters=3, n_init=2, random_state=0),
        None,
        "transform",
    ),
    "PCA": (lambda: PCA(n_components=3), None, "transform"),
    "TruncatedSVD": (
        lambda: TruncatedSVD(n_components=3, random_state=0),
        None,
        "transform",
    ),
    "KNeighborsClassifier": (
        lambda: KNeighborsClassifier(n_neighbors=4),
        "classes",
        "predict_proba",
    ),
    "DecisionTreeClassifier": (
        lambda: DecisionTreeClassifier(random_state=0),
        "classes",
        "predict_proba",
    ),
    "SVC": (SVC, "classes", "decision_function"),
    "KernelRidge": (lambda: KernelRidge(kernel="rbf"), "real", "predict"),
}


def _target(kind, X, y):
    if kind == "real":
        return X @ np.arange(1.0, X.shape[1] + 1.0) + y
    return y if kind == "classes" else None


@pytest.mark.parametrize("case", list(CASES))
def test_sparse_fit_equals_dense_fit(case):
    make, kind, method = CASES[case]
    X, y = _data()
    Xt, _ = _data(seed=1, n=20)
    target = _target(kind, X, y)
    dense = make().fit(X, target)
    sparse = make().fit(sp.csr_matrix(X), target)
    expected = getattr(dense, method)(Xt)
    np.testing.assert_allclose(
        getattr(sparse, method)(sp.csr_array(Xt)), expected, rtol=RTOL, atol=1e-12
    )
    np.testing.assert_allclose(
        getattr(sparse, method)(Xt), expected, rtol=RTOL, atol=1e-12
    )


@pytest.mark.parametrize("container", CONTAINERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("Estimator", [MultinomialNB, BernoulliNB, GaussianNB])
def test_every_format_accepted_and_left_unchanged(container, Estimator):
    X, y = _data()
    M = container(X)
    before = copy.deepcopy(M)
    w = np.linspace(0.5, 2.0, X.shape[0])
    est = Estimator().fit(M, y, sample_weight=w)
    ref = Estimator().fit(X, y, sample_weight=w)
    np.testing.assert_allclose(
        est.predict_log_proba(M), ref.predict_log_proba(X), rtol=RTOL, atol=1e-12
    )
    est.partial_fit(M, y)
    _assert_unchanged(M, before)


def _assert_unchanged(M, before):
    assert type(M) is type(before) and M.dtype == before.dtype
    assert M.shape == before.shape
    for attr in ("data", "indices", "indptr", "row", "col", "offsets", "rows"):
        if hasattr(before, attr):
            a, b = getattr(M, attr), getattr(before, attr)
            if a.dtype == object:  # lil: object arrays of lists
                assert a.tolist() == b.tolist()
            else:
                np.testing.assert_array_equal(a, b)
    if isinstance(before, (sp.dok_matrix, sp.dok_array)):
        assert dict(M.items()) == dict(before.items())


def test_non_canonical_coo_is_not_canonicalised():
    # duplicates and unsorted entries: summed in our copy, never in the caller's
    X, y = _data()
    rows, cols = np.nonzero(X)
    vals = X[rows, cols]
    order = np.random.default_rng(3).permutation(rows.size)
    half = vals / 2.0
    M = sp.coo_matrix(
        (
            np.concatenate([half, half])[np.concatenate([order, order])],
            (np.tile(rows[order], 2), np.tile(cols[order], 2)),
        ),
        shape=X.shape,
    )
    before = copy.deepcopy(M)
    for Estimator in (MultinomialNB, GaussianNB, KMeans):
        Estimator().fit(M, y if Estimator is not KMeans else None)
    _assert_unchanged(M, before)
    assert not M.has_canonical_format


def test_dtypes_of_the_conversion():
    X, y = _data()
    f32 = dense_from_sparse(sp.csr_matrix(X.astype(np.float32)))
    assert isinstance(f32, np.ndarray) and f32.dtype == np.float32
    i64 = dense_from_sparse(sp.csr_array(X.astype(np.int64)))
    assert i64.dtype == np.float64
    np.testing.assert_array_equal(i64, X)
    assert GaussianNB().fit(sp.csr_matrix(X.astype(np.float32)), y).theta_.dtype == (
        np.float32
    )
    assert is_sparse(sp.lil_array(X)) and not is_sparse(X)


def test_over_budget_error_names_argument_shape_size_budget(monkeypatch):
    X, y = _data()  # dense: 60 x 8 float64 = 3840 bytes
    monkeypatch.setenv("XPML_MEMORY_BUDGET", "1K")
    pattern = (
        r"X is a SciPy sparse csr_matrix of shape \(60, 8\).*needs 3\.8 KiB "
        r"\(float64\).*memory budget of 1\.0 KiB.*XPML_MEMORY_BUDGET.*MultinomialNB"
    )
    for est in (GaussianNB(), KMeans(n_clusters=2), PCA(n_components=2), Ridge()):
        with pytest.raises(ValueError, match=pattern):
            est.fit(sp.csr_matrix(X), y)
    fitted = GaussianNB().fit(X, y)
    with pytest.raises(ValueError, match=r"X is a SciPy sparse csc_array of shape"):
        fitted.predict(sp.csc_array(X))
    # the discrete naive Bayes models keep X sparse: no dense copy, no error
    nb = MultinomialNB().fit(sp.csr_matrix(X), y)
    monkeypatch.delenv("XPML_MEMORY_BUDGET")
    np.testing.assert_allclose(
        nb.predict_log_proba(sp.csr_matrix(X)),
        MultinomialNB().fit(X, y).predict_log_proba(X),
        rtol=RTOL,
    )


def test_sparse_targets_and_weights_refused():
    X, y = _data()
    ys = sp.csr_matrix(y[:, None])
    with pytest.raises(TypeError, match="y is a SciPy sparse csr_matrix; class labels"):
        GaussianNB().fit(X, ys)
    with pytest.raises(TypeError, match="y is a SciPy sparse"):
        Ridge().fit(X, sp.csr_matrix(y[:, None].astype(float)))
    with pytest.raises(TypeError, match="sample_weight is a SciPy sparse"):
        GaussianNB().fit(X, y, sample_weight=sp.csr_matrix(np.ones((1, 60))))


def test_negative_counts_refused_on_the_sparse_path():
    X, y = _data()
    X[0, 0] = -1.0
    with pytest.raises(
        ValueError, match="Negative values in data passed to MultinomialNB"
    ):
        MultinomialNB().fit(sp.csr_matrix(X), y)
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        MultinomialNB().fit(sp.csr_matrix(X), y)
    with pytest.raises(ValueError, match="X has 7 features, but MultinomialNB"):
        MultinomialNB().fit(*_data()).predict(sp.csr_matrix(np.ones((2, 7))))


@pytest.mark.parametrize("name", ["torch", "array_api_strict"])
@pytest.mark.parametrize("Estimator", [MultinomialNB, GaussianNB, KMeans])
def test_other_backends_densify(name, Estimator):
    pytest.importorskip(name)
    X, y = _data()
    target = None if Estimator is KMeans else y
    params = {"random_state": 0, "n_init": 1} if Estimator is KMeans else {}
    method = "transform" if Estimator is KMeans else "predict_log_proba"
    with xpml.backend(name):  # the dense form moves to the backend, like NumPy input
        ref = getattr(Estimator(**params).fit(X, target), method)(X)
        est = Estimator(**params).fit(sp.csr_matrix(X), target)
        got = getattr(est, method)(sp.csr_matrix(X))
    assert isinstance(got, np.ndarray)  # results come back in the caller's library
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=1e-12)


def test_other_libraries_sparse_arrays_are_refused_by_name():
    class OtherSparse:  # stands for pydata.sparse / a CuPy sparse matrix
        shape = (2, 2)

        def tocsr(self):  # pragma: no cover - never called
            raise AssertionError

    with pytest.raises(TypeError, match="converts SciPy sparse matrices only"):
        check_array(OtherSparse(), xp=None)
