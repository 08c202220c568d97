"""xpml.utils.memory.keep_freed_memory: glibc's malloc thresholds (issue 16).

The allocator's setting is process-wide and permanent, so every test that
lets it take effect runs in a child process; the ones here only call it
with a stand-in for ``mallopt``.
"""

import math
import os
import subprocess
import sys

import pytest

from xpml.utils import memory

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


def _third_round_faults(mode):
    out = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(out.stdout.strip())


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
