"""Records as documents: JSONL lines and blank-line separated paragraphs become documents of the token store, each
closed by the end-of-document token; bad records and unreadable files are named."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest

from markovformer.data.readers import records as records_module
from markovformer.data.readers import text_stream
from markovformer.data.readers.records import record_boundary, record_texts
from markovformer.data.readers.text import load_text_lm

_TEXTS = ["the chain moves on.", "é ß € 漢字 😀 a state\nwith two lines", "order, order", "x" * 50, "the end of it"]


def _write_jsonl(path, texts, column="text"):
    path.write_text("".join(json.dumps({"id": i, column: t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")


def _expected(tokenizer, texts) -> list[int]:
    """Each record encoded alone, then the end-of-document token: the naive reference."""
    eod = tokenizer.end_of_document_id
    return [i for text in texts for i in [*tokenizer.encode(text), eod]]


@pytest.mark.parametrize("tokenizer, vocab", [("char", None), ("bpe", 300)])
@pytest.mark.parametrize("documents", ["jsonl", "blank_line"])
def test_records_become_documents_of_the_store(tmp_path, tokenizer, vocab, documents):
    texts = _TEXTS * 8
    folder = tmp_path / "corpus"
    folder.mkdir()
    halves = (texts[:17], texts[17:])  # two files: records of both, in file order
    for index, part in enumerate(halves):
        if documents == "jsonl":
            _write_jsonl(folder / f"{index}.jsonl", part)
        else:
            (folder / f"{index}.txt").write_text("\n\n \n".join(part) + "\n", encoding="utf-8")
    bundle = load_text_lm(folder, tokenizer=tokenizer, vocab_size=vocab, seq_len=4, fractions=(0.8, 0.1, 0.1),
                          cache_dir=tmp_path / "cache", documents=documents)  # fmt: skip
    store = bundle.train.store
    assert np.asarray(store.tokens[:]).tolist() == _expected(bundle.tokenizer, texts)
    lengths = [len(bundle.tokenizer.encode(text)) + 1 for text in texts]
    assert store.document_starts.tolist() == np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
    # the splits cut between records, in order, and cover the store
    cuts = [bundle.train.start, bundle.train.stop, bundle.val.start, bundle.val.stop, bundle.test.start,
            bundle.test.stop]  # fmt: skip
    assert cuts[0] == 0 and cuts[1] == cuts[2] and cuts[3] == cuts[4] and cuts[5] == len(store)
    assert set(cuts) <= set(store.document_starts.tolist()) | {len(store)}
    assert 0.6 < cuts[1] / len(store) < 0.95 and cuts[2] < cuts[3] < cuts[5]


def test_blank_line_records_of_a_crlf_file_are_those_of_its_lf_twin_with_crlf_inside(tmp_path):
    """The last newline of a record was removed as "\n" alone: every record of a Windows file ended with "\r", stored
    before its end-of-document token."""
    texts = [text.replace("\n", "\r\n") for text in _TEXTS]
    path = tmp_path / "crlf.txt"
    path.write_bytes("\r\n\r\n".join(texts).encode() + b"\r\n\r\n\r\n")
    assert list(record_texts(path, 0, path.stat().st_size, "blank_line")) == texts
    bundle = load_text_lm(path, seq_len=4, fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache",
                          documents="blank_line")  # fmt: skip
    assert np.asarray(bundle.train.store.tokens[:]).tolist() == _expected(bundle.tokenizer, texts)


def test_a_bad_jsonl_line_or_a_missing_column_is_named_with_its_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    _write_jsonl(path, _TEXTS * 4)
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:6] + ["{not json"] + lines[6:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 7 is not JSON"):
        load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl")
    _write_jsonl(path, _TEXTS * 4)
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 1 has no text column 'body'"):
        load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl", text_column="body")
    _write_jsonl(path, _TEXTS * 4, column="body")
    bundle = load_text_lm(path, seq_len=4, cache_dir=tmp_path / "cache", documents="jsonl", text_column="body")
    assert bundle.tokenizer.decode(np.asarray(bundle.train.store.tokens[:]).tolist()) == "".join(_TEXTS * 4)


def test_an_unreadable_file_in_a_directory_is_named(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text("the chain moves on.\n" * 40, encoding="utf-8")
    (folder / "b.txt").symlink_to(tmp_path / "gone.txt")  # a link to nothing: unreadable
    with pytest.raises(ValueError, match=r"b\.txt: cannot read"):
        load_text_lm(folder, seq_len=4, cache_dir=tmp_path / "cache")


def test_a_linked_folder_in_a_directory_is_read_as_its_files_and_a_link_back_up_once(tmp_path):
    """A linked folder was listed as a file and refused: 'corpus/more: cannot read (Is a directory)'. Its files are
    documents now; a link to a folder already read (here the corpus itself) is not followed again."""
    folder, elsewhere = tmp_path / "corpus", tmp_path / "elsewhere"
    for place in (folder, elsewhere, folder / ".hidden"):
        place.mkdir()
    texts = {folder / "a.txt": "the chain moves on.\n" * 20, elsewhere / "b.txt": "a state, then the next.\n" * 20,
             folder / ".hidden" / "c.txt": "never read\n"}  # fmt: skip
    for path, text in texts.items():
        path.write_text(text, encoding="utf-8")
    (folder / "more").symlink_to(elsewhere, target_is_directory=True)
    (folder / "up").symlink_to(folder, target_is_directory=True)
    assert text_stream.resolve_text_paths(folder) == [folder / "a.txt", folder / "more" / "b.txt"]
    bundle = load_text_lm(folder, seq_len=4, fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache")
    read = [texts[folder / "a.txt"], texts[elsewhere / "b.txt"]]
    assert np.asarray(bundle.train.store.tokens[:]).tolist() == _expected(bundle.tokenizer, read)


def test_a_glob_names_its_matching_files_sorted_and_an_empty_folder_or_pattern_is_refused(tmp_path):
    """data.path as a pattern: the files it matches (** recursive, folders left out), sorted; a pattern matching
    nothing and a folder of only hidden files are each one error naming data.path."""
    for name in ("b/2.txt", "a.txt", "b/deeper/1.txt", "b/x.csv", "hidden/.notes.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("text\n")
    (tmp_path / "folder.txt").mkdir()  # matches the pattern, but is no file
    expected = sorted(tmp_path / name for name in ("a.txt", "b/2.txt", "b/deeper/1.txt"))
    assert text_stream.resolve_text_paths(f"{tmp_path}/**/*.txt") == expected
    with pytest.raises(ValueError, match=r"^data\.path='.*/\*\.md': the pattern matches no file$"):
        text_stream.resolve_text_paths(f"{tmp_path}/*.md")
    with pytest.raises(ValueError, match=r"^data\.path='.*/hidden' is a directory holding no files$"):
        text_stream.resolve_text_paths(tmp_path / "hidden")
    with pytest.raises(ValueError, match=r"^data\.path='.*/absent\.txt': no such file$"):
        text_stream.resolve_text_paths(tmp_path / "absent.txt")


# ---- record boundaries: where a split may be cut ------------------------------------------------------------------


def _naive_record_starts(data: bytes, documents: str) -> list[int]:
    """Every offset where a record may start, by definition: 0, the size, and each offset just after a newline
    (jsonl) or just after a newline, a line of only spaces, tabs and CRs, and its newline (blank_line)."""
    separator = rb"\n\Z" if documents == "jsonl" else rb"\n[ \t\r]*\n\Z"
    return [0, *(end for end in range(1, len(data)) if re.search(separator, data[:end])), len(data)]


@pytest.mark.parametrize(
    "data, documents, starts",
    [
        (b"aaa\n\nbbb\n\nccc\n", "blank_line", [0, 5, 10, 14]),
        (b"aaa\n  \t\nbbb\n\r\n\nccc", "blank_line", [0, 8, 14, 15, 18]),  # whitespace lines; two blank lines
        (b'{"text":"a"}\n{"text":"b"}\n{"text":"c"}\n', "jsonl", [0, 13, 26, 39]),
    ],
)
def test_a_record_boundary_is_the_first_record_start_at_or_after_the_offset(tmp_path, data, documents, starts):
    """A search begun one byte before the offset misses a blank-line separator (two bytes or more) ending at the
    offset itself, and returns the next record start: a cut on a record start moved a whole record over."""
    path = tmp_path / "records.txt"
    path.write_bytes(data)
    for offset in range(-1, len(data) + 2):
        expected = min([start for start in starts if start >= offset] or [len(data)])
        assert record_boundary(path, offset, documents) == expected, offset


@pytest.mark.parametrize("chunk_bytes", [1, 3, 8])
@pytest.mark.parametrize("documents", ["blank_line", "jsonl"])
def test_record_boundaries_match_the_definition_when_chunks_cut_the_separators(tmp_path, monkeypatch, chunk_bytes,
                                                                               documents):  # fmt: skip
    monkeypatch.setattr(records_module, "CHUNK_BYTES", chunk_bytes)
    rng = random.Random(chunk_bytes)
    path = tmp_path / "records.txt"
    for _ in range(100):
        data = bytes(rng.choice(b"ab\n\n \t\r") for _ in range(rng.randint(1, 30)))
        path.write_bytes(data)
        starts = _naive_record_starts(data, documents)
        for offset in range(len(data) + 1):
            assert record_boundary(path, offset, documents) == min(s for s in starts if s >= offset), (data, offset)


def test_a_whitespace_line_longer_than_a_chunk_still_separates_records(tmp_path, monkeypatch):
    monkeypatch.setattr(records_module, "CHUNK_BYTES", 7)
    path = tmp_path / "records.txt"
    path.write_bytes(b"one\n" + b" \t" * 5000 + b"\ntwo\n")  # the separator: bytes 3 to 10_004
    size, start = 4 + 10_000 + 5, 10_005
    for offset in (1, 4, 5, 4096, 9000, start - 1, start):  # also from inside its whitespace, past 4 KiB of it
        assert record_boundary(path, offset, "blank_line") == start, offset
    assert record_boundary(path, start + 1, "blank_line") == size


def test_splits_cut_at_record_boundaries_read_every_record_once(tmp_path):
    data = b"one\n\ntwo\nlines\n \t\n\nthree\n\t\r\nfour\n  \n\n"
    records = ["one", "two\nlines", "three", "four"]  # by hand
    path = tmp_path / "records.txt"
    path.write_bytes(data)
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1):  # cuts as _split_records makes them: in order
            cuts = [0, record_boundary(path, first, "blank_line")]
            cuts += [max(cuts[-1], record_boundary(path, second, "blank_line")), len(data)]
            parts = zip(cuts[:-1], cuts[1:], strict=True)
            read = [text for begin, end in parts for text in record_texts(path, begin, end, "blank_line")]
            assert read == records, cuts


def test_a_cut_that_falls_on_a_record_start_stays_there(tmp_path):
    path = tmp_path / "records.txt"
    path.write_text("abcdefgh\n\n" * 10, encoding="utf-8")  # 10 records of 10 bytes
    bundle = load_text_lm(path, seq_len=4, fractions=(0.5, 0.3, 0.2), cache_dir=tmp_path / "cache",
                          documents="blank_line")  # fmt: skip
    assert [bundle.splits[name] for name in ("train", "val", "test")] == [[[0, 0], [0, 50]], [[0, 50], [0, 80]],
                                                                          [[0, 80], [0, 100]]]  # fmt: skip
    assert (bundle.train.stop, bundle.val.stop) == (5 * 9, 8 * 9)  # 8 characters and the end token per record


@pytest.mark.parametrize("documents, separator", [("blank_line", "blank line"), ("jsonl", "newline")])
def test_a_part_that_no_record_starts_in_names_the_missing_separator(tmp_path, documents, separator):
    """Records start only after a separator: when none follows the byte where the fractions start a part (a file
    with no blank line at all, or one JSONL line), that part holds no document, and the error says why, not that
    the file is too short for seq_len."""
    path = tmp_path / f"corpus.{documents}"
    if documents == "jsonl":
        path.write_text(json.dumps({"text": "one record " * 200}), encoding="utf-8")  # no newline at all
    else:
        path.write_text("\n\n".join(_TEXTS) + "\n" + "a line\n" * 200, encoding="utf-8")  # the last record: 90 %
    offset = round(path.stat().st_size * 0.8)
    assert record_boundary(path, offset, documents) == path.stat().st_size  # no record starts past the train part
    with pytest.raises(ValueError, match=rf"data.documents='{documents}' puts no record in the val part: no "
                                         rf"{separator} follows byte {offset} of {re.escape(str(path))}") as raised:
        load_text_lm(path, tokenizer="char", seq_len=4, fractions=(0.8, 0.1, 0.1), cache_dir=tmp_path / "cache",
                     documents=documents)  # fmt: skip
    assert "\n" not in str(raised.value)


def test_a_jsonl_line_nested_too_deeply_is_named_with_its_line(tmp_path):
    """A line nested 100,000 deep (a public data file crafted so) raised RecursionError, a traceback, where
    '{not json' on that line is named with its line number."""
    path = tmp_path / "deep.jsonl"
    _write_jsonl(path, _TEXTS * 4)
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines[:2] + ["[" * 100_000 + "]" * 100_000] + lines[2:]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"deep\.jsonl: line 3 is not JSON \(JSON nested too deeply"):
        load_text_lm(path, seq_len=4, fractions=(1.0, 0.0, 0.0), cache_dir=tmp_path / "cache", documents="jsonl")


@pytest.mark.parametrize("record_chars", [30, 7])
def test_past_its_budget_a_record_file_is_sampled_from_64_evenly_spaced_record_starts(tmp_path, record_chars):
    """What BPE is fitted on (sampled_records): from each of 64 evenly spaced offsets, the records starting at the
    first record start at or after it, until ``budget / 64`` characters are taken; within the budget, every record."""
    texts = [f"{index:03d}" + "r" * (record_chars - 3) for index in range(400)]
    path = tmp_path / "notes.jsonl"
    _write_jsonl(path, texts)
    data = path.read_bytes()
    starts = [0] + [match.end() for match in re.finditer(rb"\n", data)][:-1]  # each line's first byte
    budget, size = 64 * 20, len(data)
    expected = []
    for index in range(64):
        first = next(i for i, start in enumerate(starts) if start >= size * index // 64)
        taken = 0
        for text in texts[first:]:  # the naive reference: whole records from that start until the share is taken
            expected.append(text)
            taken += len(text)
            if taken >= budget // 64:
                break
    assert list(records_module.sampled_records(path, 0, size, budget, "jsonl", "text")) == expected
    assert list(records_module.sampled_records(path, 0, size, size, "jsonl", "text")) == texts
