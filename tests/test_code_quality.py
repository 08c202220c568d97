"""The house rules that a machine can check: lint, format, function shape, and
backend facts asked only of the helper module."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
HELPER = ROOT / "xpml" / "utils" / "_array_api.py"


def _ruff(*args):
    exe = shutil.which("ruff")
    if exe is None:
        pytest.skip("ruff is not installed (it is in the [test] extra)")
    return subprocess.run(
        [exe, *args], cwd=ROOT, capture_output=True, text=True, check=False
    )


def test_ruff_check_is_clean():
    r = _ruff("check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_ruff_format_is_clean():
    r = _ruff("format", "--check", "--no-cache", ".")
    assert r.returncode == 0, r.stdout + r.stderr


def test_functions_fit_on_a_screen():
    """No function over 60 lines of code or 5 positional parameters."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "code_shape.py")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr


_FORBIDDEN = {
    "getattr(..., 'device')": re.compile(r"getattr\([^)]*[\"']device[\"']"),
    "xp.__name__": re.compile(r"\bxp\.__name__"),
    "array_api_compat.device(": re.compile(r"\b(array_api_compat|aac)\.device\("),
    '"32" in str(dtype)': re.compile(r"[\"']32[\"'] in str\("),
    "epsilon literal": re.compile(r"2\.220446049250313e-16|1\.1920929e-0?7"),
}


@pytest.mark.parametrize("rule", sorted(_FORBIDDEN))
def test_backend_facts_come_from_the_helper_module(rule):
    pattern = _FORBIDDEN[rule]
    hits = []
    for path in sorted((ROOT / "xpml").rglob("*.py")):
        if path == HELPER:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "use xpml.utils._array_api instead:\n" + "\n".join(hits)


_PUBLIC_METHODS = (
    "fit",
    "partial_fit",
    "predict",
    "predict_proba",
    "predict_log_proba",
    "decision_function",
    "transform",
    "fit_transform",
    "inverse_transform",
    "fit_predict",
    "score",
    "score_samples",
)


def test_public_estimator_methods_have_type_hints():
    """Every public method of every registered estimator annotates its return
    and its array arguments (``X``, ``y``, ``sample_weight``)."""
    import inspect

    from xpml.utils.discovery import all_estimators

    missing = []
    for name, cls in all_estimators():
        for meth in _PUBLIC_METHODS:
            fn = getattr(cls, meth, None)
            fn = getattr(fn, "__wrapped__", fn)
            if fn is None or not callable(fn) or isinstance(fn, property):
                continue
            try:
                sig = inspect.signature(fn)
            except (TypeError, ValueError):
                continue
            if sig.return_annotation is inspect.Signature.empty:
                missing.append(f"{name}.{meth} -> ?")
            for arg in ("X", "y", "sample_weight"):
                p = sig.parameters.get(arg)
                if p is not None and p.annotation is inspect.Parameter.empty:
                    missing.append(f"{name}.{meth}({arg})")
    assert not missing, "\n".join(sorted(set(missing)))
