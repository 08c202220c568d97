"""Evaluation metrics against scikit-learn, on every library (ALGORITHMS.md §10)."""

import numpy as np
import pytest
from sklearn import metrics as skm

from xpml import metrics


def _labels(seed=0, n=50, k=3):
    rng = np.random.default_rng(seed)
    return rng.integers(0, k, n), rng.integers(0, k, n)


def test_accuracy(xp):
    t, p = _labels()
    w = np.random.default_rng(1).random(50)
    assert metrics.accuracy_score(xp.asarray(t), xp.asarray(p)) == pytest.approx(
        skm.accuracy_score(t, p), abs=1e-15
    )
    assert metrics.accuracy_score(
        xp.asarray(t), xp.asarray(p), sample_weight=xp.asarray(w)
    ) == pytest.approx(skm.accuracy_score(t, p, sample_weight=w), rel=1e-14)


def test_accuracy_string_labels():
    assert metrics.accuracy_score(
        ["a", "b", "c"], np.array(["a", "b", "b"])
    ) == pytest.approx(2 / 3)


def test_mse_and_r2(xp):
    rng = np.random.default_rng(2)
    t, p = rng.normal(size=30), rng.normal(size=30)
    assert metrics.mean_squared_error(xp.asarray(t), xp.asarray(p)) == pytest.approx(
        skm.mean_squared_error(t, p), rel=1e-14
    )
    assert metrics.r2_score(xp.asarray(t), xp.asarray(p)) == pytest.approx(
        skm.r2_score(t, p), rel=1e-13
    )
    T, P = rng.normal(size=(30, 2)), rng.normal(size=(30, 2))
    assert metrics.mean_squared_error(xp.asarray(T), xp.asarray(P)) == pytest.approx(
        skm.mean_squared_error(T, P), rel=1e-14
    )


def test_log_loss(xp):
    rng = np.random.default_rng(3)
    t = rng.integers(0, 3, 40)
    P = rng.dirichlet(np.ones(3), 40)
    assert metrics.log_loss(xp.asarray(t), xp.asarray(P)) == pytest.approx(
        skm.log_loss(t, P), rel=1e-13
    )
    tb = rng.integers(0, 2, 40)
    pb = rng.uniform(0.01, 0.99, 40)
    assert metrics.log_loss(xp.asarray(tb), xp.asarray(pb)) == pytest.approx(
        skm.log_loss(tb, pb), rel=1e-13
    )


def test_log_loss_clips_zero_probabilities():
    assert np.isfinite(metrics.log_loss([0, 1], [[1.0, 0.0], [1.0, 0.0]]))


def test_ece_closed_form(xp):
    # two bins used: [0.2] x2 with 1 positive, [0.9] x2 with 2 positives
    t = np.array([0, 1, 1, 1])
    p = np.array([0.2, 0.2, 0.9, 0.9])
    expected = 0.5 * abs(0.5 - 0.2) + 0.5 * abs(1.0 - 0.9)
    assert metrics.expected_calibration_error(
        xp.asarray(t), xp.asarray(p), n_bins=10
    ) == pytest.approx(expected, abs=1e-15)


def test_ece_multiclass_top_label(xp):
    t = np.array([0, 1, 2, 2])
    P = np.array([[0.8, 0.1, 0.1], [0.6, 0.3, 0.1], [0.1, 0.1, 0.8], [0.2, 0.2, 0.6]])
    # bins: conf .8 right, .6 wrong, .8 right, .6 right -> bin6: acc .5 conf .6 ; bin8: acc 1 conf .8
    expected = 0.5 * abs(0.5 - 0.6) + 0.5 * abs(1.0 - 0.8)
    assert metrics.expected_calibration_error(
        xp.asarray(t), xp.asarray(P)
    ) == pytest.approx(expected, abs=1e-14)


def test_ece_perfect_and_bad_bins():
    assert metrics.expected_calibration_error([0, 1], [0.0, 1.0]) == 0.0
    with pytest.raises(ValueError, match="n_bins"):
        metrics.expected_calibration_error([0, 1], [0.0, 1.0], n_bins=0)


def test_confusion_matrix(xp):
    t, p = _labels(4)
    C = metrics.confusion_matrix(xp.asarray(t), xp.asarray(p))
    assert xp.is_native(C)
    np.testing.assert_array_equal(xp.to_numpy(C), skm.confusion_matrix(t, p))
    np.testing.assert_array_equal(
        metrics.confusion_matrix(["b", "a", "b"], ["a", "a", "b"]),
        skm.confusion_matrix(["b", "a", "b"], ["a", "a", "b"]),
    )


def test_length_mismatch_message():
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        metrics.accuracy_score([0, 1, 1], [0, 1])


def test_r2_of_one_sample_is_nan_with_sklearns_warning():
    import sklearn.exceptions
    from sklearn.metrics import r2_score as sk_r2

    from xpml.metrics import r2_score

    for yt, yp in (([3.0], [3.0]), ([3.0], [1.0]), ([1e-16], [5.0])):
        with pytest.warns(sklearn.exceptions.UndefinedMetricWarning):
            ours = r2_score(yt, yp)
        with pytest.warns(sklearn.exceptions.UndefinedMetricWarning):
            theirs = sk_r2(yt, yp)
        assert np.isnan(ours) and np.isnan(theirs)
    assert r2_score([1.0, 2.0], [1.0, 2.0]) == 1.0


def test_regressor_score_on_one_sample_is_nan():
    import warnings

    from xpml.linear_model import Ridge

    X = np.random.default_rng(0).normal(size=(10, 2))
    est = Ridge().fit(X, X[:, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert np.isnan(est.score(X[:1], X[:1, 0]))
