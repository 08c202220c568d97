"""ci/gpu_check.sh: its --simulate pipeline on the CPU, its refusal without a GPU,
and how it judges a GPU test run (never green by skipping)."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

from xpml.bench.gpu import summarize_tests

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "ci" / "gpu_check.sh"


def _run_script(*args, timeout=600):
    # a clean environment for the inner pytest: not an xdist worker of this run
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "XPML_TEST_LIBS"))
    }
    env["PYTHON"] = sys.executable
    return subprocess.run(
        ["bash", str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=ROOT,
    )


def test_simulate_runs_the_whole_pipeline(tmp_path):
    pytest.importorskip("torch")
    proc = _run_script(tmp_path, "--simulate")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["ok"] and report["mode"] == "simulate" and not report["problems"]
    assert [s["step"] for s in report["steps"]] == [
        "tests",
        "bench simulate-torch-cpu",
        "bench simulate-numpy",
    ]
    assert report["tests"]["libs"]["torch"]["passed"] > 0
    first = json.loads((tmp_path / "bench-gpu-simulate-torch-cpu.json").read_text())
    second = json.loads((tmp_path / "bench-gpu-simulate-numpy.json").read_text())
    assert first["machine"]["backend"] == "torch"
    cases = [r["case"] for r in first["results"]]
    assert cases[0] == "SVC.fit rbf d=20" and len(cases) == 8
    for r in first["results"]:
        assert r["xpml_cold_s"] > 0 and r["xpml_s"] > 0, r
        assert r["ref_cold_s"] > 0, r
    # the second backend reuses the first one's reference times
    assert second["settings"]["reference_from"] == "bench-gpu-simulate-torch-cpu.json"
    assert [r["ref_cold_s"] for r in second["results"]] == [
        r["ref_cold_s"] for r in first["results"]
    ]
    md = (tmp_path / "gpu-check.md").read_text()
    assert md.startswith("# xpml GPU check (simulate: CPU): PASSED")
    assert "## Benchmarks: simulate-numpy" in md and "| gpu | PCA fit" in md
    assert (tmp_path / "bench-gpu-simulate-numpy.md").exists()
    # everything the check writes fits in 8 files (a device tool brings back 8)
    assert len(list(tmp_path.iterdir())) <= 8


def test_without_a_gpu_the_check_fails_and_says_why(tmp_path):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is present: this checks the refusal without one")
    except ImportError:
        pass
    proc = _run_script(tmp_path, timeout=300)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "FAILED: no usable CUDA device" in out
    assert "CuPy" in out
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert not report["ok"] and "no usable CUDA device" in report["problems"][0]


def test_unknown_option_is_refused(tmp_path):
    proc = _run_script(tmp_path, "--fast", timeout=60)
    assert proc.returncode == 2 and "unknown option --fast" in proc.stderr


def _junit(tmp_path, cases):
    """A JUnit report with ``cases``: (name, outcome, skip message)."""
    body = []
    for name, outcome, msg in cases:
        inner = {
            "passed": "",
            "failed": '<failure message="boom"/>',
            "error": '<error message="boom"/>',
            "skipped": f'<skipped type="pytest.skip" message="{msg}"/>',
        }[outcome]
        body.append(
            f'<testcase classname="tests.test_x" name="{name}">{inner}</testcase>'
        )
    path = tmp_path / "junit.xml"
    path.write_text(
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        + "".join(body)
        + "</testsuite></testsuites>"
    )
    return path


LIBS = ["cupy", "torch_cuda"]


def test_a_good_gpu_run_passes(tmp_path):
    path = _junit(
        tmp_path,
        [
            ("test_a[cupy]", "passed", ""),
            ("test_b[Ridge-torch_cuda]", "passed", ""),
            ("test_c[torch_cuda-shape1]", "skipped", "float64 not supported"),
        ],
    )
    ok, s = summarize_tests(path, LIBS, rc=0)
    assert ok, s["problems"]
    assert s["libs"]["cupy"]["passed"] == 1
    assert s["libs"]["torch_cuda"] == {"passed": 1, "failed": 0, "skipped": 1}


@pytest.mark.parametrize(
    "cases, rc, problem",
    [
        ([], 5, "pytest collected no test"),
        ([], 0, "no test ran"),
        (
            [("test_a[cupy]", "skipped", "x"), ("test_a[torch_cuda]", "skipped", "x")],
            0,
            "no test ran: zero selected, or every one skipped",
        ),
        (
            [("test_a[cupy]", "passed", ""), ("test_a[torch_cuda]", "failed", "")],
            1,
            "1 test(s) failed",
        ),
        ([("test_a[cupy]", "passed", "")], 0, "no test passed on torch_cuda"),
        (
            [
                ("test_a[cupy]", "passed", ""),
                ("test_a[torch_cuda]", "passed", ""),
                ("test_b[cupy]", "skipped", "no CUDA GPU / cupy: cupy tests run by"),
            ],
            0,
            "1 test(s) skipped because a GPU library was unavailable",
        ),
        (
            [("test_a[cupy]", "passed", ""), ("test_a[torch_cuda]", "passed", "")],
            124,
            "stopped at its time limit",
        ),
    ],
)
def test_a_gpu_run_is_never_green_by_skipping(tmp_path, cases, rc, problem):
    ok, s = summarize_tests(_junit(tmp_path, cases), LIBS, rc=rc)
    assert not ok
    assert any(problem in p for p in s["problems"]), s["problems"]


def test_a_missing_report_fails(tmp_path):
    ok, s = summarize_tests(tmp_path / "none.xml", LIBS, rc=0)
    assert not ok and "no test report" in s["problems"][0]
