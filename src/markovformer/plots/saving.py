"""Figure creation and atomic file writes: the one place that decides how a figure reaches the disk.

Figures are built with the object-oriented API (``matplotlib.figure.Figure`` on an Agg canvas), never through
``pyplot``: nothing is registered in pyplot's global figure list, no GUI backend is ever loaded and the user's own
backend (a notebook's, say) is left untouched. Every write goes to a temporary file in the target folder and is
then moved into place with ``os.replace``, so a killed process leaves either the old file or the new one, never a
half-written one.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from markovformer.atomic import atomic_write, atomic_write_text

DPI = 100


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
