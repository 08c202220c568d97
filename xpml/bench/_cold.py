"""The cold call: the first call of one side of a case, in a fresh process.

:meth:`xpml.bench.Bench.compare` hands the case's closure (``xpml_fn`` or
``ref_fn``, with the data and models it holds) to :class:`ColdRunner`, which
pickles it with cloudpickle into a file and starts a fresh process on it. That
process loads the file (imports and data: not timed), takes the parent's
thread limits and, for the xpml side, the bench backend, waits for its other
threads to be idle, loads the file again (the data the call gets, just
loaded, as a script's is: see :func:`_child`), then times one call
(with a device synchronisation on a GPU) and writes a JSON result: the time,
its peak resident memory (``VmHWM``; ``ru_maxrss`` off Linux), its resident
memory just before the call, and on a GPU the device memory it used. A first
call shorter than :data:`SECOND_CALL_UNDER_S` is followed by a second one in
the same process, timed too (``second_s``): "later calls of the same model in
the same process", against which issue 16 measures a first call, without the
benchmark process's history (its allocator grown by earlier cases, other
libraries' threads).

Two ways to start the process:

``"spawn"`` (the default)
    A new interpreter per call, as a user's script is: it imports what the
    case's closure needs while loading it (not timed), so its pages, its
    BLAS threads and its garbage collector are in the state a script's are
    after its imports; its resident memory holds only what the case needs.
    Starting one costs about a second on the project's VM.
``"fork"``
    Forked from a server process (started once per run, a new interpreter
    itself) that has only imported the libraries: NumPy, SciPy, scikit-learn,
    PyTorch where a suite needs it (never touching CUDA) and xpml, and has
    put their objects out of the garbage collector's reach
    (:func:`_freeze_heap`). Starting one costs a fraction of a second, but the
    child shares the server's pages until it writes to them, and its first
    call pays for those copies: the first BLAS product of a fork child took
    980-1,430 page faults and 21-31 ms where a spawned interpreter's took 164
    and 21 ms (``X.T @ X``, 50,000 x 100, session 14). Quick runs and tests
    use it; the preloaded libraries count in both sides' resident memory.

The allocator. With ``keep_freed_mb`` the child calls
:func:`xpml.utils.memory.keep_freed_memory` before the call (untimed), as a
script that wants its later fits at warm speed would at its top: glibc then
keeps freed memory for reuse instead of returning it after every call. The
default leaves glibc as a user's process has it.

Memory the machine has handed back. On a virtual machine with free page
reporting (virtio-balloon, as on the project's Firecracker VMs) the guest gives
memory that stayed free for about two seconds back to its host, and the next
first touch of it costs a fault on the host too: about 2 ms per MB here, so a
fresh process that fills a 200 MB Gram matrix waited 0.4-0.6 s more after an
idle pause than right after another process had used that memory (44 ms), on
any library. That is the machine, not the code under test; before each cold
call the runner touches and frees ``prefault_mb`` MB in this process (untimed;
more when the last cold call added more than that to its memory, so that a
case's next runs are covered), so the fresh process gets memory the host
backs, as on a machine without reporting. ``prefault_mb=0`` measures the
machine as it is.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import tempfile
import time

__all__ = ["ColdRunner", "sync_for", "prefault", "MODES"]

MODES = ("fork", "spawn", "off")

#: a cold process whose first call took less than this times a second call
#: too (seconds)
SECOND_CALL_UNDER_S = 2.0

#: imported once by the fork server (missing ones are skipped), with the libraries
#: the chosen suites name (``REQUIRES``, ``PRELOAD``, e.g. torch); no module may
#: touch CUDA at import time, since a forked child cannot inherit it
PRELOAD = (
    "numpy",
    "scipy.linalg",
    "scipy.spatial",
    "sklearn.svm",
    "sklearn.neighbors",
    "sklearn.ensemble",
    "sklearn.tree",
    "sklearn.cluster",
    "sklearn.decomposition",
    "sklearn.kernel_ridge",
    "sklearn.linear_model",
    "sklearn.metrics.pairwise",
    "threadpoolctl",
    "xpml",
    "xpml.bench._cold",
)


def _cloudpickle():
    try:
        import cloudpickle
    except ImportError:  # older joblib vendored it
        from joblib.externals import cloudpickle  # type: ignore[no-redef]
    return cloudpickle


def sync_for(backend, device):
    """A callable that waits for the device of ``backend`` (None on the CPU)."""
    if backend == "cupy":

        def sync():
            import cupy

            cupy.cuda.get_current_stream().synchronize()

        return sync
    if backend == "torch" and device is not None and "cuda" in str(device):

        def sync():
            import torch

            torch.cuda.synchronize()

        return sync
    return None


def _thread_state():
    """The thread limits in force here, for a child to apply."""
    pools = {}
    with contextlib.suppress(Exception):
        from threadpoolctl import threadpool_info

        # by file, and by kind for the libraries loaded only in the child
        # (e.g. SciPy's own OpenBLAS): the fewest threads of that kind here
        for d in threadpool_info():
            pools[d["filepath"]] = d["num_threads"]
            pools[d["prefix"]] = min(pools.get(d["prefix"], 1 << 30), d["num_threads"])
    torch_threads = None
    if "torch" in sys.modules:
        torch_threads = sys.modules["torch"].get_num_threads()
    return pools, torch_threads


def _rss_mb():
    """Resident memory now (Linux; None elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_rss_mb():
    """Peak resident memory of this process's own address space: Linux's
    ``VmHWM``, because ``ru_maxrss`` carries over ``exec`` -- a spawned
    child reported its parent's peak (the runner's 1 GB prefault: SVC at
    n = 50,000 showed +1,134 MB where it holds 200). Elsewhere ``ru_maxrss``."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024


def _gpu_peak_mb():
    """Device memory the call used, where a GPU library is active."""
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        with contextlib.suppress(Exception):
            if torch.cuda.is_initialized():
                return torch.cuda.max_memory_allocated() / 2**20
    if "cupy" in sys.modules:
        with contextlib.suppress(Exception):
            return sys.modules["cupy"].get_default_memory_pool().total_bytes() / 2**20
    return None


def _settle_threads(limit_s=1.0, quiet_s=0.02):
    """Wait (at most ``limit_s``) until this process's other threads are idle.

    After a fork, OpenBLAS starts its worker threads again when the thread
    limits are set (its fork handler drops them), and each spins on its queue
    for a while (``OPENBLAS_THREAD_TIMEOUT``, about 0.1 s) before it sleeps:
    60-90 ms of CPU on the machine's cores, inside the timed call if not
    waited out. A new interpreter starts them at import, and the libraries
    first imported while the case loads start theirs then, just before the
    call (see :func:`_child`). Returns the seconds waited."""
    start = time.perf_counter()
    others = time.process_time() - time.thread_time()
    while time.perf_counter() < start + limit_s:
        time.sleep(quiet_s)
        now = time.process_time() - time.thread_time()
        if now - others < 0.05 * quiet_s:
            break
        others = now
    return time.perf_counter() - start


def _timed(fn, sync):
    """Seconds one call of ``fn`` takes (``sync``: a device synchronisation)."""
    t0 = time.perf_counter()
    fn()
    if sync:
        sync()
    return time.perf_counter() - t0


def _load(payload_path):
    with open(payload_path, "rb") as fh:
        return pickle.load(fh)


def _child(payload_path, result_path):
    """Load the case, time its first call, write the result (runs in the child).

    The case is loaded twice: first for what it imports (libraries whose
    threads may then be busy for a while: a fork child's OpenBLAS workers,
    restarted by the thread limits; in a spawned interpreter, those of the
    libraries the case imports first: KernelRidge's children waited 61-81
    ms), then, once the process's other threads are idle
    (:func:`_settle_threads`, 20 ms at least), again for the data and models
    the call gets, as a script calls right after loading its data. A pause
    between loading and calling slows a call of a few milliseconds on the
    project's VM (tree predict, 20,000 x 20: 1.6-1.8 ms right after a 5-row
    call, 2.2-2.8 after 20 ms asleep; bench/README.md, session 20); spawned
    interpreters that called without the wait took 82-98 ms for
    KernelRidge's fit at n = 2,000, 57-64 (one 92) with it."""
    out = {"ok": False, "error": "did not finish"}
    try:
        payload = _load(payload_path)
        if payload.get("keep_freed_mb"):
            from xpml.utils.memory import keep_freed_memory

            keep_freed_memory(payload["keep_freed_mb"])
        pools, torch_threads = payload["threads"]
        limits = contextlib.nullcontext()
        if pools:
            with contextlib.suppress(Exception):
                from threadpoolctl import threadpool_limits

                limits = threadpool_limits(limits=pools)
        if torch_threads and "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(torch_threads)
        ctx = contextlib.nullcontext()
        sync = None
        if payload["side"] == "xpml":
            import xpml

            ctx = xpml.backend(
                payload["backend"], device=payload["device"], output="backend"
            )
            sync = sync_for(payload["backend"], payload["device"])
        del payload  # its imports stay; its data goes (collected below)
        with limits, ctx:
            settle_s = _settle_threads()
            gc.collect()
            fn = _load(payload_path)["fn"]
            rss_before = _rss_mb()
            before = _process_state()
            with _GcClock() as gc_clock:
                seconds = _timed(fn, sync)
            out = {
                "ok": True,
                "s": seconds,
                "peak_rss_mb": _peak_rss_mb(),
                "rss_before_mb": rss_before,
                "gpu_peak_mb": _gpu_peak_mb(),
                "settle_s": settle_s,
                "first_call": {**_first_call(before, seconds), **gc_clock.seen},
            }
            if seconds < SECOND_CALL_UNDER_S:
                out["second_s"] = _timed(fn, sync)
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:300]}
    with open(result_path, "w") as fh:
        json.dump(out, fh)


class _GcClock:
    """The garbage collections made inside a ``with`` block: how many of each
    generation (``gc_runs``, youngest first) and the seconds they took
    (``gc_s``), in :attr:`seen` after the block."""

    def __enter__(self):
        import gc

        self._gc, self._start = gc, None
        self.seen = {"gc_runs": [0, 0, 0], "gc_s": 0.0}
        gc.callbacks.append(self._tick)
        return self

    def _tick(self, phase, info):
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            self.seen["gc_s"] += time.perf_counter() - self._start
            self.seen["gc_runs"][info["generation"]] += 1

    def __exit__(self, *exc):
        self._gc.callbacks.remove(self._tick)


def _process_state():
    """What :func:`_first_call` compares: the modules loaded, and the
    process's CPU time and page faults so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return set(sys.modules), ru.ru_utime + ru.ru_stime, ru.ru_minflt, ru.ru_majflt


def _first_call(before, seconds):
    """Where a cold call's time went, for a reader of the JSON: the CPU time
    the process spent in it (all threads; far below the wall time: the call
    waited, e.g. for the VM's host), the page faults it took (major: read
    from disk), and the modules it imported (the first 20 names); the
    child adds the garbage collections made in the call (:class:`_GcClock`)."""
    modules, cpu, minflt, majflt = before
    now = _process_state()
    imported = sorted(now[0] - modules)
    return {
        "wall_s": seconds,
        "cpu_s": now[1] - cpu,
        "minflt": now[2] - minflt,
        "majflt": now[3] - majflt,
        "n_imported": len(imported),
        "imported": imported[:20],
    }


class ColdRunner:
    """Runs one call of a closure in a fresh process (see the module docstring)."""

    def __init__(self, mode="spawn", preload=(), prefault_mb=0, keep_freed_mb=None):
        if mode not in ("fork", "spawn"):
            raise ValueError(f"cold mode must be 'fork' or 'spawn', got {mode!r}")
        if mode == "fork" and not hasattr(os, "fork"):
            mode = "spawn"  # Windows
        self.mode = mode
        self.prefault_mb = prefault_mb
        self.keep_freed_mb = keep_freed_mb  # the child's allocator setting
        self._last_added_mb = 0.0  # what the last cold call added to its memory
        self.preload = list(PRELOAD) + [m for m in preload if m not in PRELOAD]
        self._dir = tempfile.mkdtemp(prefix="xpml-bench-cold-")
        atexit.register(self.close)
        self._server = None
        self._count = 0

    def start(self):
        """Start the fork server now, so that its imports overlap the caller's
        work (the first cold call would start it otherwise)."""
        if self.mode != "fork" or self._server is not None:
            return
        cmd = [sys.executable, "-c", _SERVER, *self.preload]
        self._server = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env()
        )
        self._buf = b""

    def close(self):
        import shutil

        self.close_server()
        shutil.rmtree(self._dir, ignore_errors=True)

    def close_server(self):
        if self._server is not None:
            with contextlib.suppress(Exception):
                self._server.stdin.close()  # the server exits at end of input
                self._server.wait(timeout=10)
            with contextlib.suppress(Exception):
                self._server.kill()
            self._server = None

    def run(self, fn, *, side, backend="numpy", device=None, timeout=None):
        """Time the first call of ``fn`` in a fresh process.

        Returns a dict: ``ok``, ``s`` (seconds), ``peak_rss_mb``,
        ``rss_before_mb``, ``gpu_peak_mb``; or ``ok=False`` with ``error``, and
        ``timed_out_after_s`` when the call was stopped at ``timeout``.
        """
        self._count += 1
        payload = os.path.join(self._dir, f"case{self._count}.pkl")
        result = os.path.join(self._dir, f"case{self._count}.json")
        try:
            data = {
                "fn": fn,
                "side": side,
                "backend": backend,
                "device": None if device is None else str(device),
                "threads": _thread_state(),
                "keep_freed_mb": self.keep_freed_mb,
            }
            with open(payload, "wb") as fh:
                _cloudpickle().dump(data, fh, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            with contextlib.suppress(OSError):
                os.remove(payload)
            return {"ok": False, "error": f"cannot pickle the case: {exc}"[:300]}
        try:
            if self.prefault_mb > 0:
                prefault(max(self.prefault_mb, int(1.25 * self._last_added_mb)))
            try:
                stopped = self._start(payload, result, timeout)
            except (OSError, RuntimeError, ValueError) as exc:
                self.close_server()  # a later call starts a new one
                return {"ok": False, "error": f"cold-call process failed: {exc}"}
            if stopped:
                return {
                    "ok": False,
                    "error": f"stopped after {timeout:.0f} s",
                    "timed_out_after_s": timeout,
                }
            try:
                with open(result) as fh:
                    out = json.load(fh)
            except (OSError, ValueError):
                return {
                    "ok": False,
                    "error": "the process died before reporting",
                    "died": True,
                }
            with contextlib.suppress(TypeError, KeyError):
                self._last_added_mb = out["peak_rss_mb"] - out["rss_before_mb"]
            return out
        finally:
            for p in (payload, result):
                with contextlib.suppress(OSError):
                    os.remove(p)

    def _start(self, payload, result, timeout):
        """Run the child; True when it was stopped at ``timeout``."""
        if self.mode == "spawn":
            cmd = [sys.executable, "-c", _SPAWNED, payload, result]
            try:
                subprocess.run(cmd, env=_child_env(), timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                return True
            return False
        self.start()
        server = self._server
        server.stdin.write((json.dumps([payload, result]) + "\n").encode())
        server.stdin.flush()
        pid = json.loads(self._readline(None))["pid"]
        line = self._readline(timeout)
        if line is None:  # still running at the limit
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            self._readline(None)  # the server reaps it
            return True
        return False

    def _readline(self, timeout):
        """One line from the server (None at ``timeout``)."""
        import select

        fd = self._server.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0)
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError("the cold-call server exited")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()


_SERVER = "import sys; from xpml.bench._cold import _serve; _serve(sys.argv[1:])"
_SPAWNED = "import sys; from xpml.bench._cold import _child; _child(*sys.argv[1:])"


def prefault(mb):
    """Touch ``mb`` MB of fresh memory and free it (see the module docstring:
    the next process then gets memory this machine's host still backs); at
    most half the memory available now, and nothing when it cannot be had."""
    mb = min(int(mb), _available_mb() // 2)
    if mb <= 0:
        return
    import numpy as np

    with contextlib.suppress(MemoryError):
        block = np.ones(mb << 17)  # float64: 2**17 per MB, every page written
        del block


def _available_mb():
    """Memory available now, in MB (Linux's MemAvailable; elsewhere 64 GiB)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 16


def _child_env():
    """The environment of a fresh process: this one's, with xpml importable."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(
        [root] + [p for p in [env.get("PYTHONPATH")] if p]
    )
    return env


def _freeze_heap():
    """Collect once, then put every object the server holds out of the
    collector's reach (:func:`gc.freeze`, Python's advice for a process that
    forks without exec). Otherwise a child's first full collection walks the
    preloaded libraries' objects and writes to each one's header: a copy of
    every page they sit on, all inside the timed call. With PyTorch preloaded
    that was 142 ms and 15,000 page faults in the first call of the exact
    k-d tree's predict (31 ms without), in every process of the case; whether
    a child reached that collection depended on the server's allocation
    count, not on the case. Frozen, both sides' calls are timed without a
    full collection over the libraries' objects; in a new interpreter one
    falls into a call only when the imports left the collector near its
    threshold (and walks those objects without copying pages). The
    collections a first call still makes are in its ``first_call``."""
    import gc

    gc.collect()
    gc.freeze()


def _serve(preload):
    """The fork server: import ``preload``, then fork one child per request.

    Requests come on stdin as JSON lines ``[payload, result]``; for each, the
    child's pid and then its end are written as JSON lines on the original
    stdout. Everything else printed here or in a child goes to stderr.
    """
    import importlib

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # prints from imports and children: to stderr
    for name in preload:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    _freeze_heap()
    for line in sys.stdin:
        payload, result = json.loads(line)
        pid = os.fork()
        if pid == 0:  # the child: run the case and leave at once
            code = 0
            try:
                os.close(0)
                _child(payload, result)
            except BaseException:  # noqa: BLE001 - the parent sees no result file
                code = 1
            finally:
                os._exit(code)
        proto.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        proto.write(json.dumps({"end": pid, "status": status}) + "\n")
