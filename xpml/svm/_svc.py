"""C-support vector classification on the vectorized SMO solver."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
from numbers import Integral, Real

import array_api_compat
import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.exceptions import ConvergenceWarning, not_fitted_error, warn
from xpml.kernels import kernel_dot, kernel_matrix, resolve_kernel_params
from xpml.linalg import _single_threaded_blas
from xpml.svm._platt import pairwise_coupling, sigmoid_fit, sigmoid_predict
from xpml.svm._smo import KernelRows, PrecomputedRows, SMOOptions, smo_solve
from xpml.utils._array_api import device, memory_budget
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state, decode_labels, is_sparse

__all__ = ["SVC"]

_KERNELS = ("linear", "poly", "rbf", "sigmoid", "precomputed")
_DEFAULT_Q = 1024  # working-set size when not given
_N_FOLDS = 5  # Platt scaling's internal cross-validation
_PREDICT_BLOCK_BYTES = 16 * 2**20  # kernel rows per prediction block (speed)


class _available_if:
    """A method that exists only when ``check(self)`` is true (``hasattr`` is
    False otherwise), like scikit-learn's ``available_if``."""

    # already final: the dask router (xpml._dask.route) must not replace the
    # descriptor with a plain method, or ``hasattr`` would always be True
    _xpml_dask = True

    def __init__(self, check):
        self.check = check

    def __call__(self, fn):
        self.fn = fn
        self.__doc__ = fn.__doc__
        return self

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        if not self.check(obj):
            raise AttributeError(
                f"{self.fn.__name__} is not available when probability=False; "
                f"fit with probability=True to use it"
            )
        return self.fn.__get__(obj, owner)


_ALL_NONPOSITIVE = "Invalid input - all samples have zero or negative weights."
_ONE_CLASS_LEFT = (
    "Invalid input - all samples with positive weights belong to the same class"
)


def _clip_negative_weights(sample_weight):
    """LIBSVM's reading of ``sample_weight`` (scikit-learn's): a sample of
    weight ≤ 0 is left out, so a negative weight counts as 0. Returns the
    weights with negatives set to 0, in the caller's library; anything that is
    not a 1-D real array is returned unchanged for the common validation."""
    if sample_weight is None or is_sparse(sample_weight):
        return sample_weight
    if isinstance(sample_weight, Real):
        if sample_weight <= 0:
            raise ValueError(
                f"{_ALL_NONPOSITIVE} sample_weight={sample_weight} leaves no sample "
                f"to fit; at least one weight must be > 0"
            )
        return sample_weight
    try:
        xp = array_api_compat.array_namespace(sample_weight)
        w = sample_weight
    except TypeError:  # a list or another sequence
        try:
            w = np.asarray(sample_weight)
        except (TypeError, ValueError):
            return sample_weight
        xp = array_api_compat.array_namespace(w)
    real = ("real floating", "signed integer", "unsigned integer")
    if len(w.shape) != 1 or not xp.isdtype(w.dtype, real):
        return sample_weight
    if int(w.shape[0]) and not bool(xp.any((w > 0) | (w != w))):  # NaN: validation
        raise ValueError(
            f"{_ALL_NONPOSITIVE} Every entry of sample_weight is <= 0; samples of "
            f"weight <= 0 are left out, so at least one weight must be > 0"
        )
    return xp.where(w < 0, xp.zeros_like(w), w)


def _callable_kernel(f):
    """Adapt a user kernel to the Gram engine's ``f(A, B, xp=xp)`` convention;
    scikit-learn style ``f(A, B)`` callables are accepted too."""
    try:
        params = inspect.signature(f).parameters
        takes_xp = "xp" in params or any(
            p.kind == p.VAR_KEYWORD for p in params.values()
        )
    except (TypeError, ValueError):
        takes_xp = False

    def kernel(A, B, xp):
        K = f(A, B, xp=xp) if takes_xp else f(A, B)
        return xp.asarray(K, device=device(A))

    return kernel


@dataclasses.dataclass
class _FitData:
    """The training inputs of every binary problem: ``X``, the Gram matrix
    ``K`` (precomputed kernel, else None) and the resolved kernel spec."""

    X: object
    K: object
    kspec: tuple


def _pairs(k):
    return [(i, j) for i in range(k) for j in range(i + 1, k)]


class SVC(ClassifierMixin, BaseEstimator):
    """C-support vector classifier (LIBSVM's C-SVC) on a vectorized SMO.

    Solves ``min ½‖w‖² + Σ Cᵢ ξᵢ`` through its dual with the batched
    working-set SMO of :mod:`xpml.svm._smo`: kernel rows come as Gram blocks
    from :mod:`xpml.kernels`, an LRU row cache stays within ``cache_size``,
    and the gradient is updated with one matrix–vector product per working
    set. Several classes: one-vs-one, as LIBSVM.

    Parameters
    ----------
    C : float, default=1.0
        Penalty on margin violations (> 0; ``inf`` is a hard margin, and then
        ``primal_objective_`` is inf when any ξᵢ > 0 is left within ``tol``);
        per sample it is ``C · class_weight[y_i] · sample_weight_i``.
    kernel : {"linear", "poly", "rbf", "sigmoid", "precomputed"} or callable, default="rbf"
        A callable is called as ``kernel(A, B, xp=xp)`` (or ``kernel(A, B)``)
        and returns the ``(len(A), len(B))`` kernel block. With
        ``"precomputed"``, ``X`` is the training Gram matrix in ``fit`` and
        ``K(X_test, X_train)`` afterwards.
    degree : int, default=3
        Degree of the polynomial kernel.
    gamma : {"scale", "auto"} or float, default="scale"
        ``"scale"``: ``1 / (n_features · X.var())``; ``"auto"``: ``1 / n_features``.
    coef0 : float, default=0.0
        Independent term of the poly and sigmoid kernels.
    shrinking : bool, default=True
        LIBSVM's shrinking heuristic: bounded variables that cannot join a
        violating pair leave the active set (fewer kernel values computed);
        their gradient is reconstructed and optimality re-checked on the whole
        set before the solver stops, so the solution does not depend on it.
        With a computed kernel it starts once the row cache has had to evict
        a row: while every row computed stays cached, reconstructing the
        gradient costs more than shrinking saves.
    probability : bool, default=False
        Fit Platt scaling on 5-fold internal cross-validation, enabling
        ``predict_proba``.
    tol : float, default=1e-3
        Stop when the maximal KKT violation ``max_{I_up} −y∇f − min_{I_low} −y∇f``
        is below ``tol`` (LIBSVM's criterion).
    cache_size : float, default=200
        Kernel cache in MB, as scikit-learn's: the most memory for kernel rows
        (cache plus working blocks). The cache grows as rows are requested
        (doubling) up to this cap, so a small problem allocates little; the
        full ``n × n`` matrix is held only when it fits. Outside this budget,
        as LIBSVM's own copy of ``X`` is: with the RBF kernel on NumPy, two
        ``(n, d + 2)`` factors of ``X`` (the inputs of every kernel-row
        product, made once per fit) and one ``q × q`` working-set block.
    class_weight : dict, "balanced" or None, default=None
        Per-class multipliers of ``C``; "balanced" is ``n / (k · count)``.
    verbose : bool or int, default=False
        Print solver progress (an int: every that many working sets).
    max_iter : int, default=-1
        Most SMO steps per binary problem; -1 for no limit.
    decision_function_shape : {"ovr", "ovo"}, default="ovr"
        Shape of ``decision_function`` with more than two classes.
    break_ties : bool, default=False
        With "ovr" and more than two classes, predict the arg-max of
        ``decision_function`` instead of the one-vs-one vote.
    random_state : int, Generator or None, default=None
        Seeds the folds of Platt scaling's cross-validation.
    working_set_size : int or None, default=None
        Variables per working set ``q``. Default: start at ``n/20`` within [64, 256] and double
        while the subproblems are busy, up to ``n/4`` clipped to [256, 1024]
        (fewer under a small budget). Each working set is one step of the
        outer loop (tens of microseconds of Python and array calls), so ``2``
        -- LIBSVM's pairwise SMO -- takes as many steps as LIBSVM's compiled
        loop and is far slower on a badly scaled problem: on 800 samples of
        features scaled by 10 it took 2.1 million steps and about three
        minutes, where the default took 7.8 s and scikit-learn 0.65 s for a
        million steps. Keep it for study, not speed.
    cache_dtype : {"float64", "float32"}, default="float64"
        Storage of cached kernel rows. "float32" (as LIBSVM's Qfloat) halves
        the cache's memory, so twice the rows fit; the rows' values carry
        about 1e-7 relative error into the gradient, which perturbs the
        solution at that level (well below the default ``tol``). "float64"
        keeps the solution exactly as without a cache.

    Attributes
    ----------
    classes_ : array (n_classes,)
    support_ : int array (n_SV,)
        Indices of the support vectors, grouped by class.
    support_vectors_ : array (n_SV, n_features)
        Empty ``(0, n_features)`` for a precomputed kernel.
    n_support_ : int32 array (n_classes,)
    dual_coef_ : array (n_classes − 1, n_SV)
        ``αᵢ yᵢ`` of each support vector in each one-vs-one problem (LIBSVM's
        layout); binary: ``yᵢ = +1`` for ``classes_[1]``.
    intercept_ : array (n_classes·(n_classes−1)/2,)
    coef_ : array (n_classes·(n_classes−1)/2, n_features)
        Weights ``w`` of each one-vs-one problem; only with ``kernel="linear"``.
        Read-only (a property, as scikit-learn's): predictions use
        ``dual_coef_``, so an edit here would be silently ignored; a NumPy
        ``coef_`` is a read-only view.
    n_iter_ : int32 array (n_classes·(n_classes−1)/2,)
        SMO steps per binary problem.
    n_working_sets_ : int32 array (n_classes·(n_classes−1)/2,)
        Working sets (outer steps) per binary problem; the host syncs of a
        fit grow with their number (about two per working set under torch,
        and one upload).
    dual_objective_, primal_objective_, duality_gap_ : float arrays (n_pairs,)
        ``D(α) = Σα − ½αᵀQα``, ``P(w,b) = ½‖w‖² + Σ Cᵢξᵢ`` and ``P − D ≥ 0``,
        a certificate of convergence.
    violation_ : float array (n_pairs,)
        Final maximal KKT violation of each problem (< tol when converged).
    fit_status_ : int
        0 when every problem converged, 1 otherwise.
    cache_peak_bytes_ : int
        Most bytes of kernel rows held at once (buffer + transient blocks);
        at most ``cache_size`` MB unless that holds fewer than ten kernel rows
        (the solver needs a working set of two rows and its transients);
        the factors of ``X`` named under ``cache_size`` are not counted.
    class_weight_ : float array (n_classes,)
    probA_, probB_ : float arrays (n_pairs,)
        Platt parameters (probability=True), for LIBSVM's decision values.
    shape_fit_ : tuple
    n_features_in_ : int

    Notes
    -----
    Dual: ``max Σα − ½ ΣΣ αᵢαⱼyᵢyⱼK(xᵢ,xⱼ)`` s.t. ``0 ≤ αᵢ ≤ Cᵢ``, ``Σαᵢyᵢ = 0``;
    decision ``f(x) = Σ αᵢyᵢ K(xᵢ, x) + b``. ``b`` is LIBSVM's: minus the mean
    of ``yᵢ∇ᵢf`` over the free vectors.

    References
    ----------
    Chang & Lin (2011), LIBSVM. Fan, Chen & Lin (2005), JMLR 6. Platt (2000),
    Probabilistic outputs for SVMs. Wu, Lin & Weng (2004), JMLR 5.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.svm import SVC
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(-2, 1, (20, 2)), rng.normal(2, 1, (20, 2))]
    >>> y = np.r_[np.zeros(20), np.ones(20)]
    >>> clf = SVC(kernel="linear").fit(X, y)
    >>> clf.score(X, y)
    1.0
    >>> clf.dual_coef_.shape[0], int(clf.n_support_.sum()) == len(clf.support_)
    (1, True)
    >>> abs(float(clf.duality_gap_[0])) < 1e-2
    True
    """

    # the fitted weights live in ``_coef`` (``coef_`` is a read-only property)
    _xpml_state_shapes = ("support_vectors_", "_coef")
    _parameter_constraints = {
        "C": [Interval(Real, 0, None, closed="neither", allow_inf=True)],
        "kernel": [Options(*_KERNELS), callable],
        "degree": [Interval(Integral, 0, None, closed="left")],
        "gamma": [Options("scale", "auto"), Interval(Real, 0, None, closed="left")],
        "coef0": [Interval(Real, None, None)],
        "shrinking": ["boolean"],
        "probability": ["boolean"],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "cache_size": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [dict, Options("balanced"), None],
        "verbose": ["boolean", Interval(Integral, 0, None, closed="left")],
        "max_iter": [Interval(Integral, -1, None, closed="left")],
        "decision_function_shape": [Options("ovo", "ovr")],
        "break_ties": ["boolean"],
        "random_state": ["random_state"],
        "working_set_size": [None, Interval(Integral, 2, None, closed="left")],
        "cache_dtype": [Options("float64", "float32")],
    }
    _xpml_tags = {
        "test_params": {"tol": 1e-8},
        "parity_rtol": 1e-6,
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": (
                "gamma='scale' reads X.var(), which repeating rows changes; scikit-learn "
                "marks this check as an expected failure for its SVC too"
            ),
        },
    }

    def __init__(
        self,
        *,
        C=1.0,
        kernel="rbf",
        degree=3,
        gamma="scale",
        coef0=0.0,
        shrinking=True,
        probability=False,
        tol=1e-3,
        cache_size=200,
        class_weight=None,
        verbose=False,
        max_iter=-1,
        decision_function_shape="ovr",
        break_ties=False,
        random_state=None,
        working_set_size=None,
        cache_dtype="float64",
    ):
        self.C = C
        self.kernel = kernel
        self.degree = degree
        self.gamma = gamma
        self.coef0 = coef0
        self.shrinking = shrinking
        self.probability = probability
        self.tol = tol
        self.cache_size = cache_size
        self.class_weight = class_weight
        self.verbose = verbose
        self.max_iter = max_iter
        self.decision_function_shape = decision_function_shape
        self.break_ties = break_ties
        self.random_state = random_state
        self.working_set_size = working_set_size
        self.cache_dtype = cache_dtype

    # ------------------------------------------------------------- helpers
    def _kernel_spec(self, X, xp):
        """(kernel for the Gram engine, its params) after resolving gamma."""
        if self.kernel == "precomputed":
            return "precomputed", {}
        d = int(X.shape[1])
        if self.gamma == "scale":
            var = float(xp.mean((X - xp.mean(X)) ** 2))
            gamma = 1.0 / (d * var) if var != 0 else 1.0
        elif self.gamma == "auto":
            gamma = 1.0 / d
        else:
            gamma = float(self.gamma)
        if callable(self.kernel):
            return _callable_kernel(self.kernel), {
                "gamma": gamma,
                "degree": self.degree,
                "coef0": float(self.coef0),
            }
        kernel, params = resolve_kernel_params(
            self.kernel, d, gamma, self.degree, float(self.coef0)
        )
        return kernel, params

    def _budget(self):
        return max(1, int(self.cache_size * 2**20))

    def _class_weights(self, codes, k):
        counts = np.bincount(codes, minlength=k).astype(np.float64)
        cw = self.class_weight
        if cw is None:
            return np.ones(k)
        if cw == "balanced":
            return codes.shape[0] / (k * np.maximum(counts, 1.0))
        out = np.ones(k)
        labels = to_numpy(self.classes_).tolist()
        for key, w in cw.items():
            if key not in labels:
                raise ValueError(
                    f"class_weight has the label {key!r}, which is not a class of y; "
                    f"classes are {labels!r}"
                )
            out[labels.index(key)] = float(w)
        bad = np.flatnonzero(~(out > 0) | ~np.isfinite(out))
        if bad.size:
            raise ValueError(
                f"class_weight gives class {labels[bad[0]]!r} the weight "
                f"{float(out[bad[0]])}; every class weight must be a finite number > 0 "
                f"(a class with weight 0 has no samples left to fit)"
            )
        return out

    def _per_sample_C(self, codes, w, cw):
        """``C · class_weight[yᵢ] · wᵢ`` on the host; 0 (sample left out) where
        ``wᵢ`` is 0, also with ``C = inf``."""
        w = np.asarray(w, dtype=np.float64)
        Cs = np.zeros(w.shape[0])
        Cs[w > 0] = float(self.C) * cw[codes[w > 0]] * w[w > 0]
        if np.unique(codes[Cs > 0]).shape[0] < 2:
            raise ValueError(
                f"{_ONE_CLASS_LEFT}: samples of weight <= 0 are left out, and those "
                f"left are all of one class; sample_weight must leave two classes"
            )
        return Cs

    def _solve_pair(self, data, idx, ypm, Cvec, *, xp, label):
        """One binary dual on the samples ``idx`` (host ints) of ``data``
        (a :class:`_FitData`); returns the result."""
        X, K, kspec = data.X, data.K, data.kspec
        dev = device(X)
        idx_d = xp.asarray(idx, device=dev)
        # largest working set: a quarter of the problem, between 256 and 1024
        q = self.working_set_size or min(_DEFAULT_Q, max(256, len(idx) // 4))
        if K is not None:  # precomputed
            Ksub = xp.take(xp.take(K, idx_d, axis=0), idx_d, axis=1)
            rows = PrecomputedRows(Ksub, xp=xp, q=q)
        else:
            Xs = xp.take(X, idx_d, axis=0)
            cache_dtype = xp.float32 if self.cache_dtype == "float32" else None
            rows = KernelRows(
                Xs,
                *kspec,
                xp=xp,
                memory_budget=self._budget(),
                q=q,
                cache_dtype=cache_dtype,
            )
        yC = xp.asarray(np.stack([ypm, Cvec]), dtype=X.dtype, device=dev)
        # computed rows: shrink once the cache evicts (before, it costs more
        # than it saves); a precomputed matrix: as LIBSVM
        shrink = bool(self.shrinking) and ("evicting" if K is None else True)
        options = SMOOptions(
            tol=float(self.tol),
            max_iter=self.max_iter,
            shrinking=shrink,
            adaptive_q=self.working_set_size is None,
            verbose=self.verbose,
            label=label,
        )
        # one BLAS thread on NumPy, as LIBSVM: the solver's products are small
        # (q × d blocks, row products), where two threads mostly wait for each
        # other (n=2000 on the loaded 2-core machine: 3.6x scikit-learn, 1.2-1.3x
        # with one)
        with _single_threaded_blas(xp) or contextlib.nullcontext():
            res = smo_solve(rows, yC[0, :], yC[1, :], xp=xp, options=options)
        if not (math.isfinite(res.rho) and math.isfinite(res.dual)):
            raise ValueError(
                "The dual coefficients or intercepts are not finite: the kernel "
                "values overflow, so SVC cannot be fitted. Scale X (e.g. with StandardScaler) or lower gamma / degree / "
                "coef0."
            )
        return res

    # ------------------------------------------------------------------ fit
    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit the one-vs-one SVMs; returns self.

        Parameters
        ----------
        X : array (n, d), or (n, n) Gram matrix for ``kernel="precomputed"``
        y : array (n,) of class labels
        sample_weight : array (n,), optional
            Multiplies ``C`` per sample; samples of weight ≤ 0 are left out
            (LIBSVM's and scikit-learn's reading of a negative weight).
        """
        if self.kernel == "precomputed" and is_sparse(X):
            raise TypeError(
                "Sparse precomputed kernels are not supported: X is a SciPy sparse "
                f"{type(X).__name__}; pass the Gram matrix as a dense array"
            )
        fit_sparse = is_sparse(X)
        sample_weight = _clip_negative_weights(sample_weight)
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="classes")
        self._fit_sparse = fit_sparse
        xp = ctx.xp
        n = int(X.shape[0])
        if self.kernel == "precomputed" and int(X.shape[1]) != n:
            raise ValueError(
                f"X should be a square kernel matrix when kernel='precomputed'; got shape "
                f"{tuple(X.shape)}"
            )
        kspec = self._kernel_spec(X, xp)
        self._gamma = kspec[1].get("gamma", 0.0)
        codes = to_numpy(y).astype(np.int64)
        k = int(self.classes_.shape[0])
        cw = self._class_weights(codes, k)
        Cs = self._per_sample_C(codes, to_numpy(sw), cw)
        K = X if self.kernel == "precomputed" else None
        data = _FitData(X, K, kspec)
        pairs = _pairs(k)
        results, subsets = [], []
        for p, (a, b) in enumerate(pairs):
            idx = np.flatnonzero(((codes == a) | (codes == b)) & (Cs > 0))
            ypm = np.where(codes[idx] == a, 1.0, -1.0)
            if np.all(ypm > 0) or np.all(ypm < 0):
                raise ValueError(
                    f"after removing samples with zero sample_weight, class "
                    f"{to_numpy(self.classes_)[a if np.all(ypm < 0) else b]!r} has no samples "
                    f"left; every class needs a positive weight"
                )
            res = self._solve_pair(
                data, idx, ypm, Cs[idx], xp=xp, label=f" {a}v{b}" if k > 2 else ""
            )
            results.append(res)
            subsets.append((idx, ypm))
        self._assemble(results, subsets, codes, X, pairs=pairs, cw=cw, xp=xp)
        self.shape_fit_ = tuple(int(s) for s in X.shape)
        if self.probability:
            self._fit_platt(data, codes, Cs, pairs=pairs, xp=xp)
        if not all(r.converged for r in results):
            warn(
                ConvergenceWarning,
                f"Solver terminated early (max_iter={self.max_iter}).  Consider "
                f"pre-processing your data with StandardScaler or MinMaxScaler. "
                f"(The KKT violation is {max(r.gap for r in results):.3g} > "
                f"tol={self.tol}: max_iter was reached, or the solver made no "
                f"progress at the floating-point floor; raise max_iter.)",
            )
        return self._fitted(ctx)

    def _assemble(self, results, subsets, codes, X, *, pairs, cw, xp):
        """LIBSVM's layout: support vectors grouped by class; ``dual_coef_[j−1]``
        holds class-i vectors' coefficients in problem (i, j), ``dual_coef_[i]``
        class-j vectors'."""
        n = codes.shape[0]
        k = int(self.classes_.shape[0])
        coef_full = []  # per pair: dense (n,) of α y on the host
        is_sv = np.zeros(n, dtype=bool)
        for res, (idx, ypm) in zip(results, subsets):
            alpha = to_numpy(res.alpha).astype(np.float64)
            c = np.zeros(n)
            c[idx] = alpha * ypm
            is_sv[idx[alpha > 0]] = True
            coef_full.append(c)
        support = np.concatenate(
            [np.flatnonzero(is_sv & (codes == c)) for c in range(k)]
        )
        n_support = np.array(
            [int(np.sum(is_sv & (codes == c))) for c in range(k)], np.int32
        )
        dual = np.zeros((k - 1, support.shape[0]))
        sv_class = codes[support]
        for p, (a, b) in enumerate(pairs):
            cp = coef_full[p][support]
            dual[b - 1, sv_class == a] = cp[sv_class == a]
            dual[a, sv_class == b] = cp[sv_class == b]
        intercept = np.array([-r.rho for r in results])
        if k == 2:  # scikit-learn's binary convention: positive means classes_[1]
            dual, intercept = -dual, -intercept
        dev = device(X)
        self.support_ = xp.asarray(support.astype(np.int64), device=dev)
        if self.kernel == "precomputed":
            self.support_vectors_ = xp.zeros(
                (0, int(X.shape[1])), dtype=X.dtype, device=dev
            )
        else:
            self.support_vectors_ = xp.take(X, self.support_, axis=0)
        self._cache_sv_start = np.concatenate([[0], np.cumsum(n_support)]).astype(int)
        self.dual_coef_ = xp.asarray(dual, dtype=X.dtype, device=dev)
        self.intercept_ = xp.asarray(intercept, dtype=X.dtype, device=dev)
        self.__dict__.pop("_coef", None)  # from an earlier fit
        if self.kernel == "linear":
            self._coef = self._linear_coef(xp)
        self._set_counts(results, n_support, cw, xp=xp, dev=dev, dtype=X.dtype)
        self.fit_status_ = int(not all(r.converged for r in results))
        self.cache_peak_bytes_ = int(max(r.peak_bytes for r in results))

    def _set_counts(self, results, n_support, cw, *, xp, dev, dtype):
        """The per-problem counts and objectives in the inputs' library and
        device: one upload of the integers, one of the floats."""
        P = len(results)
        counts = [n_support, [r.n_iter for r in results], [r.n_outer for r in results]]
        ints = xp.asarray(np.concatenate(counts).astype(np.int32), device=dev)
        k = n_support.shape[0]
        self.n_support_ = ints[:k]
        self.n_iter_ = ints[k : k + P]
        self.n_working_sets_ = ints[k + P :]
        dual = np.array([r.dual for r in results])
        primal = np.array([r.primal for r in results])
        gap = np.array([r.gap for r in results])
        floats = np.concatenate([dual, primal, primal - dual, gap, cw])
        floats = xp.asarray(floats, dtype=dtype, device=dev)
        self.dual_objective_ = floats[:P]
        self.primal_objective_ = floats[P : 2 * P]
        self.duality_gap_ = floats[2 * P : 3 * P]
        self.violation_ = floats[3 * P : 4 * P]
        self.class_weight_ = floats[4 * P :]

    def _sv_start(self):
        """Host offsets of each class's support vectors (kept from fit; read
        from ``n_support_`` once after a load)."""
        start = getattr(self, "_cache_sv_start", None)
        if start is None:
            start = np.concatenate([[0], np.cumsum(to_numpy(self.n_support_))])
            self._cache_sv_start = start = start.astype(int)
        return start

    def _linear_coef(self, xp):
        """``w`` of each one-vs-one problem (linear kernel), scikit-learn's
        ``coef_``: ``dual_coef_ @ support_vectors_`` for two classes, else the
        pair (i, j) row sums class i's and class j's vectors' terms."""
        dual, SV = self.dual_coef_, self.support_vectors_
        k = int(self.classes_.shape[0])
        if k == 2:
            return dual @ SV
        start = self._sv_start()
        rows = []
        for i, j in _pairs(k):
            si, sj = slice(start[i], start[i + 1]), slice(start[j], start[j + 1])
            rows.append(dual[j - 1, si] @ SV[si, :] + dual[i, sj] @ SV[sj, :])
        return xp.stack(rows, axis=0)

    @property
    def coef_(self):
        """Weights of each one-vs-one problem (``kernel="linear"`` only)."""
        if self.kernel != "linear" or "_coef" not in self.__dict__:
            raise AttributeError(
                "coef_ is only available when using a linear kernel (a fitted "
                "SVC(kernel='linear'))"
            )
        coef = self._coef
        if isinstance(coef, np.ndarray):  # edits would be silently ignored
            coef = coef.view()
            coef.flags.writeable = False
        return coef

    # ----------------------------------------------------------- decisions
    def _validate_predict_data(self, X, **kwargs):
        """The common checks, and scikit-learn's refusal of a sparse ``X`` for
        a model fitted on dense data (its kernel would see other inputs)."""
        fit_sparse = getattr(self, "_fit_sparse", True)  # unfitted: base raises
        if is_sparse(X) and not fit_sparse and not callable(self.kernel):
            raise ValueError(
                f"cannot use sparse input in {type(self).__name__!r} trained on dense "
                f"data: X is a SciPy sparse {type(X).__name__}; pass a dense array, "
                f"or fit on sparse X"
            )
        return super()._validate_predict_data(X, **kwargs)

    def _kernel_to_sv_dot(self, X, W, ctx):
        """``K(X, support vectors) @ W`` in row blocks of about
        ``_PREDICT_BLOCK_BYTES`` (smaller on NumPy: :func:`kernel_dot`), so
        ``n × n_SV`` is never held whole."""
        xp = ctx.xp
        if self.kernel == "precomputed":
            return xp.take(X, ctx.take(self.support_), axis=1) @ W
        kernel, kparams = self._predict_kernel()
        SV = ctx.take(self.support_vectors_)
        nsv = max(1, int(SV.shape[0]))
        block_bytes = min(_PREDICT_BLOCK_BYTES, memory_budget())
        rows = max(1, min(int(X.shape[0]), block_bytes // (8 * nsv)))
        return kernel_dot(X, SV, kernel, kparams, W, xp=xp, block_rows=rows)

    def _predict_kernel(self):
        if callable(self.kernel):
            return _callable_kernel(self.kernel), {
                "gamma": self._gamma,
                "degree": self.degree,
                "coef0": float(self.coef0),
            }
        return resolve_kernel_params(
            self.kernel,
            self.n_features_in_,
            self._gamma,
            self.degree,
            float(self.coef0),
        )

    def _raw_decision(self, X, ctx):
        """LIBSVM's one-vs-one decision values ``(n, n_pairs)``: positive means
        the first class of the pair."""
        xp = ctx.xp
        dual = ctx.take(self.dual_coef_)
        b = ctx.take(self.intercept_)
        k = int(self.classes_.shape[0])
        if k == 2:
            W = -dual[0, :][:, None]
            b = -b
        else:
            # W[s, p]: coefficient of vector s in problem p (0 when in neither class)
            start = self._sv_start()
            nsv = int(start[-1])
            dev = device(dual)

            def zeros(m):
                return xp.zeros((m,), dtype=dual.dtype, device=dev)

            cols = [
                xp.concat(
                    [
                        zeros(start[i]),
                        dual[j - 1, start[i] : start[i + 1]],
                        zeros(start[j] - start[i + 1]),
                        dual[i, start[j] : start[j + 1]],
                        zeros(nsv - start[j + 1]),
                    ]
                )
                for i, j in _pairs(k)
            ]
            W = xp.stack(cols, axis=1)
        return self._kernel_to_sv_dot(X, W, ctx) + b[None, :]

    def _pair_onehots(self, raw, xp):
        """``(n_pairs, k)`` one-hot matrices of each pair's first and second class."""
        k = int(self.classes_.shape[0])
        pairs = _pairs(k)
        first = np.zeros((len(pairs), k))
        second = np.zeros((len(pairs), k))
        for p, (a, b) in enumerate(pairs):
            first[p, a] = 1.0
            second[p, b] = 1.0
        dev = device(raw)
        F = xp.asarray(first, dtype=raw.dtype, device=dev)
        S = xp.asarray(second, dtype=raw.dtype, device=dev)
        return F, S

    def decision_function(self, X: ArrayLike) -> Array:
        """Decision values.

        Binary: ``(n,)``, positive for ``classes_[1]``. Several classes:
        ``(n, n_classes)`` one-vs-rest scores built from the one-vs-one votes
        and confidences (scikit-learn's "ovr"), or the raw ``(n, n_pairs)``
        one-vs-one values with ``decision_function_shape="ovo"``.
        """
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        raw = self._raw_decision(X, ctx)
        if int(self.classes_.shape[0]) == 2:
            return ctx.out(-raw[:, 0])
        if self.decision_function_shape == "ovo":
            return ctx.out(raw)
        return ctx.out(self._ovr(raw, xp))

    def _ovr(self, raw, xp):
        F, S = self._pair_onehots(raw, xp)
        won = xp.astype(raw >= 0, raw.dtype)
        votes = won @ F + (1.0 - won) @ S
        conf = raw @ F - raw @ S
        return votes + conf / (3.0 * (xp.abs(conf) + 1.0))

    def predict(self, X: ArrayLike) -> Array:
        """Class labels: the one-vs-one vote (ties go to the lower class index)."""
        if self.break_ties and self.decision_function_shape == "ovo":
            raise ValueError(
                "break_ties must be False when decision_function_shape is 'ovo': "
                "ties are broken on the one-vs-rest scores"
            )
        ctx, X = self._validate_predict_data(X)
        xp = ctx.xp
        raw = self._raw_decision(X, ctx)
        k = int(self.classes_.shape[0])
        if k == 2:
            codes = xp.astype(raw[:, 0] <= 0, xp.int64)
        elif self.break_ties and self.decision_function_shape == "ovr":
            codes = xp.argmax(self._ovr(raw, xp), axis=1)
        else:
            F, S = self._pair_onehots(raw, xp)
            won = xp.astype(raw > 0, raw.dtype)
            codes = xp.argmax(won @ F + (1.0 - won) @ S, axis=1)
        return decode_labels(self.classes_, codes, ctx)

    # ------------------------------------------------------- probabilities
    def _fit_platt(self, data, codes, Cs, *, pairs, xp):
        """Platt's sigmoid per pair, on decision values from 5-fold internal
        cross-validation (LIBSVM's svm_binary_svc_probability)."""
        X, K, kspec = data.X, data.K, data.kspec
        rng = check_random_state(self.random_state)
        dev = device(X)
        probA, probB = [], []
        for a, b in pairs:
            idx = np.flatnonzero(((codes == a) | (codes == b)) & (Cs > 0))
            ypm = np.where(codes[idx] == a, 1.0, -1.0)
            m = idx.shape[0]
            perm = rng.permutation(m)
            folds = np.array_split(perm, min(_N_FOLDS, m))
            dec = np.zeros(m)
            for f in folds:
                train = np.setdiff1d(perm, f)
                ytr = ypm[train]
                if np.all(ytr > 0) or np.all(ytr < 0):
                    dec[f] = 1.0 if ytr[0] > 0 else -1.0
                    continue
                res = self._solve_pair(
                    data, idx[train], ytr, Cs[idx[train]], xp=xp, label=" platt"
                )
                alpha = to_numpy(res.alpha)
                sv = alpha > 0
                coef = xp.asarray(alpha[sv] * ytr[sv], dtype=X.dtype, device=dev)
                tr_sv = xp.asarray(idx[train][sv], device=dev)
                te = xp.asarray(idx[f], device=dev)
                if K is not None:
                    Kte = xp.take(xp.take(K, te, axis=0), tr_sv, axis=1)
                else:
                    Kte = kernel_matrix(
                        xp.take(X, te, axis=0),
                        xp.take(X, tr_sv, axis=0),
                        *kspec,
                        xp=xp,
                        memory_budget=self._budget(),
                    )
                dec[f] = to_numpy(Kte @ coef) - res.rho
            A, B = sigmoid_fit(
                xp.asarray(dec, dtype=X.dtype, device=dev),
                xp.asarray(ypm, dtype=X.dtype, device=dev),
                xp=xp,
            )
            probA.append(A)
            probB.append(B)
        self._cache_platt = np.array([probA, probB])
        AB = xp.asarray(self._cache_platt, dtype=X.dtype, device=dev)
        self.probA_, self.probB_ = AB[0, :], AB[1, :]

    def _platt_host(self):
        """``(probA_, probB_)`` on the host (kept from fit; read once after a
        load), so that prediction uploads them as one small array."""
        AB = getattr(self, "_cache_platt", None)
        if AB is None:
            AB = np.array([to_numpy(self.probA_), to_numpy(self.probB_)])
            self._cache_platt = AB
        return AB

    @_available_if(lambda self: self.probability)
    def predict_proba(self, X: ArrayLike) -> Array:
        """Class probabilities ``(n, n_classes)`` from Platt scaling (and
        pairwise coupling with more than two classes). Needs ``probability=True``."""
        ctx, X = self._validate_predict_data(X)
        if not hasattr(self, "probA_"):
            raise not_fitted_error(
                "predict_proba is not available when fitted with probability=False; "
                "fit again with probability=True to use it"
            )
        xp = ctx.xp
        raw = self._raw_decision(X, ctx)
        dev = device(raw)
        AB = xp.asarray(self._platt_host(), dtype=raw.dtype, device=dev)
        A, B = AB[0, :], AB[1, :]
        R = sigmoid_predict(raw, A[None, :], B[None, :], xp=xp)
        R = xp.clip(R, 1e-7, 1.0 - 1e-7)
        k = int(self.classes_.shape[0])
        if k == 2:
            P = xp.stack([R[:, 0], 1.0 - R[:, 0]], axis=1)
        else:
            P = pairwise_coupling(R, _pairs(k), k, xp=xp)
        return ctx.out(P)

    @_available_if(lambda self: self.probability)
    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Logarithm of :meth:`predict_proba`."""
        P = self.predict_proba(X)
        import array_api_compat

        return array_api_compat.array_namespace(P).log(P)
