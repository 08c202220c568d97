"""The estimator contract shared by every xpml model.

``__init__`` stores its keyword arguments unchanged; ``fit`` validates its
parameters against the class's ``_parameter_constraints``, validates the data,
learns, sets attributes ending in ``_`` and returns ``self``. Parameters are
read back from the ``__init__`` signature, so scikit-learn's ``clone``,
``Pipeline``, ``GridSearchCV`` and ``cross_val_score`` work on xpml estimators.

A typical ``fit`` and ``predict``::

    def fit(self, X, y, sample_weight=None):
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="classes")
        xp = ctx.xp
        ...                                   # learn with xp only
        self.coef_ = coef
        return self._fitted(ctx)              # attributes go to the caller's library

    def predict(self, X):
        ctx, X = self._validate_predict_data(X)
        coef = ctx.take(self.coef_)           # stored arrays come to the backend
        return decode_labels(self.classes_, codes, ctx)
"""

from __future__ import annotations

import copy
import inspect

import array_api_compat

from xpml._backend import enter, move
from xpml._dask import route as _route_dask
from xpml._typing import Array, ArrayLike
from xpml.utils._array_api import preload_namespace
from xpml.utils._param_validation import validate_params
from xpml.utils._tree import tree_update
from xpml.utils.validation import (
    check_array,
    check_consistent_length,
    check_feature_names,
    check_is_fitted,
    check_n_features,
    check_sample_weight,
    check_squares_finite,
    check_targets,
    encode_label_columns,
    encode_labels,
    set_feature_names,
)

# every estimator module imports this one: NumPy's array-API namespace is built
# here, with the imports, and not by an estimator's first call (issue 16; see
# preload_namespace)
preload_namespace("numpy")

__all__ = [
    "BaseEstimator",
    "ClassifierMixin",
    "RegressorMixin",
    "TransformerMixin",
    "ClusterMixin",
    "Persistable",
    "registered_classes",
    "clone",
]

_REGISTRY: dict[str, type] = {}


def registered_classes():
    """Every public xpml class that can be saved and loaded, by name."""
    return dict(_REGISTRY)


class Persistable:
    """Parameters read from the ``__init__`` signature, and safe save/load.

    Subclasses defined inside the ``xpml`` package are registered by name, so
    :func:`xpml.load` can rebuild them without importing or running anything
    named in a file.
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("xpml.") and not cls.__name__.startswith("_"):
            _REGISTRY[cls.__name__] = cls

    @classmethod
    def _get_param_names(cls):
        init = cls.__init__
        if init is object.__init__:
            return []
        sig = inspect.signature(init)
        names = []
        for p in sig.parameters.values():
            if p.name == "self":
                continue
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise RuntimeError(
                    f"{cls.__name__}.__init__ must list its parameters explicitly "
                    f"(no *args/**kwargs)"
                )
            names.append(p.name)
        return sorted(names)

    def get_params(self, deep=True):
        """Parameters of this object, as passed to ``__init__``."""
        out = {}
        for name in self._get_param_names():
            value = getattr(self, name)
            if deep and hasattr(value, "get_params") and not isinstance(value, type):
                for k, v in value.get_params().items():
                    out[f"{name}__{k}"] = v
            out[name] = value
        return out

    def set_params(self, **params):
        """Set parameters (``nested__param`` reaches into sub-estimators)."""
        valid = self.get_params(deep=True)
        nested = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in valid:
                raise ValueError(
                    f"Invalid parameter {name!r} for estimator {type(self).__name__}. "
                    f"Valid parameters are: {sorted(self._get_param_names())!r}."
                )
            if sub:
                nested.setdefault(name, {})[sub] = value
            else:
                setattr(self, name, value)
        for name, sub_params in nested.items():
            getattr(self, name).set_params(**sub_params)
        return self

    def save(self, path):
        """Save to ``path`` in xpml's non-executable format (JSON + ``.npy``).

        See :func:`xpml.load`.
        """
        from xpml._io import save

        save(self, path)

    @classmethod
    def load(cls, path, *, backend=None, device=None, max_bytes=None) -> Persistable:
        """Load a file saved from this class (or a subclass of it).

        Like :func:`xpml.load`, and a file holding any other class raises
        ``ValueError`` (an SVC file does not load as ``KMeans``).
        """
        from xpml._io import load

        return load(
            path,
            backend=backend,
            device=device,
            max_bytes=max_bytes,
            expected_class=cls,
        )

    def __repr__(self):
        defaults = {
            p.name: p.default
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.default is not p.empty
        }
        shown = []
        for k in self._get_param_names():
            v = getattr(self, k, None)
            d = defaults.get(k, inspect.Parameter.empty)
            try:
                same = v is d or (type(v) is type(d) and bool(v == d))
            except Exception:
                same = False
            if not same:
                shown.append(f"{k}={v!r}")
        return f"{type(self).__name__}({', '.join(shown)})"


class BaseEstimator(Persistable):
    """Base class of every xpml estimator (see the module docstring)."""

    _parameter_constraints: dict = {}
    _xpml_tags: dict = {}
    _distance_based = False  # True: refuse data whose squared distances overflow

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        _route_dask(cls)  # a dask array argument goes to xpml._dask's block engine
        _sparse_twin_xfail(cls)

    # ------------------------------------------------------------- contract
    def _validate_params(self):
        validate_params(
            type(self).__name__,
            self.get_params(deep=False),
            self._parameter_constraints,
        )

    def _validate_fit_data(
        self,
        X,
        y=None,
        sample_weight=None,
        *,
        target="none",
        min_samples=1,
        ensure_finite=True,
        x_dtype="float",
        x_ndim=2,
    ):
        """Validate parameters and data at the start of ``fit``.

        Parameters
        ----------
        target : {"none", "classes", "multi_classes", "continuous", "multi"}
            What ``y`` is: absent/ignored, class labels (encoded to integer
            codes; ``classes_`` is set), a 2-D array of class labels, one
            column per output (codes (n, n_outputs); ``classes_`` is a list,
            one array per output), one real target, or one or more.

        Returns
        -------
        ctx, X, y, sample_weight
            ``y`` is the integer class codes for ``target="classes"``;
            ``sample_weight`` is a float array (ones when not given) or None
            when ``target="none"`` and no weights were passed.
        """
        self._validate_params()
        if y is None and target != "none":
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        if target == "classes":
            classes, y = encode_labels(y, name="y")
            self.classes_ = classes
        elif target == "multi_classes":  # one column of codes per output
            classes, y = encode_label_columns(y, name="y")
            self.classes_ = classes
        check_consistent_length(X, y, sample_weight, names=("X", "y", "sample_weight"))
        set_feature_names(self, X)
        ctx, (X, y, sample_weight) = enter(
            X, y, sample_weight, names=("X", "y", "sample_weight")
        )
        xp = ctx.xp
        X = check_array(
            X,
            xp=xp,
            name="X",
            ndim=x_ndim,
            requested=ctx.dtype,
            dtype=x_dtype,
            min_samples=min_samples,
            ensure_finite=ensure_finite,
        )
        n = int(X.shape[0])
        if x_ndim == 2 or (isinstance(x_ndim, tuple) and len(X.shape) == 2):
            self.n_features_in_ = int(X.shape[1])
        if self._distance_based:  # squared distances must not overflow
            check_squares_finite(X, xp=xp, owner=type(self).__name__)
        if target in ("continuous", "multi"):
            y = _real_targets(y, X, ctx, multi_output=target == "multi")
        fdtype = X.dtype if xp.isdtype(X.dtype, "real floating") else None
        if sample_weight is not None or target != "none":
            if fdtype is None:
                from xpml._backend import float_dtype

                fdtype = float_dtype(xp, ctx.device, ctx.dtype)
            sample_weight = check_sample_weight(
                sample_weight, n, xp=xp, dtype=fdtype, device=ctx.device
            )
        return ctx, X, y, sample_weight

    def _validate_predict_data(
        self, X, *, name="X", ensure_finite=True, x_dtype="float", x_ndim=2
    ):
        """Check the estimator is fitted and validate ``X`` for predict/transform."""
        check_is_fitted(self)
        check_feature_names(self, X)
        ctx, (X,) = enter(X, names=(name,))
        X = check_array(
            X,
            xp=ctx.xp,
            name=name,
            ndim=x_ndim,
            requested=ctx.dtype,
            dtype=x_dtype,
            ensure_finite=ensure_finite,
        )
        if len(X.shape) == 2:
            check_n_features(self, X, name=name)
        if self._distance_based:
            check_squares_finite(X, xp=ctx.xp, name=name, owner=type(self).__name__)
        return ctx, X

    def _fitted(self, ctx):
        """Move fitted array attributes to the caller's library; return self."""
        if ctx.on_backend:
            _move_fitted(self, ctx)
        return self

    # ------------------------------------------------------- scikit-learn glue
    def __sklearn_tags__(self):
        from sklearn.utils import (
            ClassifierTags,
            InputTags,
            RegressorTags,
            Tags,
            TargetTags,
            TransformerTags,
        )

        t = self._xpml_tags
        kind = getattr(self, "_estimator_type", None)
        tags = Tags(
            estimator_type=kind
            if kind in ("classifier", "regressor", "clusterer")
            else None,
            target_tags=TargetTags(
                required=kind in ("classifier", "regressor"),
                one_d_labels=False,
                two_d_labels=False,
                positive_only=t.get("positive_target", False),
                multi_output=t.get("multi_output", False),
                single_output=True,
            ),
            transformer_tags=TransformerTags()
            if isinstance(self, TransformerMixin)
            else None,
            classifier_tags=ClassifierTags(
                poor_score=t.get("poor_score", False),
                multi_class=t.get("multi_class", True),
                multi_label=False,
            )
            if kind == "classifier"
            else None,
            regressor_tags=RegressorTags(poor_score=t.get("poor_score", False))
            if kind == "regressor"
            else None,
            input_tags=InputTags(
                pairwise=bool(t.get("pairwise", False)),
                positive_only=t.get("positive_only", False),
                allow_nan=bool(t.get("allow_nan", False)),
                sparse=bool(getattr(self, "_accepts_sparse", True)),
            ),
            non_deterministic=t.get("non_deterministic", False),
            requires_fit=True,
        )
        return tags

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_cache")}

    def __setstate__(self, state):
        self.__dict__.update(state)


_WEIGHT_CHECK = "check_sample_weight_equivalence_on_{}_data"


def _sparse_twin_xfail(cls):
    """Sparse X is densified (xpml.utils.validation), so scikit-learn's sparse
    twin of an expected-to-fail dense sample-weight check fails the same way:
    declare it with the dense check's reason."""
    tags = cls.__dict__.get("_xpml_tags") or {}
    xfail = tags.get("sklearn_xfail", {})
    dense, sparse = _WEIGHT_CHECK.format("dense"), _WEIGHT_CHECK.format("sparse")
    if dense in xfail and sparse not in xfail:
        reason = f"as on dense data (sparse X is densified): {xfail[dense]}"
        cls._xpml_tags = {**tags, "sklearn_xfail": {**xfail, sparse: reason}}


def _real_targets(y, X, ctx, *, multi_output):
    """Checked real targets, in ``X``'s float dtype."""
    xp = ctx.xp
    y = check_targets(
        y,
        xp=xp,
        name="y",
        n_samples=int(X.shape[0]),
        multi_output=multi_output,
        requested=ctx.dtype,
    )
    if y.dtype != X.dtype and xp.isdtype(X.dtype, "real floating"):
        y = xp.astype(y, X.dtype)
    return y


def _move_fitted(obj, ctx):
    """Move every array of the compute library in ``obj``'s state to the
    caller's library, in place (:func:`xpml.utils._tree.tree_update`)."""

    def out(a):
        return move(a, ctx.out_xp, ctx.out_device) if _in(a, ctx.xp) else a

    tree_update(obj, out)


def _in(a, xp):
    try:
        return array_api_compat.array_namespace(a) is xp
    except TypeError:
        return False


class ClassifierMixin:
    """Classifier: ``score`` is the mean accuracy."""

    _estimator_type = "classifier"

    def score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> float:
        from xpml.metrics import accuracy_score

        return accuracy_score(y, self.predict(X), sample_weight=sample_weight)


class RegressorMixin:
    """Regressor: ``score`` is the coefficient of determination R²."""

    _estimator_type = "regressor"

    def score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> float:
        from xpml.metrics import r2_score

        return r2_score(y, self.predict(X), sample_weight=sample_weight)


class TransformerMixin:
    """Transformer: ``fit_transform`` is ``fit`` then ``transform``."""

    _estimator_type = "transformer"

    def fit_transform(
        self, X: ArrayLike, y: ArrayLike | None = None, **fit_params
    ) -> Array:
        return self.fit(X, y, **fit_params).transform(X)


class ClusterMixin:
    """Clusterer: ``fit_predict`` returns ``labels_``."""

    _estimator_type = "clusterer"

    def fit_predict(
        self, X: ArrayLike, y: ArrayLike | None = None, **fit_params
    ) -> Array:
        return self.fit(X, y, **fit_params).labels_


def clone(estimator):
    """An unfitted copy with the same parameters (like ``sklearn.base.clone``)."""
    if isinstance(estimator, (list, tuple)):
        return type(estimator)(clone(e) for e in estimator)
    params = estimator.get_params(deep=False)
    new = {
        k: clone(v) if isinstance(v, Persistable) else copy.deepcopy(v)
        for k, v in params.items()
    }
    return type(estimator)(**new)
