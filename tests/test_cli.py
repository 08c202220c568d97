"""The xpml command line."""

import json
import subprocess
import sys

from xpml.cli import main


def test_info(capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "xpml 0.1.0" in out and "numpy" in out and "float64: yes" in out
    assert "active backend" in out


def test_python_dash_m():
    out = subprocess.run(
        [sys.executable, "-m", "xpml", "info"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "backends:" in out


def test_bench_quick_writes_results(tmp_path, capsys):
    assert (
        main(["bench", "gram", "--quick", "--repeats", "1", "--out", str(tmp_path)])
        == 0
    )
    data = json.loads((tmp_path / "bench-numpy-quick.json").read_text())
    rows = data["results"]
    assert {r["n"] for r in rows} == {500, 1000}
    assert all(r["ratio"] > 0 and r["ref_name"] == "scikit-learn" for r in rows)
    assert "| gram |" in (tmp_path / "bench-numpy-quick.md").read_text()
    assert data["machine"]["cpu_count"] >= 1


def test_bench_unknown_suite(capsys):
    assert main(["bench", "nope", "--quick"]) == 2


def test_demo_lists(capsys):
    assert main(["demo"]) == 0


def test_bench_skips_a_suite_whose_reference_is_missing(monkeypatch, capsys, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "torch" else real(name, *a),
    )
    assert main(["bench", "nn", "--quick", "--out", str(tmp_path)]) == 0
    assert "nn skipped: needs torch" in capsys.readouterr().out
