"""Rosenblatt's perceptron, one vs rest, processed row by row in order."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin
from xpml.exceptions import ConvergenceWarning, warn
from xpml.linear_model._base import (
    LinearClassifierMixin,
    SklearnInputMixin,
    class_weight_factors,
)
from xpml.utils._array_api import device as _device
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import check_random_state

__all__ = ["Perceptron"]


def _perceptron_pass(X, S, sw, W, b, /, *, order, xp, eta, fit_intercept, decay):
    """One pass over the rows ``order`` (host ints). ``S`` holds ±1 targets (n, m);
    ``sw`` (n, m) the step factors (sample × class weight, 0 for a frozen output).

    A row is a mistake for output ``k`` when ``S[i, k] (W[:, k]·x + b[k]) ≤ 0``
    (a zero score counts); then ``W[:, k] += η S[i, k] x``. ``decay``:
    ``(l2_shrink, l1_threshold)`` applied to ``W`` at every row (scikit-learn's
    penalised SGD), or None. The update is branch-free, so the loop never waits
    for the device; mistakes and the perceptron loss accumulate on the device.
    """
    m = S.shape[1]
    mistakes = xp.zeros((), dtype=X.dtype, device=_device(X))
    loss = xp.zeros((m,), dtype=X.dtype, device=_device(X))
    zero = xp.zeros((), dtype=X.dtype, device=_device(X))
    for i in order:
        x, s = X[i, :], S[i, :]
        margin = s * (x @ W + b)
        miss = xp.astype(margin <= 0, X.dtype)  # (m,)
        loss = loss + xp.maximum(-margin, zero)
        step = (eta * sw[i, :]) * miss * s
        if decay is not None:
            W = _shrink(W, sw[i, :], decay, xp=xp, zero=zero)
        W = W + x[:, None] * step[None, :]
        if fit_intercept:
            b = b + step
        mistakes = mistakes + xp.max(miss)
    return W, b, mistakes, loss


def _shrink(W, active, decay, /, *, xp, zero):
    """The penalty's step on ``W``: scale by ``1 − ηα(1 − r)`` then soft-threshold
    by ``ηαr`` (outputs with ``active == 0`` are left alone)."""
    l2, l1 = decay
    on = xp.astype(active != 0, W.dtype)[None, :]
    V = W * (1.0 - l2 * on)
    if l1:
        t = l1 * on
        V = xp.maximum(V - t, zero) + xp.minimum(V + t, zero)
    return V


class Perceptron(
    SklearnInputMixin, LinearClassifierMixin, ClassifierMixin, BaseEstimator
):
    """The perceptron: ``w += η y x`` on every mistake (``y w·x ≤ 0``).

    Two classes use one weight vector with labels mapped to ``{−1, +1}``;
    more classes train one perceptron per class (one vs rest) in the same
    pass, and predict the class with the largest score.

    Parameters
    ----------
    penalty : {None, "l2", "l1", "elasticnet"}, default=None
        scikit-learn's penalised SGD: at every row ``W`` is scaled by
        ``1 − η α (1 − r)`` and soft-thresholded by ``η α r`` (``r = l1_ratio``;
        1 for "l1", 0 for "l2").
    alpha : float, default=1e-4
    l1_ratio : float in [0, 1], default=0.15
    max_iter : int, default=1000
        Passes (epochs) over the data; without a penalty, stops early after a
        pass with no mistake.
    tol : float or None, default=1e-3
        scikit-learn's stopping rule, per output (one vs rest): an output stops
        after ``n_iter_no_change`` passes whose summed perceptron loss
        ``Σ max(0, −y·score)`` is not below the best so far minus ``tol · n``.
        None: run ``max_iter`` passes.
    n_iter_no_change : int, default=5
    class_weight : dict, "balanced" or None
        Multiplies the step of each class's rows.
    warm_start : bool, default=False
        Start from the previous ``coef_`` / ``intercept_``.
    early_stopping : bool, default=False
        Only False is supported (True raises); ``validation_fraction``,
        ``verbose`` and ``n_jobs`` are accepted for compatibility.
    eta0 : float, default=1.0
        Step size.
    fit_intercept : bool, default=True
    shuffle : bool, default=True
        Shuffle the rows before each pass (with ``random_state``).
    random_state : int, Generator or None, default=0

    Attributes
    ----------
    classes_ : array (K,)
    coef_ : array (1, d) or (K, d)
    intercept_ : array (1,) or (K,)
    n_iter_ : int
        Passes run (the most over outputs); ``partial_fit`` counts its calls.
    t_ : float
        Updates made plus one (scikit-learn's counter).
    n_mistakes_ : int
        Mistakes (rows with at least one output wrong) made online in the last pass.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.linear_model import Perceptron
    >>> X = np.array([[0.0, 1.0], [1.0, 2.0], [3.0, 0.0], [4.0, 1.0]]); y = np.array([0, 0, 1, 1])
    >>> clf = Perceptron(random_state=0).fit(X, y)
    >>> clf.predict(X).tolist(), clf.n_mistakes_
    ([0, 0, 1, 1], 0)
    """

    _parameter_constraints = {
        "penalty": [Options("l2", "l1", "elasticnet", None)],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "l1_ratio": [Interval(Real, 0, 1, closed="both")],
        "eta0": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None)],
        "tol": [None, Interval(Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "shuffle": ["boolean"],
        "verbose": [Interval(Integral, 0, None)],
        "n_jobs": [None, Interval(Integral, None, -1), Interval(Integral, 1, None)],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(Integral, 1, None)],
        "class_weight": [None, "dict", Options("balanced")],
        "warm_start": ["boolean"],
    }
    _xpml_tags = {
        "test_params": {"random_state": 0},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "online and order dependent: a "
            "weight of 2 doubles one step, repeating a row takes two steps at different times",
            "check_sample_weight_equivalence_on_sparse_data": "the same, on sparse X",
        },
    }

    def __init__(
        self,
        *,
        penalty=None,
        alpha=0.0001,
        l1_ratio=0.15,
        fit_intercept=True,
        max_iter=1000,
        tol=1e-3,
        shuffle=True,
        verbose=0,
        eta0=1.0,
        n_jobs=None,
        random_state=0,
        early_stopping=False,
        validation_fraction=0.1,
        n_iter_no_change=5,
        class_weight=None,
        warm_start=False,
    ):
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.shuffle = shuffle
        self.verbose = verbose
        self.eta0 = eta0
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.class_weight = class_weight
        self.warm_start = warm_start

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Run up to ``max_iter`` passes; returns self. ``sample_weight`` scales
        each row's step."""
        self._validate_params()
        if self.early_stopping:
            raise ValueError(
                "Perceptron: early_stopping=True is not supported (validation split "
                "not implemented); use early_stopping=False"
            )
        prev = self._previous() if self.warm_start else None
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        return self._run(ctx, X, codes, sw, prev=prev, passes=self.max_iter, stop=True)

    def partial_fit(
        self,
        X: ArrayLike,
        y: ArrayLike,
        classes=None,
        sample_weight: ArrayLike | None = None,
    ) -> Self:
        """One pass over ``(X, y)`` from the current weights; ``classes`` (all
        labels) is required on the first call. Returns self."""
        self._validate_params()
        first = not hasattr(self, "coef_")
        if first and classes is None:
            raise ValueError("classes must be passed on the first call to partial_fit.")
        known = np.asarray(classes) if first else to_numpy(self.classes_)
        prev = None if first else self._previous()
        n_seen = getattr(self, "n_features_in_", None)
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        if not first and self.n_features_in_ != n_seen:
            got, self.n_features_in_ = self.n_features_in_, n_seen
            raise ValueError(
                f"X has {got} features, but Perceptron is expecting {n_seen} "
                f"features as input."
            )
        codes = self._recode(codes, known, ctx)
        self.classes_ = ctx.out(ctx.xp.asarray(known)) if first else prev[2]
        return self._run(ctx, X, codes, sw, prev=prev, passes=1, stop=False)

    def _previous(self):
        if not hasattr(self, "coef_"):
            return None
        return self.coef_, self.intercept_, self.classes_

    def _recode(self, codes, known, ctx):
        """Codes of this batch's classes (``self.classes_``) into ``known``."""
        here = to_numpy(self.classes_)
        pos = np.searchsorted(known, here)
        bad = (pos >= known.shape[0]) | (
            known[np.minimum(pos, known.shape[0] - 1)] != here
        )
        if np.any(bad):
            raise ValueError(
                f"y has labels {here[bad].tolist()} not in classes {known.tolist()}"
            )
        xp = ctx.xp
        return xp.take(xp.asarray(pos, device=ctx.device), codes, axis=0)

    def _targets(self, codes, K, X, ctx):
        xp = ctx.xp
        if K == 2:
            return (xp.astype(codes, X.dtype) * 2.0 - 1.0)[:, None]
        one_hot = codes[:, None] == xp.arange(K, device=ctx.device)[None, :]
        return xp.astype(one_hot, X.dtype) * 2.0 - 1.0

    def _start(self, prev, d, m, X, ctx):
        xp = ctx.xp
        if prev is not None and tuple(prev[0].shape) == (m, d):
            return (
                xp.astype(ctx.take(prev[0]), X.dtype).T,
                xp.astype(ctx.take(prev[1]), X.dtype),
            )
        W = xp.zeros((d, m), dtype=X.dtype, device=ctx.device)
        return W, xp.zeros((m,), dtype=X.dtype, device=ctx.device)

    def _decay(self):
        if self.penalty is None or not self.alpha:
            return None
        r = {"l2": 0.0, "l1": 1.0}.get(self.penalty, float(self.l1_ratio))
        ea = float(self.eta0) * float(self.alpha)
        return ea * (1.0 - r), ea * r

    def _run(self, ctx, X, codes, sw, /, *, prev, passes, stop):
        xp = ctx.xp
        n, d = X.shape
        K = int(self.classes_.shape[0])
        m = 1 if K == 2 else K
        S = self._targets(codes, K, X, ctx)
        cw = class_weight_factors(
            self.class_weight, self.classes_, codes, xp=xp, dtype=X.dtype
        )
        if cw is not None:
            sw = sw * cw
        W, b = self._start(prev, d, m, X, ctx)
        rng = check_random_state(self.random_state)
        state = _Stopping(m, n, self.tol if stop else None, self.n_iter_no_change)
        decay = self._decay()
        it, mistakes = 0, 0
        for it in range(1, passes + 1):
            order = rng.permutation(n).tolist() if self.shuffle else list(range(n))
            steps = sw[:, None] * state.active(X, xp=xp, device=ctx.device)[None, :]
            W, b, miss, loss = _perceptron_pass(
                X,
                S,
                steps,
                W,
                b,
                order=order,
                xp=xp,
                eta=float(self.eta0),
                fit_intercept=self.fit_intercept,
                decay=decay,
            )
            mistakes = int(miss)  # one sync per pass
            if stop and (
                state.update(to_numpy(loss)) or (mistakes == 0 and decay is None)
            ):
                break
        if stop and self.tol is not None and it == passes and state.any_active():
            warn(
                ConvergenceWarning,
                f"Maximum number of iteration reached before convergence "
                f"(max_iter={self.max_iter}). Consider increasing max_iter.",
                stacklevel=3,
            )
        self.coef_ = W.T
        self.intercept_ = b
        self.n_iter_ = it if stop else getattr(self, "n_iter_", 0) + 1
        self.t_ = float(getattr(self, "t_", 1.0) if not stop else 1.0) + it * n
        self.n_mistakes_ = mistakes
        return self._fitted(ctx)


class _Stopping:
    """scikit-learn's rule per output: a pass whose perceptron loss is not below
    ``best − tol · n`` counts against it; ``n_iter_no_change`` such passes in a
    row freeze that output (one vs rest fits each class on its own)."""

    def __init__(self, m, n, tol, patience):
        self.best = np.full(m, np.inf)
        self.bad = np.zeros(m, dtype=np.int64)
        self.on = np.ones(m, dtype=bool)
        self.tol, self.n, self.patience = tol, n, patience

    def active(self, X, /, *, xp, device):
        return xp.asarray(self.on.astype(np.float64), dtype=X.dtype, device=device)

    def any_active(self):
        return bool(self.on.any())

    def update(self, loss):
        """Record one pass's losses; True when every output has stopped."""
        if self.tol is None:
            return False
        worse = loss > self.best - self.tol * self.n
        self.bad = np.where(worse, self.bad + 1, 0)
        self.best = np.minimum(self.best, loss)
        self.on &= self.bad < self.patience
        return not self.on.any()
