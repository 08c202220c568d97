"""Benchmarks: one timing method for all, xpml beside its reference in the same run.

Each suite is a module in this package with ``SUITE = "name"`` and
``run(bench) -> None``, where it calls :meth:`Bench.compare` once per case;
``DEFAULT = False`` keeps a long suite out of a plain ``xpml bench`` (it runs
when named), ``REQUIRES`` names the libraries its reference needs and
``PRELOAD`` further libraries for the cold processes' fork server.
``xpml bench`` discovers the suites, runs them and writes a markdown table,
JSON and (where matplotlib is installed) a PNG under ``bench/results/``.

Timing, for each side (xpml and its reference):

* cold: the first call in a fresh process (see :mod:`xpml.bench._cold`): the
  case's closure is pickled with its data, a new process loads it (imports and
  data are not timed) and times one call. A call under
  :data:`COLD_REPEAT_UNDER_S` is timed so in ``cold_runs`` fresh processes,
  the two sides alternating, and the median is reported;
* warm: in this process, one warm-up call per side, then ``repeats`` timed
  calls of each, the two sides alternating call by call (so that a machine
  whose speed drifts slows both alike), a side with calls under
  :data:`SETTLE_UNDER_S` making an untimed call at each turn first (the other
  side's worker threads still spin after its call); the median is reported. On the CPU a
  call whose cold run took over :data:`WARMUP_COVERED_S` gets no warm-up (the
  cold call was one, and its first-call costs are lost in its length).

On a GPU backend each call is followed by a device synchronisation so the time
is the real compute time. The ratios are ``xpml / reference`` (below 1: xpml
is faster), cold beside cold and warm beside warm.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import os
import platform
import statistics
import time

from xpml.bench._cold import MODES as COLD_MODES
from xpml.bench._cold import SECOND_CALL_UNDER_S, ColdRunner, sync_for

__all__ = [
    "Bench",
    "BudgetSpent",
    "Result",
    "timeit",
    "time_alternating",
    "discover",
    "machine_info",
]

#: a case is not started with less time than this left in the budget (seconds)
MIN_CASE_S = 3.0
#: on the CPU, a call whose cold run took longer gets no warm-up here: the cold
#: call was one, and first-call costs are lost in its length (seconds)
WARMUP_COVERED_S = 5.0
#: a cold call shorter than this is timed again in further fresh processes (up
#: to ``Bench.cold_runs`` in all) and the median reported: one fresh process on
#: a busy machine is a noisy sample (seconds)
COLD_REPEAT_UNDER_S = 5.0
#: in the alternating warm loop, a side whose calls are shorter than this makes
#: one untimed call at each turn before its timed one: the other side's idle
#: worker threads (OpenMP, BLAS) spin for some milliseconds after its call and
#: would otherwise share the cores with this one (seconds)
SETTLE_UNDER_S = 0.25


class BudgetSpent(Exception):
    """Raised by :meth:`Bench.compare` when the run's time budget is spent; the
    command line stops that suite there and says so."""


def timeit(fn, *, warmup=1, repeats=5, sync=None, adaptive=True, limit_s=None):
    """Median wall time of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    With ``adaptive``, long calls are repeated less: a warm-up over 10 s gives one
    timed call, over 2 s at most three (the count used is returned). With
    ``limit_s``, no call is started that the slowest call so far says would end
    past it (at least one timed call is made). Returns ``(median, times)``.
    """
    plan = {"warmup": warmup, "repeats": repeats, "adaptive": adaptive}
    clock = _Clock(fn, contextlib.nullcontext, sync)
    time_alternating({"fn": (clock, plan)}, limit_s=limit_s)
    return statistics.median(clock.times), clock.times


def time_alternating(sides, *, limit_s=None):
    """Time several callables against each other: ``sides`` maps a name to
    ``(clock, plan)`` (a :class:`_Clock` and ``{"warmup", "repeats",
    "adaptive"}``, optionally ``"estimate"``: seconds a call is known to
    take). Each side makes its warm-up calls, then the sides take turns call
    by call, as many timed calls each (the fewest any side's plan allows, see
    :func:`timeit` for ``adaptive``): a machine whose speed drifts slows every
    side alike. With two sides or more, a side whose warm-up took less than
    :data:`SETTLE_UNDER_S` makes an untimed call before each timed one (a
    Conv2D call timed right after PyTorch's took twice its time while
    PyTorch's OpenMP threads spun). With ``limit_s``, no call starts (warm-up,
    settling or timed) that the slowest call so far, or the estimate, says
    would end past it; a side without either makes its first timed call. The
    times land in each clock's ``times``."""
    start = time.perf_counter()

    def fits(clock, plan):
        if limit_s is None:
            return True
        known = max(clock.slowest, plan.get("estimate") or 0.0)
        if not known and not clock.times:
            return True  # nothing known yet: its first call is made
        return time.perf_counter() - start + known <= limit_s

    counts, settle = [], {}
    for name, (clock, plan) in sides.items():
        first = None
        for _ in range(plan["warmup"]):
            if fits(clock, plan):
                first = clock.call()
        adapt = plan.get("adaptive", True) and first is not None
        counts.append(_adapt(plan["repeats"], first) if adapt else plan["repeats"])
        settle[name] = len(sides) > 1 and first is not None and first < SETTLE_UNDER_S
    for _ in range(max(min(counts), 1) if counts else 0):
        for name, (clock, plan) in sides.items():
            if settle[name] and fits(clock, plan):
                clock.call()  # untimed: the other side's threads quieten
            if fits(clock, plan):
                clock.times.append(clock.call())


def _adapt(repeats, seconds):
    """Fewer repeats for long calls: one over 10 s, at most three over 2 s."""
    return 1 if seconds > 10 else min(repeats, 3) if seconds > 2 else repeats


@dataclasses.dataclass
class Result:
    """One case: cold (first call in a fresh process) and warm (median after a
    warm-up) times of both sides. Times are in seconds; None where not measured
    (the ``*_cold`` dicts then say why)."""

    suite: str
    case: str
    n: int
    params: dict
    backend: str
    xpml_s: float | None  # warm median
    ref_name: str
    ref_s: float | None  # warm median
    repeats: int  # xpml warm calls timed
    note: str = ""
    xpml_cold_s: float | None = None
    ref_cold_s: float | None = None
    ref_repeats: int = 0  # reference warm calls timed
    #: detail of each cold call: peak_rss_mb, rss_before_mb, gpu_peak_mb, or error
    #: / timed_out_after_s / skipped
    xpml_cold: dict = dataclasses.field(default_factory=dict)
    ref_cold: dict = dataclasses.field(default_factory=dict)
    #: where the reference times came from when they were not measured here
    reference_from: str | None = None

    @property
    def cold_ratio(self):
        if self.xpml_cold_s and self.ref_cold_s:
            return self.xpml_cold_s / self.ref_cold_s
        return None

    @property
    def first_over_second(self):
        """xpml's cold call over its second call in the same fresh process
        (issue 16: the first call against later ones of the same model)."""
        return _first_over_second(self.xpml_cold_s, self.xpml_cold)

    @property
    def ref_first_over_second(self):
        """The same for the reference: the first-call cost of a fresh process
        that the library compared with pays too."""
        return _first_over_second(self.ref_cold_s, self.ref_cold)

    @property
    def ref_once(self):
        """The reference was timed once, cold, and that time stands for warm too."""
        return self.ref_s is None and self.ref_cold_s is not None

    @property
    def warm_ratio(self):
        """xpml warm / reference warm; a reference timed once (slow) counts its
        cold call (:attr:`ref_once`)."""
        ref = self.ref_s if self.ref_s else self.ref_cold_s
        if self.xpml_s and ref:
            return self.xpml_s / ref
        return None

    @property
    def ratio(self):
        """The headline ratio: warm where measured, else cold."""
        return self.warm_ratio if self.warm_ratio is not None else self.cold_ratio

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["cold_ratio"] = self.cold_ratio
        d["warm_ratio"] = self.warm_ratio
        d["ratio"] = self.ratio
        d["ref_once"] = self.ref_once
        return d


def machine_info(backend="numpy", device=None):
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "backend": backend,
        "device": str(device) if device is not None else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    for mod in ("numpy", "torch", "cupy", "sklearn", "scipy"):
        try:
            info[mod] = importlib.import_module(mod).__version__
        except Exception:
            pass
    try:
        import torch

        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        pass
    info["blas"] = _blas_kernels()
    forced = {k: os.environ[k] for k in _BLAS_ENV if k in os.environ}
    info["blas_env"] = " ".join(f"{k}={v}" for k, v in forced.items()) or None
    return info


#: environment variables that pick OpenBLAS's kernels (some machines set them
#: to work around old builds; they slow a current one): recorded with results
_BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS")


def _blas_kernels():
    """The BLAS libraries loaded, with the kernels they run (threadpoolctl's
    ``architecture``), e.g. ``"openblas 0.3.30 SkylakeX (libscipy_openblas)"``."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    found = []
    for lib in threadpool_info():
        if lib.get("user_api") != "blas":
            continue
        name = os.path.basename(lib.get("filepath", "")).split("-")[0].split(".")[0]
        found.append(
            f"{lib.get('internal_api')} {lib.get('version')} "
            f"{lib.get('architecture')} ({name})"
        )
    return "; ".join(found) or None


class Bench:
    """The state of one ``xpml bench`` run, handed to every suite.

    Attributes
    ----------
    quick, tiny : bool
        Small sizes (a smoke run); ``tiny``: the smallest, to check a pipeline.
    backend, device : the xpml backend the xpml side runs on.
    repeats, warmup : int
        Warm calls timed, after ``warmup`` untimed ones.
    cold : {"fork", "spawn", "off"}
        How the cold call's fresh process starts (:mod:`xpml.bench._cold`);
        ``"off"`` times warm calls only.
    cold_runs : int
        Fresh processes a side's cold call is timed in (the median is
        reported), while it takes under :data:`COLD_REPEAT_UNDER_S`.
    cold_prefault_mb : int
        MB touched and freed (untimed) before each cold call, so that a VM
        that hands free memory back to its host does not charge the fresh
        process for faulting it in again (:mod:`xpml.bench._cold`); 0: off.
    keep_freed_mb : float or None
        When set, :func:`xpml.utils.memory.keep_freed_memory` is called with
        it in this process (at construction: the warm calls) and in every
        cold call's process before its call; None leaves glibc's allocator
        as a user's process has it.
    budget_s : float or None
        Wall time for the whole run: a case is not started once it is spent
        (:class:`BudgetSpent`), and no cold call or warm loop runs past it.
    case_timeout_s : float or None
        Longest a cold call may run before it is stopped (reported as a bound).
    ref_once_over_s : float or None
        A reference whose cold call took longer than this is not timed warm:
        its cold time stands for both (marked in the table).
    reference : dict or None
        Reference results of an earlier run (``--reference-from``), keyed by
        ``(suite, case, n)``: used instead of timing the reference again.
    """

    def __init__(
        self,
        *,
        backend="numpy",
        device=None,
        quick=False,
        tiny=False,
        repeats=5,
        warmup=1,
        cold="spawn",
        cold_runs=3,
        cold_prefault_mb=1024,
        keep_freed_mb=None,
        preload=(),
        budget_s=None,
        case_timeout_s=None,
        ref_once_over_s=None,
        reference=None,
        reference_name=None,
        on_result=None,
        echo=print,
    ):
        if cold not in COLD_MODES:
            raise ValueError(f"cold must be one of {COLD_MODES}, got {cold!r}")
        if (
            isinstance(cold_runs, bool)
            or not isinstance(cold_runs, int)
            or cold_runs < 1
        ):
            raise ValueError(f"cold_runs must be an integer >= 1, got {cold_runs!r}")
        self.backend, self.device = backend, device
        self.quick, self.tiny = quick or tiny, tiny
        self.repeats, self.warmup = repeats, warmup
        self.cold, self.preload = cold, tuple(preload)
        self.cold_runs = cold_runs
        self.cold_prefault_mb = max(int(cold_prefault_mb), 0)
        self.keep_freed_mb = keep_freed_mb
        if keep_freed_mb:
            from xpml.utils.memory import keep_freed_memory

            keep_freed_memory(keep_freed_mb)
        self.budget_s, self.case_timeout_s = budget_s, case_timeout_s
        self.ref_once_over_s = ref_once_over_s
        self.reference = reference or {}
        self.reference_name = reference_name
        self.results: list[Result] = []
        self.stopped: list[str] = []  # suites stopped early, with the reason
        self.on_result = on_result
        self.echo = echo
        self._t0 = time.perf_counter()
        self._runner = None

    def start(self):
        """Start what the cold calls need (the fork server imports its libraries
        while the first case builds its data)."""
        if self.cold != "off" and self._runner is None:
            self._runner = ColdRunner(
                self.cold,
                preload=self.preload,
                prefault_mb=self.cold_prefault_mb,
                keep_freed_mb=self.keep_freed_mb,
            )
            self._runner.start()

    # ---------------------------------------------------------------- helpers
    def sizes(self, full, quick, tiny=None):
        """The sizes to run: ``full`` normally, ``quick`` with ``--quick``, and
        ``tiny`` (default: ``quick``) with ``--tiny``."""
        if self.tiny and tiny is not None:
            return list(tiny)
        return list(quick if self.quick else full)

    def sync(self):
        fn = sync_for(self.backend, self.device)
        if fn:
            fn()

    def time_left(self):
        """Seconds left in the run's budget (None: no budget)."""
        if self.budget_s is None:
            return None
        return self.budget_s - (time.perf_counter() - self._t0)

    def budget_spent(self):
        left = self.time_left()
        return left is not None and left < MIN_CASE_S

    def check_budget(self):
        """Raise :class:`BudgetSpent` when no case may start (a suite can call
        it before building a large case's data; :meth:`compare` does)."""
        if self.budget_spent():
            raise BudgetSpent(f"time budget of {self.budget_s:.0f} s spent")

    def _limit(self):
        """Longest the next cold call may run (None: no limit)."""
        lims = [x for x in (self.case_timeout_s, self.time_left()) if x is not None]
        return max(min(lims), 1.0) if lims else None

    def to_backend(self, *arrays):
        """Move NumPy arrays to the bench backend (outside the timed region)."""
        from xpml._backend import _namespace, _resolve_device, move

        if self.backend == "numpy":
            return arrays if len(arrays) > 1 else arrays[0]
        xp = _namespace(self.backend)
        dev = _resolve_device(self.backend, self.device)
        out = tuple(move(a, xp, dev) for a in arrays)
        return out if len(out) > 1 else out[0]

    def free_device_memory(self):
        """Hand cached GPU memory back, so the next fresh process has the device."""
        if self.backend == "cupy":
            import cupy

            cupy.get_default_memory_pool().free_all_blocks()
        elif self.backend == "torch" and "cuda" in str(self.device):
            import torch

            torch.cuda.empty_cache()

    def close(self):
        if self._runner is not None:
            self._runner.close()
            self._runner = None

    # ---------------------------------------------------------------- timing
    def _cold_call(self, fn, side):
        """The first call of ``fn`` in a fresh process ({} with cold="off")."""
        if self.cold == "off":
            return {}
        self.start()
        backend = self.backend if side == "xpml" else "numpy"
        device = self.device if side == "xpml" else None
        return self._runner.run(
            fn, side=side, backend=backend, device=device, timeout=self._limit()
        )

    def _cold_calls(self, sides):
        """``{side: cold result}`` for ``sides`` (``[(fn, side), ...]``): the
        first call of each in a fresh process, repeated in new ones while it
        takes under :data:`COLD_REPEAT_UNDER_S` (``cold_runs`` in all), the
        sides alternating; the median time is reported (:func:`_median_cold`)."""
        runs = {side: [] for _, side in sides}
        for i in range(self.cold_runs if self.cold != "off" else 1):
            if i and self.budget_spent():
                break
            for fn, side in sides:
                done = runs[side]
                if done and not _worth_repeating(done[-1]):
                    continue
                done.append(self._cold_call(fn, side))
        return {side: _median_cold(r) for side, r in runs.items()}

    def _warm_plan(self, side, cold, *, once, plan, notes):
        """How ``side`` is timed warm here: ``{"warmup", "repeats", "adaptive"}``,
        or None when it is not. ``once``: the cold call stands for it (without
        one: one call here, no warm-up). A loop that would not fit in the time
        left is shortened, or skipped with a note."""
        warmup, repeats = plan["warmup"], plan["repeats"]
        adaptive = plan.get("adaptive", True)
        if cold.get("died"):  # a crash (e.g. in a native library) would take
            # this process with it: not run here
            notes.append(f"{side}: its cold process died; not run in this one")
            return None
        if once:
            if cold.get("ok") or cold.get("timed_out_after_s"):
                return None
            warmup, repeats = 0, 1
        limit, estimate = self._limit(), _cold_estimate(cold)
        on_device = side == "xpml" and sync_for(self.backend, self.device)
        if estimate is not None and estimate > WARMUP_COVERED_S and not on_device:
            warmup = 0
            if adaptive:
                repeats = _adapt(repeats, estimate)
        if limit is not None and estimate is not None:
            fits = int(limit // max(estimate, 1e-9))
            if fits < warmup + 1:
                took = (
                    "its cold call was stopped"
                    if math.isinf(estimate)
                    else f"a call takes ~{estimate:.0f} s"
                )
                notes.append(f"{side} not timed warm ({took}; {limit:.0f} s allowed)")
                return None
            repeats = min(repeats, fits - warmup)
        return {
            "warmup": warmup,
            "repeats": max(repeats, 1),
            "adaptive": adaptive,
            "estimate": estimate,
        }

    def _reference_plan(self, cold, once, plan, notes):
        """:meth:`_warm_plan` of the reference; one whose cold call took over
        ``ref_once_over_s`` is timed by that call alone."""
        slow = self.ref_once_over_s is not None and (
            (cold.get("s") or 0) > self.ref_once_over_s
        )
        return self._warm_plan(
            "reference", cold, once=once or slow, plan=plan, notes=notes
        )

    def _too_long(self, estimate_s, notes):
        """Whether a reference estimated to take ``estimate_s`` seconds is over
        the time allowed (then it is not run, and ``notes`` says so)."""
        limit = self._limit()
        if None in (estimate_s, limit) or estimate_s <= limit:
            return False
        notes.append(
            f"reference not run: estimated {estimate_s:.0f} s > {limit:.0f} s allowed"
        )
        return True

    def _warm_calls(self, timed, notes):
        """Warm timing in this process of the sides in ``timed`` (``[(side, fn,
        plan), ...]``; a side whose plan is None is not timed), alternating
        call by call (:func:`time_alternating`).
        Returns ``{side: (median s or None, calls timed)}``."""
        import xpml

        def ctx(side):
            if side != "xpml":
                return contextlib.nullcontext
            return lambda: xpml.backend(
                self.backend, device=self.device, output="backend"
            )

        sync = sync_for(self.backend, self.device)
        sides = {
            side: (_Clock(fn, ctx(side), sync if side == "xpml" else None), plan)
            for side, fn, plan in timed
            if plan
        }
        time_alternating(sides, limit_s=self.time_left())
        for side, (clock, _) in sides.items():
            if not clock.times:
                notes.append(f"{side} not timed warm (the time allowed ran out)")
        return {
            side: (statistics.median(c.times) if c.times else None, len(c.times))
            for side, (c, _) in sides.items()
        }

    def compare(
        self,
        suite,
        case,
        n,
        xpml_fn,
        ref_fn=None,
        *,
        ref_name="scikit-learn",
        params=None,
        note="",
        repeats=None,
        warmup=None,
        once=False,
        ref_once=False,
        ref_estimate_s=None,
    ):
        """Time ``xpml_fn`` (under the bench backend) and ``ref_fn`` (on the CPU)
        in the same run, cold and warm, and record both.

        ``once``: both sides are timed by their cold call only (long cases);
        ``ref_once``: only the reference is (a slow one; ``--ref-once-over``
        decides it from the cold time too). ``ref_estimate_s``: the suite's
        estimate of the reference's time; over the time allowed, the reference
        is not run and the note says so. Both closures are pickled for their
        cold calls (cloudpickle): one that cannot be is timed warm only, with
        the reason in the note.
        """
        self.check_budget()
        notes = [note] if note else []
        first = self.warmup if warmup is None else warmup
        plan = {"warmup": first, "repeats": repeats or self.repeats}
        known = self.reference.get((suite, case, int(n)))
        t_r, n_r, r_cold = None, 0, {}
        run_ref = known is None and ref_fn is not None
        if run_ref and self._too_long(ref_estimate_s, notes):
            r_cold, run_ref = {"ok": False, "skipped_estimate_s": ref_estimate_s}, False
        colds = self._cold_calls([(xpml_fn, "xpml"), (ref_fn, "ref")][: 1 + run_ref])
        x_cold = colds["xpml"]
        x_plan = self._warm_plan("xpml", x_cold, once=once, plan=plan, notes=notes)
        timed = [("xpml", xpml_fn, x_plan)]
        if known is not None:
            t_r, n_r, r_cold, ref_name = _known_reference(known, ref_name)
            if t_r is None and r_cold.get("s") is None:
                notes.append(f"reference: not timed in {self.reference_name}")
        elif run_ref:
            r_cold = colds["ref"]
            r_plan = self._reference_plan(r_cold, once or ref_once, plan, notes)
            timed.append(("reference", ref_fn, r_plan))
        warm = self._warm_calls(timed, notes)
        t_x, n_x = warm.get("xpml", (None, 0))
        t_r, n_r = warm.get("reference", (t_r, n_r))  # else known or not timed
        result = Result(
            suite,
            case,
            int(n),
            dict(params or {}),
            self.backend,
            t_x,
            ref_name,
            t_r,
            n_x,
            "; ".join(notes + _cold_errors(x_cold, r_cold)),
            xpml_cold_s=x_cold.get("s") if x_cold.get("ok") else None,
            ref_cold_s=r_cold.get("s") if r_cold.get("ok") else None,
            ref_repeats=n_r,
            xpml_cold=_detail(x_cold),
            ref_cold=_detail(r_cold),
            reference_from=self.reference_name if known is not None else None,
        )
        return self._record(result)

    def _record(self, r):
        self.results.append(r)
        with contextlib.suppress(Exception):
            self.free_device_memory()
        self.echo(_line(r))
        if self.on_result:
            self.on_result(r)
        return r

    # ------------------------------------------------------------------ output
    def settings(self):
        return {
            "quick": self.quick,
            "tiny": self.tiny,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "cold": self.cold,
            "cold_runs": self.cold_runs,
            "cold_prefault_mb": self.cold_prefault_mb,
            "keep_freed_mb": self.keep_freed_mb,
            "budget_s": self.budget_s,
            "case_timeout_s": self.case_timeout_s,
            "ref_once_over_s": self.ref_once_over_s,
            "reference_from": self.reference_name,
            "elapsed_s": round(time.perf_counter() - self._t0, 1),
        }

    def write(self, out_dir, tag="latest", plot=True):
        os.makedirs(out_dir, exist_ok=True)
        info = machine_info(self.backend, self.device)
        rows = [r.as_dict() for r in self.results]
        base = os.path.join(out_dir, f"bench-{tag}")
        with open(base + ".json", "w") as fh:
            json.dump(
                {
                    "machine": info,
                    "settings": self.settings(),
                    "results": rows,
                    "stopped": self.stopped,
                },
                fh,
                indent=1,
            )
        with open(base + ".md", "w") as fh:
            fh.write(f"# xpml benchmarks ({tag})\n\n")
            fh.write(
                "Machine: "
                + ", ".join(f"{k}={v}" for k, v in info.items() if v)
                + "\n\n"
            )
            fh.write(
                markdown_table(
                    self.results,
                    cold=self.cold,
                    cold_runs=self.cold_runs,
                    prefault_mb=self.cold_prefault_mb,
                    keep_freed_mb=self.keep_freed_mb,
                )
            )
            for line in self.stopped:
                fh.write(f"\n* {line}")
            if self.stopped:
                fh.write("\n")
        if plot:
            self._plot(base + ".png")
        return base

    def _plot(self, path):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return
        groups = {}
        for r in self.results:
            if r.ratio:
                groups.setdefault(f"{r.suite}:{r.case}", []).append((r.n, r.ratio))
        if not groups:
            return
        fig, ax = plt.subplots(figsize=(8, 5))
        for label, pts in groups.items():
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("n")
        ax.set_ylabel("time ratio xpml / reference (warm)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def _known_reference(row, ref_name):
    """``(warm s, warm calls, cold detail, name)`` of a reference from an earlier
    run's row."""
    cold = dict(row.get("ref_cold") or {})
    if row.get("ref_cold_s") is not None:
        cold.update(ok=True, s=row["ref_cold_s"])
    return (
        row.get("ref_s"),
        row.get("ref_repeats") or 0,
        cold,
        row.get("ref_name", ref_name),
    )


def _cold_errors(x_cold, r_cold):
    return [
        f"{side} cold: {c['error']}"
        for side, c in (("xpml", x_cold), ("reference", r_cold))
        if c and not c.get("ok") and "error" in c
    ]


def _detail(c):
    """A cold result less what the table has in columns of its own."""
    return {k: v for k, v in c.items() if k not in ("ok", "s")}


def _cold_estimate(c):
    """Seconds one call takes, from a cold result (an upper bound for warm)."""
    if not c:
        return None
    if c.get("ok"):
        return c["s"]
    if c.get("timed_out_after_s"):
        return math.inf
    return None


def _worth_repeating(c):
    """Whether a cold call is timed again in another fresh process."""
    return bool(c.get("ok")) and c["s"] < COLD_REPEAT_UNDER_S


def _median_cold(runs):
    """One cold result from a side's runs: the first's details, the median time
    of those that finished (``runs_s``: every run's time, None where it failed;
    ``repeat_error``: a later run's error)."""
    if not runs:
        return {}
    out = dict(runs[0])
    if len(runs) == 1 or not out.get("ok"):
        return out
    times = [r["s"] for r in runs if r.get("ok")]
    out["s"] = statistics.median(times)
    out["runs_s"] = [r.get("s") if r.get("ok") else None for r in runs]
    out["first_calls"] = [r.get("first_call") for r in runs]
    out.pop("first_call", None)
    seconds = [r["second_s"] for r in runs if r.get("second_s") is not None]
    if seconds:
        out["second_s"] = statistics.median(seconds)
    peaks = [r["peak_rss_mb"] for r in runs if r.get("peak_rss_mb") is not None]
    if peaks:
        out["peak_rss_mb"] = max(peaks)
    errors = [r.get("error") for r in runs if not r.get("ok")]
    if errors:
        out["repeat_error"] = errors[0]
    return out


def _first_over_second(first, detail):
    second = detail.get("second_s")
    return first / second if first and second else None


class _Clock:
    """Times calls of one side of a case (its backend context entered outside
    the timer, a device synchronisation inside it)."""

    def __init__(self, fn, ctx, sync):
        self.fn, self.ctx, self.sync = fn, ctx, sync
        self.times, self.slowest = [], 0.0

    def call(self):
        with self.ctx():
            t0 = time.perf_counter()
            self.fn()
            if self.sync:
                self.sync()
            t = time.perf_counter() - t0
        self.slowest = max(self.slowest, t)
        return t


def _ms(s):
    return "-" if s is None else f"{s * 1e3:.1f}"


def _cold_cell(s, detail):
    if s is not None:
        return _ms(s)
    if detail.get("timed_out_after_s"):
        return f"> {detail['timed_out_after_s'] * 1e3:.0f}"
    return "-"


def _mem_cell(detail):
    peak = detail.get("peak_rss_mb")
    if peak is None:
        return "-"
    cell = f"{peak:.0f}"
    if detail.get("rss_before_mb") is not None:
        cell += f" (+{max(peak - detail['rss_before_mb'], 0):.0f})"
    if detail.get("gpu_peak_mb"):
        cell += f", GPU {detail['gpu_peak_mb']:.0f}"
    return cell


def _ratio_cell(v, mark=""):
    return "-" if v is None else f"{v:.2f}{mark}"


def markdown_table(
    results, cold="spawn", cold_runs=1, prefault_mb=0, keep_freed_mb=None
):
    """The results as a markdown table with a short legend."""
    lines = [
        "cold: the first call in a fresh process (imports and data not timed; "
        f"process start: {cold}"
        + (
            ", from a server whose heap is frozen: bench/README.md"
            if cold == "fork"
            else ""
        )
        + f"), the median over {cold_runs} such processes for "
        f"calls under {COLD_REPEAT_UNDER_S:.0f} s, the two sides alternating"
        + (
            f"; before each, {prefault_mb} MB touched and freed untimed (memory "
            "this VM would otherwise have handed back to its host: bench/README.md)"
            if prefault_mb
            else ""
        )
        + (
            f"; every process (cold and warm) keeps up to {keep_freed_mb} MB of "
            "freed memory (xpml.utils.memory.keep_freed_memory)"
            if keep_freed_mb
            else ""
        )
        + ". "
        "warm: median of repeats after a warm-up in one process, xpml and the "
        "reference alternating call by call, a side with calls under "
        f"{SETTLE_UNDER_S * 1e3:.0f} ms making one untimed call at each turn first "
        "(on the CPU, no warm-up after a cold "
        f"call over {WARMUP_COVERED_S:.0f} s). ratio = xpml / reference (below 1: "
        "xpml is faster). "
        "xpml 1st / 2nd: its cold call over a second call in the same fresh "
        "process (median over the processes; made when the first took under "
        f"{SECOND_CALL_UNDER_S:.0f} s); ref 1st / 2nd: the same for the "
        "reference. "
        "† the reference was timed once (cold), which stands for its warm time. "
        "peak MB: the cold process's peak resident memory (VmHWM), and in "
        "brackets what the call added to it; GPU: device memory the process held "
        "(its data included).",
        "",
        "| suite | case | n | xpml cold (ms) | xpml warm (ms) | reference "
        "| ref cold (ms) | ref warm (ms) | cold ratio | warm ratio "
        "| xpml 1st / 2nd | ref 1st / 2nd | xpml peak MB | ref peak MB | note |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in results:
        ref = r.ref_name + (f" ({r.reference_from})" if r.reference_from else "")
        lines.append(
            f"| {r.suite} | {r.case} | {r.n} "
            f"| {_cold_cell(r.xpml_cold_s, r.xpml_cold)} | {_ms(r.xpml_s)} "
            f"| {ref} | {_cold_cell(r.ref_cold_s, r.ref_cold)} | {_ms(r.ref_s)} "
            f"| {_ratio_cell(r.cold_ratio)} "
            f"| {_ratio_cell(r.warm_ratio, '†' if r.ref_once else '')} "
            f"| {_ratio_cell(r.first_over_second)} "
            f"| {_ratio_cell(r.ref_first_over_second)} "
            f"| {_mem_cell(r.xpml_cold)} | {_mem_cell(r.ref_cold)} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def _line(r):
    """One console line for a result."""

    def t(s, detail=None):
        if s is None and detail and detail.get("timed_out_after_s"):
            return f">{detail['timed_out_after_s']:.0f} s".rjust(10)
        return "-".rjust(10) if s is None else f"{s * 1e3:8.1f}ms"

    cr, wr = r.cold_ratio, r.warm_ratio
    return (
        f"{r.suite:>10} {r.case:<34} n={r.n:<7} "
        f"xpml cold {t(r.xpml_cold_s, r.xpml_cold)} warm {t(r.xpml_s)} | "
        f"{r.ref_name} cold {t(r.ref_cold_s, r.ref_cold)} warm {t(r.ref_s)} | "
        f"ratio cold {'   -' if cr is None else f'{cr:5.2f}x'} "
        f"warm {'   -' if wr is None else f'{wr:5.2f}x' + ('†' if r.ref_once else '')}"
        f" {r.note}"
    )


def load_reference(path):
    """``({(suite, case, n): row}, name)`` from an earlier run's JSON."""
    with open(path) as fh:
        data = json.load(fh)
    rows = {(r["suite"], r["case"], int(r["n"])): r for r in data["results"]}
    return rows, os.path.basename(path)


def discover():
    """``{suite name: module}`` for every benchmark module in this package."""
    import sys

    from xpml.utils.discovery import plugin_modules

    return plugin_modules(sys.modules[__name__], "SUITE", "run")
