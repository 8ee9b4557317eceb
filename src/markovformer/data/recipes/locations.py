"""Where prepared data lives: the data directory (``$MARKOVFORMER_DATA``, else ``./data``) that ``markovformer data
prepare`` writes into and configs read from, and where a config's ``data/NAME`` may be found there
(``registry.find_prepared_file`` looks, and names the recipe that writes a missing file)."""

from __future__ import annotations

import os
from pathlib import Path

PREPARED_PREFIX = "data"  # configs write prepared files as data/NAME; the data directory may live elsewhere
REPOSITORY_ROOT = Path(__file__).resolve().parents[4]  # a source checkout's root (configs' paths are relative to it)


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
