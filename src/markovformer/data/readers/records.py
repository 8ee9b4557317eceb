"""Records of a text file read as documents (``data.documents``): JSONL lines, paragraphs separated by blank lines,
FASTA records (``fasta_format``); where a record may start, each record's text and a sample of them for a tokenizer
fit. A file's byte-order mark is no text (``text_stream``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from markovformer.data.readers.fasta_format import FASTA_READING, fasta_records, sampled_fasta
from markovformer.data.readers.text_stream import CHUNK_BYTES, decoded, line_number, past_mark
from markovformer.strict_json import parse_json

# data.documents: a whole file, or each record of it, is a document
RECORD_KINDS = ("file", "blank_line", "jsonl", "fasta")
# where a record starts: after a newline (jsonl), after a blank line (blank_line); FASTA parts are cut by bases
_RECORD_STARTS = {"jsonl": re.compile(rb"\n"), "blank_line": re.compile(rb"\n[ \t\r]*\n")}


def record_reading(documents: str, text_column: str, fold_case: bool) -> list:
    """What decides the texts read from a file's records of kind ``documents``, beside its bytes: a part of the keys
    of cached plans and token stores, so that a change of any (FASTA: of its parser, ``FASTA_READING``) is never
    answered from a cache it would have read otherwise."""
    return [documents, text_column, *(["fold_case"] if fold_case else []),
            *([f"fasta_reading={FASTA_READING}"] if documents == "fasta" else [])]


def record_boundary(path: Path, offset: int, documents: str) -> int:
    """The first byte offset >= ``offset`` where a record of ``path`` may start (the file's size past its last):
    just after a newline (``jsonl``), or just after a separator of paragraphs, a newline then a line of nothing but
    spaces, tabs and carriage returns (``blank_line``). FASTA records are cut where their bases fall
    (``text._fasta_cuts``), never here."""
    size = path.stat().st_size
    if offset <= 0 or offset >= size:
        return min(max(offset, 0), size)
    pattern = _RECORD_STARTS[documents]
    with path.open("rb") as handle:
        position = offset - 1  # a separator ending at offset or later has its last newline at offset - 1 or later
        # ... but a blank-line separator may have begun before: carry its first newline (what follows it is blank)
        carried = b"\n" if documents == "blank_line" and _blank_line_open(handle, position) else b""
        handle.seek(position)
        while chunk := handle.read(CHUNK_BYTES):
            data = carried + chunk
            found = pattern.search(data)
            if found is not None:
                return position + found.end() - len(carried)
            # a separator cut by the end of the chunk: carry its newline on (a jsonl chunk with no match has none)
            carried = b"\n" if data.rstrip(b" \t\r").endswith(b"\n") else b""
            position += len(chunk)
    return size


def _blank_line_open(handle, end: int) -> bool:
    """Whether the bytes before ``end`` end with a newline and then only spaces, tabs and carriage returns (read
    backwards in steps of 4 KiB: a separator's whitespace line may be long)."""
    while end > 0:
        begin = max(end - 4096, 0)
        handle.seek(begin)
        kept = handle.read(end - begin).rstrip(b" \t\r")
        if kept:
            return kept.endswith(b"\n")
        end = begin
    return False


def record_texts(path: Path, start: int, stop: int, documents: str, text_column: str = "text",
                 fold_case: bool = False) -> Iterator[str]:  # fmt: skip
    """The text of each record starting in bytes [start, stop) of ``path`` (``start`` on a record boundary; a
    file's byte-order mark is no text):
    ``jsonl``: the ``text_column`` string of each non-empty line's JSON object; ``blank_line``: each run of
    non-blank lines (newlines inside kept, the last, LF or CRLF, removed); ``fasta``: each record's sequence
    (``fasta_records``, ``fold_case`` passed on). Bad input raises, naming the file and line."""
    if documents not in RECORD_KINDS[1:]:
        raise ValueError(f"data.documents={documents!r} must be one of {RECORD_KINDS[1:]}")
    if documents == "fasta":
        yield from (sequence for _, _, sequence in fasta_records(path, start, stop, fold_case))
        return
    lines: list[bytes] = []
    with path.open("rb") as handle:
        handle.seek(start)
        start = past_mark(handle, start, stop)
        position, first = start, start
        while True:
            line = handle.readline() if position < stop or (lines and documents == "blank_line") else b""
            at, position = position, position + len(line)
            if documents == "jsonl":
                if not line:
                    return
                if line.strip():
                    yield _json_text(path, at, line, text_column)
                continue
            if line.strip():
                first = at if not lines else first
                lines.append(line)
                continue
            if lines:
                text = b"".join(lines)
                ending = 2 if text.endswith(b"\r\n") else 1 if text.endswith(b"\n") else 0  # CRLF is one newline
                yield decoded(path, first, text[: len(text) - ending])
                lines = []
            if not line or position >= stop:
                return


def _json_text(path: Path, at: int, line: bytes, text_column: str) -> str:
    text = decoded(path, at, line)  # UTF-8 alone: json.loads reads bytes in UTF-16 too
    try:
        record = parse_json(text)
    except ValueError as error:
        raise ValueError(f"{path}: line {line_number(path, at)} is not JSON ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get(text_column), str):
        what = "has no" if not isinstance(record, dict) or text_column not in record else "has a non-string"
        raise ValueError(f"{path}: line {line_number(path, at)} {what} text column {text_column!r} "
                         f"(set data.text_column)")  # fmt: skip
    return record[text_column]


def sampled_records(path: Path, start: int, stop: int, budget: int, documents: str, text_column: str,
                    fold_case: bool = False) -> Iterator[str]:  # fmt: skip
    """About ``budget`` bytes of record text from bytes [start, stop) of ``path``: every record when they fit, else
    the records from 64 evenly spaced record boundaries on, ``budget / 64`` bytes from each (FASTA:
    ``sampled_fasta``, a record may be as long as a chromosome)."""
    if stop - start <= budget:
        yield from record_texts(path, start, stop, documents, text_column, fold_case)
        return
    if documents == "fasta":
        yield from sampled_fasta(path, start, stop, budget, fold_case)
        return
    share = max(budget // 64, 1)
    for index in range(64):
        begin = record_boundary(path, start + (stop - start) * index // 64, documents)
        taken = 0
        for text in record_texts(path, begin, stop, documents, text_column, fold_case):
            yield text
            taken += len(text)
            if taken >= share:
                break
