"""xpml's errors and warnings are scikit-learn's classes too, whether or not
scikit-learn was imported first (checked in fresh processes)."""

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


def test_not_fitted_is_sklearns_without_importing_it_first():
    out = _fresh(
        """
        import sys, numpy as np
        from xpml.linear_model import Ridge
        assert "sklearn" not in sys.modules, "xpml imported scikit-learn"
        try:
            Ridge().predict(np.ones((2, 2)))
        except Exception as exc:
            caught = exc
        import sklearn.exceptions as sk
        from xpml.exceptions import NotFittedError
        assert isinstance(caught, sk.NotFittedError), type(caught).__mro__
        assert isinstance(caught, NotFittedError)
        assert isinstance(caught, AttributeError) and isinstance(caught, ValueError)
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
