"""Keeping freed host memory in the process, for short scripts (issue 16).

glibc's ``malloc`` gives freed memory back to the operating system as soon as
more than its *trim threshold* lies free at the top of the heap, and serves
every block above its *mmap threshold* with a mapping of its own that is
unmapped on ``free``. Both thresholds start small (128 KB) and rise only when
the process frees a large mapped block. A fresh process whose calls allocate
many medium-sized temporaries (a k-d tree query, a network's activations,
Newton's Hessian products) therefore hands them back at the end of every call
(or every minibatch) and takes a page fault on each 4 KB page again in the
next. Measured on the project's 2-core VM (sessions 14 and 15, before the
network's training made fewer temporaries): the digits CNN trained in 348 ms in a fresh
process against 224 ms in the benchmark's long-lived one (2,299 ``brk`` calls
and ~63,000 page faults in two fits), and in 221 ms with this setting; the
exact k-d tree answered 20,000 queries in 30-33 ms at every call of a fresh
process (3,900 faults a call) against 23 ms warm, and in 23 ms from the
second call on with it. bench/README.md ("The allocator hands freed memory
back") has the full runs with and without it.

What xpml does by itself (:func:`prepare_heap`, once, on its first public
call, on any array library; ``XPML_PREPARE_HEAP=0`` in the environment turns
it off):

* glibc raises both thresholds on its own, to a 32 MB mmap threshold and a
  64 MB trim threshold, the first time the process frees a mapped block of up
  to 32 MB; a long-lived process has usually done so long before, a fresh one
  often not. xpml asks for one such block and frees it untouched (one
  ``mmap`` and one ``munmap``, no setting fixed), so a fresh process's calls
  reuse their temporaries' pages as a long-lived one's do;
* the next 48 MB of the heap, where those temporaries now go, is marked for
  transparent huge pages (``madvise(MADV_HUGEPAGE)``, what glibc's own
  ``glibc.malloc.hugetlb=1`` tunable does for all of it): a first touch then
  maps 2 MB at a time instead of 4 KB, 0.26 ms for 2 MB against 1.0 ms on the
  project's VM. The free memory below the first untouched 2 MB boundary (up
  to 2 MB, which no whole huge page covers) is kept allocated and never
  touched, so that the first temporaries start on a huge page rather than in
  up to 512 pages of 4 KB (session 20). Where the kernel has transparent
  huge pages off, the faults stay 4 KB ones;
* the threads of xpml's own pools (:func:`xpml.linalg.thread_pool`: the
  k-means shards, the brute neighbour search's blocks, Conv2D's image groups,
  KernelRidge's panel Cholesky) allocate from arenas of their own, which the
  two steps above do not reach: each marks the first 16 MB of its arena the
  same way before its first task (:func:`prepare_thread_heap`). KMeans at
  k = 64 on 50,000 x 20, two threads: the first fit of a fresh process took
  600-1,100 page faults instead of 2,500-2,900 (session 18).

Measured on the project's VM, a fresh process, Newton ``LogisticRegression``
on 100,000 x 50: first fit 67.5-68.9 ms (4,800 page faults) and every later
fit 63-65 ms (2,300-2,400 faults each) with ``XPML_PREPARE_HEAP=0``; first
fit 65.4-65.7 ms (1,600-1,700 faults), later ones 60-62 ms (none) with both
steps. The process may then keep up to 64 MB of freed memory at the top of
its heap (as any process that freed such a block does), and its resident
memory grows in 2 MB steps within the marked 48 MB.

xpml does not *set* the thresholds: a fixed setting is process-wide and
permanent, turns off glibc's own raising, and it is the application's choice.
:func:`keep_freed_memory` makes it in one call; the environment variable
``GLIBC_TUNABLES`` makes it before Python starts::

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864 python script.py

Device memory (CuPy, PyTorch on CUDA) is not concerned: both libraries keep
their own pools.
"""

from __future__ import annotations

import ctypes
import functools
import math
import mmap
import os
import sys

__all__ = ["keep_freed_memory", "prepare_heap", "prepare_thread_heap"]

#: mallopt's parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

#: mallopt takes a C int: thresholds below 2 GiB
_MB_MAX = 2047

#: the largest mmap threshold glibc accepts: 32 MB on 64-bit builds
_MMAP_THRESHOLD_MAX = 4 * 1024 * 1024 * ctypes.sizeof(ctypes.c_long)


def _glibc_mallopt():
    """glibc's ``mallopt`` as a ctypes function, or None on another C library
    (macOS, Windows, musl) or platform."""
    libc = _glibc_functions()
    return None if libc is None else libc.mallopt


#: the environment variable that turns :func:`prepare_heap` off ("0")
PREPARE_ENV = "XPML_PREPARE_HEAP"

#: the block :func:`prepare_heap` frees: glibc raises its thresholds on freeing
#: a mapped block whose size, with its header and page rounding (and the flag
#: glibc keeps in the size's low bits), stays at most the 32 MB ceiling
_RAISING_BLOCK = _MMAP_THRESHOLD_MAX - 2 * mmap.PAGESIZE

#: a transparent huge page on x86-64 and most 64-bit Linux (bytes)
_HUGE_PAGE = 2 << 20

_prepared = False

#: glibc's functions once :func:`prepare_heap` raised the thresholds (None
#: before, and where it did nothing)
_raised = None

#: what :func:`prepare_heap` marks in the main heap: room for a temporary up
#: to the 32 MB mmap threshold after 16 MB of others
_MAIN_MARK = 48 << 20

#: what :func:`prepare_thread_heap` marks in a worker thread's heap
_THREAD_BLOCK = 16 << 20


def prepare_heap() -> dict | None:
    """Once per process: glibc's malloc thresholds at their ceiling and the
    heap's next 48 MB on transparent huge pages (see the module notes).

    Allocates one block just under glibc's 32 MB mmap-threshold ceiling and
    frees it untouched: glibc answers the free of a mapped block of that size
    by raising its mmap threshold to it and its trim threshold to twice that,
    as in any process that frees such a block, so that later temporaries up to
    32 MB come from the heap and freed ones stay there for the next. Then
    allocates the same size again, now from the heap, grows it by 18 MB
    (:func:`_mark_block`), marks 48 MB of whole huge pages
    ``MADV_HUGEPAGE`` and frees it untouched but for the part below the
    first 2 MB boundary, which stays allocated: the heap's first 48 MB of
    new temporaries fault in 2 MB at a time. Nothing is
    fixed: glibc's own rules stay in force, and a setting made by
    :func:`keep_freed_memory`, ``mallopt`` or ``GLIBC_TUNABLES`` is left as
    it is (the second block then comes from wherever glibc puts it, and the
    mark costs nothing).

    xpml calls this at every public call (:func:`xpml._backend.enter`, and
    :func:`xpml.nn._base.call_namespace` for the layers and losses); only the
    first does anything. ``XPML_PREPARE_HEAP=0`` in the environment turns it
    off.

    Returns
    -------
    dict or None
        ``{"thresholds_raised": True, "huge_pages": bool}`` (``huge_pages``:
        the kernel accepted the mark) when this call did it; None on later
        calls, when turned off, or where the C library is not glibc.
    """
    global _prepared, _raised
    if _prepared:
        return None
    _prepared = True
    if os.environ.get(PREPARE_ENV, "1").strip() == "0":
        return None
    libc = _glibc_functions()
    if libc is None:
        return None
    block = libc.malloc(_RAISING_BLOCK)
    if not block:
        return None
    libc.free(block)
    _raised = libc
    return {"thresholds_raised": True, "huge_pages": _mark_block(libc, _MAIN_MARK)}


def prepare_thread_heap() -> bool:
    """In a worker thread, before its first task (a pool's ``initializer``):
    the first 16 MB of the heap glibc serves this thread from marked for
    transparent huge pages, as :func:`prepare_heap` marks the calling
    thread's; nothing unless that raised the thresholds (blocks of this size
    then come from the heap, not from a mapping of their own).

    glibc gives each new thread an arena of its own (a heap mapped apart,
    aligned to 64 MB), which a fresh process's first call faults in 4 KB at a
    time: the k-means workers' score blocks, 900-1,300 page faults in the
    first fit at k = 8 on 50,000 x 20 (issue 16). Allocates a block there,
    marks its whole huge pages and frees it untouched, all but the part below
    its first 2 MB boundary (the arena's first 2 MB less its header: 518
    faults of 4 KB in a thread's first megabytes when that was freed too);
    the arena keeps it (the trim threshold is 64 MB) for the temporaries of
    this thread and of the next that glibc hands the arena to. A few
    microseconds a thread.

    Returns whether the mark was made.
    """
    return _raised is not None and _mark_block(_raised, _THREAD_BLOCK)


def _mark_block(libc, size):
    """Where this thread's heap would serve them, mark ``size`` bytes of
    whole huge pages ``MADV_HUGEPAGE`` from the first huge-page boundary on,
    and give the memory back untouched, all but the part below that boundary
    (:func:`_keep_below_boundary`); whether the mark was made (False when the
    allocation failed).

    Allocates ``size`` bytes (at most the block that raised the thresholds:
    larger ones would be mapped apart) and grows that block over the rest and
    one huge page more (:func:`_grow_over_top`): the boundary lies up to
    2 MB past the block's start. Where it cannot grow, the first block is
    marked alone."""
    first = min(size, _RAISING_BLOCK)
    block = libc.malloc(first)
    if not block:
        return False
    block, span = _grow_over_top(libc, block, first, size - first + _HUGE_PAGE)
    if not block:
        return False
    huge = _mark_huge_pages(libc, block, span)
    _keep_below_boundary(libc, block, span)
    return huge


def _grow_over_top(libc, block, first, rest):
    """Grow the fresh ``block`` of ``first`` bytes in place by ``rest``
    bytes, and clear the one page glibc wrote in the middle; returns the
    block and its size (``(block, first)`` where it cannot grow; ``(0, 0)``
    where realloc moved it, the new block freed).

    glibc carves a block from the top of the heap by writing the next
    chunk's header just past it, so a first block of at most 32 MB (larger
    ones are mapped apart) leaves one written 4 KB page about 30 MB past
    the boundary, and a huge page with one 4 KB page mapped takes 4 KB
    pages only: 400-500 faults of 4 KB where a temporary reaches it (the
    Gram matrix at n = 2,000, 30.5 MB, ended there; session 22). So the
    rest is allocated right after the block (which extends the heap), freed
    into the top of the heap, and the block grown over it with ``realloc``
    (glibc grows a block in place into the top it borders, at any size):
    the written page is then inside the block, which this thread owns, and
    ``madvise(MADV_DONTNEED)`` on its whole huge page unmaps it (Linux
    frees the emptied page table since 6.14, so that the next touch there
    maps a huge page; on older kernels that page stays 4 KB ones). 40 MB
    touched after the mark: 22 faults instead of 531; a pool thread's first
    15 MB: 7 instead of 264 (session 23). Where the
    rest is not placed right after the block (another allocator, a setting
    of the thresholds), it is freed and nothing is grown; where another
    thread of this heap took the top in between, realloc moves the block
    (slowly, but safely) and nothing is marked."""
    extra = libc.malloc(rest)
    if not extra:
        return block, first
    carved = block + _chunk_span(first)  # where the next chunk's memory starts
    libc.free(extra)
    if extra != carved:
        return block, first
    grown = libc.realloc(block, first + rest)
    if not grown:  # refused: the block is as it was
        return block, first
    if grown != block:  # moved, not glibc's way: nothing to mark
        libc.free(grown)
        return 0, 0
    # the header glibc wrote lies just below ``carved``: its huge page is
    # whole inside the grown block (30 MB and more past its start)
    page = (carved - _CHUNK_HEADER) // _HUGE_PAGE * _HUGE_PAGE
    dontneed = getattr(mmap, "MADV_DONTNEED", None)
    if (
        dontneed is not None
        and block <= page
        and page + _HUGE_PAGE <= block + first + rest
    ):
        libc.madvise(page, _HUGE_PAGE, dontneed)
    return block, first + rest


def _chunk_span(size):
    """How far apart two blocks of glibc's heap lie when the second follows
    one of ``size`` bytes: a chunk spans the request plus its 8-byte size
    field, rounded up to 16 bytes (32 at least)."""
    return max(2 * _CHUNK_HEADER, (size + _CHUNK_HEADER // 2 + 15) // 16 * 16)


#: the parts of the marked blocks kept allocated below a huge-page boundary
#: for the life of the process: (address, the boundary), never touched
_pads = []

#: mincore's answer for one huge page: a byte a page
_Residency = ctypes.c_ubyte * (_HUGE_PAGE // mmap.PAGESIZE)

#: bytes before a glibc chunk's user memory (its size field and the previous
#: chunk's), on 64-bit builds
_CHUNK_HEADER = 2 * ctypes.sizeof(ctypes.c_size_t)


def _keep_below_boundary(libc, block, size):
    """Shrink the freshly allocated ``block`` of ``size`` bytes in place to
    end just below a 2 MB boundary (:func:`_first_untouched_huge_page`) and
    keep that part allocated; the rest goes back to the heap, so that the next
    block glibc carves there starts on the boundary.

    A heap's free top rarely starts on a huge-page boundary (the main heap
    after the interpreter's start, anywhere; a thread's arena just past its
    header): the memory below the first boundary is outside every whole huge
    page of the mark, and freed untouched it would be the first that later
    temporaries take, 4 KB a fault: 0 to 512 faults (about 2 µs each on the
    project's VM) in a fresh process's first call, 518 in every pool thread's
    first megabytes. Kept allocated, it holds up to a few MB of address space
    and next to no memory (pages the heap had touched before, if any), and
    the first temporaries fault in whole huge pages. glibc's ``realloc``
    shrinks a heap block in place and frees the remainder, which joins the
    free top it borders; where it returns another address (not glibc's
    behaviour), that block is freed."""
    boundary = _first_untouched_huge_page(libc, block, size)
    # glibc's chunk for a request of r bytes starts 16 bytes before the block
    # and spans r + 8 rounded up to 16: this one ends 16 bytes below the
    # boundary, where the next chunk's header goes, its memory on the boundary
    keep = boundary - block - _CHUNK_HEADER // 2
    if boundary + _HUGE_PAGE > block + size or keep < 2 * _CHUNK_HEADER:
        libc.free(block)  # no whole huge page, or on the boundary already
        return
    kept = libc.realloc(block, keep)
    if kept == block:
        _pads.append((kept, boundary))
    elif kept:  # moved: not glibc's realloc
        libc.free(kept)
    else:  # refused: the block is still there
        libc.free(block)


def _first_untouched_huge_page(libc, block, size):
    """The first 2 MB boundary in ``[block, block + size)`` whose huge page
    has no page resident yet (``mincore``): the free top of a heap may have
    been touched (up to glibc's trim threshold past its start, 128 KB in a
    fresh process), and a range with one 4 KB page mapped takes 4 KB pages
    only. The first boundary where ``mincore`` cannot tell."""
    huge = _HUGE_PAGE
    boundary = -(-block // huge) * huge
    resident = _Residency()
    while boundary + 2 * huge <= block + size:
        if libc.mincore(boundary, huge, resident) != 0:
            break  # cannot tell: take this one
        if bytes(resident).count(0) == len(resident):
            break
        boundary += huge
    return boundary


def _mark_huge_pages(libc, address, size):
    """``madvise(MADV_HUGEPAGE)`` on the whole huge pages within
    ``[address, address + size)``; whether the kernel accepted it."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    start = -(-address // _HUGE_PAGE) * _HUGE_PAGE
    stop = (address + size) // _HUGE_PAGE * _HUGE_PAGE
    if advice is None or stop <= start:
        return False
    return libc.madvise(start, stop - start, advice) == 0


@functools.cache
def _glibc_functions():
    """glibc's ``mallopt``, ``malloc``, ``realloc``, ``free``, ``madvise``
    and ``mincore`` (ctypes functions, as attributes of the library object),
    looked up once; None where the C library is not glibc (macOS, Windows,
    musl) or the platform not Linux."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc_name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # not glibc: the name is unknown
        return None
    if not libc_name.startswith("glibc"):
        return None
    try:
        libc = ctypes.CDLL(None)
        functions = (
            libc.mallopt,
            libc.malloc,
            libc.realloc,
            libc.free,
            libc.madvise,
            libc.mincore,
        )
    except (OSError, AttributeError):
        return None
    mallopt, malloc, realloc, free, madvise, mincore = functions
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    malloc.argtypes, malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    realloc.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    realloc.restype = ctypes.c_void_p
    free.argtypes, free.restype = (ctypes.c_void_p,), None
    madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    madvise.restype = ctypes.c_int
    mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
    mincore.restype = ctypes.c_int
    return libc


def _check_mb(mb):
    if isinstance(mb, bool) or not isinstance(mb, (int, float)):
        raise TypeError(f"mb must be a number of megabytes, got {type(mb).__name__}")
    if not math.isfinite(mb) or mb < 1 or mb > _MB_MAX:
        raise ValueError(
            f"mb must be a finite number of megabytes in [1, {_MB_MAX}], got {mb!r}"
        )


def keep_freed_memory(mb: float = 64) -> dict | None:
    """Let this process keep up to ``mb`` MB of freed memory for reuse.

    Sets glibc's trim threshold to ``mb`` MB (free memory at the top of the heap
    is returned to the system only beyond it) and its mmap threshold to half
    of that, at most 32 MB (blocks up to that size come from the heap, so
    they are reused instead of mapped and unmapped each time). Later calls then
    reuse pages the earlier ones touched instead of faulting fresh ones: see
    the module notes for what this saved in the benchmark's fresh processes.
    Blocks above the mmap threshold (a large Gram matrix) are still mapped and
    unmapped per allocation.

    The setting is process-wide, lasts until the process ends (glibc cannot
    report its previous thresholds, so there is nothing to restore) and turns
    off glibc's own raising of the thresholds. Call it once, early, in a
    script or notebook that wants later fits to run at their warm speed.

    Parameters
    ----------
    mb : float, default 64
        Freed memory, in MB, the process may keep (1 to 2,047).

    Returns
    -------
    dict or None
        ``{"trim_threshold": bytes, "mmap_threshold": bytes}`` as set; None
        where the C library is not glibc (macOS, Windows, musl), which is
        left unchanged.

    Examples
    --------
    >>> from xpml.utils.memory import keep_freed_memory
    >>> keep_freed_memory(64)  # doctest: +SKIP
    {'trim_threshold': 67108864, 'mmap_threshold': 33554432}
    """
    _check_mb(mb)
    mallopt = _glibc_mallopt()
    if mallopt is None:
        return None
    trim = int(mb * (1 << 20))
    mmap = min(trim // 2, _MMAP_THRESHOLD_MAX)
    # mmap first: setting it fixes both thresholds (no more dynamic raising)
    if not mallopt(_M_MMAP_THRESHOLD, mmap) or not mallopt(_M_TRIM_THRESHOLD, trim):
        raise OSError(
            f"glibc's mallopt refused mmap_threshold={mmap} or trim_threshold={trim}"
        )
    return {"trim_threshold": trim, "mmap_threshold": mmap}
