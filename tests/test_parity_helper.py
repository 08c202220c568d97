"""The parity helper (ALGORITHMS.md §0.5)."""

import numpy as np
import pytest
from _data import linear

from xpml.linear_model import LinearRegression
from xpml.parity import compare


def test_compare_reports_every_array_and_method():
    X, y = linear()
    report = compare(
        LinearRegression(), X, y, backends=("numpy", "array_api_strict", "torch")
    )
    for b in ("array_api_strict", "torch"):
        assert {"predict", "attr:coef_", "attr:intercept_", "attr:singular_"} <= set(
            report.diffs[b]
        )
    report.assert_close(rtol=1e-10)
    assert report.max_rel_diff() < 1e-12
    assert "coef_" in str(report)


def test_compare_float32():
    X, y = linear()
    report = compare(
        LinearRegression(), X, y, backends=("numpy", "torch"), dtype="float32"
    )
    assert report.results["numpy"]["predict"].dtype == np.float32
    report.assert_close(rtol=1e-4)


def test_assert_close_fails_on_real_difference():
    X, y = linear()
    report = compare(LinearRegression(), X, y, backends=("numpy", "torch"))
    report.results["torch"]["predict"] = report.results["torch"]["predict"] + 1.0
    report.diffs["torch"]["predict"] = (1.0, 1.0)
    with pytest.raises(AssertionError, match="torch: predict"):
        report.assert_close(rtol=1e-8)
