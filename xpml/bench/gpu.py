"""The GPU check's benchmark suite: xpml on a GPU at large n beside scikit-learn
on all the machine's cores (and PyTorch on the CPU for Conv2D).

Run by ``ci/gpu_check.sh`` (never in the default run)::

    xpml bench gpu --backend cupy --device 0 --repeats 2 --ref-once-over 2 \\
        --case-timeout 75 --budget 240

Cases (full size; ``--quick`` and ``--tiny`` shrink them): SVC fit (RBF, the
``svm`` suite's data) at n = 20,000, 50,000 and 100,000; the RBF Gram matrix at
n = 50,000; KernelRidge fit at n = 20,000; k-NN predict with 1,000,000 points
and 10,000 queries; KMeans fit at n = 1,000,000, k = 64; PCA fit of
1,000,000 × 100; a random forest fit (100 trees) at n = 100,000; Conv2D
forward + backward on a batch of 256 (float32). The larger SVC sizes run last,
so a spent budget drops them first.

scikit-learn runs with ``n_jobs=-1`` where it has it (k-NN, the forest) and its
BLAS on every core; LIBSVM itself is single-threaded. Its time at a larger SVC
size is estimated from the smaller one (n² scaling): when that is over the time
allowed, the reference is not run and the note says so.

``python -m xpml.bench.gpu tests JUNIT.xml ...`` and ``... report ...`` are the
check script's helpers: the first judges the GPU test run (never green on
skips), the second writes the check's summary.
"""

from __future__ import annotations

import importlib.util

import numpy as np

SUITE = "gpu"
DEFAULT = False  # large sizes: ci/gpu_check.sh runs it on a GPU
PRELOAD = ("torch",)  # the Conv2D reference


def _svc(bench, n, measured):
    from sklearn.svm import SVC as SkSVC

    from xpml.bench.svm import _data
    from xpml.svm import SVC

    bench.check_budget()  # before building the case's data
    X, y = _data(n)
    Xb, yb = bench.to_backend(X, y)
    ours = SVC(gamma=0.05, C=1.0)
    estimate = None
    if measured:
        n0, t0 = max(measured.items())
        estimate = t0 * (n / n0) ** 2
    r = bench.compare(
        SUITE,
        "SVC.fit rbf d=20",
        n,
        lambda: ours.fit(Xb, yb),
        lambda: SkSVC(gamma=0.05, C=1.0).fit(X, y),
        params={"kernel": "rbf", "gamma": 0.05, "C": 1.0, "d": 20},
        ref_name="scikit-learn (LIBSVM, 1 thread)",
        ref_estimate_s=estimate,
    )
    ref_t = r.ref_cold_s or r.ref_s
    if ref_t:
        measured[n] = ref_t
    if hasattr(ours, "n_support_"):
        r.note = "; ".join(
            x for x in (f"xpml {int(ours.support_.shape[0])} SVs", r.note) if x
        )


def _gram(bench):
    from sklearn.metrics.pairwise import rbf_kernel

    from xpml.kernels import gram

    for n in bench.sizes([50_000], [20_000], [300]):
        bench.check_budget()  # before building the case's data
        X = np.random.default_rng(0).standard_normal((n, 20))
        Xb = bench.to_backend(X)
        bench.compare(
            SUITE,
            "RBF Gram gamma=0.05 d=20",
            n,
            lambda: gram(Xb, kernel="rbf", gamma=0.05),
            lambda: rbf_kernel(X, gamma=0.05),
            params={"d": 20, "gamma": 0.05},
            note=f"{n}x{n} float64",
        )


def _kernel_ridge(bench):
    from sklearn.kernel_ridge import KernelRidge as SK

    from xpml.kernel_ridge import KernelRidge

    for n in bench.sizes([20_000], [10_000], [300]):
        bench.check_budget()  # before building the case's data
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, 20))
        y = np.sin(X[:, 0]) + 0.1 * rng.standard_normal(n)
        Xb, yb = bench.to_backend(X, y)
        bench.compare(
            SUITE,
            "KernelRidge fit rbf d=20",
            n,
            lambda: KernelRidge(
                alpha=1.0, kernel="rbf", gamma=0.05, compute_dof=False
            ).fit(Xb, yb),
            lambda: SK(alpha=1.0, kernel="rbf", gamma=0.05).fit(X, y),
            params={"d": 20, "gamma": 0.05, "alpha": 1.0},
            note="compute_dof=False",
        )


def _neighbors(bench):
    from sklearn.neighbors import KNeighborsClassifier as SK

    from xpml.neighbors import KNeighborsClassifier

    d, k = 20, 5
    for n, m in bench.sizes([(1_000_000, 10_000)], [(200_000, 10_000)], [(2000, 200)]):
        bench.check_budget()  # before building the case's data
        rng = np.random.default_rng(0)
        X, Q = rng.standard_normal((n, d)), rng.standard_normal((m, d))
        y = rng.integers(0, 5, size=n)
        Xb, yb, Qb = bench.to_backend(X, y, Q)
        ours = KNeighborsClassifier(n_neighbors=k).fit(Xb, yb)
        ref = SK(n_neighbors=k, algorithm="brute", n_jobs=-1).fit(X, y)
        bench.compare(
            SUITE,
            f"kNN predict brute k={k} d={d}",
            n,
            lambda: ours.predict(Qb),
            lambda: ref.predict(Q),
            params={"d": d, "k": k, "n_queries": m},
            ref_name="scikit-learn brute n_jobs=-1",
            note=f"{m} queries",
        )


def _kmeans(bench):
    from sklearn.cluster import KMeans as SK

    from xpml.cluster import KMeans

    d = 20
    for n, k in bench.sizes([(1_000_000, 64)], [(200_000, 64)], [(2000, 8)]):
        bench.check_budget()  # before building the case's data
        rng = np.random.default_rng(0)
        centres = 3.0 * rng.standard_normal((k, d))
        X = centres[rng.integers(0, k, size=n)] + rng.standard_normal((n, d))
        init = X[rng.choice(n, size=k, replace=False)]
        Xb, initb = bench.to_backend(X, init)
        ours = KMeans(k, init=initb, max_iter=100)
        bench.compare(
            SUITE,
            f"KMeans fit k={k} d={d}",
            n,
            lambda: ours.fit(Xb),
            lambda: SK(k, init=init, n_init=1, max_iter=100, algorithm="lloyd").fit(X),
            params={"d": d, "k": k, "max_iter": 100},
            note="same init",
        )


def _pca(bench):
    from sklearn.decomposition import PCA as SK

    from xpml.decomposition import PCA

    k = 10
    for n, d in bench.sizes([(1_000_000, 100)], [(200_000, 100)], [(2000, 20)]):
        bench.check_budget()  # before building the case's data
        rng = np.random.default_rng(0)
        X = rng.standard_normal((n, d)) @ rng.standard_normal((d, d))
        Xb = bench.to_backend(X)
        bench.compare(
            SUITE,
            f"PCA fit d={d} k={k}",
            n,
            lambda: PCA(k).fit(Xb),
            lambda: SK(k).fit(X),
            params={"d": d, "k": k},
            ref_name="scikit-learn (default solver)",
        )


def _forest(bench):
    from sklearn.ensemble import RandomForestClassifier as SK

    from xpml.bench.trees import _data
    from xpml.ensemble import RandomForestClassifier

    d = 20
    for n, T in bench.sizes([(100_000, 100)], [(20_000, 100)], [(500, 10)]):
        bench.check_budget()  # before building the case's data
        X, y, _, _ = _data(n, d, 0)
        Xb, yb = bench.to_backend(X, y)
        bench.compare(
            SUITE,
            f"random forest fit {T} trees d={d}",
            n,
            lambda: RandomForestClassifier(T, random_state=0).fit(Xb, yb),
            lambda: SK(T, random_state=0, n_jobs=-1).fit(X, y),
            params={"d": d, "n_estimators": T},
            ref_name="scikit-learn n_jobs=-1",
        )


def _conv(bench):
    if importlib.util.find_spec("torch") is None:
        bench.echo(f"{SUITE:>10} Conv2D skipped: its reference needs torch")
        return
    import torch

    from xpml._backend import to_numpy
    from xpml.nn import Conv2D

    for N in bench.sizes([256], [256], [4]):
        bench.check_budget()  # before building the case's data
        H, W, ci, co = 28, 28, 16, 32
        rng = np.random.default_rng(0)
        X = rng.standard_normal((N, H, W, ci)).astype(np.float32)
        dZ = rng.standard_normal((N, H, W, co)).astype(np.float32)
        conv = Conv2D(co, 3, padding=1, random_state=0)
        Xb, dZb = bench.to_backend(X, dZ)
        conv.forward(Xb)  # the parameters, once

        def ours():
            conv.forward(Xb)
            return conv.backward(dZb)

        Wt = torch.tensor(
            np.transpose(to_numpy(conv.params["W"]), (3, 2, 0, 1)).copy(),
            requires_grad=True,
        )
        Xt = torch.tensor(np.transpose(X, (0, 3, 1, 2)).copy(), requires_grad=True)
        bt = torch.zeros(co, requires_grad=True)
        dZt = torch.tensor(np.transpose(dZ, (0, 3, 1, 2)).copy())

        def ref():
            for a in (Xt, Wt, bt):
                a.grad = None
            torch.nn.functional.conv2d(Xt, Wt, bt, padding=1).backward(dZt)
            return Xt.grad

        bench.compare(
            SUITE,
            "Conv2D fwd+bwd float32 3x3 16->32 28x28",
            N,
            ours,
            ref,
            ref_name=f"torch CPU {torch.get_num_threads()} threads",
            params={"H": H, "W": W, "C_in": ci, "C_out": co, "k": 3, "padding": 1},
        )


def run(bench):
    svc_sizes = bench.sizes([20_000, 50_000, 100_000], [20_000], [300])
    measured = {}
    _svc(bench, svc_sizes[0], measured)
    for case in (_gram, _kernel_ridge, _neighbors, _kmeans, _pca, _forest, _conv):
        case(bench)
    for n in svc_sizes[1:]:  # the long ones last
        _svc(bench, n, measured)


# ---------------------------------------------------------- the check's helpers
def summarize_tests(junit_path, libs, rc):
    """Judge a GPU test run from its JUnit XML: ``(ok, summary dict)``.

    Not ok when pytest failed or was stopped (``rc``), when no test ran, when
    a library in ``libs`` passed no test, or when a test was skipped because
    its GPU library was unavailable: a GPU check never passes by skipping.
    """
    import xml.etree.ElementTree as ET

    s = {
        "rc": rc,
        "tests": 0,
        "passed": 0,
        "failed": 0,
        "errors": 0,
        "skipped": 0,
        "libs": {lib: {"passed": 0, "failed": 0, "skipped": 0} for lib in libs},
        "skip_reasons": {},
        "failures": [],
        "problems": [],
    }
    try:
        cases = list(ET.parse(junit_path).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as exc:
        cases = []
        s["problems"].append(f"no test report ({type(exc).__name__}: {exc})")
    for tc in cases:
        _count_case(s, tc)
    s["problems"] += _test_problems(s, rc)
    s["ok"] = not s["problems"]
    return s["ok"], s


def _count_case(s, tc):
    """Add one JUnit test case to the summary ``s``."""
    import re

    name = tc.get("name", "")
    s["tests"] += 1
    if tc.find("skipped") is not None:
        outcome = "skipped"
        msg = tc.find("skipped").get("message", "")
        s["skip_reasons"][msg] = s["skip_reasons"].get(msg, 0) + 1
    elif tc.find("failure") is not None or tc.find("error") is not None:
        outcome = "failed" if tc.find("failure") is not None else "errors"
        s["failures"].append(f"{tc.get('classname', '')}::{name}")
    else:
        outcome = "passed"
    s[outcome] += 1
    for lib, counts in s["libs"].items():  # the library in the test's parameters
        if re.search(rf"[\[\-]{re.escape(lib)}[\]\-]", name):
            counts["failed" if outcome == "errors" else outcome] += 1


def _test_problems(s, rc):
    problems = []
    if rc in (124, 137):
        problems.append("the test run was stopped at its time limit")
    elif rc == 5:
        problems.append("pytest collected no test")
    elif rc not in (0, 1):
        problems.append(f"pytest exited with status {rc}")
    if s["failed"] or s["errors"]:
        problems.append(f"{s['failed'] + s['errors']} test(s) failed")
    if s["tests"] - s["skipped"] == 0:
        problems.append("no test ran: zero selected, or every one skipped")
    problems += [
        f"no test passed on {lib}" for lib, c in s["libs"].items() if not c["passed"]
    ]
    unavailable = sum(
        c for m, c in s["skip_reasons"].items() if "no cuda gpu" in m.lower()
    )
    if unavailable:
        problems.append(
            f"{unavailable} test(s) skipped because a GPU library was unavailable"
        )
    return problems


def _read_steps(path):
    """The steps the check script logged: name, status, seconds, detail."""
    steps = []
    try:
        with open(path) as fh:
            rows = [line.rstrip("\n").split("\t") for line in fh]
    except OSError:
        return steps
    for parts in rows:
        if len(parts) >= 3:
            parts += [""] * (4 - len(parts))
            steps.append(
                {
                    "step": parts[0],
                    "status": parts[1],
                    "seconds": float(parts[2] or 0),
                    "detail": parts[3],
                }
            )
    return steps


def _load_json(path):
    import json

    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError, TypeError):
        return None


def _problems(steps, tests, benches):
    problems = [
        f"{s['step']}: {s['detail']}"
        for s in steps
        if s["status"] == "fail" and not (s["step"] == "tests" and tests is not None)
    ]
    for label, data in benches.items():
        rows = (data or {}).get("results", [])
        if not any(r.get("xpml_s") or r.get("xpml_cold_s") for r in rows):
            problems.append(f"benchmarks on {label}: no case was timed")
    if tests is not None and not tests.get("ok"):
        problems += [f"tests: {p}" for p in tests["problems"]]
    return problems


def _tests_section(tests):
    lines = ["## Tests", ""]
    lines.append(
        f"{tests['passed']} passed, {tests['failed']} failed, "
        f"{tests['errors']} errors, {tests['skipped']} skipped "
        f"(of {tests['tests']}; pytest status {tests['rc']})."
    )
    lines.append("")
    lines += [
        f"* {lib}: {c['passed']} passed, {c['failed']} failed, {c['skipped']} skipped"
        for lib, c in tests["libs"].items()
    ]
    lines += [f"* FAILED {name}" for name in tests["failures"][:50]]
    lines += [
        f"* skipped ×{count}: {msg}"
        for msg, count in sorted(tests["skip_reasons"].items())
    ]
    return lines + [""]


def _bench_section(label, data):
    from xpml.bench import Result, markdown_table

    lines = [f"## Benchmarks: {label}", ""]
    if not data:
        return lines + ["No results.", ""]
    m, settings = data.get("machine", {}), data.get("settings", {})
    keys = ("backend", "device", "gpu", "cpu_count", "torch", "cupy", "sklearn")
    lines.append(", ".join(f"{k}={m[k]}" for k in keys if m.get(k)))
    lines += ["", f"Settings: {settings}"]
    lines.append("")
    fields = set(Result.__dataclass_fields__)
    rows = [
        Result(**{k: v for k, v in r.items() if k in fields})
        for r in data.get("results", [])
    ]
    lines.append(markdown_table(rows, cold=settings.get("cold", "spawn")))
    return lines + [f"* {s}" for s in data.get("stopped", [])] + [""]


def write_report(out_dir, mode, steps_path, tests_path, benches):
    """``gpu-check.md`` and ``gpu-check.json`` in ``out_dir``; returns ok.

    ``benches``: ``[(label, path of the bench JSON)]``. The check fails when a
    step failed, the tests were not ok, or a benchmark run timed no case.
    """
    import json
    import os
    import time

    steps = _read_steps(steps_path)
    tests = _load_json(tests_path) if tests_path else None
    bench_data = {label: _load_json(path) for label, path in benches}
    problems = _problems(steps, tests, bench_data)
    ok = not problems
    title = {"full": "", "quick": " (quick)", "simulate": " (simulate: CPU)"}[mode]
    lines = [f"# xpml GPU check{title}: {'PASSED' if ok else 'FAILED'}", ""]
    lines.append(f"Written {time.strftime('%Y-%m-%d %H:%M:%S %Z')}.")
    if mode == "simulate":
        lines.append(
            "Simulation: the same pipeline on the CPU at tiny sizes, torch-CPU "
            "standing in for cupy and torch-CUDA in the tests and the first "
            "benchmark run, NumPy in the second; its timings mean nothing."
        )
    lines.append("")
    if problems:
        lines += ["## Problems", ""] + [f"* {p}" for p in problems] + [""]
    lines += [
        "## Steps",
        "",
        "| step | status | seconds | detail |",
        "|---|---|---:|---|",
    ]
    lines += [
        f"| {s['step']} | {s['status']} | {s['seconds']:.0f} | {s['detail']} |"
        for s in steps
    ]
    lines.append("")
    if tests is not None:
        lines += _tests_section(tests)
    for label, data in bench_data.items():
        lines += _bench_section(label, data)
    with open(os.path.join(out_dir, "gpu-check.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    report = {"ok": ok, "mode": mode, "problems": problems, "steps": steps}
    report.update(tests=tests, bench=bench_data)
    with open(os.path.join(out_dir, "gpu-check.json"), "w") as fh:
        json.dump(report, fh, indent=1)
    return ok


def main(argv=None):
    import argparse
    import json

    p = argparse.ArgumentParser(prog="python -m xpml.bench.gpu")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tests", help="judge a GPU test run from its JUnit XML")
    t.add_argument("junit")
    t.add_argument(
        "--libs", required=True, help="comma-separated, e.g. cupy,torch_cuda"
    )
    t.add_argument("--rc", type=int, required=True, help="pytest's exit status")
    t.add_argument("--out", required=True, help="where to write the summary JSON")
    r = sub.add_parser("report", help="write gpu-check.md and gpu-check.json")
    r.add_argument("out_dir")
    r.add_argument("--mode", choices=["full", "quick", "simulate"], required=True)
    r.add_argument("--steps", required=True)
    r.add_argument("--tests", default=None)
    r.add_argument("--bench", action="append", default=[], metavar="LABEL=JSON")
    args = p.parse_args(argv)
    if args.cmd == "tests":
        ok, s = summarize_tests(args.junit, args.libs.split(","), args.rc)
        with open(args.out, "w") as fh:
            json.dump(s, fh, indent=1)
        per_lib = ", ".join(f"{k} {v['passed']} passed" for k, v in s["libs"].items())
        print(
            f"tests: {s['passed']} passed, {s['failed'] + s['errors']} failed, "
            f"{s['skipped']} skipped ({per_lib})"
        )
        for prob in s["problems"]:
            print(f"tests: PROBLEM: {prob}")
        return 0 if ok else 1
    benches = [tuple(b.split("=", 1)) for b in args.bench]
    ok = write_report(args.out_dir, args.mode, args.steps, args.tests, benches)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
