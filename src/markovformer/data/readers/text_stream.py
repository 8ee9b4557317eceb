"""Reading text files in bounded pieces: resolving ``data.path`` (a file, a directory or a glob), streaming a byte
range as decoded text without ever reading a file whole, reading records (JSONL lines, or blank-line separated
paragraphs) as documents, and the content key a token store is cached under. A UTF-8 byte-order mark at a file's
start is no text: every reader here starts after it, and characters are counted from there.

A piece never splits a UTF-8 character (the bytes of a character cut by a chunk boundary are carried into the next
piece), and with ``safe_cut`` (a tokenizer's: ``BPETokenizer.safe_cut``) it ends where that tokenizer's
pre-tokenizer would cut anyway, so encoding the pieces one by one gives the tokens of the whole range encoded at once.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

from markovformer.strict_json import parse_json

CHUNK_BYTES = 4 << 20  # bytes read per step: memory stays a small multiple of this whatever the file's size
_SAMPLED_BLOCKS, _BLOCK_BYTES = 16, 64 << 10


def resolve_text_paths(path: str | Path) -> list[Path]:
    """The files ``path`` names, in sorted order: the file itself, every file under a directory (recursively,
    hidden ones skipped, linked folders followed), or the files a glob pattern matches. ValueError when it names
    none."""
    text = str(path)
    given = Path(text)
    if given.is_file():
        return [given]
    if given.is_dir():
        found = sorted(_visible_files(given))
        if not found:
            raise ValueError(f"data.path={text!r} is a directory holding no files")
        return found
    if glob.has_magic(text):
        found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
        if not found:
            raise ValueError(f"data.path={text!r}: the pattern matches no file")
        return found
    raise ValueError(f"data.path={text!r}: no such file")


# The first bytes of compressed files, whatever their name (none is UTF-8 text; bzip2's are ASCII, so its block or end
# marker is matched too), and of UTF-16 text (its byte-order mark: PowerShell's and Windows Notepad's "Unicode"), each
# with what the file is and the command that writes its contents out as UTF-8 text
_NOT_UTF8 = ((rb"\x1f\x8b", "gzip-compressed file", "gzip -dc"),
             (rb"BZh[1-9](?:1AY&SY|\x17rE8P\x90)", "bzip2-compressed file", "bzip2 -dc"),
             (rb"\xfd7zXZ\x00", "xz-compressed file", "xz -dc"),
             (rb"\x28\xb5\x2f\xfd", "zstd-compressed file", "zstd -dc"),
             (rb"PK\x03\x04", "zip-compressed file", "unzip -p"),
             (rb"\xff\xfe|\xfe\xff", "UTF-16 file (its byte-order mark)", "iconv -f UTF-16 -t UTF-8"))  # fmt: skip


def not_text_message(path: Path) -> str | None:
    """The error for ``path`` when its first bytes are those of a compressed file (gzip, bzip2, xz, zstd, zip) or
    of UTF-16 text, or hold a NUL, naming what it is and how to write it out as text; None otherwise (or when it
    cannot be read)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(4096)
    except OSError:
        return None
    for magic, what, command in _NOT_UTF8:
        if re.match(magic, head):
            return f"{path}: a {what}, not UTF-8 text: write it out as text first ({command} {path} > TEXT)"
    return _nul_message(path, head.index(b"\0")) if b"\0" in head else None


def _nul_message(path: Path, offset: int) -> str:
    """The error for a NUL at byte ``offset`` of ``path``: no character of a text, but UTF-16 without a byte-order
    mark (every other byte of English is 0) is valid UTF-8."""
    return (f"{path}: line {line_number(path, offset)}: a NUL byte at offset {offset}: not UTF-8 text (UTF-16 "
            f"without a byte-order mark? iconv -f UTF-16LE -t UTF-8 {path} > TEXT)")  # fmt: skip


def _visible_files(folder: Path) -> Iterator[Path]:
    """Every file under ``folder`` with no hidden part in its path below it, through linked folders too (a linked
    folder was listed as a file and refused: 'cannot read (Is a directory)'), each real folder once (a link back up
    is not followed again), in sorted order; a broken link is listed, to be reported when read, not skipped."""
    seen = set()
    for root, folders, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:
            folders[:] = []
            continue
        seen.add(real)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        yield from (Path(root) / name for name in names if not name.startswith("."))


def file_size(path: Path) -> int:
    """The size of ``path`` in bytes; an unreadable or empty file raises, naming it."""
    try:
        size = path.stat().st_size
        with path.open("rb"):
            pass
    except OSError as error:
        raise ValueError(f"{path}: cannot read ({error.strerror})") from None
    if size == 0:
        raise ValueError(f"{path}: the file is empty")
    return size


def content_key(path: Path) -> dict:
    """What identifies a file's content without reading it whole: its size, its modification time (ns) and a
    BLAKE2 hash of 16 blocks of 64 KiB spread evenly over it (the first and the last included). A changed file
    changes its mtime even where the sampled blocks happen to be equal; copying a file keeps its key only with its
    mtime (``cp -p``)."""
    stat = path.stat()
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        last = max(stat.st_size - _BLOCK_BYTES, 0)
        for block in range(_SAMPLED_BLOCKS):
            handle.seek(last * block // (_SAMPLED_BLOCKS - 1))
            digest.update(handle.read(_BLOCK_BYTES))
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sampled_blake2b": digest.hexdigest()}


def text_pieces(
    path: Path, start: int = 0, stop: int | None = None, chunk_bytes: int = CHUNK_BYTES,
    safe_cut: Callable[[str], int] | None = None,
) -> Iterator[str]:
    """The text of bytes [start, stop) of ``path`` (strict UTF-8) as consecutive pieces of about ``chunk_bytes``;
    a file's byte-order mark is no text. ``start`` and ``stop`` must lie on character boundaries. Invalid UTF-8
    raises, naming the file, line and byte. ``safe_cut(text)``: where a piece may end in the second half of the text
    read (0: nowhere, the text is carried on)."""
    stop = file_size(path) if stop is None else stop
    with path.open("rb") as handle:
        handle.seek(start)
        start = _past_mark(handle, start, stop)
        pending, carried, offset = b"", "", start  # offset: file position of the first byte of ``pending``
        # the length of the text a safe_cut last found no cut in: looked at again once it has doubled, so a text
        # with no cut (one line of minified code) is searched in linear time, not once a chunk
        searched = 0
        position = start
        while position < stop or pending or carried:
            data = handle.read(min(chunk_bytes, stop - position)) if position < stop else b""
            position += len(data)
            data, at_end = pending + data, position >= stop
            keep = len(data) if at_end else _character_start(data)
            text = carried + _decoded(path, offset, data[:keep])
            pending, offset = data[keep:], offset + keep
            if at_end:
                if text:
                    yield text
                return
            if len(text) < 2 * searched:
                carried = text
                continue
            cut = safe_cut(text) if safe_cut is not None else len(text)
            searched = 0 if cut else len(text)
            if cut:
                yield text[:cut]
            carried = text[cut:]


BYTE_ORDER_MARK = b"\xef\xbb\xbf"  # what Notepad and Excel write before UTF-8 text: a mark of the encoding, no text


def _past_mark(handle, start: int, stop: int | None = None) -> int:
    """``start``, or 3 when it is 0 and the file of ``handle`` begins with a byte-order mark (within ``stop``): the
    text of a file starts after its mark. Leaves ``handle`` at the offset returned."""
    if start == 0 and (stop is None or stop >= len(BYTE_ORDER_MARK)):
        if handle.read(len(BYTE_ORDER_MARK)) == BYTE_ORDER_MARK:
            return len(BYTE_ORDER_MARK)
        handle.seek(0)
    return start


def check_utf8(path: Path) -> None:
    """Raise ``not_utf8`` at the first byte of ``path`` that is not UTF-8 (read in pieces): for a reader whose
    decoder names a place in its own buffer, not in the file."""
    for _ in text_pieces(path):
        pass


def not_utf8(path: Path, offset: int, byte: int) -> ValueError:
    """The error for byte ``offset`` of ``path`` (value ``byte``), which is not valid UTF-8: its file, line and
    offset, or that the file is compressed or UTF-16 (``not_text_message``)."""
    return ValueError(not_text_message(path) or f"{path}: line {line_number(path, offset)}: byte {byte:#04x} at "
                                                f"offset {offset} is not valid UTF-8")  # fmt: skip


def _character_start(data: bytes) -> int:
    """The index where the last, possibly incomplete, UTF-8 character of ``data`` starts (len(data) when its last
    byte ends a character)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # a lead or ASCII byte
            width = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4
            return len(data) if back >= width else len(data) - back
    return len(data)


def count_characters(path: Path, start: int = 0, stop: int | None = None) -> int:
    """The number of characters in bytes [start, stop) of ``path`` (bytes that start a UTF-8 character; a
    byte-order mark is none)."""
    import numpy as np

    stop = file_size(path) if stop is None else stop
    count = 0
    with path.open("rb") as handle:
        handle.seek(start)
        start = _past_mark(handle, start, stop)
        while start < stop:
            data = np.frombuffer(handle.read(min(CHUNK_BYTES, stop - start)), dtype=np.uint8)
            count += int(np.count_nonzero((data & 0xC0) != 0x80))
            start += len(data)
    return count


def byte_offset_of_character(path: Path, character: int) -> int:
    """The byte offset in ``path`` where character number ``character`` starts (the file's size past its end),
    counted after a byte-order mark (``count_characters``)."""
    import numpy as np

    seen = 0
    with path.open("rb") as handle:
        position = _past_mark(handle, 0)
        while data := handle.read(CHUNK_BYTES):
            leads = (np.frombuffer(data, dtype=np.uint8) & 0xC0) != 0x80
            count = int(np.count_nonzero(leads))  # the positions are listed only in the chunk holding the one asked
            if seen + count > character:
                return position + int(np.flatnonzero(leads)[character - seen])
            seen, position = seen + count, position + len(data)
    return position


def sampled_text(path: Path, start: int, stop: int, budget: int) -> Iterator[str]:
    """About ``budget`` bytes of text from bytes [start, stop) of ``path``: all of it when it fits, else 64 evenly
    spaced pieces of ``budget / 64`` bytes each (trimmed to whole characters)."""
    if stop - start <= budget:
        yield from text_pieces(path, start, stop)
        return
    size = budget // 64
    with path.open("rb") as handle:
        start = _past_mark(handle, start, stop)
        for index in range(64):
            handle.seek(start + (stop - start - size) * index // 63)
            data = handle.read(size)
            head = next((i for i in range(min(4, len(data))) if data[i] & 0xC0 != 0x80), 0)
            yield data[head : _character_start(data)].decode("utf-8", errors="replace")


# data.documents: a whole file, or each record of it, is a document
RECORD_KINDS = ("file", "blank_line", "jsonl", "fasta")
# where a record starts: after a newline (jsonl), after a blank line (blank_line), at a line's '>' (fasta)
_RECORD_STARTS = {"jsonl": re.compile(rb"\n"), "blank_line": re.compile(rb"\n[ \t\r]*\n"),
                  "fasta": re.compile(rb"\n(?=>)")}  # fmt: skip
_NOT_BASES = b" \t\r\n\v\f"  # the line breaks (LF or CRLF) and spaces of a FASTA sequence, none of them a base


def record_boundary(path: Path, offset: int, documents: str) -> int:
    """The first byte offset >= ``offset`` where a record of ``path`` may start (the file's size past its last):
    just after a newline (``jsonl``), just after a separator of paragraphs, a newline then a line of nothing but
    spaces, tabs and carriage returns (``blank_line``), or at the '>' that begins a line (``fasta``)."""
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
            # a separator cut by the end of the chunk: carry its newline on (a jsonl chunk with no match has none;
            # a FASTA header's '>' follows its newline at once)
            carried = b"\n" if (data if documents == "fasta" else data.rstrip(b" \t\r")).endswith(b"\n") else b""
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
        start = _past_mark(handle, start, stop)
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
                yield _decoded(path, first, text[: len(text) - ending])
                lines = []
            if not line or position >= stop:
                return


def fasta_records(path: Path, start: int, stop: int, fold_case: bool = False) -> Iterator[tuple[int, str, str]]:
    """``(offset of its '>', header line after the '>', sequence)`` of each FASTA record starting in bytes
    [start, stop) of ``path`` (``start`` at a record's '>' or the file's start; a byte-order mark is no text). The
    sequence is the record's lines after the header joined, line breaks (LF or CRLF) and spaces removed, letters as
    they are (soft-masked lowercase kept) or, with ``fold_case``, ASCII letters uppercased (the soft mask dropped:
    acgt read as ACGT). Read in chunks of ``CHUNK_BYTES``: one record is held at a time. Text before the first
    header and a record with no base raise, naming the file and line."""
    with path.open("rb") as handle:
        handle.seek(start)
        position = _past_mark(handle, start, stop)
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
    header = _decoded(path, at + 1, lines[0]).strip()
    sequence = b"".join(lines[1:])
    lines.clear()
    if not sequence:
        words = header.split()
        raise ValueError(f"{path}: record {words[0] if words else ''!r} (line {line_number(path, at)}) has an empty "
                         f"sequence")  # fmt: skip
    return at, header, _decoded(path, at, sequence.upper() if fold_case else sequence)


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


def _json_text(path: Path, at: int, line: bytes, text_column: str) -> str:
    text = _decoded(path, at, line)  # UTF-8 alone: json.loads reads bytes in UTF-16 too
    try:
        record = parse_json(text)
    except ValueError as error:
        raise ValueError(f"{path}: line {line_number(path, at)} is not JSON ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get(text_column), str):
        what = "has no" if not isinstance(record, dict) or text_column not in record else "has a non-string"
        raise ValueError(f"{path}: line {line_number(path, at)} {what} text column {text_column!r} "
                         f"(set data.text_column)")  # fmt: skip
    return record[text_column]


def _decoded(path: Path, at: int, data: bytes) -> str:
    """``data``, bytes ``at``... of ``path``, decoded as strict UTF-8 holding no NUL (``_nul_message``)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise not_utf8(path, at + error.start, data[error.start]) from None
    if "\0" in text:
        raise ValueError(_nul_message(path, at + data.index(b"\0")))
    return text


def line_number(path: Path, offset: int) -> int:
    """The 1-based line of ``path`` that byte ``offset`` lies on (counted in chunks: only when an error is said)."""
    count, position = 0, 0
    with path.open("rb") as handle:
        while position < offset:
            data = handle.read(min(CHUNK_BYTES, offset - position))
            if not data:
                break
            count += data.count(b"\n")
            position += len(data)
    return count + 1


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
