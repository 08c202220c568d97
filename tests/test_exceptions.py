"""xpml's errors and warnings are scikit-learn's classes too where scikit-learn
has been imported; xpml never imports it (checked in fresh processes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest


def _fresh(code):
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def test_errors_and_warnings_before_and_after_importing_sklearn():
    out = _fresh(
        """
        import sys, warnings, numpy as np
        from xpml.exceptions import ConvergenceWarning, NotFittedError
        from xpml.linear_model import Lasso, Ridge

        def not_fitted():
            try:
                Ridge().predict(np.ones((2, 2)))
            except NotFittedError as exc:
                return exc

        def convergence_warning():
            rng = np.random.default_rng(0)
            X, y = rng.normal(size=(40, 8)), rng.normal(size=40)
            with warnings.catch_warnings(record=True) as record:
                warnings.simplefilter("always")
                Lasso(alpha=1e-4, max_iter=1, tol=1e-12).fit(X, y)
            return [w.category for w in record]

        early, early_warned = not_fitted(), convergence_warning()
        assert "sklearn" not in sys.modules, "a fit or a NotFittedError imported it"
        assert isinstance(early, AttributeError) and isinstance(early, ValueError)
        assert [issubclass(c, ConvergenceWarning) for c in early_warned] == [True]
        import sklearn.exceptions as sk
        late, late_warned = not_fitted(), convergence_warning()
        assert isinstance(late, sk.NotFittedError) and isinstance(late, NotFittedError)
        assert [issubclass(c, sk.ConvergenceWarning) for c in late_warned] == [True]
        assert [issubclass(c, ConvergenceWarning) for c in late_warned] == [True]
        # made before the import: xpml's class only (the documented rule)
        assert not isinstance(early, sk.NotFittedError)
        print("ok")
        """
    )
    assert out.strip() == "ok"


def test_xpml_import_does_not_import_sklearn():
    out = _fresh(
        """
        import sys, xpml, xpml.svm, xpml.linear_model, xpml.exceptions
        print("sklearn" in sys.modules)
        """
    )
    assert out.strip() == "False"


def test_warnings_are_sklearns_classes():
    import sklearn.exceptions as sk

    from xpml.exceptions import (
        ConvergenceWarning,
        DataConversionWarning,
        SeparableDataWarning,
        warn,
    )

    for ours in (ConvergenceWarning, SeparableDataWarning, DataConversionWarning):
        theirs = (
            sk.ConvergenceWarning
            if ours is SeparableDataWarning
            else getattr(sk, ours.__name__)
        )
        with pytest.warns(theirs) as record:
            warn(ours, "stopped early")
        assert issubclass(record[0].category, ours)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=sk.ConvergenceWarning)
        warn(SeparableDataWarning, "filtered by scikit-learn's class")


def test_solver_convergence_warning_is_sklearns():
    import sklearn.exceptions as sk

    from xpml.linear_model import Lasso

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(40, 8)), rng.normal(size=40)
    with pytest.warns(sk.ConvergenceWarning):
        Lasso(alpha=1e-4, max_iter=1, tol=1e-12).fit(X, y)
