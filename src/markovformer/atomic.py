"""Atomic file writes, the one way this library puts a file on disk: write a temporary file beside the target, then
rename it into place, so a killed process leaves the old file or the new one, never a half-written one.

Every write of a run (each atomic rename, each appended log row) is a *write point*: with the environment variable
``MARKOVFORMER_KILL_AT_WRITE=N`` the process kills itself with SIGKILL at its N-th write point, just before the
write lands (the temporary file is whole but not yet renamed). The crash tests use it to kill a run at every
write (they count a command's write points in their own process).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

# The errors of a write whose cause lies outside the program: once it is gone, the same command goes on.
NO_SPACE_ERRORS = (errno.ENOSPC, errno.EDQUOT)  # a full disk or quota
DENIED_ERRORS = (errno.EROFS, errno.EACCES, errno.EPERM)  # a read-only or forbidden place
WRITE_ERRORS = NO_SPACE_ERRORS + DENIED_ERRORS
KILL_AT_WRITE = "MARKOVFORMER_KILL_AT_WRITE"
PROCESS_STATUS = Path("/proc/self/status")  # where Linux shows the umask (``_umask``)
_writes_done = 0


def write_failure(error: OSError, where: str | Path, advice: str, reason: str | None = None) -> str:
    """The one wording of a failed write: what stopped it (a full disk or quota, else ``reason``, by default the
    error's cause), ``where`` it was writing, then ``advice``, what the user can do. A cause carries after "; " how
    to go on (``training.run_dir.continue_with_resume``): that part is the caller's, not the reason's."""
    if error.errno in NO_SPACE_ERRORS:
        full = "no space left on the device" if error.errno == errno.ENOSPC else "disk quota exceeded"
        return f"{full} while writing {where}; {advice}"
    reason = reason or (error.strerror or str(error)).partition("; ")[0]
    return f"cannot write {where} ({reason}); {advice}"


def write_point() -> None:
    """Count one write of this process; SIGKILL it at the write named by ``MARKOVFORMER_KILL_AT_WRITE``."""
    global _writes_done
    _writes_done += 1
    if os.environ.get(KILL_AT_WRITE) == str(_writes_done):
        os.kill(os.getpid(), signal.SIGKILL)


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


@contextlib.contextmanager
def exclusive_lock(lock: Path, without_locks: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``lock`` (created, with its folder) until the block ends, waiting while
    another process holds it: writers of one thing take turns, and the kernel releases a killed holder's lock. The
    holder deletes ``lock`` as it ends, so nothing is left behind; a waiter that then gets the deleted file's lock
    opens the name again. The file is opened read-only, so another user's lock file in a shared folder locks too.
    Where no lock file can be made (a read-only folder), the block runs unlocked: nothing will be written there
    anyway. On a filesystem that takes no locks (Lustre without -o flock: ENOSYS), ValueError naming ``lock`` and
    then ``without_locks``, what the user can do."""
    while True:
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            # read-only: flock needs no more, and another user's lock file (0644) opens so too
            descriptor = os.open(lock, os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError:
            descriptor = None
            break
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        except OSError as error:
            os.close(descriptor)
            raise ValueError(f"cannot lock {lock} ({error.strerror or error}): {without_locks}") from None
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(descriptor), os.stat(lock, follow_symlinks=False)):
                break  # the name still leads to the file this process locked
        os.close(descriptor)  # the holder before deleted it: lock the file now under the name
    try:
        yield
    finally:
        if descriptor is not None:
            with contextlib.suppress(OSError):  # (another user's file in a sticky folder stays; it still locks)
                lock.unlink()
            os.close(descriptor)  # releases the lock


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
