"""Benchmarks: one timing method for all, xpml beside its reference in the same run.

Each suite is a module in this package with ``SUITE = "name"`` and
``run(bench) -> None``, where it calls :meth:`Bench.compare` once per case;
``DEFAULT = False`` keeps a long suite out of a plain ``xpml bench`` (it runs
when named) and ``REQUIRES`` names the libraries its reference needs.
``xpml bench`` discovers the suites, runs them and writes a markdown table,
JSON and (where matplotlib is installed) a PNG under ``bench/results/``.

Timing: one warm-up call, then ``repeats`` timed calls; the median is reported.
On a GPU backend each call is followed by a device synchronisation so the time
is the real compute time. The ratio is ``xpml / reference``: below 1 is faster.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import platform
import statistics
import time

__all__ = ["Bench", "Result", "timeit", "discover", "machine_info"]


def timeit(fn, *, warmup=1, repeats=5, sync=None, adaptive=True):
    """Median wall time of ``fn()`` over ``repeats`` calls after ``warmup`` calls.

    With ``adaptive``, long calls are repeated less: a warm-up over 10 s gives one
    timed call, over 2 s at most three (the count used is returned).
    """
    first = None
    for _ in range(warmup):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        first = time.perf_counter() - t0
    if adaptive and first is not None:
        repeats = 1 if first > 10 else min(repeats, 3) if first > 2 else repeats
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


@dataclasses.dataclass
class Result:
    suite: str
    case: str
    n: int
    params: dict
    backend: str
    xpml_s: float
    ref_name: str
    ref_s: float | None
    repeats: int
    note: str = ""

    @property
    def ratio(self):
        return None if not self.ref_s else self.xpml_s / self.ref_s

    def as_dict(self):
        d = dataclasses.asdict(self)
        d["ratio"] = self.ratio
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
    return info


class Bench:
    """The state of one ``xpml bench`` run, handed to every suite.

    Attributes
    ----------
    quick : bool
        Small sizes only (a smoke run).
    backend, device : the xpml backend the xpml side runs on.
    repeats : int
    """

    def __init__(
        self,
        *,
        backend="numpy",
        device=None,
        quick=False,
        repeats=5,
        warmup=1,
        echo=print,
    ):
        self.backend, self.device, self.quick = backend, device, quick
        self.repeats, self.warmup = repeats, warmup
        self.results: list[Result] = []
        self.echo = echo

    def sizes(self, full, quick):
        """The sizes to run: ``full`` normally, ``quick`` with ``--quick``."""
        return list(quick if self.quick else full)

    def sync(self):
        if self.backend == "torch" and self.device and "cuda" in str(self.device):
            import torch

            torch.cuda.synchronize()
        elif self.backend == "cupy":
            import cupy

            cupy.cuda.get_current_stream().synchronize()

    def to_backend(self, *arrays):
        """Move NumPy arrays to the bench backend (outside the timed region)."""
        from xpml._backend import _namespace, _resolve_device, move

        if self.backend == "numpy":
            return arrays if len(arrays) > 1 else arrays[0]
        xp = _namespace(self.backend)
        dev = _resolve_device(self.backend, self.device)
        out = tuple(move(a, xp, dev) for a in arrays)
        return out if len(out) > 1 else out[0]

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
    ):
        """Time ``xpml_fn`` (under the bench backend) and ``ref_fn`` (on the CPU)
        in the same run and record both."""
        import xpml

        reps = repeats or self.repeats
        warm = self.warmup if warmup is None else warmup
        with xpml.backend(self.backend, device=self.device, output="backend"):
            t_x, times = timeit(xpml_fn, warmup=warm, repeats=reps, sync=self.sync)
        t_r = None
        if ref_fn is not None:
            t_r, _ = timeit(ref_fn, warmup=warm, repeats=len(times), adaptive=False)
        r = Result(
            suite,
            case,
            int(n),
            dict(params or {}),
            self.backend,
            t_x,
            ref_name,
            t_r,
            len(times),
            note,
        )
        self.results.append(r)
        ratio = f"{r.ratio:6.2f}x" if r.ratio else "   n/a"
        ref = f"{t_r * 1e3:10.1f} ms" if t_r else "          -"
        self.echo(
            f"{suite:>10} {case:<34} n={n:<7} xpml {t_x * 1e3:10.1f} ms   "
            f"{ref_name} {ref}   ratio {ratio} {note}"
        )
        return r

    # ------------------------------------------------------------------ output
    def write(self, out_dir, tag="latest"):
        os.makedirs(out_dir, exist_ok=True)
        info = machine_info(self.backend, self.device)
        rows = [r.as_dict() for r in self.results]
        base = os.path.join(out_dir, f"bench-{tag}")
        with open(base + ".json", "w") as fh:
            json.dump({"machine": info, "results": rows}, fh, indent=1)
        with open(base + ".md", "w") as fh:
            fh.write(f"# xpml benchmarks ({tag})\n\n")
            fh.write(
                "Machine: "
                + ", ".join(f"{k}={v}" for k, v in info.items() if v)
                + "\n\n"
            )
            fh.write(
                "Median of repeats after a warm-up; ratio = xpml / reference "
                "(below 1: xpml is faster).\n\n"
            )
            fh.write(
                "| suite | case | n | xpml (ms) | reference | ref (ms) | ratio | note |\n"
            )
            fh.write("|---|---|---:|---:|---|---:|---:|---|\n")
            for r in self.results:
                ref = f"{r.ref_s * 1e3:.1f}" if r.ref_s else "-"
                ratio = f"{r.ratio:.2f}" if r.ratio else "-"
                fh.write(
                    f"| {r.suite} | {r.case} | {r.n} | {r.xpml_s * 1e3:.1f} | {r.ref_name} "
                    f"| {ref} | {ratio} | {r.note} |\n"
                )
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
        ax.set_ylabel("time ratio xpml / reference")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)


def discover():
    """``{suite name: module}`` for every benchmark module in this package."""
    import sys

    from xpml.utils.discovery import plugin_modules

    return plugin_modules(sys.modules[__name__], "SUITE", "run")
