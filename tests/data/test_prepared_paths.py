"""Prepared files found through the data directory by every file source (``data/NAME`` under ``$MARKOVFORMER_DATA``),
their missing-file errors naming the recipe that writes them, and each recipe's usage naming a config made for it."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest
import torch

from markovformer.data.recipes.finance import DAILY_FEATURES, FRACTIONS, daily_move_table, synthetic_bars, write_csv
from markovformer.data.recipes.genomics import write_labelled_fasta
from markovformer.data.recipes.registry import DATA_RECIPES, find_prepared_file, recipe_writing
from markovformer.data.recipes.speech import SPEECH_SPLITS, write_speech_features
from markovformer.data.sources import (
    DATA_SOURCES,
    CsvSeriesSource,
    FastaSource,
    SpeechFeaturesSource,
    TranslationFileSource,
)
from markovformer.training.config_files import shipped_config
from markovformer.training.run_config import apply_overrides, load_yaml


@pytest.fixture
def store(tmp_path, monkeypatch) -> Path:
    """An empty working directory and a data directory elsewhere, named by ``$MARKOVFORMER_DATA``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARKOVFORMER_DATA", str(tmp_path / "store"))
    return tmp_path / "store"


def test_fasta_source_reads_a_prepared_folder_from_the_data_directory(store):
    source = FastaSource(path="data/splice/sequences.fa", labels="data/splice/labels.tsv")
    with pytest.raises(ValueError, match=r"data.path='data/splice/sequences.fa': no such file; "
                                         r"`markovformer data prepare splice` writes it into .*store/$"):  # fmt: skip
        source.build(seed=0)
    records = [(f"r{i}", "ACGTACGTAC"[i % 4 :] + "GGT", ["EI", "IE", "N"][i % 3]) for i in range(30)]
    write_labelled_fasta(records, store / "splice")
    bundle = source.build(seed=0)
    assert bundle.info["label_names"] == ["EI", "IE", "N"]
    assert len(bundle.train) + len(bundle.val) + len(bundle.test) == 30
    (store / "splice" / "labels.tsv").unlink()
    with pytest.raises(ValueError, match=r"data.labels='data/splice/labels.tsv': no such file; .*prepare splice"):
        source.build(seed=0)


def test_csv_series_source_reads_a_prepared_market_file_from_the_data_directory(store):
    source = CsvSeriesSource(path="data/sp500.csv", feature_columns=list(DAILY_FEATURES), window=8, label_leads=1)
    with pytest.raises(ValueError, match=r"data.path='data/sp500.csv': no such file; .*data prepare sp500` writes"):
        source.build(seed=0)
    header, rows, _ = daily_move_table(synthetic_bars(300))
    write_csv(store / "sp500.csv", header, rows)
    bundle = source.build(seed=0)
    assert bundle.info["input_dim"] == len(DAILY_FEATURES) and len(bundle.train) > 0
    with pytest.raises(ValueError, match=r"data prepare nasdaq` writes"):
        dataclasses.replace(source, path="data/nasdaq.csv").build(seed=0)


def test_speech_features_source_reads_a_prepared_file_from_the_data_directory(store):
    source = SpeechFeaturesSource(path="data/digits.safetensors", test_set="synthetic")
    with pytest.raises(ValueError, match=r"data.path='data/digits.safetensors': no such file; .*prepare digits`"):
        source.build(seed=0)
    generator = torch.Generator().manual_seed(0)
    utterances = [(torch.randn(6 + i, 80, generator=generator), "one two", SPEECH_SPLITS[i % 4]) for i in range(8)]
    write_speech_features(store / "digits.safetensors", utterances, {})
    bundle = source.build(seed=0)
    assert [len(part) for part in (bundle.train, bundle.val, bundle.test)] == [2, 2, 2]


def test_translation_file_source_reads_prepared_files_from_the_data_directory(store):
    source = TranslationFileSource(path="data/de_en.tsv", vocab_size=300, fractions=(0.5, 0.25, 0.25))
    with pytest.raises(ValueError, match=r"data.path='data/de_en.tsv': no such file; .*data prepare de-en` writes"):
        source.build(seed=0)
    store.mkdir()
    pairs = [(f"quelle {i} satz", f"target {i} sentence") for i in range(20)]
    (store / "de_en.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    assert len(source.build(seed=0).train) == 10
    (store / "de.txt").write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    (store / "en.txt").write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    aligned = dataclasses.replace(source, path="data/de.txt", target_path="data/en.txt").build(seed=0)
    assert aligned.splits["num_pairs"] == 20 and aligned.splits["target_path"] == str(store / "en.txt")
    missing = rf"data.target_path='data/fr.txt': no such file \(nor {store}/fr.txt: \$MARKOVFORMER_DATA is {store}\)$"
    with pytest.raises(ValueError, match=missing):  # no recipe writes it
        dataclasses.replace(source, path="data/de.txt", target_path="data/fr.txt").build(seed=0)


def test_a_folder_recipe_is_named_for_the_files_it_writes_only():
    assert recipe_writing("data/splice/labels.tsv") == "splice"
    assert recipe_writing("data/drosophila_promoters/sequences.fa") == "drosophila-promoters"
    assert recipe_writing("data/splice/notes.txt") is None and recipe_writing("data/other/sequences.fa") is None
    with pytest.raises(ValueError, match=r"data prepare promoters` writes"):
        find_prepared_file("data/promoters/sequences.fa")


# The source each recipe's file is read by, and what its config must hold beyond the file paths.
RECIPE_CONFIGS = {
    "tiny-shakespeare": ("text", {}),
    "de-en": ("translation_file", {}),
    "splice": ("fasta", {"reverse_complement": False}),  # splice classes are strand-specific
    "promoters": ("fasta", {}),
    "drosophila-promoters": ("fasta", {}),
    "sp500": ("csv_series", {"feature_columns": list(DAILY_FEATURES), "label_leads": 1, "fractions": list(FRACTIONS)}),
    "nasdaq": ("csv_series", {"feature_columns": list(DAILY_FEATURES), "label_leads": 1, "fractions": list(FRACTIONS)}),
    "digits": ("speech_features", {}),
}


@pytest.mark.parametrize("name", sorted(DATA_RECIPES))
def test_each_recipe_s_usage_trains_a_shipped_config_made_for_its_file(name):
    recipe = DATA_RECIPES[name]
    written = f"data/{recipe.file_name}"
    words = shlex.split(recipe.usage.format(path=written))
    command = words.index("markovformer")
    assert words[command + 1] == "train"
    config = words[command + 2]
    data = apply_overrides(load_yaml(shipped_config(config)), [w for w in words if w.startswith("data.")])["data"]
    source, expected = RECIPE_CONFIGS[name]
    assert data["source"] == source and {key: data.get(key) for key in expected} == expected
    assert set(data) - {"source"} <= {field.name for field in dataclasses.fields(DATA_SOURCES[source])}
    files = [data[key] for key in ("path", "labels") if key in data]
    inside = [str(Path(written, file)) for file in recipe.folder_files] if recipe.folder_files else [written]
    assert sorted(files) == sorted(inside)


def test_a_data_file_missing_from_the_data_directory_is_refused_naming_where_it_was_sought(store):
    """$MARKOVFORMER_DATA pointing at the wrong folder (or a file) read 'data.path='data/corp.txt': no such file', as
    if data/ in the working folder were the only place looked in."""
    with pytest.raises(ValueError, match=rf"^data.path='data/corp.txt': no such file \(nor {store}/corp.txt: "
                                         rf"\$MARKOVFORMER_DATA is {store}\)$"):  # fmt: skip
        find_prepared_file("data/corp.txt")
    (store / "corp.txt").parent.mkdir()
    (store / "corp.txt").write_text("text\n")
    assert find_prepared_file("data/corp.txt") == store / "corp.txt"


def test_a_glob_of_fasta_files_reads_as_the_file_they_would_make_joined(tmp_path):
    """data.path: chr*.fa (a genome written one file a chromosome) was refused as 'no such file', where the text
    source reads such a glob. The fasta source reads each matched file's records, the files in sorted order (as the
    text source orders them): the examples and splits of their records in one file. An id in two files is refused
    naming both."""
    import random

    from markovformer.data.readers.fasta import write_fasta

    rng = random.Random(4)
    records = [(f"r{i}", "".join(rng.choices("ACGT", k=30))) for i in range(30)]
    labels = tmp_path / "labels.tsv"
    labels.write_text("".join(f"r{i}\t{'ab'[i % 2]}\n" for i in range(30)))
    write_fasta(records[20:], tmp_path / "chr2.fa")
    write_fasta(records[:20], tmp_path / "chr1.fa")
    (tmp_path / "joined").mkdir()
    write_fasta(records, tmp_path / "joined" / "genome.fa")
    globbed = FastaSource(path=str(tmp_path / "chr*.fa"), labels=str(labels)).build(seed=3)
    joined = FastaSource(path=str(tmp_path / "joined" / "genome.fa"), labels=str(labels)).build(seed=3)
    assert globbed.splits == joined.splits
    for name in ("train", "val", "test"):
        assert [example["input_ids"].tolist() for example in getattr(globbed, name)] == [
            example["input_ids"].tolist() for example in getattr(joined, name)], name  # fmt: skip
    write_fasta([("r3", "ACGT")], tmp_path / "chr3.fa")
    with pytest.raises(ValueError, match=f"^{tmp_path / 'chr3.fa'}: record id 'r3' is also a record of "
                                         f"{tmp_path / 'chr1.fa'}"):  # fmt: skip
        FastaSource(path=str(tmp_path / "chr*.fa"), labels=str(labels)).build(seed=3)


def test_a_glob_given_to_a_source_of_one_file_is_refused_as_a_glob(tmp_path):
    """csv_series reads one file (a series in time order): a glob of CSV files was refused as 'no such file', though
    it matched two. It is refused as a pattern, naming how many files it matches."""
    for name in ("2023.csv", "2024.csv"):
        (tmp_path / name).write_text("x,label\n1,a\n")
    with pytest.raises(ValueError, match=r"^data.path='.*/\*\.csv' is a glob pattern \(it matches 2 files\); "
                                         r"this data source reads one file"):  # fmt: skip
        CsvSeriesSource(path=str(tmp_path / "*.csv")).build(seed=0)
