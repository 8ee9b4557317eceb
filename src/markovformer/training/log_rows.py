"""A run's CSV metrics log (``logs/metrics.csv``) read back as its logger (``training.metrics_log``) reads it: apart
from the logger, a Lightning one, so that what only reads a run's curves (``inspect``, the plots) imports no
Lightning."""

from __future__ import annotations

import csv
import io
from pathlib import Path


def read_log_rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """(columns, rows) of a metrics log; a last line without its newline (a write cut short) is left out."""
    if not path.is_file():
        return [], []
    text = path.read_text(encoding="utf-8", errors="replace")
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(text))
    rows = [row for row in reader if row.get("step")]
    return list(reader.fieldnames or []), rows
