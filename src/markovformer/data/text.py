"""Language-model text: character and byte-level BPE tokenizers, and a loader that cuts a text file into windows.

Token id 0 is padding for both tokenizers (it never appears in an encoding), so ``vocab_size`` counts it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path

import numpy as np
from torch import Tensor

from markovformer.atomic import atomic_write_text
from markovformer.data.bundle import DataBundle
from markovformer.data.collate import IGNORE_INDEX, collate
from markovformer.data.splits import contiguous_split
from markovformer.data.store_windows import RandomStarts, StoreWindows
from markovformer.data.text_stream import (
    RECORD_KINDS,
    byte_offset_of_character,
    content_key,
    count_characters,
    file_size,
    record_boundary,
    record_texts,
    resolve_text_paths,
    sampled_records,
    sampled_text,
    text_pieces,
)
from markovformer.data.token_store import Segment, UnknownCharacter, build_lock, cache_root, open_or_build

TOKENIZER_FILE = "tokenizer.json"
HF_TOKENIZER_CONFIG = "tokenizer_config.json"  # with TOKENIZER_FILE, the Hugging Face format (``save_hf_format``)
_PAD_TOKEN = "<pad>"
END_OF_DOCUMENT = "<eod>"  # BPE's end-of-document token (id 1) when the text has documents
_SAFE_SPACE = re.compile(r"(?<=\S)(?= \S)")  # before a single space between non-spaces: a GPT-2 pre-token cut
_SPLIT_NAMES = ("train", "val", "test")


class CharTokenizer:
    """One id per character of ``alphabet`` (ids 1..len(alphabet) in sorted character order; 0 is padding)."""

    kind = "char"

    def __init__(self, alphabet: str, end_of_document: bool = False) -> None:
        if not alphabet or len(set(alphabet)) != len(alphabet):
            raise ValueError(f"a character alphabet must be non-empty with no repeats, got {alphabet!r}")
        self.alphabet = "".join(sorted(alphabet))
        self._ids = {char: index + 1 for index, char in enumerate(self.alphabet)}
        # with documents, one more id after the characters ends each document (it decodes to nothing)
        self.end_of_document_id = len(self.alphabet) + 1 if end_of_document else None
        codepoints = np.frombuffer(self.alphabet.encode("utf-32-le"), dtype=np.uint32)
        self._table = np.zeros(int(codepoints.max()) + 1, dtype=np.int64)  # codepoint -> id, 0 = not in the alphabet
        self._table[codepoints] = np.arange(1, len(codepoints) + 1)

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose alphabet is the sorted set of characters in ``text``."""
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1 + (self.end_of_document_id is not None)

    def encode_array(self, text: str) -> np.ndarray:
        """Ids of ``text`` as an int64 array, through a codepoint lookup table (no Python loop); a character
        outside the alphabet raises ``UnknownCharacter`` with its index in ``text``."""
        codepoints = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        inside = codepoints < len(self._table)
        ids = np.zeros(len(codepoints), dtype=np.int64)
        ids[inside] = self._table[codepoints[inside]]
        if not ids.all():
            index = int(np.argmin(ids != 0))
            raise UnknownCharacter(text[index], index)
        return ids

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """``encode_array`` of each text (one lookup over their concatenation)."""
        ids = self.encode_array("".join(texts))
        return np.split(ids, np.cumsum([len(text) for text in texts])[:-1]) if texts else []

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``'s characters; a character outside the alphabet raises, naming it and its offset."""
        try:
            return [self._ids[char] for char in text]
        except KeyError as error:
            offset = next(i for i, char in enumerate(text) if char not in self._ids)
            raise ValueError(f"character {error.args[0]!r} at offset {offset} is not in the char alphabet") from None

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (exact inverse of ``encode``); an id outside 1..len(alphabet) raises."""
        ids = [int(i) for i in ids]
        for i in ids:
            if not 1 <= i <= len(self.alphabet) and i != self.end_of_document_id:
                raise ValueError(f"token id {i} is outside the character ids 1..{len(self.alphabet)}")
        return "".join(self.alphabet[i - 1] for i in ids if i != self.end_of_document_id)

    def hf_backend(self):
        """The same ids as a Hugging Face ``tokenizers.Tokenizer``: a word-level vocabulary over single characters
        (each character its own piece, joined back without spaces), ``<pad>`` (and ``<eod>``) special tokens."""
        hf = _import_tokenizers()
        vocabulary = {_PAD_TOKEN: 0, **self._ids}
        if self.end_of_document_id is not None:
            vocabulary[END_OF_DOCUMENT] = self.end_of_document_id
        backend = hf.Tokenizer(hf.models.WordLevel(vocabulary, unk_token=None))
        backend.pre_tokenizer = hf.pre_tokenizers.Split(hf.Regex(r"[\s\S]"), behavior="isolated")
        backend.decoder = hf.decoders.Fuse()
        backend.add_special_tokens([token for token in vocabulary if token in (_PAD_TOKEN, END_OF_DOCUMENT)])
        return backend

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "char", "alphabet": ...}); returns its path."""
        return _write_json(Path(directory), self.record())

    def record(self) -> dict:
        """What ``save`` writes (and what a token store's cache key reads)."""
        record = {"kind": self.kind, "alphabet": self.alphabet}
        return {**record, "end_of_document": True} if self.end_of_document_id is not None else record


class BPETokenizer:
    """Byte-level BPE (Hugging Face ``tokenizers``): every text encodes, unseen characters as bytes, and decodes
    back exactly. Id 0 is the ``<pad>`` special token."""

    kind = "bpe"

    def __init__(self, hf_tokenizer) -> None:
        self._tokenizer = hf_tokenizer
        if hf_tokenizer.token_to_id(_PAD_TOKEN) != 0:
            raise ValueError(f"a BPE tokenizer must have {_PAD_TOKEN!r} as id 0")

    @classmethod
    def train(
        cls, text: str | list[str], vocab_size: int, seed: int = 0, special_tokens: tuple[str, ...] = (_PAD_TOKEN,)
    ) -> BPETokenizer:
        """Learn merges on ``text`` up to ``vocab_size`` tokens (at least len(special_tokens) + 256: the special
        tokens, then the 256 bytes; fewer when the text offers fewer merges). ``special_tokens`` take ids 0, 1, ...
        in order (the first must be ``<pad>``) and are never produced by splitting text; translation adds
        ``<bos>``, ``<eos>`` and ``<unk>``. ``seed`` keeps the signature uniform with other fitted objects: the
        Hugging Face BPE trainer is deterministic, so the merges depend on ``text`` and ``vocab_size`` only."""
        special_tokens = tuple(special_tokens)
        if not special_tokens or special_tokens[0] != _PAD_TOKEN or len(set(special_tokens)) != len(special_tokens):
            raise ValueError(f"special_tokens must start with {_PAD_TOKEN!r} and not repeat, got {special_tokens!r}")
        smallest = len(special_tokens) + 256
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < smallest:
            raise ValueError(
                f"BPE vocab_size must be an int >= {smallest} ({len(special_tokens)} special tokens + 256 bytes), "
                f"got {vocab_size!r}"
            )
        hf = _import_tokenizers()
        tokenizer = hf.Tokenizer(hf.models.BPE())
        tokenizer.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = hf.decoders.ByteLevel()
        trainer = hf.trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=list(special_tokens),
            initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tokenizer.train_from_iterator([text] if isinstance(text, str) else list(text), trainer=trainer)
        return cls(tokenizer)

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size()

    def token_to_id(self, token: str) -> int | None:
        """The id of ``token`` (a special token such as ``"<eos>"``, or a vocabulary entry), None if absent."""
        return self._tokenizer.token_to_id(token)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (any text encodes)."""
        return self._tokenizer.encode(text).ids

    @property
    def end_of_document_id(self) -> int | None:
        return self._tokenizer.token_to_id(END_OF_DOCUMENT)

    def encode_array(self, text: str, pieces: int = 64) -> np.ndarray:
        """Ids of ``text`` as an int64 array, encoded with the Hugging Face batch API (on every core) in up to
        ``pieces`` pieces cut where the pre-tokenizer cuts anyway, so the ids equal ``encode(text)``."""
        parts, start = [], 0
        step = max(len(text) // pieces, 1 << 14)
        while start < len(text):
            stop = start + step
            if stop >= len(text):
                stop = len(text)
            else:
                found = _SAFE_SPACE.search(text, stop, min(stop + step, len(text)))
                stop = found.start() if found else len(text)
            parts.append(text[start:stop])
            start = stop
        encodings = self._tokenizer.encode_batch(parts)
        return np.fromiter((i for encoding in encodings for i in encoding.ids), dtype=np.int64)

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """The ids of each text, encoded together with the Hugging Face batch API (on every core)."""
        return [np.asarray(encoding.ids, dtype=np.int64) for encoding in self._tokenizer.encode_batch(list(texts))]

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (exact inverse of ``encode``)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def hf_backend(self):
        """A copy of the Hugging Face ``tokenizers.Tokenizer`` that encodes (the same ids)."""
        return _import_tokenizers().Tokenizer.from_str(self._tokenizer.to_str())

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "bpe", "tokenizer": <HF tokenizer JSON>}); returns its path."""
        return _write_json(Path(directory), self.record())

    def record(self) -> dict:
        """What ``save`` writes (and what a token store's cache key reads)."""
        return {"kind": self.kind, "tokenizer": json.loads(self._tokenizer.to_str())}


def load_tokenizer(directory: str | Path) -> CharTokenizer | BPETokenizer:
    """Read back a tokenizer written by ``CharTokenizer.save`` or ``BPETokenizer.save``, or one in the Hugging Face
    format written by ``save_hf_format`` (a run's ``model/``; also after ``transformers``' ``save_pretrained``):
    the same ids either way."""
    path = Path(directory) / TOKENIZER_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read a tokenizer ({error})") from None
    if isinstance(record, dict) and "kind" not in record and isinstance(record.get("model"), dict):
        return _from_hf_record(record, path)
    return tokenizer_from_record(record, path)


def tokenizer_from_record(record: dict, path: str | Path = "tokenizer") -> CharTokenizer | BPETokenizer:
    """The tokenizer of a record written by ``record()`` (``path``: where it came from, for errors)."""
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind == "char":
        return CharTokenizer(record["alphabet"], end_of_document=bool(record.get("end_of_document")))
    if kind == "bpe":
        return BPETokenizer(_import_tokenizers().Tokenizer.from_str(json.dumps(record["tokenizer"])))
    raise ValueError(f"{path}: unknown tokenizer kind {kind!r} (expected 'char' or 'bpe')")


def _from_hf_record(record: dict, path: Path) -> CharTokenizer | BPETokenizer:
    """The markovformer tokenizer of a Hugging Face ``tokenizer.json``: a word-level vocabulary of single
    characters (ids 1..n in sorted order, ``<pad>`` 0, ``<eod>`` n+1 if present) is a char tokenizer; a BPE model
    is a BPE tokenizer as it stands."""
    model_type = record["model"].get("type")
    if model_type == "BPE":
        processor = record.get("post_processor") or {}
        if processor.get("type") == "TemplateProcessing" and not processor.get("special_tokens"):
            record = {**record, "post_processor": None}  # transformers' save adds this one; it adds no token
        return BPETokenizer(_import_tokenizers().Tokenizer.from_str(json.dumps(record)))
    if model_type == "WordLevel":
        vocabulary = dict(record["model"].get("vocab", {}))
        end_of_document = vocabulary.pop(END_OF_DOCUMENT, None)
        pad = vocabulary.pop(_PAD_TOKEN, None)
        alphabet = "".join(sorted(vocabulary))
        if (pad == 0 and alphabet and all(len(char) == 1 for char in vocabulary)
                and [vocabulary[char] for char in alphabet] == list(range(1, len(alphabet) + 1))
                and end_of_document in (None, len(alphabet) + 1)):  # fmt: skip
            return CharTokenizer(alphabet, end_of_document=end_of_document is not None)
    raise ValueError(f"{path}: a Hugging Face tokenizer.json of model type {model_type!r} that is not a markovformer "
                     f"tokenizer (a byte-level BPE, or single characters with ids 1..n and <pad> as 0)")  # fmt: skip


def save_hf_format(tokenizer: CharTokenizer | BPETokenizer, directory: str | Path) -> dict[str, int]:
    """Write ``tokenizer`` into ``directory`` in the Hugging Face format (``tokenizer.json`` +
    ``tokenizer_config.json``, whose special tokens are ``<pad>`` and, where the vocabulary has them, ``<bos>``,
    ``<eos>``, ``<unk>``), which ``transformers.AutoTokenizer.from_pretrained(directory)`` reads with no
    markovformer code. When ``directory`` holds a model's ``config.json``, the special tokens' ids go into it as
    ``pad_token_id`` / ``bos_token_id`` / ``eos_token_id`` (unless set there already): ``transformers``'
    generation reads them from the model config; markovformer's loader ignores them. Returns those ids."""
    directory = Path(directory)
    backend = tokenizer.hf_backend()
    special = {name: f"<{name}>" for name in ("pad", "bos", "eos", "unk")
               if backend.token_to_id(f"<{name}>") is not None}  # fmt: skip
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False,
                **{f"{name}_token": token for name, token in special.items()}}  # fmt: skip
    ids = {f"{name}_token_id": backend.token_to_id(token) for name, token in special.items() if name != "unk"}
    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_text(directory / TOKENIZER_FILE, backend.to_str(pretty=True))
    atomic_write_text(directory / HF_TOKENIZER_CONFIG, json.dumps(settings, indent=2) + "\n")
    config_path = directory / "config.json"
    if config_path.is_file():
        values = json.loads(config_path.read_text())
        merged = {**values, **{key: value for key, value in ids.items() if values.get(key) is None}}
        if merged != values:
            atomic_write_text(config_path, json.dumps(merged, indent=2) + "\n")
    return ids


FIT_BYTES = 64 << 20  # default bytes of the train part BPE merges are learned on (data.fit_bytes)


def check_text_options(tokenizer, vocab_size, seq_len, overlap, window_starts, fit_bytes, fitted) -> None:
    """ValueError naming the first bad option of those the tokenized sources share."""
    if tokenizer not in ("char", "bpe"):
        raise ValueError(f"tokenizer must be 'char' or 'bpe', got {tokenizer!r}")
    if tokenizer == "char" and vocab_size is not None and fitted is None:
        raise ValueError(f"vocab_size={vocab_size} applies only to tokenizer='bpe' (the char vocabulary is fitted)")
    if tokenizer == "bpe" and vocab_size is None and fitted is None:
        raise ValueError("tokenizer='bpe' needs vocab_size")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < seq_len:
        raise ValueError(f"overlap={overlap!r} must be an int in [0, seq_len={seq_len})")
    if window_starts not in ("contiguous", "random"):
        raise ValueError(f"window_starts={window_starts!r} must be 'contiguous' or 'random'")
    if isinstance(fit_bytes, bool) or not isinstance(fit_bytes, int) or fit_bytes < 1 << 10:
        raise ValueError(f"fit_bytes={fit_bytes!r} must be an int of at least 1024")


def load_text_lm(
    path: str | Path,
    *,
    tokenizer: str = "char",
    vocab_size: int | None = None,
    seq_len: int,
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05),
    overlap: int = 0,
    cache_dir: str | Path | None = None,
    fit_bytes: int = FIT_BYTES,
    window_starts: str = "contiguous",
    packing: bool = False,
    fitted: CharTokenizer | BPETokenizer | None = None,
    documents: str = "file",
    text_column: str = "text",
) -> DataBundle:
    """UTF-8 text as next-token examples read from a token store (``data.token_store``): encoded once, cached by
    content and tokenizer, memory-mapped, each example cut from it when asked for.

    ``path``: a file, a directory or a glob. One file is one text, split by characters in order (train first, then
    val, then test; character offsets in ``splits``). Several files are documents: an end-of-document token closes
    each, and the split is by whole documents in order (document indices in ``splits``).

    The tokenizer is fitted on the train part only (unless ``fitted`` is given, e.g. a run's saved tokenizer): the
    char alphabet over the whole train part (a streaming pass: a sample could miss a rare character), byte-level
    BPE merges (``vocab_size`` required) over at most ``fit_bytes`` of it, spread evenly. With the char tokenizer a
    character outside the alphabet raises, naming it, its offset and the split. Each split is cut into windows of
    ``seq_len + 1`` tokens (``overlap`` tokens of context carried from one to the next; see ``text_windows``).
    ``window_starts="random"``: training windows start at any token, drawn per (seed, step). ``packing``: examples
    also carry ``position_ids`` that restart at each document (documents packed without padding).

    ``documents="jsonl"`` (the ``text_column`` string of each line's JSON object) or ``"blank_line"`` (each run of
    non-blank lines): every record of every file is a document, closed by the end-of-document token; the files are
    then split at record boundaries near the fractions of their total bytes (byte offsets in ``splits``).

    Example: {"input_ids": (L,) long, "labels": (L,) long[, "position_ids": (L,) long]}, L = seq_len + 1 except a
    last shorter window; the model shifts labels inside. info: {"vocab_size": V}.
    """
    check_text_options(tokenizer, vocab_size, seq_len, overlap, window_starts, fit_bytes, fitted)
    if documents not in RECORD_KINDS:
        raise ValueError(f"documents={documents!r} must be one of {RECORD_KINDS}")
    files = resolve_text_paths(path)
    sizes = [file_size(file) for file in files]
    # What a second run would compute again (character count, split cuts, the fitted tokenizer) is cached beside
    # the token stores, under the same kind of content key: reopening a prepared corpus reads no text.
    plan_key = hashlib.sha256(json.dumps([[content_key(file) for file in files], list(fractions), tokenizer,
                                          vocab_size, fit_bytes, str(path), documents, text_column]
                                         ).encode()).hexdigest()[:32]  # fmt: skip
    # one process prepares (fits, encodes) at a time: DDP ranks and concurrent runs wait, then read what it wrote
    with build_lock(cache_root(cache_dir), f"plan-{plan_key}"):
        plan_path = cache_root(cache_dir) / "plans" / f"{plan_key}.json"
        plan = _read_plan(plan_path)
        if plan is not None:
            parts = [[Segment(**segment) for segment in part] for part in plan["parts"]]
            splits = plan["splits"]
        else:
            parts, splits = _split_parts(Path(path), files, sizes, fractions, documents, text_column)
        saved = fitted is not None
        if fitted is None and plan is not None and plan.get("tokenizer"):
            fitted = tokenizer_from_record(plan["tokenizer"])
        elif fitted is None:
            train_segments = parts[0]
            if not any(segment.stop > segment.start for segment in train_segments):
                raise ValueError(f"{path}: the train part is empty (fractions {tuple(fractions)})")
            with_documents = len(files) > 1 or documents != "file"
            if tokenizer == "char":
                fitted = CharTokenizer(_alphabet(train_segments), end_of_document=with_documents)
            else:
                special = (_PAD_TOKEN, END_OF_DOCUMENT) if with_documents else (_PAD_TOKEN,)
                train_bytes = sum(s.stop - s.start for s in train_segments)
                sample = [piece for segment in train_segments for piece in _sampled(
                    segment, max(fit_bytes * (segment.stop - segment.start) // train_bytes, 1024))]
                fitted = BPETokenizer.train(sample, vocab_size, special_tokens=special)
        if plan is None or (not saved and not plan.get("tokenizer")):
            record = {"parts": [[dataclasses.asdict(segment) for segment in part] for part in parts], "splits": splits,
                      "tokenizer": None if saved else fitted.record()}  # fmt: skip
            try:
                atomic_write_text(plan_path, json.dumps(record))
            except OSError:  # a read-only cache only costs the next run the fitting again
                pass
        segments = []
        for name, part in zip(_SPLIT_NAMES, parts, strict=True):
            told = (f" in the {name} part is not in the run's saved char alphabet" if saved else
                    f" in the {name} part never occurs in the train part, which the char vocabulary is fitted on")
            segments += [dataclasses.replace(segment, where=told) for segment in part]
        store = open_or_build(segments, json.dumps(fitted.record(), sort_keys=True), fitted.encode_array,
                              fitted.vocab_size, fitted.end_of_document_id, cache_dir,
                              cut_safely=isinstance(fitted, BPETokenizer),
                              encode_batch=fitted.encode_batch)  # fmt: skip
    splits["resolved_paths"] = [str(file.resolve()) for file in files]
    return store_bundle(store, [len(part) for part in parts], path, fitted, splits, seq_len=seq_len,
                        fractions=fractions, overlap=overlap, window_starts=window_starts, packing=packing)  # fmt: skip


def store_bundle(store, segments_per_split: list[int], path, fitted, splits: dict, *, seq_len: int, fractions,
                 overlap: int, window_starts: str, packing: bool) -> DataBundle:  # fmt: skip
    """The bundle of a token store whose segments are the train, val and test parts in order
    (``segments_per_split`` of them each): windows of each part, read from the map when asked for."""
    examples, first = {}, 0
    for name, count, fraction in zip(_SPLIT_NAMES, segments_per_split, fractions, strict=True):
        start, stop = int(store.offsets[first]), int(store.offsets[first + count])
        first += count
        if stop - start < seq_len + 1 and fraction > 0:
            raise ValueError(
                f"{path}: the {name} part has {stop - start} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
                "use a longer file, a shorter seq_len or other fractions"
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
                 text_column: str = "") -> tuple[list[list[Segment]], dict]:  # fmt: skip
    """The segments of each split and the record of the split: one file by characters, several by documents, and
    records by byte fractions moved to the next record boundary."""
    if documents != "file":
        return _split_records(path, files, sizes, fractions, documents, text_column)
    if len(files) == 1:
        file = files[0]
        characters = count_characters(file)
        ranges = contiguous_split(characters, fractions)
        cuts = [byte_offset_of_character(file, r.start) for r in ranges] + [sizes[0]]
        parts = [[Segment(str(file), cuts[i], cuts[i + 1], first_character=r.start)] for i, r in enumerate(ranges)]
        record = {"kind": "contiguous_characters", "path": str(path), "num_characters": characters,
                  **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)}}  # fmt: skip
        return parts, record
    ranges = contiguous_split(len(files), fractions)
    parts = [[Segment(str(files[i]), 0, sizes[i], end_of_document=True) for i in r] for r in ranges]
    record = {"kind": "documents", "path": str(path), "documents": [str(file) for file in files],
              **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)}}  # fmt: skip
    return parts, record


def _read_plan(path: Path) -> dict | None:
    """A cached plan (split segments, split record, fitted tokenizer), or None when absent or unreadable."""
    try:
        plan = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) and {"parts", "splits"} <= set(plan) else None


def _split_records(path: Path, files: list[Path], sizes: list[int], fractions, documents: str,
                   text_column: str) -> tuple[list[list[Segment]], dict]:  # fmt: skip
    """Records split in order: each cut at the fraction of the files' total bytes, moved to the next record start of
    the file it falls in. A cut is (file index, byte offset)."""
    total, cuts = sum(sizes), [(0, 0)]
    for share in np.cumsum(fractions)[:-1]:
        target, index = int(round(total * float(share))), 0
        while index < len(files) - 1 and target >= sizes[index]:
            target, index = target - sizes[index], index + 1
        cuts.append(max(cuts[-1], (index, record_boundary(files[index], min(target, sizes[index]), documents))))
    cuts.append((len(files) - 1, sizes[-1]))
    parts = []
    for (first, begin), (last, end) in zip(cuts[:-1], cuts[1:], strict=True):
        part = []
        for index in range(first, last + 1):
            start, stop = begin if index == first else 0, end if index == last else sizes[index]
            if stop > start:
                part.append(Segment(str(files[index]), start, stop, documents=documents, text_column=text_column))
        parts.append(part)
    record = {"kind": "records", "documents": documents, "path": str(path), "files": [str(file) for file in files],
              **{name: [list(cuts[i]), list(cuts[i + 1])] for i, name in enumerate(_SPLIT_NAMES)}}  # fmt: skip
    return parts, record


def _segment_texts(segment: Segment):
    """The text of a segment in pieces: its bytes decoded, or its records' texts."""
    if segment.documents == "file":
        return text_pieces(Path(segment.path), segment.start, segment.stop)
    return record_texts(Path(segment.path), segment.start, segment.stop, segment.documents, segment.text_column)


def _sampled(segment: Segment, budget: int):
    """About ``budget`` bytes of a segment's text spread over it (``sampled_text`` or ``sampled_records``)."""
    if segment.documents == "file":
        return sampled_text(Path(segment.path), segment.start, segment.stop, budget)
    return sampled_records(Path(segment.path), segment.start, segment.stop, budget, segment.documents,
                           segment.text_column)  # fmt: skip


def _alphabet(segments: list[Segment]) -> str:
    """The characters of the segments' text, in one streaming pass (counts of codepoints, no Python loop)."""
    seen = np.zeros(0x10000, dtype=bool)
    astral: set[int] = set()
    for segment in segments:
        for piece in _segment_texts(segment):
            codepoints = np.frombuffer(piece.encode("utf-32-le"), dtype=np.uint32)
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


def _import_tokenizers():
    """Hugging Face ``tokenizers``, imported only when BPE or the Hugging Face format is used (an optional
    dependency)."""
    try:
        import tokenizers
    except ImportError:
        raise ImportError("BPE and the Hugging Face tokenizer format need Hugging Face 'tokenizers': "
                          "pip install 'markovformer[train]'") from None  # fmt: skip
    return tokenizers


def _write_json(directory: Path, record: dict) -> Path:
    """Write ``record`` to ``directory/tokenizer.json`` atomically (temporary file, then rename)."""
    return atomic_write_text(Path(directory) / TOKENIZER_FILE, json.dumps(record))
