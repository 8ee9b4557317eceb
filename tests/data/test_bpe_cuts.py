"""Where byte-level BPE text may be cut (``bpe_cuts``): the two sides encoded apart give the ids of the whole, the
cut is the last one in the second half of the text, and ``safe_pieces`` keeps its pieces ``step`` to ``2 * step``
characters long."""

from __future__ import annotations

import random

import pytest

from markovformer.data.readers.bpe_cuts import safe_pieces
from markovformer.data.readers.tokenizer import WORD_BYTES, BPETokenizer

# whitespace of every kind GPT-2 reads apart (spaces, newlines and blank lines, tabs, a carriage return), letters,
# digits, punctuation, an apostrophe, an ASCII separator (punctuation to GPT-2) and a two-byte letter
_ALPHABET = ["a", "b", "c", "s", " ", " ", "\n", "\n", "\t", "\r", "!", "1", "'", "\x1e", "é"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    rng = random.Random(0)
    return ["".join(rng.choice(_ALPHABET) for _ in range(rng.randint(2, 40))) for _ in range(3_000)]


@pytest.fixture(scope="module")
def tokenizer(texts) -> BPETokenizer:
    return BPETokenizer.train(texts * 3, vocab_size=400)  # merges of whitespace too ("\n\n", " \n")


def test_the_two_sides_of_a_cut_encode_to_the_ids_of_the_whole(texts, tokenizer):
    """A cut after a blank line ("end.\\n\\n|Next") splits GPT-2's pre-token "\\n\\n" (it reads "\\n", "\\n", "Next"
    whole but "\\n\\n" at the end of the first side): a newline is a safe cut only after a non-space character."""
    wrong = [text for text in texts
             if (cut := tokenizer.safe_cut(text)) and tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:])
             != tokenizer.encode(text)]  # fmt: skip
    assert sum(tokenizer.safe_cut(text) > 0 for text in texts) > 1_000 and wrong == []


@pytest.mark.parametrize("text, cut", [
    ("one two three four five", len("one two three four")),  # the last of the word boundaries in the second half
    ("ab cd" + "x" * 100, 0),  # its only cut lies in the first half
    ("!" * 2 * WORD_BYTES + "'" + "!" * 500, 0),  # its word cuts: 1024 (first half), 2048 (before an apostrophe)
])  # fmt: skip
def test_the_cut_is_the_last_one_in_the_second_half(tokenizer, text, cut):
    """A cut in the first half would give ``safe_pieces`` (and a token store's stream) a piece shorter than the
    ``step`` it promises; an earlier cut of the second half, more pieces than needed."""
    assert tokenizer.safe_cut(text) == cut


@pytest.mark.parametrize("character", ["A", "7", "!"])
def test_a_long_run_of_letters_digits_or_punctuation_is_cut_every_word_bytes(tokenizer, character):
    """A line of digits (a table's numbers run together) was carried on whole, as text without any cut: a run of
    each kind of pre-token longer than WORD_BYTES bytes is cut every WORD_BYTES bytes from its start."""
    text = character * 5 * WORD_BYTES
    cut = tokenizer.safe_cut(text)
    assert cut == 4 * WORD_BYTES  # the last cut in the second half
    assert tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:]) == tokenizer.encode(text)


def test_pieces_after_a_stretch_without_a_cut_are_step_to_twice_step_long_again():
    """``safe_pieces`` widens its search over a stretch without a cut, and narrows it again once it cuts: the pieces
    after the stretch are ``step`` to ``2 * step`` characters, each ending at a cut."""
    text = "x" * 100 + "|" + "abcd|" * 200 + "tail"

    def at_a_bar(window: str) -> int:  # after the last "|" in the second half of the window (0: none)
        return window.rfind("|", len(window) // 2) + 1

    pieces = list(safe_pieces(text, 10, at_a_bar))
    assert "".join(pieces) == text and all(piece.endswith("|") for piece in pieces[:-1])
    assert len(pieces[0]) > 100 and all(10 <= len(piece) <= 20 for piece in pieces[1:-1]), list(map(len, pieces))
