"""The xpml command line."""

import contextlib
import gc
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from xpml.bench import Bench, markdown_table
from xpml.bench._cold import ColdRunner
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
    for r in rows:
        assert r["ref_name"] == "scikit-learn" and r["repeats"] == 1
        # cold (first call in a fresh process) and warm, for both sides
        assert r["xpml_cold_s"] > 0 and r["ref_cold_s"] > 0
        assert r["xpml_s"] > 0 and r["ref_s"] > 0
        assert r["cold_ratio"] == pytest.approx(r["xpml_cold_s"] / r["ref_cold_s"])
        assert r["warm_ratio"] == pytest.approx(r["xpml_s"] / r["ref_s"])
        assert r["ratio"] == r["warm_ratio"]
        # the fresh process reports its memory: at least the data it was given
        assert r["xpml_cold"]["peak_rss_mb"] >= r["xpml_cold"]["rss_before_mb"] > 0
    md = (tmp_path / "bench-numpy-quick.md").read_text()
    assert "| gram |" in md
    assert "| cold ratio | warm ratio |" in md and "fresh process" in md
    assert data["machine"]["cpu_count"] >= 1
    assert data["settings"]["cold"] == "spawn"  # a new interpreter per cold call


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


def _bench(**kw):
    """A quiet bench; its cold calls forked (quick to start: these tests are
    about the harness, not the fresh process), unless ``cold`` says."""
    return Bench(echo=lambda *_: None, **{"cold": "fork", **kw})


def test_cold_call_in_a_new_interpreter():
    """spawn: a new interpreter loads the pickled closure and its data, times one
    call and reports its time and memory."""
    X = np.arange(1_000_000.0)
    runner = ColdRunner("spawn")
    try:
        out = runner.run(lambda: float(X.sum()), side="ref", timeout=120)
    finally:
        runner.close()
    assert out["ok"], out
    assert 0 < out["s"] < 60
    # the 8 MB array was loaded before the call
    assert out["peak_rss_mb"] >= out["rss_before_mb"] > 8


class _CollectionsAtLoad:
    """Unpickles as the garbage collector's statistics at that moment
    (``gc.get_stats()``): its count of full collections tells whether it
    was loaded before or after the one the cold child makes between its wait
    for idle threads and the case's second load."""

    def __reduce__(self):
        return (gc.get_stats, ())


def _full_collections(stats):
    return stats[2]["collections"]


@pytest.mark.parametrize("mode", ["spawn", "fork"])
def test_a_cold_child_waits_for_its_threads_then_loads_the_case_again(mode):
    """The case is loaded once for its imports, then again, after waiting (20
    ms at least) for the threads those started and collecting, for the call:
    the closure called holds data loaded after that collection. (Timed as
    'loaded less than 20 ms before the call' until session 22: a loaded CI
    machine once took 26 ms between the two.)"""
    at_load = _CollectionsAtLoad()

    def call():
        now, then = _full_collections(gc.get_stats()), _full_collections(at_load)
        assert now == then, f"loaded before {now - then} full collection(s)"

    runner = ColdRunner(mode)
    try:
        out = runner.run(call, side="ref", timeout=120)
    finally:
        runner.close()
    assert out["ok"], out
    assert 0.02 <= out["settle_s"] < 2.0


def test_a_spawned_cold_process_reports_its_own_peak_memory():
    """``ru_maxrss`` survives ``exec``: a new interpreter started by a runner
    that had just touched 1 GB (its prefault) reported that as its own peak.
    The peak is now the child's address space's (VmHWM on Linux)."""
    import xpml.bench._cold as cold

    if not os.path.exists("/proc/self/status"):
        pytest.skip("VmHWM is Linux's")
    big = np.ones(2**25)  # 256 MB resident in this (the runner's) process
    runner = ColdRunner("spawn")
    try:
        out = runner.run(lambda: None, side="ref", timeout=120)
    finally:
        runner.close()
        del big
    assert out["ok"], out
    assert out["peak_rss_mb"] < 200, out  # an interpreter with numpy: ~30-120 MB
    assert cold._peak_rss_mb() >= 256  # this process's own peak


def test_cold_call_stopped_at_the_case_timeout_is_a_bound():
    b = _bench(case_timeout_s=1.5, repeats=1)
    try:
        r = b.compare("t", "sleepy", 1, lambda: time.sleep(30), lambda: None)
    finally:
        b.close()
    assert r.xpml_cold_s is None and r.xpml_cold["timed_out_after_s"] == 1.5
    assert r.xpml_s is None and "not timed warm" in r.note  # too slow for warm
    assert r.ref_cold_s is not None and r.ref_s is not None
    assert r.cold_ratio is None and r.warm_ratio is None


def test_reference_skipped_when_its_estimate_is_over_the_limit():
    calls = []
    b = _bench(case_timeout_s=5, repeats=1, cold="off")
    r = b.compare(
        "t", "c", 1, lambda: None, lambda: calls.append(1), ref_estimate_s=100
    )
    assert calls == [] and r.ref_s is None and r.ref_cold_s is None
    assert "reference not run: estimated 100 s > 5 s allowed" in r.note
    assert r.xpml_s is not None


def test_a_case_that_cannot_be_pickled_is_still_timed_warm():
    lock = threading.Lock()  # cannot be pickled
    b = _bench(repeats=1)
    try:
        r = b.compare("t", "c", 1, lambda: lock.locked(), None)
    finally:
        b.close()
    assert r.xpml_cold_s is None and "cannot pickle" in r.xpml_cold["error"]
    assert "xpml cold: cannot pickle" in r.note
    assert r.xpml_s is not None


def test_slow_reference_timed_once_stands_for_warm():
    b = _bench(repeats=3, cold="off", ref_once_over_s=0.0)
    calls = []
    r = b.compare("t", "c", 1, lambda: None, lambda: calls.append(1), ref_once=True)
    # without cold calls a once-timed reference is one call here, no warm-up
    assert calls == [1] and r.ref_repeats == 1 and r.ref_s is not None
    b = _bench(repeats=3, ref_once_over_s=0.0)
    try:
        r = b.compare("t", "c", 1, lambda: None, lambda: time.sleep(0.01))
    finally:
        b.close()
    assert r.ref_s is None and r.ref_cold_s >= 0.01 and r.ref_once
    assert r.warm_ratio == pytest.approx(r.xpml_s / r.ref_cold_s)
    assert r.as_dict()["ref_once"] is True


def test_bench_budget_stops_a_suite_without_failing(tmp_path, capsys):
    out = str(tmp_path)
    assert main(["bench", "gram", "--quick", "--budget", "0", "--out", out]) == 0
    data = json.loads((tmp_path / "bench-numpy-quick.json").read_text())
    assert data["results"] == []
    assert data["stopped"] == ["gram: stopped, time budget of 0 s spent"]
    assert "gram stopped: time budget" in capsys.readouterr().out


def test_bench_reuses_reference_times(tmp_path, capsys):
    first = tmp_path / "first"
    args = ["bench", "gram", "--quick", "--repeats", "1", "--cold", "off"]
    assert main(args + ["--out", str(first), "--tag", "a"]) == 0
    ref = first / "bench-a.json"
    assert main(args + ["--out", str(tmp_path), "--reference-from", str(ref)]) == 0
    a = json.loads(ref.read_text())["results"]
    b = json.loads((tmp_path / "bench-numpy-quick.json").read_text())["results"]
    assert [r["ref_s"] for r in a] == [r["ref_s"] for r in b]
    assert all(r["reference_from"] == "bench-a.json" for r in b)
    assert all(r["xpml_cold_s"] is None and r["xpml_s"] > 0 for r in b)
    assert "(bench-a.json)" in (tmp_path / "bench-numpy-quick.md").read_text()


def test_bench_large_at_tiny_sizes_reports_peak_memory(tmp_path, capsys):
    """--large: every case timed once per side in a fresh process, with its peak
    resident memory (here at tiny sizes; the real sizes are run by hand)."""
    out = str(tmp_path)
    assert main(["bench", "--large", "--tiny", "--cold", "fork", "--out", out]) == 0
    data = json.loads((tmp_path / "bench-numpy-large-tiny.json").read_text())
    rows = data["results"]
    assert [r["case"] for r in rows] == [
        "SVC.fit rbf",
        "SVC.fit rbf cache float32",
        "KernelRidge fit rbf d=20",
        "kNN predict brute k=5 d=20",
        "KMeans fit k=64 d=20",
    ]
    for r in rows:
        assert r["suite"] == "large" and r["xpml_s"] is None and r["ref_s"] is None
        assert r["xpml_cold_s"] > 0 and r["ref_cold_s"] > 0 and r["cold_ratio"] > 0
        for side in ("xpml_cold", "ref_cold"):
            assert r[side]["peak_rss_mb"] >= r[side]["rss_before_mb"] > 0
    md = (tmp_path / "bench-numpy-large-tiny.md").read_text()
    assert "| large | KMeans fit k=64 d=20 | 2000 |" in md


def test_large_is_not_in_the_default_run():
    from xpml.bench import discover

    suites = discover()
    assert {"large", "gpu"} <= set(suites)
    assert not getattr(suites["large"], "DEFAULT", True)
    assert not getattr(suites["gpu"], "DEFAULT", True)


def test_a_long_cpu_call_needs_no_warm_up_after_its_cold_call(monkeypatch):
    import xpml.bench

    monkeypatch.setattr(xpml.bench, "WARMUP_COVERED_S", 0.0)
    calls = []  # the cold call's own process appends to its copy
    b = _bench(repeats=3)
    try:
        r = b.compare("t", "c", 1, lambda: calls.append(time.sleep(0.01)), None)
    finally:
        b.close()
    assert r.xpml_cold_s >= 0.01 and r.repeats == 3 and len(calls) == 3


def test_a_side_whose_cold_process_dies_is_not_run_in_the_bench_process():
    """A reference that crashes its process (as OpenBLAS's dpotrf does at large
    n) is reported, and not re-run in the bench's own process, which the crash
    would take down."""
    import os
    import signal

    b = _bench(repeats=1)
    try:
        r = b.compare(
            "t", "c", 1, lambda: None, lambda: os.kill(os.getpid(), signal.SIGKILL)
        )
    finally:
        b.close()
    assert r.xpml_s is not None and r.ref_s is None and r.ref_cold_s is None
    assert r.ref_cold.get("died") and "its cold process died" in r.note


def test_sides_alternate_in_cold_processes_and_warm_calls(tmp_path, monkeypatch):
    """Each side's cold call is timed in ``cold_runs`` fresh processes and its
    warm calls here, the two sides taking turns in both phases (a machine whose
    speed drifts then slows both alike); the cold time is the median."""
    import xpml.bench

    # both sides settle, however long a busy machine makes the 0.1 s sleep
    monkeypatch.setattr(xpml.bench, "SETTLE_UNDER_S", 10.0)
    log = tmp_path / "calls"

    def side(name, seconds):
        def call():
            with open(log, "a") as fh:  # the cold processes append here too
                fh.write(name)
            time.sleep(seconds)

        return call

    b = _bench(repeats=2, cold_runs=3)
    try:
        r = b.compare("t", "c", 1, side("x", 0.1), side("r", 0.001))
    finally:
        b.close()
    # cold: x r x r x r, each process calling twice (short calls); warm-up:
    # x r; timed: x r x r, each after an untimed call (SETTLE_UNDER_S)
    assert log.read_text() == "xxrr" * 3 + "xr" + "xxrr" * 2
    runs = r.xpml_cold["runs_s"]
    assert len(runs) == 3 and r.xpml_cold_s == sorted(runs)[1] >= 0.1
    assert len(r.ref_cold["runs_s"]) == 3 and r.ref_cold_s < 0.1
    assert r.repeats == r.ref_repeats == 2
    assert b.settings()["cold_runs"] == 3


def test_a_long_cold_call_is_timed_in_one_process(monkeypatch, tmp_path):
    import xpml.bench

    monkeypatch.setattr(xpml.bench, "COLD_REPEAT_UNDER_S", 0.0)
    log = tmp_path / "calls"
    b = _bench(repeats=1, cold_runs=3, warmup=0)
    try:
        r = b.compare("t", "c", 1, lambda: log.open("a").write("x"), None)
    finally:
        b.close()
    # one cold process (its first call and, being short, a second), one warm call
    assert log.read_text() == "xxx"
    assert r.xpml_cold_s is not None and "runs_s" not in r.xpml_cold


def test_cold_median_keeps_the_first_runs_details_and_a_later_error():
    from xpml.bench import _median_cold

    runs = [
        {"ok": True, "s": 0.3, "peak_rss_mb": 10.0, "rss_before_mb": 5.0},
        {"ok": False, "error": "boom"},
        {"ok": True, "s": 0.1, "peak_rss_mb": 12.0, "rss_before_mb": 5.0},
    ]
    out = _median_cold(runs)
    assert out["s"] == pytest.approx(0.2) and out["runs_s"] == [0.3, None, 0.1]
    assert out["peak_rss_mb"] == 12.0 and out["repeat_error"] == "boom"
    failed_first = _median_cold(runs[1:])
    assert failed_first == {"ok": False, "error": "boom"}
    assert _median_cold([]) == {}


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2"])
def test_cold_runs_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="cold_runs must be an integer >= 1"):
        Bench(cold_runs=bad)


def test_cli_refuses_a_cold_runs_below_one(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "gram", "--cold-runs", "0"])
    assert "--cold-runs: expected an integer >= 1" in capsys.readouterr().err


def _cold_compared(xpml_fn, ref_fn):
    """One case of a bench timing each side in two fresh processes."""
    b = _bench(repeats=1, cold_runs=2)
    try:
        return b.compare("t", "c", 1, xpml_fn, ref_fn)
    finally:
        b.close()


def test_a_short_cold_call_is_followed_by_a_second_in_its_process():
    """The fresh process times a second call after a short first one, and
    the table shows the first over the second (issue 16's comparison: later
    calls in the same process); a closure's state starts afresh in each."""
    calls = []

    def first_slow():
        time.sleep(0.5 if not calls else 0.01)
        calls.append(1)

    def ref_alike():
        time.sleep(0.05)

    r = _cold_compared(first_slow, ref_alike)
    assert r.xpml_cold_s >= 0.5 and 0.01 <= r.xpml_cold["second_s"] < 0.5
    assert r.first_over_second == pytest.approx(r.xpml_cold_s / r.xpml_cold["second_s"])
    assert r.first_over_second > 1.5  # 0.5 s against 0.01 s, on any machine
    # the reference's own first call over its second: both about 0.05 s
    assert r.ref_first_over_second == pytest.approx(
        r.ref_cold_s / r.ref_cold["second_s"]
    )
    assert r.ref_cold["second_s"] >= 0.05
    md = markdown_table([r], cold="fork", cold_runs=2)
    assert "| xpml 1st / 2nd | ref 1st / 2nd |" in md
    assert f"| {r.first_over_second:.2f} | {r.ref_first_over_second:.2f} |" in md


def test_the_json_says_where_each_cold_call_went():
    """Each fresh process reports, for its first call, the CPU time beside the
    wall time (a call that waits shows far less CPU), its page faults and the
    modules it imported: here a sleep and an import of a module no library
    preloads."""

    def waits_and_imports():
        import colorsys  # noqa: F401 - the import is what is measured
        import time as _time

        _time.sleep(0.3)

    r = _cold_compared(waits_and_imports, None)
    calls = r.xpml_cold["first_calls"]
    assert len(calls) == 2 and "first_call" not in r.xpml_cold
    for c in calls:
        assert c["wall_s"] >= 0.3 and c["cpu_s"] < 0.2  # slept, not computed
        assert "colorsys" in c["imported"] and c["n_imported"] >= 1
        assert c["minflt"] >= 0 and c["majflt"] >= 0
    assert json.loads(json.dumps(r.as_dict()))["xpml_cold"]["first_calls"] == calls


def test_cold_calls_report_their_garbage_collections():
    """A collection made inside the first call is counted by generation and
    timed in its ``first_call`` entry; a call that makes none shows none."""

    def collects():
        import gc

        gc.collect()

    def allocates_nothing():
        pass

    r = _cold_compared(collects, allocates_nothing)
    for c in r.xpml_cold["first_calls"]:
        assert c["gc_runs"][2] >= 1 and c["gc_s"] > 0
    for c in r.ref_cold["first_calls"]:
        assert c["gc_runs"] == [0, 0, 0] and c["gc_s"] == 0


def test_the_fork_server_freezes_its_objects_before_forking():
    """The children of the fork server start with the preloaded libraries'
    objects frozen (:func:`gc.freeze`), so a full collection in a timed call
    does not walk them and copy their pages; a spawned interpreter has no
    server, and nothing frozen."""

    def frozen():
        import gc

        if gc.get_freeze_count() == 0:
            raise AssertionError("nothing frozen")

    for mode, ok in (("fork", True), ("spawn", False)):
        runner = ColdRunner(mode, preload=("numpy",))
        try:
            out = runner.run(frozen, side="ref", timeout=120)
        finally:
            runner.close()
        assert out["ok"] is ok, out
        if not ok:
            assert "nothing frozen" in out["error"]


def test_memory_is_prefaulted_before_each_cold_call(monkeypatch):
    """Before each cold process the runner touches and frees the memory asked
    for (a VM with free page reporting would otherwise charge the fresh process
    for faulting it in from the host); 0 turns it off."""
    import xpml.bench._cold as cold

    touched = []
    monkeypatch.setattr(cold, "prefault", touched.append)
    b = _bench(repeats=1, cold_runs=2, cold_prefault_mb=64)
    try:
        r = b.compare("t", "c", 1, lambda: None, lambda: None)
    finally:
        b.close()
    assert touched == [64] * 4  # two cold runs of each side
    assert r.xpml_cold_s is not None and b.settings()["cold_prefault_mb"] == 64
    md = markdown_table([r], cold="fork", cold_runs=2, prefault_mb=64)
    assert "64 MB touched and freed untimed" in md
    assert "touched" not in markdown_table([r], cold="fork", cold_runs=2)


def _three_rounds_of_freed_blocks():
    for _ in range(3):  # 16 x 1 MB written and freed
        blocks = [np.ones(1 << 17) for _ in range(16)]
        del blocks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_cold_processes_keep_freed_memory_when_asked():
    """--keep-freed-memory reaches the cold call's process: three rounds of
    16 MB allocated and freed fault their pages in once, not three times.
    The bench process itself would be changed for good, so the Bench (which
    sets it there too) is not built here."""
    faults = {}
    for keep in (None, 64):
        runner = ColdRunner("spawn", keep_freed_mb=keep)
        try:
            out = runner.run(_three_rounds_of_freed_blocks, side="ref", timeout=120)
        finally:
            runner.close()
        assert out["ok"], out
        faults[keep] = out["first_call"]["minflt"]
    assert faults[None] > 10000 and faults[64] < 6000, faults
    md = markdown_table([], keep_freed_mb=64)
    assert "keeps up to 64 MB of freed memory" in md
    assert "freed memory" not in markdown_table([])


def test_the_bench_flag_is_checked():
    with pytest.raises(SystemExit):
        main(["bench", "--keep-freed-memory", "0"])


def test_prefault_writes_the_memory_it_is_given(monkeypatch):
    import numpy as np

    import xpml.bench._cold as cold

    sizes = []
    real_ones = np.ones
    monkeypatch.setattr(np, "ones", lambda n: sizes.append(n) or real_ones(n))
    cold.prefault(0)
    cold.prefault(3)
    assert sizes == [3 * 2**20 // 8]


def test_the_prefault_covers_what_the_last_cold_call_added(monkeypatch):
    import xpml.bench._cold as cold

    touched = []
    monkeypatch.setattr(cold, "prefault", touched.append)
    runner = ColdRunner("fork", prefault_mb=16)
    try:
        for _ in range(2):  # the call fills 128 MB
            out = runner.run(lambda: np.ones(2**24).sum(), side="ref", timeout=120)
            assert out["ok"], out
    finally:
        runner.close()
    added = out["peak_rss_mb"] - out["rss_before_mb"]
    assert added > 100 and touched[0] == 16 and touched[1] >= int(1.25 * added) - 1


def test_results_record_the_blas_kernels_and_the_variables_forcing_them(monkeypatch):
    import numpy  # noqa: F401 - its OpenBLAS is loaded

    from xpml.bench import machine_info

    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)
    info = machine_info()
    assert info["blas_env"] == "OPENBLAS_CORETYPE=Haswell"
    assert "openblas" in info["blas"]  # NumPy's wheel ships OpenBLAS
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    assert machine_info()["blas_env"] is None


def test_short_calls_settle_with_an_untimed_call_at_each_turn():
    """With two sides, a side whose warm-up was short makes an untimed call
    before each timed one (the other side's threads may still spin); a side
    with long calls, or a lone side (timeit), does not."""
    from xpml import bench as B

    calls = []

    def side(name, seconds):
        return B._Clock(
            lambda: calls.append(name) or time.sleep(seconds),
            contextlib.nullcontext,
            None,
        )

    plan = {"warmup": 1, "repeats": 2, "adaptive": False}
    x, r = side("x", 0.0), side("r", B.SETTLE_UNDER_S + 0.01)
    B.time_alternating({"x": (x, plan), "r": (r, plan)})
    assert calls == ["x", "r"] + ["x", "x", "r"] * 2
    assert len(x.times) == len(r.times) == 2
    calls.clear()
    B.timeit(lambda: calls.append("t"), warmup=1, repeats=3)
    assert calls == ["t"] * 4


def test_no_call_starts_that_its_known_time_would_end_past_the_limit(monkeypatch):
    """The alternating warm loop keeps within the time allowed: a call (warm-up
    or timed) whose known time would end past it is not started, on any side
    (a side was once given its warm-up and first timed call regardless). No
    settling calls here (their order has a test of its own): which side's
    would fit depends on how long each sleep overshot."""
    from xpml import bench
    from xpml.bench import _Clock, time_alternating

    monkeypatch.setattr(bench, "SETTLE_UNDER_S", 0.0)

    calls = []

    def side(name):
        return _Clock(
            lambda: calls.append(name) or time.sleep(0.05), contextlib.nullcontext, None
        )

    plan = {"warmup": 1, "repeats": 5, "adaptive": False, "estimate": 0.05}
    x, r = side("x"), side("r")
    time_alternating({"x": (x, plan), "r": (r, plan)}, limit_s=0.17)
    # warm-ups end near 0.10 s (later on a busy machine, never sooner): x's
    # first timed call may fit, r's would end at 0.20 s at the soonest
    assert calls[:2] == ["x", "r"] and "r" not in calls[2:] and len(calls) <= 3
    # without a limit, every planned call is made, the sides alternating
    calls.clear()
    y, z = side("x"), side("r")
    time_alternating({"x": (y, plan), "r": (z, plan)})
    assert calls == ["x", "r"] + ["x", "r"] * 5 and len(y.times) == len(z.times) == 5
