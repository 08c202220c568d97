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

xpml does not change the allocator by itself: the setting is process-wide and
permanent, it keeps the process's resident memory higher after large frees, and
it is the application's choice. :func:`keep_freed_memory` makes it in one call;
the environment variable ``GLIBC_TUNABLES`` makes it before Python starts::

    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=67108864 python script.py

Device memory (CuPy, PyTorch on CUDA) is not concerned: both libraries keep
their own pools.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys

__all__ = ["keep_freed_memory"]

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
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc_name = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):  # not glibc: the name is unknown
        return None
    if not libc_name.startswith("glibc"):
        return None
    try:
        fn = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return fn


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
