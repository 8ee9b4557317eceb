"""Data recipes by name: ``markovformer data prepare NAME`` fetches a public data set and writes it, converted, as
one file in the data directory, or one folder where a data source reads two files (DNA: ``sequences.fa`` and
``labels.tsv``). To add one: a function ``prepare(out_path) -> Path`` that writes atomically (nothing half-written
on failure), and an entry in ``DATA_RECIPES``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from markovformer.data.recipes.de_en import prepare_de_en
from markovformer.data.recipes.finance import prepare_nasdaq, prepare_sp500
from markovformer.data.recipes.genomics import (
    LABELLED_FASTA_FILES,
    prepare_drosophila_promoters,
    prepare_promoters,
    prepare_splice,
)
from markovformer.data.recipes.locations import data_directory, prepared_candidates
from markovformer.data.recipes.shakespeare import prepare_tiny_shakespeare
from markovformer.data.recipes.speech import prepare_digits


@dataclass(frozen=True)
class DataRecipe:
    summary: str
    file_name: str  # the file (or folder) it writes inside the data directory
    prepare: Callable[[Path], Path]
    usage: str  # how to use the file; ``{path}`` is replaced by where it was written
    folder_files: tuple[str, ...] = ()  # when ``file_name`` is a folder: the files written inside it


_DNA_FILES = "data.path={path}/sequences.fa data.labels={path}/labels.tsv"
_PROMOTERS_USAGE = f"classify the sequences: markovformer train configs/dna_fasta.yaml {_DNA_FILES}"
_MARKET_USAGE = (
    "classify windows of days: markovformer train configs/finance_sp500.yaml data.path={path} (its features, "
    "next-day labels and fractions fit the file: thresholds and regimes were fitted on its first 70 % of rows; "
    "the regime column gives F1 by volatility regime)"
)

DATA_RECIPES: dict[str, DataRecipe] = {
    "tiny-shakespeare": DataRecipe(
        "Tiny Shakespeare, 1,115,394 characters (karpathy/char-rnn on GitHub, SHA-256 checked)",
        "tiny_shakespeare.txt",
        prepare_tiny_shakespeare,
        "the character and BPE language models and the Scan Markov model read it: markovformer train "
        "configs/text_char.yaml (or scan_shakespeare.yaml, text_bpe.yaml); markovformer experiment scan-shakespeare",
    ),
    "de-en": DataRecipe(
        "German-English example sentences of the Ding dictionary (Debian trans-de-en)",
        "de_en.tsv",
        prepare_de_en,
        "train a translation model on it: markovformer train configs/mat_de_en.yaml data.path={path}",
    ),
    "splice": DataRecipe(
        "UCI splice junctions: 60 nt, exon/intron (EI), intron/exon (IE) or neither (N), deduplicated "
        "(Debian r-cran-mlbench)",
        "splice",
        prepare_splice,
        "classify the sequences, strand-specific (no reverse-complement augmentation): markovformer train "
        f"configs/dna_splice.yaml {_DNA_FILES}",
        LABELLED_FASTA_FILES,
    ),
    "promoters": DataRecipe(
        "UCI E. coli promoters: 106 x 57 nt, promoter or not (Debian r-cran-kernlab)",
        "promoters",
        prepare_promoters,
        _PROMOTERS_USAGE,
        LABELLED_FASTA_FILES,
    ),
    "drosophila-promoters": DataRecipe(
        "Drosophila (dm3) 200 nt promoters vs far-upstream background of RefSeq genes (Debian r-bioc-biostrings)",
        "drosophila_promoters",
        prepare_drosophila_promoters,
        _PROMOTERS_USAGE,
        LABELLED_FASTA_FILES,
    ),
    "sp500": DataRecipe(
        "S&P 500 daily bars 1999-2018 (the arch package): next-day move down/flat/up with volatility regimes",
        "sp500.csv",
        prepare_sp500,
        _MARKET_USAGE,
    ),
    "nasdaq": DataRecipe(
        "NASDAQ Composite daily bars 1999-2018 (the arch package): next-day move down/flat/up, volatility regimes",
        "nasdaq.csv",
        prepare_nasdaq,
        _MARKET_USAGE,
    ),
    "digits": DataRecipe(
        "spoken number words: espeak-ng voices plus noise, real Asterisk recordings as test; 80 log-Mel per 10 ms",
        "digits.safetensors",
        prepare_digits,
        "CTC recognition (WER): markovformer train configs/speech_digits.yaml data.path={path} "
        "(its test set: unseen voices; data.test_set=recorded scores the real recordings)",
    ),
}


def recipe_writing(path: str | Path) -> str | None:
    """The name of the recipe that writes a file like ``path`` into the data directory (its name, or for a folder
    recipe its folder's name and a file inside), or None."""
    path = Path(path)
    return next((name for name, recipe in DATA_RECIPES.items() if recipe.file_name == path.name
                 or (recipe.file_name == path.parent.name and path.name in recipe.folder_files)), None)  # fmt: skip


def find_prepared_file(path: str | Path, key: str = "data.path") -> Path:
    """The first existing candidate of ``path`` (``locations.prepared_candidates``), or ValueError on one line naming
    ``key``, the path and, when a data recipe writes a file of that name, the command that prepares it."""
    candidates = prepared_candidates(path)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    recipe = recipe_writing(path)
    hint = f"; `markovformer data prepare {recipe}` writes it into {data_directory()}/" if recipe else ""
    if not recipe and len(candidates) > 1 and candidates[-1] != candidates[0]:  # the data directory looked in too
        hint = f" (nor {candidates[-1]}: $MARKOVFORMER_DATA is {data_directory()})"
    raise ValueError(f"{key}={str(path)!r}: no such file{hint}")
