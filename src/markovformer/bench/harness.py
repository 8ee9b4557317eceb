"""Measurements in a child process: the one harness behind ``markovformer bench`` and Table I's cost columns.

A measurement runs in a fresh interpreter so that its peak memory is its own (a fresh allocator and high-water
mark), its thread count is set before torch starts, and a crash, an out-of-memory kill or a hang loses only it.
The parent (``run_in_child``) starts ``python -m MODULE '<job json>'`` with a timeout; the child
(``child_main``) runs the job's cases in order and prints one row per case as a JSON line the moment it finishes,
so rows before a failure survive it. Every case the child did not finish still gets a row: the case it died in an
``error`` (the end of its stderr, the exit status or the time-out), the ones after it ``skipped``.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
PARENT_VARIABLE = "MARKOVFORMER_BENCH_PARENT"  # the pid of the bench that started a measuring child
ROW_PREFIX = "BENCH_ROW "  # a row line of the child's stdout starts with this; anything else it prints is ignored


def child_environment(env: dict) -> dict:
    """``env`` for a measuring child: it names this process, for ``die_with_parent``."""
    return {**env, PARENT_VARIABLE: str(os.getpid())}


def die_with_parent() -> None:
    """A measuring child's first call: on Linux the kernel sends it SIGKILL when the bench that started it dies, even
    by SIGKILL (which no handler of the bench sees), so that no child measures on alone holding its memory; a child
    whose bench died before this call ends at once. Run in the child itself (not as a ``preexec_fn``, which runs
    between fork and exec in a process that may hold threads)."""
    parent = os.environ.get(PARENT_VARIABLE)
    if parent is None or not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (AttributeError, OSError):  # a libc without prctl: the child may outlive a killed bench
        return
    if os.getppid() != int(parent):  # the bench died before the request: no signal will come
        os._exit(1)


def run_in_child(module: str, job: dict, cases: list[dict], timeout: float, threads: int | None = None) -> list[dict]:
    """Run ``python -m module json(job)`` and return one row per case of ``cases`` (the cases the job holds, in
    the order the child measures them). ``threads``: torch's intra-op threads in the child (also OMP/MKL's); None
    leaves torch's default (one per core)."""
    env = dict(os.environ)
    if threads is not None:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        job = {**job, "threads": threads}
    command = [sys.executable, "-m", module, json.dumps(job)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_environment(env))
        stdout, failure = done.stdout, None
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
            failure = lines[-1][-300:]
            if done.returncode in (-9, 137):
                failure = f"killed (out of memory?): {failure}"
    except subprocess.TimeoutExpired as expired:
        output = expired.stdout or b""
        stdout = output.decode() if isinstance(output, bytes) else output
        failure = f"timed out after {timeout:.0f} s"
    rows = [json.loads(line.removeprefix(ROW_PREFIX)) for line in stdout.splitlines() if line.startswith(ROW_PREFIX)]
    missing = cases[len(rows) :]
    if missing:  # the case it died in gets the error; the ones after it were never tried
        rows.append({**missing[0], "error": failure or "the child ended without a row"})
        rows += [{**case, "skipped": f"the child stopped: {failure}"} for case in missing[1:]]
    return rows


def emit_row(row: dict) -> None:
    """Print one finished row for the parent (flushed at once, so it survives a later crash)."""
    print(ROW_PREFIX + json.dumps(row), flush=True)


def child_main(argv: list[str], measure: Callable[[dict], Iterable[dict]]) -> None:
    """A child's entry point: read the job from ``argv[0]``, set torch's thread count if the job names one, and
    emit every row ``measure(job)`` yields."""
    die_with_parent()
    import torch  # the child's: the parent's side of the harness imports no torch

    job = json.loads(argv[0])
    if job.get("threads"):
        torch.set_num_threads(job["threads"])
    for row in measure(job):
        emit_row(row)
