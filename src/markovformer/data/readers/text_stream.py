"""Reading text files in bounded pieces: resolving ``data.path`` (a file, a directory or a glob), streaming a byte
range as decoded text without ever reading a file whole, and the content key a token store is cached under (records
read as documents: ``records``). A UTF-8 byte-order mark at a file's start is no text: every reader here starts after
it, and characters are counted from there.

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
        start = past_mark(handle, start, stop)
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
            text = carried + decoded(path, offset, data[:keep])
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


def past_mark(handle, start: int, stop: int | None = None) -> int:
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
        start = past_mark(handle, start, stop)
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
        position = past_mark(handle, 0)
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
        start = past_mark(handle, start, stop)
        for index in range(64):
            handle.seek(start + (stop - start - size) * index // 63)
            data = handle.read(size)
            head = next((i for i in range(min(4, len(data))) if data[i] & 0xC0 != 0x80), 0)
            yield data[head : _character_start(data)].decode("utf-8", errors="replace")


def decoded(path: Path, at: int, data: bytes) -> str:
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
