"""Vectorized SMO for the soft-margin SVM dual, with batched working sets.

The dual, in LIBSVM's minimisation form with ``Q_ij = y_i y_j K(x_i, x_j)``::

    min_α  ½ αᵀQα − Σα     s.t.  0 ≤ α_i ≤ C_i,   Σ y_i α_i = 0.

We keep ``v = −y ∘ ∇f(α)``. The KKT conditions say ``max_{I_up} v ≤
min_{I_low} v`` with ``I_up = {y=+1, α<C} ∪ {y=−1, α>0}`` and ``I_low =
{y=+1, α>0} ∪ {y=−1, α<C}``; the solver stops when the violation ``m − M``
falls below ``tol`` (LIBSVM's criterion, Keerthi et al. 2001).

Each outer step ("working set") is three named steps:

1. :func:`_propose` (on the device): the largest ``v`` in ``I_up`` and the
   smallest in ``I_low`` (the maximal violators), their scores and the dual
   objective, packed into one small array read by the host once;
   :func:`_working_set` (host) adds the free variables (``0 < α < C``) of the
   previous set, up to ``q/2`` of them (keeping them stops the zig-zag of a
   purely greedy set);
2. :func:`_solve_block`: the ``q × q`` block ``K_BB`` (Gram engine) and the
   ``q``-variable subproblem, solved by 2-variable SMO steps whose pair is the
   maximal violator and LIBSVM's second-order partner (Fan, Chen & Lin 2005);
   curvature ``a ≤ τ`` (non-PSD kernels) becomes ``τ = 1e-12``;
3. :func:`_update_gradient`: ``v −= K[B, :]ᵀ (y_B ∘ Δα_B)`` over the rows of
   ``B``, which :class:`KernelRows` keeps in a row cache that grows (doubling)
   as rows are requested, up to ``cache_size``, then evicts the least recently
   used. The rows are fetched after the subproblem, and only those of the
   variables that moved; on NumPy, where the cache cannot hold every row, a
   row not cached whose variable moved to a bound is computed into a scratch
   block and not kept (:func:`_used_once`).

The working-set size adapts: it starts at ``n/20`` within ``_Q_START`` and
doubles (up to ``q``) while the subproblems are busy (many free variables or
many steps), so a problem with few support vectors computes few kernel rows.

Shrinking (LIBSVM's heuristic, ``shrinking=True``): every ``_SHRINK_EVERY``
working sets a variable at a bound whose ``v`` says it cannot join a
violating pair (only in ``I_up`` with ``v < M``, or only in ``I_low`` with
``v > m``) is removed from the active set; kernel rows, selection and the
gradient update then cover the active set only. When the active problem is
solved to ``10 tol`` (and again at the end) the gradient of the removed
variables is brought up to date (:func:`_unshrink`: ``v`` is linear in ``α``,
so each group removed needs the kernel columns of the variables that moved
since, not of every support vector) and optimality re-checked on the whole
set, so the answer is the unshrunk one.
With ``shrinking="evicting"`` (SVC's choice for computed kernels) the checks
start only once the row cache has evicted a row (:func:`_shrink_due`).

Host synchronisation per working set: one read of the packed proposal, and
on every library but NumPy (:func:`_solve_block_portable`) one transfer each
way: ``B`` is assembled on the device from the proposal's own device arrays
(no upload), the ``q × q`` block and four ``q``-vectors go to the host for
the subproblem (thousands of tiny sequential steps cost less there than as
device launches), and one upload brings back ``α_B``, the steps of the
variables that moved, their cache slots and the kernel rows to compute.
Shrinking and unshrinking read one mask or count and upload nothing (the
row cache keeps a device copy of its slot map). Library-specific pieces
(NumPy's ``argpartition``, proposal and host solve, RBF factors kept per
``X``, indexed row writes) are registered with
:func:`xpml.utils._array_api.fast_path` beside portable twins. At small ``n``
(2,000) the cost on NumPy is the number of NumPy calls per SMO step and per
working set, not flops: the host subproblem (:func:`_subproblem_numpy`) is
written to make few of them.

References
----------
Platt (1998) Sequential minimal optimization. Keerthi, Shevade, Bhattacharyya &
Murthy (2001) Improvements to Platt's SMO algorithm. Fan, Chen & Lin (2005)
Working set selection using second order information, JMLR 6. Joachims (1999)
and Chang & Lin (2011) LIBSVM (shrinking). Wen et al. (2018) ThunderSVM
(batched working sets).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from xpml._backend import to_numpy
from xpml.kernels import _rbf_factors, kernel_matrix
from xpml.utils._array_api import (
    device,
    dispatch,
    fast_path,
    itemsize,
    portable,
)

__all__ = [
    "KernelRows",
    "PrecomputedRows",
    "SMOOptions",
    "SMOResult",
    "smo_solve",
    "solve_subproblem",
]

TAU = 1e-12  # curvature floor for non-PSD kernels (LIBSVM's TAU)
_CHUNK = 256  # rows per transient block (new kernel rows, gathered rows)
_STALL = 50  # working sets without progress before giving up
_CHECK_EVERY = 8  # portable subproblem solver: host check every this many steps
# first working-set size, n/20 within [64, 256]; doubles while the subproblems
# are busy. Not 64 at large n: with many bounded support vectors (d = 2,
# n = 5k-20k) a set of 64 takes ~10 steps and the O(n) work per set dominates
# (334 sets at n = 10k, 0.9 s; from 256: 239 sets, 0.7 s); other shapes within
# noise. Small problems keep 64 (and few-SV problems stay small).
_Q_START = (64, 256)
_SHRINK_EVERY = 4  # working sets between shrinking checks
_SHRINK_MIN = 0.2  # compact the active set when this fraction can go
_GATHER_BYTES = 1 << 20  # scratch for gathered cache rows (NumPy)
# most bytes of cached rows one product streams whole (NumPy); past it the
# rows asked for are gathered (see _row_product_numpy)
_STREAM_BYTES = 8 << 20


# ----------------------------------------------------- library-specific ops
def _example_top_k():
    score = np.random.default_rng(0).permutation(50).astype(np.float64)
    return (score, 7), {"xp": np}


@portable("svm.top_k")
def _top_k(score, k, /, *, xp):
    """Indices of the ``k`` largest entries, largest first (ties by index)."""
    return xp.argsort(score, descending=True, stable=True)[: min(k, score.shape[0])]


@fast_path("svm.top_k", "numpy", example=_example_top_k)
def _top_k_numpy(score, k, /, *, xp):
    """``argpartition`` then a sort of the ``k`` winners; can differ from the
    portable sort only in which of exactly tied entries at the cut are taken."""
    n = score.shape[0]
    k = min(k, n)
    if n <= 4 * k:
        return _top_k(score, k, xp=xp)
    part = np.argpartition(-score, k - 1)[:k]
    return part[np.lexsort((part, -score[part]))]


def _example_write_rows():
    buf = np.zeros((6, 4))
    block = np.arange(12.0).reshape(3, 4)
    return (buf, np.array([4, 1, 2]), block), {"xp": np}


@portable("svm.write_rows")
def _write_rows(buf, slots, block, /, *, xp):
    """``buf[slots] = block`` through slices (runs of consecutive slots are
    written together); returns ``buf``."""
    slots = to_numpy(slots)
    breaks = np.flatnonzero(np.diff(slots) != 1) + 1
    for run in np.split(np.arange(slots.shape[0]), breaks):
        s, r = int(slots[run[0]]), int(run[0])
        buf[s : s + run.shape[0], :] = block[r : r + run.shape[0], :]
    return buf


@fast_path("svm.write_rows", "numpy", "torch", "cupy", example=_example_write_rows)
def _write_rows_indexed(buf, slots, block, /, *, xp):
    """One indexed assignment."""
    buf[slots] = block
    return buf


def _example_subproblem():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 3))
    K = np.exp(-0.5 * ((X[:, None] - X[None]) ** 2).sum(-1))
    y = np.where(rng.random(30) < 0.5, 1.0, -1.0)
    return (K, y, np.zeros(30), np.full(30, 2.0), y.copy()), {
        "xp": np,
        "tol": 1e-9,
        "max_steps": 2000,
    }


@fast_path("svm.subproblem", "numpy", "torch", "cupy", example=_example_subproblem)
def _subproblem_on_host(K, y, a, C, v, /, *, xp, tol, max_steps):
    """The subproblem on the host: thousands of tiny sequential steps cost less
    there than as device launches. One transfer each way (the block with the
    four vectors stacked under it; ``α_B`` and ``v_B`` back)."""
    q = K.shape[0]
    packed = to_numpy(xp.concat([K, xp.stack([y, a, C, v], axis=0)], axis=0))
    Kh, (yh, ah, Ch, vh) = packed[:q], packed[q:]
    a_new, v_new, steps = _subproblem_numpy(
        Kh, yh, ah, Ch, vh, tol=tol, max_steps=max_steps
    )
    out = xp.asarray(np.stack([a_new, v_new]), dtype=K.dtype, device=device(K))
    return out[0, :], out[1, :], steps


def _subproblem_numpy(K, y, a, C, v, /, *, tol, max_steps):
    """2-variable SMO steps on NumPy arrays; buffers are reused and the
    per-pair arithmetic runs on Python floats (``α``, ``y``, ``C`` lists).
    At working-set sizes (q ≤ 1024) a ufunc call costs more than its data, so
    the cost is the number of NumPy calls per step: ``out`` is passed by
    position (by keyword it costs about 0.1 µs more per call), except to
    ``np.maximum``, which is several times slower with a positional ``out``
    (NumPy 2.x); a scalar operand is a reused 0-d array (a Python float costs
    about 40 % more per call); the stopping test reads the clipped score of
    the partner picked and scans all of them only when that one is below
    ``tol`` (the same answer, one call fewer on most steps)."""
    v = v.copy()
    diag = np.diagonal(K).copy()
    ypos = y > 0
    # additive masks: 0 where a variable is in I_up / I_low, −inf where not
    pen_up = np.where(np.where(ypos, a < C, a > 0), 0.0, -np.inf)
    pen_low = np.where(np.where(ypos, a > 0, a < C), 0.0, -np.inf)
    t, curv, gain = (np.empty_like(v) for _ in range(3))
    zero, two, tau = np.zeros_like(v), np.full_like(v, 2.0), np.full_like(v, TAU)
    s = np.zeros((), dtype=v.dtype)  # the scalar operand of the next call
    al, yl, Cl = a.tolist(), y.tolist(), C.tolist()
    add, sub, mul, div, maximum = (
        np.add,
        np.subtract,
        np.multiply,
        np.divide,
        np.maximum,
    )
    steps = 0
    while steps < max_steps:
        add(v, pen_up, t)
        i = int(t.argmax())
        s[()] = m = t.item(i)
        sub(s, v, t)  # b = m − v
        add(t, pen_low, t)  # over I_low only
        maximum(t, zero, out=t)  # b⁺: the test below holds for tol > 0
        Ki = K[i]
        mul(Ki, two, curv)  # 2 K_i by rows: no q × q temporary
        sub(diag, curv, curv)
        s[()] = diag.item(i)
        add(curv, s, curv)
        maximum(curv, tau, out=curv)
        mul(t, t, gain)
        div(gain, curv, gain)  # second-order gain b²/a over admissible partners
        j = int(gain.argmax())
        if not (tol > 0 and t.item(j) >= tol) and not _violated(
            t, v, (pen_low, m, tol)
        ):
            break
        newton = (m - v.item(j)) / curv.item(j)
        dai, daj = _pair_step(al, (yl, Cl), (pen_up, pen_low), (i, j), newton)
        if dai == 0 and daj == 0:  # below the floating-point resolution
            break
        s[()] = dai
        mul(Ki, s, t)
        sub(v, t, v)
        s[()] = daj
        mul(K[j], s, t)
        sub(v, t, v)
        steps += 1
    return np.asarray(al, dtype=a.dtype), v, steps


def _violated(t, v, test):
    """Whether some ``b = m − v`` over ``I_low`` reaches ``tol`` (the full
    stopping test, when the partner picked is below it; ``test`` is
    ``(pen_low, m, tol)``). For ``tol > 0`` the clipped scores ``t = b⁺``
    answer it (one ``argmax``); else ``b`` is formed again."""
    pen_low, m, tol = test
    if tol > 0:
        return t.item(int(t.argmax())) >= tol
    return bool(((m - v) + pen_low).max() >= tol)


def _pair_step(a, yC, masks, pair, newton):
    """Move ``α_i`` up and ``α_j`` down along the feasible line by the clipped
    Newton step; ``a`` and the masks ``(pen_up, pen_low)`` are updated in
    place, returns ``y∘Δα`` of the pair."""
    (y, C), (pen_up, pen_low), (i, j) = yC, masks, pair
    ai, aj, yi, yj, Ci, Cj = a[i], a[j], y[i], y[j], C[i], C[j]
    ub_i = Ci - ai if yi > 0 else ai
    ub_j = aj if yj > 0 else Cj - aj
    t = min(newton, ub_i, ub_j)
    ai_new = (Ci if yi > 0 else 0.0) if t == ub_i else ai + yi * t
    aj_new = (0.0 if yj > 0 else Cj) if t == ub_j else aj - yj * t
    a[i], a[j] = ai_new, aj_new
    # the masks of both after the step: I_up is {y=+1, α<C} ∪ {y=−1, α>0}
    inside_i = (ai_new < Ci, ai_new > 0) if yi > 0 else (ai_new > 0, ai_new < Ci)
    inside_j = (aj_new < Cj, aj_new > 0) if yj > 0 else (aj_new > 0, aj_new < Cj)
    pen_up[i] = 0.0 if inside_i[0] else -math.inf
    pen_low[i] = 0.0 if inside_i[1] else -math.inf
    pen_up[j] = 0.0 if inside_j[0] else -math.inf
    pen_low[j] = 0.0 if inside_j[1] else -math.inf
    return yi * (ai_new - ai), yj * (aj_new - aj)


@portable("svm.subproblem")
def _subproblem_portable(K, y, a, C, v, /, *, xp, tol, max_steps):
    """Array-API version: the state stays on the device; a step is a fixed
    sequence of array operations. ``live`` turns False, and stays so, where
    the host version stops; the host reads it every ``_CHECK_EVERY`` steps,
    so the result and the step count are the host version's."""
    dev, dt = device(K), K.dtype
    c = _Consts(
        ar=xp.arange(K.shape[0], device=dev),
        diag=xp.linalg.diagonal(K),
        zero=xp.asarray(0.0, dtype=dt, device=dev),
        ninf=xp.asarray(-math.inf, dtype=dt, device=dev),
        tau=xp.asarray(TAU, dtype=dt, device=dev),
        tol=tol,
    )
    live = xp.asarray(True, device=dev)
    count = xp.asarray(0, dtype=xp.int64, device=dev)
    for it in range(max_steps):
        if it % _CHECK_EVERY == 0 and it and not bool(live):
            break
        a, v, live = _portable_step(K, (y, C), (a, v, live), c, xp=xp)
        count = count + xp.astype(live, xp.int64)
    return a, v, int(count)


@dataclasses.dataclass
class _Consts:
    ar: object
    diag: object
    zero: object
    ninf: object
    tau: object
    tol: float


def _portable_step(K, yC, state, c, *, xp):
    y, C = yC
    a, v, live = state
    ypos = y > 0
    up = xp.where(ypos, a < C, a > 0)
    low = xp.where(ypos, a > 0, a < C)
    vu = xp.where(up, v, c.ninf)
    i = xp.argmax(vu)
    m = vu[i]
    bl = xp.where(low, m - v, c.ninf)
    live = live & (xp.max(bl) >= c.tol)
    Ki = xp.take(K, xp.reshape(i, (1,)), axis=0)[0, :]
    curv = xp.maximum((c.diag - 2.0 * Ki) + c.diag[i], c.tau)  # the host's order
    bp = xp.maximum(bl, c.zero)
    j = xp.argmax((bp * bp) / curv)
    ai, aj, Ci, Cj, yi, yj = a[i], a[j], C[i], C[j], y[i], y[j]
    ub_i = xp.where(ypos[i], Ci - ai, ai)
    ub_j = xp.where(ypos[j], aj, Cj - aj)
    t = xp.minimum(xp.minimum((m - v[j]) / curv[j], ub_i), ub_j)
    ai_new = xp.where(t == ub_i, xp.where(ypos[i], Ci, c.zero), ai + yi * t)
    aj_new = xp.where(t == ub_j, xp.where(ypos[j], c.zero, Cj), aj - yj * t)
    dai = yi * (ai_new - ai)
    daj = yj * (aj_new - aj)
    live = live & ((dai != 0) | (daj != 0))
    dai = xp.where(live, dai, c.zero)
    daj = xp.where(live, daj, c.zero)
    a = xp.where(live & (c.ar == i), ai_new, xp.where(live & (c.ar == j), aj_new, a))
    v = v - dai * Ki - daj * xp.take(K, xp.reshape(j, (1,)), axis=0)[0, :]
    return a, v, live


def solve_subproblem(Kbb, y, alpha, C, v, *, xp, tol, max_steps, force_portable=False):
    """Solve the dual restricted to a working set by 2-variable SMO steps.

    Parameters
    ----------
    Kbb : array (q, q)
        Kernel block of the working set.
    y, alpha, C, v : arrays (q,)
        Labels (±1 floats), current coefficients, upper bounds and
        ``v = −y∘∇f`` restricted to the set.
    tol : float
        Stop when ``max_{I_up} v − min_{I_low} v < tol`` inside the set.
    max_steps : int
        Most SMO steps.

    Returns
    -------
    alpha, v : arrays (q,)
        New coefficients and the updated restricted ``v``.
    steps : int
        SMO steps taken.
    """
    solve = dispatch("svm.subproblem", xp, fast=not force_portable)
    return solve(Kbb, y, alpha, C, v, xp=xp, tol=tol, max_steps=max_steps)


def _example_grow_rows():
    # a view of a zero-filled base: the rows the fast path adds are that
    # base's (it leaves them as they are), the portable twin's are zeros
    base = np.zeros((8, 3))
    base[:2] = np.arange(6.0).reshape(2, 3)
    return (base[:2], 5, 8), {"xp": np}


@portable("svm.grow_rows")
def _grow_rows(buf, rows, cap, /, *, xp):
    """``buf`` with ``rows`` rows (``cap`` the most it will ever need): the
    old rows first, then rows the caller writes before it reads them (zeros
    here, one copy)."""
    more = xp.zeros(
        (rows - buf.shape[0], buf.shape[1]), dtype=buf.dtype, device=device(buf)
    )
    return xp.concat([buf, more], axis=0)


@fast_path("svm.grow_rows", "numpy", example=_example_grow_rows)
def _grow_rows_numpy(buf, rows, cap, /, *, xp):
    """NumPy: the first ``rows`` rows of one uninitialised allocation of ``cap``
    rows, made once; growing copies nothing and writes nothing. The rows added
    are left as they are (the portable twin's zeros cost a pass over them):
    the cache writes every slot before reading it. (``np.zeros`` of the whole
    cap is not free either: below the allocator's mmap threshold, which rises
    to 32 MB once such a block has been freed, calloc clears every byte.)"""
    base, old = buf.base, buf.shape[0]
    if not (isinstance(base, np.ndarray) and base.shape[0] >= rows):
        base = np.empty((cap, buf.shape[1]), dtype=buf.dtype)
        base[:old] = buf
    return base[:rows]


def _example_rows_into():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(9, 3))
    spec = ("rbf", {"gamma": 0.4}, None)
    buf = np.zeros((6, 9))  # new rows into the consecutive slots 2, 3, 4
    rows = np.array([5, 0, 7])
    return (buf, X, rows, np.array([2, 3, 4]), spec), {"xp": np, "memo": {}}


@portable("svm.rows_into")
def _rows_into(buf, X, rows, slots, spec, /, *, xp, memo):
    """``buf[slots] = K(X[rows], X)`` (``spec``: kernel, params, the Gram
    engine's budget); returns ``buf``. ``memo`` keeps what a fast path may
    reuse between calls on the same ``X``."""
    kernel, params, budget = spec
    Xb = xp.take(X, rows, axis=0)
    block = kernel_matrix(Xb, X, kernel, params, xp=xp, memory_budget=budget)
    block = xp.astype(block, buf.dtype, copy=False)
    return dispatch("svm.write_rows", xp)(buf, slots, block, xp=xp)


@fast_path("svm.rows_into", "numpy", example=_example_rows_into)
def _rows_into_numpy(buf, X, rows, slots, spec, /, *, xp, memo):
    """NumPy, RBF rows into consecutive slots (new rows while the cache
    grows): the exponent's product is written straight into the cache and
    finished there, as the Gram engine finishes its own block (same
    operations, same values), with both factors of ``X`` kept in ``memo``
    (:func:`_rbf_memo`). No transient block: no copy, and no fresh memory
    touched besides the cache's own rows. Anything else: the portable way."""
    kernel, params, _ = spec
    m = slots.shape[0]
    first = int(slots[0]) if m else 0
    run = m and int(slots[-1]) - first == m - 1 and bool(np.all(np.diff(slots) == 1))
    if not (run and kernel == "rbf" and buf.dtype == X.dtype):
        return _rows_into(buf, X, rows, slots, spec, xp=xp, memo=memo)
    left, right = _rbf_memo(X, params["gamma"], memo, xp=xp)
    out = buf[first : first + m]
    np.matmul(np.take(left, rows, axis=0), right.T, out=out)
    np.minimum(out, 0.0, out=out)
    np.exp(out, out=out)
    return buf


def _rbf_memo(X, gamma, memo, *, xp):
    """Both factors of the RBF exponent for every row of ``X`` (NumPy),
    made once per ``X`` and kept in ``memo``: a block or a batch of rows
    then takes its rows of them (one ``take`` each) instead of building
    them through the namespace (norms, ones, concatenations: about 40 µs a
    working set). The rows taken are the values :func:`_rbf_factors` gives
    for those rows alone (each row's norm is its own sum). Two arrays of
    ``X``'s size, ``d + 2`` columns."""
    if memo.get("rbf") is None:
        memo["rbf"] = _rbf_factors(X, X, gamma, xp=xp)
    return memo["rbf"]


def _example_block():
    X = np.random.default_rng(6).normal(size=(10, 3))
    B = np.array([0, 2, 3, 5, 6, 8, 9])
    return (X, B, ("rbf", {"gamma": 0.4}, None)), {"xp": np, "memo": {"q": 9}}


@portable("svm.block")
def _block(X, B, spec, /, *, xp, memo):
    """``K(X_B, X_B)`` by the Gram engine (``spec``: kernel, params, budget)."""
    kernel, params, budget = spec
    XB = xp.take(X, B, axis=0)
    return kernel_matrix(
        XB, XB, kernel, params, xp=xp, symmetric=True, memory_budget=budget
    )


@fast_path("svm.block", "numpy", example=_example_block)
def _block_numpy(X, B, spec, /, *, xp, memo):
    """NumPy RBF: the Gram engine's operations (exponent product, exact zeros
    on the diagonal, clamp and ``exp`` in place) in one buffer of
    ``memo["q"]²`` values kept for every working set, so a fit does not
    allocate (and fault in) a fresh ``q × q`` block per set; the factors are
    rows of :func:`_rbf_memo`'s. The result is a view of that buffer, valid
    until the next call."""
    kernel, params, _ = spec
    q = B.shape[0]
    if kernel != "rbf" or q > memo.get("q", 0):
        return _block(X, B, spec, xp=xp, memo=memo)
    flat = memo.get("block")
    if flat is None or flat.dtype != X.dtype:
        flat = memo["block"] = np.empty(memo["q"] ** 2, dtype=X.dtype)
    left, right = _rbf_memo(X, params["gamma"], memo, xp=xp)
    E = flat[: q * q].reshape(q, q)
    np.matmul(np.take(left, B, axis=0), np.take(right, B, axis=0).T, out=E)
    np.fill_diagonal(E, 0.0)
    np.minimum(E, 0.0, out=E)
    np.exp(E, out=E)
    return E


# ---------------------------------------------------------------- kernel rows
class KernelRows:
    """Rows of the kernel matrix of ``X`` in a row cache with LRU eviction.

    The cache is one ``(size, n)`` array that grows by doubling as rows are
    requested, up to the cap the budget allows, then evicts the least recently
    used rows. Missing rows are computed together as Gram blocks by
    :mod:`xpml.kernels`.

    Parameters
    ----------
    X : array (n, d), validated, in namespace ``xp``
    kernel, params : as :func:`xpml.kernels.resolve_kernel_params` returns them
    memory_budget : int
        Bytes for the cache **and** the transient blocks together.
    q : int
        Largest working-set size (lowered to fit a small budget).
    cache_dtype : dtype, optional
        Storage of cached rows (default ``X.dtype``); float32 halves the
        memory at about 1e-7 relative error in the kernel values.

    Attributes
    ----------
    peak_bytes : int
        Largest bytes held at once: the cache plus the live transient blocks.
    computed_rows, hits : int
        Rows computed through the Gram engine, and rows found in the cache.
    """

    def __init__(self, X, kernel, params, *, xp, memory_budget, q, cache_dtype=None):
        self.kernel, self.params, self.xp = kernel, params, xp
        self.dtype = X.dtype if cache_dtype is None else cache_dtype
        self.budget = int(memory_budget)
        self.X_full = X
        n = int(X.shape[0])
        fit_rows = self.budget // (n * itemsize(self.dtype, xp))
        # transients are processed in chunks of at most _CHUNK rows: the block
        # of new rows, the Gram engine's workspace and the gathered rows
        self.q = max(2, min(q, n, fit_rows // 5))
        self.chunk = min(_CHUNK, self.q)
        self.peak_bytes = self.computed_rows = self.hits = self.evictions = 0
        self._set_columns(X)

    def _set_columns(self, X):
        """Start an empty cache over the columns ``X``."""
        self.X = X
        self.n = int(X.shape[0])
        self.row_bytes = self.n * itemsize(self.dtype, self.xp)
        fit_rows = self.budget // self.row_bytes
        self.cap = max(self.q, min(self.n, fit_rows - 4 * self.chunk))
        self.buf = None
        self.size = self.used = 0
        self.slot_of = np.full(self.n, -1, dtype=np.int64)
        # the device's copy of slot_of, kept in step through the uploads that
        # compute rows anyway (so shrinking can move cached rows without one)
        self.slot_dev = self.xp.full(
            (self.n,), -1, dtype=self.xp.int64, device=device(X)
        )
        self.row_of = np.full(self.cap, -1, dtype=np.int64)
        self.stamp = np.zeros(self.cap, dtype=np.int64)
        self.clock = 0
        # what the fast paths keep between calls on ``X`` (factors, scratch)
        self._memo = {"q": self.q}

    @property
    def uncached_ok(self):
        """Rows used once may skip the cache: it cannot hold them all (the cap
        can fall while the cache grows, see :meth:`_grow`)."""
        return self.cap < self.n

    def _note(self, transient_rows):
        held = (self.size + transient_rows) * self.row_bytes
        self.peak_bytes = max(self.peak_bytes, held)

    def _grow(self, need):
        """Room for ``need`` rows: the cache's size doubles (up to the cap)."""
        if need <= self.size:
            return
        new = min(self.cap, max(need, 2 * self.size, 16))
        if self.size and (self.size + new) * self.row_bytes > self.budget:
            # the old buffer and the new one would not fit together: the
            # cache stops growing here and evicts instead
            self.cap = max(self.size, min(self.q, self.cap))
            new = min(self.cap, max(need, self.size))
            if new <= self.size:
                return
        if self.buf is None:
            self.buf = self.xp.empty(
                (0, self.n), dtype=self.dtype, device=device(self.X)
            )
        self._note(self.size)  # the old buffer and the new one, briefly
        self.buf = dispatch("svm.grow_rows", self.xp)(
            self.buf, new, self.cap, xp=self.xp
        )
        self.size = new

    def _slots_for(self, n_miss):
        """Free slots first (growing the buffer), then the least recently used
        (never this set's)."""
        old_used = self.used
        self._grow(old_used + min(n_miss, self.cap - old_used))
        free = min(n_miss, self.cap - old_used)  # the cap can fall in _grow
        fresh = np.arange(old_used, old_used + free)
        self.used += free
        if free == n_miss:
            return fresh
        order = np.argsort(self.stamp[:old_used], kind="stable")
        order = order[self.stamp[order] < self.clock][: n_miss - free]
        old = self.row_of[order]
        self.evicted = np.sort(old[old >= 0])
        self.evictions += int(self.evicted.shape[0])
        self.slot_of[self.evicted] = -1
        return np.concatenate([fresh, order])

    def plan(self, B):
        """The bookkeeping of :meth:`fetch` (host only): slots for the rows
        ``B`` (sorted host ints), the rows to compute with their slots, and
        the rows evicted for them (sorted)."""
        self.clock += 1
        self.evicted = B[:0]
        slots = self.slot_of[B]
        miss = slots < 0
        n_miss = int(miss.sum())
        self.hits += len(B) - n_miss
        self.stamp[slots[~miss]] = self.clock
        if not n_miss:
            return slots, B[:0], slots[:0], B[:0]
        new = B[miss]
        order = self._slots_for(n_miss)
        self.row_of[order] = new
        self.slot_of[new] = order
        self.stamp[order] = self.clock
        self.computed_rows += n_miss
        return self.slot_of[B], new, order, self.evicted

    def compute(self, new, slots, evicted):
        """Kernel rows ``new`` into the cache ``slots``, ``evicted`` rows
        forgotten (device ints, as :meth:`plan` returned them)."""
        xp = self.xp
        scatter = dispatch("svm.scatter", xp)
        if evicted.shape[0]:
            gone = xp.full(evicted.shape, -1, dtype=xp.int64, device=device(new))
            self.slot_dev = scatter(self.slot_dev, evicted, gone, xp=xp)
        self.slot_dev = scatter(self.slot_dev, new, slots, xp=xp)
        m = int(new.shape[0])
        for c in range(0, m, self.chunk):
            e = min(c + self.chunk, m)
            self._compute(new[c:e], slots[c:e])

    def fetch(self, B):
        """Make the rows ``B`` (sorted host ints) resident; return their slots."""
        slots, new, order, evicted = self.plan(B)
        if new.shape[0]:
            m = new.shape[0]
            sent = np.concatenate([new, order, evicted])
            sent = self.xp.asarray(sent, device=device(self.X))
            self.compute(sent[:m], sent[m : 2 * m], sent[2 * m :])
        return slots

    def _compute(self, rows, slots):
        """Kernel rows ``rows`` into ``slots`` (device ints)."""
        xp = self.xp
        n_rows = int(rows.shape[0])
        budget = None if isinstance(self.kernel, str) else 3 * n_rows * self.row_bytes
        self._note(3 * n_rows)
        self.buf = dispatch("svm.rows_into", xp)(
            self.buf,
            self.X,
            rows,
            slots,
            (self.kernel, self.params, budget),
            xp=xp,
            memo=self._memo,
        )

    def block(self, Bd):
        """``K[B, B]`` (``Bd`` on the device), computed afresh by the Gram
        engine: ``q² d`` flops cost less than gathering ``q²`` values scattered
        over the cache. On NumPy it may be a view of a buffer the next call
        overwrites."""
        xp = self.xp
        q = int(Bd.shape[0])
        budget = None if isinstance(self.kernel, str) else 3 * q * q * 8
        return dispatch("svm.block", xp)(
            self.X,
            Bd,
            (self.kernel, self.params, budget),
            xp=xp,
            memo=self._memo,
        )

    def product(self, sl_dev, d):
        """``K[B, :]ᵀ d`` for the cached rows in the slots ``sl_dev`` (device)."""
        self._note(2 * min(int(sl_dev.shape[0]), self.chunk))
        prod = dispatch("svm.row_product", self.xp)
        return prod(
            self.buf,
            sl_dev,
            d,
            self.used,
            xp=self.xp,
            chunk=self.chunk,
            memo=self._memo,
        )

    def cross(self, rows, cols, coef):
        """``K[rows, cols] @ coef`` (device index arrays), in row chunks."""
        xp = self.xp
        Xc = xp.take(self.X_full, cols, axis=0)
        n_rows, n_cols = int(rows.shape[0]), int(cols.shape[0])
        step = max(1, self.budget // max(1, 3 * n_cols * 8))
        parts = []
        for c in range(0, n_rows, step):
            Xr = xp.take(self.X_full, rows[c : min(c + step, n_rows)], axis=0)
            Kc = kernel_matrix(Xr, Xc, self.kernel, self.params, xp=xp)
            parts.append(Kc @ coef)
        return xp.concat(parts) if parts else coef[:0]

    def restrict(self, keep, keep_d):
        """Keep the columns ``keep`` (host positions in the current columns,
        ``keep_d`` the same on the device); cached rows of kept variables are
        kept as far as the budget allows the copy (no upload: their slots come
        from the device's copy of the slot map)."""
        xp = self.xp
        slot_of, buf = self.slot_of[keep], self.buf
        sl = xp.take(self.slot_dev, keep_d)
        old_bytes = self.size * self.row_bytes
        room = (self.budget - old_bytes) // self.row_bytes - 4 * self.chunk
        self._set_columns(xp.take(self.X, keep_d, axis=0))
        rows = np.flatnonzero(slot_of >= 0)[: max(0, min(self.cap, room))]
        if buf is None or not len(rows):
            return
        self._grow(len(rows))
        self.peak_bytes = max(
            self.peak_bytes, old_bytes + (self.size + 2 * self.chunk) * self.row_bytes
        )
        n_rows = len(rows)
        # the cached ones first, in order: the device's ``rows``
        pos = xp.argsort(xp.astype(sl < 0, xp.int32), stable=True)[:n_rows]
        src = xp.take(sl, pos)
        for c in range(0, n_rows, self.chunk):
            part = xp.take(
                xp.take(buf, src[c : min(c + self.chunk, n_rows)], axis=0),
                keep_d,
                axis=1,
            )
            dest = xp.arange(c, c + part.shape[0], device=device(buf))
            self.buf = dispatch("svm.write_rows", xp)(self.buf, dest, part, xp=xp)
        dest = xp.arange(n_rows, device=device(buf))
        self.slot_dev = dispatch("svm.scatter", xp)(self.slot_dev, pos, dest, xp=xp)
        self.used = n_rows
        self.slot_of[rows] = np.arange(n_rows)
        self.row_of[:n_rows] = rows

    def reset(self):
        """Back to every column of ``X`` (after unshrinking), cache emptied."""
        self._set_columns(self.X_full)

    def release(self):
        self.buf = None
        self._memo = {}


class PrecomputedRows(KernelRows):
    """Rows of a kernel matrix the user already holds (``kernel="precomputed"``):
    the matrix itself is the cache and nothing is computed."""

    def __init__(self, K, *, xp, q):
        self.xp = xp
        self.K_full = self.buf = K
        self.n = int(K.shape[0])
        self.q = max(2, min(q, self.n))
        self.chunk = min(_CHUNK, self.q)
        self.row_bytes = 0
        self.size = 0
        self.peak_bytes = self.computed_rows = self.hits = self.evictions = 0
        self._memo = {}

    @property
    def uncached_ok(self):
        return False  # every row is resident

    @property
    def used(self):
        return self.n  # every row is resident

    def plan(self, B):
        self.hits += len(B)
        return B, B[:0], B[:0], B[:0]

    def compute(self, new, slots, evicted):
        pass

    def fetch(self, B):
        return self.plan(B)[0]

    def block(self, Bd):
        xp = self.xp
        return xp.take(xp.take(self.buf, Bd, axis=0), Bd, axis=1)

    def cross(self, rows, cols, coef):
        xp = self.xp
        Kr = xp.take(self.K_full, rows, axis=0)
        return xp.take(Kr, cols, axis=1) @ coef

    def restrict(self, keep, keep_d):
        xp = self.xp
        self.buf = xp.take(xp.take(self.buf, keep_d, axis=0), keep_d, axis=1)
        self.n = len(keep)

    def reset(self):
        self.buf = self.K_full
        self.n = int(self.K_full.shape[0])

    def release(self):
        pass


def _example_scatter():
    return (np.zeros(8), np.array([1, 4, 6]), np.array([1.0, 2.0, 3.0])), {"xp": np}


@portable("svm.scatter")
def _scatter(x, idx, values, /, *, xp):
    """``x[idx] = values`` for sorted unique device ``idx``; returns ``x``.
    Portable: a mask built on the device (``O(n q)`` comparisons) and a masked
    assignment, whose order is the sorted order of ``idx``."""
    ar = xp.arange(x.shape[0], device=device(x))
    mask = xp.any(ar[:, None] == idx[None, :], axis=1)
    x[mask] = values
    return x


@fast_path("svm.scatter", "numpy", "torch", "cupy", example=_example_scatter)
def _scatter_indexed(x, idx, values, /, *, xp):
    x[idx] = values
    return x


def _example_row_product():
    rng = np.random.default_rng(3)
    buf = rng.normal(size=(10, 6))
    kw = {"xp": np, "chunk": 3, "memo": {}}
    return (buf, np.array([7, 2, 4, 0]), rng.normal(size=4), 9), kw


@portable("svm.row_product")
def _row_product(buf, slots, d, used, /, *, xp, chunk, memo=None):
    """``buf[slots]ᵀ d``: the rows gathered ``chunk`` at a time (``used``, the
    rows in use, and ``memo``, the fast path's scratch, are for the fast path)."""
    out = xp.zeros((buf.shape[1],), dtype=d.dtype, device=device(d))
    m = int(slots.shape[0])
    for c in range(0, m, chunk):
        rows = xp.take(buf, slots[c : min(c + chunk, m)], axis=0)
        out = out + d[c : c + rows.shape[0]] @ xp.astype(rows, d.dtype, copy=False)
    return out


@fast_path("svm.row_product", "numpy", example=_example_row_product)
def _row_product_numpy(buf, slots, d, used, /, *, xp, chunk, memo=None):
    """NumPy: when the rows are a third or more of those in use, and those
    fit in ``_STREAM_BYTES``, one product over all of them (a view, zeros
    where not asked) streams the cache once; a gather copies each row and
    then reads it again, about three times the memory traffic per row, but
    only of the rows asked for, through a scratch that stays in the core's
    cache. Past the last-level cache, streaming every row in use costs more
    (one BLAS thread, 32 MB shared L3: 31 MB in use, 800 rows asked for of
    2,000: 0.95 ms streamed, 0.78 ms gathered; 76 MB, 700 of 2,000: 2.9 ms
    against 1.4 ms; 8 MB, 400 of 500: 0.10 ms against 0.23 ms). (A float32
    cache is gathered: the product is in ``d``'s precision, and converting
    every row in use would cost more.)"""
    streamed = used * buf.shape[1] * buf.itemsize
    few = 3 * slots.shape[0] < used or streamed > _STREAM_BYTES
    if few or buf.dtype != d.dtype:
        return _gathered_product(buf, slots, d, {} if memo is None else memo)
    coef = np.zeros(used, dtype=d.dtype)
    coef[slots] = d
    return coef @ buf[:used]


def _gathered_product(buf, slots, d, memo):
    """``buf[slots]ᵀ d`` on NumPy with the rows gathered into one scratch block
    of about ``_GATHER_BYTES``, kept in ``memo`` for the next calls: a
    transient of ``chunk`` whole rows is megabytes at large ``n``, and each
    fresh one faults its pages in."""
    n, m = buf.shape[1], slots.shape[0]
    step = max(1, _GATHER_BYTES // max(1, n * buf.itemsize))
    scratch = memo.get("gather")
    if scratch is None or scratch.shape != (step, n) or scratch.dtype != buf.dtype:
        scratch = memo["gather"] = np.empty((step, n), dtype=buf.dtype)
    out = np.zeros(n, dtype=d.dtype)
    for c in range(0, m, step):
        e = min(c + step, m)
        # mode="clip" (slots are in range): with "raise" NumPy buffers `out`
        rows = np.take(buf, slots[c:e], axis=0, out=scratch[: e - c], mode="clip")
        out += d[c:e] @ rows
    return out


# ------------------------------------------------------------------ the solver
@dataclasses.dataclass
class SMOOptions:
    """Settings of :func:`smo_solve`.

    ``tol``: stop when the maximal KKT violation ``m − M`` is below it.
    ``max_iter``: most SMO steps in total (``-1``: no limit). ``shrinking``:
    LIBSVM's shrinking heuristic; ``"evicting"``: only once the row cache
    has evicted a row (see :func:`_shrink_due`). ``adaptive_q``: start with small working
    sets and double them while the subproblems are busy (else always
    ``rows.q``). ``inner_ratio``: a subproblem is solved until its violation
    is below ``max(tol, inner_ratio · global violation)``. ``inner_steps``:
    most SMO steps per subproblem (default ``10 q``). ``verbose``: print
    progress every 20 (or ``verbose``) working sets.
    """

    tol: float = 1e-3
    max_iter: int = -1
    shrinking: bool | str = True
    adaptive_q: bool = True
    inner_ratio: float = 0.1
    inner_steps: int | None = None
    verbose: bool | int = False
    label: str = ""


@dataclasses.dataclass
class SMOResult:
    """Solution of one binary dual.

    ``alpha`` (n,), ``v = −y∘∇f`` (n,), ``rho`` (decision ``Σαᵢyᵢk(xᵢ,x) − rho``),
    ``dual`` (``Σα − ½αᵀQα``), ``primal`` (``½‖w‖² + Σ Cᵢξᵢ``), ``gap`` (final
    KKT violation ``m − M``), ``n_iter`` (SMO steps), ``n_outer`` (working
    sets), ``converged``, ``peak_bytes``, ``computed_rows``, ``cache_hits``,
    ``n_shrink`` (times the active set was compacted).
    """

    alpha: object
    v: object
    rho: float
    dual: float
    primal: float
    gap: float
    n_iter: int
    n_outer: int
    converged: bool
    peak_bytes: int
    computed_rows: int
    cache_hits: int
    n_shrink: int = 0


@dataclasses.dataclass
class _Problem:
    """The active part of the dual: device arrays over the active variables,
    ``active`` their indices in the full problem (None: all of them)."""

    y: object
    C: object
    alpha: object
    v: object
    ninf: object  # −inf as a 0-d array of the problem's dtype and device
    active: np.ndarray | None = None
    active_d: object = None  # ``active`` on the device
    bounds: tuple | None = None  # (y, C, up, low) as :func:`_index_bounds` made them


@dataclasses.dataclass
class _Full:
    """The full problem on the device, for shrinking and unshrinking:
    ``alpha`` as it was at the last shrinking, ``v`` (full length) holding each
    removed variable's ``v`` as it was when it was removed, and ``groups``, per
    shrinking, the variables it removed (sorted full indices, on the device)
    with the full ``α`` of that moment."""

    y: object
    C: object
    alpha: object = None
    v: object = None
    groups: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class _Progress:
    q: int
    kept: np.ndarray
    B_dev: object = None
    B_host: np.ndarray | None = None
    busy: bool = False
    n_iter: int = 0
    n_outer: int = 0
    n_shrink: int = 0
    gap: float = math.inf
    best: float = -math.inf
    stalled: int = 0
    converged: bool = False
    unshrunk: bool = False


@dataclasses.dataclass
class _Proposal:
    """What :func:`_propose` read: host candidates (best first, only those
    in their index set), which of the previous set are free, the violation
    and the dual; ``dev`` the device arrays they came from ``(cu, cl, free)``."""

    up: np.ndarray
    low: np.ndarray
    free_prev: np.ndarray
    gap: float
    dual: float
    dev: tuple


@dataclasses.dataclass
class _WorkingSet:
    """``B`` (sorted unique host ints) and how to build it on the device
    without an upload: the first ``counts[0]`` free variables of the previous
    set ``parts[0]`` (free mask ``parts[1]``), then ``counts[1]`` and
    ``counts[2]`` of the device candidates ``parts[2]`` and ``parts[3]``."""

    B: np.ndarray
    counts: tuple
    parts: tuple


def _index_bounds(prob, *, xp):
    """Thresholds on ``u = y∘α`` for the index sets, made once per ``(y, C)``:
    ``i ∈ I_up ⇔ u_i < up_i`` and ``i ∈ I_low ⇔ u_i > low_i``, with ``up = C``,
    ``low = 0`` where ``y = +1`` and ``up = 0``, ``low = −C`` where ``y = −1``
    (exact: ``u = ±α``). Two comparisons per working set instead of four and
    two selections."""
    b = prob.bounds
    if b is None or b[0] is not prob.y or b[1] is not prob.C:
        ypos, zero = prob.y > 0, xp.zeros_like(prob.C)
        up, low = xp.where(ypos, prob.C, zero), xp.where(ypos, zero, -prob.C)
        prob.bounds = b = (prob.y, prob.C, up, low)
    return b[2], b[3]


def _propose(prob, h, B_prev, *, xp):
    """Step 1: the ``h`` largest violators on each side, their scores, which
    of the previous set's variables are free, and the dual objective.
    Returns a :class:`_Proposal`."""
    return _Proposal(*dispatch("svm.propose", xp)(prob, h, B_prev, xp=xp))


def _example_propose():
    rng = np.random.default_rng(10)
    y = np.where(rng.random(60) < 0.5, 1.0, -1.0)
    C = np.full(60, 1.5)
    alpha = np.clip(rng.normal(0.5, 0.8, size=60), 0.0, 1.5)
    prob = _Problem(y, C, alpha, rng.normal(size=60), np.asarray(-math.inf))
    return (prob, 9, np.arange(2, 50, 3)), {"xp": np}


@portable("svm.propose")
def _propose_portable(prob, h, B_prev, /, *, xp):
    """On the device, read by the host in one transfer. Returns the fields of
    a :class:`_Proposal`."""
    y, C, alpha, v = prob.y, prob.C, prob.alpha, prob.v
    dt, ninf = v.dtype, prob.ninf
    up, low = _index_bounds(prob, xp=xp)
    u = y * alpha
    s_up = xp.where(u < up, v, ninf)
    s_low = xp.where(u > low, -v, ninf)
    top = dispatch("svm.top_k", xp)
    cu, cl = top(s_up, h, xp=xp), top(s_low, h, xp=xp)
    # the indices ride in the problem's dtype while it holds them exactly (a
    # float32 problem up to 2**24 variables); past that, a transfer of their own
    exact = int(v.shape[0]) <= 2.0 / float(xp.finfo(dt).eps)
    parts = [xp.take(s_up, cu), xp.take(s_low, cl)]
    if exact:
        parts += [xp.astype(cu, dt), xp.astype(cl, dt)]
    free = None
    if B_prev is not None:
        aB, CB = xp.take(alpha, B_prev), xp.take(C, B_prev)
        free = (aB > 0) & (aB < CB)
        parts.append(xp.astype(free, dt))
    dual = xp.sum(alpha * (1.0 + y * v)) / 2.0  # Σα − ½αᵀQα, Qα = 1 − y∘v
    packed = to_numpy(xp.concat(parts + [xp.reshape(dual, (1,))]))
    ku, kl = int(cu.shape[0]), int(cl.shape[0])
    sc_up, sc_low = packed[:ku], packed[ku : ku + kl]
    rest = packed[ku + kl :]  # after the scores: [indices,] free flags, dual
    if exact:
        idx, rest = rest[: ku + kl], rest[ku + kl :]
    else:
        idx = to_numpy(xp.concat([cu, cl]))
    idx = idx.astype(np.int64)
    top_up = sc_up[0] if ku else -math.inf
    top_low = sc_low[0] if kl else -math.inf
    return (
        idx[:ku][np.isfinite(sc_up)],
        idx[ku:][np.isfinite(sc_low)],
        rest[:-1] > 0,
        float(top_up + top_low),
        float(rest[-1]),
        (cu, cl, free),
    )


@fast_path("svm.propose", "numpy", example=_example_propose)
def _propose_numpy(prob, h, B_prev, /, *, xp):
    """NumPy: the same operations on NumPy's own functions, without packing
    for a transfer (the arrays are already on the host); about half the
    cost of the portable version at n = 2,000 (the namespace wrappers and
    the packing, once per working set)."""
    y, C, alpha, v = prob.y, prob.C, prob.alpha, prob.v
    up, low = _index_bounds(prob, xp=xp)
    u = y * alpha
    s_up = np.where(u < up, v, -math.inf)
    s_low = np.where(u > low, -v, -math.inf)
    cu, cl = _top_k_numpy(s_up, h, xp=xp), _top_k_numpy(s_low, h, xp=xp)
    sc_up, sc_low = s_up[cu], s_low[cl]
    free, free_prev = None, np.zeros(0, dtype=bool)
    if B_prev is not None:
        aB, CB = alpha[B_prev], C[B_prev]
        free = free_prev = (aB > 0) & (aB < CB)
    dual = np.sum(alpha * (1.0 + y * v)) / 2.0
    top_up = sc_up[0] if cu.shape[0] else -math.inf
    top_low = sc_low[0] if cl.shape[0] else -math.inf
    return (
        cu[np.isfinite(sc_up)],
        cl[np.isfinite(sc_low)],
        free_prev,
        float(top_up + top_low),
        float(dual),
        (cu, cl, free),
    )


def _working_set(pr, prop, *, q_max):
    """Host: the previous set's free variables (up to q/2) and the candidates;
    the working-set size doubles while the subproblems are busy."""
    if pr.B_host is not None and prop.free_prev.shape[0]:
        kept = pr.B_host[prop.free_prev]
        if pr.busy or kept.shape[0] >= pr.q // 4:
            pr.q = min(2 * pr.q, q_max)
        pr.kept = kept[: min(pr.q // 2, pr.q - 2)]  # room for a violating pair
    h = max(1, (pr.q - pr.kept.shape[0]) // 2)  # candidates come best first
    up, low = prop.up[:h], prop.low[:h]
    cu, cl, free = prop.dev
    return _WorkingSet(
        B=_sorted_unique(np.concatenate([pr.kept, up, low])),
        counts=(pr.kept.shape[0], up.shape[0], low.shape[0]),
        parts=(pr.B_dev, free, cu, cl),
    )


def _sorted_unique(idx):
    """``np.unique`` of a few hundred host ints by a sort: NumPy 2's hash-based
    ``unique`` costs about four times as much at this size (21 µs against
    5 µs for 180 ints), once per working set."""
    s = np.sort(idx)
    keep = np.empty(s.shape[0], dtype=bool)
    keep[:1] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _device_set(ws, n, *, xp):
    """``ws.B`` built on the device from the proposal's own device arrays (no
    upload): kept variables and candidates, sorted, repeats dropped."""
    B_prev, free, cu, cl = ws.parts
    n_kept, n_up, n_low = ws.counts
    parts = [cu[:n_up], cl[:n_low]]
    if n_kept:
        free_first = xp.argsort(xp.astype(~free, xp.int32), stable=True)
        parts.insert(0, xp.take(B_prev, free_first[:n_kept]))
    s = xp.sort(xp.concat(parts))
    repeat = s[1:] == s[:-1]
    tail = xp.where(repeat, xp.full_like(s[1:], n), s[1:])
    return xp.sort(xp.concat([s[:1], tail]))[: ws.B.shape[0]]


def _solve_block(prob, rows, ws, limits, *, xp):
    """Steps 2 and 3: the subproblem on the working set ``ws`` and the
    gradient update. ``limits`` is ``(inner tolerance, most steps)``.
    Returns ``(B on the device, steps)``."""
    solve = dispatch("svm.solve_block", xp)
    prob.alpha, prob.v, Bd, steps = solve(prob, rows, ws, limits, xp=xp)
    return Bd, steps


def _example_solve_block():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 3))
    y = np.where(rng.random(40) < 0.5, 1.0, -1.0)
    rows = KernelRows(X, "rbf", {"gamma": 0.5}, xp=np, memory_budget=1 << 20, q=16)
    prob = _Problem(y, np.full(40, 0.5), np.zeros(40), y.copy(), -math.inf)
    B = np.arange(3, 35, 2)
    ws = _WorkingSet(B, (0, B.shape[0], 0), (None, None, B[::-1].copy(), B[:0]))
    return (prob, rows, ws, (1e-3, 200)), {"xp": np}


def _host_subproblem(Kbb, z, limits, *, xp):
    """The subproblem on the host: one download of ``K_BB`` with the four
    vectors ``z = (y, α, C, v)`` stacked under it. Returns host
    ``(y_B, α_B, α_B new, steps)``."""
    q = Kbb.shape[0]
    packed = to_numpy(xp.concat([Kbb, xp.stack(z, axis=0)], axis=0))
    Kh, (yB, aB, CB, vB) = packed[:q], packed[q:]
    tol_in, max_steps = limits
    aB_new, _, steps = _subproblem_numpy(
        Kh, yB, aB, CB, vB, tol=tol_in, max_steps=max_steps
    )
    return yB, aB, aB_new, steps


@portable("svm.solve_block")
def _solve_block_portable(prob, rows, ws, limits, /, *, xp):
    """``B`` built on the device, the subproblem on the host (thousands of
    tiny sequential steps cost less there than as device launches), then one
    upload carries ``α_B``, the steps ``y∘Δα`` of the variables that moved,
    their cache slots and the kernel rows to compute. Returns
    ``(α, v, B on the device, steps)``."""
    Bd = _device_set(ws, int(prob.v.shape[0]), xp=xp)
    z = [xp.take(z, Bd) for z in (prob.y, prob.alpha, prob.C, prob.v)]
    yB, aB, aB_new, steps = _host_subproblem(rows.block(Bd), z, limits, xp=xp)
    if not steps:
        return prob.alpha, prob.v, Bd, steps
    d = yB * (aB_new - aB)
    moved = np.flatnonzero(d)
    slots, new, order, evicted = rows.plan(ws.B[moved])
    q, m, r = aB_new.shape[0], moved.shape[0], new.shape[0]
    dev, dt = device(prob.v), prob.v.dtype
    sent = [aB_new, d[moved], slots, new, order, evicted]
    sent = xp.asarray(  # the one upload (indices are exact in float64)
        np.concatenate(sent).astype(np.float64), device=dev
    )
    ints = xp.astype(sent[q + m :], xp.int64)
    rows.compute(ints[m : m + r], ints[m + r : m + 2 * r], ints[m + 2 * r :])
    v = prob.v - rows.product(ints[:m], xp.astype(sent[q : q + m], dt))
    alpha = dispatch("svm.scatter", xp)(
        xp.asarray(prob.alpha, copy=True), Bd, xp.astype(sent[:q], dt), xp=xp
    )
    return alpha, v, Bd, steps


@fast_path("svm.solve_block", "numpy", example=_example_solve_block)
def _solve_block_numpy(prob, rows, ws, limits, /, *, xp):
    """NumPy: the subproblem first (it needs ``K_BB`` only), then the rows of
    the variables that moved, the only ones the gradient update reads: a set
    whose bounded variables stay at their bounds computes no rows for them
    (LIBSVM likewise computes the columns of the pairs it steps on)."""
    tol_in, max_steps = limits
    B = ws.B
    Kbb = rows.block(B)
    yB, aB, CB, vB = (z[B] for z in (prob.y, prob.alpha, prob.C, prob.v))
    # already on the host: no packed copy of K_BB as solve_subproblem makes
    aB_new, _, steps = _subproblem_numpy(
        Kbb, yB, aB, CB, vB, tol=tol_in, max_steps=max_steps
    )
    if not steps:
        return prob.alpha, prob.v, B, steps
    d = yB * (aB_new - aB)
    moved = np.flatnonzero(d)
    once = _used_once(rows, B[moved], aB_new[moved], CB[moved])
    keep, v = moved[~once], prob.v
    if keep.shape[0]:
        v = v - rows.product(rows.fetch(B[keep]), d[keep])
    if once.any():
        v = v - _product_once(rows, B[moved[once]], d[moved[once]])
    alpha = prob.alpha.copy()
    alpha[B] = aB_new
    return alpha, v, B, steps


def _used_once(rows, moved, a_new, C_new):
    """Which rows of the variables that ``moved`` (to ``a_new``) are not worth
    a place in the cache: where the cache cannot hold every row, a row not
    cached whose variable now sits at a bound (most bounded support vectors
    never move again once there). Storing such a row costs fresh memory or an
    eviction: first-touching its pages costs about as much as computing it
    again (d = 2, n = 10,000: ~2,700 of the 3,200 rows computed are of
    variables going to C)."""
    if not rows.uncached_ok:
        return np.zeros(moved.shape[0], dtype=bool)
    bound = (a_new <= 0) | (a_new >= C_new)
    return bound & (rows.slot_of[moved] < 0)


def _product_once(rows, B, d):
    """``K[B, :]ᵀ d`` for rows computed through a reused scratch of about
    ``_GATHER_BYTES`` (the cache's own row computation, into its slots
    ``0, 1, ...``) and not cached. NumPy only (the NumPy working-set step)."""
    step = max(1, _GATHER_BYTES // rows.row_bytes)
    memo = rows._memo
    scratch = memo.get("once")
    if scratch is None or scratch.shape != (step, rows.n):
        scratch = memo["once"] = np.empty((step, rows.n), dtype=rows.dtype)
    rows.computed_rows += B.shape[0]
    spec = (rows.kernel, rows.params, None)
    write = dispatch("svm.rows_into", np)
    out = np.zeros(rows.n, dtype=d.dtype)
    for c in range(0, B.shape[0], step):
        e = min(c + step, B.shape[0])
        slots = np.arange(e - c)
        write(scratch, rows.X, B[c:e], slots, spec, xp=np, memo=memo)
        out += d[c:e] @ scratch[: e - c]
    return out


def _first(mask, count, *, xp):
    """Positions of the first ``count`` true entries of a device mask, in
    order (``count`` known on the host: no upload, no data-sized output)."""
    return xp.argsort(xp.astype(~mask, xp.int32), stable=True)[:count]


def _shrink(prob, full, rows, *, xp):
    """Remove bounded variables that cannot join a violating pair (LIBSVM's
    ``be_shrunk``): only in ``I_up`` with ``v < M``, or only in ``I_low`` with
    ``v > m``. Returns whether the active set was compacted. One download
    (the mask), no upload."""
    y, C, alpha, v = prob.y, prob.C, prob.alpha, prob.v
    ypos = y > 0
    up = xp.where(ypos, alpha < C, alpha > 0)
    low = xp.where(ypos, alpha > 0, alpha < C)
    m = xp.max(xp.where(up, v, prob.ninf))
    M = xp.min(xp.where(low, v, -prob.ninf))
    gone = (up & ~low & (v < M)) | (low & ~up & (v > m))
    gone_h = to_numpy(gone)
    n_act = gone_h.shape[0]
    n_gone = int(gone_h.sum())
    if n_gone < max(_SHRINK_MIN * n_act, 1):
        return False
    keep = np.flatnonzero(~gone_h)
    keep_d = _first(~gone, keep.shape[0], xp=xp)
    if prob.active is None:  # the removed variables' α stay fixed until unshrunk
        full.alpha, prob.active, prob.active_d = alpha, np.arange(n_act), None
        full.v = v
        removed = _first(gone, n_gone, xp=xp)
    else:
        removed = _first(gone, n_gone, xp=xp)
        v_removed = xp.take(v, removed)
        removed = xp.take(prob.active_d, removed)  # full indices, still sorted
        scatter = dispatch("svm.scatter", xp)
        full.alpha = scatter(
            xp.asarray(full.alpha, copy=True), prob.active_d, alpha, xp=xp
        )
        full.v = scatter(xp.asarray(full.v, copy=True), removed, v_removed, xp=xp)
    full.groups.append((removed, full.alpha))
    prob.active = prob.active[keep]
    prob.active_d = keep_d if prob.active_d is None else xp.take(prob.active_d, keep_d)
    rows.restrict(keep, keep_d)
    prob.y, prob.C, prob.alpha, prob.v = (xp.take(z, keep_d) for z in (y, C, alpha, v))
    return True


def _unshrink(prob, full, rows, *, xp):
    """Bring ``v`` of the removed variables up to date and make every variable
    active again. ``v = y − K (y∘α)`` is linear in ``α``, and a removed
    variable's ``v`` was exact when it was removed, so each shrinking's group
    needs only the columns of the variables whose ``α`` changed since:
    ``v_R −= K[R, S] (y∘Δα)_S`` (LIBSVM rebuilds the gradient from its
    ``G_bar``, kept up to date for the variables at the upper bound, and the
    free variables; here the bounded variables that have not moved since
    cost nothing). One download per group (how many moved), no upload."""
    act, scatter = prob.active_d, dispatch("svm.scatter", xp)
    alpha = scatter(xp.asarray(full.alpha, copy=True), act, prob.alpha, xp=xp)
    v = scatter(xp.asarray(full.v, copy=True), act, prob.v, xp=xp)
    rows.reset()
    for idx, alpha_then in full.groups:
        step = (alpha - alpha_then) * full.y
        moved = step != 0
        n_moved = int(xp.sum(xp.astype(moved, xp.int64)))
        if not n_moved:
            continue
        cols = _first(moved, n_moved, xp=xp)
        fix = rows.cross(idx, cols, xp.take(step, cols))
        v = scatter(v, idx, xp.take(v, idx) - fix, xp=xp)
    prob.v, prob.alpha, prob.y, prob.C = v, alpha, full.y, full.C
    prob.active = prob.active_d = None
    full.v, full.groups = None, []


def _unshrink_for_good(prob, full, rows, pr, *, xp):
    """Bring every variable back (:func:`_unshrink`); no shrinking after it,
    and a new dual to watch for progress."""
    _unshrink(prob, full, rows, xp=xp)
    pr.unshrunk, pr.B_dev, pr.B_host = True, None, None
    pr.kept, pr.best = pr.kept[:0], -math.inf


def _stalled(pr, value, patience):
    """A tolerance below the floating-point floor of the problem: true after
    ``patience`` working sets that did not raise ``value`` (the dual
    objective, or minus the violation of a shrunk problem, which is noisy:
    four times the patience there)."""
    if value > pr.best + 1e-14 * max(1.0, abs(value)):
        pr.best, pr.stalled = value, 0
    else:
        pr.stalled += 1
    return pr.stalled >= patience


def smo_solve(rows, y, C, *, xp, options=None, **kwargs):
    """Solve the binary SVM dual with batched working sets.

    Parameters
    ----------
    rows : KernelRows or PrecomputedRows
        Supplies kernel rows and the largest working-set size ``rows.q``.
    y : array (n,)
        Labels as ±1 floats.
    C : array (n,)
        Per-sample upper bounds (``C · class_weight · sample_weight``).
    options : SMOOptions, optional
        Tolerance, limits, shrinking...; keyword arguments build one instead.

    Returns
    -------
    SMOResult
    """
    opt = options or SMOOptions(**kwargs)
    n, dev = int(y.shape[0]), device(y)
    zeros = xp.zeros((n,), dtype=y.dtype, device=dev)
    # ∇f = Qα − 1 = −1 at α = 0, so v = −y∘∇f = y
    ninf = xp.full((), -math.inf, dtype=y.dtype, device=dev)
    prob = _Problem(y, C, zeros, xp.asarray(y, copy=True), ninf)
    full = _Full(y, C)
    q_lo, q_hi = _Q_START
    q0 = min(rows.q, max(q_lo, min(q_hi, n // 20))) if opt.adaptive_q else rows.q
    pr = _Progress(q=q0, kept=np.zeros(0, dtype=np.int64))
    limit = math.inf if opt.max_iter is None or opt.max_iter < 0 else int(opt.max_iter)
    t0 = time.perf_counter()
    while True:
        h = max(1, (pr.q - pr.kept.shape[0]) // 2)
        prop = _propose(prob, h, pr.B_dev, xp=xp)
        pr.gap, dual = prop.gap, prop.dual
        _report(opt, pr, rows, t0)
        done = pr.gap < opt.tol or not math.isfinite(pr.gap)
        if prob.active is not None and (done or pr.gap < 10 * opt.tol):
            _unshrink_for_good(prob, full, rows, pr, xp=xp)
            continue
        if done:
            pr.converged = True
            break
        # with variables shrunk, Σα − ½αᵀQα of the active part is not the
        # objective being minimised: watch the violation instead
        progress = dual if prob.active is None else -pr.gap
        if pr.n_iter >= limit:
            break
        if _stalled(pr, progress, _STALL if prob.active is None else 4 * _STALL):
            if prob.active is None:
                break
            # the violation of a shrunk problem can hover while its dual still
            # rises (at n = 100k it stayed near 0.1 for 50 sets): go on in the
            # whole problem, whose dual is the measure of progress
            _unshrink_for_good(prob, full, rows, pr, xp=xp)
            continue
        ws = _working_set(pr, prop, q_max=rows.q)
        inner = opt.inner_steps or max(10 * pr.q, 100)
        limits = (
            max(opt.tol, opt.inner_ratio * pr.gap),
            max(1, int(min(inner, limit - pr.n_iter))),
        )
        pr.B_dev, steps = _solve_block(prob, rows, ws, limits, xp=xp)
        pr.B_host, pr.busy = ws.B, steps >= pr.q // 2
        pr.n_iter += steps
        pr.n_outer += 1
        if steps == 0:
            # the maximal violating pair is in B, so no step means α can no longer
            # change in floating point: accept within 10·tol, else report
            pr.converged = pr.gap < 10 * opt.tol
            break
        if _shrink_due(opt, pr, rows):
            if _shrink(prob, full, rows, xp=xp):
                pr.n_shrink += 1
                pr.B_dev, pr.B_host, pr.kept = None, None, pr.kept[:0]
                pr.best = -math.inf  # the active set's dual is another number
    if prob.active is not None:
        _unshrink(prob, full, rows, xp=xp)
    return _result(prob, rows, pr, xp=xp)


def _shrink_due(opt, pr, rows):
    """Every ``_SHRINK_EVERY`` working sets until the first unshrinking; with
    ``shrinking="evicting"`` only once the row cache has evicted a row. Before
    that every row computed stays, so shrinking would only shorten the rows
    still to compute, and it costs the cache's rows (copied to the kept
    columns, dropped at unshrinking) and the removed variables' gradient
    (``|removed| × |SV|`` kernel values): measured at n = 2k and 5k (RBF,
    the whole kernel matrix within the cache) it made the fit 5–12 % slower."""
    if not opt.shrinking or pr.unshrunk or pr.n_outer % _SHRINK_EVERY:
        return False
    return opt.shrinking != "evicting" or rows.evictions > 0


def _report(opt, pr, rows, t0):
    every = 20 if opt.verbose is True else max(1, int(opt.verbose or 1))
    if opt.verbose and pr.n_outer % every == 0:
        print(
            f"[SMO{opt.label}] set {pr.n_outer:5d}  steps {pr.n_iter:7d}  "
            f"violation {pr.gap:.3e}  q {pr.q}  rows computed {rows.computed_rows}  "
            f"hits {rows.hits}  {time.perf_counter() - t0:.2f}s",
            flush=True,
        )


def _result(prob, rows, pr, *, xp):
    rows.release()
    ypos = prob.y > 0
    rho = _rho(prob.alpha, prob.v, ypos, prob.C, xp=xp)
    dual, primal = _objectives(prob.alpha, prob.v, prob.y, prob.C, rho, xp=xp)
    return SMOResult(
        prob.alpha,
        prob.v,
        rho,
        dual,
        primal,
        pr.gap,
        pr.n_iter,
        pr.n_outer,
        pr.converged,
        rows.peak_bytes,
        rows.computed_rows,
        rows.hits,
        pr.n_shrink,
    )


def _rho(alpha, v, ypos, C, *, xp):
    """LIBSVM's offset: the mean of ``y_i ∇f_i = −v_i`` over free vectors, else
    the middle of the feasible interval."""
    yG = -v
    at_upper = alpha >= C
    at_lower = alpha <= 0
    free = ~(at_upper | at_lower)
    n_free = int(xp.sum(xp.astype(free, xp.int64)))
    if n_free > 0:
        return float(xp.sum(xp.where(free, yG, 0.0))) / n_free
    # upper bound set: (α=C, y=−1) or (α=0, y=+1); lower: (α=C, y=+1) or (α=0, y=−1)
    ub_set = (at_upper & ~ypos) | (at_lower & ypos)
    lb_set = (at_upper & ypos) | (at_lower & ~ypos)
    ub = float(xp.min(xp.where(ub_set, yG, math.inf)))
    lb = float(xp.max(xp.where(lb_set, yG, -math.inf)))
    return (ub + lb) / 2.0


def _objectives(alpha, v, y, C, rho, *, xp):
    """Dual ``Σα − ½αᵀQα`` and primal ``½‖w‖² + Σ Cᵢ ξᵢ`` from the gradient
    alone (``Qα = ∇f + 1 = 1 − y∘v``), no kernel evaluation."""
    Qa = 1.0 - y * v
    wQw = float(xp.sum(alpha * Qa))
    dual = float(xp.sum(alpha)) - 0.5 * wQw
    f = y * Qa - rho  # decision values on the training points
    xi = xp.maximum(1.0 - y * f, 0.0)
    # C·ξ only where ξ > 0: with C = inf (hard margin) a satisfied margin adds 0
    primal = 0.5 * wQw + float(xp.sum(xp.where(xi > 0, C, 0.0) * xi))
    return dual, primal
