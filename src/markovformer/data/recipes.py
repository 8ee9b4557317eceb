"""Data recipes by name: ``markovformer data prepare NAME`` fetches a public data set and writes it, converted, as
one file in the data directory. To add one: a function ``prepare(out_path) -> Path`` that writes atomically, and
an entry in ``DATA_RECIPES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from markovformer.data.translation.de_en import prepare_de_en


@dataclass(frozen=True)
class DataRecipe:
    summary: str
    file_name: str  # what it writes inside the data directory
    prepare: Callable[[Path], Path]
    usage: str  # how to use the file; ``{path}`` is replaced by where it was written


DATA_RECIPES: dict[str, DataRecipe] = {
    "de-en": DataRecipe(
        "German-English example sentences of the Ding dictionary (Debian trans-de-en)",
        "de_en.tsv",
        prepare_de_en,
        "train a translation model on it: markovformer train configs/mat_de_en.yaml data.path={path}",
    ),
}
