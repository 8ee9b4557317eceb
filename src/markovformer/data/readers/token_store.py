"""Token stores: a text corpus encoded once into a memory-mapped token file, cached by content, read at constant memory.

A store is a folder ``<cache root>/<key>/`` holding

    tokens.bin     the token ids, raw, in the smallest unsigned dtype that holds the vocabulary (uint8/16/32)
    offsets.npy    int64 (S + 1,): where each encoded segment starts in tokens.bin, then the total
    documents.npy  int64, only when segments hold records (JSONL lines, paragraphs, dataset rows): where each
                   record's document starts (an end-of-document token closes each record)
    meta.json      format, dtype, token count, vocabulary size, each segment's source and whether a document ends
                   with it (then an end-of-document token closes it, counted in the segment), and a hash of sampled
                   blocks of tokens.bin; written last

The key is a SHA-256 of the store format, each segment's file content key (``text_stream.content_key``: size,
mtime and a hash of 16 sampled blocks), byte range and end-of-document flag, and the tokenizer's own JSON. A store
is built in a staging folder beside its target and renamed into place whole, so a killed or failing build (a full
disk included) never leaves a folder under the key. Builders of one key take turns on a file lock
(``.<key>.lock``): when several processes (DDP ranks, DataLoader workers, two runs) ask for the same store, the
first builds it and the others wait, then open it: it is built once. Opening checks the meta, the file sizes, the
offsets and the sampled hash; a damaged store is reported on one line, removed and rebuilt. The cache root is
``data.cache_dir``, else ``$MARKOVFORMER_CACHE``, else ``$XDG_CACHE_HOME/markovformer/token_stores`` (``~/.cache``
by default).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import shutil
import stat
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from markovformer.atomic import atomic_write_text, exclusive_lock, write_failure
from markovformer.data.readers.bpe_cuts import safe_pieces
from markovformer.data.readers.records import record_reading, record_texts
from markovformer.data.readers.text_stream import CHUNK_BYTES, content_key, text_pieces
from markovformer.strict_json import read_json_object

# 2: BPE reads no special token from text (a literal "<eod>" was stored as the special id); 3: a blank-line
# record's last CRLF is removed whole (its "\r" was stored at the end of each record of a CRLF file); 4: a file's
# UTF-8 byte-order mark is no text (it was stored as a character at the start of each file that has one)
STORE_FORMAT = 4
# The formats whose files this version reads (one layout): a run's record of the store it started with is compared
# token by token with the store it rebuilds, also across the format change; the cache opens STORE_FORMAT's alone
READABLE_FORMATS = (2, 3, STORE_FORMAT)
TOKENS_FILE, OFFSETS_FILE, META_FILE, DOCUMENTS_FILE = "tokens.bin", "offsets.npy", "meta.json", "documents.npy"
_PROGRESS_ABOVE_BYTES = 16 << 20  # smaller corpora encode in about a second: no progress bar
_STAGING = ".staging-"


@dataclass(frozen=True)
class Segment:
    """Bytes [start, stop) of one file, encoded on their own (no token spans two segments); ``end_of_document``:
    an end-of-document token follows them. ``first_character``: the file's character offset of ``start`` (for
    error messages)."""

    path: str
    start: int
    stop: int
    end_of_document: bool = False
    first_character: int = 0
    where: str = ""  # said after the offset of a character the tokenizer lacks, e.g. " in the val part"
    documents: str = "file"  # "jsonl" / "blank_line": each record in [start, stop) is a document of its own
    text_column: str = ""  # the JSONL field holding a record's text
    fold_case: bool = False  # "fasta": lowercase (soft-masked) bases read as uppercase


class UnknownCharacter(ValueError):
    """A character the tokenizer cannot encode, at ``index`` of the piece it was asked to encode."""

    def __init__(self, character: str, index: int) -> None:
        super().__init__(f"character {character!r} is not in the tokenizer's vocabulary")
        self.character, self.index = character, index

    def __reduce__(self):  # its two arguments: raised in another process (datasets.map) it must unpickle there
        return type(self), (self.character, self.index)


def token_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned dtype that holds ids 0..vocab_size-1; a larger vocabulary is refused."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    raise ValueError(f"a vocabulary of {vocab_size} tokens does not fit a token store (at most 2**32)")


def cache_root(cache_dir: str | Path | None = None) -> Path:
    """Where token stores live (see the module's docstring)."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get("MARKOVFORMER_CACHE"):
        return Path(os.environ["MARKOVFORMER_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "markovformer" / "token_stores"


def store_key(segments: Iterable[Segment], tokenizer_json: str) -> str:
    """The cache key of the store of ``segments`` encoded by the tokenizer whose saved JSON is ``tokenizer_json``."""
    files = {}
    record = {"format": STORE_FORMAT, "tokenizer": hashlib.sha256(tokenizer_json.encode()).hexdigest(), "segments": []}
    for segment in segments:
        if segment.path not in files:
            files[segment.path] = content_key(Path(segment.path))
        entry = [files[segment.path], segment.start, segment.stop, segment.end_of_document]
        if segment.documents != "file":
            entry += record_reading(segment.documents, segment.text_column, segment.fold_case)
        record["segments"].append(entry)
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()[:32]


class TokenStore:
    """An opened store: ``tokens`` (N,) a read-only memory map, ``offsets`` (S + 1,) int64, ``meta``. Pickles as
    its folder (DataLoader workers and DDP ranks map the same file, never a copy)."""

    def __init__(self, folder: str | Path, formats: tuple[int, ...] = (STORE_FORMAT,)) -> None:
        self.folder = Path(folder)
        self.meta = _read_meta(self.folder, formats)
        dtype, count = np.dtype(self.meta["dtype"]), self.meta["num_tokens"]
        tokens_path = self.folder / TOKENS_FILE
        if tokens_path.stat().st_size != count * dtype.itemsize:
            raise ValueError(f"{TOKENS_FILE} has {tokens_path.stat().st_size} bytes, not {count} x {dtype.itemsize}")
        self.offsets = np.load(self.folder / OFFSETS_FILE, allow_pickle=False)
        segments = len(self.meta["segments"])
        if self.offsets.shape != (segments + 1,) or self.offsets[0] != 0 or self.offsets[-1] != count:
            raise ValueError(f"{OFFSETS_FILE} does not bound {segments} segments of {count} tokens")
        if np.any(np.diff(self.offsets) < 0):
            raise ValueError(f"{OFFSETS_FILE} is not in order")
        if _sampled_hash(tokens_path) != self.meta["tokens_sampled_blake2b"]:
            raise ValueError(f"{TOKENS_FILE} does not match the hash recorded when it was written")
        self.tokens = np.memmap(tokens_path, dtype=dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)
        self._file = tokens_path.open("rb", buffering=0)  # for ``read``
        ends = [i + 1 for i, segment in enumerate(self.meta["segments"]) if segment["end_of_document"]]
        records = np.zeros(0, np.int64)
        if self.meta.get("documents"):
            records = np.load(self.folder / DOCUMENTS_FILE, allow_pickle=False)
            if records.shape != (self.meta["documents"],) or np.any(np.diff(records) < 0) or (
                    len(records) and not 0 <= records[0] <= records[-1] <= count):
                raise ValueError(f"{DOCUMENTS_FILE} does not hold {self.meta['documents']} ordered starts")
        starts = np.unique(np.concatenate([[0], self.offsets[ends], records]).astype(np.int64))
        self.document_starts = starts[starts < max(count, 1)]  # token offsets where documents start

    def __len__(self) -> int:
        return int(self.meta["num_tokens"])

    def read(self, begin: int, end: int) -> np.ndarray:
        """Tokens [begin, end), read with ``pread``. Windows are read this way, not through ``tokens``: a read
        through the map makes the kernel map the page-cache folios around it (hundreds of KB) into this process, so
        its resident memory would grow with every window read; ``pread`` copies only the window."""
        begin, end = max(int(begin), 0), min(int(end), len(self))
        size = self.tokens.dtype.itemsize
        data = os.pread(self._file.fileno(), max(end - begin, 0) * size, begin * size)
        return np.frombuffer(data, dtype=self.tokens.dtype)

    def __getstate__(self) -> dict:
        return {"folder": str(self.folder)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["folder"])


def open_or_build(
    segments: list[Segment],
    tokenizer_json: str,
    encode: Callable[[str], np.ndarray],
    vocab_size: int,
    end_of_document: int | None,
    cache_dir: str | Path | None = None,
    safe_cut: Callable[[str], int] | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    encode_batch: Callable[[list[str]], list[np.ndarray]] | None = None,
) -> TokenStore:
    """The store of ``segments`` under this tokenizer: opened from the cache when it is there and whole, else
    encoded (``encode(text) -> ids``, streamed in pieces that end at a ``safe_cut``, ``text_pieces``; records
    through ``encode_batch(texts)``, many at a time) and written atomically."""
    dtype = token_dtype(vocab_size)
    encode_batch = encode_batch or (lambda texts: [encode(text) for text in texts])

    def write(staging: Path) -> None:
        _write_store(staging, segments, encode, encode_batch, dtype, vocab_size, end_of_document, safe_cut)

    return open_or_write(cache_root(cache_dir), store_key(segments, tokenizer_json), write, log)


def build_lock(root: Path, key: str):
    """An exclusive lock on ``root/.<key>.lock`` (``atomic.exclusive_lock``: unlocked in a read-only cache)."""
    return exclusive_lock(root / f".{key}.lock", "the token cache's filesystem takes no file locks, which keep two "
                          "builders of a store apart; give a folder on another filesystem as data.cache_dir or as "
                          "$MARKOVFORMER_CACHE")  # fmt: skip


def open_or_write(root: Path, key: str, write: Callable[[Path], None], log: Callable[[str], None]) -> TokenStore:
    """The store ``root/key``: opened when it is there and whole, else ``write(staging)`` fills a staging folder
    (``tokens.bin`` then ``finish_store``) that is renamed into place; one builder at a time (``build_lock``)."""
    folder = root / key
    if cache_holds(root, key):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return TokenStore(folder)
    with build_lock(root, key):
        if cache_holds(root, key):  # another process may have built it while this one waited
            try:
                return TokenStore(folder)
            except (OSError, ValueError, KeyError, TypeError) as error:
                log(f"token cache {folder} is damaged ({error}): rebuilding it")
                shutil.rmtree(folder, ignore_errors=True)
        _build(root, folder, write)
    return TokenStore(folder)


def cache_holds(root: Path, name: str) -> bool:
    """Whether the token cache ``root`` holds ``name``; ValueError naming the cache when it cannot be looked in
    (another user's private folder), which would otherwise reach the user as a bare 'Permission denied' on the name,
    or be taken for 'absent' and said only after a tokenizer fit: loaders look in before they fit."""
    try:  # stat, not is_dir: whether is_dir raises on a denial or answers False differs across Pythons
        return stat.S_ISDIR((root / name).stat().st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise ValueError(f"cannot read the token cache {root} ({error.strerror or error}): give a folder "
                         "of your own as data.cache_dir or as $MARKOVFORMER_CACHE (where data.cache_dir is "
                         "null)") from None  # fmt: skip


def _build(root: Path, folder: Path, write: Callable[[Path], None]) -> None:
    _remove_abandoned_staging(root, folder.name)
    staging = root / f".{folder.name}{_STAGING}{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        staging.mkdir(parents=True)  # in the try: an unwritable cache root is said as one, naming data.cache_dir
        write(staging)
        try:
            os.rename(staging, folder)
        except OSError:  # another process finished the same store first: keep theirs
            if not folder.is_dir():
                raise
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException as error:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(error, OSError):
            raise ValueError(write_failure(error, f"the token cache in {root}", "nothing was cached: free space "
                                           "there, or give a writable folder as data.cache_dir (a new run: a resumed "
                                           "run keeps its data options) or as $MARKOVFORMER_CACHE (where "
                                           "data.cache_dir is null)")) from None  # fmt: skip
        raise


def _write_store(staging: Path, segments, encode, encode_batch, dtype, vocab_size, end_of_document,
                 safe_cut) -> None:  # fmt: skip
    total = sum(segment.stop - segment.start for segment in segments)
    progress = _progress(total)
    offsets, count, documents = [0], 0, []
    with (staging / TOKENS_FILE).open("wb") as out:
        for segment in segments:
            if segment.documents != "file":
                count = _write_records(out, segment, encode_batch, dtype, vocab_size, end_of_document, count,
                                       documents, progress, safe_cut)  # fmt: skip
                offsets.append(count)
                continue
            characters = segment.first_character
            for piece in text_pieces(Path(segment.path), segment.start, segment.stop, safe_cut=safe_cut):
                try:
                    ids = np.asarray(encode(piece))
                except UnknownCharacter as error:
                    raise ValueError(f"{segment.path}: character {error.character!r} at offset "
                                     f"{characters + error.index}{segment.where or ' is not in the vocabulary'}"
                                     ) from None  # fmt: skip
                characters += len(piece)
                _check_ids(ids, vocab_size)
                append_array(out, ids.astype(dtype, copy=False))
                count += len(ids)
                if progress is not None:
                    progress.update(len(piece.encode("utf-8")))
            if segment.end_of_document and end_of_document is not None:
                append_array(out, np.asarray([end_of_document], dtype=dtype))
                count += 1
            offsets.append(count)
    if progress is not None:
        progress.close()
    starts = np.concatenate(documents) if documents else np.zeros(0, np.int64)
    finish_store(staging, offsets, dtype, vocab_size, end_of_document, [asdict(s) for s in segments], starts)


def _write_records(out, segment: Segment, encode_batch, dtype, vocab_size, end_of_document, count: int,
                   documents: list, progress, safe_cut=None) -> int:  # fmt: skip
    """Append each record of ``segment`` (its ids, then the end-of-document token), encoding about
    ``CHUNK_BYTES`` of records at a time; their start offsets go to ``documents``. Returns the new token count. A
    longer record (a FASTA chromosome) is encoded on its own in pieces that end at a ``safe_cut`` (``safe_pieces``:
    the ids of the whole), so the tokenizer, which holds tens of bytes per character it is handed, is handed at most
    ``2 * CHUNK_BYTES`` characters at once."""
    if end_of_document is None:
        raise ValueError("records are documents: the tokenizer needs an end-of-document token")
    path, batch, size, shown = Path(segment.path), [], 0, 0
    eod = np.asarray([end_of_document], dtype=dtype)

    def encoded(texts: list[str]) -> list[np.ndarray]:
        try:
            return encode_batch(texts)
        except UnknownCharacter as error:
            raise ValueError(f"{path}: character {error.character!r} in a record"
                             f"{segment.where or ' is not in the vocabulary'}") from None  # fmt: skip

    def write(ids: np.ndarray) -> int:
        _check_ids(ids, vocab_size)
        append_array(out, np.asarray(ids).astype(dtype, copy=False))
        return len(ids)

    records = record_texts(path, segment.start, segment.stop, segment.documents, segment.text_column,
                           segment.fold_case)  # fmt: skip
    for text in itertools.chain(records, [None]):  # None: encode what is left
        long = text is not None and safe_cut is not None and len(text) > CHUNK_BYTES
        if text is not None and not long:
            batch.append(text)
            size += len(text)
        if batch and (text is None or long or size >= CHUNK_BYTES):
            lengths = []
            for ids in encoded(batch):
                lengths.append(write(ids) + 1)
                append_array(out, eod)
            documents.append(count + np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
            count += sum(lengths)
            shown += size
            if progress is not None:
                progress.update(size)
            batch, size = [], 0
        if long:
            documents.append(np.asarray([count], dtype=np.int64))
            count += sum(write(encoded([piece])[0]) for piece in safe_pieces(text, CHUNK_BYTES, safe_cut)) + 1
            append_array(out, eod)
            shown += len(text)
            if progress is not None:
                progress.update(len(text))
    if progress is not None:  # the bar counts bytes: separators, JSON syntax and multi-byte characters too
        progress.update(max(segment.stop - segment.start - shown, 0))
    return count


def append_array(out: BinaryIO, array: np.ndarray) -> None:
    """Append ``array``'s bytes to the file ``out`` through its own writes. numpy's ``tofile`` (and ``np.save``,
    which calls it) writes past Python's file object and drops the errno: on a full disk a short write was lost
    without an error, a long one raised "N requested and 0 written", never the no-space error ``_build`` words."""
    out.write(np.ascontiguousarray(array).data)


def save_array(path: Path, array: np.ndarray) -> None:
    """``np.save``'s file (the .npy format), written by ``append_array``."""
    with path.open("wb") as out:
        np.lib.format.write_array_header_1_0(out, np.lib.format.header_data_from_array_1_0(array))
        append_array(out, array)


def _check_ids(ids: np.ndarray, vocab_size: int) -> None:
    if len(ids) and (ids.min() < 0 or ids.max() >= vocab_size):
        raise ValueError(f"the tokenizer produced id {int(ids.max())} outside its vocabulary of {vocab_size}")


def finish_store(staging: Path, offsets, dtype: np.dtype, vocab_size: int, end_of_document: int | None,
                 segments: list[dict], documents: np.ndarray) -> None:  # fmt: skip
    """Write a staging store's offsets, record starts and meta (last) beside its written ``tokens.bin``."""
    save_array(staging / OFFSETS_FILE, np.asarray(offsets, dtype=np.int64))
    if len(documents):
        save_array(staging / DOCUMENTS_FILE, np.asarray(documents, dtype=np.int64))
    meta = {"format": STORE_FORMAT, "dtype": np.dtype(dtype).name, "num_tokens": int(offsets[-1]),
            "vocab_size": vocab_size, "end_of_document": end_of_document, "segments": segments,
            "documents": len(documents), "tokens_sampled_blake2b": _sampled_hash(staging / TOKENS_FILE),
            "written": time.time()}  # fmt: skip
    atomic_write_text(staging / META_FILE, json.dumps(meta))


def _read_meta(folder: Path, formats: tuple[int, ...] = (STORE_FORMAT,)) -> dict:
    meta = read_json_object(folder / META_FILE, "a token store's record")
    if meta.get("format") not in formats:
        raise ValueError(f"{META_FILE} is not a format-{STORE_FORMAT} store's")
    return meta


def _sampled_hash(path: Path) -> str:
    key = content_key(path)
    return f"{key['size']}:{key['sampled_blake2b']}"


def _progress(total: int):
    """A tqdm bar in bytes (MB/s and the time left) for corpora worth one, on stderr when it is a terminal; None
    otherwise. A log or pipe gets one line instead: a bar's carriage-return frames would pile up in it."""
    if total < _PROGRESS_ABOVE_BYTES or sys.stderr is None:  # None: stderr closed (2>&-)
        return None
    if not sys.stderr.isatty():
        print(f"tokenizing {total / 1e6:.1f} MB into the token store", file=sys.stderr, flush=True)
        return None
    from tqdm import tqdm  # a dependency of lightning, which the command line needs

    return tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", mininterval=1.0, file=sys.stderr)


def _remove_abandoned_staging(root: Path, key: str) -> None:
    """Staging folders of the store ``key`` left by a builder killed while it wrote: with the store's build lock
    held, every one of them is abandoned. Other stores' are left alone: their builder may be alive on another
    machine sharing the cache, where no pid of this machine says whether it is."""
    for staging in root.glob(f".{key}{_STAGING}*"):
        shutil.rmtree(staging, ignore_errors=True)
