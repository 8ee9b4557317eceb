"""Every reader of FASTA text (the classification source's ``read_fasta``, ``data.documents: fasta``, the genomics
recipes' ``read_reference``) reads awkward files as a naive parser written here does: random line widths, CRLF,
a lone CR (old Mac files), a byte-order mark, blank lines, trailing spaces, lowercase and N bases, empty records,
gzip."""

from __future__ import annotations

import gzip
import random
import re

import pytest

from markovformer.data.readers.fasta import read_fasta
from markovformer.data.readers.records import record_texts
from markovformer.data.recipes.genomics import read_reference


def _naive_records(data: bytes) -> list[tuple[str, str]]:
    """``(header after '>', bases as written)`` of each record: lines split at LF, CRLF or a lone CR, spaces at
    their ends dropped, blank lines skipped."""
    text = data.decode("utf-8").removeprefix("\ufeff")
    records: list[list[str]] = []
    for line in re.split("\r\n|\r|\n", text):
        if line.startswith(">"):
            records.append([line[1:].strip(), ""])
        elif line.strip():
            records[-1][1] += line.strip()
    return [(header, bases) for header, bases in records]


def _awkward_fasta(rng: random.Random, empty_records: bool) -> bytes:
    """A FASTA with records of random lengths (none, with ``empty_records``), each wrapped at its own random
    width with ragged lines, LF, CRLF or lone CR line ends (mixed in one file too), blank lines between and after
    records, trailing spaces and tabs, lowercase and N bases, a description holding '>' and spaces, maybe a BOM."""
    newline = rng.choice(["\n", "\r\n", "\r", None])  # None: each line picks
    lines = []
    for index in range(rng.randint(1, 8)):
        description = rng.choice(["", " desc", " a>b  c ", "\tx y"])
        lines.append(f">r{index}{description}")
        length = rng.choice([0, 1, 5, 60, 250]) if empty_records else rng.choice([1, 5, 60, 250])
        bases = "".join(rng.choice("ACGTNacgtn") for _ in range(length))
        width, start = rng.randint(1, 100), 0
        while start < len(bases):
            step = rng.randint(1, width)
            lines.append(bases[start : start + step] + rng.choice(["", "", " ", "\t "]))
            start += step
        lines.extend([""] * rng.choice([0, 0, 1, 2]))
    lines.extend([""] * rng.randint(0, 3))
    text = "".join(line + (newline or rng.choice(["\n", "\r\n", "\r"])) for line in lines)
    return (b"\xef\xbb\xbf" if rng.random() < 0.3 else b"") + text.encode()


def _files(tmp_path, empty_records: bool, count: int = 40):
    rng = random.Random(7 + empty_records)
    for index in range(count):
        data = _awkward_fasta(rng, empty_records)
        path = tmp_path / f"f{index}.fa"
        path.write_bytes(data)
        yield path, data, _naive_records(data)


def test_read_fasta_reads_the_naive_records_uppercased_plain_or_gzipped(tmp_path):
    for path, data, records in _files(tmp_path, empty_records=False):
        expected = [(header.split()[0], bases.upper()) for header, bases in records]
        assert read_fasta(path) == expected, data
        gzipped = path.with_suffix(".fa.gz")
        gzipped.write_bytes(gzip.compress(data))
        assert read_fasta(gzipped) == expected, data


@pytest.mark.parametrize("fold_case", [False, True])
def test_fasta_documents_are_the_naive_records_bases_whatever_the_cuts(tmp_path, fold_case):
    rng = random.Random(11)
    for path, data, records in _files(tmp_path, empty_records=False):
        expected = [bases.upper() if fold_case else bases for _, bases in records]
        size = len(data)
        assert list(record_texts(path, 0, size, "fasta", fold_case=fold_case)) == expected, data
        starts = [end for end in range(1, size) if data[end - 1] in b"\r\n" and data[end] == ord(">")]  # begins a line
        cuts = sorted({0, size, *rng.sample(starts, min(3, len(starts)))})
        pieces = [text for begin, end in zip(cuts[:-1], cuts[1:], strict=True)
                  for text in record_texts(path, begin, end, "fasta", fold_case=fold_case)]  # fmt: skip
        assert pieces == expected, (data, cuts)


def test_a_reference_read_whole_is_the_naive_records_uppercased_empty_ones_too(tmp_path):
    for path, data, records in _files(tmp_path, empty_records=True):
        expected = {header.split()[0]: bases.upper() for header, bases in records}
        assert read_reference(path, indexed=False) == expected, data
        gzipped = path.with_suffix(".fa.gz")
        gzipped.write_bytes(gzip.compress(data))
        assert read_reference(gzipped, indexed=False) == expected, data


def test_an_empty_record_is_refused_by_the_readers_that_need_bases_naming_it(tmp_path):
    checked = 0
    for path, data, records in _files(tmp_path, empty_records=True):
        empty = next((header for header, bases in records if not bases), None)
        if empty is None:
            continue
        told = re.escape(f"{path}: record {empty.split()[0]!r} (line ")
        with pytest.raises(ValueError, match=f"^{told}"):
            read_fasta(path)
        with pytest.raises(ValueError, match=f"^{told}"):
            list(record_texts(path, 0, len(data), "fasta"))
        checked += 1
    assert checked > 10
