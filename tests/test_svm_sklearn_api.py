"""SVC as a scikit-learn drop-in (issue 12): the behaviours scikit-learn's own
``svm/tests/test_svm.py`` pins down, checked against scikit-learn 1.9.1 itself
on every array library of the ``xp`` fixture."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from xpml.svm import SVC

sk_svm = pytest.importorskip("sklearn.svm")
sp = pytest.importorskip("scipy.sparse")
from sklearn.datasets import make_blobs, make_classification  # noqa: E402

# xpml raises these bridged to scikit-learn's classes, so one class checks both
from sklearn.exceptions import ConvergenceWarning, NotFittedError  # noqa: E402

# scikit-learn's toy problem in its SVM tests
X6 = np.array([[-2, -1], [-1, -1], [-1, -2], [1, 1], [1, 2], [2, 1]], dtype=float)
Y6 = np.array([1, 1, 1, 2, 2, 2])


def _raises_like_sklearn(exc, match, fit_ours, fit_ref):
    """Both libraries raise ``exc`` with a message matching ``match``."""
    with pytest.raises(exc, match=match):
        fit_ref()
    with pytest.raises(exc, match=match):
        fit_ours()


# --------------------------------------------------------- sample_weight
@pytest.mark.parametrize(
    "sw", [[1, -0.5, 1, 1, 1, 1], [1, 1, 1, 0, 1, 1]], ids=["negative", "zero"]
)
def test_nonpositive_weights_leave_samples_out(xp, sw):
    # LIBSVM (so scikit-learn) reads a weight <= 0 as "leave the sample out"
    ref = sk_svm.SVC(kernel="linear", tol=1e-8).fit(X6, Y6, sample_weight=sw)
    w = xp.asarray(sw, dtype=np.float64)
    before = xp.to_numpy(w).copy()
    ours = SVC(kernel="linear", tol=1e-8).fit(xp.asarray(X6), xp.asarray(Y6), w)
    np.testing.assert_allclose(xp.to_numpy(ours.coef_), ref.coef_, atol=1e-6)
    np.testing.assert_allclose(xp.to_numpy(ours.intercept_), ref.intercept_, atol=1e-6)
    # scikit-learn's support_ counts in the weight>0 subset; ours indexes X
    kept = np.flatnonzero(np.asarray(sw) > 0)
    np.testing.assert_array_equal(xp.to_numpy(ours.support_), kept[ref.support_])
    np.testing.assert_array_equal(xp.to_numpy(w), before)  # the caller's weights
    # a negative weight is the same as weight 0
    zeroed = SVC(kernel="linear", tol=1e-8).fit(X6, Y6, np.maximum(sw, 0.0))
    np.testing.assert_allclose(xp.to_numpy(ours.coef_), zeroed.coef_, atol=1e-12)


@pytest.mark.parametrize("sw", [[0.0] * 6, [-0.3] * 6])
def test_all_nonpositive_weights_message(xp, sw):
    w = xp.asarray(sw)
    _raises_like_sklearn(
        ValueError,
        "Invalid input - all samples have zero or negative weights.",
        lambda: SVC(kernel="linear").fit(xp.asarray(X6), xp.asarray(Y6), w),
        lambda: sk_svm.SVC(kernel="linear").fit(X6, Y6, sample_weight=sw),
    )


@pytest.mark.parametrize("sw", [[0, -0.5, 0, 1, 1, 1], [1, 1, 1, 0, -0.1, -0.3]])
def test_weights_leaving_one_class_message(xp, sw):
    _raises_like_sklearn(
        ValueError,
        "Invalid input - all samples with positive weights belong to the same class",
        lambda: SVC(kernel="linear").fit(
            xp.asarray(X6), xp.asarray(Y6), xp.asarray(sw, dtype=np.float64)
        ),
        lambda: sk_svm.SVC(kernel="linear").fit(X6, Y6, sample_weight=sw),
    )


def test_nonpositive_scalar_weight_message():
    # scikit-learn 1.9.1 fails on a scalar weight with an IndexError; ours says why
    for sw in (0.0, -1.0):
        with pytest.raises(ValueError, match="all samples have zero or negative"):
            SVC().fit(X6, Y6, sample_weight=sw)


def test_nan_weight_is_still_refused():
    with pytest.raises(ValueError, match="sample_weight"):
        SVC().fit(X6, Y6, sample_weight=[np.nan] * 6)


# ------------------------------------------------------------- sparse X
def test_sparse_precomputed_kernel_is_refused():
    gram = sp.csr_matrix(np.eye(2))
    _raises_like_sklearn(
        TypeError,
        "Sparse precomputed",
        lambda: SVC(kernel="precomputed").fit(gram, [0, 1]),
        lambda: sk_svm.SVC(kernel="precomputed").fit(gram, [0, 1]),
    )


@pytest.mark.parametrize("container", [sp.lil_matrix, sp.csr_array])
def test_sparse_predict_after_dense_fit_is_refused(container):
    ours, ref = SVC().fit(X6, Y6), sk_svm.SVC().fit(X6, Y6)
    for est in (ref, ours):
        for method in (est.predict, est.decision_function):
            with pytest.raises(ValueError, match="sparse input.*trained on dense"):
                method(container(X6))
    # fitted on sparse: dense and sparse inputs are both fine (as scikit-learn)
    fitted = SVC(tol=1e-10).fit(container(X6), Y6)
    ref_sparse = sk_svm.SVC(tol=1e-10).fit(container(X6), Y6)
    for Xt in (X6, container(X6)):
        np.testing.assert_allclose(
            fitted.decision_function(Xt), ref_sparse.decision_function(Xt), atol=1e-6
        )


# ------------------------------------------------------- C, errors, warnings
def test_infinite_C_is_a_hard_margin(xp):
    X, y = make_classification(random_state=42)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no inf·0 along the way
        inf = SVC(C=np.inf).fit(xp.asarray(X), xp.asarray(y))
    large = sk_svm.SVC(C=1e10).fit(X, y)
    np.testing.assert_array_equal(xp.to_numpy(inf.predict(xp.asarray(X))), y)
    np.testing.assert_array_equal(
        xp.to_numpy(inf.predict(xp.asarray(X))), large.predict(X)
    )
    np.testing.assert_allclose(
        xp.to_numpy(inf.decision_function(xp.asarray(X))),
        large.decision_function(X),
        rtol=1e-3,
        atol=1e-3,
    )


def test_break_ties_with_ovo_message():
    X, y = make_blobs(random_state=0)
    kw = dict(kernel="linear", decision_function_shape="ovo", break_ties=True)
    _raises_like_sklearn(
        ValueError,
        "break_ties must be False",
        lambda: SVC(**kw).fit(X, y).predict(y),
        lambda: sk_svm.SVC(**kw).fit(X, y).predict(y),
    )


def test_nonfinite_fit_message():
    rng = np.random.default_rng(0)
    X = np.finfo(np.float64).max * rng.uniform(size=(10, 2))
    y = np.arange(10) % 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the overflow itself
        _raises_like_sklearn(
            ValueError,
            "The dual coefficients or intercepts are not finite",
            lambda: SVC().fit(X, y),
            lambda: sk_svm.SVC().fit(X, y),
        )


def test_max_iter_warning_wording():
    def dot(A, B):
        return A @ B.T

    match = (
        r"Solver terminated early \(max_iter=2\).  Consider pre-processing "
        r"your data with StandardScaler or MinMaxScaler."
    )
    with pytest.warns(ConvergenceWarning, match=match):
        sk_svm.SVC(kernel=dot, max_iter=2).fit(X6, Y6)
    with pytest.warns(ConvergenceWarning, match=match):
        est = SVC(kernel=dot, max_iter=2).fit(X6, Y6)
    assert est.fit_status_ == 1


def test_predict_proba_after_switching_probability_on():
    X, y = make_blobs(random_state=0)
    msg = "predict_proba is not available when fitted with probability=False"
    for est in (SVC(), sk_svm.SVC()):
        est.fit(X, y)
        assert not hasattr(est, "predict_proba")
        est.probability = True
        assert hasattr(est, "predict_proba")
        with pytest.raises(NotFittedError, match=msg):
            est.predict_proba(X)


def test_coef_is_read_only_as_in_sklearn(tmp_path):
    X, y = make_blobs(n_samples=60, centers=3, random_state=0)
    ours = SVC(kernel="linear", tol=1e-8).fit(X, y)
    ref = sk_svm.SVC(kernel="linear", tol=1e-8).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-5)  # both tol=1e-8
    for est in (ref, ours):
        with pytest.raises(AttributeError):
            est.coef_ = np.arange(3)
        with pytest.raises(ValueError):  # NumPy's "assignment destination is read-only"
            est.coef_[0, 0] = 0.0
    ours.save(tmp_path / "svc.zip")
    loaded = SVC.load(tmp_path / "svc.zip")
    np.testing.assert_array_equal(loaded.coef_, ours.coef_)
    # another kernel: no coef_, also after a linear fit of the same object
    ours.set_params(kernel="rbf").fit(X, y)
    assert not hasattr(ours, "coef_")
    assert not hasattr(ours.set_params(kernel="linear"), "coef_")
