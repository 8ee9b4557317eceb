"""Local Hugging Face datasets files as a source: the store of Parquet and JSONL rows equals each row's text encoded
directly, closed by the end-of-document token; URLs and hub names are refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from markovformer.data.readers.hf_dataset import load_hf_dataset_lm

datasets = pytest.importorskip("datasets", reason="the hf_dataset source needs the optional 'datasets' extra")

_TEXTS = [f"row {i}: the chain moves é ß € 漢字 😀 " + "state " * (i % 7) for i in range(60)]


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
@pytest.mark.parametrize("kind", ["parquet", "jsonl"])
def test_rows_are_tokenized_into_the_store_as_their_texts_encode(tmp_path, kind, tokenizer, vocab):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / f"rows.{kind}"
    if kind == "parquet":
        pq.write_table(pa.table({"id": list(range(len(_TEXTS))), "body": _TEXTS}), path, row_group_size=16)
    else:
        path.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(_TEXTS)), "utf-8")
    bundle = load_hf_dataset_lm(str(path), text_column="body", tokenizer=tokenizer, vocab_size=vocab, seq_len=8,
                                fractions=(0.8, 0.1, 0.1), cache_dir=tmp_path / "cache", num_proc=2)  # fmt: skip
    fitted, store = bundle.tokenizer, bundle.train.store
    expected = [i for text in _TEXTS for i in [*fitted.encode(text), fitted.end_of_document_id]]
    assert np.asarray(store.tokens[:]).tolist() == expected
    lengths = [len(fitted.encode(text)) + 1 for text in _TEXTS]
    starts = np.concatenate([[0], np.cumsum(lengths)])
    assert store.document_starts.tolist() == starts[:-1].tolist()
    # rows split in order: 48 train rows, 6 val, 6 test
    assert (bundle.train.start, bundle.train.stop, bundle.val.stop) == (0, starts[48], starts[54])
    assert bundle.splits["train"] == [0, 48] and bundle.test.stop == len(store)
    again = load_hf_dataset_lm(str(path), text_column="body", tokenizer=tokenizer, vocab_size=vocab, seq_len=8,
                               fractions=(0.8, 0.1, 0.1), cache_dir=tmp_path / "cache", fitted=fitted)  # fmt: skip
    assert again.train.store.folder == store.folder  # the same rows, column and tokenizer: the cached store


def test_urls_hub_names_and_missing_columns_are_refused(tmp_path):
    with pytest.raises(ValueError, match="is a URL: only local files"):
        load_hf_dataset_lm("https://example.org/rows.parquet", seq_len=8, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="'roneneldan/TinyStories' is no local file.*hub data set"):
        load_hf_dataset_lm("roneneldan/TinyStories", seq_len=8, cache_dir=tmp_path)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in _TEXTS), encoding="utf-8")
    with pytest.raises(ValueError, match="data.text_column='text' is not a column.*columns: body"):
        load_hf_dataset_lm(str(path), seq_len=8, cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
def test_a_text_column_of_numbers_or_with_a_missing_value_is_refused_naming_the_column(tmp_path, tokenizer, vocab):
    """A column of numbers (a CSV's `id`), or a row whose text is null among the train rows the tokenizer is fitted
    on, ended in a traceback (TypeError: 'int' object is not iterable); a null in the val or test rows was already
    refused. Each is a ValueError naming data.text_column."""
    options = {"tokenizer": tokenizer, "vocab_size": vocab, "seq_len": 8, "cache_dir": tmp_path / "cache"}
    numbers = tmp_path / "rows.csv"
    numbers.write_text("id,body\n" + "".join(f"{i},{json.dumps(t)}\n" for i, t in enumerate(_TEXTS)), "utf-8")
    with pytest.raises(ValueError, match="data.text_column='id' .*int64.*not text"):
        load_hf_dataset_lm(str(numbers), text_column="id", **options)
    for row in (3, len(_TEXTS) - 1):  # a train row; a test row
        texts = [None if i == row else t for i, t in enumerate(_TEXTS)]
        missing = tmp_path / f"missing-{row}.jsonl"
        missing.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts), "utf-8")
        with pytest.raises(ValueError, match="data.text_column='body': a row holds None, not a string"):
            load_hf_dataset_lm(str(missing), text_column="body", num_proc=1, **options)


@pytest.mark.parametrize("num_proc", [0, -2])
def test_a_process_count_below_one_is_refused(tmp_path, num_proc):
    """data.num_proc=0 or -2 tokenized silently with every core (0) or one process (-2), as if it were null or 1."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in _TEXTS), encoding="utf-8")
    with pytest.raises(ValueError, match=f"data.num_proc={num_proc} must be a positive integer"):
        load_hf_dataset_lm(str(path), seq_len=8, cache_dir=tmp_path / "cache", num_proc=num_proc)


def test_a_character_outside_the_train_rows_alphabet_is_an_error_from_every_tokenizing_process(tmp_path):
    """A val or test row with a character the train rows' char alphabet lacks raised UnknownCharacter in a
    process of datasets.map; that exception could not be unpickled (its __init__ takes two arguments, its args hold
    one), so with num_proc > 1 the run hung for ever at 100% CPU after a TypeError traceback (num_proc=1 raised)."""
    import pickle

    from markovformer.data.readers.token_store import UnknownCharacter

    again = pickle.loads(pickle.dumps(UnknownCharacter("Ж", 5)))
    assert (type(again), str(again), again.character, again.index) == (
        UnknownCharacter, str(UnknownCharacter("Ж", 5)), "Ж", 5)  # fmt: skip
    path = tmp_path / "rows.jsonl"
    texts = [*_TEXTS[:-1], "the chain moves Ж"]  # every other character is in the train rows
    path.write_text("".join(json.dumps({"body": t}) + "\n" for t in texts), encoding="utf-8")
    for processes in (1, 2):
        with pytest.raises(ValueError, match="data.text_column='body': a row holds 'Ж'.*not in the char alphabet"):
            load_hf_dataset_lm(str(path), text_column="body", seq_len=8, cache_dir=tmp_path / "cache",
                               num_proc=processes)  # fmt: skip


def test_empty_rowless_and_unmatched_data_files_are_refused_on_one_line_naming_them(tmp_path):
    """An empty JSONL file ended in a traceback (datasets' bare StopIteration); a file of no rows (a blank line, a
    CSV header alone) in datasets' 'Instruction "train" corresponds to no data!', naming no file; a glob matching
    nothing was called 'no local file, directory or glob'. Each is a ValueError naming the file or pattern."""
    empty, blank, header = tmp_path / "empty.jsonl", tmp_path / "blank.jsonl", tmp_path / "header.csv"
    empty.write_bytes(b"")
    blank.write_text("\n")
    header.write_text("id,body\n")
    cache = tmp_path / "cache"
    with pytest.raises(ValueError, match=f"^{empty}: the file is empty$"):
        load_hf_dataset_lm(str(empty), text_column="body", seq_len=8, cache_dir=cache)
    for path in (blank, header):
        with pytest.raises(ValueError, match=f"^data.data_files: {path} hold no rows$"):
            load_hf_dataset_lm(str(path), text_column="body", seq_len=8, cache_dir=cache)
    pattern = str(tmp_path / "*.parquet")
    with pytest.raises(ValueError, match=r"entry '.*\*\.parquet': the pattern matches no file$"):
        load_hf_dataset_lm(pattern, text_column="body", seq_len=8, cache_dir=cache)


def test_a_run_config_takes_data_files_as_one_path_or_a_list_and_builds_the_same_tokens(tmp_path):
    """The loader and `data show`'s help take one path; a run config's data.data_files='rows.jsonl' was refused as
    'has the wrong type: expected a list'."""
    from markovformer.training.build import build_data
    from markovformer.training.run_config import resolve_run_config

    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in _TEXTS), "utf-8")
    stores = []
    for files in (str(path), [str(path)]):
        data = {"source": "hf_dataset", "data_files": files, "seq_len": 8, "cache_dir": str(tmp_path / "c")}
        bundle = build_data(resolve_run_config({"task": "causal_lm", "data": data}))
        stores.append(np.asarray(bundle.train.store.tokens[:]).tolist())
    assert stores[0] == stores[1] and len(stores[0]) > 0


def test_a_bpe_vocabulary_smaller_than_asked_is_said_as_for_a_text_file(tmp_path, capsys):
    """A text file's run says when its train part offers fewer merges than data.vocab_size; rows of a local dataset
    gave the model the smaller vocabulary without a word."""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in _TEXTS), "utf-8")
    bundle = load_hf_dataset_lm(str(path), tokenizer="bpe", vocab_size=50_000, seq_len=8, cache_dir=tmp_path / "c")
    size = bundle.tokenizer.vocab_size
    assert size == len(bundle.tokenizer.hf_backend().get_vocab()) < 50_000
    assert f"data.vocab_size=50000: the train part of {path} offers no more merges, so the BPE vocabulary has " \
           f"{size} tokens" in capsys.readouterr().err
    load_hf_dataset_lm(str(path), tokenizer="bpe", vocab_size=size, seq_len=8, cache_dir=tmp_path / "c")
    assert "vocab_size" not in capsys.readouterr().err


def test_a_bpe_vocabulary_cut_short_by_fit_bytes_names_fit_bytes_as_for_a_text_file(tmp_path, capsys):
    """Rows of distinct words fitted on data.fit_bytes=1024 of their train part said the train part offered no more
    merges, where the whole part offers more: a text file's run names data.fit_bytes and the part's size, and so do
    they now (the size: the train rows' UTF-8 bytes)."""
    import random

    rng = random.Random(0)
    rows = [" ".join("".join(rng.choices("abcdefghij", k=6)) for _ in range(10)) for _ in range(300)]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": row}) + "\n" for row in rows), "utf-8")
    options = {"tokenizer": "bpe", "vocab_size": 50_000, "seq_len": 8, "cache_dir": tmp_path / "c"}
    sampled = load_hf_dataset_lm(str(path), fit_bytes=1024, **options).tokenizer.vocab_size
    whole = load_hf_dataset_lm(str(path), **options).tokenizer.vocab_size
    assert sampled < whole < 50_000  # the whole part offers more merges than the sample
    sample_line, whole_line = [line for line in capsys.readouterr().err.splitlines() if "data.vocab_size=" in line]
    train_bytes = sum(len(row.encode()) for row in rows[:270])  # the train part: the first 0.9 of the rows
    assert f"the data.fit_bytes=1024 bytes of the train part of {path} that BPE learned its merges on offer no more " \
           f"merges, so the BPE vocabulary has {sampled} tokens" in sample_line, sample_line  # fmt: skip
    assert f"raise data.fit_bytes (the train part has {train_bytes:,} bytes)" in sample_line, sample_line
    assert f"the train part of {path} offers no more merges" in whole_line and "fit_bytes" not in whole_line


def test_a_private_cache_is_said_as_for_a_text_run_before_the_rows_are_loaded(tmp_path, monkeypatch):
    """In another user's private token cache, an hf_dataset run reached datasets.load_dataset, whose refused
    `cache/hf_datasets` the command line said as 'cannot write ... (Permission denied); make it writable', naming
    neither data.cache_dir nor $MARKOVFORMER_CACHE: the cache is now looked in first, as by a text run (its line).
    (Root reads any folder: the refused look-ups are simulated as in test_token_store.)"""
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in _TEXTS), encoding="utf-8")
    cache = tmp_path / "cache"
    cache.mkdir()
    real_stat = Path.stat

    def private(self, *args, **kwargs):
        if self.parent == cache and not self.name.startswith("."):
            raise PermissionError(13, "Permission denied", str(self))
        return real_stat(self, *args, **kwargs)

    def no_load(*args, **kwargs):
        raise AssertionError("datasets.load_dataset was called before the cache was looked in")

    monkeypatch.setattr(Path, "stat", private)
    monkeypatch.setattr(datasets, "load_dataset", no_load)
    told = rf"^cannot read the token cache {cache} \(Permission denied\): give a folder of your own as data.cache_dir"
    with pytest.raises(ValueError, match=told + r" or as \$MARKOVFORMER_CACHE"):
        load_hf_dataset_lm(str(path), seq_len=8, cache_dir=cache)


def test_fractions_say_what_they_share_rows_by_count_here_and_bytes_for_the_text_source():
    """The same JSONL file split otherwise through the two sources (2,660 paragraphs of Python's sources: hf_dataset's
    val held rows 2394-2527, 134 windows; text with documents: jsonl cut it at bytes, 285 windows), while both
    options said 'shares of the data' and the README 'read as text is'. The help says which."""
    from markovformer.data.options import option_help
    from markovformer.data.splits import contiguous_split

    assert "rows, by count" in option_help("hf_dataset", "fractions")
    assert "bytes" in option_help("text", "fractions")
    assert contiguous_split(2660, (0.9, 0.05, 0.05))[1] == range(2394, 2527)  # the rows, whatever their lengths
