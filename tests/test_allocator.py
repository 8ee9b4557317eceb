"""keep_freed_memory: a large block allocated and freed in a loop is page-faulted in once, not on every pass; on a
glibc that refuses a large mmap threshold it falls back to 32 MiB and still sets the trim threshold."""

from __future__ import annotations

import subprocess
import sys

import pytest

from markovformer import allocator

LOOP = """
import ctypes, importlib.util, resource, sys
# Loaded by path: importing the package would import torch, whose start-up is most of this test's time.
spec = importlib.util.spec_from_file_location("allocator", sys.argv[2])
allocator = importlib.util.module_from_spec(spec)
spec.loader.exec_module(allocator)
applied = allocator.keep_freed_memory() if sys.argv[1] == "keep" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
SIZE = 2**26  # 64 MiB: above glibc's largest default mmap threshold (32 MiB)

def touch_and_free():
    block = libc.malloc(SIZE)
    ctypes.memset(block, 1, SIZE)
    libc.free(block)

touch_and_free()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    touch_and_free()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    command = [sys.executable, "-c", LOOP, mode, allocator.__file__]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    applied, faults = done.stdout.split()
    return applied, int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    applied, kept = _faults("keep")
    _, default = _faults("default")
    pages = 5 * 2**26 // 4096  # five passes over 64 MiB of 4 KiB pages
    if int(applied) < 2**26:
        pytest.skip(f"mmap threshold {applied} (not glibc, or glibc < 2.35): the 64 MiB block is still mapped afresh")
    assert default > pages // 2  # glibc's default: every pass maps and faults the block in again
    assert kept < pages // 20


class _RefusingMallopt:
    """glibc < 2.35's mallopt as far as these thresholds go: an mmap threshold above ``ceiling`` is refused (0)."""

    def __init__(self, ceiling: int) -> None:
        self.ceiling, self.calls = ceiling, []

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return int(parameter != allocator._M_MMAP_THRESHOLD or value <= self.ceiling)


@pytest.mark.parametrize(
    ("ceiling", "expected"),
    [(2**31, 2**30), (2**25, 2**25), (0, 0)],  # a new glibc, one before 2.35 (HEAP_MAX_SIZE / 2), one refusing all
)
def test_a_refused_mmap_threshold_falls_back_and_the_trim_threshold_is_set_anyway(monkeypatch, ceiling, expected):
    mallopt = _RefusingMallopt(ceiling)
    monkeypatch.setattr(allocator.sys, "platform", "linux")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda name: type("Libc", (), {"mallopt": mallopt})())
    applied = allocator.keep_freed_memory()
    assert applied == expected  # the mmap threshold now in force; 0: none was taken
    assert (allocator._M_TRIM_THRESHOLD, allocator.TRIM_THRESHOLD) in mallopt.calls
    taken = [value for parameter, value in mallopt.calls if parameter == allocator._M_MMAP_THRESHOLD]
    assert taken[0] == 2**30 and taken[-1] == (expected or 2**25)
