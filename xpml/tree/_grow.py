"""Level-wise, vectorised growth of decision trees: one tree or a whole forest at once.

Every open node of one depth (across all trees being grown) is processed
together. Nodes are grouped by their number of samples into padded blocks of
length ``L`` (a power of two); for a block of nodes:

1. the candidate features' values of each node's samples are gathered into a
   ``(nodes, features, L)`` array, padded with ``+inf``;
2. every feature of every node is sorted at once (one ``argsort`` along the last
   axis);
3. ``cumulative_sum`` along the sorted order gives the left child's weighted
   class counts (or weighted sums of ``y``) at every threshold; the right
   child's follow by subtraction from the total;
4. the criterion is scored at every position between *distinct* neighbouring
   values, for all features in one array pass, and ``argmax`` picks the best
   ``(feature, threshold)`` of each node.

Only small per-node summaries (best feature, threshold, child statistics) move to
the host, once per block; the tree's arrays are assembled there with NumPy. The
split search is exactly scikit-learn's "best" splitter: thresholds midway
between distinct neighbours, ``x <= threshold`` goes left, children must hold
``min_samples_leaf`` samples, a split is kept when its weighted impurity
decrease is at least ``min_impurity_decrease``.
"""

from __future__ import annotations

import dataclasses
import math

import array_api_compat
import numpy as np

from xpml._backend import to_numpy

__all__ = ["GrowParams", "grow", "route", "segment_sum"]

EPSILON = float(np.finfo(np.float64).eps)
FEATURE_THRESHOLD = 1e-7  # scikit-learn's: neighbours closer than this are not split
_BUDGET = 1 << 22  # elements of one (nodes, features, L) work array
_LN2 = math.log(2.0)


@dataclasses.dataclass(frozen=True)
class GrowParams:
    """Stopping rules and criterion of one growth (already resolved to numbers)."""

    criterion: str  # "gini", "entropy" or "squared_error"
    n_classes: int  # 0 for regression
    max_depth: int
    min_samples_split: int
    min_samples_leaf: int
    min_impurity_decrease: float
    purity_threshold: float
    max_features: int

    @property
    def classification(self):
        return self.n_classes > 0


# --------------------------------------------------------------- host tables
class _NodeTable:
    """The nodes of all trees being grown, in creation order (host NumPy)."""

    def __init__(self, n_stats, n_const=0):
        self.size = 0
        self.cap = 0
        self.n_stats = n_stats
        self.n_const = n_const  # features known to be constant in the node (forests)
        self.cols = {}
        self._reserve(256)

    def _reserve(self, need):
        if need <= self.cap:
            return
        cap = max(need, 2 * self.cap)
        spec = {
            "tree": (np.int64, 0),
            "depth": (np.int64, 0),
            "feature": (np.int64, -2),
            "threshold": (np.float64, -2.0),
            "left": (np.int64, -1),
            "right": (np.int64, -1),
            "n": (np.int64, 0),
            "W": (np.float64, 0.0),
            "impurity": (np.float64, 0.0),
        }
        new = {}
        for k, (dt, fill) in spec.items():
            a = np.full(cap, fill, dtype=dt)
            if k in self.cols:
                a[: self.size] = self.cols[k][: self.size]
            new[k] = a
        s = np.zeros((cap, self.n_stats))
        if "stats" in self.cols:
            s[: self.size] = self.cols["stats"][: self.size]
        new["stats"] = s
        c = np.zeros((cap, self.n_const), dtype=bool)
        if "const" in self.cols:
            c[: self.size] = self.cols["const"][: self.size]
        new["const"] = c
        self.cols, self.cap = new, cap

    def add(self, **values):
        m = len(values["n"])
        self._reserve(self.size + m)
        ids = np.arange(self.size, self.size + m)
        for k, v in values.items():
            self.cols[k][ids] = v
        self.size += m
        return ids

    def __getitem__(self, k):
        return self.cols[k][: self.size]


def _impurity_host(stats, W, params):
    """Node impurity from its statistics (class counts, or [mean, variance])."""
    if not params.classification:
        return stats[:, 1].copy()
    p = stats / np.where(W > 0, W, 1.0)[:, None]
    if params.criterion == "gini":
        return np.maximum(1.0 - np.sum(p * p, axis=1), 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.sum(np.where(p > 0, p * np.log2(np.where(p > 0, p, 1.0)), 0.0), axis=1)
    return np.maximum(h, 0.0)


def _splittable(depth, n, stats, W, impurity, params):
    """scikit-learn's stopping rules, plus the purity fraction."""
    ok = (depth < params.max_depth) & (n >= params.min_samples_split)
    ok &= (n >= 2 * params.min_samples_leaf) & (impurity > EPSILON)
    if params.classification and params.purity_threshold < 1.0:
        purity = np.max(stats, axis=1) / np.where(W > 0, W, 1.0)
        ok &= purity < params.purity_threshold
    return ok


# ----------------------------------------------------------- device helpers
def _xlogx(c, xp):
    return c * xp.log(xp.where(c > 0, c, xp.ones_like(c)))


def segment_sum(ids, weights, n_bins, *, xp):
    """``out[b] = Σ weights[ids == b]`` (a portable ``bincount`` by sorting)."""
    order = xp.argsort(ids, stable=True)
    sid = xp.take(ids, order)
    cw = xp.cumulative_sum(xp.take(weights, order), include_initial=True)
    edges = xp.arange(n_bins + 1, dtype=sid.dtype, device=array_api_compat.device(ids))
    bounds = xp.searchsorted(sid, edges)
    return xp.take(cw, bounds[1:]) - xp.take(cw, bounds[:-1])


def _block_len(n):
    """Padded block length for nodes of ``n`` samples: 2^k or 1.5·2^k (at most
    a third of a block is padding)."""
    n = np.maximum(n, 2)
    p = 1 << np.ceil(np.log2(n)).astype(np.int64)
    three_q = (3 * p) // 4
    return np.where((n <= three_q) & (p >= 4), three_q, p)


def _search(Xflat, d, y, sids, ws, lens_d, F, mean, params, xp, vals=None):
    """Best split among features ``F`` (nb, f) for a block of nb nodes.

    ``sids`` (nb, L) are sample indices padded with the sentinel row ``n``
    (whose features are +inf), ``ws`` their weights (0 on padding).
    Returns device arrays (nb,): proxy score (−inf when no valid split), chosen
    feature, position ``p`` (the left child holds sorted positions ``0..p``)
    and threshold.
    """
    nb, L = sids.shape
    f = F.shape[1]
    dev = array_api_compat.device(sids)
    pos = xp.arange(L, dtype=sids.dtype, device=dev)
    if vals is None:
        gidx = xp.reshape(sids, (nb, 1, L)) * d + xp.reshape(F, (nb, f, 1))
        vals = xp.take(Xflat, xp.reshape(gidx, (-1,)))
    inf = xp.asarray(xp.inf, dtype=vals.dtype, device=dev)
    # ties need no order here: only positions between distinct values are scored
    perm = xp.argsort(xp.reshape(vals, (nb, f, L)), axis=-1, stable=False)
    rows = xp.arange(nb * f, dtype=perm.dtype, device=dev) * L
    xs = xp.reshape(
        xp.take(vals, xp.reshape(perm + xp.reshape(rows, (nb, f, 1)), (-1,))),
        (nb, f, L),
    )
    nrow = xp.arange(nb, dtype=perm.dtype, device=dev) * L
    flat = xp.reshape(perm + xp.reshape(nrow, (nb, 1, 1)), (-1,))
    ss = xp.reshape(xp.take(xp.reshape(sids, (-1,)), flat), (nb, f, L))
    wsr = xp.reshape(xp.take(xp.reshape(ws, (-1,)), flat), (nb, f, L))
    wl = xp.cumulative_sum(wsr, axis=-1)
    wr = wl[..., -1:] - wl
    one = xp.ones_like(wl)
    wl_s = xp.where(wl > 0, wl, one)
    wr_s = xp.where(wr > 0, wr, one)
    if params.classification:
        yk = xp.take(y, xp.reshape(ss, (-1,)))
        yk = xp.reshape(yk, (nb, f, L))
        zero = xp.zeros_like(wsr)
        acc_l = acc_r = None
        rest_l, rest_r = wl, wr
        for k in range(params.n_classes):
            if k < params.n_classes - 1:
                ck = xp.cumulative_sum(xp.where(yk == k, wsr, zero), axis=-1)
                rk = ck[..., -1:] - ck
                rest_l, rest_r = rest_l - ck, rest_r - rk
            else:  # the last class's counts are what the others leave
                ck, rk = rest_l, rest_r
            if params.criterion == "gini":
                tl, tr = ck * ck, rk * rk
            else:
                tl, tr = _xlogx(ck, xp), _xlogx(rk, xp)
            acc_l = tl if acc_l is None else acc_l + tl
            acc_r = tr if acc_r is None else acc_r + tr
        if params.criterion == "gini":
            score = acc_l / wl_s + acc_r / wr_s
        else:
            score = acc_l + acc_r - _xlogx(wl, xp) - _xlogx(wr, xp)
    else:
        yc = xp.reshape(xp.take(y, xp.reshape(ss, (-1,))), (nb, f, L))
        yc = yc - xp.reshape(
            mean, (nb, 1, 1)
        )  # centred per node: no cancellation in SSE
        s1 = xp.cumulative_sum(wsr * yc, axis=-1)
        r1 = s1[..., -1:] - s1
        score = s1 * s1 / wl_s + r1 * r1 / wr_s
    # valid thresholds: between distinct neighbours, both children big enough
    ln = xp.reshape(lens_d, (nb, 1, 1))
    p3 = xp.reshape(pos, (1, 1, L))
    msl = params.min_samples_leaf
    ok = (p3 <= ln - 2) & (p3 + 1 >= msl) & (ln - 1 - p3 >= msl)
    distinct = xs[..., 1:] > xs[..., :-1] + FEATURE_THRESHOLD
    distinct = xp.concat(
        [distinct, xp.zeros((nb, f, 1), dtype=xp.bool, device=dev)], axis=-1
    )
    score = xp.where(ok & distinct, score, -inf)
    score2 = xp.reshape(score, (nb, f * L))
    bi = xp.argmax(score2, axis=-1)
    best = xp.take_along_axis(score2, bi[:, None], axis=-1)[:, 0]
    xs2 = xp.reshape(xs, (nb, f * L))
    bi1 = xp.minimum(bi + 1, xp.asarray(f * L - 1, dtype=bi.dtype, device=dev))
    x0 = xp.take(xp.reshape(xs2, (-1,)), bi + nrow * f)
    x1 = xp.take(xp.reshape(xs2, (-1,)), bi1 + nrow * f)
    thr = x0 / 2 + x1 / 2
    thr = xp.where((thr == x1) | xp.isinf(thr) | xp.isnan(thr), x0, thr)
    fi = bi // L
    feat = xp.take_along_axis(F, fi[:, None], axis=-1)[:, 0]
    return best, feat, bi % L, thr


def _children_stats(Xflat, d, y, sids, ws, lens_d, feat, p, mean, params, xp):
    """Sort each node's samples along its chosen feature; statistics of the
    left part (positions ``<= p``) and of the whole node."""
    nb, L = sids.shape
    dev = array_api_compat.device(sids)
    pos = xp.arange(L, dtype=sids.dtype, device=dev)
    v = xp.reshape(xp.take(Xflat, xp.reshape(sids * d + feat[:, None], (-1,))), (nb, L))
    perm = xp.argsort(v, axis=-1, stable=True)
    rs = xp.take_along_axis(sids, perm, axis=-1)
    rw = xp.take_along_axis(ws, perm, axis=-1)
    left = pos[None, :] <= p[:, None]
    zero = xp.zeros_like(rw)
    rwl = xp.where(left, rw, zero)
    if params.classification:
        yk = xp.reshape(xp.take(y, xp.reshape(rs, (-1,))), (nb, L))
        ks = xp.arange(params.n_classes, dtype=yk.dtype, device=dev)
        oh = xp.astype(yk[:, :, None] == ks[None, None, :], rw.dtype)
        cl = xp.sum(oh * rwl[:, :, None], axis=1)
        ct = xp.sum(oh * rw[:, :, None], axis=1)
        cols = [cl, ct]
    else:
        yc = xp.reshape(xp.take(y, xp.reshape(rs, (-1,))), (nb, L)) - mean[:, None]
        cols = [
            xp.stack(
                [
                    xp.sum(rwl, axis=1),
                    xp.sum(rwl * yc, axis=1),
                    xp.sum(rwl * yc * yc, axis=1),
                    xp.sum(rw, axis=1),
                    xp.sum(rw * yc, axis=1),
                    xp.sum(rw * yc * yc, axis=1),
                ],
                axis=1,
            )
        ]
    return rs, rw, cols


# ------------------------------------------------------------------- growth
def grow(X, y, samp, sampw, root_lens, params, *, xp, rngs=None, budget=_BUDGET):
    """Grow ``len(root_lens)`` trees at once.

    Parameters
    ----------
    X : array (n, d), float
    y : array (n,)
        Integer class codes ``0..K-1`` (classification) or float targets.
    samp, sampw : arrays (E,)
        Sample indices and their (positive) weights, the roots' samples one
        root after another.
    root_lens : ndarray (R,), host
        Number of entries of each root.
    params : GrowParams
    rngs : list of numpy Generators, one per root
        Draw the random feature subsets (only used when
        ``params.max_features < d``), in each tree's node order, so a tree is
        the same whether grown alone or inside a forest.

    Returns
    -------
    list of dict
        One dict of host NumPy arrays per tree: ``feature``, ``threshold``,
        ``children_left``, ``children_right``, ``value``, ``impurity``,
        ``n_node_samples``, ``weighted_n_node_samples``, and ``max_depth``.
    """
    n, d = int(X.shape[0]), int(X.shape[1])
    dev = array_api_compat.device(X)
    # a sentinel row n of +inf pads the node blocks (weight 0, never valid)
    Xflat = xp.concat(
        [xp.reshape(X, (-1,)), xp.full(d, xp.inf, dtype=X.dtype, device=dev)]
    )
    y = xp.concat([y, xp.zeros(1, dtype=y.dtype, device=dev)])
    sentinel = xp.asarray(n, dtype=samp.dtype, device=dev)
    K = params.n_classes
    clf = params.classification
    m = min(params.max_features, d)
    subset = m < d
    root_lens = np.asarray(root_lens, dtype=np.int64)
    R = len(root_lens)
    table = _NodeTable(K if clf else 2, d if subset else 0)

    # ---- roots
    ends = np.cumsum(root_lens)
    starts = ends - root_lens
    stats = np.zeros((R, K if clf else 2))
    W = np.zeros(R)
    for r in range(R):
        s, e = int(starts[r]), int(ends[r])
        ys, w = xp.take(y, samp[s:e]), sampw[s:e]
        if clf:
            ks = xp.arange(K, dtype=ys.dtype, device=dev)
            cnt = xp.sum(
                xp.astype(ys[:, None] == ks[None, :], w.dtype) * w[:, None], axis=0
            )
            stats[r] = to_numpy(cnt)
            W[r] = stats[r].sum()
        else:
            tw = xp.sum(w)
            mu = xp.sum(w * ys) / tw
            var = xp.sum(w * (ys - mu) ** 2) / tw
            W[r], stats[r, 0], stats[r, 1] = [
                float(v) for v in to_numpy(xp.stack([tw, mu, var]))
            ]
    W_root = W.copy()
    depth0 = np.zeros(R, dtype=np.int64)
    imp = _impurity_host(stats, W, params)
    ids = table.add(
        tree=np.arange(R), depth=depth0, n=root_lens, W=W, stats=stats, impurity=imp
    )
    open_mask = _splittable(depth0, root_lens, stats, W, imp, params)
    if not open_mask.all():
        keep = np.concatenate(
            [np.arange(s, e) for s, e, o in zip(starts, ends, open_mask) if o]
            + [np.zeros(0, np.int64)]
        )
        kd = xp.asarray(keep, device=dev)
        samp, sampw = xp.take(samp, kd), xp.take(sampw, kd)
    lvl_ids = ids[open_mask]
    dtype = X.dtype

    while len(lvl_ids):
        lens = table["n"][lvl_ids]
        lstart = np.cumsum(lens) - lens
        next_samp, next_w, next_ids = [], [], []
        chunks = _plan_blocks(lens, m, budget)
        for sel, L in chunks:
            nid = lvl_ids[sel]
            nb = len(sel)
            sids, ws, ln_d, pos, valid = _gather_block(
                samp, sampw, lstart[sel], lens[sel], L, sentinel, xp
            )
            mean = None
            if not clf:
                mean = xp.asarray(table["stats"][nid, 0], dtype=dtype, device=dev)
            # candidate features: all, or a fresh random subset of m non-constant ones
            vals = None
            if subset:
                F, vals, known = _draw_features(
                    Xflat,
                    d,
                    sids,
                    lens[sel],
                    table["tree"][nid],
                    rngs,
                    m,
                    table["const"][nid],
                    xp,
                )
            else:
                F = xp.broadcast_to(xp.arange(d, device=dev)[None, :], (nb, d))
            fc = m if vals is not None else max(1, budget // (nb * L))
            score, feat, p, thr = _best_split(
                Xflat, d, y, sids, ws, ln_d, F, mean, params, xp, vals=vals, chunk=fc
            )
            rs, rw, cols = _children_stats(
                Xflat, d, y, sids, ws, ln_d, feat, p, mean, params, xp
            )
            packed = xp.concat(
                [
                    xp.stack(
                        [score, xp.astype(feat, dtype), xp.astype(p, dtype), thr],
                        axis=1,
                    )
                ]
                + [xp.astype(c, dtype) for c in cols],
                axis=1,
            )
            h = np.asarray(to_numpy(packed), dtype=np.float64)
            found = np.isfinite(h[:, 0])
            hfeat, hp, hthr = (
                h[:, 1].astype(np.int64),
                h[:, 2].astype(np.int64),
                h[:, 3],
            )
            n_node = lens[sel]
            depth = table["depth"][nid] + 1
            trees = table["tree"][nid]
            stl, str_, wl, wr = _child_stats_host(h[:, 4:], K, table["stats"][nid, 0])
            imp_l = _impurity_host(stl, wl, params)
            imp_r = _impurity_host(str_, wr, params)
            Wn = table["W"][nid]
            decrease = (Wn * table["impurity"][nid] - wl * imp_l - wr * imp_r) / W_root[
                trees
            ]
            accept = found & (decrease + EPSILON >= params.min_impurity_decrease)
            if not accept.any():
                continue
            a_idx = np.nonzero(accept)[0]
            nl, nr = hp[a_idx] + 1, n_node[a_idx] - hp[a_idx] - 1
            # children, interleaved left/right per split node
            c_n = _interleave(nl, nr)
            c_stats = _interleave(stl[a_idx], str_[a_idx])
            c_W = _interleave(wl[a_idx], wr[a_idx])
            c_imp = _interleave(imp_l[a_idx], imp_r[a_idx])
            c_depth = np.repeat(depth[a_idx], 2)
            c_tree = np.repeat(trees[a_idx], 2)
            extra = {"const": np.repeat(known[a_idx], 2, axis=0)} if subset else {}
            cids = table.add(
                tree=c_tree,
                depth=c_depth,
                n=c_n,
                W=c_W,
                stats=c_stats,
                impurity=c_imp,
                **extra,
            )
            pid = nid[a_idx]
            table.cols["feature"][pid] = hfeat[a_idx]
            table.cols["threshold"][pid] = hthr[a_idx]
            table.cols["left"][pid] = cids[0::2]
            table.cols["right"][pid] = cids[1::2]
            c_open = _splittable(c_depth, c_n, c_stats, c_W, c_imp, params)
            if not c_open.any():
                continue
            # carry the open children's samples (sorted along the split feature)
            keep = np.zeros((nb, 3), dtype=np.int64)
            keep[:, 0] = hp
            keep[a_idx, 1] = c_open[0::2]
            keep[a_idx, 2] = c_open[1::2]
            kd = xp.asarray(keep, device=dev)
            left = pos[None, :] <= kd[:, 0:1]
            inc = xp.where(left, kd[:, 1:2] > 0, kd[:, 2:3] > 0) & valid
            next_samp.append(rs[inc])
            next_w.append(rw[inc])
            next_ids.append(cids[c_open])
        if not next_ids:
            break
        samp = xp.concat(next_samp) if len(next_samp) > 1 else next_samp[0]
        sampw = xp.concat(next_w) if len(next_w) > 1 else next_w[0]
        lvl_ids = np.concatenate(next_ids)
    return _split_trees(table, R, params)


def _plan_blocks(lens, m, budget, merge=1 << 12):
    """Group nodes by padded length L (ascending) into blocks of at most
    ``budget // (L m)`` nodes: a list of (node positions, L).

    A group of short nodes joins the next longer group when the padding this
    adds (``nodes · ΔL · m`` elements) costs less than one more block's fixed
    overhead (about ``merge`` elements of work)."""
    Ls = _block_len(lens)
    order = np.argsort(Ls, kind="stable")
    Ls_sorted = Ls[order]
    # merge consecutive length groups while the extra padding stays small
    target = Ls_sorted.copy()
    groups = np.unique(Ls_sorted)
    start = 0
    for g_next in groups[1:]:
        cur = Ls_sorted[start:] < g_next
        cnt = int(np.sum(cur))
        if cnt and cnt * (int(g_next) - int(target[start:][cur].max())) * m <= merge:
            target[start : start + cnt] = g_next
        else:
            start = start + cnt
    blocks, i = [], 0
    while i < len(order):
        L = int(target[i])
        j, nb_max = i, max(1, budget // (L * m))
        while j < len(order) and target[j] == L and j - i < nb_max:
            j += 1
        blocks.append((order[i:j], L))
        i = j
    return blocks


def _gather_block(samp, sampw, starts, lens, L, sentinel, xp):
    """Each node's entries as one row of an (nb, L) block, padded with the
    sentinel sample (weight 0)."""
    nb = len(lens)
    dev = array_api_compat.device(samp)
    aux = xp.asarray(np.stack([starts, lens], axis=1), device=dev)
    st_d, ln_d = aux[:, 0], aux[:, 1]
    pos = xp.arange(L, dtype=st_d.dtype, device=dev)
    valid = pos[None, :] < ln_d[:, None]
    gi = xp.reshape(
        xp.where(valid, st_d[:, None] + pos[None, :], xp.zeros_like(st_d)[:, None]),
        (-1,),
    )
    sids = xp.where(valid, xp.reshape(xp.take(samp, gi), (nb, L)), sentinel)
    ws = xp.where(
        valid,
        xp.reshape(xp.take(sampw, gi), (nb, L)),
        xp.zeros((nb, L), dtype=sampw.dtype, device=dev),
    )
    return sids, ws, ln_d, pos, valid


def _best_split(Xflat, d, y, sids, ws, ln_d, F, mean, params, xp, *, vals, chunk):
    """:func:`_search` over the candidate features in chunks of ``chunk``,
    keeping the first best (ties go to the earlier feature)."""
    m = int(F.shape[1])
    best = None
    for a in range(0, m, chunk):
        res = _search(
            Xflat,
            d,
            y,
            sids,
            ws,
            ln_d,
            F[:, a : min(m, a + chunk)],
            mean,
            params,
            xp,
            vals=vals,
        )
        if best is None:
            best = res
        else:
            better = res[0] > best[0]
            best = tuple(xp.where(better, r, b) for r, b in zip(res, best))
    return best


def _child_stats_host(h, K, node_mean):
    """Children's statistics from the packed device summary: class counts, or
    ``[mean, variance]`` from the sums of ``w``, ``w(y−ȳ)``, ``w(y−ȳ)²``."""
    if K:
        cl, ct = h[:, :K], h[:, K : 2 * K]
        cr = np.maximum(ct - cl, 0.0)
        return cl, cr, cl.sum(1), cr.sum(1)
    w_l, s1l, s2l, w_t, s1t, s2t = h[:, :6].T
    out = []
    for w, s1, s2 in ((w_l, s1l, s2l), (w_t - w_l, s1t - s1l, s2t - s2l)):
        ws = np.where(w > 0, w, 1.0)
        out.append(
            np.stack([node_mean + s1 / ws, np.maximum(s2 / ws - (s1 / ws) ** 2, 0)], 1)
        )
    return out[0], out[1], w_l, w_t - w_l


def _interleave(a, b):
    """``[a0, b0, a1, b1, ...]`` along the first axis."""
    out = np.empty((2 * len(a),) + a.shape[1:], dtype=np.result_type(a, b))
    out[0::2], out[1::2] = a, b
    return out


def _draw_features(Xflat, d, sids, lens, trees, rngs, m, known, xp):
    """A fresh random subset of ``m`` features per node: the first ``m``
    non-constant features of a random order (scikit-learn's rule: constant
    features do not use up the draw). ``known`` (nb, d) marks features already
    known to be constant in the node (inherited from its parent); they go to the
    end of the order. Only the slots that hit a constant feature are re-drawn,
    so continuous data costs one gather of ``m`` features.

    Returns the features (nb, m), their gathered values and the updated
    ``known``."""
    nb, L = sids.shape
    dev = array_api_compat.device(sids)
    keys = np.empty((nb, d))
    for t in np.unique(trees):
        rows = np.nonzero(trees == t)[0]
        keys[rows] = rngs[t].random((len(rows), d))
    known = known.copy()
    order = np.argsort(keys + 2.0 * known, axis=1, kind="stable")
    F = order[:, :m].copy()
    nxt = np.full(nb, m)
    free_total = d - known.sum(axis=1)
    pos = xp.arange(L, dtype=sids.dtype, device=dev)
    ninf = xp.asarray(-xp.inf, dtype=Xflat.dtype, device=dev)
    valid = (pos[None, :] < xp.asarray(lens, device=dev)[:, None])[:, None, :]
    rows = np.arange(nb)[:, None]
    while True:
        Fd = xp.asarray(F, device=dev)
        g = xp.reshape(sids, (nb, 1, L)) * d + xp.reshape(Fd, (nb, m, 1))
        vals = xp.take(Xflat, xp.reshape(g, (-1,)))
        v3 = xp.reshape(vals, (nb, m, L))
        hi = xp.max(xp.where(valid, v3, ninf), axis=-1)
        lo = xp.min(v3, axis=-1)  # padding is +inf
        const = to_numpy(hi <= lo + FEATURE_THRESHOLD)
        known[np.broadcast_to(rows, F.shape)[const], F[const]] = True
        # replace constant slots (in slot order) while unknown features remain
        need = np.minimum(const.sum(axis=1), np.maximum(free_total - nxt, 0))
        if not need.any():
            return Fd, vals, known
        for b in np.nonzero(need)[0]:
            slots = np.nonzero(const[b])[0][: need[b]]
            F[b, slots] = order[b, nxt[b] : nxt[b] + need[b]]
            nxt[b] += need[b]


def _split_trees(table, R, params):
    tree_of = table["tree"]
    out = []
    for t in range(R):
        sel = np.nonzero(tree_of == t)[0]
        remap = np.full(table.size, -1, dtype=np.int64)
        remap[sel] = np.arange(len(sel))
        left, right = table["left"][sel], table["right"][sel]
        stats, W = table["stats"][sel], table["W"][sel]
        if params.classification:
            value = stats / np.where(W > 0, W, 1.0)[:, None]
        else:
            value = stats[:, 0].copy()
        out.append(
            {
                "feature": table["feature"][sel].copy(),
                "threshold": table["threshold"][sel].copy(),
                "children_left": np.where(left >= 0, remap[np.maximum(left, 0)], -1),
                "children_right": np.where(right >= 0, remap[np.maximum(right, 0)], -1),
                "value": value,
                "impurity": table["impurity"][sel].copy(),
                "n_node_samples": table["n"][sel].copy(),
                "weighted_n_node_samples": W.copy(),
                "max_depth": int(table["depth"][sel].max()),
            }
        )
    return out


# ------------------------------------------------------------------ routing
def route(
    X, feature, threshold, left, right, depth, *, xp, roots=None, compact_every=8
):
    """Leaf reached by every row of ``X``: ``(n,)``, or ``(T, n)`` for ``T``
    trees stored one after another with their roots at ``roots``.

    Leaves loop back to themselves (feature 0, threshold +inf, both children
    the leaf), so a step is four gathers and a comparison with no branch; every
    ``compact_every`` steps the rows that reached a leaf are set aside and the
    rest continue (their results are put back in order by one final sort).
    """
    n, d = int(X.shape[0]), int(X.shape[1])
    dev = array_api_compat.device(X)
    idt = feature.dtype
    Xflat = xp.reshape(X, (-1,))
    leaf = feature < 0
    n_nodes = int(feature.shape[0])
    self_ids = xp.arange(n_nodes, dtype=idt, device=dev)
    f = xp.where(leaf, xp.zeros_like(feature), feature)
    inf = xp.asarray(xp.inf, dtype=threshold.dtype, device=dev)
    thr = xp.where(leaf, inf, threshold)
    kids = xp.reshape(
        xp.stack(
            [xp.where(leaf, self_ids, left), xp.where(leaf, self_ids, right)], axis=1
        ),
        (-1,),
    )
    base = xp.arange(n, dtype=idt, device=dev) * d
    T = 1 if roots is None else int(roots.shape[0])
    if roots is None:
        node = xp.zeros(n, dtype=idt, device=dev)
    else:
        node = xp.reshape(
            roots[:, None] + xp.zeros((1, n), dtype=idt, device=dev), (-1,)
        )
        base = xp.reshape(xp.broadcast_to(base[None, :], (T, n)), (-1,))
    slot = xp.arange(T * n, dtype=idt, device=dev)
    done_slot, done_node = [], []
    for step in range(depth):
        xv = xp.take(Xflat, base + xp.take(f, node))
        node = xp.take(kids, 2 * node + xp.astype(xv > xp.take(thr, node), idt))
        if (step + 1) % compact_every == 0 and step + 1 < depth:
            fin = xp.take(leaf, node)
            done_slot.append(slot[fin])
            done_node.append(node[fin])
            keep = ~fin
            slot, node, base = slot[keep], node[keep], base[keep]
    if done_slot:
        slot = xp.concat(done_slot + [slot])
        node = xp.concat(done_node + [node])
        node = xp.take(node, xp.argsort(slot))
    if roots is not None:
        node = xp.reshape(node, (T, n))
    return node
