"""Online linear classifiers: Passive-Aggressive (PA, PA-I, PA-II) and AROW.

Labels arrive one at a time. ``partial_fit`` takes a batch and processes its
rows **in order**, one update per row; ``fit`` starts afresh and makes
``n_epochs`` passes. ``n_mistakes_`` counts online mistakes: before each row's
update the current model predicts it, and a score with the wrong sign **or
zero** is a mistake. Two classes, mapped to ``{−1, +1}`` (``classes_[1]`` is
``+1``).

The loop over rows is inherently sequential; each step is vectorised over the
``d`` features and is branch-free (no host synchronisation per row: the
decision to update is a multiplication by a 0/1 factor and mistakes accumulate
in a device array, read once per ``partial_fit``).

References
----------
Crammer, Dekel, Keshet, Shalev-Shwartz & Singer (2006), Online
passive-aggressive algorithms. JMLR 7.
Crammer, Kulesza & Dredze (2009), Adaptive regularization of weight vectors
(AROW). NeurIPS.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.linear_model._base import check_finite_result, linalg_errors
from xpml.utils._array_api import device as _device
from xpml.utils._array_api import dispatch, fast_path, portable
from xpml.utils._math import encode_labels_against
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import decode_labels, encode_labels

__all__ = ["PassiveAggressive", "AROW", "PA_STEPS"]


# the PA variants: τ from the hinge loss ℓ, ‖x‖² and C — a table, not an if-chain
PA_STEPS = {
    "pa": lambda loss, sq, C, xp: loss / sq,  # PA
    "pa1": lambda loss, sq, C, xp: xp.clip(loss / sq, max=C),  # PA-I: capped
    "pa2": lambda loss, sq, C, xp: loss / (sq + 1.0 / (2.0 * C)),  # PA-II: softened
}


_SIGN_ITERATIONS = 60
"""Newton–Schulz steps of the portable eigenvalue clamp: an eigenvalue ``a`` of
``Σ − floor·I`` with ``|a| ≥ 1.5⁻⁵⁴ ‖Σ − floor·I‖_F`` has its sign to rounding
(the iteration grows small ``|a|`` by 1.5 per step, then converges cubically);
a smaller one is left within ``|a|`` of where the exact clamp puts it."""


def _clip_example():
    """A downdate that collapsed one direction (eigenvalues −0.42, 0.16, 1, 1)
    and sits on the floor in another."""
    rng = np.random.default_rng(0)
    V, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    lam = np.array([-0.42, 1e-9 - 3e-17, 0.16, 1.0, 1.0])
    return ((V * lam) @ V.T, 1e-9), {"xp": None}


@portable("arow.clip_eigenvalues")
def _clip_eigenvalues_portable(S, floor, /, *, xp):
    """``Σ`` with its eigenvalues below ``floor`` raised to it, without a
    factorisation (no info code read back): ``floor·I + (A + A·sign(A))/2`` for
    ``A = Σ − floor·I``, ``sign(A)`` by the Newton–Schulz iteration
    ``Y ← Y(3I − Y²)/2`` from ``A/‖A‖_F`` (it commutes with ``A``)."""
    eye = xp.eye(S.shape[0], dtype=S.dtype, device=_device(S))
    A = S - floor * eye
    norm = xp.sqrt(xp.sum(A * A))
    Y = A / xp.where(norm > 0, norm, xp.ones_like(norm))
    for _ in range(_SIGN_ITERATIONS):
        Y = Y @ (1.5 * eye - 0.5 * (Y @ Y))
    C = floor * eye + 0.5 * (A + A @ Y)
    return 0.5 * (C + C.T)


@fast_path("arow.clip_eigenvalues", "numpy", example=_clip_example)
def _clip_eigenvalues_eigh(S, floor, /, *, xp):
    """NumPy: the eigen-decomposition itself (no device to stall)."""
    lam, V = xp.linalg.eigh(S)
    C = (V * xp.clip(lam, min=floor)[None, :]) @ V.T
    return 0.5 * (C + C.T)


class _OnlineBinary(ClassifierMixin, BaseEstimator):
    """State handling, label mapping, ``fit``/``partial_fit`` and prediction."""

    # -------------------------------------------------------------- labels
    def _signs(self, y, classes, ctx, dtype):
        """``±1`` targets (device array) for the batch's labels; sets ``classes_``
        on the first call."""
        if not hasattr(self, "classes_"):
            src = classes if classes is not None else y
            cls, _ = encode_labels(
                src, name="classes" if classes is not None else "y", min_classes=1
            )
            k = int(cls.shape[0])
            if k > 2 or (classes is not None and k != 2):
                raise ValueError(
                    f"Only binary classification is supported: {type(self).__name__} needs "
                    f"exactly two classes, got {k} class labels {to_numpy(cls).tolist()!r}"
                )
            if k < 2:
                raise ValueError(
                    f"{type(self).__name__} needs two classes; y has a single class "
                    f"{to_numpy(cls).tolist()!r} and no `classes` were given to partial_fit"
                )
            self.classes_ = cls
        xp = ctx.xp
        codes = encode_labels_against(self.classes_, y, xp=xp)  # 0/1, on device
        return 2.0 * xp.astype(xp.reshape(codes, (-1,)), dtype) - 1.0  # (n,) or (n, 1)

    # ---------------------------------------------------------------- API
    def fit(self, X: ArrayLike, y: ArrayLike) -> Self:
        """Forget everything, then make ``n_epochs`` passes over the rows in
        order; returns self."""
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target "
                f"y is None"
            )
        self._validate_params()  # n_epochs=0 would otherwise skip every check
        for k in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, k)
        encode_labels(y, name="y")  # two or more classes, finite, not continuous
        for _ in range(self.n_epochs):
            self.partial_fit(X, y)
        return self

    def partial_fit(self, X: ArrayLike, y: ArrayLike, classes=None) -> Self:
        """Process the rows of one batch in order (one update per row).

        Parameters
        ----------
        X : array (n, d)
        y : array (n,)
        classes : array-like (2,), optional
            The two class labels; needed on the first call when the first batch
            holds only one of them.
        """
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target "
                f"y is None"
            )
        d_prev = getattr(self, "n_features_in_", None)
        ctx, X, y, _ = self._validate_fit_data(X, y, target="none")
        xp = ctx.xp
        n, d = X.shape
        if d_prev is not None and d_prev != d:
            self.n_features_in_ = d_prev
            raise ValueError(
                f"X has {d} features, but {type(self).__name__} is expecting "
                f"{d_prev} features as input (from earlier partial_fit calls)."
            )
        s = self._signs(y, classes, ctx, X.dtype)
        if self.fit_intercept:
            X = xp.concat(
                [X, xp.ones((n, 1), dtype=X.dtype, device=ctx.device)], axis=1
            )
        owner = type(self).__name__
        # ‖x‖² of every row must be finite, or every step below is NaN: one check
        check_finite_result(xp.sum(X * X, axis=1), X, xp=xp, what="‖x‖²", owner=owner)
        state = self._get_state(ctx, X.shape[1], X.dtype)
        mistakes = xp.zeros((), dtype=X.dtype, device=ctx.device)
        with linalg_errors(X, xp=xp, what="covariance update", owner=owner):
            state, mistakes = self._pass(X, s, state, mistakes, xp=xp)
        self._set_state(state, d)
        self.n_mistakes_ = getattr(self, "n_mistakes_", 0) + int(mistakes)  # one sync
        self.n_seen_ = getattr(self, "n_seen_", 0) + int(n)
        return self._fitted(ctx)

    def _weights(self, ctx):
        w = ctx.take(self.coef_)
        return w, ctx.take(self.intercept_)

    def decision_function(self, X: ArrayLike) -> Array:
        """Scores ``w·x + b`` (n,); positive means ``classes_[1]``."""
        ctx, X = self._validate_predict_data(X)
        w, b = self._weights(ctx)
        return ctx.out(X @ w + b)

    def predict(self, X: ArrayLike) -> Array:
        """Class labels (n,); a zero score predicts ``classes_[0]``."""
        ctx, X = self._validate_predict_data(X)
        w, b = self._weights(ctx)
        codes = ctx.xp.astype(X @ w + b > 0, ctx.xp.int64)
        return decode_labels(self.classes_, codes, ctx)

    def _mean_state(self, ctx, m, dtype):
        xp = ctx.xp
        if not hasattr(self, "coef_"):
            return xp.zeros((m,), dtype=dtype, device=ctx.device)
        w = xp.astype(ctx.take(self.coef_), dtype)
        if self.fit_intercept:
            w = xp.concat(
                [w, xp.reshape(xp.astype(ctx.take(self.intercept_), dtype), (1,))]
            )
        return w

    def _set_mean(self, w, d):
        self.coef_ = w[:d]
        if self.fit_intercept:
            self.intercept_ = w[d]
        else:
            self.intercept_ = w[0] * 0.0


class PassiveAggressive(_OnlineBinary):
    """Passive-Aggressive online classifier (PA, PA-I, PA-II).

    On each row, with hinge loss ``ℓ = max(0, 1 − y w·x)``:
    ``w ← w + τ y x`` with ``τ = ℓ/‖x‖²`` (PA), ``min(C, ℓ/‖x‖²)`` (PA-I) or
    ``ℓ/(‖x‖² + 1/(2C))`` (PA-II). Passive when ``ℓ = 0``.

    Parameters
    ----------
    mode : {"pa", "pa1", "pa2"}, default="pa1"
    C : float > 0, default=1.0
        Aggressiveness cap (PA-I) / softness (PA-II); unused by "pa".
    fit_intercept : bool, default=True
        Learn a bias as the weight of an extra constant feature 1 (so it is
        updated like any weight and counts in ``‖x‖²``).
    n_epochs : int, default=1
        Passes made by ``fit`` (one pass is the classic online setting).

    Attributes
    ----------
    classes_ : array (2,)
    coef_ : array (d,)
    intercept_ : float array ()
    n_mistakes_ : int
        Online mistakes (score of the wrong sign or zero) before each update,
        summed over every row seen.
    n_updates_ : int
        Rows with a positive loss (an update was made).
    n_seen_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.online import PassiveAggressive
    >>> X = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.5], [0.3, 2.0]]); y = np.array([1, 0, 1, 0])
    >>> pa = PassiveAggressive(mode="pa", fit_intercept=False).fit(X, y)
    >>> pa.n_mistakes_, pa.predict(X).tolist()
    (2, [1, 0, 1, 0])
    """

    _parameter_constraints = {
        "C": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "mode": [Options(*PA_STEPS)],
        "n_epochs": [Interval(Integral, 1, None)],
    }
    _xpml_tags = {
        "data": "binary",
        "multi_class": False,
        "test_params": {"n_epochs": 3},
    }

    def __init__(self, *, mode="pa1", C=1.0, fit_intercept=True, n_epochs=1):
        self.mode = mode
        self.C = C
        self.fit_intercept = fit_intercept
        self.n_epochs = n_epochs

    def _get_state(self, ctx, m, dtype):
        return {
            "w": self._mean_state(ctx, m, dtype),
            "updates": getattr(self, "n_updates_", 0),
        }

    def _set_state(self, state, d):
        self._set_mean(state["w"], d)
        self.n_updates_ = state["updates"]

    def _pass(self, X, s, state, mistakes, /, *, xp):
        step, C = PA_STEPS[self.mode], float(self.C)
        sq = xp.sum(X * X, axis=1)
        sq_safe = xp.where(sq > 0, sq, xp.ones_like(sq))
        w = state["w"]
        updates = xp.zeros((), dtype=X.dtype, device=_device(X))
        for i in range(X.shape[0]):
            x, yi = X[i, :], s[i]
            margin = yi * (w @ x)
            mistakes = mistakes + xp.astype(margin <= 0, X.dtype)
            loss = xp.clip(1.0 - margin, min=0.0)
            tau = xp.where(
                sq[i] > 0, step(loss, sq_safe[i], C, xp), xp.zeros_like(loss)
            )
            w = w + (tau * yi) * x
            updates = updates + xp.astype(loss > 0, X.dtype)
        state = {"w": w, "updates": state["updates"] + int(updates)}
        return state, mistakes


class AROW(_OnlineBinary):
    """Adaptive Regularisation Of Weight vectors: a Gaussian ``N(μ, Σ)`` over weights.

    Start ``μ = 0``, ``Σ = I``. On a row with margin ``m = y μ·x < 1``::

        v = Σx,   β = (1 − m) / (x·v + 1/r),   μ ← μ + β y v,   Σ ← Σ − β v vᵀ

    (the lecture's parameterisation; some texts write ``1/(2r)``, and Crammer et
    al. downdate ``Σ`` by ``v vᵀ/(x·v + 1/r)`` without the ``(1 − m)`` factor). The mean
    moves along ``Σx``, not ``x``; ``Σ`` shrinks only along seen directions,
    so the variance orthogonal to every seen ``x`` stays exactly 1. Because ``β``
    carries ``(1 − m)``, a confident mistake can make ``β x·v > 1`` and push an
    eigenvalue of ``Σ`` below zero along ``v``: the covariance collapses there. After each
    update ``Σ`` is symmetrised, ``(Σ + Σᵀ)/2``, and, when an eigenvalue falls
    below ``eig_floor``, its eigenvalues are clamped at the floor (counted in
    ``n_clamps_``). No factorisation runs per row (none reads an info code
    back to the host): by Sylvester's law an update takes ``λ_min`` below the
    floor when ``β x·Σx ≥ 1`` (a new collapse; exact up to ``floor/λ_min(Σ)``), and
    once a direction sits on the floor every later update pushes it below again
    (``Σ`` only shrinks), so each counts; the clamp is
    ``floor·I + (A + A·sign(A))/2`` with ``A = Σ − floor·I`` and ``sign(A)`` by
    Newton–Schulz iterations (NumPy: the eigen-decomposition, no device to
    stall). ``covariance="diag"`` keeps only the diagonal (``v = σ∘x``,
    ``σ ← max(σ − β v², floor)``), O(d) per row for large ``d``.

    Parameters
    ----------
    r : float > 0, default=1.0
        Small ``r`` is conservative; large ``r`` (≥ 5) makes ``β`` explode.
    covariance : {"full", "diag"}, default="full"
    eig_floor : float ≥ 0, default=1e-9
    fit_intercept : bool, default=True
        Learn a bias as the weight of an extra constant feature 1 (with its own
        variance: ``cov_`` is then ``(d+1) × (d+1)``, the bias last).
    n_epochs : int, default=1

    Attributes
    ----------
    classes_ : array (2,)
    coef_ : array (d,)
        The mean ``μ`` (without the bias).
    intercept_ : float array ()
    cov_ : array (m, m) or (m,)
        ``Σ`` (full) or its diagonal; ``m = d + 1`` with an intercept.
    n_mistakes_ : int
        Online mistakes (``m ≤ 0``) before each update, over every row seen.
    n_updates_ : int
        Rows with ``m < 1`` (an update was made).
    n_clamps_ : int
        Updates after which the eigenvalue (or variance) floor was applied
        (an eigenvalue fell below ``eig_floor``).
    n_seen_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.online import AROW
    >>> X = np.tile([1.0, 0.0], (3, 1)); y = np.ones(3)
    >>> arow = AROW(r=1.0, fit_intercept=False).partial_fit(X, y, classes=[-1.0, 1.0])
    >>> np.round(arow.coef_, 6).tolist(), float(arow.cov_[1, 1])
    ([0.764706, 0.0], 1.0)
    """

    _parameter_constraints = {
        "covariance": [Options("full", "diag")],
        "eig_floor": [Interval(Real, 0, None, closed="left")],
        "fit_intercept": ["boolean"],
        "n_epochs": [Interval(Integral, 1, None)],
        "r": [Interval(Real, 0, None, closed="neither")],
    }
    _xpml_tags = {"data": "binary", "multi_class": False}

    def __init__(
        self,
        *,
        r=1.0,
        covariance="full",
        eig_floor=1e-9,
        fit_intercept=True,
        n_epochs=1,
    ):
        self.r = r
        self.covariance = covariance
        self.eig_floor = eig_floor
        self.fit_intercept = fit_intercept
        self.n_epochs = n_epochs

    def _get_state(self, ctx, m, dtype):
        xp = ctx.xp
        if hasattr(self, "cov_"):
            Sigma = xp.astype(ctx.take(self.cov_), dtype)
        elif self.covariance == "full":
            Sigma = xp.eye(m, dtype=dtype, device=ctx.device)
        else:
            Sigma = xp.ones((m,), dtype=dtype, device=ctx.device)
        return {
            "mu": self._mean_state(ctx, m, dtype),
            "Sigma": Sigma,
            "updates": getattr(self, "n_updates_", 0),
            "clamps": getattr(self, "n_clamps_", 0),
        }

    def _set_state(self, state, d):
        self._set_mean(state["mu"], d)
        self.cov_ = state["Sigma"]
        self.n_updates_ = state["updates"]
        self.n_clamps_ = state["clamps"]

    def _pass(self, X, s, state, mistakes, /, *, xp):
        mu, Sigma = state["mu"], state["Sigma"]
        inv_r, floor = 1.0 / float(self.r), float(self.eig_floor)
        full = self.covariance == "full"
        zero = xp.zeros((), dtype=X.dtype, device=_device(X))
        updates, clamps = zero, zero
        # Σ has an eigenvalue on the floor once a clamp fired (Σ only shrinks)
        floored = zero < (1.0 if state["clamps"] > 0 else 0.0)
        clip = dispatch("arow.clip_eigenvalues", xp)
        for i in range(X.shape[0]):
            x, yi = X[i, :], s[i]
            m = yi * (mu @ x)
            mistakes = mistakes + xp.astype(m <= 0, X.dtype)
            v = Sigma @ x if full else Sigma * x
            q = x @ v
            beta = xp.where(m < 1, (1.0 - m) / (q + inv_r), zero)
            mu = mu + (beta * yi) * v
            updates = updates + xp.astype(m < 1, X.dtype)
            if full:
                Sigma = Sigma - beta * (v[:, None] * v[None, :])
                Sigma = 0.5 * (Sigma + Sigma.T)
                # λ_min(Σ') < floor: a new collapse (β x·Σx ≥ 1, Sylvester) or a
                # downdate of a direction already on the floor (see Notes)
                fired = (m < 1) & (floored | (beta * q >= 1.0))
                Sigma = xp.where(fired, clip(Sigma, floor, xp=xp), Sigma)
                floored = floored | fired
            else:
                Sigma = Sigma - beta * v * v
                fired = (m < 1) & (xp.min(Sigma) < floor)
                Sigma = xp.clip(Sigma, min=floor)
            clamps = clamps + xp.astype(fired, X.dtype)
        state = {
            "mu": mu,
            "Sigma": Sigma,
            "updates": state["updates"] + int(updates),
            "clamps": state["clamps"] + int(clamps),
        }
        return state, mistakes
