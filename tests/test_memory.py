"""xpml.utils.memory: glibc's malloc thresholds (issue 16), fixed by
keep_freed_memory or raised (with the heap's next 48 MB on huge pages) by
prepare_heap on xpml's first public call.

The allocator's state is process-wide and permanent, so every test that
lets a change take effect runs in a child process; the ones here only call
them with stand-ins for the C library's functions.
"""

import functools
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from xpml.utils import memory

try:
    import resource
except ImportError:  # not on Windows
    resource = None

# faults taken by the third round of allocating and freeing 16 blocks of 1 MB
_ROUNDS = """
import resource, sys
import numpy as np
if sys.argv[1] == "keep":
    from xpml.utils.memory import keep_freed_memory
    print(keep_freed_memory(64), file=sys.stderr)

def faults_of_one_round():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [np.ones(1 << 17) for _ in range(16)]  # 16 x 1 MB, every page written
    del blocks
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

print([faults_of_one_round() for _ in range(3)][-1])
"""


def _is_glibc():
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError, AttributeError):
        return False


def _run_script(script, mode, env=None):
    """The standard output of ``script`` run with argument ``mode`` in a new
    interpreter (``env``: variables added to this process's environment)."""
    out = subprocess.run(
        [sys.executable, "-c", script, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    return out.stdout


def _third_round_faults(mode):
    return int(_run_script(_ROUNDS, mode).strip())


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
def test_kept_memory_is_reused_without_page_faults():
    """By default glibc returns the 16 MB freed at the end of each round and
    the next round faults every page in again (4,096 pages of 4 KB); with the
    freed memory kept, the third round touches no fresh page."""
    assert _third_round_faults("default") > 3000
    assert _third_round_faults("keep") < 300


class _Mallopt:
    def __init__(self, answer=1):
        self.calls, self.answer = [], answer

    def __call__(self, param, value):
        self.calls.append((param, value))
        return self.answer


@pytest.mark.parametrize(
    ("mb", "mmap_mb"),
    [(64, 32), (10, 5), (2047, 32), (1, 0.5), (1.5, 0.75)],
)
def test_thresholds_set(monkeypatch, mb, mmap_mb):
    """The mmap threshold first (which fixes both), half the trim threshold,
    at most glibc's 32 MB."""
    fake = _Mallopt()
    monkeypatch.setattr(memory, "_glibc_mallopt", lambda: fake)
    got = memory.keep_freed_memory(mb)
    trim, mmap = int(mb * 2**20), int(mmap_mb * 2**20)
    assert got == {"trim_threshold": trim, "mmap_threshold": mmap}
    assert fake.calls == [(-3, mmap), (-1, trim)]
    assert memory._MMAP_THRESHOLD_MAX == 2**22 * memory.ctypes.sizeof(
        memory.ctypes.c_long
    )


def test_a_refused_setting_is_an_error(monkeypatch):
    monkeypatch.setattr(memory, "_glibc_mallopt", lambda: _Mallopt(answer=0))
    with pytest.raises(OSError, match="mallopt refused"):
        memory.keep_freed_memory(64)


def test_another_c_library_is_left_alone(monkeypatch):
    monkeypatch.setattr(memory, "_glibc_mallopt", lambda: None)
    assert memory.keep_freed_memory(64) is None
    monkeypatch.undo()
    # a fresh lookup (the module's is made once), on another platform
    lookup = functools.cache(memory._glibc_functions.__wrapped__)
    monkeypatch.setattr(memory, "_glibc_functions", lookup)
    monkeypatch.setattr(memory.sys, "platform", "darwin")
    assert memory._glibc_mallopt() is None


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
def test_glibc_mallopt_is_found():
    assert memory._glibc_mallopt() is not None


@pytest.mark.parametrize("mb", [0, -1, 0.5, 2048, math.nan, math.inf])
def test_bad_sizes(monkeypatch, mb):
    fake = _Mallopt()
    monkeypatch.setattr(memory, "_glibc_mallopt", lambda: fake)
    with pytest.raises(ValueError, match=r"mb must be .* in \[1, 2047\]"):
        memory.keep_freed_memory(mb)
    assert fake.calls == []


@pytest.mark.parametrize("mb", ["64", None, True])
def test_bad_types(mb):
    with pytest.raises(TypeError, match="mb must be a number of megabytes"):
        memory.keep_freed_memory(mb)


# ------------------------------------------------ prepare_heap (first call)

# the third round's faults, and the first round's, after the step the mode names
_PREPARED_ROUNDS = """
import resource, sys
import numpy as np
mode = sys.argv[1]
if mode == "prepare":
    from xpml.utils.memory import prepare_heap
    print(prepare_heap(), file=sys.stderr)
elif mode == "public call":  # any public call prepares the heap
    from xpml.linear_model import Ridge
    Ridge().fit(np.arange(6.0).reshape(3, 2), np.arange(3.0))
elif mode == "layer call":  # a layer's call too
    from xpml.nn import ReLU
    ReLU().forward(np.ones((2, 2)))

def faults_of_one_round():
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [np.ones(1 << 17) for _ in range(16)]  # 16 x 1 MB, every page written
    del blocks
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

rounds = [faults_of_one_round() for _ in range(3)]
print(rounds[0], rounds[-1])
"""


def _rounds_after(mode, env=None):
    first, third = _run_script(_PREPARED_ROUNDS, mode, env).split()
    return int(first), int(third)


def _huge_page_mode():
    """The kernel's transparent huge page mode (``always``, ``madvise`` or
    ``never``); ``never`` where it cannot be read."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as fh:
            text = fh.read()
    except OSError:
        return "never"
    return text.split("[", 1)[-1].split("]", 1)[0] if "[" in text else "never"


def _huge_pages_on_advice():
    return _huge_page_mode() in ("always", "madvise")


# the faults of writing a marked 2 MB range again after one 4 KB page of it
# was written before the mark and unmapped with MADV_DONTNEED after it
_REFAULT = """
import ctypes, mmap, resource
huge = 2 << 20
area = mmap.mmap(-1, 2 * huge, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
off = -ctypes.addressof(ctypes.c_char.from_buffer(area)) % huge
area[off] = 1  # one 4 KB page mapped: the range takes 4 KB pages from now on
area.madvise(mmap.MADV_HUGEPAGE)
area.madvise(mmap.MADV_DONTNEED, off, huge)
ones = b"\\1" * huge
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
area[off : off + huge] = ones
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@functools.cache
def _emptied_page_tables_freed():
    """Whether this kernel frees a page table that MADV_DONTNEED emptied
    (Linux 6.14 on, where built in), so that the range maps a huge page
    again: what prepare_heap's clearing of glibc's header page relies on."""
    if not (_huge_page_mode() == "madvise" and hasattr(memory.mmap, "MADV_HUGEPAGE")):
        return False
    return int(_run_script(_REFAULT, "")) < 100


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
@pytest.mark.parametrize("mode", ["prepare", "public call", "layer call"])
def test_a_prepared_heap_reuses_freed_memory(mode):
    """After the first public call (or prepare_heap itself) the 16 MB freed at
    the end of a round stay for the next: the third round touches no fresh page;
    without it (the first test above) it faults 4,096 pages again."""
    assert _rounds_after(mode)[1] < 300


# the faults of 40 x 1 MB made after prepare_heap, every page written
_FORTY_MB = """
import resource
import numpy as np
from xpml.utils.memory import prepare_heap
prepare_heap()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
blocks = [np.ones(1 << 17) for _ in range(40)]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(
    not (_is_glibc() and _huge_page_mode() == "madvise"),  # "always": any heap
    reason="glibc's malloc, transparent huge pages only on advice",
)
def test_the_mark_reaches_past_the_first_block():
    """40 MB of temporaries after the preparation: the 48 MB mark takes them
    in 2 MB pages, 22 faults here, where the kernel frees emptied page
    tables (the page glibc wrote a header on before the mark unmapped after
    it); elsewhere all but that huge page, taken in 4 KB pages (531 faults
    here before session 23). The first block's own 30 MB marked alone left
    the last 10 MB to 4 KB pages (2,575)."""
    faults = int(_run_script(_FORTY_MB, ""))
    assert faults < (300 if _emptied_page_tables_freed() else 1200), faults


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
def test_the_environment_variable_turns_the_preparation_off():
    _, third = _rounds_after("public call", env={memory.PREPARE_ENV: "0"})
    assert third > 3000


@pytest.mark.skipif(
    not (_is_glibc() and _huge_pages_on_advice()),
    reason="glibc's malloc and transparent huge pages on advice",
)
def test_a_prepared_heap_faults_in_huge_pages():
    """16 MB touched for the first time: 4,096 faults of 4 KB pages by default
    (the first round of the default mode), a few dozen 2 MB ones after."""
    assert _third_round_faults("default") > 3000  # the rounds are alike then
    first, _ = _rounds_after("prepare")
    assert first < 1000


class _FakeLibc:
    """malloc / realloc / free / madvise / mincore that record their calls;
    blocks at ``base``, or, with ``heap``, each block right after the one
    before it (as glibc carves them from the top of a heap; a free rewinds
    to the freed block); ``touched``: the 2 MB boundaries whose huge page
    mincore reports a resident page in; ``moved``: where realloc puts a block
    it shrinks, ``grown``: one it grows (None: where it was; 0: refused)."""

    def __init__(
        self, base=(7 << 20) + 4096, touched=(), moved=None, heap=False, grown=None
    ):
        self.base, self.calls = base, []
        self.touched, self.moved, self.grown = set(touched), moved, grown
        self.top = base if heap else None
        self.sizes = {}

    def malloc(self, size):
        self.calls.append(("malloc", size))
        if self.top is None or not self.base:
            self.sizes[self.base] = size
            return self.base
        block, self.top = self.top, self.top + memory._chunk_span(size)
        self.sizes[block] = size
        return block

    def realloc(self, address, size):
        self.calls.append(("realloc", address, size))
        moved = self.grown if size > self.sizes.get(address, size) else self.moved
        return address if moved is None else moved

    def free(self, address):
        self.calls.append(("free", address))
        if self.top is not None:
            self.top = min(self.top, address)

    def madvise(self, address, size, advice):
        self.calls.append(("madvise", address, size, advice))
        return 0

    def mincore(self, address, size, resident):
        self.calls.append(("mincore", address))
        resident[3] = address in self.touched
        return 0


def _kept_below(boundary, base):
    """realloc's call that keeps ``base``'s block up to 16 bytes below
    ``boundary`` (glibc's chunk of r bytes spans r + 8 rounded up to 16, from
    16 bytes before the block)."""
    return ("realloc", base, boundary - base - 8)


def _prepare_with(monkeypatch, fake):
    monkeypatch.setattr(memory, "_prepared", False)
    monkeypatch.setattr(memory, "_pads", [])
    monkeypatch.setattr(memory, "_glibc_functions", lambda: fake)
    monkeypatch.delenv(memory.PREPARE_ENV, raising=False)
    return memory.prepare_heap()


def test_prepare_heap_frees_one_block_and_marks_48_mb(monkeypatch):
    """One block freed (the thresholds); the same size again and the rest
    of 48 MB (and 2 MB more) right after it, freed and the first grown over
    it; the huge page of the header glibc wrote between them unmapped; the
    24 whole huge pages from the first 2 MB boundary marked; the block given
    back above that boundary (kept below it); nothing on later calls."""
    fake = _FakeLibc(heap=True)
    got = _prepare_with(monkeypatch, fake)
    size, huge = memory._RAISING_BLOCK, memory._HUGE_PAGE
    rest = memory._MAIN_MARK - size + huge
    start = 8 << 20  # the first 2 MB boundary past base
    extra = fake.base + size + 16  # the next chunk: 8 bytes of header, 16-aligned
    header = (fake.base + size) // huge * huge  # its header's huge page: 38 MB
    assert header == 38 << 20
    assert got == {"thresholds_raised": True, "huge_pages": True}
    assert fake.calls == [
        ("malloc", size),
        ("free", fake.base),
        ("malloc", size),
        ("malloc", rest),
        ("free", extra),
        ("realloc", fake.base, size + rest),
        ("madvise", header, huge, memory.mmap.MADV_DONTNEED),
        ("madvise", start, memory._MAIN_MARK, memory.mmap.MADV_HUGEPAGE),
        ("mincore", start),
        _kept_below(start, fake.base),
    ]
    assert memory._pads == [(fake.base, start)]
    assert memory.prepare_heap() is None
    assert len(fake.calls) == 10


@pytest.mark.parametrize("case", ["refused", "moved"])
def test_a_block_that_cannot_grow_in_place(monkeypatch, case):
    """realloc refused to grow the block: its own 15 whole huge pages are
    marked; it moved the block (not glibc's way): the new block is freed and
    nothing is marked."""
    fake = _FakeLibc(heap=True, grown=0 if case == "refused" else 1 << 30)
    got = _prepare_with(monkeypatch, fake)
    size, huge = memory._RAISING_BLOCK, memory._HUGE_PAGE
    advised = [c for c in fake.calls if c[0] == "madvise"]
    if case == "refused":
        start, stop = 8 << 20, (fake.base + size) // huge * huge
        assert advised == [("madvise", start, stop - start, memory.mmap.MADV_HUGEPAGE)]
        assert stop - start == 15 * huge and got["huge_pages"] is True
    else:
        assert advised == [] and fake.calls[-1] == ("free", 1 << 30)
        assert got == {"thresholds_raised": True, "huge_pages": False}


def test_a_second_block_elsewhere_is_freed_and_the_first_marked_alone(monkeypatch):
    """Where glibc does not put the rest right after the first block, the
    rest is given back at once and the first block's own whole huge pages
    (15) are marked."""
    fake = _FakeLibc()  # every block at base: not the next chunk
    _prepare_with(monkeypatch, fake)
    size, huge = memory._RAISING_BLOCK, memory._HUGE_PAGE
    start, stop = 8 << 20, (fake.base + size) // huge * huge
    assert fake.calls[3:6] == [
        ("malloc", memory._MAIN_MARK - size + huge),
        ("free", fake.base),
        ("madvise", start, stop - start, memory.mmap.MADV_HUGEPAGE),
    ]
    reallocs = [c for c in fake.calls if c[0] == "realloc"]
    assert reallocs == [_kept_below(start, fake.base)]  # nothing grown
    assert stop - start == 15 * huge


@pytest.mark.parametrize(
    "case", ["first page touched", "on a boundary", "moved", "refused", "small"]
)
def test_the_part_below_a_boundary_is_kept(monkeypatch, case):
    """The block is kept up to the first 2 MB boundary whose huge page has no
    resident page yet; freed instead when it starts on a boundary, when
    realloc moved it (the new one freed) or refused, or when no whole huge
    page lies in it."""
    base, huge = (7 << 20) + 4096, memory._HUGE_PAGE
    fake = _FakeLibc(
        base=8 << 20 if case == "on a boundary" else base,
        touched={8 << 20} if case == "first page touched" else (),
        moved={"moved": 1 << 30, "refused": 0}.get(case),
    )
    monkeypatch.setattr(memory, "_pads", [])
    size = huge if case == "small" else memory._RAISING_BLOCK
    memory._keep_below_boundary(fake, fake.base, size)
    calls = [c for c in fake.calls if c[0] != "mincore"]
    if case == "first page touched":
        assert [c for c in fake.calls if c[0] == "mincore"] == [
            ("mincore", 8 << 20),
            ("mincore", 10 << 20),
        ]
        assert calls == [_kept_below(10 << 20, base)]
        assert memory._pads == [(base, 10 << 20)]
    elif case in ("on a boundary", "small"):
        assert calls == [("free", fake.base)] and memory._pads == []
    else:
        freed = 1 << 30 if case == "moved" else base
        assert calls == [_kept_below(8 << 20, base), ("free", freed)]
        assert memory._pads == []


@pytest.mark.parametrize("why", ["environment", "not glibc", "no memory"])
def test_prepare_heap_leaves_the_heap(monkeypatch, why):
    fake = _FakeLibc(base=0 if why == "no memory" else 1 << 30)
    monkeypatch.setattr(memory, "_prepared", False)
    monkeypatch.setattr(
        memory, "_glibc_functions", lambda: None if why == "not glibc" else fake
    )
    monkeypatch.setenv(memory.PREPARE_ENV, "0" if why == "environment" else "1")
    assert memory.prepare_heap() is None
    assert fake.calls == (
        [("malloc", memory._RAISING_BLOCK)] if why == "no memory" else []
    )


@pytest.mark.parametrize("first", ["enter", "layer", "loss"])
def test_the_first_public_call_prepares_the_heap_once(monkeypatch, first):
    """Estimators (through xpml._backend.enter) and the ``xpml.nn`` layers and
    losses (which resolve their namespace themselves) alike: whichever comes
    first prepares the heap, and no later call does it again."""
    from xpml import _backend
    from xpml.nn import Conv2D, MSELoss

    fake = _FakeLibc()
    monkeypatch.setattr(memory, "_prepared", False)
    monkeypatch.setattr(memory, "_glibc_functions", lambda: fake)
    monkeypatch.delenv(memory.PREPARE_ENV, raising=False)
    monkeypatch.setattr(memory, "_pads", [])
    X = np.ones((2, 5, 5, 1))
    calls = {
        "enter": lambda: _backend.enter(X),
        "layer": lambda: Conv2D(2, 3, random_state=0).forward(X),
        "loss": lambda: MSELoss()(np.ones((3, 1)), np.zeros(3)),
    }
    calls[first]()
    prepared = list(fake.calls)
    assert [c[0] for c in prepared].count("madvise") == 1  # by this first call
    for call in calls.values():
        call()
    assert fake.calls == prepared  # and only then


# where the first 1 MB block lands after prepare_heap, in the main thread
# ("main") or in the first task of a thread_pool thread ("pool"), and the
# 2 MB boundary just past the part of the marked block kept below it
_FIRST_BLOCK = """
import sys
import numpy as np
from xpml.linalg import thread_pool
from xpml.utils import memory
memory.prepare_heap()

def first_block():
    return np.ones(1 << 17).ctypes.data, memory._pads[-1][1]

if sys.argv[1] == "main":
    address, pad = first_block()
else:
    with thread_pool(1) as pool:
        address, pad = pool.submit(first_block).result()
print(address, pad)
"""


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
@pytest.mark.parametrize("where", ["main", "pool"])
def test_the_first_temporaries_start_on_a_huge_page(where):
    """The heap's free memory below the first 2 MB boundary is kept aside:
    the first 1 MB temporary (made after the mark) starts on the boundary,
    give or take the small blocks made in between, not up to 2 MB before
    it in 4 KB pages (every pool thread's first block did: 518 faults)."""
    address, boundary = map(int, _run_script(_FIRST_BLOCK, where).split())
    assert boundary % memory._HUGE_PAGE == 0
    assert boundary <= address < boundary + (64 << 10), (hex(boundary), hex(address))


@pytest.mark.skipif(not _is_glibc(), reason="glibc's malloc only")
def test_glibc_functions_are_found():
    libc = memory._glibc_functions()
    assert libc is not None and libc.malloc.restype is memory.ctypes.c_void_p


# ------------------------------------ prepare_thread_heap (the pools' threads)

# a worker thread's own page faults for its first 15 x 1 MB, in a pool made
# by xpml.linalg.thread_pool ("xpml") or a plain ThreadPoolExecutor
_WORKER_ROUND = """
import resource, sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from xpml.linalg import thread_pool
from xpml.utils.memory import prepare_heap
prepare_heap()

def first_round():
    f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    blocks = [np.ones(1 << 17) for _ in range(15)]  # every page written
    del blocks
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - f0

pool = thread_pool(1) if sys.argv[1] == "xpml" else ThreadPoolExecutor(1)
with pool:
    print(pool.submit(first_round).result())
"""


@pytest.mark.skipif(
    not (
        _is_glibc()
        and _huge_page_mode() == "madvise"  # "always": a plain pool's too
        and getattr(resource, "RUSAGE_THREAD", None)
    ),
    reason="glibc's malloc, transparent huge pages only on advice, RUSAGE_THREAD",
)
def test_a_pool_thread_faults_in_huge_pages():
    """A worker's first 15 MB come from its own arena: 3,840 faults of 4 KB
    pages in a plain pool's thread, 7 here in thread_pool's (whose threads
    marked their arena first), where the kernel frees emptied page tables;
    264 before session 23 (the huge page of the header glibc wrote past the
    arena's first block took 4 KB pages), and up to that elsewhere."""
    plain = int(_run_script(_WORKER_ROUND, "plain"))
    ours = int(_run_script(_WORKER_ROUND, "xpml"))
    bound = 100 if _emptied_page_tables_freed() else 1000
    assert plain > 3000 and ours < bound, (plain, ours)


def test_prepare_thread_heap_marks_one_block(monkeypatch):
    """Once prepare_heap raised the thresholds: one 16 MB block grown over
    one huge page more, the huge page of glibc's header between them
    unmapped, 16 MB of whole huge pages marked from the first boundary, the
    block freed above it; before that (or where it did nothing), and when no
    memory is left, no mark."""
    fake = _FakeLibc(heap=True)
    monkeypatch.setattr(memory, "_raised", None)
    monkeypatch.setattr(memory, "_pads", [])
    assert memory.prepare_thread_heap() is False and fake.calls == []
    _prepare_with(monkeypatch, fake)
    del fake.calls[:]
    fake.top = fake.base  # the thread's arena, from its start
    assert memory.prepare_thread_heap() is True
    size, huge = memory._THREAD_BLOCK, memory._HUGE_PAGE
    assert fake.calls == [
        ("malloc", size),
        ("malloc", huge),
        ("free", fake.base + size + 16),
        ("realloc", fake.base, size + huge),
        ("madvise", 22 << 20, huge, memory.mmap.MADV_DONTNEED),
        ("madvise", 8 << 20, size, memory.mmap.MADV_HUGEPAGE),
        ("mincore", 8 << 20),
        _kept_below(8 << 20, fake.base),
    ]
    fake.base = 0  # malloc fails
    assert memory.prepare_thread_heap() is False


def test_prepare_heap_turned_off_leaves_the_threads_alone(monkeypatch):
    fake = _FakeLibc()
    monkeypatch.setattr(memory, "_prepared", False)
    monkeypatch.setattr(memory, "_raised", None)
    monkeypatch.setattr(memory, "_glibc_functions", lambda: fake)
    monkeypatch.setenv(memory.PREPARE_ENV, "0")
    memory.prepare_heap()
    assert memory.prepare_thread_heap() is False and fake.calls == []


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="pools need two CPUs")
@pytest.mark.parametrize("site", ["map_row_blocks", "kmeans", "conv", "cholesky"])
def test_every_pool_prepares_its_threads(monkeypatch, site):
    """Each host thread pool of xpml (the tiled loops, the k-means shards,
    Conv2D's image groups, KernelRidge's panel Cholesky) runs
    prepare_thread_heap in each of its threads before their first task."""
    import threading

    from xpml import linalg
    from xpml.nn import conv

    threadpoolctl = pytest.importorskip("threadpoolctl")
    seen = set()
    monkeypatch.setattr(
        linalg, "prepare_thread_heap", lambda: seen.add(threading.get_ident())
    )
    conv._workers.cache_clear()  # its pool may have started before the spy
    rng = np.random.default_rng(0)
    with threadpoolctl.threadpool_limits(2):  # not one BLAS thread: pools run
        _run_pool_site(site, rng)
    conv._workers.cache_clear()
    assert seen and threading.get_ident() not in seen


def _run_pool_site(site, rng):
    from xpml import linalg
    from xpml.cluster import _kmeans
    from xpml.kernel_ridge import _cholesky_by_panels
    from xpml.nn import conv

    if site == "map_row_blocks":
        got = linalg.map_row_blocks(lambda a, b: b - a, 10, 3, xp=np)
        assert got == [3, 3, 3, 1]
    elif site == "kmeans":
        with _kmeans._shard_runner(np) as shards:
            assert shards(lambda a, b: b - a, 10) == [5, 5]
    elif site == "conv":
        X = rng.standard_normal((16, 20, 20, 8))  # 1.8 MB of windows: two groups
        conv.Conv2D(8, 4, padding=1, random_state=0).forward(X)
    else:
        A = rng.standard_normal((40, 40))
        A = A @ A.T + 40 * np.eye(40)
        L = _cholesky_by_panels(A.copy(), panel=8, rows=8, threads=2)
        np.testing.assert_allclose(L @ L.T, A, rtol=1e-10)
