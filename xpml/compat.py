"""Run scikit-learn's own test modules against xpml's estimators.

    python -m xpml.compat                 # every mapped module (by hand: long)
    python -m xpml.compat --fast          # the CI subset
    python -m xpml.compat svm tree --out results.json

The test modules come from the *installed* scikit-learn at run time; nothing
is copied into xpml. Each module runs in its own pytest process with this
module loaded as a plugin, which, before the tests are imported, replaces in
scikit-learn's public subpackages (``sklearn.svm``, ``sklearn.tree``, ...)
every estimator class that xpml provides under the same name. A test written
as ``from sklearn.svm import SVC`` then tests ``xpml.svm.SVC``. Arguments are
passed through unchanged: an argument xpml does not accept fails the test
(nothing is dropped).

A test *exercises xpml* when it creates an xpml estimator; only those count.
The table gives, per module, how many ran, passed, failed, xfailed or were
skipped. Failures are grouped by cause (the exception's type and the first
line of its message, with a category such as "parameter not supported" or
"scikit-learn internals") into ``docs/sklearn_compat.md`` by
``--write-report``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
from typing import Any

__all__ = ["MODULES", "FAST", "substitutions", "run", "main"]

# subpackage -> test modules (relative to sklearn/<subpackage>/tests/)
MODULES: dict[str, tuple[str, ...]] = {
    "svm": ("test_svm.py",),
    "linear_model": (
        "test_base.py",
        "test_ridge.py",
        "test_coordinate_descent.py",
        "test_logistic.py",
        "test_perceptron.py",
    ),
    "neighbors": ("test_neighbors.py",),
    "decomposition": ("test_pca.py", "test_truncated_svd.py"),
    "cluster": ("test_k_means.py", "test_hierarchical.py"),
    "tree": ("test_tree.py",),
    "ensemble": ("test_bagging.py", "test_forest.py", "test_weight_boosting.py"),
    "naive_bayes": ("test_naive_bayes.py",),
    "discriminant_analysis": ("test_discriminant_analysis.py",),
    "kernel_ridge": ("test_kernel_ridge.py",),
    "kernel_approximation": ("test_kernel_approximation.py",),
}
# small, quick modules run by the test suite (CI)
FAST: tuple[str, ...] = ("kernel_ridge/test_kernel_ridge.py",)

_RESULTS_ENV = "XPML_COMPAT_RESULTS"


def substitutions() -> dict[str, dict[str, type]]:
    """``{sklearn subpackage: {name: xpml class}}`` for every public estimator
    class that xpml defines under a name scikit-learn's subpackage also has."""
    from xpml.base import BaseEstimator

    out: dict[str, dict[str, type]] = {}
    for sub in MODULES:
        ours = importlib.import_module(
            f"xpml.{sub}" if sub != "discriminant_analysis" else "xpml." + sub
        )
        theirs = importlib.import_module(f"sklearn.{sub}")
        names = {}
        for name in dir(ours):
            cls = getattr(ours, name)
            if (
                isinstance(cls, type)
                and issubclass(cls, BaseEstimator)
                and cls.__module__.startswith("xpml.")
                and not name.startswith("_")
                and not getattr(cls, "_xpml_abstract", False)
                and hasattr(theirs, name)
            ):
                names[name] = cls
        out[sub] = names
    return out


# ------------------------------------------------------------ the pytest plugin

_touched = [False]
_records: list[dict[str, Any]] = []


def pytest_configure(config: Any) -> None:
    """Swap xpml's classes into scikit-learn's public subpackages and mark a
    test as exercising xpml when it creates one of them."""
    if not os.environ.get(_RESULTS_ENV):
        return
    from xpml.base import BaseEstimator

    for sub, names in substitutions().items():
        module = importlib.import_module(f"sklearn.{sub}")
        for name, cls in names.items():
            setattr(module, name, cls)

    def __new__(cls, *args, **kwargs):
        _touched[0] = True
        return object.__new__(cls)

    BaseEstimator.__new__ = __new__


def pytest_runtest_setup(item: Any) -> None:
    _touched[0] = False


def pytest_runtest_logreport(report: Any) -> None:
    if not os.environ.get(_RESULTS_ENV):
        return
    failed_setup = report.when == "setup" and report.outcome != "passed"
    if report.when != "call" and not failed_setup:
        return
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    _records.append(
        {
            "test": report.nodeid,
            "outcome": outcome,
            "xpml": _touched[0],
            "error": _first_error(report) if outcome == "failed" else "",
        }
    )


def pytest_sessionfinish(session: Any) -> None:
    path = os.environ.get(_RESULTS_ENV)
    if path:
        pathlib.Path(path).write_text(json.dumps(_records))


def _first_error(report: Any) -> str:
    crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return text.strip().splitlines()[0][:300] if text.strip() else "?"


# ------------------------------------------------------------------ the runner


def _test_file(spec: str) -> pathlib.Path:
    import sklearn

    sub, _, name = spec.partition("/")
    root = pathlib.Path(sklearn.__file__).parent
    nested = root / sub / "tests" / name
    return nested if nested.exists() else root / "tests" / name  # single modules


def _per_test_timeout() -> int:
    """Seconds allowed per test (``XPML_COMPAT_TEST_TIMEOUT``, default 300),
    when pytest-timeout is installed; 0 otherwise."""
    import importlib.util

    if importlib.util.find_spec("pytest_timeout") is None:
        return 0
    return int(os.environ.get("XPML_COMPAT_TEST_TIMEOUT", "300"))


def _run_module(spec: str, timeout: float) -> list[dict[str, Any]]:
    """Run one scikit-learn test module with the plugin; its per-test records."""
    with tempfile.TemporaryDirectory() as tmp:
        results = pathlib.Path(tmp) / "results.json"
        ini = pathlib.Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = dict(os.environ, **{_RESULTS_ENV: str(results)})
        env.setdefault("OMP_NUM_THREADS", "1")
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(_test_file(spec)),
            "-c",
            str(ini),
            "-p",
            "xpml.compat",
            "-p",
            "no:cacheprovider",
            "-q",
            "--no-header",
            "-W",
            "ignore",
            f"--rootdir={tmp}",
        ]
        if _per_test_timeout():
            # one slow test fails alone instead of losing the module's records
            cmd += ["-p", "timeout", f"--timeout={_per_test_timeout()}"]
        try:
            subprocess.run(
                cmd, env=env, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            return [{"test": spec, "outcome": "timeout", "xpml": True, "error": ""}]
        if not results.exists():
            return [{"test": spec, "outcome": "error", "xpml": True, "error": "crash"}]
        return json.loads(results.read_text())


def run(
    specs: list[str],
    *,
    timeout: float = 1800,
    jobs: int = 1,
    on_result: Any = None,
) -> dict[str, list[dict]]:
    """``{module spec: records}`` for each ``"subpackage/test_file.py"``, run
    ``jobs`` modules at a time; ``on_result(spec, records)`` is called as each
    module finishes (so a long run keeps what it measured)."""
    from concurrent.futures import ThreadPoolExecutor

    results: dict[str, list[dict]] = {}
    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = {spec: pool.submit(_run_module, spec, timeout) for spec in specs}
        for spec, future in futures.items():
            results[spec] = future.result()
            if on_result is not None:
                on_result(spec, results[spec])
    return results


_CATEGORIES = (
    (r"Failed: Timeout", "slower than the per-test timeout"),
    (r"unexpected keyword argument '(\w+)'", "parameter not supported: {0}"),
    (r"has no attribute '(tree_|_\w+)'", "scikit-learn internals: {0}"),
    (r"has no attribute '(\w+_)'", "fitted attribute not provided: {0}"),
    (r"has no attribute '(\w+)'", "method not provided: {0}"),
    (r"over the memory budget", "sparse input over the memory budget"),
    (r"sparse", "sparse input not supported"),
    (r"must be one of|must be a|got .* instead|is not allowed", "option not supported"),
    (r"Not equal to tolerance|Arrays are not|assert", "different numbers"),
    (r"DID NOT RAISE", "scikit-learn raises here, xpml accepts the input"),
    (r"DID NOT WARN", "a warning scikit-learn gives and xpml does not"),
    (r"Regex pattern did not match", "message wording differs from scikit-learn's"),
    (r"^AssertionError", "different results (a plain assert in the test)"),
)


def categorise(error: str) -> str:
    """A short cause for a failure message (for grouping)."""
    for pattern, label in _CATEGORIES:
        m = re.search(pattern, error)
        if m:
            return label.format(*m.groups())
    return "other"


def table(results: dict[str, list[dict]]) -> str:
    """Markdown table of the tests that exercise xpml, per module."""
    kinds = ("passed", "failed", "xfailed", "skipped")
    lines = [
        "| module | run | " + " | ".join(kinds) + " | pass rate |",
        "|---|---" + "|---" * len(kinds) + "|---|",
    ]
    total = dict.fromkeys(("run", *kinds), 0)
    for spec, records in results.items():
        mine = [r for r in records if r["xpml"]]
        counts = {k: sum(r["outcome"] == k for r in mine) for k in kinds}
        ran = counts["passed"] + counts["failed"]
        rate = f"{counts['passed'] / ran:.0%}" if ran else "-"
        lines.append(
            f"| {spec} | {ran} | "
            + " | ".join(str(counts[k]) for k in kinds)
            + f" | {rate} |"
        )
        total["run"] += ran
        for k in kinds:
            total[k] += counts[k]
    rate = f"{total['passed'] / total['run']:.0%}" if total["run"] else "-"
    lines.append(
        f"| **all** | {total['run']} | "
        + " | ".join(str(total[k]) for k in kinds)
        + f" | {rate} |"
    )
    return "\n".join(lines)


def failures(results: dict[str, list[dict]]) -> str:
    """Every failing test that exercises xpml, grouped by cause."""
    groups: dict[str, list[str]] = {}
    for records in results.values():
        for r in records:
            if r["xpml"] and r["outcome"] in ("failed", "error", "timeout"):
                cause = categorise(r["error"]) if r["error"] else r["outcome"]
                groups.setdefault(cause, []).append(f"{r['test']}: {r['error']}")
    out = []
    for cause in sorted(groups, key=lambda c: (-len(groups[c]), c)):
        out.append(f"\n### {cause} ({len(groups[cause])})\n")
        out.extend(f"- `{line}`" for line in sorted(groups[cause]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m xpml.compat", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "modules",
        nargs="*",
        help="subpackages or 'sub/test_x.py' (default: all)",
    )
    parser.add_argument("--fast", action="store_true", help="the CI subset")
    parser.add_argument("--out", help="write the per-test records as JSON")
    parser.add_argument("--write-report", help="write the markdown report here")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--jobs", type=int, default=1, help="modules at a time")
    args = parser.parse_args(argv)
    if args.fast:
        specs = list(FAST)
    elif args.modules:
        specs = [
            m if "/" in m else f"{m}/{f}"
            for m in args.modules
            for f in MODULES.get(m, ())
        ] + [m for m in args.modules if "/" in m]
    else:
        specs = [f"{sub}/{f}" for sub, files in MODULES.items() for f in files]
    done: dict[str, list[dict]] = {}

    def keep(spec, records):
        done[spec] = records
        print(table({spec: records}).splitlines()[2], flush=True)
        if args.out:
            pathlib.Path(args.out).write_text(json.dumps(done, indent=1))

    results = run(specs, timeout=args.timeout, jobs=args.jobs, on_result=keep)
    print(table(results))
    if args.write_report:
        import sklearn

        pathlib.Path(args.write_report).write_text(
            f"# scikit-learn's own tests on xpml\n\nscikit-learn {sklearn.__version__}; "
            f"`python -m xpml.compat --write-report ...`. Counted: tests that create "
            f"an xpml estimator.\n\n{table(results)}\n\n## Failures by cause\n"
            f"{failures(results)}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
