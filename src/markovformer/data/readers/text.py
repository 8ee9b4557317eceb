"""Language-model text: a loader that encodes text files (with a tokenizer of ``readers.tokenizer``) into a cached token
store and cuts it into windows."""

from __future__ import annotations

import array
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
from torch import Tensor

from markovformer.atomic import atomic_write_text
from markovformer.data.bundle import DataBundle
from markovformer.data.collate import IGNORE_INDEX, collate
from markovformer.data.readers.fasta_format import fasta_records, looks_like_fasta, sampled_fasta
from markovformer.data.readers.records import (
    RECORD_KINDS,
    record_boundary,
    record_reading,
    record_texts,
    sampled_records,
)
from markovformer.data.readers.store_windows import RandomStarts, StoreWindows
from markovformer.data.readers.text_stream import (
    CHUNK_BYTES,
    byte_offset_of_character,
    content_key,
    count_characters,
    file_size,
    line_number,
    not_text_message,
    resolve_text_paths,
    sampled_text,
    text_pieces,
)
from markovformer.data.readers.token_store import (
    STORE_FORMAT,
    Segment,
    build_lock,
    cache_holds,
    cache_root,
    open_or_build,
)
from markovformer.data.readers.tokenized_text import TokenizedText
from markovformer.data.readers.tokenizer import (
    END_OF_DOCUMENT,
    PAD_TOKEN,
    BPETokenizer,
    CharTokenizer,
    tokenizer_from_record,
)
from markovformer.data.splits import contiguous_split
from markovformer.strict_json import read_json_object

_SPLIT_NAMES = ("train", "val", "test")
# What a cached plan holds and how it is made: raised when the same files and options plan other parts, sizes or
# tokenizer. 2: the train segments' fit_sizes kept; FASTA parts cut and BPE sampled by bases (the plans of versions
# that cut them by bytes came back under the same key)
PLAN_FORMAT = 2


def load_text_lm(
    path: str | Path, *, documents: str = "file", fold_case: bool = False,
    fitted: CharTokenizer | BPETokenizer | None = None, **options,
) -> DataBundle:
    """UTF-8 text as next-token examples read from a token store (``readers.token_store``): encoded once, cached by
    content and tokenizer, memory-mapped, each example cut from it when asked for. ``options``: the fields of
    ``TokenizedText`` (tokenizer, vocab_size, seq_len, fractions, overlap, cache_dir, ...), checked there.

    ``path``: a file, a directory or a glob (a compressed file, told by its first bytes, is refused). One file is one
    text, split by characters in order (train first, then val, then test; character offsets in ``splits``). Several
    files are documents: an end-of-document token closes each, and the split is by whole documents in order
    (document indices in ``splits``).

    The tokenizer is fitted on the train part only (unless ``fitted`` is given, e.g. a run's saved tokenizer): the
    char alphabet over the whole train part (a streaming pass: a sample could miss a rare character), byte-level
    BPE merges (``vocab_size`` required) over at most ``fit_bytes`` of it, spread evenly. With the char tokenizer a
    character outside the alphabet raises, naming it, its offset and the split. Each split is cut into windows of
    ``seq_len + 1`` tokens (``overlap`` tokens of context carried from one to the next; see ``text_windows``).
    ``window_starts="random"``: training windows start at any token, drawn per (seed, step). ``packing``: examples
    also carry ``position_ids`` that restart at each document (documents packed without padding).

    ``documents="jsonl"`` (the ``text_column`` string of each line's JSON object), ``"blank_line"`` (each run of
    non-blank lines) or ``"fasta"`` (each record's bases, soft-masked lowercase read as uppercase with
    ``fold_case``: ``fasta_format.fasta_records``): every record of every file is a document, closed by the
    end-of-document token; the files are then split at record boundaries near the fractions of their total bytes
    (FASTA: of their bases, so that the line width moves no record), byte offsets in ``splits``. A file that looks
    like FASTA read as plain text (``documents="file"``) is said on stderr as the split is planned.

    Example: {"input_ids": (L,) long, "labels": (L,) long[, "position_ids": (L,) long]}, L = seq_len + 1 except a
    last shorter window; the model shifts labels inside. info: {"vocab_size": V}.
    """
    tokenized = TokenizedText(**options)  # the options' one list: defaulted and checked there
    if documents not in RECORD_KINDS:
        raise ValueError(f"data.documents={documents!r} must be one of {RECORD_KINDS}")
    if documents != "jsonl" and tokenized.text_column != "text":  # the JSON would be read as the text itself
        raise ValueError(f"data.text_column={tokenized.text_column!r} applies only to data.documents='jsonl' (the "
                         f"field of each line's JSON record holding its text); data.documents={documents!r} reads "
                         f"the files as they are")  # fmt: skip
    if not isinstance(fold_case, bool):
        raise ValueError(f"data.fold_case={fold_case!r} must be true or false")
    if fold_case and documents != "fasta":
        raise ValueError(f"data.fold_case={fold_case} applies only to data.documents='fasta' (it reads soft-masked "
                         f"lowercase bases as uppercase); data.documents={documents!r} reads letters as they are")
    files = resolve_text_paths(path)
    with_documents = len(files) > 1 or documents != "file"
    tokenized.check(fitted, end_of_document=with_documents)
    tokenizer, vocab_size, fractions = tokenized.tokenizer, tokenized.vocab_size, tokenized.fractions
    cache_dir, fit_bytes, text_column = tokenized.cache_dir, tokenized.fit_bytes, tokenized.text_column
    root, folder = cache_root(cache_dir).resolve(), Path(path).resolve()
    if folder.is_dir() and root.is_relative_to(folder) and not any(
            part.startswith(".") for part in root.relative_to(folder).parts):  # fmt: skip
        raise ValueError(f"the token cache {root} (data.cache_dir, else $MARKOVFORMER_CACHE) lies inside "
                         f"data.path={str(path)!r}, every file of which is read as a document: its stores would be "
                         f"read as text; put it elsewhere, or in a hidden folder there ({Path(path) / '.cache'})")
    sizes = [file_size(file) for file in files]
    # What a second run would compute again (character count, split cuts, the fitted tokenizer) is cached beside
    # the token stores, under the same kind of content key: reopening a prepared corpus reads no text.
    plan_key = hashlib.sha256(json.dumps([[content_key(file) for file in files], list(fractions), tokenizer,
                                          vocab_size, fit_bytes, str(path), STORE_FORMAT, PLAN_FORMAT,
                                          *record_reading(documents, text_column, fold_case)]
                                         ).encode()).hexdigest()[:32]  # fmt: skip
    # one process prepares (fits, encodes) at a time: DDP ranks and concurrent runs wait, then read what it wrote
    with build_lock(cache_root(cache_dir), f"plan-{plan_key}"):
        plan_path = cache_root(cache_dir) / "plans" / f"{plan_key}.json"
        # before anything is read or fitted: a cache that cannot be looked in is said now, not after the fit
        plan = _read_plan(plan_path) if cache_holds(cache_root(cache_dir), "plans") else None
        if plan is not None:
            parts = [[Segment(**segment) for segment in part] for part in plan["parts"]]
            splits, fit_sizes = plan["splits"], plan["fit_sizes"]
        else:
            parts, splits, fit_sizes = _split_parts(Path(path), files, sizes, fractions, documents, text_column,
                                                    fold_case)  # fmt: skip
        saved = fitted is not None
        train_bytes = sum(segment.stop - segment.start for segment in parts[0])
        if fitted is None and plan is not None and plan.get("tokenizer"):
            fitted = tokenizer_from_record(plan["tokenizer"])
        elif fitted is None:
            train_segments = parts[0]
            if not any(segment.stop > segment.start for segment in train_segments):
                raise ValueError(f"{path}: the train part is empty (fractions {tuple(fractions)})")
            if tokenizer == "char":
                fitted = CharTokenizer(_alphabet(train_segments), end_of_document=with_documents)
            else:
                special = (PAD_TOKEN, END_OF_DOCUMENT) if with_documents else (PAD_TOKEN,)
                sample = (piece for segment, size, budget in _fit_budgets(train_segments, fit_sizes, fit_bytes)
                          for piece in _sampled(segment, size, budget))  # fmt: skip
                fitted = BPETokenizer.train(sample, vocab_size, special_tokens=special, text_bytes=train_bytes)
        if not saved:  # its advice weighs data.fit_bytes against what the fit samples: a FASTA's bases
            tokenized.announce_fitted(fitted, path, sum(fit_sizes), "bases" if documents == "fasta" else "bytes")
        if plan is None or (not saved and not plan.get("tokenizer")):
            record = {"parts": [[dataclasses.asdict(segment) for segment in part] for part in parts], "splits": splits,
                      "fit_sizes": fit_sizes, "tokenizer": None if saved else fitted.record()}  # fmt: skip
            try:
                atomic_write_text(plan_path, json.dumps(record))
            except OSError:  # a read-only cache only costs the next run the fitting again
                pass
        if documents != "file" and fitted.end_of_document_id is None:  # only a saved tokenizer can lack one
            raise ValueError(f"data.documents={documents!r} closes each record of {path} with an end-of-document "
                             f"token, which the run's saved tokenizer lacks (its run read one text, no documents): "
                             f"use data.documents=file")  # fmt: skip
        if len(files) > 1 and fitted.end_of_document_id is None:  # the files would run into each other unmarked
            raise ValueError(f"data.path={str(path)!r} names {len(files)} files, documents that the run's saved "
                             f"tokenizer cannot keep apart (it has no end-of-document token: its run read one text); "
                             f"score one file at a time")  # fmt: skip
        segments = []
        for name, part in zip(_SPLIT_NAMES, parts, strict=True):
            told = (f" in the {name} part is not in the run's saved char alphabet" if saved else
                    f" in the {name} part never occurs in the train part, which the char vocabulary is fitted on")
            segments += [dataclasses.replace(segment, where=told) for segment in part]
        store = open_or_build(segments, json.dumps(fitted.record(), sort_keys=True), fitted.encode_array,
                              fitted.vocab_size, fitted.end_of_document_id, cache_dir,
                              safe_cut=fitted.safe_cut,
                              encode_batch=fitted.encode_batch)  # fmt: skip
    splits["resolved_paths"] = [str(file.resolve()) for file in files]
    return store_bundle(store, [len(part) for part in parts], path, fitted, splits, tokenized)


def store_bundle(store, segments_per_split: list[int], path, fitted, splits: dict,
                 tokenized: TokenizedText) -> DataBundle:  # fmt: skip
    """The bundle of a token store whose segments are the train, val and test parts in order
    (``segments_per_split`` of them each): windows of each part, read from the map when asked for."""
    seq_len, fractions, overlap = tokenized.seq_len, tokenized.fractions, tokenized.overlap
    window_starts, packing = tokenized.window_starts, tokenized.packing
    examples, first = {}, 0
    for name, count, fraction in zip(_SPLIT_NAMES, segments_per_split, fractions, strict=True):
        start, stop = int(store.offsets[first]), int(store.offsets[first + count])
        first += count
        if stop - start < seq_len + 1 and fraction > 0:
            files, remedy = "", "a longer file"
            if splits.get("kind") == "documents":  # a directory or glob: the fractions split whole files
                held = splits[name][1] - splits[name][0]
                files = f" ({held} of the {len(splits['documents'])} files: the fractions split whole files)"
                remedy = "more or longer files"
            raise ValueError(
                f"{path}: the {name} part has {stop - start} tokens{files}, fewer than seq_len + 1 = {seq_len + 1}; "
                f"use {remedy}, a shorter seq_len or other fractions"
            )
        if name == "train" and window_starts == "random":
            examples[name] = RandomStarts(store, start, stop, seq_len, position_ids=packing)
        else:
            examples[name] = StoreWindows(store, start, stop, seq_len, overlap, position_ids=packing)
    splits.update({"seq_len": seq_len, "overlap": overlap, "tokenizer": fitted.kind, "store": str(store.folder)})
    if window_starts != "contiguous" or packing:
        splits.update({"window_starts": window_starts, "packing": packing})
    return DataBundle(**examples, info={"vocab_size": fitted.vocab_size}, splits=splits, tokenizer=fitted,
                      collate=collate, train_sampling="uniform" if window_starts == "random" else "epochs")


def _split_parts(path: Path, files: list[Path], sizes: list[int], fractions, documents: str = "file",
                 text_column: str = "", fold_case: bool = False,
                 ) -> tuple[list[list[Segment]], dict, list[int]]:  # fmt: skip
    """The segments of each split, the record of the split and the train segments' sizes as data.fit_bytes counts
    them (bytes; a FASTA's bases): one file by characters, several by documents, and records by byte fractions moved
    to the next record boundary (FASTA: by bases)."""
    for file in files:  # before reading them as text: a compressed file would fail late, or as no JSON or record
        told = not_text_message(file)
        if told is not None:
            raise ValueError(told)
    if documents != "file":
        return _split_records(path, files, sizes, fractions, documents, text_column, fold_case)
    _warn_of_fasta(files)
    if len(files) == 1:
        file = files[0]
        characters = count_characters(file)
        ranges = contiguous_split(characters, fractions)
        cuts = [byte_offset_of_character(file, r.start) for r in ranges] + [sizes[0]]
        parts = [[Segment(str(file), cuts[i], cuts[i + 1], first_character=r.start)] for i, r in enumerate(ranges)]
        record = {"kind": "contiguous_characters", "path": str(path), "num_characters": characters,
                  **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)}}  # fmt: skip
        return parts, record, _byte_sizes(parts[0])
    ranges = contiguous_split(len(files), fractions)
    parts = [[Segment(str(files[i]), 0, sizes[i], end_of_document=True) for i in r] for r in ranges]
    record = {"kind": "documents", "path": str(path), "documents": [str(file) for file in files],
              **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)}}  # fmt: skip
    return parts, record, _byte_sizes(parts[0])


def _warn_of_fasta(files: list[Path]) -> None:
    """One line on stderr when files read as plain text look like FASTA (``looks_like_fasta``): their headers and
    line breaks would be trained on, likely meant as data.documents: fasta (not refused: FASTA text may be meant)."""
    fasta = [file for file in files if looks_like_fasta(file)]
    if fasta:
        more = f" (and {len(fasta) - 1} more of the files)" if len(fasta) > 1 else ""
        print(f"{fasta[0]}: looks like FASTA{more}, read by data.documents: file as plain text, its headers and line "
              f"breaks trained on as text; to train on each record's bases alone, set data.documents: fasta",
              file=sys.stderr, flush=True)  # fmt: skip


def _byte_sizes(segments: list[Segment]) -> list[int]:
    return [segment.stop - segment.start for segment in segments]


def _fasta_table(files: list[Path], sizes: list[int]) -> np.ndarray:
    """(R, 3) int64: the file index, header offset and bases of each FASTA record of ``files``, in order, read in
    one pass, one record held at a time (24 bytes a record kept: a file of 10 million reads keeps 240 MB)."""
    table = array.array("q")
    for index, file in enumerate(files):
        for at, _, sequence in fasta_records(file, 0, sizes[index]):
            table.extend((index, at, len(sequence)))
    return np.frombuffer(table, dtype=np.int64).reshape(-1, 3)


def _fasta_cuts(table: np.ndarray, files: list[Path], sizes: list[int], fractions) -> tuple[list, list]:
    """``_split_records``' cuts of the FASTA records of ``table`` (``_fasta_table``) and where its fractions fall:
    each part starts at the first record with at least its fraction of all bases before it (the record holding that
    base is where it falls), so a line width moves no record across a cut (bytes would: line breaks and headers are
    bytes)."""
    total = int(table[:, 2].sum())
    shares = [total * float(share) for share in np.cumsum(fractions)[:-1]]
    cuts, targets, before = [(0, 0)], [(0, 0)], 0
    for index, at, bases in table.tolist():
        while len(cuts) <= len(shares) and before >= shares[len(cuts) - 1]:
            cuts.append((index, at))
        while len(targets) <= len(shares) and before + bases > shares[len(targets) - 1]:
            targets.append((index, at))
        before += bases
    end = (len(files) - 1, sizes[-1])
    return cuts + [end] * (len(shares) + 1 - len(cuts)), targets + [end] * (len(shares) + 1 - len(targets))


def _fasta_bases(table: np.ndarray, files: list[Path], sizes: list[int], segments: list[Segment]) -> list[int]:
    """The bases of the records of ``table`` (``_fasta_table`` of ``files``) whose header lies in each segment."""
    scale = max(sizes) + 1  # (file index, offset) as one number, in the order of the table's rows
    keys = table[:, 0] * scale + table[:, 1]
    before = np.concatenate([[0], np.cumsum(table[:, 2])])
    index_of = {str(file): index for index, file in enumerate(files)}
    rows = [np.searchsorted(keys, [index_of[segment.path] * scale + segment.start,
                                   index_of[segment.path] * scale + segment.stop]) for segment in segments]  # fmt: skip
    return [int(before[stop] - before[start]) for start, stop in rows]


def _read_plan(path: Path) -> dict | None:
    """A cached plan (split segments, split record, train segments' sizes, fitted tokenizer), or None when absent,
    unreadable or incomplete (prepared again)."""
    try:
        plan = read_json_object(path, "a cached plan")
    except (OSError, ValueError):
        return None
    return plan if {"parts", "splits", "fit_sizes"} <= set(plan) else None


def _split_records(path: Path, files: list[Path], sizes: list[int], fractions, documents: str, text_column: str,
                   fold_case: bool = False) -> tuple[list[list[Segment]], dict, list[int]]:  # fmt: skip
    """Records split in order: each cut at the fraction of the files' total bytes (FASTA: bases, ``_fasta_cuts``),
    moved to the next record start of the file it falls in. A cut is (file index, byte offset). Also the train
    segments' sizes as data.fit_bytes counts them: bytes, a FASTA's bases (counted in the pass that cuts them)."""
    if documents == "fasta":
        table = _fasta_table(files, sizes)
        cuts, targets = _fasta_cuts(table, files, sizes, fractions)
    else:
        total, cuts, targets = sum(sizes), [(0, 0)], [(0, 0)]
        for share in np.cumsum(fractions)[:-1]:
            target, index = int(round(total * float(share))), 0
            while index < len(files) - 1 and target >= sizes[index]:
                target, index = target - sizes[index], index + 1
            targets.append((index, min(target, sizes[index])))
            cuts.append(max(cuts[-1], (index, record_boundary(files[index], min(target, sizes[index]), documents))))
    cuts.append((len(files) - 1, sizes[-1]))
    parts = []
    for (first, begin), (last, end) in zip(cuts[:-1], cuts[1:], strict=True):
        part = []
        for index in range(first, last + 1):
            start, stop = begin if index == first else 0, end if index == last else sizes[index]
            if stop > start:
                part.append(Segment(str(files[index]), start, stop, documents=documents, text_column=text_column,
                                    fold_case=fold_case))  # fmt: skip
        parts.append(part)
    for name, part, fraction, (index, target) in zip(_SPLIT_NAMES, parts, fractions, targets, strict=True):
        if fraction > 0 and not part and documents == "fasta":  # the record holding its first base runs on past it
            raise ValueError(f"{path}: data.documents='fasta' puts no record in the {name} part: no record starts "
                             f"within its share of the bases, where fractions {tuple(fractions)} start it inside "
                             f"the record headed on line {line_number(files[index], target)} of {files[index]}, "
                             f"and a record is never cut (give the part a larger fraction)")  # fmt: skip
        if fraction > 0 and not part:  # every record starts before the part's share: the separator is missing
            separator = {"jsonl": "newline", "blank_line": "blank line"}[documents]
            raise ValueError(f"{path}: data.documents={documents!r} puts no record in the {name} part: no {separator} "
                             f"follows byte {target} of {files[index]}, where fractions {tuple(fractions)} start it "
                             f"(records are separated by a {separator}; without one a file is a single record)")
    record = {"kind": "records", "documents": documents, "path": str(path), "files": [str(file) for file in files],
              **{name: [list(cuts[i]), list(cuts[i + 1])] for i, name in enumerate(_SPLIT_NAMES)}}  # fmt: skip
    return parts, record, _fasta_bases(table, files, sizes, parts[0]) if documents == "fasta" else _byte_sizes(parts[0])


def _segment_texts(segment: Segment):
    """The text of a segment in pieces: its bytes decoded, or its records' texts."""
    if segment.documents == "file":
        return text_pieces(Path(segment.path), segment.start, segment.stop)
    return record_texts(Path(segment.path), segment.start, segment.stop, segment.documents, segment.text_column,
                        segment.fold_case)  # fmt: skip


def _sampled(segment: Segment, size: int, budget: int):
    """About ``budget`` bytes of a segment's text spread over it (``sampled_text`` or ``sampled_records``; FASTA:
    ``sampled_fasta`` of the segment's ``size`` in bases, known: not counted again)."""
    if segment.documents == "file":
        return sampled_text(Path(segment.path), segment.start, segment.stop, budget)
    if segment.documents == "fasta":
        return sampled_fasta(Path(segment.path), segment.start, segment.stop, budget, segment.fold_case, bases=size)
    return sampled_records(Path(segment.path), segment.start, segment.stop, budget, segment.documents,
                           segment.text_column, segment.fold_case)  # fmt: skip


def _fit_budgets(segments: list[Segment], sizes: list[int], fit_bytes: int):
    """(segment, its size, bytes to sample from it) for the BPE fit: about ``fit_bytes`` in all, each segment's share
    in proportion to its ``sizes`` entry (bytes; FASTA: its bases, which no line width or header changes). A share
    too small to sample (under 1024 bytes, or under a smaller segment's size) is passed on to the next segment, so
    that many small files are fitted on whole files spread evenly (each took 1024 bytes at least: 2,000 files of
    2 KB fed 1.8 MB for a fit_bytes of 64 KB)."""
    total, carried = sum(sizes), 0.0
    for segment, size in zip(segments, sizes, strict=True):
        carried += fit_bytes * size / total
        if size and carried >= min(size, 1024):
            take = min(int(carried), size)
            carried -= take
            yield segment, size, take


def _alphabet(segments: list[Segment]) -> str:
    """The characters of the segments' text, in one streaming pass (counts of codepoints, no Python loop), a record
    (a FASTA chromosome) ``CHUNK_BYTES`` characters at a time: its codepoints take four bytes a character."""
    seen = np.zeros(0x10000, dtype=bool)
    astral: set[int] = set()
    for segment in segments:
        for text in _segment_texts(segment):
            for start in range(0, len(text), CHUNK_BYTES):
                codepoints = np.frombuffer(text[start : start + CHUNK_BYTES].encode("utf-32-le"),
                                           dtype=np.uint32)  # fmt: skip
                basic = codepoints < 0x10000
                seen[codepoints[basic]] = True
                if not basic.all():
                    astral.update(np.unique(codepoints[~basic]).tolist())
    return "".join(map(chr, [*np.flatnonzero(seen).tolist(), *sorted(astral)]))


def text_windows(tokens: Tensor, seq_len: int, overlap: int = 0) -> list[dict[str, Tensor]]:
    """Cut a token stream (N,) into next-token examples of ``seq_len + 1`` tokens.

    ``overlap = 0``: non-overlapping windows; a shorter tail is dropped. ``overlap = c > 0``: a window starts every
    ``seq_len + 1 - c`` tokens, so each begins with the last c tokens of the one before, and those are context only
    (labels -100); a last shorter window keeps the tail. Then every token from offset c on is a target exactly once,
    with at least c tokens before it in its window: a model that reads at most c tokens back (an n-gram, the scan
    model's markov mode with n <= c) is scored on every position as if it read the whole stream.
    """
    length = seq_len + 1
    if overlap == 0:
        count = len(tokens) // length
        return [{"input_ids": window, "labels": window} for window in tokens[: count * length].view(count, length)]
    examples = []
    for start in range(0, max(len(tokens) - overlap, 0), length - overlap):
        window = tokens[start : start + length]
        labels = window.clone()
        labels[:overlap] = IGNORE_INDEX
        examples.append({"input_ids": window, "labels": labels})
    return examples
