"""Decision trees for classification (Gini, entropy) and regression (variance),
with reduced-error post-pruning on a validation set."""

from __future__ import annotations

import heapq
import math
import types
from numbers import Integral, Real

import numpy as np

from xpml._backend import enter, move, to_numpy
from xpml._typing import Array, ArrayLike, Self
from xpml.base import BaseEstimator, ClassifierMixin, RegressorMixin
from xpml.tree._grow import GrowParams, grow, segment_sum
from xpml.tree._stack import (
    TREE_ARRAYS,
    StackOwner,
    cached_stack,
    host_tree,
    restore_stack,
    stack_trees,
)
from xpml.utils._array_api import device, is_numpy_namespace, itemsize
from xpml.utils._param_validation import Interval, Options
from xpml.utils.validation import (
    AllowNaN,
    check_array,
    check_consistent_length,
    check_random_state,
    check_targets,
    decode_labels,
    is_multi_output,
    is_sparse,
)

__all__ = ["DecisionTreeClassifier", "DecisionTreeRegressor", "export_text"]

_TREE_ARRAYS = TREE_ARRAYS


def _allow_nan(est, X):
    """``ensure_finite`` of a tree's validation: NaN (missing values) is
    accepted in dense ``X``; SciPy sparse ``X`` stays finite-only, as in
    scikit-learn."""
    return True if is_sparse(X) else AllowNaN(type(est).__name__)


def _resolve_count(v, n, lo):
    """An int count, or a fraction of ``n`` rounded up (scikit-learn's rule)."""
    if isinstance(v, float):
        return max(lo, int(math.ceil(v * n)))
    return int(v)


def _resolve_max_features(v, d, default_name):
    if v is None:
        return d
    if isinstance(v, str):
        return max(1, int(math.sqrt(d)) if v == "sqrt" else int(math.log2(d)))
    if isinstance(v, float):
        return max(1, int(v * d))
    if v > d:
        raise ValueError(
            f"max_features={v} is larger than the number of features ({d}) of X; "
            f"{default_name}'s max_features must be in [1, n_features], a fraction in (0, 1], "
            f"'sqrt', 'log2' or None"
        )
    return int(v)


# scikit-learn's aliases, resolved to the names the growth knows
_CRITERIA = {
    "log_loss": "entropy",
    "variance": "squared_error",
    "friedman_mse": "squared_error",
}


class _BaseDecisionTree(StackOwner, BaseEstimator):
    """Shared fitting, routing, pruning and persistence of both trees."""

    _common_constraints = {
        "max_depth": [Interval(Integral, 1, None, closed="left"), None],
        "min_samples_split": [
            Interval(Integral, 2, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
        ],
        "min_samples_leaf": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="neither"),
        ],
        "min_weight_fraction_leaf": [Interval(Real, 0.0, 0.5, closed="both")],
        "min_impurity_decrease": [Interval(Real, 0, None, closed="left")],
        "max_features": [
            Interval(Integral, 1, None, closed="left"),
            Interval(float, 0.0, 1.0, closed="right"),
            Options("sqrt", "log2"),
            None,
        ],
        "random_state": ["random_state"],
        "splitter": [Options("best", "random")],
        "max_leaf_nodes": [Interval(Integral, 2, None, closed="left"), None],
        "ccp_alpha": [Interval(Real, 0.0, None, closed="left")],
    }

    # ----------------------------------------------------------------- fit
    def _grow_params(self, n, d, n_classes, n_outputs=1):
        """The growth's rules; ``n_classes`` is a tuple (classes per output)
        for multi-output classification."""
        per_output = tuple(n_classes) if isinstance(n_classes, tuple) else ()
        return GrowParams(
            criterion=_CRITERIA.get(self.criterion, self.criterion),
            n_classes=sum(per_output) if per_output else n_classes,
            n_outputs=int(n_outputs),
            class_counts=per_output,
            max_depth=2**62 if self.max_depth is None else int(self.max_depth),
            min_samples_split=_resolve_count(self.min_samples_split, n, 2),
            min_samples_leaf=_resolve_count(self.min_samples_leaf, n, 1),
            min_impurity_decrease=float(self.min_impurity_decrease),
            purity_threshold=float(getattr(self, "purity_threshold", 1.0)),
            max_features=_resolve_max_features(
                self.max_features, d, type(self).__name__
            ),
            splitter=getattr(self, "splitter", "best"),
            min_weight_leaf=float(self.min_weight_fraction_leaf),
        )

    def _fit_data(self, X, y, sample_weight, target):
        """:meth:`_validate_fit_data` accepting NaN in ``X`` (not infinity);
        also returns whether ``X`` holds NaN (the same one host sync)."""
        nan = _allow_nan(self, X)
        ctx, X, y, sw = self._validate_fit_data(
            X, y, sample_weight, target=target, ensure_finite=nan
        )
        return ctx, X, y, sw, nan is not True and nan.found

    def _predict_data(self, X):
        """:meth:`_validate_predict_data` accepting NaN in ``X``; also returns
        whether ``X`` holds NaN."""
        nan = _allow_nan(self, X)
        ctx, X = self._validate_predict_data(X, ensure_finite=nan)
        return ctx, X, nan is not True and nan.found

    def _fit_arrays(self, ctx, X, y, sw, n_classes, *, ids=None, missing=False):
        """Grow the tree from validated arrays (``y`` codes or floats) on the
        samples ``ids`` (default: those of positive weight; one host sync);
        ``missing``: ``X`` holds NaN."""
        xp = ctx.xp
        n_out = int(y.shape[1]) if len(y.shape) == 2 else 1
        params = self._grow_params(int(X.shape[0]), int(X.shape[1]), n_classes, n_out)
        if ids is None:
            ids = xp.nonzero(sw > 0)[0]
        w = xp.take(sw, ids)
        rng = check_random_state(self.random_state)
        n_kept = np.asarray([int(ids.shape[0])])
        trees, stats = grow(
            X, y, ids, w, n_kept, params=params, xp=xp, rngs=[rng], missing=missing
        )
        self._grow_stats = stats
        self._set_tree(self._limit_leaves(trees[0]), ctx, X.dtype)
        return self

    def _limit_leaves(self, tree):
        """``max_leaf_nodes``: keep the splits scikit-learn's best-first growth
        makes (see :func:`_best_first`); then ``ccp_alpha``: minimal
        cost-complexity pruning (scikit-learn's weakest link)."""
        k = getattr(self, "max_leaf_nodes", None)
        tree = tree if k is None else _best_first(tree, int(k))
        alpha = float(getattr(self, "ccp_alpha", 0.0))
        if alpha <= 0.0:
            return tree
        split = _weakest_link_path(tree, alpha)[2]
        cl = np.where(split, tree["children_left"], -1)
        cr = np.where(split, tree["children_right"], -1)
        return _compact({**tree, "children_left": cl, "children_right": cr})

    def _set_tree(self, tree, ctx, dtype, *, stack=True):
        """Store a host tree (dict of NumPy arrays) as the fitted arrays,
        directly in the caller's library (no round trip through the compute
        device); float arrays in the precision of ``dtype``. With ``stack``,
        also keep the tree on the compute device for prediction (one upload)."""
        fdt = np.float32 if itemsize(dtype, ctx.xp) == 4 else np.float64
        for k in _TREE_ARRAYS:
            floating = k in (
                "threshold",
                "value",
                "impurity",
                "weighted_n_node_samples",
            )
            a = np.asarray(tree[k], dtype=fdt if floating else np.int64)
            setattr(self, f"tree_{k}_", move(a, ctx.out_xp, ctx.out_device))
        self.node_count_ = int(len(tree["feature"]))
        self.max_depth_ = int(tree["max_depth"])
        self.n_leaves_ = int(np.sum(tree["children_left"] < 0))
        if stack:
            sources = (self.tree_feature_,)
            self._cache_stack = stack_trees(
                [tree], ctx.xp, ctx.device, sources, fdt, n_features=self.n_features_in_
            )

    def _after_load(self):
        """The stack the fit made (:class:`StackOwner`); a forest's members,
        which had none, are not given one."""
        if hasattr(self, "tree_feature_"):
            restore_stack(self, [self], self.n_features_in_)

    def _host_tree(self):
        return host_tree(self)

    @property
    def feature_importances_(self):
        """Total weighted impurity decrease per feature, normalised to sum 1
        (zeros for a tree without a split), in the fitted arrays' library."""
        from array_api_compat import array_namespace

        from xpml.utils.validation import check_is_fitted

        check_is_fitted(self, "tree_feature_")
        v = self.tree_value_
        imp = _importances(self._host_tree(), self.n_features_in_)
        return array_namespace(v).asarray(imp, dtype=v.dtype, device=device(v))

    @property
    def tree_(self):
        """The fitted arrays under scikit-learn's ``tree_`` names (read-only view)."""
        if not hasattr(self, "tree_feature_"):
            raise AttributeError("tree_ exists after fit")
        host = self._host_tree()  # fills arrays that older fits lack
        t = types.SimpleNamespace(
            **{
                k: getattr(self, f"tree_{k}_")
                if hasattr(self, f"tree_{k}_")
                else host[k]
                for k in _TREE_ARRAYS
            }
        )
        t.node_count, t.max_depth, t.n_leaves = (
            self.node_count_,
            self.max_depth_,
            self.n_leaves_,
        )
        # scikit-learn's Tree routes rows too (xpml's node numbering)
        t.apply, t.decision_path = self.apply, self.decision_path
        t.n_outputs = _n_outputs(self)
        k = getattr(self, "n_classes_", 1)  # scikit-learn's: 1 per regression output
        t.n_classes = np.broadcast_to(np.asarray(k, dtype=np.intp), (t.n_outputs,))
        t.max_n_classes = int(t.n_classes.max())
        return t

    # ------------------------------------------------------------- predict
    def _stack(self, ctx):
        """The fitted tree on the compute device, cached (see :mod:`xpml.tree._stack`)."""
        return cached_stack(self, [self], ctx)

    def _leaves(self, ctx, X, missing=False):
        return self._stack(ctx).leaves(X, xp=ctx.xp, missing=missing)[0, :]

    def _leaf_values(self, ctx, X, missing=False):
        stack = self._stack(ctx)
        leaves = stack.leaves(X, xp=ctx.xp, missing=missing)[0, :]
        return ctx.xp.take(stack.value, leaves, axis=0)

    def apply(self, X):
        """Index of the leaf each row of ``X`` ends in, shape (n,)."""
        ctx, X, missing = self._predict_data(X)
        return ctx.out(self._leaves(ctx, X, missing))

    def get_depth(self):
        """Depth of the fitted tree (the root alone has depth 0)."""
        return self.max_depth_

    def get_n_leaves(self):
        """Number of leaves of the fitted tree."""
        return self.n_leaves_

    # ------------------------------------------------------- decision path
    def decision_path(self, X):
        """The nodes each row of ``X`` passes through, root to leaf.

        Node ``j`` of row ``i`` is marked when the row visits it. Nodes are
        numbered as in xpml's fitted arrays (breadth-first, parents before
        children; the root is 0), which is not scikit-learn's depth-first
        numbering: the set of visited nodes per row is the same tree path,
        the column indices differ.

        Returns
        -------
        indicator : SciPy CSR matrix (n_samples, node_count) for NumPy input
            (scikit-learn's type, ``intp`` ones); for other libraries a dense
            0/1 ``int64`` array in the input's library (no sparse type is
            portable), shape (n_samples, node_count).
        """
        ctx, X, missing = self._predict_data(X)
        if is_numpy_namespace(ctx.out_xp):
            leaves = self._leaves(ctx, X, missing)
            leaves = np.asarray(to_numpy(leaves), dtype=np.int64)
            return _path_csr(self._host_tree(), leaves)
        xp = ctx.xp
        pre, end = _preorder(self._host_tree())
        pre_d, end_d = (xp.asarray(a, device=ctx.device) for a in (pre, end))
        at = xp.take(pre_d, self._leaves(ctx, X, missing))[:, None]
        inside = (pre_d[None, :] <= at) & (at < end_d[None, :])
        return ctx.out(xp.astype(inside, xp.int64))

    def cost_complexity_pruning_path(self, X, y, sample_weight=None):
        """Minimal cost-complexity pruning path (scikit-learn's weakest link).

        A tree with this estimator's parameters is grown on ``(X, y)``; then,
        repeatedly, the internal node ``t`` of smallest effective alpha
        ``(R(t) − R(T_t)) / (|leaves(T_t)| − 1)`` is collapsed into a leaf,
        with ``R(t) = W_t / W · impurity_t``, until only the root is left.

        Returns
        -------
        path : Bunch with ``ccp_alphas`` (increasing effective alphas, the
            first 0) and ``impurities`` (sum of ``R`` over the leaves of the
            pruned tree at each alpha), NumPy float64 arrays. Equal alphas are
            taken in xpml's node order.
        """
        est = type(self)(**{**self.get_params(), "ccp_alpha": 0.0})
        est.fit(X, y, sample_weight)
        alphas, imps, _ = _weakest_link_path(est._host_tree())
        return Bunch(ccp_alphas=alphas, impurities=imps)

    # --------------------------------------------------------------- prune
    def prune(self, X_val, y_val):
        """Reduced-error post-pruning on a validation set; returns self.

        The validation points are routed down the tree once (the routing of
        :meth:`predict`); every node on a point's path, found by walking up
        from its leaf, gets the error its training prediction makes on the
        point, which gives, for every node, the validation error it would
        make as a leaf. Then, bottom-up, an internal node whose two children
        are leaves is turned into a leaf when that does not raise the
        validation error (``err(node) <= err(left) + err(right)``):
        misclassifications for the classifier, the sum of squared errors for
        the regressor. The validation error of the pruned tree is therefore
        never higher than before.

        Parameters
        ----------
        X_val : array (n_val, d)
        y_val : array (n_val,)
            Labels (classifier) or targets (regressor).
        """
        from xpml.utils.validation import check_is_fitted, check_n_features

        check_is_fitted(self)
        _single_output(self, "prune")
        ctx, X, yv = self._validation_data(X_val, y_val)
        nan = _allow_nan(self, X)
        X = check_array(
            X, xp=ctx.xp, name="X_val", requested=ctx.dtype, ensure_finite=nan
        )
        check_n_features(self, X, name="X_val")
        t = self._host_tree()
        err_leaf = self._errors_as_leaf(ctx, X, yv, t)
        t = _compact(_merge_leaves(t, err_leaf))
        self.n_pruned_nodes_ = self.node_count_ - len(t["feature"])
        self._set_tree(t, ctx, X.dtype)
        return self._fitted(ctx)

    def _validation_data(self, X_val, y_val):
        """``(ctx, X, y)``: the classifier's labels become the fitted codes."""
        if not isinstance(self, ClassifierMixin):
            check_consistent_length(X_val, y_val, names=("X_val", "y_val"))
            ctx, (X, yv) = enter(X_val, y_val, names=("X_val", "y_val"))
            yv = check_targets(yv, xp=ctx.xp, name="y_val", requested=ctx.dtype)
            return ctx, X, yv
        # labels -> the fitted codes on the host (labels may be strings)
        y_host = np.asarray(to_numpy(y_val))
        check_consistent_length(X_val, y_host, names=("X_val", "y_val"))
        classes = to_numpy(self.classes_)
        codes = np.minimum(np.searchsorted(classes, y_host), len(classes) - 1)
        if not np.all(classes[codes] == y_host):
            unseen = sorted(set(y_host.tolist()) - set(classes.tolist()))
            raise ValueError(
                f"y_val contains labels {unseen!r} not seen in fit; "
                f"allowed labels are the classes_ {classes.tolist()!r}"
            )
        ctx, (X,) = enter(X_val, names=("X_val",))
        return ctx, X, ctx.xp.asarray(codes.astype(np.int64), device=ctx.device)

    def _errors_as_leaf(self, ctx, X, yv, t):
        """Validation error of every node were it a leaf (host, float64)."""
        xp = ctx.xp
        n_nodes = len(t["feature"])
        left, right = t["children_left"], t["children_right"]
        parent = np.full(
            n_nodes + 1, n_nodes, dtype=np.int64
        )  # n_nodes: above the root
        inner = np.nonzero(left >= 0)[0]
        parent[left[inner]], parent[right[inner]] = inner, inner
        clf = isinstance(self, ClassifierMixin)
        pred = np.argmax(t["value"], axis=1) if clf else t["value"]
        pred = np.append(pred, 0).astype(np.int64 if clf else t["value"].dtype)
        pred, parent = (xp.asarray(a, device=ctx.device) for a in (pred, parent))
        if not clf:
            yv = xp.astype(yv, pred.dtype)
        node = stack_trees([t], xp, ctx.device).leaves(X, xp=xp, missing=True)[0, :]
        ids, losses = [], []
        for _ in range(t["max_depth"] + 1):
            p = xp.take(pred, node)
            losses.append(xp.astype(p != yv, X.dtype) if clf else (p - yv) ** 2)
            ids.append(node)
            node = xp.take(parent, node)
        err = segment_sum(xp.concat(ids), xp.concat(losses), n_nodes + 1, xp=xp)
        return np.asarray(to_numpy(err), dtype=np.float64)[:n_nodes]

    # --------------------------------------------------------- export text
    def export_text(self, **kwargs):
        """The tree as indented text rules (see :func:`export_text`)."""
        return export_text(self, **kwargs)


class Bunch(dict):
    """A dict whose keys are also attributes (scikit-learn's ``Bunch``)."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def _preorder(t):
    """Depth-first (pre-order) rank of each node and the end of its subtree's
    range: ``j`` is an ancestor-or-self of ``v`` iff
    ``pre[j] <= pre[v] < end[j]`` (one host pass over the nodes)."""
    left, right = t["children_left"], t["children_right"]
    n = len(left)
    order, stack = [], [0]
    while stack:
        v = stack.pop()
        order.append(v)
        if left[v] >= 0:
            stack.extend((int(right[v]), int(left[v])))
    order = np.asarray(order, dtype=np.int64)
    pre = np.empty(n, dtype=np.int64)
    pre[order] = np.arange(n)
    size = np.ones(n, dtype=np.int64)
    for v in order[::-1]:  # children come after their parent in pre-order
        if left[v] >= 0:
            size[v] += size[left[v]] + size[right[v]]
    return pre, pre + size


def _parents(t):
    left, right = t["children_left"], t["children_right"]
    parent = np.full(len(left), -1, dtype=np.int64)
    inner = np.nonzero(left >= 0)[0]
    parent[left[inner]], parent[right[inner]] = inner, inner
    return parent


def _path_csr(t, leaves):
    """CSR indicator of the root-to-leaf paths of ``leaves`` (host)."""
    import scipy.sparse as sp

    parent = _parents(t)
    steps, node = [], leaves
    for _ in range(int(t["max_depth"]) + 1):
        steps.append(node)
        node = np.where(node >= 0, parent[np.maximum(node, 0)], -1)
    paths = np.stack(steps[::-1], axis=1)  # root first, -1 padding on the left
    keep = paths >= 0
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))])
    indices = paths[keep]
    data = np.ones(len(indices), dtype=np.intp)
    shape = (len(leaves), len(parent))
    return sp.csr_matrix((data, indices, indptr), shape=shape)


def _weakest_link_path(t, ccp_alpha=np.inf):
    """(ccp_alphas, impurities, split): scikit-learn's weakest-link pruning
    sequence, one collapsed node per step (the first of the smallest alpha),
    stopped before an alpha above ``ccp_alpha``; ``split`` marks the nodes
    still internal then."""
    left = t["children_left"]
    W, imp = t["weighted_n_node_samples"], t["impurity"]
    r_node = W * imp / W[0]
    parent = _parents(t)
    pre, end = _preorder(t)
    by_pre = np.argsort(pre)
    n_leaves = np.ones(len(left), dtype=np.int64)
    r_branch = np.where(left < 0, r_node, 0.0)
    for v in by_pre[::-1]:  # bottom-up
        if left[v] >= 0:
            a, b = left[v], t["children_right"][v]
            n_leaves[v] = n_leaves[a] + n_leaves[b]
            r_branch[v] = r_branch[a] + r_branch[b]
    candidate = left >= 0
    alphas, imps = [0.0], [float(r_branch[0])]
    while candidate[0]:
        with np.errstate(divide="ignore", invalid="ignore"):
            a_eff = (r_node - r_branch) / (n_leaves - 1)
        a_eff = np.where(candidate, a_eff, np.inf)
        v = int(np.argmin(a_eff))
        if ccp_alpha < a_eff[v]:
            break
        candidate[by_pre[pre[v] : end[v]]] = False
        dropped, r_diff = n_leaves[v] - 1, r_node[v] - r_branch[v]
        u = v
        while u >= 0:
            n_leaves[u] -= dropped
            r_branch[u] += r_diff
            u = parent[u]
        alphas.append(float(a_eff[v]))
        imps.append(float(r_branch[0]))
    return np.asarray(alphas), np.asarray(imps), candidate


def _merge_leaves(t, err_leaf):
    """Bottom-up: a node whose children are both leaves becomes a leaf when its
    own validation error is not higher than theirs together."""
    left, right = t["children_left"].copy(), t["children_right"].copy()
    err = err_leaf.copy()
    # children have larger ids than their parent: a reverse sweep is bottom-up
    for i in range(len(left) - 1, -1, -1):
        a, b = left[i], right[i]
        if a < 0:
            continue
        if left[a] < 0 and left[b] < 0 and err_leaf[i] <= err[a] + err[b]:
            left[i] = right[i] = -1
            err[i] = err_leaf[i]
        else:
            err[i] = err[a] + err[b]
    return {**t, "children_left": left, "children_right": right}


def _compact(t):
    """Drop nodes no longer reachable from the root; renumber breadth-first
    (parents before children)."""
    left, right = t["children_left"], t["children_right"]
    order = [0]
    depth = {0: 0}
    i = 0
    while i < len(order):
        v = order[i]
        if left[v] >= 0:
            for c in (left[v], right[v]):
                depth[int(c)] = depth[v] + 1
                order.append(int(c))
        i += 1
    order = np.asarray(order, dtype=np.int64)
    remap = np.full(len(left), -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    out = {k: t[k][order].copy() for k in _TREE_ARRAYS}
    lo, ro = left[order], right[order]
    out["children_left"] = np.where(lo >= 0, remap[np.maximum(lo, 0)], -1)
    out["children_right"] = np.where(ro >= 0, remap[np.maximum(ro, 0)], -1)
    leaf = out["children_left"] < 0
    out["feature"] = np.where(leaf, -2, out["feature"])
    out["threshold"] = np.where(leaf, -2.0, out["threshold"])
    out["max_depth"] = max(depth.values())
    return out


def _best_first(t, max_leaf_nodes):
    """The tree scikit-learn grows best-first with ``max_leaf_nodes``, taken
    from the fully grown level-wise tree: a node's best split does not depend
    on the order nodes are expanded in, so expanding, from the root, the open
    node of largest weighted impurity decrease ``W I − W_L I_L − W_R I_R``
    until there are ``max_leaf_nodes`` leaves keeps the same splits (ties
    between equal decreases go to the node created first). The level-wise
    growth still builds the whole tree first (its cost is not bounded by
    ``max_leaf_nodes``)."""
    left, right = t["children_left"], t["children_right"]
    W, imp = t["weighted_n_node_samples"], t["impurity"]
    keep = np.zeros(len(left), dtype=bool)
    heap = []

    def push(v):
        if left[v] >= 0:
            a, b = left[v], right[v]
            gain = W[v] * imp[v] - W[a] * imp[a] - W[b] * imp[b]
            heapq.heappush(heap, (-gain, int(v)))

    push(0)
    leaves = 1
    while heap and leaves < max_leaf_nodes:
        _, v = heapq.heappop(heap)
        keep[v] = True
        leaves += 1
        push(left[v])
        push(right[v])
    cl = np.where(keep, left, -1)
    cr = np.where(keep, right, -1)
    return _compact({**t, "children_left": cl, "children_right": cr})


def _single_output(est, what):
    """Refuse a multi-output tree where only one output is supported."""
    if _n_outputs(est) > 1:
        raise ValueError(
            f"{what} supports single-output trees only; this "
            f"{type(est).__name__} was fitted on {est.n_outputs_} outputs "
            f"(a 2-D y); fit it on one column of y to use {what}"
        )


def _n_outputs(est):
    """Outputs of a fitted tree (1 for trees fitted without ``n_outputs_``,
    e.g. the members boosting grows through ``_fit_arrays``)."""
    return getattr(est, "n_outputs_", 1)


def _flatten_column(y):
    """A one-column 2-D ``y`` as 1-D, silently (scikit-learn's trees keep
    ``n_outputs_ = 1`` and 1-D predictions for it, with no warning)."""
    shape = getattr(y, "shape", None)
    if shape is None and y is not None:
        shape = np.asarray(y).shape  # array-likes (np.shape may be refused)
    if shape is None or len(shape) != 2 or shape[1] != 1:
        return y
    if hasattr(y, "iloc"):  # pandas
        return y.iloc[:, 0]
    if not hasattr(y, "shape"):
        y = np.asarray(y)
    return y[:, 0]


def _importances(t, d):
    """Total weighted impurity decrease brought by each feature, normalised."""
    left, right = t["children_left"], t["children_right"]
    inner = np.nonzero(left >= 0)[0]
    W, imp = t["weighted_n_node_samples"], t["impurity"]
    gain = (
        W[inner] * imp[inner]
        - W[left[inner]] * imp[left[inner]]
        - W[right[inner]] * imp[right[inner]]
    )
    out = np.zeros(d)
    np.add.at(out, t["feature"][inner], gain)
    total = out.sum()
    return out / total if total > 0 else out


class DecisionTreeClassifier(ClassifierMixin, _BaseDecisionTree):
    """A classification tree grown by a vectorised best-split search.

    Every node's split is the one with the largest impurity decrease among all
    thresholds midway between distinct neighbouring values of all (or
    ``max_features`` randomly drawn) features; ``x <= threshold`` goes left.
    All nodes of one depth are searched together with array operations (sort,
    cumulative class counts, one scoring pass, argmax); see
    :mod:`xpml.tree._grow`.

    Parameters
    ----------
    criterion : {"gini", "entropy", "log_loss"}, default="gini"
        Impurity: Gini ``1 − Σ p_k²`` or entropy ``−Σ p_k log₂ p_k``
        (information gain); "log_loss" is scikit-learn's name for entropy.
    splitter : {"best", "random"}, default="best"
        "best": every threshold midway between distinct neighbours is scored.
        "random" (scikit-learn's): one threshold per candidate feature, drawn
        uniformly between the node's min and max of the feature (from
        ``random_state``, on the host, so every backend grows the same tree);
        the best of those is kept.
    max_depth : int or None, default=None
        Longest root-to-leaf path; None grows until the other rules stop.
    min_samples_split : int or float, default=2
        A node with fewer samples is a leaf (float: fraction of n, rounded up).
    min_samples_leaf : int or float, default=1
        Each child of a split must keep at least this many samples.
    min_weight_fraction_leaf : float in [0, 0.5], default=0.0
        Each child of a split must keep at least this fraction of the total
        sample weight (scikit-learn's rule).
    min_impurity_decrease : float, default=0.0
        Keep a split only if ``W_t/W · (I_t − W_L/W_t I_L − W_R/W_t I_R)``
        (weighted impurity decrease, ``W`` the total weight) reaches this.
    purity_threshold : float in (0, 1], default=1.0
        A node whose majority class holds at least this fraction of its weight
        is a leaf (1.0: only pure nodes stop).
    max_features : int, float, {"sqrt", "log2"} or None, default=None
        Features searched at each node, a fresh random subset per node
        (constant features do not count, as in scikit-learn); None: all.
    random_state : int, numpy Generator or None
        Seeds the feature subsets (drawn on the host with NumPy).
    max_leaf_nodes : int >= 2 or None, default=None
        At most this many leaves: the splits scikit-learn's best-first growth
        keeps (largest weighted impurity decrease first), chosen from the
        level-wise tree after it is grown (same tree, ties aside).
    ccp_alpha : float >= 0, default=0.0
        Minimal cost-complexity pruning after growth (scikit-learn's): the
        weakest links (see :meth:`cost_complexity_pruning_path`) of effective
        alpha up to ``ccp_alpha`` are collapsed; 0 prunes nothing.

    Attributes
    ----------
    classes_ : array (K,), or list of arrays (one per output)
        A list when ``y`` is 2-D with several columns (multi-output).
    n_classes_ : int, or int array (n_outputs,) for multi-output
    n_outputs_ : int
        Columns of ``y`` (1 for a 1-D ``y`` or one column, as scikit-learn).
    n_features_in_ : int
    tree_feature_, tree_threshold_ : arrays (node_count,)
        Split feature and threshold of each node (−2 at leaves).
    tree_children_left_, tree_children_right_ : int arrays (node_count,)
        Child indices (−1 at leaves). The root is node 0.
    tree_value_ : array (node_count, K), or (node_count, n_outputs, max K)
        Weighted class fractions of each node's training samples; for
        multi-output, scikit-learn's layout (zero past an output's classes).
    tree_impurity_, tree_n_node_samples_, tree_weighted_n_node_samples_ : arrays (node_count,)
    tree_missing_go_to_left_ : int array (node_count,)
        1 where a NaN in the node's split feature goes to the left child
        (scikit-learn's ``tree_.missing_go_to_left``; 0 at leaves).
    node_count_, max_depth_, n_leaves_ : int
    feature_importances_ : array (d,)
        Total weighted impurity decrease per feature, normalised to sum 1.

    Notes
    -----
    Missing values: ``X`` may hold NaN (not infinity) at fit and predict, as
    scikit-learn. When a node's samples miss some values of a feature, each
    threshold is scored with the missing samples sent left and sent right,
    and the split "non-missing | missing" (threshold +inf) too; the node keeps
    the direction in ``tree_missing_go_to_left_``. A NaN met at predict at a
    node that saw none at fit goes to the child that held more samples. The
    random splitter draws the direction. Fits without NaN do no extra work.

    Gini proxy of a split: ``Σ_k c_{L,k}²/W_L + Σ_k c_{R,k}²/W_R`` (maximised),
    with ``c`` cumulative weighted class counts along the sorted feature.

    Multi-output ``y`` (n, n_outputs), scikit-learn's meaning: a node's
    impurity is the mean of the outputs' impurities, a split maximises the
    sum of the outputs' proxies; ``predict_proba`` returns a list, ``predict``
    (n, n_outputs) labels, ``score`` the fraction of rows with every output
    right (0/1 outputs only). ``prune`` and :func:`export_text` take
    single-output trees only.

    Nodes are searched in blocks (all open nodes of one depth, grouped by
    size); each block costs one upload and one download between host and
    device. The private fitted dict ``_grow_stats`` counts the blocks
    (``node_blocks``) and the extra rounds of nodes that drew constant
    features (``redraws``). Prediction walks a copy of the tree kept on the
    compute device (``_cache_stack``: not pickled but rebuilt at unpickling).

    References
    ----------
    Breiman, Friedman, Olshen & Stone, *Classification and Regression Trees*, 1984.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.tree import DecisionTreeClassifier
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0, 0, 1, 1])
    >>> clf = DecisionTreeClassifier().fit(X, y)
    >>> float(clf.tree_threshold_[0]), clf.predict(np.array([[0.4], [2.6]])).tolist()
    (1.5, [0, 1])
    """

    _parameter_constraints = {
        "criterion": [Options("gini", "entropy", "log_loss")],
        "purity_threshold": [Interval(Real, 0, 1, closed="right")],
        **_BaseDecisionTree._common_constraints,
    }
    _xpml_tags = {"multi_output": True, "allow_nan": True}

    def __init__(
        self,
        *,
        criterion="gini",
        splitter="best",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        min_impurity_decrease=0.0,
        purity_threshold=1.0,
        max_features=None,
        random_state=None,
        max_leaf_nodes=None,
        ccp_alpha=0.0,
    ):
        self.criterion = criterion
        self.splitter = splitter
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.purity_threshold = purity_threshold
        self.max_features = max_features
        self.random_state = random_state
        self.max_leaf_nodes = max_leaf_nodes
        self.ccp_alpha = ccp_alpha

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Grow the tree; returns self. ``y`` (n,) or (n, n_outputs)."""
        y = _flatten_column(y)
        multi = is_multi_output(y)
        target = "multi_classes" if multi else "classes"
        ctx, X, y, sw, missing = self._fit_data(X, y, sample_weight, target)
        if multi:
            counts = tuple(int(c.shape[0]) for c in self.classes_)
            self.n_outputs_, self.n_classes_ = len(counts), np.asarray(counts)
        else:
            counts = int(self.classes_.shape[0])
            self.n_outputs_, self.n_classes_ = 1, counts
        self._fit_arrays(ctx, X, y, sw, counts, missing=missing)
        return self._fitted(ctx)

    def predict_proba(self, X: ArrayLike) -> Array | list:
        """Class fractions of the leaf each row reaches, shape (n, K); a list
        of them, one (n, K_o) per output, for a multi-output tree."""
        ctx, X, missing = self._predict_data(X)
        P = self._leaf_values(ctx, X, missing)
        if _n_outputs(self) == 1:
            return ctx.out(P)
        return [ctx.out(P[:, o, :k]) for o, k in enumerate(self.n_classes_.tolist())]

    def predict(self, X: ArrayLike) -> Array:
        """Majority class of the leaf each row reaches; (n, n_outputs) labels
        for a multi-output tree."""
        ctx, X, missing = self._predict_data(X)
        xp = ctx.xp
        if _n_outputs(self) == 1:  # each leaf's class is known: gather it
            stack = self._stack(ctx)
            leaves = stack.leaves(X, xp=xp, missing=missing)[0, :]
            codes = xp.take(stack.top_codes(xp), leaves)
            return decode_labels(self.classes_, codes, ctx)
        P = self._leaf_values(ctx, X, missing)
        return _stack_labels(
            [
                decode_labels(c, xp.argmax(P[:, o, : int(c.shape[0])], axis=1), ctx)
                for o, c in enumerate(self.classes_)
            ]
        )

    def score(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> float:
        """Mean accuracy; for a multi-output tree, scikit-learn's: the
        fraction of rows with every output right, for 0/1 outputs only."""
        if _n_outputs(self) == 1:
            return super().score(X, y, sample_weight)
        return _subset_accuracy(self.predict(X), y, sample_weight)

    def predict_log_proba(self, X: ArrayLike) -> Array | list:
        """Logarithm of :meth:`predict_proba` (a list for multi-output)."""
        P = self.predict_proba(X)
        from array_api_compat import array_namespace

        if isinstance(P, list):
            return [array_namespace(p).log(p) for p in P]
        return array_namespace(P).log(P)


def _subset_accuracy(pred, y, sample_weight=None):
    """scikit-learn's ``accuracy_score`` of a 2-D ``y`` (host): defined for
    multilabel 0/1 targets (rows with every output right), refused for
    multiclass-multioutput ones."""
    Y = np.asarray(to_numpy(y) if hasattr(y, "shape") else y)
    P = np.asarray(to_numpy(pred))
    check_consistent_length(P, Y, names=("X", "y"))
    binary = Y.dtype.kind in "biuf" and set(np.unique(Y).tolist()) <= {0, 1}
    if len(Y.shape) != 2 or not binary:
        raise ValueError(
            "multiclass-multioutput is not supported: score of a multi-output "
            "classifier needs a 2-D y of 0/1 labels (scikit-learn's rule)"
        )
    hit = np.all(P == Y, axis=1).astype(np.float64)
    w = None if sample_weight is None else np.asarray(to_numpy(sample_weight))
    return float(np.average(hit, weights=w))


def _stack_labels(cols):
    """Per-output label columns (n,) as one (n, n_outputs) array."""
    from array_api_compat import array_namespace

    if all(isinstance(c, np.ndarray) for c in cols):
        return np.stack(cols, axis=1)
    return array_namespace(*cols).stack(cols, axis=1)


class DecisionTreeRegressor(RegressorMixin, _BaseDecisionTree):
    """A regression tree (variance reduction) grown by a vectorised split search.

    Parameters
    ----------
    splitter : {"best", "random"}, default="best"
        As for :class:`DecisionTreeClassifier`.
    criterion : {"squared_error", "friedman_mse", "variance", "poisson", \
"absolute_error"}, default="squared_error"
        "squared_error" and "variance" name the same impurity, the weighted
        variance of ``y`` in a node. "friedman_mse" (scikit-learn's) ranks splits
        by Friedman's improvement ``w_L w_R (ȳ_L − ȳ_R)² / (w_L + w_R)``, which
        equals the between-children sum of squares ``S_L²/w_L + S_R²/w_R``
        (``S`` centred sums): it grows the same trees, and scikit-learn 1.9
        maps it to "squared_error" too. "poisson" (scikit-learn's): the half
        Poisson deviance ``Σ w (y log(y/ȳ) − y + ȳ) / W``, for targets
        ``y >= 0`` with a positive sum; a split leaving a child of mean 0 is
        not taken. "absolute_error" (scikit-learn's): the impurity is
        ``Σ w |y − m| / W`` with ``m`` the node's weighted median, which is
        also its prediction (scikit-learn's median: the mean of the two
        middle values when the weight below them is exactly half).
    max_depth, min_samples_split, min_samples_leaf, min_weight_fraction_leaf, \
min_impurity_decrease, \
max_features, random_state, max_leaf_nodes, ccp_alpha
        As for :class:`DecisionTreeClassifier`.

    Attributes
    ----------
    n_features_in_ : int
    tree_feature_, tree_threshold_, tree_children_left_, tree_children_right_ : arrays
    n_outputs_ : int
        Columns of ``y`` (1 for a 1-D ``y`` or one column, as scikit-learn).
    tree_value_ : array (node_count,), or (node_count, n_outputs, 1)
        Weighted mean of ``y`` in each node (weighted median for
        "absolute_error"; per output, in scikit-learn's layout, for a 2-D ``y``).
    tree_impurity_, tree_n_node_samples_, tree_weighted_n_node_samples_ : arrays
    tree_missing_go_to_left_ : int array (node_count,)
    node_count_, max_depth_, n_leaves_ : int
    feature_importances_ : array (d,)

    Notes
    -----
    Missing values (NaN in ``X``, every criterion) as for
    :class:`DecisionTreeClassifier`.

    The split maximises ``S_L²/W_L + S_R²/W_R`` with ``S`` cumulative weighted
    sums of ``y − ȳ_node`` along the sorted feature, i.e. minimises the children's
    summed squared error. With "absolute_error" it minimises the children's
    summed ``Σ w |y − median|``, from the weighted medians of every prefix and
    suffix of the sorted rows (:mod:`xpml.tree._median`).

    Multi-output ``y`` (n, n_outputs), scikit-learn's meaning: the impurity is
    the mean of the outputs' (weighted) variances or Poisson deviances, the
    split maximises the sum of the outputs' proxies, leaves hold per-output
    weighted means and ``predict`` returns (n, n_outputs); ``score`` is the
    R² averaged uniformly over outputs.

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.tree import DecisionTreeRegressor
    >>> X = np.arange(6.0).reshape(-1, 1); y = np.array([1.0, 1.0, 1.0, 5.0, 5.0, 5.0])
    >>> reg = DecisionTreeRegressor(max_depth=1).fit(X, y)
    >>> reg.predict(np.array([[0.5], [4.5]])).tolist()
    [1.0, 5.0]
    """

    _parameter_constraints = {
        "criterion": [
            Options(
                "squared_error", "friedman_mse", "variance", "poisson", "absolute_error"
            )
        ],
        **_BaseDecisionTree._common_constraints,
    }
    _xpml_tags = {"multi_output": True, "allow_nan": True}

    def __init__(
        self,
        *,
        criterion="squared_error",
        splitter="best",
        max_depth=None,
        min_samples_split=2,
        min_samples_leaf=1,
        min_weight_fraction_leaf=0.0,
        min_impurity_decrease=0.0,
        max_features=None,
        random_state=None,
        max_leaf_nodes=None,
        ccp_alpha=0.0,
    ):
        self.criterion = criterion
        self.splitter = splitter
        self.max_depth = max_depth
        self.min_samples_split = min_samples_split
        self.min_samples_leaf = min_samples_leaf
        self.min_weight_fraction_leaf = min_weight_fraction_leaf
        self.min_impurity_decrease = min_impurity_decrease
        self.max_features = max_features
        self.random_state = random_state
        self.max_leaf_nodes = max_leaf_nodes
        self.ccp_alpha = ccp_alpha

    def fit(
        self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
    ) -> Self:
        """Grow the tree; returns self. ``y`` (n,) or (n, n_outputs)."""
        y = _flatten_column(y)
        multi = is_multi_output(y)
        target = "multi" if multi else "continuous"
        ctx, X, y, sw, missing = self._fit_data(X, y, sample_weight, target)
        self.n_outputs_ = int(y.shape[1]) if multi else 1
        if self.criterion == "poisson":
            _check_poisson_targets(y, ctx.xp)
        if multi and self.criterion == "absolute_error":
            raise ValueError(
                "criterion='absolute_error' takes a 1-D y in xpml; got y of shape "
                f"{tuple(y.shape)}. Fit one tree per output, or use "
                "criterion='squared_error' for a multi-output tree."
            )
        self._fit_arrays(ctx, X, y, sw, 0, missing=missing)
        return self._fitted(ctx)

    def predict(self, X: ArrayLike) -> Array:
        """Mean (median for "absolute_error") training target of the leaf each
        row reaches; (n, n_outputs) for a multi-output tree."""
        ctx, X, missing = self._predict_data(X)
        v = self._leaf_values(ctx, X, missing)
        if _n_outputs(self) > 1:
            v = ctx.xp.reshape(v, (int(v.shape[0]), self.n_outputs_))
        return ctx.out(v)


def _check_poisson_targets(y, xp):
    """scikit-learn's conditions for the Poisson criterion (one host sync)."""
    lo, total = to_numpy(xp.stack([xp.min(y), xp.sum(y)])).tolist()
    if lo < 0:
        raise ValueError(
            "Some value(s) of y are negative which is not allowed for "
            "Poisson regression."
        )
    if total <= 0:
        raise ValueError(
            "Sum of y is not positive which is necessary for Poisson regression."
        )


def export_text(
    decision_tree,
    *,
    feature_names=None,
    class_names=None,
    max_depth=10,
    decimals=2,
    show_weights=False,
):
    """A fitted tree as indented text rules, in scikit-learn's layout.

    Parameters
    ----------
    decision_tree : DecisionTreeClassifier or DecisionTreeRegressor
    feature_names : list of str, optional
        Default ``feature_0``, ``feature_1``, ...
    class_names : list of str, optional
        Default: the fitted ``classes_``.
    max_depth : int, default=10
        Deeper branches are printed as "truncated branch of depth k".
    decimals : int, default=2
    show_weights : bool, default=False
        Print the weighted class counts of classifier leaves.

    Returns
    -------
    str

    Examples
    --------
    >>> import numpy as np
    >>> from xpml.tree import DecisionTreeClassifier, export_text
    >>> X = np.array([[0.0], [1.0], [2.0], [3.0]]); y = np.array([0, 0, 1, 1])
    >>> print(export_text(DecisionTreeClassifier().fit(X, y), feature_names=["x"]))
    |--- x <= 1.50
    |   |--- class: 0
    |--- x >  1.50
    |   |--- class: 1
    <BLANKLINE>
    """
    from xpml.utils.validation import check_is_fitted

    check_is_fitted(decision_tree)
    _single_output(decision_tree, "export_text")
    t = decision_tree._host_tree()
    d = decision_tree.n_features_in_
    names = (
        list(feature_names)
        if feature_names is not None
        else [f"feature_{i}" for i in range(d)]
    )
    if len(names) != d:
        raise ValueError(
            f"feature_names has {len(names)} names; the tree was fitted on {d} features"
        )
    clf = isinstance(decision_tree, ClassifierMixin)
    if clf:
        classes = to_numpy(decision_tree.classes_).tolist()
        cnames = list(class_names) if class_names is not None else classes
    lines = []

    def leaf_text(v):
        if clf:
            k = int(np.argmax(t["value"][v]))
            s = f"class: {cnames[k]}"
            if show_weights:
                w = t["value"][v] * t["weighted_n_node_samples"][v]
                s = f"weights: [{', '.join(f'{x:.{decimals}f}' for x in w)}] " + s
            return s
        return f"value: [{t['value'][v]:.{decimals}f}]"

    def walk(v, depth):
        ind = "|   " * depth + "|--- "
        if t["children_left"][v] < 0:
            lines.append(ind + leaf_text(v))
            return
        if depth > max_depth:
            lines.append(
                "|   " * depth + f"|--- truncated branch of depth {_depth(t, v) + 1}"
            )
            return
        name, thr = names[t["feature"][v]], t["threshold"][v]
        lines.append(f"{ind}{name} <= {thr:.{decimals}f}")
        walk(t["children_left"][v], depth + 1)
        lines.append(f"{ind}{name} >  {thr:.{decimals}f}")
        walk(t["children_right"][v], depth + 1)

    walk(0, 0)
    return "\n".join(lines) + "\n"


def _depth(t, v):
    if t["children_left"][v] < 0:
        return 0
    return 1 + max(_depth(t, t["children_left"][v]), _depth(t, t["children_right"][v]))
