"""Where the first call's time goes (issue 16): cold-call profiles per bench case.

For each chosen bench case, each side (xpml and its reference) runs in a fresh
process started by the bench harness's own mechanism
(:class:`xpml.bench._cold.ColdRunner`: forked from a server that has only
imported the libraries, or with ``--mode spawn`` a new interpreter each, as
``xpml bench`` starts its cold calls; data and models come pickled with the case, so imports
and data creation are not timed). That process times the first and the second
call (``time.perf_counter``); this is repeated ``--repeats`` times (median).
One more fresh process per side runs both calls under cProfile: what the first
call spends beyond the second (by function, from the call graph) is its
one-time cost. Imports made during the call are counted as one item, and the
time the garbage collector ran in the first call is shown on its own (in a
forked child a full collection also copies the server's pages).

    python bench/cold_profile.py                      # gram kernel_ridge linear ...
    python bench/cold_profile.py svm trees --case fit  # chosen suites and cases
    python bench/cold_profile.py --out bench/results/cold-profile-2core.md
    python bench/cold_profile.py gram --n 5000 --n 10000  # other full sizes

Before each fresh process, ``--prefault-mb`` MB (default 1024) are touched and
freed, as ``xpml bench`` does before its cold calls: this VM hands memory that
stayed free for a few seconds back to its host, and the first call would
otherwise be charged for faulting it in again (bench/README.md).

Each suite runs at the smallest of its full sizes (the sizes the bench quotes;
``--n`` picks others of them),
with one BLAS thread on both sides unless ``--blas-threads`` says otherwise.
Absolute times on a shared machine are noisy; first/second within one process
is the steadier figure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import statistics
import sys
import tempfile
import time

from xpml.bench import Bench, discover
from xpml.bench._cold import ColdRunner

DEFAULT_SUITES = (
    "gram",
    "kernel_ridge",
    "linear",
    "decomposition",
    "svm",
    "trees",
    "cluster",
    "nn",
)
#: cases left out unless --skip is given (long, or variants of a case kept)
DEFAULT_SKIP = ("forest fit", "digits", "1 thread", "dX=fold", "float64")
#: a case whose first call takes longer is measured once (no repeats)
LONG_S = 5.0
TOP = 3


def _probe(fn, path, profile, trace=False):
    """A closure for the fresh process: first and second call of ``fn``, timed
    (and profiled when ``profile``), with the time the garbage collector took
    in each and the minor page faults each caused (``ru_minflt``: first
    touches of freshly mapped memory), written as JSON to ``path``. With
    ``trace``, each call's peak of traced allocations (tracemalloc; NumPy
    reports its array buffers to it) instead, with no timing worth reading.

    Only the closure's first run in a process measures: the runner calls a
    case a second time when its first call was short
    (:data:`xpml.bench._cold.SECOND_CALL_UNDER_S`), and before session 18 that
    second run rewrote the file with the process's third and fourth calls
    of ``fn`` (KMeans k = 8: 3 page faults "first" where its real first call
    took 900-1,300)."""
    done = []

    def probe():
        if done:  # the runner's second call: the first one measured
            return
        done.append(True)
        import cProfile
        import gc
        import resource as _resource
        import sys as _sys
        import time as _time
        import tracemalloc

        clock = {"in_gc": 0.0}

        def gc_timer(phase, info):
            if phase == "start":
                clock["t"] = _time.perf_counter()
            elif "t" in clock:
                clock["in_gc"] += _time.perf_counter() - clock.pop("t")

        def faults():
            return _resource.getrusage(_resource.RUSAGE_SELF).ru_minflt

        before = set(_sys.modules)
        times, cpu, in_gc, profs, flt, peaks = [], [], [], [], [], []
        gc.callbacks.append(gc_timer)
        for _ in range(2):
            prof = cProfile.Profile() if profile else None
            clock["in_gc"] = 0.0
            if trace:
                tracemalloc.start()
            f0 = faults()
            c0 = _time.process_time()
            t0 = _time.perf_counter()
            if prof:
                prof.enable()
            fn()
            if prof:
                prof.disable()
            times.append(_time.perf_counter() - t0)
            cpu.append(_time.process_time() - c0)
            flt.append(faults() - f0)
            if trace:
                peaks.append(tracemalloc.get_traced_memory()[1])
                tracemalloc.stop()
            in_gc.append(clock["in_gc"])
            profs.append(prof)
            if not profs[1:]:
                imported = sorted(set(_sys.modules) - before)
        gc.callbacks.remove(gc_timer)
        out = {"first": times[0], "second": times[1], "gc": in_gc, "faults": flt}
        out["cpu"] = cpu
        out["imported"] = imported
        out["peaks"] = peaks
        if profile:
            out["one_time"] = _one_time(profs[0], profs[1])
            out["import_ms"] = _import_ms(profs[0])
        with open(path, "w") as fh:
            json.dump(out, fh)

    return probe


def _stats(prof):
    import pstats

    return pstats.Stats(prof).stats


def _is_import(key):
    return key[2] == "_find_and_load"


def _label(key):
    path, line, name = key
    if path == "~":
        return name.strip("<>{}")
    parts = path.replace(os.sep, "/").split("/")
    for root in ("xpml", "sklearn", "scipy", "numpy", "torch", "threadpoolctl"):
        if root in parts:
            i = len(parts) - 1 - parts[::-1].index(root)
            return "/".join(parts[i:]) + f":{name}"
    return f"{parts[-1]}:{name}"


def _import_ms(prof):
    """Time in imports during the call (cProfile counts only the outermost
    call of a recursive function in its cumulative time)."""
    return sum(v[3] for k, v in _stats(prof).items() if _is_import(k)) * 1e3


def _edges(stats):
    """``{caller: {callee: cumulative seconds of the calls along that edge}}``."""
    out = {}
    for callee, (_, _, _, _, callers) in stats.items():
        for caller, v in callers.items():
            out.setdefault(caller, {})[callee] = v[3]
    return out


def _one_time(prof1, prof2, share=0.6):
    """The one-time costs: from the first call's root, follow the call graph
    down where a callee carries most (``share``) of what its caller spends
    beyond the second call; the nodes where the excess splits (or a builtin,
    or an import) are the costs, with the nearest xpml/sklearn caller."""
    s1, s2 = _stats(prof1), _stats(prof2)
    e1, e2 = _edges(s1), _edges(s2)

    def excess(caller, callee):
        return e1.get(caller, {}).get(callee, 0.0) - e2.get(caller, {}).get(callee, 0.0)

    roots = [k for k, v in s1.items() if not v[4]]
    found = {}

    def walk(node, amount, owner, depth):
        if depth > 200:
            return
        path = node[0].replace(os.sep, "/")
        if "/xpml/" in path or "/sklearn/" in path:
            owner = _label(node)
        kids = (
            []
            if _is_import(node)
            else sorted(((excess(node, c), c) for c in e1.get(node, {})), reverse=True)
        )
        big = [(x, c) for x, c in kids if x > 0.15 * amount and x > 2e-3]
        if big and big[0][0] >= share * amount:
            walk(big[0][1], big[0][0], owner, depth + 1)
            return
        if len(big) > 1 and depth < 60:  # split: follow each large branch
            for x, c in big:
                walk(c, x, owner, depth + 1)
            return
        label = "import" if _is_import(node) else _label(node)
        key = (label, owner if owner != label else "")
        found[key] = found.get(key, 0.0) + amount

    for r in roots:
        walk(r, s1[r][3] - s2.get(r, (0, 0, 0, 0))[3], "", 0)
    rows = sorted(found.items(), key=lambda kv: -kv[1])
    return [
        {"what": w, "in": o, "ms": round(ms * 1e3, 1)}
        for (w, o), ms in rows
        if ms > 1e-3
    ][:8]


def _run(runner, fn, side, repeats, backend):
    """Median first/second over ``repeats`` fresh processes, then one profiled."""
    backend = backend if side == "xpml" else "numpy"
    tmp = tempfile.mkdtemp(prefix="xpml-cold-profile-")

    def one(i, profile, trace=False):
        path = os.path.join(tmp, f"{side}{i}.json")
        probe = _probe(fn, path, profile, trace)
        res = runner.run(probe, side=side, backend=backend)
        if not res.get("ok"):
            raise RuntimeError(res.get("error", "?"))
        with open(path) as fh:
            return json.load(fh)

    firsts, seconds, gc_first, faults, cpu_ratios = [], [], [], [], []
    try:
        for i in range(repeats):
            out = one(i, False)
            firsts.append(out["first"])
            seconds.append(out["second"])
            gc_first.append(out["gc"][0])
            faults.append(out["faults"])
            c1, c2 = out["cpu"]
            cpu_ratios.append(c1 / c2 if c2 else float("nan"))
            if out["first"] > LONG_S:
                break  # long: one timing stands
        profile = one(repeats, True)
        peaks = one(repeats + 1, False, trace=True)["peaks"]
    except RuntimeError as exc:
        return {"error": str(exc)}
    return {
        "first": statistics.median(firsts),
        "second": statistics.median(seconds),
        "gc_first": statistics.median(gc_first),
        "faults": [statistics.median(f[j] for f in faults) for j in (0, 1)],
        "cpu_ratio": statistics.median(cpu_ratios),
        "peak_mb": [p / 2**20 for p in peaks],
        "runs": len(firsts),
        "firsts": firsts,
        "seconds": seconds,
        "one_time": profile["one_time"],
        "import_ms": profile["import_ms"],
        "imported": profile["imported"],
    }


class ProfileBench(Bench):
    """A bench whose :meth:`compare` profiles the cold calls of each case
    instead of timing it cold and warm (same suites, same closures)."""

    def __init__(
        self,
        *,
        cases=(),
        skip=(),
        repeats=3,
        preload=(),
        echo=print,
        on_row=None,
        n=(),
        prefault_mb=1024,
        mode="fork",
    ):
        super().__init__(cold="off", repeats=repeats)
        self.n = list(n)
        self.case_filter, self.skip = list(cases), list(skip)
        self.rows = []
        self.runner = ColdRunner(mode, preload=preload, prefault_mb=prefault_mb)
        self.runner.start()
        self.say, self.on_row = echo, on_row

    def sizes(self, full, quick, tiny=None):
        if self.n:  # the full sizes asked for (the smallest if none is)
            return [m for m in full if m in self.n] or [min(full)]
        return [min(full)]

    def compare(
        self, suite, case, n, xpml_fn, ref_fn=None, *, ref_name="scikit-learn", **kw
    ):
        chosen = not self.case_filter or any(c in case for c in self.case_filter)
        if chosen and not any(c in case for c in self.skip):
            row = {"suite": suite, "case": case, "n": int(n), "ref_name": ref_name}
            row["xpml"] = _run(self.runner, xpml_fn, "xpml", self.repeats, self.backend)
            if ref_fn is not None:
                row["ref"] = _run(self.runner, ref_fn, "ref", self.repeats, "numpy")
            self.rows.append(row)
            self.say(_row_md(row))
            if self.on_row:
                self.on_row()  # written after every case: a stopped run keeps them
        # one call each here, profiled or not, as the bench's warm timing makes:
        # some suites read the fitted models after compare (SVC's support
        # vectors after its fit, which a --case filter may leave out)
        xpml_fn()
        if ref_fn is not None:
            ref_fn()
        return _Quiet()

    def close(self):
        self.runner.close()


class _Quiet:
    """What a suite gets back from :meth:`ProfileBench.compare` (some set a note)."""

    note = ""


def _ms(x):
    return "-" if x is None else f"{x * 1e3:.0f}"


def _side_cells(side):
    if not side:
        return "- | - | - | - | - | -"
    if "error" in side:
        return f"error: {side['error'][:60]} | - | - | - | - | -"
    ratio = side["first"] / side["second"] if side["second"] else float("nan")
    f1, f2 = side["faults"]
    p1, p2 = side["peak_mb"]
    return (
        f"{_ms(side['first'])} | {_ms(side['second'])} | {ratio:.2f} "
        f"| {side['cpu_ratio']:.2f} | {f1:.0f} / {f2:.0f} | {p1:.1f} / {p2:.1f}"
    )


def _costs(side, top=TOP):
    if not side or "error" in side:
        return "-"
    items = []
    for c in side["one_time"][:top]:
        where = f" (in {c['in']})" if c["in"] else ""
        what = c["what"]
        if what == "import":
            mods = sorted({m.split(".")[0] for m in side["imported"]})
            what = f"import {','.join(mods[:4]) or '?'}"
        items.append(f"{what}{where}: {c['ms']:.0f}")
    return "; ".join(items) or "-"


HEADER = (
    "| suite | case | n | xpml 1st | xpml 2nd | 1st/2nd | CPU 1st/2nd "
    "| xpml faults 1st / 2nd | xpml peak MB 1st / 2nd | ref 1st | ref 2nd "
    "| 1st/2nd | CPU 1st/2nd | ref faults 1st / 2nd "
    "| ref peak MB 1st / 2nd | xpml gc in 1st | ref gc in 1st | xpml imports in 1st "
    "| top xpml one-time costs (function: ms) | top ref one-time cost |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:"
    "|---:|---:|---:|---|---|"
)


def _row_md(row):
    x, r = row["xpml"], row.get("ref")
    imp = "-" if "error" in x else f"{x['import_ms']:.0f}"
    return (
        f"| {row['suite']} | {row['case']} | {row['n']} | {_side_cells(x)} "
        f"| {_side_cells(r)} | {_gc_cell(x)} | {_gc_cell(r)} | {imp} "
        f"| {_costs(x)} | {_costs(r, 1)} |"
    )


def _gc_cell(side):
    if not side or "error" in side:
        return "-"
    return f"{side['gc_first'] * 1e3:.0f}"


def _write(bench, args, elapsed):
    from xpml.bench import machine_info

    info = machine_info()
    path = args.out
    with open(path, "w") as fh:
        fh.write("# Cold-call profile (issue 16)\n\n")
        fh.write("Machine: " + ", ".join(f"{k}={v}" for k, v in info.items() if v))
        fh.write(
            f"\n\n`python bench/cold_profile.py {' '.join(sys.argv[1:])}` "
            f"({elapsed:.0f} s). Times in ms: 1st and 2nd call in one fresh process "
            + (
                "(forked from the bench's server"
                if args.mode == "fork"
                else "(a new interpreter each, as xpml bench's cold calls"
            )
            + f": imports and data not timed), median "
            f"of {args.repeats} processes (1 for calls over {LONG_S:.0f} s), "
            f"BLAS threads: {args.blas_threads or 'default'}. One-time "
            "costs: what the 1st call spent beyond the 2nd, by function, from one "
            "further profiled process per side (cProfile adds overhead; "
            "'in' = nearest xpml/sklearn caller). gc: ms the garbage collector "
            "ran during the 1st call (median); in a forked child a full "
            "collection also copies the server's pages (copy-on-write). "
            "CPU 1st/2nd: the same ratio in CPU time (`time.process_time`, "
            "median of the processes' ratios): steadier than wall time on a "
            "loaded machine, blind to waits (e.g. a VM host backing fresh "
            "memory). "
            "faults: minor page faults of each call (`ru_minflt`, median; 4 KiB "
            "pages first touched: freshly mapped memory). peak MB: each call's "
            "peak of traced allocations (tracemalloc, one further process; "
            "NumPy reports its buffers, PyTorch does not).\n\n"
        )
        fh.write(HEADER + "\n")
        for row in bench.rows:
            fh.write(_row_md(row) + "\n")
    with open(os.path.splitext(path)[0] + ".json", "w") as fh:
        json.dump({"machine": info, "rows": bench.rows}, fh, indent=1)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("suites", nargs="*", default=list(DEFAULT_SUITES))
    p.add_argument("--case", action="append", default=[], help="substring of a case")
    p.add_argument(
        "--skip", action="append", default=None, help="substring of cases to leave out"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--n",
        type=int,
        action="append",
        default=[],
        help="a full bench size to run (default: each suite's smallest)",
    )
    p.add_argument(
        "--prefault-mb",
        type=int,
        default=1024,
        help="MB touched and freed before each fresh process, as xpml bench "
        "--cold-prefault-mb (0: the machine as it is)",
    )
    p.add_argument(
        "--mode",
        choices=("fork", "spawn"),
        default="fork",
        help="how each fresh process starts (xpml bench's cold calls: spawn)",
    )
    p.add_argument("--out", default=None, help="markdown file (and .json beside it)")
    p.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="BLAS threads, both sides (0: default)",
    )
    args = p.parse_args(argv)
    suites = discover()
    preload = sorted(
        {m for s in args.suites for m in getattr(suites[s], "REQUIRES", ())}
    )
    skip = DEFAULT_SKIP if args.skip is None else args.skip
    t0 = time.perf_counter()
    bench = ProfileBench(
        cases=args.case,
        skip=skip,
        repeats=args.repeats,
        preload=preload,
        n=args.n,
        prefault_mb=args.prefault_mb,
        mode=args.mode,
        on_row=lambda: args.out and _write(bench, args, time.perf_counter() - t0),
    )
    print(HEADER)
    limits = contextlib.nullcontext()
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        # load every BLAS first (SciPy's own OpenBLAS too): the children take
        # the limits in force here, library by library
        for name in bench.runner.preload:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
        limits = threadpool_limits(args.blas_threads)
    try:
        with limits:
            for name in args.suites:
                suites[name].run(bench)
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
