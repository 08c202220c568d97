"""Checks every public estimator passes, found through the registry.

An estimator tunes them through ``_xpml_tags`` (see ``xpml.base``):

* ``"test_params"``: constructor arguments that keep the tests fast;
* ``"data"``: "classes" (default for classifiers), "binary", "regression",
  "counts" (non-negative integers) or "unsupervised";
* ``"parity_rtol"``: tolerance of backend parity (default 1e-8, float64);
* ``"sklearn_xfail"``: {check name: reason} for scikit-learn's check_estimator.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from _data import blobs, linear

import xpml
from xpml.base import clone
from xpml.exceptions import NotFittedError
from xpml.parity import DEFAULT_METHODS, fitted_arrays
from xpml.utils.discovery import all_estimators, import_errors

ESTIMATORS = all_estimators()
IMPORT_ERRORS = dict(import_errors)
IDS = [name for name, _ in ESTIMATORS]


def _make(cls):
    return cls(**cls._xpml_tags.get("test_params", {}))


def _data_kind(est):
    kind = est._xpml_tags.get("data")
    if kind:
        return kind
    t = getattr(est, "_estimator_type", None)
    return {"classifier": "classes", "regressor": "regression"}.get(t, "unsupervised")


def _data(est, seed=0):
    kind = _data_kind(est)
    if kind == "regression":
        return linear(n=40, d=4, seed=seed)
    if kind == "counts":
        X, y = blobs(n=60, d=6, k=3, seed=seed)
        return np.abs(np.round(X)).astype(np.float64), y
    if kind == "binary":
        X, y = blobs(n=60, d=4, k=2, seed=seed)
        return X, y
    X, y = blobs(n=60, d=4, k=3, seed=seed)
    return X, (y if kind == "classes" else None)


def _fit(est, X, y):
    return est.fit(X, y) if y is not None else est.fit(X)


def _outputs(est, X):
    out = {}
    for m in DEFAULT_METHODS:
        if hasattr(est, m):
            try:
                out[m] = xpml._backend.to_numpy(getattr(est, m)(X))
            except (AttributeError, NotImplementedError):
                pass
    return out


@pytest.fixture(params=ESTIMATORS, ids=IDS)
def Estimator(request):
    return request.param[1]


def test_registry_is_not_empty():
    assert "LinearRegression" in IDS


def test_every_module_imports():
    assert not IMPORT_ERRORS, f"modules that failed to import: {IMPORT_ERRORS}"


def test_init_stores_parameters_only(Estimator):
    est = _make(Estimator)
    params = est.get_params(deep=False)
    assert set(vars(est)) == set(params), "__init__ must only store its parameters"


def test_fit_returns_self_and_clone_round_trip(Estimator):
    from sklearn.base import clone as sk_clone

    est = _make(Estimator)
    X, y = _data(est)
    assert _fit(est, X, y) is est
    for c in (clone(est), sk_clone(est)):
        assert c.get_params(deep=False).keys() == est.get_params(deep=False).keys()
        assert not any(k.endswith("_") for k in vars(c))


def test_not_fitted_error(Estimator):
    est = _make(Estimator)
    X, _ = _data(est)
    for m in DEFAULT_METHODS + ("predict",):
        if hasattr(est, m):
            with pytest.raises(NotFittedError, match="not fitted"):
                getattr(est, m)(X)


def test_pickle_and_save_load_round_trip(Estimator, tmp_path):
    est = _make(Estimator)
    X, y = _data(est)
    _fit(est, X, y)
    before = _outputs(est, X)
    arrays = fitted_arrays(est)
    again = pickle.loads(pickle.dumps(est))
    path = tmp_path / "model.xpml"
    est.save(path)
    loaded = xpml.load(path)
    for other in (again, loaded):
        after = _outputs(other, X)
        for m, v in before.items():
            np.testing.assert_array_equal(after[m], v, err_msg=m)
    for k, v in fitted_arrays(loaded).items():
        np.testing.assert_array_equal(v, arrays[k], err_msg=k)
        assert v.dtype == arrays[k].dtype


def test_parity_across_libraries(Estimator, xp):
    """Fitting on another library's arrays gives NumPy's results."""
    est = _make(Estimator)
    X, y = _data(est)
    ref = _outputs(_fit(clone(est), X, y), X)
    other = _fit(clone(est), xp.asarray(X), None if y is None else xp.asarray(y))
    rtol = est._xpml_tags.get("parity_rtol", 1e-8)
    got = {}
    for m in ref:
        res = getattr(other, m)(xp.asarray(X))
        assert xp.is_native(res), f"{m} returned {type(res)} for {xp} input"
        got[m] = xp.to_numpy(res)
    for m, v in ref.items():
        if (
            v.dtype.kind in "iub"
            or m == "predict"
            and _data_kind(est) in ("classes", "binary", "counts")
        ):
            np.testing.assert_array_equal(got[m], v, err_msg=m)
        else:
            np.testing.assert_allclose(
                got[m], v, rtol=rtol, atol=rtol * max(1.0, np.abs(v).max()), err_msg=m
            )


def test_backend_switch_moves_numpy_input(Estimator):
    """Under set_backend('torch') NumPy input is computed on torch and comes back NumPy."""
    torch = pytest.importorskip("torch")
    est = _make(Estimator)
    X, y = _data(est)
    ref = _outputs(_fit(clone(est), X, y), X)
    with xpml.backend("torch"):
        b = _fit(clone(est), X, y)
        out = {m: getattr(b, m)(X) for m in ref}
    for m, v in out.items():
        assert isinstance(v, np.ndarray), f"{m} returned {type(v)}"
    for k, v in vars(b).items():
        assert not isinstance(v, torch.Tensor), f"fitted attribute {k} left on torch"
    with xpml.backend("torch", output="backend"):
        b2 = _fit(clone(est), X, y)
        for m in ref:
            r = getattr(b2, m)(X)
            if not (isinstance(r, np.ndarray) and r.dtype.kind in "OUS"):
                assert isinstance(r, torch.Tensor), (
                    f"{m} with output='backend' gave {type(r)}"
                )


def test_bad_input_errors(Estimator):
    est = _make(Estimator)
    X, y = _data(est)
    Xn = X.copy()
    Xn[0, 0] = np.nan
    bad = "NaN"
    if est._xpml_tags.get("allow_nan", False):  # missing values: inf is refused
        Xn[0, 0], bad = np.inf, "infinity"
    with pytest.raises(ValueError, match=bad):
        _fit(clone(est), Xn, y)
    with pytest.raises(ValueError, match="Expected 2D"):
        _fit(clone(est), X[:, 0], y)
    if y is not None:
        with pytest.raises(ValueError, match="inconsistent numbers of samples"):
            clone(est).fit(X, y[:-1])
    one_class_ok = est._xpml_tags.get("one_class_ok", False)  # scikit-learn's too
    if _data_kind(est) in ("classes", "binary", "counts") and not one_class_ok:
        with pytest.raises(ValueError, match="class"):
            clone(est).fit(X, np.zeros(len(X)))
    fitted = _fit(clone(est), X, y)
    if hasattr(fitted, "n_features_in_") and (
        hasattr(fitted, "predict") or hasattr(fitted, "transform")
    ):
        m = "predict" if hasattr(fitted, "predict") else "transform"
        with pytest.raises(ValueError, match="features"):
            getattr(fitted, m)(X[:, :-1])
    import torch

    if y is not None:
        with pytest.raises(TypeError, match="numpy.*torch|torch.*numpy"):
            clone(est).fit(X, torch.asarray(y))


def test_inputs_not_modified(Estimator):
    est = _make(Estimator)
    X, y = _data(est)
    X0, y0 = X.copy(), None if y is None else y.copy()
    Xr = X.copy()
    Xr.flags.writeable = False
    _fit(est, Xr, y)
    _outputs(est, Xr)
    np.testing.assert_array_equal(X, X0)
    if y is not None:
        np.testing.assert_array_equal(y, y0)
    # torch shares the memory of NumPy input it is given: no in-place writes there either
    pytest.importorskip("torch")
    with xpml.backend("torch"):
        _outputs(_fit(clone(est), X, y), X)
    np.testing.assert_array_equal(X, X0)
    if y is not None:
        np.testing.assert_array_equal(y, y0)


def test_invalid_parameter_message(Estimator):
    from xpml.exceptions import InvalidParameterError

    constraints = Estimator._parameter_constraints
    if not constraints:
        pytest.skip("no declared parameters")
    name = sorted(constraints)[0]
    est = _make(Estimator).set_params(**{name: object()})
    X, y = _data(est)
    with pytest.raises(InvalidParameterError, match=name):
        _fit(est, X, y)


@pytest.mark.filterwarnings("ignore")
def test_sklearn_check_estimator(Estimator):
    from sklearn.utils.estimator_checks import check_estimator

    est = _make(Estimator)
    xfail = dict(est._xpml_tags.get("sklearn_xfail", {}))
    check_estimator(est, expected_failed_checks=xfail)
