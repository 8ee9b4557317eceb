"""The FASTA format, parsed in one place: each record's header and bases, read in chunks (one record held at a time)
from a byte range of a file, and a sample of bases for a tokenizer fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from markovformer.data.readers.text_stream import CHUNK_BYTES, decoded, line_number, past_mark

_NOT_BASES = b" \t\r\n\v\f"  # the line breaks (LF or CRLF) and spaces of a FASTA sequence, none of them a base


def fasta_records(path: Path, start: int, stop: int, fold_case: bool = False) -> Iterator[tuple[int, str, str]]:
    """``(offset of its '>', header line after the '>', sequence)`` of each FASTA record starting in bytes
    [start, stop) of ``path`` (``start`` at a record's '>' or the file's start; a byte-order mark is no text). The
    sequence is the record's lines after the header joined, line breaks (LF or CRLF) and spaces removed, letters as
    they are (soft-masked lowercase kept) or, with ``fold_case``, ASCII letters uppercased (the soft mask dropped:
    acgt read as ACGT). Read in chunks of ``CHUNK_BYTES``: one record is held at a time. Text before the first
    header and a record with no base raise, naming the file and line."""
    with path.open("rb") as handle:
        handle.seek(start)
        position = past_mark(handle, start, stop)
        header, lines = None, []  # header: the offset of the current record's '>'; lines: its header, then bases
        in_header, line_start = False, True  # the byte read next is in a header line / begins a line
        while position < stop:
            data = handle.read(min(CHUNK_BYTES, stop - position))
            index = 0
            while index < len(data):
                if in_header:
                    end = data.find(b"\n", index)
                    end = len(data) if end < 0 else end + 1
                    lines[0] += data[index:end]
                    index, in_header = end, data[end - 1] != ord("\n")
                    line_start = not in_header
                    continue
                if line_start and data[index] == ord(">"):
                    if header is not None:
                        yield _fasta_record(path, header, lines, fold_case)
                    header, lines, in_header, line_start = position + index, [b""], True, False
                    index += 1
                    continue
                found = data.find(b"\n>", index)
                end = len(data) if found < 0 else found + 1
                letters = data[index:end].translate(None, _NOT_BASES)
                if letters and header is None:
                    at = position + end - len(data[index:end].lstrip())  # the first letter's line, not a blank one's
                    raise ValueError(f"{path}: line {line_number(path, at)}: sequence text "
                                     f"{letters[:20].decode(errors='replace')!r} comes before the first '>' header")
                lines.append(letters)
                index, line_start = end, data[end - 1] == ord("\n")
            position += len(data)
        if header is not None:
            yield _fasta_record(path, header, lines, fold_case)


def _fasta_record(path: Path, at: int, lines: list[bytes], fold_case: bool) -> tuple[int, str, str]:
    """``fasta_records``' record whose '>' is at byte ``at``, of its header then its bases (emptied: the record's
    lines go as its joined bases come); ValueError when it has no base."""
    header = decoded(path, at + 1, lines[0]).strip()
    sequence = b"".join(lines[1:])
    lines.clear()
    if not sequence:
        words = header.split()
        raise ValueError(f"{path}: record {words[0] if words else ''!r} (line {line_number(path, at)}) has an empty "
                         f"sequence")  # fmt: skip
    return at, header, decoded(path, at, sequence.upper() if fold_case else sequence)


def sampled_fasta(path: Path, start: int, stop: int, budget: int, fold_case: bool = False) -> Iterator[str]:
    """At most ``budget`` bases of the FASTA records in bytes [start, stop) of ``path`` (``start`` on a record
    start), for a BPE fit: ``budget / 64`` bases from each of 64 evenly spaced bases on, cut short at the end of
    their record; uppercased with ``fold_case``. Spaced in bases, not bytes, so the line width changes no base of
    the sample. Two passes over the records (the first counts their bases), one record held at a time: a record
    (a chromosome is hundreds of megabases) is never fed whole."""
    share = budget // 64
    total = sum(len(sequence) for _, _, sequence in fasta_records(path, start, stop))
    starts = [max(total - share, 0) * index // 63 for index in range(64)]
    before, index = 0, 0
    for _, _, sequence in fasta_records(path, start, stop, fold_case):
        while index < len(starts) and starts[index] < before + len(sequence):
            yield sequence[starts[index] - before : starts[index] - before + share]
            index += 1
        before += len(sequence)
