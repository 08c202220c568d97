"""AdaBoost: re-weighted stumps (or shallow trees) with votes β = ½ ln((1−err)/err)."""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, clone
from xpml.ensemble._base import (
    FitPredict,
    Members,
    Training,
    fit_member,
    member_predict,
    progress_bar,
    takes_sample_weight,
)
from xpml.tree._classes import DecisionTreeClassifier, _BaseDecisionTree
from xpml.tree._stack import StackOwner, cached_stack, restore_stack
from xpml.utils._math import softmax
from xpml.utils._param_validation import Interval
from xpml.utils.validation import check_is_fitted, check_random_state, decode_labels

__all__ = ["AdaBoostClassifier"]

_PERFECT_ERR = 1e-10  # err = 0 is replaced by this in the vote (a finite, dominant β)


def _member_codes(m, data):
    """Class codes a member predicts for ``data.X`` (compute namespace)."""
    xp = data.ctx.xp
    if isinstance(m, _BaseDecisionTree):
        return xp.argmax(m._leaf_values(data.ctx, data.X), axis=1)
    return xp.astype(member_predict(m, data), xp.int64)


def _fit_round(m, data, w, rng):
    """Fit one weak learner to the weights ``w``: as ``sample_weight`` where
    its ``fit`` takes them, else on ``n`` rows drawn with probabilities ``w``."""
    if isinstance(m, DecisionTreeClassifier):
        m.n_features_in_ = int(data.X.shape[1])
        m.classes_ = data.classes
        return m._fit_arrays(data.ctx, data.X, data.y, w, data.K, ids=data.positive)
    if takes_sample_weight(m):
        return fit_member(m, data, weight=w)
    p = np.asarray(to_numpy(w), dtype=np.float64)
    rows = rng.choice(len(p), size=len(p), p=p / p.sum())
    return fit_member(m, data, rows=rows)


def _vote_table(betas):
    """Leaf values of member ``t`` in the stack: its vote ``β_t · onehot(class)``."""
    betas = np.asarray(betas, dtype=np.float64)

    def values(t, tree):
        onehot = np.eye(tree["value"].shape[1])[np.argmax(tree["value"], axis=1)]
        return (float(betas[t]) * onehot).astype(tree["value"].dtype)

    return values


class AdaBoostClassifier(Members, ClassifierMixin, StackOwner, BaseEstimator):
    """Discrete AdaBoost (SAMME for more than two classes) on weighted stumps.

    Weights start at ``1/n`` (times ``sample_weight``, normalised). In round
    ``t`` a weak learner is fitted to the weighted data and its weighted error
    ``err`` gives its vote

        β = learning_rate · ½ [ln((1 − err)/err) + ln(K − 1)]

    (``½ ln((1−err)/err)`` for two classes). Misclassified points' weights are
    multiplied by ``e^β``, correctly classified ones by ``e^−β``, and the
    weights are renormalised to sum to one. The ensemble predicts
    ``argmax_k Σ_t β_t [h_t(x) = k]``.

    Edge cases, handled explicitly:

    * ``err = 0`` (the learner fits the weighted training set perfectly): β
      would be infinite. The learner is kept with the finite, dominant vote of
      ``err = 1e-10`` and boosting stops (the weights cannot be updated).
    * ``err ≥ 1 − 1/K`` (½ for two classes: no better than chance): the
      learner is discarded and boosting stops; if it is the very first one a
      ``ValueError`` is raised (the weak learner cannot learn the data).

    Parameters
    ----------
    estimator : classifier with ``fit`` and ``predict``, default=None
        None: a stump, ``DecisionTreeClassifier(max_depth=1)``. Any other
        estimator (xpml's, scikit-learn's, a ``Pipeline``) gets the weights as
        ``sample_weight`` when its ``fit`` takes it, else is fitted on ``n``
        rows drawn with probabilities given by the weights (its round's seed).
    n_estimators : int, default=50
        Largest number of boosting rounds.
    learning_rate : float, default=1.0
        Shrinks every vote β.
    random_state : int, numpy Generator or None
        Seeds the members (one seed per round, drawn on the host).
    progress : bool, default=False
        Show a progress bar (tqdm when installed).

    Attributes
    ----------
    estimators_ : list of fitted weak learners
    estimator_weights_ : array (T,)
        The votes β_t.
    estimator_errors_ : array (T,)
        The weighted training errors err_t.
    classes_ : array (K,)
    n_features_in_ : int

    Notes
    -----
    For two classes and learning_rate 1, round ``t`` multiplies the exponential
    loss ``(1/n) Σ_i e^{−y_i F_t(x_i)}`` (``F_t = Σ_{s<=t} β_s h_s``,
    ``h, y ∈ {−1, +1}``) by ``Z_t = 2√(err_t(1−err_t)) < 1``, so the loss
    ``Π_t Z_t`` falls every round and bounds the training error
    (Freund & Schapire 1997). scikit-learn's SAMME uses
    ``α = 2β``: the same weights after renormalisation and the same votes up to
    a factor 2, hence the same predictions.

    References
    ----------
    Freund & Schapire, "A decision-theoretic generalization of on-line learning
    and an application to boosting", 1997. Zhu, Zou, Rosset & Hastie,
    "Multi-class AdaBoost", 2009.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.ensemble import AdaBoostClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> ada = AdaBoostClassifier(n_estimators=30).fit(X, y)
    >>> bool(ada.score(X, y) > 0.95), len(ada.estimator_weights_)
    (True, 30)
    """

    _parameter_constraints = {
        "estimator": [None, FitPredict],
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "learning_rate": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "progress": ["boolean"],
    }
    _xpml_tags = {
        "test_params": {"n_estimators": 10},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "boosting weights are real numbers: weighted and repeated rows sum them in "
            "different orders, which can break exact ties between stumps differently",
        },
    }

    def __init__(
        self,
        estimator=None,
        *,
        n_estimators=50,
        learning_rate=1.0,
        random_state=None,
        progress=False,
    ):
        self.estimator = estimator
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.random_state = random_state
        self.progress = progress

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Run up to ``n_estimators`` boosting rounds; returns self."""
        ctx, X, y, sw = self._validate_fit_data(X, y, sample_weight, target="classes")
        xp = ctx.xp
        K = int(self.classes_.shape[0])
        # the weights stay positive where sample_weight is (e^{±β} > 0): the
        # trees' samples are found once, not every round
        positive = xp.nonzero(sw > 0)[0]
        data = _Rounds(ctx, X, y, classes=self.classes_, K=K, positive=positive)
        template = self._template()
        seeds = check_random_state(self.random_state).integers(
            0, 2**31 - 1, size=self.n_estimators
        )
        w = sw / xp.sum(sw)
        members, betas, errors = [], [], []
        bar = progress_bar(self.progress, self.n_estimators, type(self).__name__)
        chance = 1.0 - 1.0 / K
        for t in range(self.n_estimators):
            m = clone(template)
            if "random_state" in m.get_params(deep=False):
                m.set_params(random_state=int(seeds[t]))
            _fit_round(m, data, w, np.random.default_rng(int(seeds[t])))
            miss = _member_codes(m, data) != y
            err = float(xp.sum(xp.where(miss, w, xp.zeros_like(w))) / xp.sum(w))
            if bar is not None:
                bar.update(1)
            if err >= chance:
                if not members:
                    raise ValueError(
                        f"the first weak learner has weighted training error {err:.4f} >= "
                        f"{chance:.4f} (1 - 1/K, chance level), so AdaBoost cannot start; "
                        f"use a stronger estimator"
                    )
                break
            perfect = err <= 0.0
            e = _PERFECT_ERR if perfect else err
            beta = (
                self.learning_rate * 0.5 * (math.log((1.0 - e) / e) + math.log(K - 1.0))
            )
            members.append(m)
            betas.append(beta)
            errors.append(err)
            if perfect:
                break
            sign = xp.where(miss, xp.ones_like(w), -xp.ones_like(w))
            w = w * xp.exp(beta * sign)
            w = w / xp.sum(w)
        if bar is not None:
            bar.close()
        self._keep_rounds(ctx, members, betas, errors, dtype=X.dtype)
        return self._fitted(ctx)

    def _keep_rounds(self, ctx, members, betas, errors, *, dtype):
        """The fitted members, their votes β and errors (and, for trees, the
        device copy of their votes used by every predict)."""
        xp = ctx.xp
        self.estimators_ = members
        self.estimator_weights_ = xp.asarray(
            np.asarray(betas), dtype=dtype, device=ctx.device
        )
        self.estimator_errors_ = xp.asarray(
            np.asarray(errors), dtype=dtype, device=ctx.device
        )
        if all(isinstance(m, _BaseDecisionTree) for m in members):
            cached_stack(self, members, ctx, values=_vote_table(betas))
            for m in members:  # predict walks the stack above, not theirs
                m.__dict__.pop("_cache_stack", None)  # (nor rebuilt at unpickling)

    def _after_load(self):
        """The vote stack of tree members (:class:`StackOwner`)."""
        members = getattr(self, "estimators_", [])
        if members and all(isinstance(m, _BaseDecisionTree) for m in members):
            votes = _vote_table(self._betas_host())  # float64 host betas
            restore_stack(self, members, self.n_features_in_, values=votes)

    # ------------------------------------------------------------ predict
    def _staged_votes(self, ctx, X):
        """Normalised votes ``Σ_{s<=t} β_s [h_s = k] / Σ_{s<=t} β_s`` after each
        round. Tree members are walked all at once from one stack on the
        device whose leaf values are the votes ``β_t · onehot(class)``."""
        xp = ctx.xp
        betas = np.asarray(self._betas_host(), dtype=np.float64)
        totals = np.cumsum(betas)
        if all(isinstance(m, _BaseDecisionTree) for m in self.estimators_):
            stack = cached_stack(self, self.estimators_, ctx, values=_vote_table(betas))
            votes = None
            for a, rows in stack.chunks(X, xp=xp):
                for r in range(int(rows.shape[0])):
                    votes = rows[r, ...] if votes is None else votes + rows[r, ...]
                    yield votes / float(totals[a + r])
            return
        K = int(self.classes_.shape[0])
        ks = xp.arange(K, device=ctx.device)
        data, votes = Training(ctx, X), None
        for m, b, total in zip(self.estimators_, betas, totals):
            codes = _member_codes(m, data)
            v = float(b) * xp.astype(codes[:, None] == ks[None, :], X.dtype)
            votes = v if votes is None else votes + v
            yield votes / float(total)

    def _betas_host(self):
        return to_numpy(self.estimator_weights_)

    def _votes(self, ctx, X):
        out = None
        for out in self._staged_votes(ctx, X):
            pass
        return out

    def decision_function(self, X: ArrayLike) -> Array:
        """scikit-learn's SAMME scores: member ``t`` adds ``β_t`` to the class it
        predicts and ``−β_t/(K−1)`` to the others, divided by ``Σ β_t``; each
        row sums to 0. Shape (n, K), or (n,) for two classes (the score of
        class 1, positive when it wins)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(self._decision(self._votes(ctx, X)))

    @staticmethod
    def _decision(V):
        K = int(V.shape[1])
        S = (K * V - 1.0) / (K - 1.0)  # V_k − (1 − V_k)/(K − 1)
        if K == 2:
            return S[:, 1] - S[:, 0]
        return S

    def _proba(self, V, xp):
        """scikit-learn's SAMME probabilities from the normalised votes ``V``."""
        D = self._decision(V)
        if len(D.shape) == 1:
            D = xp.stack([-D / 2, D / 2], axis=1)
        else:
            D = D / (int(D.shape[1]) - 1)
        return softmax(D, xp=xp, axis=1)

    def predict(self, X: ArrayLike) -> Array:
        """The class with the largest weighted vote."""
        ctx, X = self._validate_predict_data(X)
        return decode_labels(
            self.classes_, ctx.xp.argmax(self._votes(ctx, X), axis=1), ctx
        )

    def predict_proba(self, X: ArrayLike) -> Array:
        """scikit-learn's SAMME probabilities: softmax of the decision scores
        / (K − 1) (for two classes, of ``±decision/2``)."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(self._proba(self._votes(ctx, X), ctx.xp))

    def predict_log_proba(self, X: ArrayLike) -> Array:
        """Logarithm of :meth:`predict_proba`."""
        ctx, X = self._validate_predict_data(X)
        return ctx.out(ctx.xp.log(self._proba(self._votes(ctx, X), ctx.xp)))

    def staged_predict(self, X):
        """Predictions after each boosting round (a generator)."""
        ctx, X = self._validate_predict_data(X)
        for F in self._staged_votes(ctx, X):
            yield decode_labels(self.classes_, ctx.xp.argmax(F, axis=1), ctx)

    def staged_decision_function(self, X: ArrayLike):
        """:meth:`decision_function` after each boosting round (a generator)."""
        ctx, X = self._validate_predict_data(X)
        for F in self._staged_votes(ctx, X):
            yield ctx.out(self._decision(F))

    def staged_predict_proba(self, X: ArrayLike):
        """:meth:`predict_proba` after each boosting round (a generator)."""
        ctx, X = self._validate_predict_data(X)
        for F in self._staged_votes(ctx, X):
            yield ctx.out(self._proba(F, ctx.xp))

    def staged_score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ):
        """Accuracy after each boosting round (a generator of floats)."""
        from xpml.metrics import accuracy_score

        for pred in self.staged_predict(X):
            yield accuracy_score(y, pred, sample_weight=sample_weight)

    # ------------------------------------------- scikit-learn's ensemble API
    @property
    def n_classes_(self) -> int:
        """Number of classes."""
        check_is_fitted(self, "classes_")
        return int(self.classes_.shape[0])

    @property
    def estimator_(self):
        """The template every member is cloned from (after ``fit``)."""
        check_is_fitted(self, "estimators_")
        return self._template()

    def _template(self):
        if self.estimator is None:
            return DecisionTreeClassifier(max_depth=1)
        return self.estimator

    @property
    def feature_importances_(self):
        """β-weighted mean of the members' feature importances (tree members)."""
        check_is_fitted(self, "estimators_")
        b = self._betas_host()
        imp = sum(
            bi * to_numpy(m.feature_importances_) for bi, m in zip(b, self.estimators_)
        )
        return imp / b.sum()


@dataclasses.dataclass
class _Rounds(Training):
    """Training data of the boosting rounds, with the classes."""

    classes: Any = None
    K: int = 0
    positive: Any = None  # indices of the samples of positive weight
