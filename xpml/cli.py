"""The ``xpml`` command: ``xpml info``, ``xpml bench``, ``xpml demo``."""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings

__all__ = ["main"]


def _info(args):
    import xpml
    from xpml._backend import BACKENDS, _has_float64, _namespace, get_backend

    print(f"xpml {xpml.__version__}")
    print(f"active backend: {get_backend()!r}")
    print("backends:")
    for name, (module, extra) in BACKENDS.items():
        try:
            xp = _namespace(name)
            mod = __import__(module)
        except ImportError:
            hint = f"pip install 'xpml[{extra}]'" if extra else f"pip install {module}"
            print(f"  {name:<17} not installed ({hint})")
            continue
        except Exception as exc:  # a library that imports but cannot start (no driver)
            print(f"  {name:<17} unavailable: {exc}")
            continue
        try:
            with (
                warnings.catch_warnings()
            ):  # torch warns about legacy device types here
                warnings.simplefilter("ignore")
                devices = list(xp.__array_namespace_info__().devices())
        except Exception:
            devices = ["cpu"]
        if name == "torch":
            import torch

            devices = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        if name == "cupy":
            try:
                import cupy

                devices = [
                    f"cuda:{i}" for i in range(cupy.cuda.runtime.getDeviceCount())
                ]
            except Exception as exc:
                print(
                    f"  {name:<17} {getattr(mod, '__version__', '?')}: no usable GPU ({exc})"
                )
                continue
        parts = []
        for d in devices:
            dev = d
            if name == "torch":
                import torch

                dev = torch.device(d)
            elif name == "cupy":
                dev = None
            f64 = _has_float64(xp, dev)
            parts.append(f"{d} (float64: {'yes' if f64 else 'no'})")
        print(
            f"  {name:<17} {getattr(mod, '__version__', '?'):<12} "
            + ", ".join(map(str, parts))
        )
    return 0


def _chosen_suites(args, suites):
    """The suite names to run, or an error message."""
    chosen = list(args.suites)
    if args.large and "large" not in chosen:
        chosen.append("large")
    chosen = chosen or [n for n, m in suites.items() if getattr(m, "DEFAULT", True)]
    unknown = [s for s in chosen if s not in suites]
    if unknown:
        return None, f"unknown suite(s) {unknown}; available: {', '.join(suites)}"
    try:
        import sklearn  # noqa: F401
    except ImportError:
        return (
            None,
            "xpml bench compares against scikit-learn: pip install 'xpml[bench]'",
        )
    return chosen, None


def _make_bench(args, modules):
    """The Bench for these arguments and suite modules (results are written to
    disk after every case, should the run be stopped)."""
    from xpml.bench import Bench, load_reference

    reference, reference_name = None, None
    if args.reference_from:
        reference, reference_name = load_reference(args.reference_from)
    # the libraries the fork server imports for the cold calls: the suites'
    # references and the backend's (not cupy: a fork cannot inherit CUDA)
    preload = {args.backend}
    for mod in modules:
        preload.update(getattr(mod, "REQUIRES", ()), getattr(mod, "PRELOAD", ()))
    preload = sorted(
        m
        for m in preload
        if m not in ("numpy", "cupy") and importlib.util.find_spec(m) is not None
    )
    tag = args.tag or (
        args.backend
        + ("-large" if args.large else "")
        + ("-tiny" if args.tiny else "-quick" if args.quick else "")
    )
    bench = Bench(
        backend=args.backend,
        device=args.device,
        quick=args.quick,
        tiny=args.tiny,
        repeats=args.repeats,
        cold=args.cold or "spawn",  # a new interpreter per cold call
        cold_runs=args.cold_runs,
        cold_prefault_mb=args.cold_prefault_mb,
        keep_freed_mb=args.keep_freed_memory,
        preload=preload,
        budget_s=args.budget,
        case_timeout_s=args.case_timeout,
        ref_once_over_s=args.ref_once_over,
        reference=reference,
        reference_name=reference_name,
        on_result=lambda _r: bench.write(args.out, tag=tag, plot=False),
    )
    return bench, tag


def _run_suites(bench, suites, chosen):
    """Run the chosen suites; the number that failed."""
    from xpml.bench import BudgetSpent

    failures = 0
    for name in chosen:
        missing = [
            m
            for m in getattr(suites[name], "REQUIRES", ())
            if importlib.util.find_spec(m) is None
        ]
        if missing:
            print(
                f"{name:>10} skipped: needs {', '.join(missing)} for its reference "
                f"(pip install {' '.join(missing)})"
            )
            continue
        try:
            suites[name].run(bench)
        except BudgetSpent as exc:
            bench.stopped.append(f"{name}: stopped, {exc}")
            print(f"{name:>10} stopped: {exc}")
        except Exception as exc:  # one broken suite should not hide the others
            failures += 1
            bench.stopped.append(f"{name}: FAILED: {type(exc).__name__}: {exc}")
            print(f"{name:>10} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
    return failures


def _bench(args):
    from xpml.bench import discover

    suites = discover()
    chosen, error = _chosen_suites(args, suites)
    if error:
        print(error, file=sys.stderr)
        return 2
    try:
        bench, tag = _make_bench(args, [suites[n] for n in chosen])
    except (OSError, ValueError, KeyError) as exc:
        print(f"--reference-from: cannot read it ({exc})", file=sys.stderr)
        return 2
    sizes = "tiny" if args.tiny else "quick" if args.quick else "full"
    print(
        f"xpml bench: backend={args.backend} device={args.device} {sizes} sizes; "
        f"cold = first call in a fresh process ({bench.cold}, median of "
        f"{bench.cold_runs}), warm = median of {args.repeats} after a warm-up, "
        "the two sides alternating; ratio = xpml / reference"
        + (f"; budget {args.budget:.0f} s" if args.budget is not None else "")
    )
    bench.start()
    try:
        failures = _run_suites(bench, suites, chosen)
    finally:
        bench.close()
    base = bench.write(args.out, tag=tag)
    print(f"results written to {base}.md and {base}.json")
    return 1 if failures else 0


def _demo(args):
    from xpml.demos import discover

    demos = discover()
    if not args.name or args.name not in demos:
        print("demos:")
        for name, mod in demos.items():
            print(f"  {name:<14} {(mod.__doc__ or '').strip().splitlines()[0]}")
        return 0 if not args.name else 2
    return demos[args.name].main(args.rest) or 0


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _megabytes(text):
    """``--keep-freed-memory``'s value, checked as the function checks it."""
    from xpml.utils.memory import _check_mb

    try:
        value = float(text)
        _check_mb(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (got {text!r})") from None
    return value


def _add_bench_parser(sub):
    b = sub.add_parser("bench", help="benchmarks against scikit-learn / PyTorch")
    b.add_argument("suites", nargs="*", help="suites to run (default: all)")
    b.add_argument("--backend", default="numpy")
    b.add_argument("--device", default=None)
    b.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    b.add_argument(
        "--tiny", action="store_true", help="smallest sizes (checks a pipeline)"
    )
    b.add_argument(
        "--large",
        action="store_true",
        help="the large-n suite (SVC 50k/100k, KernelRidge 20k, kNN 200k, KMeans "
        "1M) with peak memory; long, run by hand",
    )
    b.add_argument("--repeats", type=int, default=5, help="warm calls timed")
    _add_cold_options(b)
    for flag, text in (
        ("--budget", "wall time for the run: no case is started past it"),
        ("--case-timeout", "stop a cold call after this long (shown as a bound)"),
        ("--ref-once-over", "time a reference once (cold) when it takes longer"),
    ):
        b.add_argument(flag, type=float, default=None, metavar="SECONDS", help=text)
    b.add_argument(
        "--reference-from",
        default=None,
        metavar="JSON",
        help="reuse the reference times of an earlier run's JSON",
    )
    b.add_argument("--out", default="bench/results")
    b.add_argument("--tag", default=None, help="results file name tag")


def _add_cold_options(b):
    """The options of the cold call's fresh process (and the allocator's)."""
    b.add_argument(
        "--cold",
        choices=["fork", "spawn", "off"],
        default=None,
        help="how the cold call's fresh process starts: spawn (a new "
        "interpreter; default), fork (from a server that only imported the "
        "libraries: faster to start, but its children's first calls pay for "
        "copying the server's pages, bench/README.md) or off (warm only)",
    )
    b.add_argument(
        "--cold-runs",
        type=_positive_int,
        default=3,
        metavar="N",
        help="fresh processes each side's cold call is timed in (median "
        "reported; calls over 5 s: one)",
    )
    b.add_argument(
        "--cold-prefault-mb",
        type=int,
        default=1024,
        metavar="MB",
        help="MB touched and freed before each cold call, untimed, so that memory "
        "a VM handed back to its host is not charged to the fresh process "
        "(bench/README.md); 0: measure the machine as it is",
    )
    b.add_argument(
        "--keep-freed-memory",
        type=_megabytes,
        default=None,
        metavar="MB",
        help="let every process (warm and cold) keep up to MB of freed memory "
        "for reuse (glibc's malloc thresholds; xpml.utils.memory): later calls "
        "then run without faulting in fresh pages; default: glibc as it is",
    )


def main(argv=None):
    parser = argparse.ArgumentParser(prog="xpml", description="xpml command line")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="version, backends, devices, float64 support")
    _add_bench_parser(sub)
    d = sub.add_parser("demo", help="reproduce the lecture notes' behaviours")
    d.add_argument("name", nargs="?")
    d.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    if args.command == "info":
        return _info(args)
    if args.command == "bench":
        return _bench(args)
    if args.command == "demo":
        return _demo(args)
    parser.print_help()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
