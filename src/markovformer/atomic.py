"""Atomic file writes, the one way this library puts a file on disk: write a temporary file beside the target, then
rename it into place, so a killed process leaves the old file or the new one, never a half-written one.

Every write of a run (each atomic rename, each appended log row) is a *write point*: with the environment variable
``MARKOVFORMER_KILL_AT_WRITE=N`` the process kills itself with SIGKILL at its N-th write point, just before the
write lands (the temporary file is whole but not yet renamed); with ``MARKOVFORMER_COUNT_WRITES=FILE`` it keeps the
number of write points so far in FILE. The crash tests use them to kill a run at every write.
"""

from __future__ import annotations

import errno
import os
import signal
import uuid
from collections.abc import Callable
from pathlib import Path

# The errors of a write whose cause lies outside the program: once it is gone, the same command goes on.
NO_SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT)  # a full disk or quota
DENIED_ERRORS = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only or forbidden place
WRITE_ERRORS = NO_SPACE_ERRORS + DENIED_ERRORS
KILL_AT_WRITE = "MARKOVFORMER_KILL_AT_WRITE"
COUNT_WRITES = "MARKOVFORMER_COUNT_WRITES"
PROCESS_STATUS = Path("/proc/self/status")  # where Linux shows the umask (``_umask``)
_writes_done = 0


def write_point() -> None:
    """Count one write of this process; SIGKILL it at the write named by ``MARKOVFORMER_KILL_AT_WRITE``."""
    global _writes_done
    _writes_done += 1
    if os.environ.get(KILL_AT_WRITE) == str(_writes_done):
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(COUNT_WRITES):
        Path(os.environ[COUNT_WRITES]).write_text(f"{_writes_done}\n", encoding="utf-8")


def atomic_write(path: str | Path, write: Callable[[Path], object]) -> Path:
    """Call ``write(temporary_path)`` then rename the result onto ``path``; the temporary file never outlives a
    failure (a SIGKILL can leave one, named ``.NAME.*.tmp``, which readers ignore). Returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # A fresh name rather than mkstemp: mkstemp's 0600 mode would survive the rename and hide the file from others.
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(temporary)
        os.chmod(temporary, 0o666 & ~_umask())  # some writers (safetensors) create 0600 files; use the usual mode
        write_point()
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        if error.errno is None or error.filename not in (None, str(temporary)):
            raise
        # a failed write() or close() names no file (a full disk read "while writing a file"), a failed open() the
        # temporary one, gone now: name the file being written
        raise OSError(error.errno, error.strerror, str(path)) from error
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def remove_stale_temporaries(folder: Path) -> None:
    """Delete the ``.NAME.*.tmp`` files that killed writers left in ``folder`` (not recursive)."""
    for stale in folder.glob(".*.tmp"):
        if stale.is_file() and not stale.is_symlink():
            stale.unlink(missing_ok=True)


def _umask() -> int:
    """The process's umask, read without loosening it: the umask is process-wide, and setting it to 0 to read it
    gave a file another thread created in between mode 0666. Linux (4.7 on) shows it in /proc/self/status; elsewhere
    it is set to 077 and back, so such a file is at worst private to its owner."""
    try:
        for line in PROCESS_STATUS.read_text(encoding="utf-8").splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
