"""Language-model text: character and byte-level BPE tokenizers, and a loader that cuts a text file into windows.

Token id 0 is padding for both tokenizers (it never appears in an encoding), so ``vocab_size`` counts it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import Tensor

from markovformer.atomic import atomic_write_text
from markovformer.data.bundle import DataBundle
from markovformer.data.collate import IGNORE_INDEX
from markovformer.data.splits import contiguous_split

TOKENIZER_FILE = "tokenizer.json"
_PAD_TOKEN = "<pad>"
_SPLIT_NAMES = ("train", "val", "test")


class CharTokenizer:
    """One id per character of ``alphabet`` (ids 1..len(alphabet) in sorted character order; 0 is padding)."""

    kind = "char"

    def __init__(self, alphabet: str) -> None:
        if not alphabet or len(set(alphabet)) != len(alphabet):
            raise ValueError(f"a character alphabet must be non-empty with no repeats, got {alphabet!r}")
        self.alphabet = "".join(sorted(alphabet))
        self._ids = {char: index + 1 for index, char in enumerate(self.alphabet)}

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """The tokenizer whose alphabet is the sorted set of characters in ``text``."""
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.alphabet) + 1

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
            if not 1 <= i <= len(self.alphabet):
                raise ValueError(f"token id {i} is outside the character ids 1..{len(self.alphabet)}")
        return "".join(self.alphabet[i - 1] for i in ids)

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "char", "alphabet": ...}); returns its path."""
        return _write_json(Path(directory), {"kind": self.kind, "alphabet": self.alphabet})


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
        cls, text: str, vocab_size: int, seed: int = 0, special_tokens: tuple[str, ...] = (_PAD_TOKEN,)
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
        tokenizer.train_from_iterator([text], trainer=trainer)
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

    def decode(self, ids: list[int]) -> str:
        """The text of ``ids`` (exact inverse of ``encode``)."""
        return self._tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, directory: str | Path) -> Path:
        """Write ``directory/tokenizer.json`` ({"kind": "bpe", "tokenizer": <HF tokenizer JSON>}); returns its path."""
        return _write_json(Path(directory), {"kind": self.kind, "tokenizer": json.loads(self._tokenizer.to_str())})


def load_tokenizer(directory: str | Path) -> CharTokenizer | BPETokenizer:
    """Read back a tokenizer written by ``CharTokenizer.save`` or ``BPETokenizer.save``."""
    path = Path(directory) / TOKENIZER_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read a tokenizer ({error})") from None
    kind = record.get("kind") if isinstance(record, dict) else None
    if kind == "char":
        return CharTokenizer(record["alphabet"])
    if kind == "bpe":
        return BPETokenizer(_import_tokenizers().Tokenizer.from_str(json.dumps(record["tokenizer"])))
    raise ValueError(f"{path}: unknown tokenizer kind {kind!r} (expected 'char' or 'bpe')")


def load_text_lm(
    path: str | Path,
    *,
    tokenizer: str = "char",
    vocab_size: int | None = None,
    seq_len: int,
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05),
    overlap: int = 0,
) -> DataBundle:
    """A UTF-8 text file as next-token examples.

    The text is split by characters in order (train first, then val, then test; offsets in ``splits``). The
    tokenizer is fitted on the train part only: with ``tokenizer="char"`` a character that first appears in val or
    test raises (naming it and the split); byte-level BPE (``vocab_size`` required) encodes anything. Each part is
    encoded on its own and cut into windows of ``seq_len + 1`` tokens by ``text_windows`` (``overlap`` tokens of
    context carried from one window to the next; see there).

    Example: {"input_ids": (L,) long, "labels": (L,) long}, L = seq_len + 1 except a last shorter window; the model
    shifts labels inside. info: {"vocab_size": V}.
    """
    path = Path(path)
    if tokenizer not in ("char", "bpe"):
        raise ValueError(f"tokenizer must be 'char' or 'bpe', got {tokenizer!r}")
    if tokenizer == "char" and vocab_size is not None:
        raise ValueError(f"vocab_size={vocab_size} applies only to tokenizer='bpe' (the char vocabulary is fitted)")
    if tokenizer == "bpe" and vocab_size is None:
        raise ValueError("tokenizer='bpe' needs vocab_size")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap < seq_len:
        raise ValueError(f"overlap={overlap!r} must be an int in [0, seq_len={seq_len})")
    text = read_text(path)
    ranges = contiguous_split(len(text), fractions)
    parts = [text[r.start : r.stop] for r in ranges]
    if not parts[0]:
        raise ValueError(f"{path}: the train part is empty ({len(text)} characters, fractions {tuple(fractions)})")
    fitted = CharTokenizer.from_text(parts[0]) if tokenizer == "char" else BPETokenizer.train(parts[0], vocab_size)

    examples = {}
    for name, part, r, fraction in zip(_SPLIT_NAMES, parts, ranges, fractions, strict=True):
        if isinstance(fitted, CharTokenizer):
            _check_seen_in_train(part, r.start, name, fitted, path)
        tokens = torch.tensor(fitted.encode(part), dtype=torch.long)
        if len(tokens) < seq_len + 1 and fraction > 0:
            raise ValueError(
                f"{path}: the {name} part has {len(tokens)} tokens, fewer than seq_len + 1 = {seq_len + 1}; "
                "use a longer file, a shorter seq_len or other fractions"
            )
        examples[name] = text_windows(tokens, seq_len, overlap)
    splits = {
        "kind": "contiguous_characters",
        "path": str(path),
        "num_characters": len(text),
        **{name: [r.start, r.stop] for name, r in zip(_SPLIT_NAMES, ranges, strict=True)},
        "seq_len": seq_len,
        "overlap": overlap,
        "tokenizer": tokenizer,
    }
    return DataBundle(**examples, info={"vocab_size": fitted.vocab_size}, splits=splits, tokenizer=fitted)


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


def read_text(path: Path) -> str:
    """The file decoded as strict UTF-8, newlines untouched; an empty or undecodable file raises."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(f"{path}: cannot read ({error.strerror})") from None
    if not data:
        raise ValueError(f"{path}: the file is empty")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: byte {data[error.start]:#04x} at offset {error.start} is not valid UTF-8") from None


def _import_tokenizers():
    """Hugging Face ``tokenizers``, imported only when BPE is used (it is an optional dependency)."""
    try:
        import tokenizers
    except ImportError:
        raise ImportError("BPE needs Hugging Face 'tokenizers': pip install 'markovformer[train]'") from None
    return tokenizers


def _check_seen_in_train(part: str, start: int, name: str, tokenizer: CharTokenizer, path: Path) -> None:
    """Raise, naming the first character of ``part`` (starting at file offset ``start``) the train part lacks."""
    unseen = set(part) - set(tokenizer.alphabet)
    if unseen:
        offset = min(part.index(char) for char in unseen)
        raise ValueError(
            f"{path}: character {part[offset]!r} at offset {start + offset} in the {name} part never occurs in the "
            "train part, which the char vocabulary is fitted on"
        )


def _write_json(directory: Path, record: dict) -> Path:
    """Write ``record`` to ``directory/tokenizer.json`` atomically (temporary file, then rename)."""
    return atomic_write_text(Path(directory) / TOKENIZER_FILE, json.dumps(record))
