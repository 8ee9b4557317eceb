"""Where prepared data lives: the data directory (``$MARKOVFORMER_DATA``, else ``./data``) that ``markovformer data
prepare`` writes into and configs read from, and the lookup that turns a config's ``data/NAME`` into a file there."""

from __future__ import annotations

import os
from pathlib import Path

PREPARED_PREFIX = "data"  # configs write prepared files as data/NAME; the data directory may live elsewhere
REPOSITORY_ROOT = Path(__file__).resolve().parents[3]  # a source checkout's root (configs' paths are relative to it)


def data_directory() -> Path:
    """The data directory: ``$MARKOVFORMER_DATA`` when set, else ``data`` under the working directory."""
    return Path(os.environ.get("MARKOVFORMER_DATA") or PREPARED_PREFIX)


def prepared_candidates(path: str | Path) -> list[Path]:
    """Where ``path`` may be, in order: as given, and for a relative ``data/NAME`` the data directory's ``NAME``."""
    path = Path(path)
    candidates = [path]
    if not path.is_absolute() and path.parts[:1] == (PREPARED_PREFIX,) and len(path.parts) > 1:
        candidates.append(data_directory().joinpath(*path.parts[1:]))
    return candidates


def find_prepared_file(path: str | Path, key: str = "data.path") -> Path:
    """The first existing candidate of ``path`` (see ``prepared_candidates``), or ValueError on one line naming
    ``key``, the path and, when a data recipe writes a file of that name, the command that prepares it."""
    for candidate in prepared_candidates(path):
        if candidate.is_file():
            return candidate
    # deferred: recipes imports every preparing module, and shakespeare.py imports this one (a real cycle)
    from markovformer.data.recipes import recipe_writing

    recipe = recipe_writing(Path(path).name)
    hint = f"; `markovformer data prepare {recipe}` writes it into {data_directory()}/" if recipe else ""
    raise ValueError(f"{key}={str(path)!r}: no such file{hint}")
