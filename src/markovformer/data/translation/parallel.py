"""Parallel text: reading sentence pairs, the joint source/target BPE tokenizer, and a loader into a DataBundle.

Special tokens have fixed ids in every translation vocabulary (``<pad>`` 0, ``<bos>`` 1, ``<eos>`` 2, ``<unk>`` 3;
defined in ``special_tokens.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from markovformer.data.bundle import DataBundle
from markovformer.data.readers.tokenized_text import announce_fitted
from markovformer.data.readers.tokenizer import BPETokenizer, load_tokenizer
from markovformer.data.splits import split_indices
from markovformer.data.translation.batching import collate_translation, translation_lengths
from markovformer.data.translation.special_tokens import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID, SPECIAL_TOKENS

_SPLIT_NAMES = ("train", "val", "test")


def read_parallel(path: str | Path, target_path: str | Path | None = None) -> list[tuple[str, str]]:
    """Sentence pairs ``(source, target)`` in file order, each side stripped of surrounding whitespace.

    One file: a TSV, ``source<TAB>target`` per line. Two files: aligned line by line (line i of ``path`` translates
    to line i of ``target_path``). Strict UTF-8; CRLF line ends and a leading BOM are accepted. An empty file, a
    line without exactly one tab, a blank line or an empty side, undecodable bytes and files of different line
    counts raise ValueError naming the file and line.
    """
    path = Path(path)
    if target_path is None:
        pairs = []
        for number, line in enumerate(_read_lines(path), start=1):
            fields = line.split("\t")
            if len(fields) != 2:
                raise ValueError(
                    f"{path}: line {number}: expected 'source<TAB>target' (exactly one tab), found "
                    f"{len(fields) - 1} tabs in {line[:60]!r}"
                )
            pairs.append((_side(fields[0], path, number, "source"), _side(fields[1], path, number, "target")))
        return pairs
    target_path = Path(target_path)
    sources, targets = _read_lines(path), _read_lines(target_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"{path} has {len(sources)} lines but {target_path} has {len(targets)}; aligned files need the same "
            f"number of lines (the first unmatched line is {min(len(sources), len(targets)) + 1})"
        )
    return [
        (_side(source, path, number, "source"), _side(target, target_path, number, "target"))
        for number, (source, target) in enumerate(zip(sources, targets, strict=True), start=1)
    ]


def _read_lines(path: Path) -> list[str]:
    """The file's lines (no line ends); empty files and undecodable bytes raise, naming the line."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ValueError(f"{path}: cannot read ({error.strerror})") from None
    if not data.strip():
        raise ValueError(f"{path}: the file is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}: line {line}: byte {data[error.start]:#04x} is not valid UTF-8") from None
    return text_lines(text)


def text_lines(text: str) -> list[str]:
    """The lines of a file's text, split at ``\n`` alone, as ``wc -l`` and ``paste`` count them (``str.splitlines``
    also splits at U+2028, U+0085, form feeds, ..., which web text holds inside sentences); a leading BOM and CR line
    ends dropped, and no empty line after a final newline."""
    lines = text.removeprefix("\ufeff").split("\n")
    if lines[-1] == "":  # the final newline ends the last line; it does not start another
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def one_line(text: str) -> str:
    """``text`` on one line: each line break (any ``str.splitlines`` splits at) and each tab a space, so that a
    translation printed or written as a TSV field stays beside its source; BLEU's 13a tokenisation reads them alike."""
    return " ".join(" ".join(text.splitlines()).split("\t"))


def _side(text: str, path: Path, number: int, side: str) -> str:
    text = text.strip()
    if not text:
        raise ValueError(f"{path}: line {number}: the {side} side is empty")
    return text


def check_vocab_size(vocab_size: object) -> None:
    """ValueError naming ``data.vocab_size`` unless a joint BPE of that size can hold the special tokens and the
    bytes (it failed in the trainer, as 'BPE vocab_size must be an int >= 260', naming no option)."""
    smallest = len(SPECIAL_TOKENS) + 256
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < smallest:
        raise ValueError(f"data.vocab_size={vocab_size!r} must be an int of at least {smallest} "
                         f"({' '.join(SPECIAL_TOKENS)} and the 256 bytes of byte-level BPE)")  # fmt: skip


def train_translation_tokenizer(pairs: Sequence[tuple[str, str]], vocab_size: int) -> BPETokenizer:
    """A joint byte-level BPE (``readers.tokenizer.BPETokenizer``) learned on both sides of ``pairs``, with the
    translation special tokens at ids 0-3. ``vocab_size`` >= 260 (4 special tokens + 256 bytes)."""
    if not pairs:
        raise ValueError("a translation tokenizer needs at least one sentence pair to learn from")
    text = "\n".join(side for pair in pairs for side in pair)
    return BPETokenizer.train(text, vocab_size, special_tokens=SPECIAL_TOKENS)


def check_translation_tokenizer(tokenizer) -> None:
    """Raise unless ``tokenizer`` maps the translation special tokens to ids 0-3."""
    token_to_id = getattr(tokenizer, "token_to_id", None)
    found = {token: token_to_id(token) if token_to_id else None for token in SPECIAL_TOKENS}
    expected = dict(zip(SPECIAL_TOKENS, range(len(SPECIAL_TOKENS)), strict=True))
    if found != expected:
        raise ValueError(f"a translation tokenizer needs special token ids {expected}; this one has {found}")


def load_translation_tokenizer(directory: str | Path) -> BPETokenizer:
    """Read back the tokenizer a translation run saved (``tokenizer.save(directory)``), checking its special ids."""
    tokenizer = load_tokenizer(directory)
    check_translation_tokenizer(tokenizer)
    return tokenizer


def encode_pairs(tokenizer, pairs: Sequence[tuple[str, str]]) -> list[dict[str, Tensor]]:
    """Examples ``{"src_ids": (S,) long, "tgt_ids": (T,) long}``: the plain token ids of each side, with no
    ``<bos>``/``<eos>`` (``collate_translation`` adds them)."""
    return [
        {
            "src_ids": torch.tensor(tokenizer.encode(source), dtype=torch.long),
            "tgt_ids": torch.tensor(tokenizer.encode(target), dtype=torch.long),
        }
        for source, target in pairs
    ]


def decode_generated(tokenizer, sequences: Tensor | Sequence[Sequence[int]]) -> list[str]:
    """Generated ids (B, L) as text: each row is cut at its first ``<eos>``; ``<pad>`` and ``<bos>`` are dropped."""
    texts = []
    for row in sequences.tolist() if isinstance(sequences, Tensor) else sequences:
        row = [int(i) for i in row]
        if EOS_TOKEN_ID in row:
            row = row[: row.index(EOS_TOKEN_ID)]
        texts.append(tokenizer.decode([i for i in row if i not in (PAD_TOKEN_ID, BOS_TOKEN_ID)]))
    return texts


def translation_bundle(
    pairs_by_split: dict[str, Sequence[tuple[str, str]]],
    tokenizer,
    *,
    max_length: int | None = None,
    splits: dict | None = None,
) -> DataBundle:
    """Encode text pairs already split into ``train``/``val``/``test`` with ``tokenizer`` (a translation tokenizer,
    usually ``train_translation_tokenizer`` of the train pairs).

    ``max_length``: training pairs with more tokens than this on either side are dropped (their count is recorded
    in ``splits["dropped_long_train"]``); val and test are kept whole so scores stay comparable.
    info: {"vocab_size", "pad_token_id", "bos_token_id", "eos_token_id"}, and ``"sources_in_training"``: how many
    val and test pairs have a source sentence that is also a training pair's source (only the splits that have
    any). Such pairs are not held out: a model that memorised its training pairs translates them well.
    """
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ValueError(f"data.max_length={max_length!r}: must be a positive int or None")
    check_translation_tokenizer(tokenizer)
    examples = {name: encode_pairs(tokenizer, pairs_by_split[name]) for name in _SPLIT_NAMES}
    dropped = 0
    if max_length is not None:
        kept = [e for e in examples["train"] if max(len(e["src_ids"]), len(e["tgt_ids"])) <= max_length]
        dropped, examples["train"] = len(examples["train"]) - len(kept), kept
        if dropped and not kept:
            raise ValueError(f"every training pair is longer than max_length={max_length} tokens")
    info = {"vocab_size": tokenizer.vocab_size, "pad_token_id": PAD_TOKEN_ID, "bos_token_id": BOS_TOKEN_ID,
            "eos_token_id": EOS_TOKEN_ID}  # fmt: skip
    train_sources = {source for source, _ in pairs_by_split["train"]}
    shared = {name: count for name in ("val", "test")
              if (count := sum(source in train_sources for source, _ in pairs_by_split[name]))}  # fmt: skip
    if shared:
        info["sources_in_training"] = shared
    record = {**(splits or {}), "max_length": max_length, "dropped_long_train": dropped}
    return DataBundle(**examples, info=info, splits=record, tokenizer=tokenizer, collate=collate_translation,
                      lengths=translation_lengths)  # fmt: skip


def load_translation(
    path: str | Path,
    *,
    target_path: str | Path | None = None,
    vocab_size: int = 8000,
    fractions: tuple[float, float, float] = (0.9, 0.05, 0.05),
    seed: int = 0,
    max_length: int | None = None,
    tokenizer: BPETokenizer | None = None,
) -> DataBundle:
    """Parallel text (a TSV, or two aligned files; see ``read_parallel``) as translation examples.

    Pairs are split at random by ``seed`` (``splits.split_indices``; the indices are recorded), the joint BPE of
    ``vocab_size`` is fitted on the train pairs, and every pair is encoded (see ``translation_bundle``). With
    ``tokenizer`` (a run's, to score other pairs with its model or to resume it), the pairs are encoded with it
    instead, and need no training pair.
    """
    pairs = read_parallel(path, target_path)
    train, val, test = split_indices(len(pairs), fractions, seed)
    if not train and tokenizer is None:
        raise ValueError(f"{path}: {len(pairs)} pairs leave no training pair with fractions {tuple(fractions)}")
    indices = dict(zip(_SPLIT_NAMES, (train, val, test), strict=True))
    record = {"kind": "random_pairs", "path": str(path), "target_path": None if target_path is None else
              str(target_path), "num_pairs": len(pairs), "seed": seed, **indices}  # fmt: skip
    by_split = {name: [pairs[i] for i in chosen] for name, chosen in indices.items()}
    if tokenizer is None:
        tokenizer = train_translation_tokenizer(by_split["train"], vocab_size)
        announce_fitted(tokenizer, vocab_size, " and ".join(map(str, filter(None, (path, target_path)))))
    return translation_bundle(by_split, tokenizer, max_length=max_length, splits=record)
