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


def _bench(args):
    from xpml.bench import Bench, discover

    suites = discover()
    chosen = args.suites or [
        n for n, m in suites.items() if getattr(m, "DEFAULT", True)
    ]
    unknown = [s for s in chosen if s not in suites]
    if unknown:
        print(
            f"unknown suite(s) {unknown}; available: {', '.join(suites)}",
            file=sys.stderr,
        )
        return 2
    try:
        import sklearn  # noqa: F401
    except ImportError:
        print(
            "xpml bench compares against scikit-learn: pip install 'xpml[bench]'",
            file=sys.stderr,
        )
        return 2
    bench = Bench(
        backend=args.backend, device=args.device, quick=args.quick, repeats=args.repeats
    )
    print(
        f"xpml bench: backend={args.backend} device={args.device} "
        f"{'quick' if args.quick else 'full'} sizes, {args.repeats} repeats "
        f"(median after a warm-up; ratio = xpml / reference)"
    )
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
        except Exception as exc:  # one broken suite should not hide the others
            failures += 1
            print(f"{name:>10} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
    tag = args.tag or (f"{args.backend}" + ("-quick" if args.quick else ""))
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


def main(argv=None):
    parser = argparse.ArgumentParser(prog="xpml", description="xpml command line")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="version, backends, devices, float64 support")
    b = sub.add_parser("bench", help="benchmarks against scikit-learn / PyTorch")
    b.add_argument("suites", nargs="*", help="suites to run (default: all)")
    b.add_argument("--backend", default="numpy")
    b.add_argument("--device", default=None)
    b.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--out", default="bench/results")
    b.add_argument("--tag", default=None, help="results file name tag")
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
