"""One writer per run directory: ``train`` and ``--resume`` hold an OS file lock (``fcntl.flock``) on
``RUN_DIR/.lock`` for as long as they run. The kernel releases it when the holder exits or is killed, so a crashed
run never leaves a stale lock; ``eval``, ``generate`` and ``inspect`` only read and take no lock.

Only the process of global rank 0 locks: the other processes of a multi-process run (started by Lightning, torchrun
or SLURM) write nothing of their own into the run directory.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from markovformer.training.run_config import ConfigError

LOCK_FILE = ".lock"
# Set by Lightning's launcher, torchrun and SLURM in every process but the first.
_RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK", "SLURM_PROCID")
_held = []  # the open lock files of this process


def _close_in_child() -> None:
    """A forked child (a DataLoader worker) closes its copies of the lock files: a lock lasts while any descriptor
    of it is open, so a worker outliving a killed trainer would otherwise hold the run for seconds."""
    for handle in _held:
        handle.close()
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def is_first_process() -> bool:
    """True unless the environment says this process has a non-zero rank in a multi-process run."""
    return all(os.environ.get(name, "0") in ("", "0") for name in _RANK_VARIABLES)


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory's lock (creating the directory); ConfigError naming the holder's pid when another
    process holds it."""
    if not is_first_process():
        yield
        return
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        handle = (run_dir / LOCK_FILE).open("a+")
    except OSError as error:
        problem = "a path under a file" if isinstance(error, (FileExistsError, NotADirectoryError)) else error.strerror
        raise ConfigError(f"output_dir={str(run_dir)!r} cannot hold a run ({problem}: {error.filename}); choose a "
                          f"writable directory") from None  # fmt: skip
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ConfigError(f"output_dir={str(run_dir)!r} is in use by another markovformer process (pid {holder}); "
                              f"wait for it to finish or choose another output_dir") from None  # fmt: skip
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()}\n")
        handle.flush()
        _held.append(handle)
        yield
    finally:
        if handle in _held:
            _held.remove(handle)
        handle.close()  # closing the only descriptor releases the lock


__all__ = ["LOCK_FILE", "is_first_process", "run_dir_lock"]
