"""How the command line ends: the exit statuses, the one line an error a user can act on prints, and a stdout whose
reader has gone. ``main`` (``cli/main.py``) uses them; a bug keeps the interpreter's traceback and status 1."""

from __future__ import annotations

import errno
import os
import select
import sys

from markovformer.atomic import DENIED_ERRORS, NO_SPACE_ERRORS, write_failure
from markovformer.training.trainer_config import RunTerminated, TrainingDiverged

EXIT_BAD_INPUT = 2
EXIT_DIVERGED = 1
EXIT_STDOUT_CLOSED = 141  # 128 + SIGPIPE
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended
MAX_ERROR_LINE = 2000  # characters of an error's line that are printed
AGAIN = "run the command again"  # after a full disk or a denied write; a run that can be resumed says so itself
# Packages of the optional extras, by import name; any other missing package is one of the command's dependencies.
OPTIONAL_PACKAGES = {"rdata": "data", "arch": "data", "pyfaidx": "data", "datasets": "datasets", "pytest": "dev",
                     "ruff": "dev"}


def missing_package_message(error: ModuleNotFoundError) -> str:
    """One line naming the missing package and the pip command that installs it."""
    package = (error.name or str(error)).split(".")[0]
    extra = OPTIONAL_PACKAGES.get(package)
    if extra is not None:
        return f"this command needs the package {package!r}: pip install \"markovformer[{extra}]\""
    return (f"this command needs the package {package!r}, a dependency of markovformer's command line: "
            f"pip install markovformer (or `make setup` in a clone) installs it")  # fmt: skip


def stdout_reader_left() -> bool:
    """Whether standard output is a pipe whose reader has gone (poll reports an error on it); if so, it is pointed
    at os.devnull so that the interpreter's flush at exit does not fail again."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLERR)
        if not poller.poll(0):
            return False
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return True
    except (AttributeError, OSError, ValueError):  # no poll here, or stdout has no file descriptor
        return False


def exit_status(error: BaseException) -> int | None:
    """The exit status of an error a user can act on (the same with --debug, which prints the traceback instead of
    ``error_message``); None for any other, a bug."""
    if isinstance(error, TrainingDiverged):
        return EXIT_DIVERGED
    if isinstance(error, RunTerminated):
        return error.exit_status
    if isinstance(error, (ModuleNotFoundError, ValueError, OSError, MemoryError)):
        return EXIT_BAD_INPUT
    if isinstance(error, RuntimeError) and is_out_of_memory(error):  # torch's out-of-memory errors
        return EXIT_BAD_INPUT
    return None


def error_message(error: BaseException) -> str:
    """The one line printed for an error ``exit_status`` knows."""
    if isinstance(error, ModuleNotFoundError):
        return missing_package_message(error)
    if isinstance(error, (TrainingDiverged, RunTerminated)):
        return str(error)
    return error_line(error)


def is_out_of_memory(error: BaseException) -> bool:
    text = str(error)
    return type(error).__name__ == "OutOfMemoryError" or "can't allocate memory" in text or "out of memory" in text


def error_line(error: BaseException) -> str:
    """One line for a user's error: the message's first line; for resource errors, what ran out and what to change."""

    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if len(first) > MAX_ERROR_LINE:  # a message quoting a huge input: the start names the problem
        first = first[:MAX_ERROR_LINE] + " ..."
    if isinstance(error, MemoryError) or is_out_of_memory(error):
        return (f"out of memory ({first[:200]}); lower trainer.batch_size, trainer.eval_batch_size (eval: "
                f"--batch-size) or the model's size (model.d_model, model.n_layers)")  # fmt: skip
    if isinstance(error, OSError) and error.errno is not None:
        where = error.filename or "a file"
        # a run's write error says after "; " how to continue it (training.run_dir.continue_with_resume)
        told = (error.strerror or "").partition("; ")[2]
        then = told or AGAIN
        if error.errno in NO_SPACE_ERRORS:
            return write_failure(error, where, f"free some space, then {then}")
        # only a write says how to go on: one under a folder this user may not search is not taken for a read
        if error.errno in DENIED_ERRORS and error.errno != errno.EROFS and not told and _read_denied(where):
            return f"cannot read {where}: permission denied"
        if error.errno in DENIED_ERRORS:
            return write_failure(error, where, f"make it writable, then {then}")
        return f"{where}: {error.strerror}"
    return first


def _read_denied(path: str) -> bool:
    """Whether a denial on ``path`` was a read's (an error does not say which): the file is there and this user may
    not read it, or a folder above it may not be opened. A denied write's file is readable, or not there yet."""
    try:
        os.stat(path)
    except PermissionError:  # a folder above it may not be searched: nothing in it can be read
        return True
    except (OSError, ValueError):  # not there ("a file": none named): a write that would create it
        return False
    return not os.access(path, os.R_OK)
