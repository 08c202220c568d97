"""Validation helpers: messages name the argument and the problem."""

import numpy as np
import pytest

from xpml.utils.validation import (
    _encode_by_counting,
    check_array,
    check_consistent_length,
    check_random_state,
    check_sample_weight,
    check_squares_finite,
    encode_labels,
)


def test_check_array_messages(xp):
    X = np.ones((3, 2))
    ns = xp.xp
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array instead: X"):
        check_array(xp.asarray(np.ones(3)), xp=ns)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        check_array(xp.asarray(Xn), xp=ns)
    Xi = X.copy()
    Xi[0, 0] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        check_array(xp.asarray(Xi), xp=ns)
    with pytest.raises(ValueError, match="0 sample"):
        check_array(xp.asarray(np.ones((0, 2))), xp=ns)
    with pytest.raises(ValueError, match="0 feature"):
        check_array(xp.asarray(np.ones((2, 0))), xp=ns)
    with pytest.raises(ValueError, match="Found array with dim 3, expected 2-D: X"):
        check_array(xp.asarray(np.ones((2, 2, 2))), xp=ns)


def test_scikit_learn_wording_of_shape_errors():
    # scikit-learn's own tests match these phrases; xpml's explanation follows
    with pytest.raises(TypeError, match=r"at least 1 dimension .* `array\(0\.\)`"):
        check_consistent_length(np.ones(3), np.array(0), names=("X", "sample_weight"))
    for w in (np.ones((3, 1)), np.ones((1, 3))):
        with pytest.raises(
            ValueError, match="Sample weights must be 1D array or scalar"
        ):
            check_consistent_length(np.ones((3, 2)), w, names=("X", "sample_weight"))
    with pytest.raises(ValueError, match="Sample weights must be 1D array or scalar"):
        check_sample_weight(np.ones((3, 1)), 3, xp=None, dtype=np.float64)


def test_complex_and_strings():
    with pytest.raises(ValueError, match="Complex data not supported"):
        check_array(np.ones((2, 2), dtype=complex), xp=None)
    with pytest.raises(ValueError, match="must be numeric"):
        check_array(np.array([["a", "b"]]), xp=None)


def test_encode_labels(xp):
    classes, codes = encode_labels(xp.asarray(np.array([3, 1, 3, 2])))
    np.testing.assert_array_equal(xp.to_numpy(classes), [1, 2, 3])
    np.testing.assert_array_equal(xp.to_numpy(codes), [2, 0, 2, 1])
    with pytest.raises(ValueError, match="1 class"):
        encode_labels(xp.asarray(np.array([1, 1, 1])))
    s_classes, s_codes = encode_labels(np.array(["b", "a", "b"]))
    assert s_classes.tolist() == ["a", "b"] and s_codes.tolist() == [1, 0, 1]


_LABEL_SETS = {
    "binary": (np.array([0, 1]), True),
    "gaps and negatives": (np.array([-7, -3, 0, 2, 40]), True),
    "int8 extremes": (np.array([-128, 0, 127], dtype=np.int8), True),
    "uint8": (np.array([3, 200, 255], dtype=np.uint8), True),
    "integral floats": (np.array([-2.0, 0.0, 5.0]), True),
    "float32": (np.array([1.0, 4.0, 9.0], dtype=np.float32), True),
    "uint64 beyond int64": (np.array([0, 2**63 + 5], dtype=np.uint64), False),
    "floats beyond 2**53": (np.array([2.0**60, 2.0**60 + 2**10]), False),
    "wide span": (np.array([0, 10**9]), False),
}


@pytest.mark.parametrize("labels", list(_LABEL_SETS), ids=list(_LABEL_SETS))
def test_encode_labels_by_counting_matches_unique(labels, xp):
    """The O(n) count over a narrow range of integer labels (NumPy) gives
    np.unique's classes and codes; wide ranges and values beyond exact int64
    / float arithmetic take the sort; every library gives the same codes."""
    values, counted = _LABEL_SETS[labels]
    rng = np.random.default_rng(0)
    y = values[rng.integers(0, len(values), size=300)]
    y[: len(values)] = values  # every value present
    expected_classes, expected_codes = np.unique(y, return_inverse=True)
    assert (_encode_by_counting(y) is not None) == counted
    yb = xp.asarray(y)
    classes, codes = encode_labels(yb)
    np.testing.assert_array_equal(xp.to_numpy(classes), expected_classes)
    assert xp.to_numpy(classes).dtype == y.dtype
    np.testing.assert_array_equal(xp.to_numpy(codes), expected_codes)
    assert xp.to_numpy(codes).dtype == np.int64
    np.testing.assert_array_equal(xp.to_numpy(yb), y)  # the input unchanged


def test_sample_weight(xp):
    ns = xp.xp
    w = check_sample_weight(None, 3, xp=ns, dtype=ns.float64)
    np.testing.assert_array_equal(xp.to_numpy(w), 1.0)
    with pytest.raises(
        ValueError, match="Negative values in data passed to sample_weight"
    ):
        check_sample_weight(
            xp.asarray(np.array([1.0, -1.0, 1.0])), 3, xp=ns, dtype=ns.float64
        )
    with pytest.raises(
        ValueError, match=r"sample_weight.shape == \(2,\), expected \(3,\)"
    ):
        check_sample_weight(
            xp.asarray(np.array([1.0, 1.0])), 3, xp=ns, dtype=ns.float64
        )
    with pytest.raises(ValueError, match="all zeros"):
        check_sample_weight(xp.asarray(np.zeros(3)), 3, xp=ns, dtype=ns.float64)


def test_random_state():
    a = check_random_state(3).integers(0, 100, 5)
    b = check_random_state(3).integers(0, 100, 5)
    np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="random_state must be"):
        check_random_state("seed")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_finite_check_when_the_sum_overflows(xp, dtype):
    """The finiteness check sums first; finite entries whose sum overflows are
    accepted, and NaN or infinity among them still named as before."""
    big = np.finfo(dtype).max
    X = np.full((4, 3), big / 2, dtype=dtype)  # every entry finite, the sum inf
    out = check_array(xp.asarray(X), xp=xp.xp)
    np.testing.assert_array_equal(xp.to_numpy(out), X)
    X[2, 1], X[3, 0] = np.inf, -big
    with pytest.raises(ValueError, match="Input X contains infinity"):
        check_array(xp.asarray(X), xp=xp.xp)
    X[1, 2] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        check_array(xp.asarray(X), xp=xp.xp)
    X = np.full((2, 2), -big, dtype=dtype)
    X[0, 0] = big  # +max and -max: the sum of the finite entries is -inf
    check_array(xp.asarray(X), xp=xp.xp)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_squares_check_around_its_bound(xp, dtype):
    """Entries within ±√(max / 2d) pass without squaring; beyond, a row whose
    sum of squares overflows is named, one that does not still passes."""
    d, big = 4, float(np.finfo(dtype).max)
    bound = np.sqrt(big / (2 * d))
    X = np.full((3, d), bound, dtype=dtype)
    X[1] = -bound
    check_squares_finite(xp.asarray(X), xp=xp.xp)
    X[0] = 0.9 * np.sqrt(big / d)  # beyond the bound; the squares sum to 0.81 max
    check_squares_finite(xp.asarray(X), xp=xp.xp)
    X[2, 1] = -1.1 * np.sqrt(big / d)  # row 2: 1.21 max / d + 3 max / 8d: finite
    check_squares_finite(xp.asarray(X), xp=xp.xp)
    X[2] = -1.1 * np.sqrt(big / d)  # row 2: 1.21 max: overflows
    with pytest.raises(ValueError, match="KMeans: squared distances of Z overflow"):
        check_squares_finite(xp.asarray(X), xp=xp.xp, name="Z", owner="KMeans")
    X[2] = 1.0
    X[2, 0] = np.nan  # not finite: checked square by square, refused as before
    with pytest.raises(ValueError, match="entries up to nan"):
        check_squares_finite(xp.asarray(X), xp=xp.xp)
    check_squares_finite(xp.asarray(np.ones((3, 0), dtype=dtype)), xp=xp.xp)
