"""Vectorized SMO for the soft-margin SVM dual, with batched working sets.

The dual, in LIBSVM's minimisation form with ``Q_ij = y_i y_j K(x_i, x_j)``::

    min_α  ½ αᵀQα − Σα     s.t.  0 ≤ α_i ≤ C_i,   Σ y_i α_i = 0.

We keep ``v = −y ∘ ∇f(α)`` for all ``n`` points. The KKT conditions say
``max_{I_up} v ≤ min_{I_low} v`` with ``I_up = {y=+1, α<C} ∪ {y=−1, α>0}`` and
``I_low = {y=+1, α>0} ∪ {y=−1, α<C}``; the solver stops when the violation
``m − M`` falls below ``tol`` (LIBSVM's criterion, Keerthi et al. 2001).

Each outer step ("working set")

1. picks a working set ``B`` of at most ``q`` indices: the free variables
   (``0 < α < C``) of the previous set, up to ``q/2`` of them, topped up with
   the largest ``v`` in ``I_up`` and the smallest in ``I_low`` (the maximal
   violators; keeping the free ones stops the zig-zag of a purely greedy set);
2. makes the rows ``K[B, :]`` resident in a slot buffer with LRU eviction —
   the missing rows are computed together as Gram blocks through
   :mod:`xpml.kernels`, and the buffer never exceeds the memory budget (the
   full ``n × n`` matrix is held only when it fits);
3. solves the ``q``-variable subproblem with 2-variable SMO steps whose pair is
   chosen by the maximal violator and LIBSVM's second-order rule (Fan, Chen &
   Lin 2005) on ``K_BB``; curvature ``a ≤ τ`` (non-PSD kernels) becomes
   ``τ = 1e-12``, so the solver always terminates;
4. updates the whole gradient with one matrix–vector product over the rows
   whose ``α`` moved: ``v −= K[B, :]ᵀ (y_B ∘ Δα_B)``.

It stops when the violation is below ``tol``, after ``max_iter`` SMO steps, or
when ``_STALL`` working sets in a row leave the dual objective unchanged (a
``tol`` below the floating-point floor of the problem). No shrinking
heuristic is applied: every variable stays in the selection.

Host synchronisation: the outer loop moves ``O(q)`` numbers to the host per
working set (the candidate indices and scores, for the cache bookkeeping, and
the dual objective). The ``q``-variable subproblem is inherently sequential
(thousands of tiny steps), so where small-array operations are expensive it
runs on the host: on NumPy directly, and on torch and CuPy the ``q × q``
block and four ``q``-vectors are copied to the host once per working set
(``O(q²)`` numbers) and ``α_B``, ``v_B`` copied back. The portable
array-API solver (state on the device, one flag read every ``_CHECK_EVERY``
steps) serves every other namespace, array-api-strict among them; a test
checks it agrees with the host solver step for step. NumPy also uses
``argpartition`` for the top-``k`` selection.

References
----------
Platt (1998) Sequential minimal optimization. Keerthi, Shevade, Bhattacharyya &
Murthy (2001) Improvements to Platt's SMO algorithm. Fan, Chen & Lin (2005)
Working set selection using second order information, JMLR 6. Wen et al. (2018)
ThunderSVM (batched working sets).
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from xpml._backend import to_numpy
from xpml.kernels import kernel_matrix

__all__ = [
    "KernelRows",
    "PrecomputedRows",
    "SMOResult",
    "smo_solve",
    "solve_subproblem",
]

TAU = 1e-12  # curvature floor for non-PSD kernels (LIBSVM's TAU)
_CHUNK = 256  # rows per transient block (new kernel rows, gathered rows)
_STALL = 50  # working sets without progress before giving up
_CHECK_EVERY = 8  # portable subproblem solver: host check every this many steps


def _is_numpy(xp):
    return "numpy" in xp.__name__ and "strict" not in xp.__name__


def _host_subproblem(xp):
    """Libraries whose small-array operations cost more than moving a ``q × q``
    block to the host (torch, cupy); array-api-strict keeps the portable path."""
    name = xp.__name__
    return "torch" in name or "cupy" in name


# ---------------------------------------------------------------- kernel rows
class KernelRows:
    """Rows of the kernel matrix of ``X`` in a slot buffer with LRU eviction.

    The buffer is one ``(slots, n)`` array: a working set's rows are found by
    their slot numbers (host bookkeeping), the ``q × q`` block is gathered from
    it, and the gradient update reads only the rows whose ``α`` moved. Missing
    rows are computed together as one Gram block by :mod:`xpml.kernels`.

    Parameters
    ----------
    X : array (n, d), validated, in namespace ``xp``
    kernel, params : as :func:`xpml.kernels.resolve_kernel_params` returns them
    memory_budget : int
        Bytes for the buffer **and** the transient blocks together; the full
        ``n × n`` matrix is held only when it fits.
    q : int
        Requested working-set size (lowered to fit a small budget).

    Attributes
    ----------
    peak_bytes : int
        Largest bytes held at once: the buffer plus the live transient blocks.
    computed_rows, hits : int
        Rows computed through the Gram engine, and rows found in the buffer.
    """

    def __init__(self, X, kernel, params, *, xp, memory_budget, q):
        self.X, self.kernel, self.params, self.xp = X, kernel, params, xp
        self.n = int(X.shape[0])
        self.row_bytes = self.n * (4 if X.dtype == xp.float32 else 8)
        self.budget = int(memory_budget)
        fit_rows = self.budget // self.row_bytes
        # transients are processed in chunks of at most _CHUNK rows: the block
        # of new rows, the Gram engine's workspace and the gathered moved rows
        self.q = max(2, min(q, self.n, fit_rows // 5))
        self.chunk = min(_CHUNK, self.q)
        self.slots = max(self.q, min(self.n, fit_rows - 4 * self.chunk))
        self.buf = None
        self.slot_of = np.full(self.n, -1, dtype=np.int64)
        self.row_of = np.full(self.slots, -1, dtype=np.int64)
        self.stamp = np.zeros(self.slots, dtype=np.int64)
        self.clock = 0
        self.peak_bytes = 0
        self.computed_rows = 0
        self.hits = 0
        self._fast = _is_numpy(xp)

    def _note(self, transient_rows):
        self.peak_bytes = max(
            self.peak_bytes, (self.slots + transient_rows) * self.row_bytes
        )

    def fetch(self, B):
        """Make the rows ``B`` (sorted host ints) resident; return their slots."""
        xp = self.xp
        if self.buf is None:
            self.buf = xp.empty(
                (self.slots, self.n), dtype=self.X.dtype, device=_device(self.X)
            )
        self.clock += 1
        slots = self.slot_of[B]
        miss = slots < 0
        n_miss = int(miss.sum())
        self.hits += len(B) - n_miss
        self.stamp[slots[~miss]] = self.clock
        if n_miss:
            new = B[miss]
            # free slots first, then the least recently used (never this set's)
            order = np.argsort(self.stamp, kind="stable")
            order = order[self.stamp[order] < self.clock][:n_miss]
            old = self.row_of[order]
            self.slot_of[old[old >= 0]] = -1
            for c in range(0, n_miss, self.chunk):
                part = new[c : c + self.chunk]
                Xb = xp.take(self.X, xp.asarray(part, device=_device(self.X)), axis=0)
                budget = (
                    None
                    if isinstance(self.kernel, str)
                    else 3 * len(part) * self.row_bytes
                )
                block = kernel_matrix(
                    Xb, self.X, self.kernel, self.params, xp=xp, memory_budget=budget
                )
                self._note(3 * len(part))
                self._write(order[c : c + self.chunk], block)
                del block
            self.row_of[order] = new
            self.slot_of[new] = order
            self.stamp[order] = self.clock
            slots = self.slot_of[B]
            self.computed_rows += n_miss
        return slots

    def _write(self, slots, block):
        if self._fast:
            self.buf[slots] = block
            return
        # portable: the buffer is ours, written row by row through slices
        for k, s in enumerate(slots.tolist()):
            self.buf[s : s + 1, :] = block[k : k + 1, :]

    def block(self, slots, B):
        """``K[B, B]``, computed afresh by the Gram engine: ``q² d`` flops cost
        less than gathering ``q²`` values scattered over the buffer."""
        xp = self.xp
        XB = xp.take(self.X, xp.asarray(B, device=_device(self.X)), axis=0)
        budget = None if isinstance(self.kernel, str) else 3 * len(B) * len(B) * 8
        return kernel_matrix(
            XB,
            XB,
            self.kernel,
            self.params,
            xp=xp,
            symmetric=True,
            memory_budget=budget,
        )

    def product(self, slots, d):
        """``K[B', :]ᵀ d`` for the rows in ``slots`` (those whose α moved)."""
        xp = self.xp
        out = None
        m = len(slots)
        for c in range(0, m, self.chunk):
            sl = slots[c : min(c + self.chunk, m)]
            dc = d[c : min(c + self.chunk, m)]
            self._note(len(sl))
            if self._fast:
                part = dc @ self.buf[sl]
            else:
                part = dc @ xp.take(
                    self.buf, xp.asarray(sl, device=_device(self.buf)), axis=0
                )
            out = part if out is None else out + part
        if out is None:
            return xp.zeros((self.n,), dtype=self.buf.dtype, device=_device(self.buf))
        return out

    def release(self):
        self.buf = None


class PrecomputedRows(KernelRows):
    """Rows of a kernel matrix the user already holds (``kernel="precomputed"``):
    the matrix itself is the buffer and nothing is computed."""

    def __init__(self, K, *, xp, q):
        self.xp = xp
        self.n = int(K.shape[0])
        self.q = max(2, min(q, self.n))
        self.chunk = self.n
        self.buf = K
        self.peak_bytes = 0
        self.computed_rows = 0
        self.hits = 0
        self._fast = _is_numpy(xp)

    def _note(self, transient_rows):
        pass

    def fetch(self, B):
        self.hits += len(B)
        return B

    def block(self, slots, B):
        xp = self.xp
        if self._fast:
            return self.buf[np.ix_(B, B)]
        Bd = xp.asarray(B, device=_device(self.buf))
        return xp.take(xp.take(self.buf, Bd, axis=0), Bd, axis=1)


def _device(a):
    import array_api_compat

    return array_api_compat.device(a)


# --------------------------------------------------------- the q-subproblem
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
    if force_portable or not (_is_numpy(xp) or _host_subproblem(xp)):
        return _subproblem_portable(
            Kbb, y, alpha, C, v, xp=xp, tol=tol, max_steps=max_steps
        )
    if _is_numpy(xp):
        return _subproblem_host(Kbb, y, alpha, C, v, tol, max_steps)
    # torch / cupy: the q×q block and four q-vectors go to the host once per
    # working set, and α_B, v_B come back; a GPU would otherwise launch ~40
    # kernels per 2-variable step
    dev = _device(Kbb)
    a, vv, steps = _subproblem_host(
        *(to_numpy(z) for z in (Kbb, y, alpha, C, v)), tol, max_steps
    )
    return xp.asarray(a, device=dev), xp.asarray(vv, device=dev), steps


def _subproblem_host(K, y, a, C, v, tol, max_steps):
    """NumPy version: indices and the step length are host scalars."""
    a = a.copy()
    v = v.copy()
    diag = np.diagonal(K).copy()
    K2 = 2.0 * K
    ypos = y > 0
    up = np.where(ypos, a < C, a > 0)
    low = np.where(ypos, a > 0, a < C)
    ninf, pinf = -np.inf, np.inf
    steps = 0
    while steps < max_steps:
        vu = np.where(up, v, ninf)
        i = int(vu.argmax())
        m = vu[i]
        if m - np.where(low, v, pinf).min() < tol:
            break
        Ki = K[i]
        b = m - v
        # second-order gain b²/a over admissible partners; a ≤ τ replaced by τ
        curv = np.maximum((diag + diag[i]) - K2[i], TAU)
        gain = np.where(low & (v < m), (b * b) / curv, -1.0)
        j = int(gain.argmax())
        ai, aj, Ci, Cj = a[i], a[j], C[i], C[j]
        ub_i = Ci - ai if ypos[i] else ai
        ub_j = aj if ypos[j] else Cj - aj
        t = min(b[j] / curv[j], ub_i, ub_j)
        if t == ub_i:
            ai_new = Ci if ypos[i] else 0.0
        else:
            ai_new = ai + y[i] * t
        if t == ub_j:
            aj_new = 0.0 if ypos[j] else Cj
        else:
            aj_new = aj - y[j] * t
        dai = y[i] * (ai_new - ai)
        daj = y[j] * (aj_new - aj)
        if dai == 0 and daj == 0:  # below the floating-point resolution: no progress
            break
        a[i], a[j] = ai_new, aj_new
        v -= dai * Ki
        v -= daj * K[j]
        for k, ak in ((i, ai_new), (j, aj_new)):
            up[k] = ak < C[k] if ypos[k] else ak > 0
            low[k] = ak > 0 if ypos[k] else ak < C[k]
        steps += 1
    return a, v, steps


def _subproblem_portable(K, y, a, C, v, *, xp, tol, max_steps):
    """Array-API version: the state stays on the device; a step is a fixed
    sequence of array operations (no data-dependent branches). ``live`` turns
    False, and stays so, where the host version would stop (violation below
    ``tol``, or a step that no longer changes ``α``); the host reads it every
    ``_CHECK_EVERY`` steps, so the result and the step count are the host
    version's."""
    q = int(K.shape[0])
    dev = _device(K)
    dt = K.dtype
    ar = xp.arange(q, device=dev)
    diag = xp.linalg.diagonal(K)
    ypos = y > 0
    zero = xp.asarray(0.0, dtype=dt, device=dev)
    ninf = xp.asarray(-math.inf, dtype=dt, device=dev)
    pinf = xp.asarray(math.inf, dtype=dt, device=dev)
    tau = xp.asarray(TAU, dtype=dt, device=dev)
    neg1 = xp.asarray(-1.0, dtype=dt, device=dev)
    live = xp.asarray(True, device=dev)
    count = xp.asarray(0, dtype=xp.int64, device=dev)
    for it in range(max_steps):
        if it % _CHECK_EVERY == 0 and it and not bool(live):
            break
        up = xp.where(ypos, a < C, a > 0)
        low = xp.where(ypos, a > 0, a < C)
        vu = xp.where(up, v, ninf)
        i = xp.argmax(vu)
        m = vu[i]
        live = live & (m - xp.min(xp.where(low, v, pinf)) >= tol)
        Ki = xp.take(K, xp.reshape(i, (1,)), axis=0)[0, :]
        b = m - v
        curv = xp.maximum((diag + diag[i]) - 2.0 * Ki, tau)
        gain = xp.where(low & (v < m), (b * b) / curv, neg1)
        j = xp.argmax(gain)
        live = live & (gain[j] > 0)
        ai, aj, Ci, Cj, yi, yj = a[i], a[j], C[i], C[j], y[i], y[j]
        ub_i = xp.where(ypos[i], Ci - ai, ai)
        ub_j = xp.where(ypos[j], aj, Cj - aj)
        t = xp.minimum(xp.minimum(b[j] / curv[j], ub_i), ub_j)
        ai_new = xp.where(t == ub_i, xp.where(ypos[i], Ci, zero), ai + yi * t)
        aj_new = xp.where(t == ub_j, xp.where(ypos[j], zero, Cj), aj - yj * t)
        dai = yi * (ai_new - ai)
        daj = yj * (aj_new - aj)
        live = live & ((dai != 0) | (daj != 0))
        dai = xp.where(live, dai, zero)
        daj = xp.where(live, daj, zero)
        a = xp.where(live & (ar == i), ai_new, xp.where(live & (ar == j), aj_new, a))
        v = v - dai * Ki - daj * xp.take(K, xp.reshape(j, (1,)), axis=0)[0, :]
        count = count + xp.astype(live, xp.int64)
    return a, v, int(count)


# ------------------------------------------------------------------ the solver
@dataclasses.dataclass
class SMOResult:
    """Solution of one binary dual.

    ``alpha`` (n,), ``v = −y∘∇f`` (n,), ``rho`` (decision ``Σαᵢyᵢk(xᵢ,x) − rho``),
    ``dual`` (``Σα − ½αᵀQα``), ``primal`` (``½‖w‖² + Σ Cᵢξᵢ``), ``gap`` (final
    KKT violation ``m − M``), ``n_iter`` (SMO steps), ``n_outer`` (working
    sets), ``converged``, ``peak_bytes``, ``computed_rows``, ``cache_hits``.
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


def _top(score, k, *, xp):
    """Indices of the ``k`` largest entries, largest first (ties by index).

    NumPy fast path: ``argpartition`` then a sort of the ``k`` winners; the
    portable path sorts everything. They can differ only in which of several
    exactly tied entries at the cut are taken.
    """
    n = int(score.shape[0])
    k = min(k, n)
    if _is_numpy(xp) and n > 4 * k:
        part = np.argpartition(-score, k - 1)[:k]
        return part[np.lexsort((part, -score[part]))]
    return xp.argsort(score, descending=True, stable=True)[:k]


def smo_solve(
    rows,
    y,
    C,
    *,
    xp,
    tol=1e-3,
    max_iter=-1,
    inner_ratio=0.1,
    inner_steps=None,
    verbose=False,
    label="",
):
    """Solve the binary SVM dual with batched working sets.

    Parameters
    ----------
    rows : KernelRows or PrecomputedRows
        Supplies kernel rows and decides the working-set size ``rows.q``.
    y : array (n,)
        Labels as ±1 floats.
    C : array (n,)
        Per-sample upper bounds (``C · class_weight · sample_weight``).
    tol : float
        Stop when the maximal KKT violation ``m − M`` is below ``tol``.
    max_iter : int
        Most SMO steps in total (``-1``: no limit).
    inner_ratio : float
        A subproblem is solved until its own violation is below
        ``max(tol, inner_ratio · global violation)``.
    inner_steps : int, optional
        Most SMO steps per subproblem (default ``10 q``).
    verbose : bool or int
        Print progress every 20 (or ``verbose``) working sets.

    Returns
    -------
    SMOResult

    Notes
    -----
    The working set keeps the free variables (``0 < α < C``) of the previous
    one, up to ``q/2`` of them, and fills up with the largest violators of each
    side; keeping them stops the zig-zag of a purely greedy choice.
    """
    n = int(y.shape[0])
    dev = _device(y)
    dt = y.dtype
    q = rows.q
    fast = _is_numpy(xp)
    inner_steps = inner_steps or max(10 * q, 100)
    every = 20 if verbose is True else max(1, int(verbose or 1))
    ypos = y > 0
    alpha = xp.zeros((n,), dtype=dt, device=dev)
    v = xp.asarray(y, copy=True)  # ∇f = Qα − 1 = −1 at α = 0, so v = −y∘∇f = y
    ninf = xp.asarray(-math.inf, dtype=dt, device=dev)
    n_iter = n_outer = 0
    limit = math.inf if max_iter is None or max_iter < 0 else int(max_iter)
    converged = False
    gap = math.inf
    kept = np.zeros(0, dtype=np.int64)
    best, stalled = -math.inf, 0
    t0 = time.perf_counter()
    while True:
        up = xp.where(ypos, alpha < C, alpha > 0)
        low = xp.where(ypos, alpha > 0, alpha < C)
        s_up = xp.where(up, v, ninf)
        s_low = xp.where(low, -v, ninf)
        h = max(1, (q - kept.shape[0]) // 2)
        cand_up = _top(s_up, h, xp=xp)
        cand_low = _top(s_low, h, xp=xp)
        # O(q) numbers to the host: the candidates and their scores (gap = the first)
        if fast:
            sc_up, sc_low = s_up[cand_up], s_low[cand_low]
        else:
            sc_up = to_numpy(xp.take(s_up, cand_up))
            sc_low = to_numpy(xp.take(s_low, cand_low))
            cand_up, cand_low = to_numpy(cand_up), to_numpy(cand_low)
        m = float(sc_up[0]) if sc_up.shape[0] else -math.inf
        negM = float(sc_low[0]) if sc_low.shape[0] else -math.inf
        gap = m + negM
        if verbose and n_outer % every == 0:
            print(
                f"[SMO{label}] set {n_outer:5d}  steps {n_iter:7d}  violation {gap:.3e}  "
                f"rows computed {rows.computed_rows}  hits {rows.hits}  "
                f"{time.perf_counter() - t0:.2f}s",
                flush=True,
            )
        if gap < tol or not math.isfinite(gap):
            converged = True
            break
        if n_iter >= limit:
            break
        # a tolerance below the floating-point floor of this problem: stop
        # after _STALL working sets that did not raise the dual objective
        dual = float(xp.sum(alpha * (1.0 + y * v))) / 2.0  # Σα − ½αᵀQα, Qα = 1 − y∘v
        best, stalled = (
            (dual, 0)
            if dual > best + 1e-14 * max(1.0, abs(dual))
            else (best, stalled + 1)
        )
        if stalled >= _STALL:
            break
        B = np.unique(
            np.concatenate(
                [kept, cand_up[np.isfinite(sc_up)], cand_low[np.isfinite(sc_low)]]
            )
        )
        slots = rows.fetch(B)
        Kbb = rows.block(slots, B)
        if fast:
            yB, aB, CB, vB = y[B], alpha[B], C[B], v[B]
        else:
            Bd = xp.asarray(B, device=dev)
            yB, aB, CB, vB = (xp.take(z, Bd) for z in (y, alpha, C, v))
        steps_left = min(inner_steps, limit - n_iter)
        aB_new, _, steps = solve_subproblem(
            Kbb,
            yB,
            aB,
            CB,
            vB,
            xp=xp,
            tol=max(tol, inner_ratio * gap),
            max_steps=max(1, int(steps_left)),
        )
        n_iter += steps
        n_outer += 1
        if steps == 0:
            # the maximal violating pair is in B, so no step means α can no longer
            # change in floating point: accept within 10·tol, otherwise report
            # non-convergence (SVC then warns)
            converged = gap < 10 * tol
            break
        d = yB * (aB_new - aB)
        moved = to_numpy(d != 0)
        if fast:
            v -= rows.product(slots[moved], d[moved])
            alpha[B] = aB_new
            free = (aB_new > 0) & (aB_new < CB)
        else:
            v = v - rows.product(slots[moved], d[xp.asarray(moved, device=dev)])
            mask = np.zeros(n, dtype=bool)
            mask[B] = True
            alpha[xp.asarray(mask, device=dev)] = aB_new  # B is sorted: mask order
            free = to_numpy((aB_new > 0) & (aB_new < CB))
        kept = B[free][: min(q // 2, q - 2)]  # room for a violating pair
    rows.release()
    rho = _rho(alpha, v, ypos, C, xp=xp)
    dual, primal = _objectives(alpha, v, y, C, rho, xp=xp)
    return SMOResult(
        alpha,
        v,
        rho,
        dual,
        primal,
        gap,
        n_iter,
        n_outer,
        converged,
        rows.peak_bytes,
        rows.computed_rows,
        rows.hits,
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
    primal = 0.5 * wQw + float(xp.sum(C * xi))
    return dual, primal
