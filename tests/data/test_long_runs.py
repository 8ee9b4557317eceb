"""Text without whitespace (a chromosome on one line, Chinese without punctuation) streamed into a token store:
cut where the BPE pre-tokenizer cuts every ``WORD_BYTES`` bytes of a long pre-token, so the encoder holds one piece
at a time, and the ids still equal those of the whole text encoded at once."""

from __future__ import annotations

import json

import numpy as np
import pytest

from markovformer.data.readers import bpe_cuts, text_stream, token_store
from markovformer.data.readers.token_store import Segment, open_or_build
from markovformer.data.readers.tokenizer import WORD_BYTES, BPETokenizer, CharTokenizer, tokenizer_from_record

CHUNK = 5003  # bytes a stream reads at a time: no multiple of WORD_BYTES, nor of a character's width


def _dna(length: int, seed: int) -> str:
    return "".join(np.random.default_rng(seed).choice(list("ACGT"), length))


def _texts() -> dict[str, str]:
    cjk = "".join(chr(0x4E00 + i % 2000) for i in range(40_000))  # 3 bytes a character: most cuts fall inside one
    return {
        "dna": _dna(120_000, 0),
        "cjk": "x" + cjk,  # one byte first: the 1024-byte cuts fall at every offset within a character
        "mixed": ("Markov chains, 'tis said, forget.\n" * 50 + _dna(30_001, 1) + " and then " + "é" + cjk[:9_000]
                  + "😀" * 3_000 + "!" * 1_023 + "'s" + "!" * 3_000 + "'ll" + _dna(7_777, 2) + "123" * 2_000
                  + "\n" + "prose, again " * 300),  # fmt: skip
    }


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    return BPETokenizer.train(list(_texts().values()), vocab_size=400)


def _without_word_split(tokenizer: BPETokenizer) -> BPETokenizer:
    """The same vocabulary with GPT-2's pre-tokenizer alone: a tokenizer saved before the ``WORD_BYTES`` split."""
    record = tokenizer.record()
    hf = record["tokenizer"]
    hf["pre_tokenizer"] = hf["pre_tokenizer"]["pretokenizers"][0]
    return tokenizer_from_record(json.loads(json.dumps(record)))


def _stored_ids(tmp_path, text: str, tokenizer: BPETokenizer, monkeypatch) -> tuple[list[int], int]:
    """The ids of ``text`` streamed into a token store in chunks of ``CHUNK`` bytes, and the longest text the
    encoder was given at once."""
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    longest = [0]
    batch = tokenizer._batch

    def spied(texts):
        longest[0] = max([longest[0], *map(len, texts)])
        return batch(texts)

    monkeypatch.setattr(tokenizer, "_batch", spied)
    original = text_stream.text_pieces
    monkeypatch.setattr(token_store, "text_pieces", lambda *a, **k: original(*a, **{**k, "chunk_bytes": CHUNK}))
    size = path.stat().st_size
    store = open_or_build([Segment(str(path), 0, size)], json.dumps(tokenizer.record()), tokenizer.encode_array,
                          tokenizer.vocab_size, None, tmp_path / "cache", safe_cut=tokenizer.safe_cut)  # fmt: skip
    return np.asarray(store.tokens[:]).tolist(), longest[0]


@pytest.mark.parametrize("name, window", [("dna", None), ("cjk", None), ("mixed", None), ("mixed", 50)])
def test_a_long_run_is_streamed_in_bounded_pieces_with_the_ids_of_the_whole(tmp_path, monkeypatch, tokenizer, name,
                                                                           window):  # fmt: skip
    if window is not None:  # pre-tokenized in small windows: pre-tokens cut by a window's end are read again
        monkeypatch.setattr(bpe_cuts, "_WINDOW", window)
    text = _texts()[name]
    ids, longest = _stored_ids(tmp_path, text, tokenizer, monkeypatch)
    assert ids == tokenizer.encode(text)
    assert longest <= 2 * CHUNK + 2 * WORD_BYTES  # the run is cut; before, the encoder held all of it
    assert tokenizer.encode_array(text).tolist() == tokenizer.encode(text)


def test_a_cut_before_a_contraction_in_a_long_punctuation_run_is_not_taken():
    text = "!" * WORD_BYTES + "'s" + "!" * 100  # GPT-2 reads "!!...!'" then "s": its only word cut is before "'"
    tokenizer = BPETokenizer.train("it's what's hers " * 200 + text, vocab_size=300)  # "'s" is one token
    cut = tokenizer.safe_cut(text)
    assert tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:]) == tokenizer.encode(text)
    # cut there, the rest would read "'s" as a contraction
    assert tokenizer.encode(text[:WORD_BYTES]) + tokenizer.encode(text[WORD_BYTES:]) != tokenizer.encode(text)


def test_a_tokenizer_without_the_word_split_keeps_a_run_whole(tmp_path, monkeypatch, tokenizer):
    older = _without_word_split(tokenizer)
    text = _dna(20_000, 3)
    assert older.safe_cut(text) == 0 and tokenizer.safe_cut(text) > len(text) // 2
    ids, longest = _stored_ids(tmp_path, text, older, monkeypatch)
    assert ids == older.encode(text) and longest == len(text)


def test_char_text_is_cut_at_every_chunk(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(_dna(1_000, 4), encoding="utf-8")
    pieces = list(text_stream.text_pieces(path, chunk_bytes=7, safe_cut=CharTokenizer("ACGT").safe_cut))
    assert pieces == list(text_stream.text_pieces(path, chunk_bytes=7)) and max(map(len, pieces)) == 7


def test_a_contraction_cut_by_a_pre_tokenizing_window_is_read_again(monkeypatch, tokenizer):
    monkeypatch.setattr(bpe_cuts, "_WINDOW", 5)  # "a!b'l": the window ends inside "'ll", read as "'" then "l"
    text = "a!b'll" + _dna(3 * WORD_BYTES, 5)
    cut = tokenizer.safe_cut(text)
    assert cut == len("a!b'll") + 2 * WORD_BYTES  # the last word cut of the bases, counted from their start
    assert tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:]) == tokenizer.encode(text)


def test_text_without_any_cut_is_searched_a_logarithmic_number_of_times_and_never_pre_tokenized(tmp_path, monkeypatch,
                                                                                               tokenizer):  # fmt: skip
    """One line of minified code (short pre-tokens, no whitespace) has no safe cut: the stream looked for one in all
    the text it carried at every chunk, and pre-tokenized that text each time (4.7 s -> 18.9 s for a 3.5 MB line,
    16.8 s -> 81 s for 10.5 MB). It looks again once the carried text has doubled, and a text without a run long
    enough to hold a word cut is not pre-tokenized; the ids are still those of the whole."""
    text = "".join(np.random.default_rng(6).choice(["ab", "cd", "12", "x(", ");", '{"k":', "3.5,"], 30_000))
    monkeypatch.setattr(bpe_cuts, "_word_cuts", lambda *a: pytest.fail("pre-tokenized a text with no long run"))
    ids, _ = _stored_ids(tmp_path, text, tokenizer, monkeypatch)
    assert ids == tokenizer.encode(text)
    searches = []
    counted = lambda piece: searches.append(len(piece)) or tokenizer.safe_cut(piece)  # noqa: E731
    pieces = list(text_stream.text_pieces(tmp_path / "text.txt", chunk_bytes=CHUNK, safe_cut=counted))
    chunks = len(text.encode()) // CHUNK
    assert "".join(pieces) == text and chunks >= 7 and len(searches) <= chunks.bit_length() + 1, (chunks, searches)


@pytest.mark.parametrize("separator", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_an_ascii_separator_inside_a_long_run_is_part_of_its_pre_token(separator):
    """Python's regex \\s counts the ASCII separators U+001C-U+001F as whitespace, GPT-2's pre-tokenizer as
    punctuation: "!" * 500 + "\\x1e" + "!" * 5000 is one pre-token, whose cuts fall every WORD_BYTES bytes from its
    first "!", but the tail was taken to start after the separator; the cut there gave other ids than the whole."""
    text = "!" * 500 + separator + "!" * 5_000
    from tokenizers.pre_tokenizers import ByteLevel

    assert len(ByteLevel(add_prefix_space=False).pre_tokenize_str(text)) == 1  # one pre-token to GPT-2
    tokenizer = BPETokenizer.train(["!" * 20_000, "it's what's hers"], vocab_size=300)
    cut = tokenizer.safe_cut(text)
    assert cut == 5 * WORD_BYTES  # the last cut of the one pre-token in the second half, from its first "!"
    assert tokenizer.encode(text[:cut]) + tokenizer.encode(text[cut:]) == tokenizer.encode(text)
    assert tokenizer.encode_array(text * 20).tolist() == tokenizer.encode(text * 20)
