"""The FASTA format, parsed in one place: each record's header and bases, read in chunks (one record held at a time)
from a byte range of a plain or gzipped file, and a sample of bases for a tokenizer fit."""

from __future__ import annotations

import contextlib
import gzip
import math
import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

from markovformer.data.readers.text_stream import BYTE_ORDER_MARK, CHUNK_BYTES, decoded, line_number, past_mark

_NOT_BASES = b" \t\r\n\v\f"  # the line breaks (LF, CRLF, CR) and spaces of a FASTA sequence, none of them a base
# a lone CR (old Mac files) ends a line as LF does; read as LF a CRLF is a line end then a blank line: no offset moves
_CR_AS_LF = bytes.maketrans(b"\r", b"\n")
GZIP_MAGIC = b"\x1f\x8b"  # the first bytes of a gzip file, whatever its name
# The version of how FASTA bytes read as records: raised when the same bytes read as other records or bases, it keys
# the plans and token stores of data.documents: fasta anew (records.record_reading). 2: a lone CR ends a line
FASTA_READING = 2
FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".ffn", ".faa")  # nucleotides, genes' coding parts, amino acids


def is_gzipped(path: Path) -> bool:
    """Whether ``path`` is gzip-compressed, told by its first bytes (``GZIP_MAGIC``), not by its name."""
    with path.open("rb") as handle:
        return handle.read(len(GZIP_MAGIC)) == GZIP_MAGIC


def looks_like_fasta(path: Path) -> bool:
    """Whether plain file ``path`` is named as FASTA (``FASTA_SUFFIXES``) or its text begins with a header: '>' then
    a record id ('> ' begins a quote, as in Markdown and e-mail)."""
    if path.suffix.lower() in FASTA_SUFFIXES:
        return True
    with path.open("rb") as handle:
        head = handle.read(len(BYTE_ORDER_MARK) + 2).removeprefix(BYTE_ORDER_MARK)
    return re.match(rb">\S", head) is not None


def has_lone_cr(path: Path) -> bool:
    """Whether the first 64 KiB of plain file ``path`` end a line with a lone CR, as old Mac files do (read here as
    LF; a ``.fai`` index cannot read them)."""
    with path.open("rb") as handle:
        head = handle.read(1 << 16)
    return re.search(rb"\r(?!\n)", head[:-1]) is not None  # a CR last in the head may be a CRLF's


@contextlib.contextmanager
def _opened(path: Path):
    """A binary handle of the text of ``path``, decompressed when it is gzipped; a damaged gzip file raises
    ValueError naming it."""
    if not is_gzipped(path):
        with path.open("rb") as handle:
            yield handle
        return
    try:
        with gzip.open(path, "rb") as handle:
            yield handle
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(f"{path}: cannot read as a gzipped UTF-8 FASTA file ({error})") from None


def text_line_number(path: Path, offset: int) -> int:
    """``text_stream.line_number`` of byte ``offset`` of the text of ``path``, decompressed when it is gzipped."""
    if not is_gzipped(path):
        return line_number(path, offset)
    count = 0
    with _opened(path) as handle:
        while offset > 0 and (data := handle.read(min(CHUNK_BYTES, offset))):
            count, offset = count + data.count(b"\n"), offset - len(data)
    return count + 1


def base_line_number(path: Path, at: int, index: int) -> int:
    """The line of the text of ``path`` holding base ``index`` of the record whose '>' is at byte ``at`` (read
    again: only when an error is said)."""
    line = text_line_number(path, at)
    with _opened(path) as handle:
        handle.seek(at)
        handle.readline()  # the header
        for raw in handle:
            line, bases = line + 1, len(raw.translate(None, _NOT_BASES))
            if index < bases:
                break
            index -= bases
    return line


def _text(path: Path, at: int, data: bytes) -> str:
    """``data``, bytes ``at``... of the text of ``path``, decoded (``text_stream.decoded``, whose error names a line
    of the file as it is on disk: of a gzipped file, the error names the line of its text)."""
    try:
        return decoded(path, at, data)
    except ValueError:
        if not is_gzipped(path):
            raise
    raise ValueError(f"{path}: cannot read as a gzipped UTF-8 FASTA file (the record at line "
                     f"{text_line_number(path, at)} of its text is not UTF-8 or holds a NUL)")  # fmt: skip


def fasta_records(path: Path, start: int = 0, stop: int | None = None, fold_case: bool = False,
                  keep_empty: bool = False) -> Iterator[tuple[int, str, str]]:  # fmt: skip
    """``(offset of its '>', header line after the '>', sequence)`` of each FASTA record starting in bytes
    [start, stop) of ``path`` (to its end when ``stop`` is None; ``start`` at a record's '>' or the file's start;
    a byte-order mark is no text). A gzipped file (``is_gzipped``) is read decompressed, its offsets those of its
    text. The sequence is the record's lines after the header joined, line breaks (LF, CRLF or CR) and spaces removed,
    letters as they are (soft-masked lowercase kept) or, with ``fold_case``, ASCII letters uppercased (the soft
    mask dropped: acgt read as ACGT). Read in chunks of ``CHUNK_BYTES``: one record is held at a time. Text before
    the first header raises, naming the file and line, and so does a record with no base unless ``keep_empty``."""
    if stop is None:  # a plain file's size: a read of CHUNK_BYTES allocates them all, whatever is left to read
        stop = math.inf if is_gzipped(path) else path.stat().st_size
    with _opened(path) as handle:
        handle.seek(start)
        position = past_mark(handle, start, stop)
        header, lines = None, []  # header: the offset of the current record's '>'; lines: its header, then bases
        in_header, line_start = False, True  # the byte read next is in a header line / begins a line
        while position < stop and (data := handle.read(min(CHUNK_BYTES, stop - position)).translate(_CR_AS_LF)):
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
                        yield _fasta_record(path, header, lines, fold_case, keep_empty)
                    header, lines, in_header, line_start = position + index, [b""], True, False
                    index += 1
                    continue
                found = data.find(b"\n>", index)
                end = len(data) if found < 0 else found + 1
                letters = data[index:end].translate(None, _NOT_BASES)
                if letters and header is None:
                    at = position + end - len(data[index:end].lstrip())  # the first letter's line, not a blank one's
                    raise ValueError(f"{path}: line {text_line_number(path, at)}: sequence text "
                                     f"{letters[:20].decode(errors='replace')!r} comes before the first '>' header")
                lines.append(letters)
                del letters  # held by lines alone: a record of one piece is freed as it is uppercased
                index, line_start = end, data[end - 1] == ord("\n")
            position += len(data)
        if header is not None:
            yield _fasta_record(path, header, lines, fold_case, keep_empty)


def _fasta_record(path: Path, at: int, lines: list[bytes], fold_case: bool,
                  keep_empty: bool) -> tuple[int, str, str]:  # fmt: skip
    """``fasta_records``' record whose '>' is at byte ``at``, of its header then its bases (emptied: the record's
    lines go as its joined bases come); ValueError when it has no base, unless ``keep_empty``."""
    header = _text(path, at + 1, lines[0]).strip()
    sequence = b"".join(lines[1:])
    lines.clear()
    if not sequence and not keep_empty:
        words = header.split()
        raise ValueError(f"{path}: record {words[0] if words else ''!r} (line {text_line_number(path, at)}) has an "
                         f"empty sequence")  # fmt: skip
    if fold_case:
        sequence = sequence.upper()  # rebound before it is decoded: three copies of the bases at once, not four
    return at, header, _text(path, at, sequence)


def header_id(path: Path, at: int, header: str) -> str:
    """The id of the record of ``path`` whose '>' is at byte ``at``: the first word of its ``header``; a header with
    none raises ValueError naming the file and line."""
    words = header.split()
    if not words:
        raise ValueError(f"{path}: line {text_line_number(path, at)}: header '>' has no record id")
    return words[0]


def named_records(path: Path, records: Iterable[tuple[int, str, str]]) -> Iterator[tuple[int, str, str]]:
    """``(offset of its '>', id, sequence)`` of each of ``records`` (``fasta_records``' of ``path``), the id being
    ``header_id``'s; an id that repeats raises ValueError naming the file, the id and both lines."""
    seen: dict[str, int] = {}  # record id -> the offset of its header
    for offset, header, sequence in records:
        name = header_id(path, offset, header)
        if name in seen:
            raise ValueError(f"{path}: line {text_line_number(path, offset)}: record id {name!r} repeats line "
                             f"{text_line_number(path, seen[name])}")  # fmt: skip
        seen[name] = offset
        yield offset, name, sequence


def sampled_fasta(path: Path, start: int, stop: int, budget: int, fold_case: bool = False,
                  bases: int | None = None) -> Iterator[str]:  # fmt: skip
    """At most ``budget`` bases of the FASTA records in bytes [start, stop) of ``path`` (``start`` on a record
    start), for a BPE fit: every record when their bases fit the budget (their headers and line breaks need not),
    else ``budget / 64`` bases of the records' bases joined from each of 64 evenly spaced bases on, a stretch that
    runs past the end of its record yielded in pieces (no text spans two records; short reads fill the budget too);
    uppercased with ``fold_case``. Spaced in bases, not bytes, so the line width changes no base of the sample. One
    pass over the records when their ``bases`` are known, else two (the first counts them), one record held at a
    time: a record (a chromosome is hundreds of megabases) is never fed whole."""
    share = budget // 64
    total = sum(len(sequence) for _, _, sequence in fasta_records(path, start, stop)) if bases is None else bases
    if total <= budget:
        yield from (sequence for _, _, sequence in fasta_records(path, start, stop, fold_case))
        return
    starts = [max(total - share, 0) * index // 63 for index in range(64)]
    before, index = 0, 0  # the stretches start more than ``share`` bases apart: no two overlap
    for _, _, sequence in fasta_records(path, start, stop, fold_case):
        end = before + len(sequence)
        while index < len(starts) and starts[index] < end:
            yield sequence[max(starts[index] - before, 0) : starts[index] + share - before]
            if starts[index] + share > end:  # the stretch runs on into the next record
                break
            index += 1
        before = end
