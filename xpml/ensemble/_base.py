"""Shared machinery of the ensembles: parallel map, progress bar, stacked trees."""

from __future__ import annotations

import sys

import numpy as np

from xpml.tree._grow import route

__all__ = ["parallel_map", "progress_bar", "stacked_leaves"]


def parallel_map(fn, tasks, *, n_jobs=None, progress=None, weights=None):
    """``[fn(t) for t in tasks]``, through joblib threads when ``n_jobs`` asks
    for more than one worker and joblib is installed (sequential otherwise).

    ``progress`` (from :func:`progress_bar`) advances by ``weights[i]`` as task
    ``i`` finishes.
    """
    weights = weights if weights is not None else [1] * len(tasks)
    workers = 1 if n_jobs in (None, 1) else n_jobs
    if workers != 1 and len(tasks) > 1:
        try:
            from joblib import Parallel, delayed
        except ImportError:  # joblib is optional: fall back to sequential fitting
            workers = 1
    if workers == 1 or len(tasks) <= 1:
        out = []
        for t, w in zip(tasks, weights):
            out.append(fn(t))
            if progress is not None:
                progress.update(w)
        return out
    gen = Parallel(n_jobs=workers, prefer="threads", return_as="generator")(
        delayed(fn)(t) for t in tasks
    )
    out = []
    for r, w in zip(gen, weights):
        out.append(r)
        if progress is not None:
            progress.update(w)
    return out


class _TextProgress:
    """A minimal progress line on stderr (used when tqdm is not installed)."""

    def __init__(self, total, desc):
        self.total, self.desc, self.n = total, desc, 0

    def update(self, k=1):
        self.n += k
        sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total}")
        sys.stderr.flush()

    def close(self):
        sys.stderr.write("\n")


def progress_bar(enabled, total, desc):
    """A tqdm bar (or a plain stderr counter without tqdm); None when disabled."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return _TextProgress(total, desc)
    return tqdm(total=total, desc=desc)


def stacked_leaves(trees, X, ctx, *, max_elements=1 << 19):
    """Yield ``(chunk of trees, value rows (T_c, n, ...))`` routing many trees
    at once: their arrays are concatenated with offsets and all rows of ``X`` go
    down all trees of a chunk together (one ``route`` call per chunk). Chunks
    hold about ``max_elements`` (tree, row) pairs: small enough to stay in cache
    on a CPU."""
    xp = ctx.xp
    n = int(X.shape[0])
    k = 1
    v0 = trees[0].tree_value_
    if len(v0.shape) == 2:
        k = int(v0.shape[1])
    per_chunk = max(1, max_elements // max(1, n * k))
    for a in range(0, len(trees), per_chunk):
        chunk = trees[a : a + per_chunk]
        sizes = np.asarray([t.node_count_ for t in chunk])
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        feat = xp.concat([ctx.take(t.tree_feature_) for t in chunk])
        thr = xp.concat([ctx.take(t.tree_threshold_) for t in chunk])
        val = xp.concat([ctx.take(t.tree_value_) for t in chunk], axis=0)
        lefts, rights = [], []
        for t, o in zip(chunk, offs):
            c_l, c_r = ctx.take(t.tree_children_left_), ctx.take(t.tree_children_right_)
            lefts.append(xp.where(c_l >= 0, c_l + int(o), c_l))
            rights.append(xp.where(c_r >= 0, c_r + int(o), c_r))
        roots = xp.asarray(offs, dtype=feat.dtype, device=ctx.device)
        depth = max(t.max_depth_ for t in chunk)
        leaves = route(
            X, feat, thr, xp.concat(lefts), xp.concat(rights), depth, xp=xp, roots=roots
        )
        rows = xp.take(val, xp.reshape(leaves, (-1,)), axis=0)
        shape = (len(chunk), n) + tuple(rows.shape[1:])
        yield a, xp.reshape(rows, shape)
