"""One writer per run directory: ``train`` and ``--resume`` hold an OS file lock (``fcntl.flock``) on
``RUN_DIR/.lock`` for as long as they run, as ``bench`` does on its ``--out``. The kernel releases it when the
holder exits or is killed, so a crashed run never leaves a stale lock; ``eval``, ``generate`` and ``inspect`` only
read and take no lock.

The run's writer locks: the process that Lightning, with the run's own strategy and devices, makes global rank 0
(``training.runner.is_run_writer``). The other processes of a multi-process run write nothing into the run
directory. A rank variable inherited from the environment (a SLURM sweep of single-process jobs) never makes a
process skip the lock. The lock file is opened without following a symbolic link.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from markovformer.atomic import write_failure
from markovformer.training.run_config import ConfigError

LOCK_FILE = ".lock"
_held = []  # the open lock files of this process


def _close_in_child() -> None:
    """A forked child (a DataLoader worker) closes its copies of the lock files: a lock lasts while any descriptor
    of it is open, so a worker outliving a killed trainer would otherwise hold the run for seconds."""
    for handle in _held:
        handle.close()
    _held.clear()


os.register_at_fork(after_in_child=_close_in_child)


def _not_a_folder(run_dir: Path) -> str | None:
    """What stops ``run_dir`` being made a folder: the first of its parents, or itself, that is a file or a link to
    nothing (mkdir says 'File exists' of both, naming the path it made)."""
    for path in [*reversed(run_dir.parents), run_dir]:
        if path.is_symlink() and not path.exists():
            return f"{path} is a link to {os.readlink(path)}, which does not exist"
        if path.exists() and not path.is_dir():
            return f"{path} is a file"
    return None


@contextmanager
def run_dir_lock(
    run_dir: Path, writer: bool = True, option: str = "output_dir", holds: str = "a run"
) -> Iterator[None]:
    """Hold the run directory's lock (creating the directory) when ``writer``; ConfigError naming the holder's pid
    when another process holds it. ``option``: what the user gave the directory as, and ``holds``: what it is for
    (bench: its results), named in the errors."""
    if not writer:
        yield
        return
    lock = run_dir / LOCK_FILE
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        handle = os.fdopen(descriptor, "r+", encoding="utf-8")
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ConfigError(f"{lock} is a symbolic link; a run's lock file must be a plain file: remove the link "
                              f"and start again") from None  # fmt: skip
        problem = f"{error.strerror}: {error.filename}"
        if isinstance(error, (FileExistsError, NotADirectoryError)):
            problem = _not_a_folder(run_dir) or problem
        raise ConfigError(write_failure(error, f"{holds} in {option}={str(run_dir)!r}", "choose a writable directory",
                                        problem)) from None  # fmt: skip
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode) or status.st_nlink > 1:  # its truncation would reach another file
            raise ConfigError(f"{lock} is not a plain file of its own (a device, a pipe or a hard link to another "
                              f"file); remove it and start again")  # fmt: skip
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise ConfigError(f"{option}={str(run_dir)!r} is in use by another markovformer process (pid {holder}); "
                              f"wait for it to finish or choose another {option}") from None  # fmt: skip
        except OSError as error:  # a filesystem mounted without locks (Lustre without -o flock): ENOSYS
            raise ConfigError(f"cannot lock {lock} ({error.strerror or error}): its filesystem takes no file locks, "
                              f"which keep a second process out of a run; choose an {option} on another "
                              "filesystem (or mount this one with locks)") from None  # fmt: skip
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


__all__ = ["LOCK_FILE", "run_dir_lock"]
