"""Figure creation and atomic file writes: the one place that decides how a figure reaches the disk.

Figures are built with the object-oriented API (``matplotlib.figure.Figure`` on an Agg canvas), never through
``pyplot``: nothing is registered in pyplot's global figure list, no GUI backend is ever loaded and the user's own
backend (a notebook's, say) is left untouched. Every write goes to a temporary file in the target folder and is
then moved into place with ``os.replace``, so a killed process leaves either the old file or the new one, never a
half-written one; a folder of them (a report) is built beside its target and swapped in whole (``replace_folder``).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from markovformer.atomic import atomic_write, atomic_write_text, exclusive_lock

DPI = 100
# what a folder of figures may hold and still be replaced whole: the files this module writes, and the temporary
# files (".NAME.*.tmp") a killed atomic write leaves
FIGURE_FOLDER_FILES = (".png", ".html")
ResultT = TypeVar("ResultT")


def new_figure(width: float, height: float) -> Figure:
    """An Agg-backed figure of ``width`` x ``height`` inches with constrained layout."""
    figure = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def save_figure(figure: Figure, out: Path) -> Path:
    """Write ``figure`` as a PNG to ``out`` atomically, then release it (also when saving fails)."""
    try:
        return atomic_write(out, lambda path: figure.savefig(path, format="png", dpi=DPI))
    finally:
        figure.clear()


def write_text(text: str, out: Path) -> Path:
    """Write UTF-8 ``text`` to ``out`` atomically."""
    return atomic_write_text(out, text)


def replace_folder(out: Path, write: Callable[[Path], ResultT]) -> ResultT:
    """Build a folder with ``write(staging)`` and swap it in for ``out`` whole; returns what ``write`` returned.

    ``staging`` is a fresh folder beside ``out`` (``.NAME.staging-*``, on the same file system). Once ``write``
    returns, the old ``out`` is renamed away (``.NAME.replaced-*``), ``staging`` is renamed to ``out`` and the old
    folder is deleted: a reader finds the old folder or the new one, never a mix of the two (and, for the instant
    between the two renames, none). A failure in ``write`` deletes ``staging`` and leaves ``out`` as it was; what a
    killed process leaves beside ``out`` is deleted by the next call. Writers of one ``out`` (two `inspect` of a
    run) take turns on ``.NAME.lock`` beside it, so none deletes another's staging folder as a killed one's. Raises
    ValueError, before anything is written, when ``out`` is a file, holds anything but figures and pages
    (``FIGURE_FOLDER_FILES``), or holds files but no index.html (a folder of pictures, no report): replacing it
    would delete them.
    """
    out = Path(out)
    with exclusive_lock(out.parent / f".{out.name}.lock", "its filesystem takes no file locks, which keep two "
                        "writers of the folder apart; write it on another filesystem"):  # fmt: skip
        return _replace_folder(out, write)


def _replace_folder(out: Path, write: Callable[[Path], ResultT]) -> ResultT:
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for left in [*out.parent.glob(f".{out.name}.staging-*"), *out.parent.glob(f".{out.name}.replaced-*")]:
        shutil.rmtree(left, ignore_errors=True)
    staging = out.parent / f".{out.name}.staging-{uuid.uuid4().hex}"
    try:
        staging.mkdir()
        result = write(staging)
        replaced = out.parent / f".{out.name}.replaced-{uuid.uuid4().hex}"
        if out.exists():
            os.rename(out, replaced)
        try:
            os.rename(staging, out)
        except BaseException:
            if replaced.exists():
                os.rename(replaced, out)
            raise
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError) and error.errno is not None and _inside(error.filename, staging):
            # a failed write names the staging folder, gone now, or no file (a full disk): name the folder written
            raise OSError(error.errno, error.strerror, str(out)) from error
        raise
    shutil.rmtree(replaced, ignore_errors=True)
    return result


def _inside(filename: object, folder: Path) -> bool:
    """Whether an OSError's ``filename`` is ``folder``, a path in it, or no file."""
    if not isinstance(filename, (str, bytes)):
        return filename is None
    path = Path(os.fsdecode(filename))
    return path == folder or folder in path.parents


def _check_replaceable(out: Path) -> None:
    if out.is_file():
        raise ValueError(f"{out} is a file, not a folder of figures")
    if not out.is_dir():
        return
    entries = sorted(out.iterdir())
    for entry in entries:
        temporary = entry.name.startswith(".") and entry.name.endswith(".tmp")
        if not entry.is_file() or not (entry.suffix in FIGURE_FOLDER_FILES or temporary):
            raise ValueError(f"{out} holds {entry.name}, which is not a figure or page of a report: writing the "
                             "report there would delete it; choose a new or empty folder")  # fmt: skip
    if entries and not (out / "index.html").is_file():  # a folder of the user's own pictures, not a report
        raise ValueError(f"{out} holds no index.html: it is not a report folder, and writing the report there would "
                         f"delete {entries[0].name}; choose a new or empty folder")  # fmt: skip
