"""What every experiment writes: ``report.md`` (tables, text, figures), ``results.json`` (the numbers), and one
cached JSON per finished cell under ``cells/`` so a killed experiment resumes where it stopped."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from markovformer.atomic import atomic_write_text


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isfinite(value) and value == round(value, 2):
            return f"{value:g}"  # settings such as p = 0.2 or lr = 0.001, not measurements
        return f"{value:.4f}" if math.isfinite(value) and abs(value) < 1e4 else f"{value:.4g}"
    return str(value)


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats to 4 decimals."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


class ExperimentReport:
    """Accumulates an experiment's report and writes it into ``out_dir`` atomically.

    ``cached(key, compute)`` returns ``compute()``'s JSON-serialisable result, stored in ``cells/<key>.json`` with
    the experiment's ``settings`` the first time: rerunning a killed experiment skips every cell that already
    finished under the same settings, and recomputes cells stored under other settings. A cell that depends on
    less than all the settings passes what it depends on as ``depends_on``: it is then reused by any run of the
    experiment that would compute it the same way (another seed list, more domains, a second process on others).
    """

    def __init__(
        self, out_dir: str | Path, title: str, log: Callable[[str], None] = print, settings: dict | None = None
    ) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.title = title
        self.log = log
        self.settings = json.loads(json.dumps(settings or {}))  # as JSON would store it (tuples become lists)
        self.sections: list[str] = []
        self.results: dict[str, Any] = {}

    def cached(self, key: str, compute: Callable[[], Any], depends_on: dict | None = None) -> Any:
        if not re.fullmatch(r"[A-Za-z0-9_.=+-]+", key):
            raise ValueError(f"cell key {key!r} must be a plain file name (letters, digits, _.=+-)")
        settings = self.settings if depends_on is None else json.loads(json.dumps(depends_on))
        path = self.out_dir / "cells" / f"{key}.json"
        if path.is_file():
            stored = json.loads(path.read_text())
            if stored.get("settings") == settings:
                self.log(f"  {key}: done earlier, read from {path}")
                return stored["result"]
            self.log(f"  {key}: stored under other settings, recomputing")
        value = compute()
        path.parent.mkdir(exist_ok=True)
        atomic_write_text(path, json.dumps({"settings": settings, "result": value}, indent=1) + "\n")
        return value

    def text(self, markdown: str) -> None:
        self.sections.append(markdown.strip())

    def table(self, columns: Sequence[str], rows: Sequence[Sequence[Any]], caption: str = "") -> None:
        self.sections.append((f"{caption}\n\n" if caption else "") + markdown_table(columns, rows))

    def figure(self, path: Path, caption: str) -> None:
        relative = Path(path).resolve().relative_to(self.out_dir.resolve()).as_posix()
        self.sections.append(f"![{caption}]({relative})\n\n*{caption}*")

    def write(self) -> Path:
        """Write ``report.md`` and ``results.json``; returns the report's path."""
        body = f"# {self.title}\n\n" + "\n\n".join(self.sections) + "\n"
        atomic_write_text(self.out_dir / "results.json", json.dumps(self.results, indent=2) + "\n")
        return atomic_write_text(self.out_dir / "report.md", body)
