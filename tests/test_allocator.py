"""keep_freed_memory: a large block allocated and freed in a loop is page-faulted in once, not on every pass."""

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
    if applied != "True":
        pytest.skip("the C library is not glibc (mallopt refused)")
    assert default > pages // 2  # glibc's default: every pass maps and faults the block in again
    assert kept < pages // 20
