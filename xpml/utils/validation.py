"""Input validation shared by every estimator.

Each helper names the argument it checks, says what was wrong and what is
allowed. None of them writes into the caller's array.

Labels are encoded *before* data moves to a backend (string labels cannot live on
a GPU): :func:`encode_labels` returns the classes in the caller's library and the
integer codes, which then travel with ``X``.

SciPy sparse input (one policy, :func:`dense_from_sparse`)
----------------------------------------------------------
A SciPy sparse ``X`` (csr, csc, coo, lil, dok, bsr, dia; ``*_matrix`` and
``*_array``) is accepted by every estimator: it is converted once, on the host,
to a dense NumPy array of its floating dtype (float32 stays float32, everything
else becomes float64), and then follows the dense path, moving to the active
backend (torch, CuPy, array-api-strict) like any NumPy input. The conversion
must fit the memory budget (:func:`xpml.utils._array_api.memory_budget`, 512 MiB
unless ``XPML_MEMORY_BUDGET`` says otherwise): above it, a ``ValueError`` names
the argument, its shape, the dense size and the budget. The caller's matrix is
never modified. :class:`~xpml.naive_bayes.MultinomialNB` and
:class:`~xpml.naive_bayes.BernoulliNB` keep ``X`` sparse on the NumPy backend
(their counts ``Yᵀ X`` and scores ``X Lᵀ`` are sparse-dense products, with no
budget); the linear models call :func:`dense_from_sparse` in their own input
step. Sparse targets (``y``), ``sample_weight`` and ``classes`` are refused
(``TypeError``), as scikit-learn refuses sparse class labels; another library's
sparse array (not SciPy) is refused by name.
"""

from __future__ import annotations

import math
import numbers
import warnings

import array_api_compat
import numpy as np

from xpml._backend import float_dtype, library_name, to_numpy
from xpml.exceptions import data_conversion_warning, not_fitted_error
from xpml.utils._array_api import device as array_device
from xpml.utils._array_api import finfo, memory_budget

__all__ = [
    "check_array",
    "check_finite_allow_nan",
    "AllowNaN",
    "check_consistent_length",
    "check_sample_weight",
    "check_random_state",
    "check_is_fitted",
    "check_n_features",
    "check_targets",
    "dense_from_sparse",
    "is_sparse",
    "encode_labels",
    "encode_label_columns",
    "is_multi_output",
    "decode_labels",
    "num_samples",
]


def is_sparse(x):
    """True for a SciPy sparse matrix or array (any format)."""
    return type(x).__module__.startswith("scipy.sparse")


_is_sparse = is_sparse

# arguments that stay dense-only: sparse labels and weights are refused
_DENSE_ONLY = ("y", "Y", "sample_weight", "classes")


def _size_text(nbytes):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def dense_from_sparse(x, name="X"):
    """The dense NumPy form of a SciPy sparse ``x``, within the memory budget.

    Converted once, on the host, to ``x``'s floating dtype (float32 stays
    float32, any other dtype becomes float64); ``x`` itself is not modified.
    ``y``, ``sample_weight`` and ``classes`` are refused (``TypeError``).

    Raises
    ------
    ValueError
        When the dense form would exceed :func:`memory_budget` (the message
        names the argument, its shape, the dense size and the budget).
    """
    fmt = type(x).__name__
    if name in _DENSE_ONLY:
        raise TypeError(
            f"{name} is a SciPy sparse {fmt}; {name} must be a dense array "
            f"(sparse {name} is not supported, as in scikit-learn). Pass "
            f"{name}.toarray()."
        )
    if x.dtype.kind == "c":
        raise ValueError(f"Complex data not supported; {name} has dtype {x.dtype}")
    dtype = np.float32 if x.dtype == np.float32 else np.float64
    shape = tuple(int(s) for s in x.shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    budget = memory_budget()
    if nbytes > budget:
        raise ValueError(
            f"{name} is a SciPy sparse {fmt} of shape {shape}; xpml computes on "
            f"its dense form here, which needs {_size_text(nbytes)} "
            f"({np.dtype(dtype).name}), over the memory budget of "
            f"{_size_text(budget)}. Raise the budget (XPML_MEMORY_BUDGET, e.g. "
            f"'8G') if the dense array fits in memory, reduce the features first, "
            f"or use an estimator that keeps sparse input sparse (MultinomialNB, "
            f"BernoulliNB on the NumPy backend)."
        )
    return np.asarray(x.astype(dtype, copy=False).toarray(), dtype=dtype)


def _shape(x):
    return tuple(x.shape)


def num_samples(x, name="X"):
    """Number of rows of an array or array-like."""
    if x is None:
        raise ValueError(f"{name} is None; expected an array")
    a = x if hasattr(x, "shape") else np.asarray(x)
    if len(a.shape) == 0:  # scikit-learn's TypeError and words
        shown = (
            a.astype(float)
            if isinstance(a, np.ndarray) and a.dtype.kind in "biu"
            else a
        )
        raise TypeError(
            "Input should have at least 1 dimension i.e. satisfy `len(x.shape) > 0`, "
            f"got scalar `{shown!r}` instead: {name} is a 0-d array; expected an "
            f"array of samples"
        )
    return int(a.shape[0])


def check_consistent_length(*arrays, names=None):
    """Raise ValueError naming the arrays when their first dimensions differ."""
    names = names or [f"argument {i}" for i in range(len(arrays))]
    for nm, a in zip(names, arrays):
        if nm in _DENSE_ONLY and is_sparse(a):
            dense_from_sparse(a, nm)  # raises: sparse labels and weights are refused
        if nm == "sample_weight" and len(getattr(a, "shape", ())) > 1:
            raise ValueError(
                f"Sample weights must be 1D array or scalar: sample_weight has shape "
                f"{tuple(a.shape)}; pass one weight per sample"
            )
    pairs = [(nm, num_samples(a, nm)) for nm, a in zip(names, arrays) if a is not None]
    lengths = {n for _, n in pairs}
    if len(lengths) > 1:
        desc = ", ".join(f"{nm} has {n}" for nm, n in pairs)
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: {desc}; "
            f"they must have the same number of rows"
        )


def _host_prepare(x, name):
    """Reject what no backend accepts, and make array-likes into NumPy arrays."""
    if is_sparse(x):
        x = dense_from_sparse(x, name)
    elif hasattr(x, "tocsr"):  # another library's sparse array (pydata sparse ...)
        raise TypeError(
            f"{name} is a sparse {type(x).__module__}.{type(x).__name__}; xpml "
            f"converts SciPy sparse matrices only. Pass a dense array or a SciPy "
            f"sparse matrix."
        )
    # an ndarray first: the check against the numbers ABC costs ~25 us at a
    # process's first call (its subclass cache is empty)
    if type(x) is not np.ndarray and (
        not array_api_compat.is_array_api_obj(x) or isinstance(x, numbers.Number)
    ):
        try:
            x = np.asarray(x)
        except Exception as exc:
            raise ValueError(
                f"{name} could not be converted to an array: {exc}"
            ) from exc
    if isinstance(x, np.ndarray):
        if x.dtype.kind in "c":
            raise ValueError(f"Complex data not supported; {name} has dtype {x.dtype}")
        if x.dtype.kind in "OUSV":
            try:
                x = x.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise type(exc)(
                    f"{name} must be numeric; it has dtype {x.dtype} and could not be "
                    f"converted to float: {exc}"
                ) from exc
    return x


def check_array(
    X,
    *,
    xp,
    name="X",
    ndim=2,
    dtype="float",
    requested=None,
    ensure_finite=True,
    min_samples=1,
    min_features=1,
    allow_nd=False,
):
    """Validate a data array already in namespace ``xp``.

    Parameters
    ----------
    X : array
        Data in ``xp`` (as returned by :func:`xpml._backend.enter`).
    xp : namespace
    name : str
        The argument's name, for messages.
    ndim : int or tuple of int
        Allowed numbers of dimensions.
    dtype : "float", "numeric" or None
        "float" casts to the working float dtype (float32 stays float32,
        everything else float64 where the device has it); "numeric" keeps
        integer and float data as it is; None skips dtype handling.
    requested : {"float32", "float64"} or None
        A dtype forced by the backend setting.
    ensure_finite : bool or AllowNaN
        Reject NaN and infinity; an :class:`AllowNaN` rejects infinity only
        and records whether ``X`` holds NaN (missing values).
    min_samples, min_features : int
        Smallest allowed numbers of rows and columns.
    """
    X = _host_prepare(X, name)
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if allow_nd:
        allowed = tuple(range(max(allowed), 8))
    shape = _shape(X)
    if len(shape) not in allowed:
        if len(shape) == 1 and 2 in allowed:
            raise ValueError(
                f"Expected 2D array, got 1D array instead: {name} has shape {shape}. "
                f"Reshape your data either using {name}.reshape(-1, 1) if your data has a single "
                f"feature or {name}.reshape(1, -1) if it contains a single sample."
            )
        if len(shape) == 0:
            raise ValueError(
                f"Expected 2D array, got scalar array instead: {name} is a 0-d array"
            )
        want = " or ".join(f"{d}-D" for d in allowed)
        raise ValueError(
            f"Found array with dim {len(shape)}, expected {want}: {name} must be a "
            f"{want} array; got {len(shape)}-D with shape {shape}"
        )
    if xp is None:
        xp = array_api_compat.array_namespace(X)
    if isinstance(X, np.ndarray) and xp is not array_api_compat.array_namespace(X):
        X = xp.asarray(X)
    if min_samples and shape[0] < min_samples:
        raise ValueError(
            f"Found array with {shape[0]} sample(s) (shape={shape}) while a minimum of "
            f"{min_samples} is required: {name} has too few rows"
        )
    if len(shape) >= 2 and min_features and shape[1] < min_features:
        raise ValueError(
            f"Found array with {shape[1]} feature(s) (shape={shape}) while a minimum of "
            f"{min_features} is required: {name} has too few columns"
        )
    if dtype is not None:
        X = _cast(X, xp, dtype, requested, name)
    if isinstance(ensure_finite, AllowNaN):
        ensure_finite.found = check_finite_allow_nan(
            X, xp=xp, name=name, owner=ensure_finite.owner
        )
    elif ensure_finite and xp.isdtype(X.dtype, ("real floating", "complex floating")):
        _assert_finite(X, xp, name)
    return X


def _cast(X, xp, dtype, requested, name):
    if xp.isdtype(X.dtype, "complex floating"):
        raise ValueError(f"Complex data not supported; {name} has dtype {X.dtype}")
    is_float = xp.isdtype(X.dtype, "real floating")
    if dtype == "numeric":
        if not (is_float or xp.isdtype(X.dtype, ("integral", "bool"))):
            raise ValueError(f"{name} must be numeric; got dtype {X.dtype}")
        if requested is None or not is_float:
            return X
    dev = array_device(X)
    target = float_dtype(xp, dev, requested, like=X.dtype if is_float else None)
    if X.dtype == target:
        return X
    return xp.astype(X, target)


def _assert_finite(X, xp, name):
    # One reduction and one host sync per validated array, with no temporary
    # the size of X (issue 16: a fresh n × d mask is page-faulted in on a first
    # call): a finite sum proves every entry finite (a NaN or an infinity
    # makes the sum NaN or infinite); only a sum that is not finite (which
    # finite values can also give, by overflow) is checked entry by entry.
    with np.errstate(over="ignore", invalid="ignore"):  # NumPy would warn
        finite_sum = bool(xp.isfinite(xp.sum(X)))
    if finite_sum:
        return
    if bool(xp.all(xp.isfinite(X))):
        return
    if bool(xp.any(xp.isnan(X))):
        raise ValueError(
            f"Input {name} contains NaN; xpml estimators need finite values in {name}"
        )
    raise ValueError(
        f"Input {name} contains infinity or a value too large for its dtype; "
        f"xpml estimators need finite values in {name}"
    )


class AllowNaN:
    """``ensure_finite`` of :func:`check_array` (and of the estimators'
    ``_validate_fit_data`` / ``_validate_predict_data``) for estimators that
    take missing values: NaN is accepted, infinity refused; after the call,
    ``found`` says whether ``X`` held NaN."""

    def __init__(self, owner="this estimator"):
        self.owner = owner
        self.found = False


def check_finite_allow_nan(X, *, xp, name="X", owner="this estimator") -> bool:
    """Reject infinity in ``X`` but accept NaN (missing values); return
    whether ``X`` holds NaN. One host sync when ``X`` is finite (as
    :func:`check_array`'s finiteness check), one more otherwise."""
    if not xp.isdtype(X.dtype, "real floating"):
        return False
    with np.errstate(over="ignore", invalid="ignore"):  # as _assert_finite:
        if bool(xp.isfinite(xp.sum(X))):  # a finite sum: no n × d mask
            return False
    if bool(xp.all(xp.isfinite(X))):
        return False
    if bool(xp.any(xp.isinf(X))):
        raise ValueError(
            f"Input {name} contains infinity or a value too large for its dtype; "
            f"{owner} accepts NaN (missing values) in {name} but not infinity"
        )
    return True


def feature_names(X):
    """The column names of a DataFrame-like ``X`` (pandas, polars ...), as a
    NumPy string array, or None when it has none or they are not all strings.

    Mixed string and non-string names raise ``TypeError`` (scikit-learn's rule).
    """
    columns = getattr(X, "columns", None)
    if columns is None or isinstance(X, np.ndarray) or not hasattr(X, "shape"):
        return None
    names = list(columns)
    kinds = {isinstance(c, str) for c in names}
    if kinds == {True}:
        return np.asarray(names, dtype=str)
    if len(kinds) == 2:
        raise TypeError(
            "Feature names are only supported if all input features have string "
            f"names, but your input has {sorted({type(c).__name__ for c in names})} "
            "as feature name / column name types. Convert them all to str (e.g. "
            "X.columns = X.columns.astype(str)) or give none."
        )
    return None


def set_feature_names(estimator, X):
    """Record ``feature_names_in_`` at fit time (or drop a stale one)."""
    names = feature_names(X)
    if names is None:
        estimator.__dict__.pop("feature_names_in_", None)
    else:
        estimator.feature_names_in_ = names


def check_feature_names(estimator, X):
    """At predict time: the columns of ``X`` must be those seen in fit, in the
    same order (``ValueError`` in scikit-learn's words); a warning when only one
    of fit and predict had names."""
    fitted = getattr(estimator, "feature_names_in_", None)
    names = feature_names(X)
    est = type(estimator).__name__
    if fitted is None and names is None:
        return
    if fitted is None:
        warnings.warn(
            f"X has feature names, but {est} was fitted without feature names",
            UserWarning,
            stacklevel=4,
        )
        return
    if names is None:
        warnings.warn(
            f"X does not have valid feature names, but {est} was fitted with "
            f"feature names",
            UserWarning,
            stacklevel=4,
        )
        return
    if len(fitted) == len(names) and np.array_equal(fitted, names):
        return
    raise ValueError(_names_message(list(fitted), list(names)))


def _names_message(fitted, names):
    unseen = [n for n in names if n not in set(fitted)]
    missing = [n for n in fitted if n not in set(names)]
    message = "The feature names should match those that were passed during fit.\n"
    if unseen:
        message += "Feature names unseen at fit time:\n"
        message += "".join(f"- {n}\n" for n in unseen[:5])
    if missing:
        message += "Feature names seen at fit time, yet now missing:\n"
        message += "".join(f"- {n}\n" for n in missing[:5])
    if not unseen and not missing:
        message += "Feature names must be in the same order as they were in fit.\n"
    return message


def check_squares_finite(X, *, xp, name="X", owner="this estimator"):
    """Raise when squared distances between rows of ``X`` would overflow.

    Distance-based estimators (neighbours, k-means, linkage) compute
    ``‖x‖² + ‖z‖² − 2 x·z``; with entries near the dtype's maximum (X × 1e300)
    the squares are ``inf`` and every neighbour or centre is wrong. One host
    synchronisation per call (two for entries beyond ``√(max / 2d)``).
    """
    if len(X.shape) != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        return
    # No temporary the size of X in the common case (issue 16: a first call
    # pages a fresh one in): entries within ±√(max / 2d) cannot overflow a
    # row's sum of squares (d squares of at most max / 2d, rounding included);
    # only data beyond that bound (or NaN) is checked square by square.
    if xp.isdtype(X.dtype, "real floating"):
        bound = math.sqrt(float(finfo(X.dtype, xp).max) / (2 * X.shape[1]))
        if float(xp.max(xp.stack([xp.max(X), -xp.min(X)]))) <= bound:
            return
    if not bool(xp.all(xp.isfinite(xp.sum(X * X, axis=1)))):
        big = float(xp.max(xp.abs(X)))
        raise ValueError(
            f"{owner}: squared distances of {name} overflow {X.dtype} (entries up "
            f"to {big:.3g}); scale the features (e.g. StandardScaler) first"
        )


def check_n_features(estimator, X, name="X"):
    """Check that ``X`` has as many columns as the data ``estimator`` was fitted on."""
    expected = getattr(estimator, "n_features_in_", None)
    if expected is None:
        return
    got = int(X.shape[1])
    if got != expected:
        raise ValueError(
            f"{name} has {got} features, but {type(estimator).__name__} is expecting "
            f"{expected} features as input."
        )


def _warn_column_vector(name):
    warnings.warn(
        f"A column-vector {name} was passed when a 1d array was expected; it is flattened "
        f"to shape (n_samples,). Pass {name}.ravel() (or {name}[:, 0]) to silence this.",
        data_conversion_warning(),
        stacklevel=4,
    )


def check_targets(
    y,
    *,
    xp,
    name="y",
    n_samples=None,
    multi_output=False,
    requested=None,
    dtype="float",
):
    """Validate regression targets: 1-D (or 2-D when ``multi_output``), finite, float."""
    allowed = (1, 2) if multi_output else (1,)
    y = _host_prepare(y, name)
    if len(y.shape) == 2 and not multi_output and y.shape[1] == 1:
        _warn_column_vector(name)
        y = xp.reshape(y, (-1,)) if not isinstance(y, np.ndarray) else y.reshape(-1)
    if len(y.shape) not in allowed:
        want = "1-D" if not multi_output else "1-D or 2-D"
        raise ValueError(f"{name} must be a {want} array; got shape {tuple(y.shape)}")
    y = check_array(
        y,
        xp=xp,
        name=name,
        ndim=allowed,
        dtype=dtype,
        requested=requested,
        min_samples=1,
    )
    if n_samples is not None and y.shape[0] != n_samples:
        raise ValueError(
            f"Found input variables with inconsistent numbers of samples: X has {n_samples}, "
            f"{name} has {y.shape[0]}"
        )
    return y


_CONTINUOUS = (
    "Unknown label type: continuous. {name} holds non-integer floats, which look like "
    "a regression target; class labels must be integers, strings or integral floats"
)


def encode_labels(y, *, name="y", min_classes=2):
    """Map class labels to integer codes ``0..k-1``, in ``y``'s own library.

    Returns
    -------
    classes : array (k,)
        Sorted unique labels, in ``y``'s library (NumPy for strings).
    codes : array (n,)
        Integer codes, in ``y``'s library.
    """
    y = _dense_labels(y, name, "dense 1-D array")
    shape = tuple(y.shape)
    if len(shape) == 2 and shape[1] == 1:
        _warn_column_vector(name)
        y = y[:, 0] if not isinstance(y, np.ndarray) else y.ravel()
        shape = tuple(y.shape)
    if len(shape) != 1:
        raise ValueError(
            f"{name} must be a 1-D array of class labels; got shape {shape}"
        )
    if isinstance(y, np.ndarray):
        if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
            raise ValueError(
                f"Input {name} contains NaN or infinity; class labels must be finite"
            )
        if y.dtype.kind == "f" and not np.all(y == np.round(y)):
            raise ValueError(_CONTINUOUS.format(name=name))
        if y.dtype.kind == "O":
            kinds = {type(v) for v in y.tolist()}
            if len(kinds) > 1 and not all(issubclass(k, numbers.Number) for k in kinds):
                raise ValueError(
                    f"{name} mixes label types {sorted(k.__name__ for k in kinds)}; "
                    f"use one type for all class labels"
                )
        found = _encode_by_counting(y)
        if found is None:
            classes, codes = np.unique(y, return_inverse=True)
            codes = codes.reshape(-1).astype(np.int64)
        else:
            classes, codes = found
    else:
        xp = array_api_compat.array_namespace(y)
        if xp.isdtype(y.dtype, "real floating") and not bool(xp.all(xp.isfinite(y))):
            raise ValueError(
                f"Input {name} contains NaN or infinity; class labels must be finite"
            )
        if xp.isdtype(y.dtype, "real floating") and not bool(xp.all(y == xp.round(y))):
            raise ValueError(_CONTINUOUS.format(name=name))
        classes, codes = xp.unique_inverse(y)
        codes = xp.astype(xp.reshape(codes, (-1,)), xp.int64)
    k = int(classes.shape[0])
    if k < min_classes:
        raise ValueError(
            f"{name} has {k} class(es) but at least {min_classes} classes are required; "
            f"got a single class {to_numpy(classes).tolist()!r}"
            if k == 1
            else f"{name} has no samples; at least {min_classes} classes are required"
        )
    return classes, codes


#: the widest range of values :func:`_encode_by_counting` counts over, as a
#: multiple of the number of labels (plus a fixed allowance for short ``y``)
_COUNT_SPAN_PER_LABEL = 2
_COUNT_SPAN_MIN = 1 << 12


def _encode_by_counting(y):
    """``np.unique(y, return_inverse=True)`` (codes as int64) for NumPy
    integer labels, or integral float labels below 2**53 in magnitude, whose
    values span at most about twice their number: one count over the range
    (``bincount``) instead of a sort, O(n). None when ``y`` is not such.
    Float labels must already be checked finite and integral (as
    :func:`encode_labels` does before it calls this): they are truncated.

    100,000 binary labels (session 22): 0.2-0.3 ms against 1.2 ms for
    ``np.unique``'s sort (3.4 ms at a fresh process's first call)."""
    n = int(y.shape[0])
    kind = y.dtype.kind
    if n == 0 or kind not in "iuf":
        return None
    lo, hi = y.min(), y.max()
    if kind == "f" and not max(abs(float(lo)), abs(float(hi))) < 2.0**53:
        return None
    lo, hi = int(lo), int(hi)
    if hi >= 2**63:  # uint64 beyond int64: the sort handles it
        return None
    span = hi - lo
    if span > _COUNT_SPAN_PER_LABEL * n + _COUNT_SPAN_MIN:
        return None
    offsets = y.astype(np.int64)  # a copy, exact: |values| < 2**63 (2**53 floats)
    if lo:
        offsets -= lo
    present = np.bincount(offsets, minlength=span + 1) > 0
    classes = (np.flatnonzero(present) + lo).astype(y.dtype)
    if int(classes.shape[0]) == span + 1:  # no gaps: the offsets are the codes
        return classes, offsets
    code_of = np.cumsum(present, dtype=np.int64)
    code_of -= 1
    return classes, code_of.take(offsets)


def is_multi_output(y):
    """True for a 2-D ``y`` with more than one column (several outputs); a
    single column is one output."""
    shape = getattr(y, "shape", None)
    if shape is None and y is not None:
        shape = np.asarray(y).shape  # array-likes (np.shape may be refused)
    return shape is not None and len(shape) == 2 and shape[1] > 1


def _dense_labels(y, name, what):
    """``y`` as an array (array-likes through NumPy); None and SciPy sparse
    labels refused with errors naming ``name`` (``what``: the allowed form)."""
    if y is None:
        raise ValueError(f"{name} is None; this estimator needs class labels")
    if is_sparse(y):
        raise TypeError(
            f"{name} is a SciPy sparse {type(y).__name__}; class labels must be a "
            f"{what} (sparse {name} is not supported, as in scikit-learn)"
        )
    return y if array_api_compat.is_array_api_obj(y) else np.asarray(y)


def encode_label_columns(y, *, name="y"):
    """Per-output class codes of a 2-D ``y`` (n, n_outputs): each column
    encoded by :func:`encode_labels` (a column may hold a single class).

    Returns
    -------
    classes : list of arrays
        Sorted labels of each output (NumPy for strings).
    codes : int64 array (n, n_outputs)
        In ``y``'s library (NumPy for strings or array-likes).
    """
    y = _dense_labels(y, name, "dense array")
    if len(y.shape) != 2:
        raise ValueError(
            f"{name} must be a 2-D array of class labels (n_samples, n_outputs); "
            f"got shape {tuple(y.shape)}"
        )
    classes, codes = [], []
    for j in range(int(y.shape[1])):
        cls, c = encode_labels(y[:, j], name=f"{name}[:, {j}]", min_classes=1)
        classes.append(cls)
        codes.append(c)
    if all(isinstance(c, np.ndarray) for c in codes):
        return classes, np.stack(codes, axis=1)
    xp = array_api_compat.array_namespace(*codes)
    return classes, xp.stack(codes, axis=1)


def decode_labels(classes, codes, ctx):
    """Map integer codes (in the compute namespace) back to labels, returned in
    the caller's library (NumPy when the labels are not numeric)."""
    codes = ctx.out(codes)
    if isinstance(classes, np.ndarray) and classes.dtype.kind not in "biuf":
        return classes[to_numpy(codes)]
    xp = array_api_compat.array_namespace(codes)
    if library_name(classes) != library_name(codes) or (
        array_device(classes) != array_device(codes)
    ):
        from xpml._backend import move

        classes = move(classes, xp, array_device(codes))
    return xp.take(classes, codes, axis=0)


def check_sample_weight(
    sample_weight, n_samples, *, xp, dtype, device=None, name="sample_weight"
):
    """Return per-sample weights as a 1-D float array of length ``n_samples``.

    None gives ones; a number gives that constant. Weights must be finite,
    non-negative and not all zero.
    """
    if sample_weight is None:
        return xp.ones((n_samples,), dtype=dtype, device=device)
    if isinstance(sample_weight, numbers.Number):
        return xp.full((n_samples,), float(sample_weight), dtype=dtype, device=device)
    if len(getattr(sample_weight, "shape", (0,))) != 1:
        raise ValueError(
            f"Sample weights must be 1D array or scalar: {name} has shape "
            f"{tuple(np.shape(sample_weight))}; pass one weight per sample"
        )
    w = check_array(
        sample_weight, xp=xp, name=name, ndim=1, dtype="float", min_samples=0
    )
    if w.dtype != dtype:
        w = xp.astype(w, dtype)
    if int(w.shape[0]) != n_samples:
        raise ValueError(
            f"{name}.shape == ({int(w.shape[0])},), expected ({n_samples},): {name} needs one "
            f"weight per sample"
        )
    if bool(xp.any(w < 0)):
        raise ValueError(
            f"Negative values in data passed to {name}; weights must be >= 0"
        )
    if n_samples and not bool(xp.any(w > 0)):
        raise ValueError(
            f"{name} is all zeros; at least one sample needs a positive weight"
        )
    return w


def check_random_state(seed):
    """Return a :class:`numpy.random.Generator` from None, an int or a Generator.

    xpml draws random numbers on the host with NumPy and moves them to the
    backend, so a seed gives the same model on every backend.
    """
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(seed.randint(0, 2**31 - 1))
    if isinstance(seed, numbers.Integral) and not isinstance(seed, bool):
        return np.random.default_rng(int(seed))
    raise ValueError(
        f"random_state must be None, an int or a numpy.random.Generator; got {seed!r}"
    )


def check_is_fitted(estimator, attributes=None):
    """Raise :class:`NotFittedError` unless ``estimator`` has been fitted."""
    if attributes is None:
        fitted = any(
            k.endswith("_") and not k.startswith("__") for k in vars(estimator)
        )
    else:
        attributes = [attributes] if isinstance(attributes, str) else attributes
        fitted = all(hasattr(estimator, a) for a in attributes)
    if not fitted:
        raise not_fitted_error(
            f"This {type(estimator).__name__} instance is not fitted yet. Call 'fit' with "
            f"appropriate arguments before using this estimator."
        )
