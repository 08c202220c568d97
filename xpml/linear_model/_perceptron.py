"""Rosenblatt's perceptron, one vs rest, processed row by row in order."""

from __future__ import annotations

from numbers import Integral, Real

from xpml.base import BaseEstimator, ClassifierMixin
from xpml.linear_model._base import LinearClassifierMixin, SklearnInputMixin
from xpml.utils._array_api import device as _device
from xpml.utils._param_validation import Interval
from xpml.utils.validation import check_random_state

__all__ = ["Perceptron"]


def _perceptron_pass(X, S, sw, W, b, /, *, order, xp, eta, fit_intercept):
    """One pass over the rows ``order`` (host ints). ``S`` holds ±1 targets (n, m).

    A row is a mistake for output ``k`` when ``S[i, k] (W[:, k]·x + b[k]) ≤ 0``
    (a zero score counts); then ``W[:, k] += η S[i, k] x``. The update is
    branch-free, so the loop never waits for the device; mistakes accumulate in
    a device array.
    """
    mistakes = xp.zeros((), dtype=X.dtype, device=_device(X))
    for i in order:
        x, s = X[i, :], S[i, :]
        miss = xp.astype(s * (x @ W + b) <= 0, X.dtype)  # (m,)
        step = (eta * sw[i]) * miss * s
        W = W + x[:, None] * step[None, :]
        if fit_intercept:
            b = b + step
        mistakes = mistakes + xp.max(miss)
    return W, b, mistakes


class Perceptron(
    SklearnInputMixin, LinearClassifierMixin, ClassifierMixin, BaseEstimator
):
    """The perceptron: ``w += η y x`` on every mistake (``y w·x ≤ 0``).

    Two classes use one weight vector with labels mapped to ``{−1, +1}``;
    more classes train one perceptron per class (one vs rest) in the same
    pass, and predict the class with the largest score.

    Parameters
    ----------
    max_iter : int, default=20
        Passes (epochs) over the data; stops early after a pass with no mistake.
    eta0 : float, default=1.0
        Step size.
    fit_intercept : bool, default=True
    shuffle : bool, default=True
        Shuffle the rows before each pass (with ``random_state``).
    random_state : int, Generator or None

    Attributes
    ----------
    classes_ : array (K,)
    coef_ : array (1, d) or (K, d)
    intercept_ : array (1,) or (K,)
    n_iter_ : int
        Passes run.
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
        "eta0": [Interval(Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(Integral, 1, None)],
        "random_state": ["random_state"],
        "shuffle": ["boolean"],
    }
    _xpml_tags = {
        "test_params": {"random_state": 0},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "online and order dependent: a "
            "weight of 2 doubles one step, repeating a row takes two steps at different times",
        },
    }

    def __init__(
        self,
        *,
        max_iter=20,
        eta0=1.0,
        fit_intercept=True,
        shuffle=True,
        random_state=None,
    ):
        self.max_iter = max_iter
        self.eta0 = eta0
        self.fit_intercept = fit_intercept
        self.shuffle = shuffle
        self.random_state = random_state

    def fit(self, X, y, sample_weight=None):
        """Run up to ``max_iter`` passes; returns self. ``sample_weight`` scales
        each row's step."""
        ctx, X, codes, sw = self._validate_fit_data(
            X, y, sample_weight, target="classes"
        )
        xp = ctx.xp
        n, d = X.shape
        K = int(self.classes_.shape[0])
        m = 1 if K == 2 else K
        if K == 2:
            S = (xp.astype(codes, X.dtype) * 2.0 - 1.0)[:, None]
        else:
            S = (
                xp.astype(
                    codes[:, None] == xp.arange(K, device=ctx.device)[None, :], X.dtype
                )
                * 2.0
                - 1.0
            )
        W = xp.zeros((d, m), dtype=X.dtype, device=ctx.device)
        b = xp.zeros((m,), dtype=X.dtype, device=ctx.device)
        rng = check_random_state(self.random_state)
        it, mistakes = 0, 0
        for it in range(1, self.max_iter + 1):
            order = rng.permutation(n).tolist() if self.shuffle else list(range(n))
            W, b, miss = _perceptron_pass(
                X,
                S,
                sw,
                W,
                b,
                order=order,
                xp=xp,
                eta=float(self.eta0),
                fit_intercept=self.fit_intercept,
            )
            mistakes = int(miss)  # one sync per pass
            if mistakes == 0:
                break
        self.coef_ = W.T
        self.intercept_ = b
        self.n_iter_ = it
        self.n_mistakes_ = mistakes
        return self._fitted(ctx)
