"""Atomic file writes, the one way this library puts a file on disk: write a temporary file beside the target, then
rename it into place, so a killed process leaves the old file or the new one, never a half-written one."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path


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
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))
