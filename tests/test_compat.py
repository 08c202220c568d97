"""scikit-learn's own test modules on xpml: the runner works, and the fast
subset keeps passing what it passes (the full table: docs/sklearn_compat.md)."""

from __future__ import annotations

import pytest

pytest.importorskip("sklearn")

from xpml import compat  # noqa: E402


def test_substitutions_cover_the_estimators_both_libraries_name():
    subs = compat.substitutions()
    assert subs["svm"].keys() == {"SVC", "LinearSVC"}
    assert {"Ridge", "Lasso", "LogisticRegression"} <= subs["linear_model"].keys()
    assert all(
        c.__module__.startswith("xpml.") for d in subs.values() for c in d.values()
    )


def test_categorise_failures():
    assert (
        compat.categorise(
            "TypeError: X.__init__() got an unexpected keyword argument 'solver'"
        )
        == "parameter not supported: solver"
    )
    assert compat.categorise(
        "AttributeError: 'SVC' object has no attribute '_impl'"
    ) == ("scikit-learn internals: _impl")
    assert (
        compat.categorise(
            "ValueError: X is a SciPy sparse csr_matrix of shape (10, 10); xpml "
            "computes on its dense form here, which needs 800 bytes (float64), over "
            "the memory budget of 100 bytes."
        )
        == "sparse input over the memory budget"
    )


@pytest.mark.slow
def test_fast_subset_runs_and_exercises_xpml():
    results = compat.run(list(compat.FAST), timeout=600)
    records = [r for rs in results.values() for r in rs]
    mine = [r for r in records if r["xpml"]]
    assert len(mine) >= 10, records
    passed = {r["test"].split("::")[-1] for r in mine if r["outcome"] == "passed"}
    # these passed when the subset was chosen; a regression fails CI
    assert EXPECTED_FAST_PASSES <= passed, sorted(EXPECTED_FAST_PASSES - passed)
    assert "| **all** |" in compat.table(results)


EXPECTED_FAST_PASSES = {
    "test_kernel_ridge",
    "test_kernel_ridge_multi_output",
    "test_kernel_ridge_precomputed",
    "test_kernel_ridge_precomputed_kernel_unchanged",
    "test_kernel_ridge_sample_weights",
    "test_kernel_ridge_singular_kernel",
    # SciPy sparse X (the one policy in xpml.utils.validation)
    "test_kernel_ridge_sparse[csr_matrix]",
    "test_kernel_ridge_sparse[csr_array]",
    "test_kernel_ridge_sparse[csc_matrix]",
    "test_kernel_ridge_sparse[csc_array]",
}
