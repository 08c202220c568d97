"""Bagging and random forests: bootstrap counts as sample weights, out-of-bag scores."""

from __future__ import annotations

import dataclasses
import warnings
from numbers import Integral
from typing import Any

import numpy as np

from xpml._backend import to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from xpml.ensemble._base import (
    FitPredict,
    Members,
    Training,
    fit_member,
    joblib_for,
    member_predict,
    parallel_map,
    progress_bar,
    takes_sample_weight,
)
from xpml.tree._classes import (
    DecisionTreeClassifier,
    DecisionTreeRegressor,
    _BaseDecisionTree,
)
from xpml.tree._grow import grow
from xpml.tree._stack import (
    StackOwner,
    cached_stack,
    restore_stack,
    stack_trees,
)
from xpml.utils._array_api import device, itemsize
from xpml.utils._param_validation import Interval
from xpml.utils.validation import (
    AllowNaN,
    check_is_fitted,
    check_random_state,
    decode_labels,
    is_multi_output,
    is_sparse,
)

__all__ = [
    "BaggingClassifier",
    "BaggingRegressor",
    "RandomForestClassifier",
    "RandomForestRegressor",
]

# trees grown together in one level-wise pass (:func:`_group_size`): up to
# _GROUP_MAX while their bootstrap entries stay near _GROUP_ENTRIES (bigger
# passes pay the per-block overhead fewer times), at least _GROUP_MIN, and no
# more than one group per parallel worker
_GROUP_MIN, _GROUP_MAX, _GROUP_ENTRIES = 25, 100, 1 << 21


def _group_size(T, n, n_jobs):
    """Trees per level-wise pass for ``T`` trees on ``n`` rows."""
    size = max(_GROUP_MIN, min(_GROUP_MAX, _GROUP_ENTRIES // max(1, n)))
    joblib = joblib_for(n_jobs)
    if joblib is None:  # the groups run one after another
        return size
    workers = joblib.effective_n_jobs(n_jobs)  # an active backend's, for None
    return max(1, min(size, -(-T // workers))) if workers > 1 else size


def _bootstrap_counts(n, n_draw, bootstrap, seed):
    """How often each sample is drawn, and the generator that continues the
    tree's own random stream (its feature subsets)."""
    rng = np.random.default_rng(seed)
    if bootstrap:
        counts = np.bincount(rng.integers(0, n, n_draw), minlength=n)
    else:
        counts = np.zeros(n, dtype=np.int64)
        counts[rng.choice(n, n_draw, replace=False)] = 1
    return counts, rng


def _full_proba(est, data, K):
    """``predict_proba`` of a member fitted on a subset of the class codes,
    spread to all K classes (one-hot predictions without ``predict_proba``)."""
    xp, dev = data.ctx.xp, data.ctx.device
    cls = to_numpy(est.classes_).astype(np.int64)
    if hasattr(est, "predict_proba"):
        P = member_predict(est, data, "predict_proba")
    else:
        pred = xp.astype(member_predict(est, data), xp.int64)
        P = xp.astype(pred[:, None] == xp.arange(K, device=dev)[None, :], data.X.dtype)
        cls = np.arange(K)
    M = np.zeros((len(cls), K))
    M[np.arange(len(cls)), cls] = 1.0
    P = xp.astype(P, data.X.dtype)
    return P @ xp.asarray(M, dtype=P.dtype, device=dev)


@dataclasses.dataclass(frozen=True)
class _Job:
    """One fit's data, weights, classes and per-member draws."""

    data: Training
    sw: Any
    K: int
    seeds: np.ndarray
    draws: list  # (bootstrap counts, generator continuing the member's stream)
    missing: bool = False  # X holds NaN (forests take missing values)

    @property
    def counts(self):
        return np.stack([c for c, _ in self.draws])


class _BaseBagging(Members, StackOwner, BaseEstimator):
    """Fit, out-of-bag scoring and averaging shared by bagging and forests."""

    _base_constraints = {
        "n_estimators": [Interval(Integral, 1, None, closed="left")],
        "bootstrap": ["boolean"],
        "oob_score": ["boolean"],
        "n_jobs": [Interval(Integral, None, -1), Interval(Integral, 1, None), None],
        "random_state": ["random_state"],
        "progress": ["boolean"],
        "warm_start": ["boolean"],
    }

    # ------------------------------------------- scikit-learn's ensemble API
    @property
    def estimator_(self):
        """The template every member is cloned from (after ``fit``)."""
        check_is_fitted(self, "estimators_")
        return self._template()

    @property
    def estimators_samples_(self):
        """Rows drawn for each member, repeats included (scikit-learn's
        meaning): a list of int32 index arrays in the inputs' library,
        regenerated from the members' seeds (nothing is kept per row)."""
        check_is_fitted(self, "estimators_")
        from array_api_compat import array_namespace

        draws, ref = self._draws, self.estimators_features_[0]
        xp, n = array_namespace(ref), draws["n"]
        rows = np.arange(n, dtype=np.int32)
        out = []
        for s in draws["seeds"]:
            counts, _ = _bootstrap_counts(n, draws["n_draw"], draws["bootstrap"], s)
            out.append(xp.asarray(np.repeat(rows, counts), device=device(ref)))
        return out

    def _n_draw(self, n):
        ms = self.max_samples
        if ms is None:
            return n
        if isinstance(ms, float):
            return max(1, int(ms * n))
        if ms > n:
            raise ValueError(
                f"max_samples={ms} is larger than the number of samples ({n}); "
                f"it must be an int in [1, n_samples] or a fraction in (0, 1]"
            )
        return int(ms)

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Fit ``n_estimators`` members on bootstrap samples; returns self.

        Each member sees every training point with weight
        ``sample_weight · (number of times the point was drawn)``; a member
        whose ``fit`` takes no ``sample_weight`` (e.g. a scikit-learn
        ``Pipeline``) is fitted on the drawn rows, repeats included.
        """
        clf = isinstance(self, ClassifierMixin)
        # forests take a 2-D y (one column per output); bagging does not
        multi = isinstance(self, _ForestMixin) and is_multi_output(y)
        target = "classes" if clf else "continuous"
        if multi:
            target = "multi_classes" if clf else "multi"
        nan = self._finite_check(X)
        ctx, X, y, sw = self._validate_fit_data(
            X, y, sample_weight, target=target, ensure_finite=nan
        )
        if isinstance(self, _ForestMixin):
            self.n_outputs_ = int(y.shape[1]) if multi else 1
        if self.oob_score and not self.bootstrap:
            raise ValueError(
                "oob_score=True needs bootstrap=True (without bootstrap there are "
                "no out-of-bag samples)"
            )
        n = int(X.shape[0])
        K = int(self.classes_.shape[0]) if clf and not multi else 0
        if clf and multi:  # classes per output
            K = tuple(int(c.shape[0]) for c in self.classes_)
        kept = self._kept_members()
        seeds = check_random_state(self.random_state).integers(
            0, 2**31 - 1, size=self.n_estimators
        )
        if kept:  # the kept members' own seeds (random_state may be None)
            seeds[: len(kept)] = self._draws["seeds"][: len(kept)]
        draws = [
            _bootstrap_counts(n, self._n_draw(n), self.bootstrap, int(s)) for s in seeds
        ]
        missing = nan is not True and nan.found
        job = _Job(Training(ctx, X, y), sw, K, seeds, draws, missing)
        self._draws = {
            "seeds": [int(s) for s in seeds],
            "n": n,
            "n_draw": self._n_draw(n),
            "bootstrap": bool(self.bootstrap),
        }
        self._set_features(int(X.shape[1]), seeds, ctx)
        new = self._fit_new(job, kept, sample_weight)
        self.estimators_ = kept + new
        if self.oob_score and (new or not hasattr(self, "oob_score_")):
            self._set_oob(X, y, job.counts == 0, ctx, K, missing=missing)
        return self._fitted(ctx)

    def _finite_check(self, X):
        """``ensure_finite`` of the validation: forests take NaN (missing
        values, routed by their trees) in dense ``X``, other ensembles
        refuse it."""
        if self._xpml_tags.get("allow_nan", False) and not is_sparse(X):
            return AllowNaN(type(self).__name__)
        return True

    def _predict_data(self, X):
        """Validated ``X`` for prediction, and whether it holds NaN."""
        nan = self._finite_check(X)
        ctx, X = self._validate_predict_data(X, ensure_finite=nan)
        return ctx, X, nan is not True and nan.found

    def _kept_members(self):
        """``warm_start``: the members of the previous fit, kept (scikit-learn's
        rules: fewer ``n_estimators`` than members is an error, as many only
        warns); ``[]`` otherwise. Member ``t``'s seed is the ``t``-th draw of
        ``random_state`` either way, so an int seed grows the same ensemble
        in one fit or several. Scores of an earlier fit go unless
        ``oob_score`` (bagging refuses ``oob_score`` with ``warm_start``, as
        scikit-learn)."""
        if not self.oob_score:
            for name in ("oob_score_", "oob_decision_function_", "oob_prediction_"):
                self.__dict__.pop(name, None)
        elif self.warm_start and isinstance(self, _Bagging):
            raise ValueError(
                "oob_score=True is not available with warm_start=True for bagging "
                "(scikit-learn's rule); set one of them to False"
            )
        if not self.warm_start or not hasattr(self, "estimators_"):
            return []
        kept = list(self.estimators_)
        if self.n_estimators < len(kept):
            raise ValueError(
                f"n_estimators={self.n_estimators} must be larger or equal to "
                f"len(estimators_)={len(kept)} when warm_start==True"
            )
        if self.n_estimators == len(kept):
            warnings.warn(
                "Warm-start fitting without increasing n_estimators does not "
                "fit new trees.",
                UserWarning,
                stacklevel=3,
            )
        return kept

    def _fit_new(self, job, kept, sample_weight):
        """Fit the members after the ``len(kept)`` kept ones."""
        first = len(kept)
        if first == len(job.seeds):
            return []
        bar = progress_bar(self.progress, len(job.seeds) - first, type(self).__name__)
        template = self._template()
        if isinstance(template, _BaseDecisionTree) and not self._subsets:
            tail = dataclasses.replace(
                job, seeds=job.seeds[first:], draws=job.draws[first:]
            )
            new = self._grow_trees(tail, template, bar)
        else:
            new = self._fit_members(job, template, bar, sample_weight, first=first)
        if bar is not None:
            bar.close()
        return new

    def _grow_trees(self, job, template, bar):
        """Grow the trees in groups (:func:`_group_size`), level by level; keep them
        stacked on the compute device for prediction."""
        ctx, X, y = job.data.ctx, job.data.X, job.data.y
        xp, T = ctx.xp, len(job.seeds)
        n, d = int(X.shape[0]), int(X.shape[1])
        n_out = int(y.shape[1]) if len(y.shape) == 2 else 1
        params = template._grow_params(n, d, job.K, n_out)
        positive = to_numpy(job.sw > 0)
        # regression and the random splitter keep groups of _GROUP_MIN: their
        # trees depend on the grouping (regression's last bits; the random
        # splitter's draws follow the node blocks), so it must not follow n_jobs;
        # the best splitter's classification trees do not (see xpml.tree._grow)
        free = job.K and params.splitter == "best"
        size = _group_size(T, n, self.n_jobs) if free else _GROUP_MIN
        groups = [(a, min(T, a + size)) for a in range(0, T, size)]

        def work(g):
            a, b = g
            c = job.counts[a:b] * positive
            nz = [np.nonzero(row)[0] for row in c]
            ids = xp.asarray(np.concatenate(nz), device=ctx.device)
            mult = np.concatenate([row[z] for row, z in zip(c, nz)])
            w = xp.take(job.sw, ids) * xp.asarray(
                mult, dtype=job.sw.dtype, device=ctx.device
            )
            lens = np.asarray([len(z) for z in nz])
            rngs = [r for _, r in job.draws[a:b]]
            return grow(
                X, y, ids, w, lens, params=params, xp=xp, rngs=rngs, missing=job.missing
            )

        weights = [b - a for a, b in groups]
        res = parallel_map(
            work, groups, n_jobs=self.n_jobs, progress=bar, weights=weights
        )
        trees = [tr for group, _ in res for tr in group]
        self._grow_stats = {
            k: sum(stats[k] for _, stats in res) for k in ("node_blocks", "redraws")
        }
        members = []
        for t, tree in enumerate(trees):
            est = clone(template).set_params(random_state=int(job.seeds[t]))
            est.n_features_in_ = d
            est.n_outputs_ = n_out
            if job.K:
                est.classes_ = self.classes_
                multi = isinstance(job.K, tuple)
                est.n_classes_ = np.asarray(job.K) if multi else job.K
            tree = est._limit_leaves(tree)
            trees[t] = tree
            est._set_tree(tree, ctx, X.dtype, stack=False)
            members.append(est)
        fdt = np.float32 if itemsize(X.dtype, xp) == 4 else np.float64
        sources = [m.tree_feature_ for m in members]
        self._cache_stack = stack_trees(
            trees, xp, ctx.device, sources, np_dtype=fdt, n_features=d
        )
        return members

    def _after_load(self):
        """The forest's stack of its trees (:class:`StackOwner`)."""
        members = getattr(self, "estimators_", [])
        trees = all(isinstance(m, _BaseDecisionTree) for m in members)
        if members and trees and not getattr(self, "_subsets", False):
            restore_stack(self, members, self.n_features_in_)

    def _set_features(self, d, seeds, ctx):
        """``estimators_features_``: the columns each member sees (bagging's
        ``max_features``, ``bootstrap_features``, as scikit-learn), drawn from
        a generator of its own per member: the samples' draws do not change."""
        mf, boot = 1.0, False
        if isinstance(self, _Bagging):  # a forest's max_features is per node
            mf, boot = self.max_features, bool(self.bootstrap_features)
        k = max(1, int(mf * d)) if isinstance(mf, float) else int(mf)
        if k > d:
            raise ValueError(
                f"max_features={mf} asks for {k} features but X has {d}; it must "
                f"be an int in [1, n_features] or a fraction in (0, 1]"
            )
        self._subsets = boot or k < d
        feats = []
        for s in seeds:
            if not self._subsets:
                feats.append(np.arange(d))
                continue
            rng = np.random.default_rng([int(s), 1])
            f = rng.integers(0, d, k) if boot else rng.choice(d, k, replace=False)
            feats.append(np.sort(f))
        xp = ctx.xp
        if not self._subsets:  # every column: made on the device, nothing uploaded
            every = xp.arange(d, device=ctx.device)
            self.estimators_features_ = [every for _ in seeds]
            return
        self.estimators_features_ = [xp.asarray(f, device=ctx.device) for f in feats]

    def _columns(self, data, t):
        """``data`` restricted to member ``t``'s columns (itself without subsets)."""
        if not getattr(self, "_subsets", False):
            return data
        xp, ctx = data.ctx.xp, data.ctx
        cols = ctx.take(self.estimators_features_[t])
        return Training(ctx, xp.take(data.X, cols, axis=1), data.y)

    def _fit_members(self, job, template, bar, sample_weight, *, first=0):
        """Fit any estimator: bootstrap counts as sample weights where ``fit``
        takes them, else the drawn rows."""
        xp, dev = job.data.ctx.xp, job.data.ctx.device
        weighted = takes_sample_weight(template)
        if not weighted and sample_weight is not None:
            raise ValueError(
                f"sample_weight was given but the estimator {type(template).__name__}'s "
                f"fit takes no sample_weight; drop it or use an estimator that takes it"
            )

        def work(t):
            est = clone(template)
            if "random_state" in est.get_params(deep=False):
                est.set_params(random_state=int(job.seeds[t]))
            data = self._columns(job.data, t)
            if weighted:
                w = job.sw * xp.asarray(job.counts[t], dtype=job.sw.dtype, device=dev)
                return fit_member(est, data, weight=w)
            rows = np.repeat(np.arange(job.counts.shape[1]), job.counts[t])
            return fit_member(est, data, rows=rows)

        return parallel_map(
            work, list(range(first, len(job.seeds))), n_jobs=self.n_jobs, progress=bar
        )

    @property
    def feature_importances_(self):
        """Mean of the trees' importances over the trees with a split,
        normalised to sum 1 (scikit-learn's rule); tree members only."""
        from array_api_compat import array_namespace

        check_is_fitted(self, "estimators_")
        trees = [m for m in self.estimators_ if isinstance(m, _BaseDecisionTree)]
        if len(trees) < len(self.estimators_):
            raise AttributeError(
                "feature_importances_ exists only when every member is a decision tree"
            )
        split = []
        for m, f in zip(trees, self.estimators_features_):
            if m.node_count_ > 1:
                full = np.zeros(self.n_features_in_)
                np.add.at(full, to_numpy(f), to_numpy(m.feature_importances_))
                split.append(full)
        imp = np.mean(split, axis=0) if split else np.zeros(self.n_features_in_)
        imp = imp / imp.sum() if imp.sum() > 0 else imp
        v = trees[0].tree_value_
        return array_namespace(v).asarray(imp, dtype=v.dtype, device=device(v))

    # ------------------------------------------------------------ averaging
    def _member_sum(self, X, ctx, K, mask=None, missing=False):
        """Σ_t mask[t, i] · output of member t at row i (probabilities or
        predictions); also returns Σ_t mask[t, i]. ``missing``: ``X`` holds
        NaN (forests only)."""
        xp = ctx.xp
        n = int(X.shape[0])
        members = self.estimators_
        total = None
        subsets = getattr(self, "_subsets", False)
        if not subsets and all(isinstance(m, _BaseDecisionTree) for m in members):
            stack = cached_stack(self, members, ctx)
            total = stack.value_sum(X, xp=xp, mask=mask, missing=missing)
        else:
            data = Training(ctx, X)
            for t, m in enumerate(members):
                dt = self._columns(data, t)
                out = _full_proba(m, dt, K) if K else member_predict(m, dt)
                out = xp.astype(out, X.dtype)
                if mask is not None:
                    mk = xp.asarray(mask[t], dtype=out.dtype, device=ctx.device)
                    out = out * (mk[:, None] if K else mk)
                total = out if total is None else total + out
        count = np.full(n, len(members)) if mask is None else mask.sum(axis=0)
        return total, count

    def _set_oob(self, X, y, oob, ctx, K, *, missing=False):
        xp = ctx.xp
        if len(y.shape) == 2:
            return self._set_oob_multi(X, y, oob, ctx, K, missing=missing)
        total, count = self._member_sum(X, ctx, K, mask=oob, missing=missing)
        has = count > 0
        cnt = xp.asarray(np.where(has, count, 1), dtype=X.dtype, device=ctx.device)
        nan = xp.asarray(np.where(has, 0.0, np.nan), dtype=X.dtype, device=ctx.device)
        hd = xp.asarray(has, device=ctx.device)
        if K:
            P = total / cnt[:, None] + nan[:, None]
            hit = xp.astype(xp.argmax(total, axis=1) == y, X.dtype)
            self.oob_decision_function_ = P
            self.oob_score_ = float(
                xp.sum(xp.where(hd, hit, xp.zeros_like(hit)))
            ) / max(1, int(has.sum()))
        else:
            pred = total / cnt + nan
            yh = y[hd]
            ph = pred[hd]
            ss_res = xp.sum((yh - ph) ** 2)
            ss_tot = xp.sum((yh - xp.mean(yh)) ** 2)
            self.oob_prediction_ = pred
            self.oob_score_ = float(1.0 - ss_res / ss_tot) if float(ss_tot) > 0 else 0.0

    def _set_oob_multi(self, X, y, oob, ctx, K, *, missing=False):
        """Out-of-bag attributes of a multi-output forest, in scikit-learn's
        shapes: ``oob_decision_function_`` (n, 2, n_outputs) and the subset
        accuracy (binary 0/1 outputs only, scikit-learn's rule), or
        ``oob_prediction_`` (n, n_outputs) and the R² averaged over outputs."""
        xp = ctx.xp
        if K and not all(_zero_one(c) for c in self.classes_):
            raise ValueError(
                "The type of target cannot be used to compute OOB estimates. Got "
                "multiclass-multioutput while only the following are supported: "
                "continuous, continuous-multioutput, binary, multiclass, "
                "multilabel-indicator. (oob_score=True with a 2-D y needs every "
                "output's labels to be 0 and 1.)"
            )
        total, count = self._member_sum(X, ctx, K, mask=oob, missing=missing)
        has = count > 0
        cnt = xp.asarray(np.where(has, count, 1), dtype=X.dtype, device=ctx.device)
        nan = xp.asarray(np.where(has, 0.0, np.nan), dtype=X.dtype, device=ctx.device)
        hd = xp.asarray(has, device=ctx.device)
        mean = total / cnt[:, None, None] + nan[:, None, None]
        if K:
            self.oob_decision_function_ = xp.permute_dims(mean, (0, 2, 1))
            hit = xp.all(xp.argmax(total, axis=2) == y, axis=1)
            hit = xp.where(hd, xp.astype(hit, X.dtype), xp.zeros_like(cnt))
            self.oob_score_ = float(xp.sum(hit)) / max(1, int(has.sum()))
            return
        pred = mean[:, :, 0]
        yh, ph = y[hd], pred[hd]
        ss_res = xp.sum((yh - ph) ** 2, axis=0)
        ss_tot = xp.sum((yh - xp.mean(yh, axis=0)) ** 2, axis=0)
        res, tot = to_numpy(xp.stack([ss_res, ss_tot])).astype(np.float64)
        # scikit-learn's r2_score: a constant output scores 1 if fitted exactly
        r2 = np.where(tot > 0, 1.0 - res / np.where(tot > 0, tot, 1.0), 0.0)
        r2 = np.where((tot == 0) & (res == 0), 1.0, r2)
        self.oob_prediction_ = pred
        self.oob_score_ = float(np.mean(r2))


def _zero_one(classes):
    """True when an output's labels are 0 and 1 (scikit-learn's multilabel)."""
    c = to_numpy(classes)
    return c.dtype.kind in "biuf" and c.tolist() == [0, 1]


def _outputs(est):
    return getattr(est, "n_outputs_", 1)


class _BaggingClassifierMixin(ClassifierMixin):
    @property
    def n_classes_(self) -> int | list:
        """Number of classes (a list, one per output, for a multi-output forest)."""
        check_is_fitted(self, "classes_")
        if _outputs(self) > 1:
            return [int(c.shape[0]) for c in self.classes_]
        return int(self.classes_.shape[0])

    def score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> float:
        """Mean accuracy; for a multi-output forest, scikit-learn's: the
        fraction of rows with every output right, for 0/1 outputs only."""
        if _outputs(self) == 1:
            return super().score(X, y, sample_weight)
        from xpml.tree._classes import _subset_accuracy

        return _subset_accuracy(self.predict(X), y, sample_weight)

    def predict_log_proba(self, X: ArrayLike) -> Array | list:
        """Logarithm of :meth:`predict_proba` (``-inf`` where no member votes)."""
        from array_api_compat import array_namespace

        P = self.predict_proba(X)
        if isinstance(P, list):
            return [array_namespace(p).log(p) for p in P]
        return array_namespace(P).log(P)

    def predict_proba(self, X: ArrayLike) -> Array | list:
        """Mean of the members' class probabilities, shape (n, K); a list of
        (n, K_o) arrays, one per output, for a multi-output forest."""
        ctx, X, missing = self._predict_data(X)
        if _outputs(self) > 1:
            K = tuple(self.n_classes_)
            total, _ = self._member_sum(X, ctx, K, missing=missing)
            P = total / len(self.estimators_)
            return [ctx.out(P[:, o, :k]) for o, k in enumerate(self.n_classes_)]
        K = int(self.classes_.shape[0])
        total, count = self._member_sum(X, ctx, K, missing=missing)
        return ctx.out(total / len(self.estimators_))

    def predict(self, X: ArrayLike) -> Array:
        """The class with the largest mean probability; (n, n_outputs) labels
        for a multi-output forest."""
        ctx, X, missing = self._predict_data(X)
        if _outputs(self) > 1:
            from xpml.tree._classes import _stack_labels

            K = tuple(self.n_classes_)
            total, _ = self._member_sum(X, ctx, K, missing=missing)
            return _stack_labels(
                [
                    decode_labels(c, ctx.xp.argmax(total[:, o, :k], axis=1), ctx)
                    for o, (c, k) in enumerate(zip(self.classes_, self.n_classes_))
                ]
            )
        K = int(self.classes_.shape[0])
        total, _ = self._member_sum(X, ctx, K, missing=missing)
        return decode_labels(self.classes_, ctx.xp.argmax(total, axis=1), ctx)


class _BaggingRegressorMixin(RegressorMixin):
    def predict(self, X: ArrayLike) -> Array:
        """Mean of the members' predictions; (n, n_outputs) for a
        multi-output forest."""
        ctx, X, missing = self._predict_data(X)
        total, _ = self._member_sum(X, ctx, 0, missing=missing)
        if _outputs(self) > 1:
            total = ctx.xp.reshape(total, (int(total.shape[0]), _outputs(self)))
        return ctx.out(total / len(self.estimators_))


_BAGGING_DOC_PARAMS = """
    n_estimators : int, default=10
    max_samples : int, float or None, default=1.0
        Points drawn per member (float: fraction of n).
    max_features : int or float, default=1.0
        Columns each member sees (float: ``max(1, int(max_features · d))``),
        as scikit-learn; listed per member in ``estimators_features_`` and
        used again at prediction. Tree members with a column subset are
        grown one by one instead of in groups.
    bootstrap : bool, default=True
        Draw with replacement (False: a subsample without replacement).
    bootstrap_features : bool, default=False
        Draw the columns with replacement.
    oob_score : bool, default=False
        Score each point with the members that did not draw it.
    n_jobs : int or None, default=None
        Members fitted in parallel through joblib threads (sequential when
        joblib is not installed or ``n_jobs`` is None or 1).
    random_state : int, numpy Generator or None
        One seed per member is drawn from it on the host; member ``t``'s
        bootstrap and feature subsets come from its seed, so a seed gives the
        same ensemble on every backend and for every ``n_jobs``.
    warm_start : bool, default=False
        A later ``fit`` keeps the fitted members and adds members up to
        ``n_estimators`` (fewer is an error, as many warns and fits nothing).
    progress : bool, default=False
        Show a progress bar (tqdm when installed, else a counter on stderr).
"""


class _Bagging(_BaseBagging):
    """Parameters shared by :class:`BaggingClassifier` and :class:`BaggingRegressor`."""

    _parameter_constraints = {
        **_BaseBagging._base_constraints,
        "estimator": [None, FitPredict],
        "max_samples": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
            None,
        ],
        "max_features": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
        ],
        "bootstrap_features": ["boolean"],
    }
    _xpml_tags = {
        "test_params": {"n_estimators": 5, "random_state": 0},
        "sklearn_xfail": {
            "check_sample_weight_equivalence_on_dense_data": "bootstrap draws index the rows, so repeated rows are drawn differently from "
            "integer weights",
        },
    }

    def __init__(
        self,
        estimator=None,
        *,
        n_estimators=10,
        max_samples=1.0,
        max_features=1.0,
        bootstrap=True,
        bootstrap_features=False,
        oob_score=False,
        n_jobs=None,
        random_state=None,
        warm_start=False,
        progress=False,
    ):
        self.estimator = estimator
        self.n_estimators = n_estimators
        self.max_samples = max_samples
        self.max_features = max_features
        self.bootstrap = bootstrap
        self.bootstrap_features = bootstrap_features
        self.oob_score = oob_score
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.warm_start = warm_start
        self.progress = progress


class BaggingClassifier(_BaggingClassifierMixin, _Bagging):
    __doc__ = (
        """Bootstrap aggregation of classifiers (default: full decision trees).

    Each member is fitted on the whole training set with the bootstrap counts
    as sample weights (a point drawn twice weighs 2, one never drawn weighs 0);
    the ensemble averages the members' class probabilities.

    Parameters
    ----------
    estimator : classifier with ``fit`` and ``predict``, default=None
        None: :class:`~xpml.tree.DecisionTreeClassifier` (trees are grown all
        together, level by level). Any other estimator (xpml's, scikit-learn's,
        a ``Pipeline``) gets the bootstrap counts as ``sample_weight`` when its
        ``fit`` takes it, else the drawn rows (repeats included)."""
        + _BAGGING_DOC_PARAMS
        + """
    Attributes
    ----------
    estimators_ : list of fitted members
    classes_ : array (K,)
    oob_score_ : float
        Accuracy of the out-of-bag votes (points never out of bag are skipped).
    oob_decision_function_ : array (n, K)
        Out-of-bag mean probabilities (NaN for points never out of bag).
    feature_importances_ : array (d,)
        Mean of the trees' importances (tree members only).

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.ensemble import BaggingClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2)); y = (X[:, 0] + X[:, 1] > 0).astype(int)
    >>> bag = BaggingClassifier(n_estimators=20, oob_score=True, random_state=0).fit(X, y)
    >>> bool(bag.oob_score_ > 0.85), bag.predict(np.array([[2.0, 2.0]])).tolist()
    (True, [1])
    """
    )

    def _template(self):
        return DecisionTreeClassifier() if self.estimator is None else self.estimator

    @property
    def decision_function(self):
        """Mean of the members' ``decision_function`` (each on its own
        columns), as scikit-learn; only when the estimator has one."""
        if not hasattr(self._template(), "decision_function"):
            raise AttributeError(
                f"decision_function is not available: the estimator "
                f"{type(self._template()).__name__} has no decision_function"
            )
        return self._mean_decision

    def _mean_decision(self, X: ArrayLike) -> Array:
        ctx, X = self._validate_predict_data(X)
        xp, data, total = ctx.xp, Training(ctx, X), None
        for t, m in enumerate(self.estimators_):
            out = member_predict(m, self._columns(data, t), "decision_function")
            out = xp.astype(out, X.dtype)
            total = out if total is None else total + out
        return ctx.out(total / len(self.estimators_))


class BaggingRegressor(_BaggingRegressorMixin, _Bagging):
    __doc__ = (
        """Bootstrap aggregation of regressors (default: full regression trees).

    Parameters
    ----------
    estimator : regressor with ``fit`` and ``predict``, default=None
        None: :class:`~xpml.tree.DecisionTreeRegressor`; others as for
        :class:`BaggingClassifier`."""
        + _BAGGING_DOC_PARAMS
        + """
    Attributes
    ----------
    estimators_ : list of fitted members
    oob_score_ : float
        R² of the out-of-bag predictions.
    oob_prediction_ : array (n,)
        NaN for points never out of bag.
    feature_importances_ : array (d,)

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.ensemble import BaggingRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(300, 1)); y = np.sin(X[:, 0])
    >>> reg = BaggingRegressor(n_estimators=20, random_state=0).fit(X, y)
    >>> bool(abs(reg.predict(np.array([[1.0]]))[0] - np.sin(1.0)) < 0.1)
    True
    """
    )

    def _template(self):
        return DecisionTreeRegressor() if self.estimator is None else self.estimator


_FOREST_TREE_PARAMS = (
    "criterion",
    "max_depth",
    "min_samples_split",
    "min_samples_leaf",
    "min_weight_fraction_leaf",
    "min_impurity_decrease",
    "max_features",
    "max_leaf_nodes",
)

_FOREST_DOC_PARAMS = """
    max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf, \
min_impurity_decrease, max_leaf_nodes
        Passed to every tree (see :class:`~xpml.tree.DecisionTreeClassifier`).
    bootstrap : bool, default=True
    oob_score : bool, default=False
    max_samples : int, float or None, default=None
        Bootstrap size (None: n).
    n_jobs : int or None, default=None
        Groups of trees grown in parallel through joblib threads.
    random_state : int, numpy Generator or None
        One seed per tree, drawn on the host: tree ``t`` (bootstrap and node
        feature subsets) depends only on its seed, so a seed gives the same
        forest on every backend and for every ``n_jobs``.
    warm_start : bool, default=False
        A later ``fit`` keeps the fitted trees and grows more up to
        ``n_estimators`` (fewer is an error, as many warns and grows nothing).
    progress : bool, default=False
        Show a progress bar (tqdm when installed).
"""


class _ForestMixin:
    """What forests add to bagged trees."""

    @property
    def estimator(self):
        """The tree template (scikit-learn's forests hold a plain tree here;
        the forest's tree parameters are in :attr:`estimator_`)."""
        return type(self._template())()

    def apply(self, X: ArrayLike) -> Array:
        """Leaf reached by every row of ``X`` in every tree, in each tree's own
        node numbering (as ``estimators_[t].apply``): shape (n, n_estimators).
        All trees are walked at once on the stack kept for prediction."""
        ctx, X, missing = self._predict_data(X)
        xp = ctx.xp
        stack = cached_stack(self, self.estimators_, ctx)
        leaves = stack.leaves(X, xp=xp, missing=missing) - stack.table.roots[:, None]
        return ctx.out(xp.permute_dims(leaves, (1, 0)))


class RandomForestClassifier(_ForestMixin, _BaggingClassifierMixin, _BaseBagging):
    __doc__ = (
        """Random forest: bagged trees with a fresh random feature subset at every node.

    Trees are grown together, level by level (see :mod:`xpml.tree._grow`), in
    groups of 25; each node searches ``max_features`` features drawn afresh
    (constant features do not count, as in scikit-learn).

    Parameters
    ----------
    n_estimators : int, default=100
    criterion : {"gini", "entropy", "log_loss"}, default="gini"
    max_features : int, float, {"sqrt", "log2"} or None, default="sqrt"
        Features per node: ``√d`` by default."""
        + _FOREST_DOC_PARAMS
        + """
    Attributes
    ----------
    estimators_ : list of DecisionTreeClassifier
    classes_ : array (K,), or list of arrays (one per output)
        A list for a 2-D ``y`` with several columns (multi-output); then
        ``predict_proba`` returns a list of (n, K_o) arrays and ``predict``
        (n, n_outputs) labels (scikit-learn's meaning).
    n_classes_ : int, or list of int (one per output)
    n_outputs_ : int
    feature_importances_ : array (d,)
    oob_score_ : float
        Multi-output: the fraction of rows with every output right.
    oob_decision_function_ : array (n, K), or (n, 2, n_outputs)
        Multi-output ``oob_score`` needs 0/1 outputs (scikit-learn's rule).

    Notes
    -----
    Missing values: ``X`` may hold NaN (not infinity) at fit and predict;
    each tree learns where they go at every split, as
    :class:`~xpml.tree.DecisionTreeClassifier` (scikit-learn's rule). The
    feature subsets are drawn over the ``d`` real features.

    References
    ----------
    Breiman, "Random forests", Machine Learning 45, 2001.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.ensemble import RandomForestClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 4)); y = (X[:, 0] * X[:, 1] > 0).astype(int)
    >>> rf = RandomForestClassifier(n_estimators=30, random_state=0).fit(X, y)
    >>> float(rf.score(X, y))
    1.0
    """
    )

    _parameter_constraints = {
        **_BaseBagging._base_constraints,
        **{
            k: v
            for k, v in DecisionTreeClassifier._parameter_constraints.items()
            if k in _FOREST_TREE_PARAMS
        },
        "max_samples": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
            None,
        ],
    }
    _xpml_tags = {
        **BaggingClassifier._xpml_tags,
        "multi_output": True,
        "allow_nan": True,
    }

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="gini",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        min_impurity_decrease=0.0,
        max_features="sqrt",
        max_leaf_nodes=None,
        bootstrap=True,
        oob_score=False,
        max_samples=None,
        n_jobs=None,
        random_state=None,
        warm_start=False,
        progress=False,
    ):
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.max_features = max_features
        self.max_leaf_nodes = max_leaf_nodes
        self.bootstrap = bootstrap
        self.oob_score = oob_score
        self.max_samples = max_samples
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.warm_start = warm_start
        self.progress = progress

    def _template(self):
        return DecisionTreeClassifier(
            **{k: getattr(self, k) for k in _FOREST_TREE_PARAMS}
        )


class RandomForestRegressor(_ForestMixin, _BaggingRegressorMixin, _BaseBagging):
    __doc__ = (
        """Random forest of regression trees (fresh feature subset at every node).

    Parameters
    ----------
    n_estimators : int, default=100
    criterion : {"squared_error", "friedman_mse", "variance", "poisson", \
"absolute_error"}, default="squared_error"
        As for :class:`~xpml.tree.DecisionTreeRegressor` ("absolute_error":
        leaves predict their weighted median).
    max_features : int, float, {"sqrt", "log2"} or None, default=1.0
        Features per node: all of them by default, as scikit-learn (Breiman's
        rule for regression, ``d/3``, is ``max_features=1/3``)."""
        + _FOREST_DOC_PARAMS
        + """
    Attributes
    ----------
    estimators_ : list of DecisionTreeRegressor
    n_outputs_ : int
        Columns of ``y``; a 2-D ``y`` gives (n, n_outputs) predictions.
    feature_importances_ : array (d,)
    oob_score_ : float
        R² (averaged uniformly over outputs for a 2-D ``y``).
    oob_prediction_ : array (n,), or (n, n_outputs)

    Notes
    -----
    Missing values (NaN in ``X``) as for :class:`RandomForestClassifier`.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.ensemble import RandomForestRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(-3, 3, size=(300, 3)); y = np.sin(X[:, 0]) + X[:, 1]
    >>> rf = RandomForestRegressor(n_estimators=30, random_state=0).fit(X, y)
    >>> bool(rf.score(X, y) > 0.9)
    True
    """
    )

    _parameter_constraints = {
        **_BaseBagging._base_constraints,
        **{
            k: v
            for k, v in DecisionTreeRegressor._parameter_constraints.items()
            if k in _FOREST_TREE_PARAMS
        },
        "max_samples": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
            None,
        ],
    }
    _xpml_tags = {
        **BaggingRegressor._xpml_tags,
        "multi_output": True,
        "allow_nan": True,
    }

    def __init__(
        self,
        n_estimators=100,
        *,
        criterion="squared_error",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        min_impurity_decrease=0.0,
        max_features=1.0,
        max_leaf_nodes=None,
        bootstrap=True,
        oob_score=False,
        max_samples=None,
        n_jobs=None,
        random_state=None,
        warm_start=False,
        progress=False,
    ):
        self.n_estimators = n_estimators
        self.criterion = criterion
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.max_features = max_features
        self.max_leaf_nodes = max_leaf_nodes
        self.bootstrap = bootstrap
        self.oob_score = oob_score
        self.max_samples = max_samples
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.warm_start = warm_start
        self.progress = progress

    def _template(self):
        return DecisionTreeRegressor(
            **{k: getattr(self, k) for k in _FOREST_TREE_PARAMS}
        )
