"""Where byte-level BPE text may be cut so that its pieces, encoded one by one, give the ids of the whole: between
GPT-2 pre-tokens that nothing after them changes, and inside a long pre-token where ``BPETokenizer.train``'s
pre-tokenizer cuts it (every ``WORD_BYTES`` bytes from its start). A text streamed or batched in such pieces holds one
piece at a time, even a chromosome on one line."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import numpy as np

# Where byte-level BPE's GPT-2 pre-tokenizer splits regardless of what follows: after a newline, or before a single
# space, with a non-space character on both sides.
_SAFE_CUT = re.compile(r"(?<=\S\n)(?=\S)|(?<=\S)(?= \S)")
# whitespace as GPT-2 reads it: Python's \s also counts the ASCII separators U+001C-U+001F, which GPT-2 reads as
# punctuation (a pre-token of "!" runs on through "\x1e")
_WHITESPACE = re.compile(r"[^\S\x1c-\x1f]")
_WINDOW = 1 << 16  # characters pre-tokenized at a time in search of a word cut (``_word_cuts``)


def _long_run(word_bytes: int) -> re.Pattern:
    """A run of at least ``word_bytes // 4`` letters, digits or other characters: what a pre-token longer than
    ``word_bytes`` bytes (4 bytes a character at most) holds, as Python's classes approximate GPT-2's. Text without
    one (minified code) has no word cut and is not pre-tokenized; a miss only carries text on (never wrong ids)."""
    least = max(word_bytes // 4, 1)
    return re.compile(rf"[^\W\d_]{{{least},}}|\d{{{least},}}|(?:[^\w\s]|[_\x1c-\x1f]){{{least},}}")


def safe_pieces(text: str, step: int, safe_cut: Callable[[str], int]) -> Iterator[str]:
    """``text`` in consecutive pieces of ``step`` to ``2 * step`` characters, each ending at a ``safe_cut`` of the
    ``2 * step`` characters from its start (where there is none, of twice as many, and so on)."""
    start, width = 0, 2 * step
    while len(text) - start > width:
        cut = safe_cut(text[start : start + width])
        if not cut:
            width *= 2
            continue
        yield text[start : start + cut]
        start, width = start + cut, 2 * step
    if start < len(text):
        yield text[start:]


def safe_cut(text: str, word_bytes: int | None) -> int:
    """``BPETokenizer.safe_cut`` for a pre-tokenizer that cuts a pre-token every ``word_bytes`` bytes from its start
    (None: one that does not): the last cut between GPT-2 pre-tokens that no text after it changes (``_SAFE_CUT``),
    else the last such word cut in the second half (``_word_cut``)."""
    last = 0
    for match in _SAFE_CUT.finditer(text, len(text) // 2):
        last = match.start()
    return last if last or word_bytes is None else _word_cut(text, word_bytes)


def _word_cut(text: str, word_bytes: int) -> int:
    """The last index in the second half of ``text`` that lies ``k * word_bytes`` bytes into a GPT-2 pre-token of
    its whitespace-free tail (0 when there is none). No token spans it, and the tail's pre-tokens after it are the
    same alone: a run of letters, of digits or of other characters goes on to its end. Not on a character's inner
    byte (the text cannot be cut there), nor before an apostrophe: a run of punctuation cut before "'s" would read
    it as a contraction. ``text`` must start a pre-token (a safe cut, or where text starts)."""
    space = _WHITESPACE.search(text[::-1])
    if space is None:
        tail = 0
    else:  # GPT-2's pre-token after whitespace starts at its last character when that is a space (" word")
        tail = len(text) - space.start() - (text[-space.start() - 1] == " ")
    if len(text) - tail <= word_bytes or not _long_run(word_bytes).search(text, tail):
        return 0
    half = len(text) // 2
    return max((cut for cut in _word_cuts(text, tail, word_bytes) if cut > half), default=0)


def _word_cuts(text: str, start: int, word_bytes: int) -> Iterator[int]:
    """The word cuts (``_word_cut``) of ``text[start:]`` (which starts a GPT-2 pre-token and has no whitespace),
    pre-tokenized ``_WINDOW`` characters at a time: neither a long run nor many short pre-tokens (minified code) are
    pre-tokenized whole (Hugging Face holds a text with per-byte alignments: 4 MB of bases cost ~400 MB). A window's
    end may cut its last pre-token short, and make the one before an apostrophe ("'ll" reads "'" then "l"): the
    next window starts at the last pre-token but one, or at a later cut (where the text alone reads as it does
    whole); a window that offers neither is widened."""
    from tokenizers.pre_tokenizers import ByteLevel  # only BPE cuts here: a dependency of BPE

    gpt2, width = ByteLevel(add_prefix_space=False), _WINDOW
    while start < len(text):
        # (start, stop, bytes) of each pre-token: one byte-level character a byte
        words = [(start + begin, start + end, len(word))
                 for word, (begin, end) in gpt2.pre_tokenize_str(text[start : start + width])]  # fmt: skip
        # a pre-token cut short by the window's end holds its cuts (those of an apostrophe's letters: none)
        cuts = [cut for word in words for cut in _cuts_in(text, *word, word_bytes)]
        yield from cuts
        if start + width >= len(text):
            return
        restart = max([words[-2][0] if len(words) > 1 else start, *cuts[-1:]])
        start, width = (restart, _WINDOW) if restart > start else (start, width * 2)


def _cuts_in(text: str, begin: int, end: int, size: int, word_bytes: int) -> Iterator[int]:
    """The indices ``k * word_bytes`` bytes into the pre-token ``text[begin:end]`` (``size`` bytes) that start a
    character other than an apostrophe."""
    if size <= word_bytes:
        return
    leads = (np.frombuffer(text[begin:end].encode("utf-8"), dtype=np.uint8) & 0xC0) != 0x80
    before = np.cumsum(np.add.reduceat(leads, np.arange(0, size, word_bytes)))  # characters before each cut
    for offset, characters in zip(range(word_bytes, size, word_bytes), before.tolist(), strict=False):
        if leads[offset] and text[begin + characters] != "'":
            yield begin + characters
