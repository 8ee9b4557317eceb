"""Local Hugging Face ``datasets`` files (JSONL, Parquet, CSV, Arrow) as a language-model source: each row's text
column is a document, tokenized with ``Dataset.map(batched=True, num_proc=...)`` into the same memory-mapped token
store as text files (``readers.token_store``), then cut into windows as ``readers.text`` cuts them.

Only local files: a URL or a hub name is refused (no network). ``datasets`` is an optional extra
(``pip install 'markovformer[datasets]'``), imported only here.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from pathlib import Path

import numpy as np

from markovformer.data.bundle import DataBundle
from markovformer.data.readers.text import store_bundle
from markovformer.data.readers.text_stream import content_key, file_size, resolve_text_paths
from markovformer.data.readers.token_store import (
    STORE_FORMAT,
    TOKENS_FILE,
    UnknownCharacter,
    append_array,
    cache_holds,
    cache_root,
    finish_store,
    open_or_write,
    token_dtype,
)
from markovformer.data.readers.tokenized_text import TokenizedText
from markovformer.data.readers.tokenizer import END_OF_DOCUMENT, PAD_TOKEN, BPETokenizer, CharTokenizer
from markovformer.data.splits import contiguous_split

# the ``datasets`` builder of each file kind
BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
_ROWS_PER_READ = 1000


def local_data_files(data_files: str | list[str]) -> list[Path]:
    """The local files ``data_files`` names (each a file, a directory or a glob), all of one kind in ``BUILDERS``.
    A URL or a name that is no local path (a hub data set) is refused."""
    entries = [data_files] if isinstance(data_files, str) else list(data_files or [])
    if not entries:
        raise ValueError("data.data_files is required: local JSONL, Parquet, CSV or Arrow files")
    files = []
    for entry in entries:
        entry = str(entry)
        if "://" in entry or entry.startswith("hf:"):
            raise ValueError(f"data.data_files entry {entry!r} is a URL: only local files are read (no network); "
                             f"download it first")  # fmt: skip
        try:
            files += resolve_text_paths(entry)
        except ValueError as error:
            if glob.has_magic(entry) or Path(entry).is_dir():  # a pattern or folder of no files: say so
                raise ValueError(f"data.data_files entry {str(error).removeprefix('data.path=')}") from None
            raise ValueError(f"data.data_files entry {entry!r} is no local file, directory or glob (a hub data set "
                             f"name is not fetched: download its files and give their paths)") from None  # fmt: skip
    kinds = {BUILDERS.get(file.suffix.lower()) for file in files}
    if None in kinds or len(kinds) != 1:
        odd = next((file for file in files if file.suffix.lower() not in BUILDERS), files[0])
        raise ValueError(f"data.data_files must all be one of {sorted(BUILDERS)} of one kind; got {odd} "
                         f"among kinds {sorted(map(str, kinds))}")  # fmt: skip
    for file in files:
        file_size(file)  # an empty or unreadable file, named (datasets stopped with a bare StopIteration)
    return files


def load_hf_dataset_lm(
    data_files: str | list[str],
    *,
    num_proc: int | None = None,
    fitted: CharTokenizer | BPETokenizer | None = None,
    **options,
) -> DataBundle:
    """Rows of local data files as next-token examples: rows are split in order (train, val, test; row ranges in
    ``splits``), the tokenizer is fitted on the train rows (char: all of them; BPE: rows spread evenly, about
    ``fit_bytes`` of text) unless ``fitted`` is given, and every row becomes a document closed by the
    end-of-document token in a token store cached by the files' content keys, the column, the split and the
    tokenizer. ``num_proc``: processes ``map`` tokenizes with (default: the cores available). ``options``: the fields
    of ``TokenizedText``, as for ``readers.text.load_text_lm``."""
    tokenized = TokenizedText(**options)  # the options' one list: defaulted and checked there
    tokenized.check(fitted, end_of_document=True)  # every row is a document
    if num_proc is not None and (isinstance(num_proc, bool) or not isinstance(num_proc, int) or num_proc < 1):
        raise ValueError(f"data.num_proc={num_proc!r} must be a positive integer (or null: the cores available)")
    text_column, fractions = tokenized.text_column, tokenized.fractions
    files = local_data_files(data_files)
    datasets = _import_datasets()
    root = cache_root(tokenized.cache_dir)
    # before datasets writes its copy there: a cache that cannot be looked in is said as for a text run
    cache_holds(root, "hf_datasets")
    builder = BUILDERS[files[0].suffix.lower()]
    try:
        dataset = datasets.load_dataset(builder, data_files=[str(file) for file in files], split="train",
                                        cache_dir=str(root / "hf_datasets"))  # fmt: skip
    except ValueError as error:  # files of no rows: datasets says 'Instruction "train" corresponds to no data!'
        what = "hold no rows" if "corresponds to no data" in str(error) else f"cannot be read ({error})"
        raise ValueError(f"data.data_files: {', '.join(map(str, files))} {what}") from None
    if len(dataset) == 0:
        raise ValueError(f"data.data_files: {', '.join(map(str, files))} hold no rows")
    if text_column not in dataset.column_names:
        raise ValueError(f"data.text_column={text_column!r} is not a column of {files[0]} (columns: "
                         f"{', '.join(dataset.column_names)})")  # fmt: skip
    feature = dataset.features[text_column]
    if getattr(feature, "dtype", None) not in ("string", "large_string"):  # numbers, lists, all-null: no text
        raise ValueError(f"data.text_column={text_column!r} of {files[0]} holds {getattr(feature, 'dtype', feature)}, "
                         f"not text: name a column of strings")  # fmt: skip
    dataset = dataset.select_columns([text_column])
    ranges = contiguous_split(len(dataset), fractions)
    if fitted is None:
        fitted = _fit(dataset, ranges[0], text_column, tokenized)
        tokenized.announce_fitted(fitted, ", ".join(map(str, files)), _text_bytes(dataset, ranges[0], text_column))
    tokenizer_json = json.dumps(fitted.record(), sort_keys=True)
    key_record = {"format": STORE_FORMAT, "source": "hf_dataset", "files": [content_key(f) for f in files],
                  "column": text_column, "rows": [[r.start, r.stop] for r in ranges],
                  "tokenizer": hashlib.sha256(tokenizer_json.encode()).hexdigest()}  # fmt: skip
    key = hashlib.sha256(json.dumps(key_record, sort_keys=True).encode()).hexdigest()[:32]
    processes = num_proc or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)

    def write(staging: Path) -> None:
        _write_rows(staging, dataset, ranges, text_column, fitted, processes, [str(f) for f in files], key)

    store = open_or_write(root, key, write, lambda line: print(line, flush=True))
    splits = {"kind": "rows", "data_files": [str(file.resolve()) for file in files], "text_column": text_column,
              **{name: [r.start, r.stop] for name, r in zip(("train", "val", "test"), ranges, strict=True)}}
    return store_bundle(store, [1, 1, 1], files[0], fitted, splits, tokenized)


class _Encode:
    """``map``'s batched function: each row's ids (a picklable object, for ``num_proc`` > 1)."""

    def __init__(self, tokenizer, column: str) -> None:
        self.tokenizer, self.column = tokenizer, column

    def __call__(self, batch: dict) -> dict:
        try:
            return {"ids": self.tokenizer.encode_batch(_texts(batch[self.column], self.column))}
        except UnknownCharacter as error:  # a val or test row (or another file, eval --data) the alphabet lacks
            raise ValueError(f"data.text_column={self.column!r}: a row holds {error.character!r}, which is not in the "
                             f"char alphabet of the train rows (or of the run's saved tokenizer)") from None


def _texts(texts: list, column: str) -> list[str]:
    """``texts``, a batch of the text column's rows; ValueError naming the column when one is no string (null)."""
    bad = next((text for text in texts if not isinstance(text, str)), "")
    if not isinstance(bad, str):
        raise ValueError(f"data.text_column={column!r}: a row holds {bad!r}, not a string (fill or drop such rows)")
    return texts


def _write_rows(staging: Path, dataset, ranges, column: str, tokenizer, processes: int, files: list[str],
                fingerprint: str) -> None:  # fmt: skip
    """Tokenize every row with ``map`` (in ``processes`` processes), then append each row's ids and the
    end-of-document token to ``tokens.bin``, reading the mapped Arrow table a chunk at a time."""
    datasets = _import_datasets()
    dtype = token_dtype(tokenizer.vocab_size)
    features = datasets.Features({"ids": datasets.Sequence(datasets.Value(dtype.name))})
    mapped = dataset.map(_Encode(tokenizer, column), batched=True, num_proc=processes if processes > 1 else None,
                         remove_columns=[column], features=features, new_fingerprint=fingerprint,
                         desc="tokenizing")  # fmt: skip
    eod = tokenizer.end_of_document_id
    starts, count = [], 0
    with (staging / TOKENS_FILE).open("wb") as out:
        for chunk in mapped.data.table.column("ids").chunks:
            offsets = chunk.offsets.to_numpy()
            lengths = np.diff(offsets).astype(np.int64)
            values = chunk.flatten().to_numpy(zero_copy_only=False).astype(dtype, copy=False)
            append_array(out, np.insert(values, np.cumsum(lengths), eod))
            starts.append(count + np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]))
            count += int(lengths.sum()) + len(lengths)
    for cache in mapped.cache_files:  # the store holds the ids now; map's Arrow copy is not kept
        Path(cache["filename"]).unlink(missing_ok=True)
    documents = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    offsets = [0] + [int(documents[r.stop]) if r.stop < len(documents) else count for r in ranges]
    segments = [{"path": " ".join(files), "start": r.start, "stop": r.stop, "end_of_document": False,
                 "documents": "rows", "text_column": column} for r in ranges]  # fmt: skip
    finish_store(staging, offsets, dtype, tokenizer.vocab_size, eod, segments, documents)


def _text_bytes(dataset, rows: range, column: str) -> int:
    """The UTF-8 bytes of the ``column`` texts of ``rows`` (contiguous), summed from Arrow's string offsets: no text
    is read or decoded."""
    import pyarrow.compute as pc  # a dependency of datasets

    lengths = pc.binary_length(dataset.data.table.column(column).slice(rows.start, len(rows)))
    return int(pc.sum(lengths).as_py() or 0)


def _fit(dataset, rows: range, column: str, tokenized: TokenizedText):
    """The tokenizer fitted on the train rows: every character of them (char), or BPE merges on rows spread
    evenly over them, about ``fit_bytes`` of text."""
    tokenizer, vocab_size, fit_bytes = tokenized.tokenizer, tokenized.vocab_size, tokenized.fit_bytes
    if len(rows) == 0:
        raise ValueError("the train part has no rows (data.fractions)")
    train = dataset.select(rows)
    if tokenizer == "char":
        seen: set[str] = set()
        for batch in train.iter(batch_size=_ROWS_PER_READ):
            seen.update(*map(set, _texts(batch[column], column)))
        return CharTokenizer("".join(sorted(seen)), end_of_document=True)
    head = _texts(train.select(range(min(len(train), _ROWS_PER_READ)))[column], column)
    mean = max(sum(len(text) for text in head) / max(len(head), 1), 1.0)
    wanted = min(len(train), max(1, int(fit_bytes / mean)))
    picked = np.linspace(0, len(train) - 1, wanted).round().astype(np.int64)
    sample = _texts(train.select(np.unique(picked).tolist())[column], column)
    return BPETokenizer.train(sample, vocab_size, special_tokens=(PAD_TOKEN, END_OF_DOCUMENT),
                              text_bytes=sum(len(text.encode("utf-8")) for text in sample))


def _import_datasets():
    """Hugging Face ``datasets`` (an optional extra)."""
    try:
        import datasets
    except ImportError:
        raise ModuleNotFoundError("data.source=hf_dataset needs Hugging Face 'datasets': pip install "
                                  "'markovformer[datasets]'", name="datasets") from None  # fmt: skip
    return datasets
