"""Byte-level BPE on text without whitespace (DNA, Chinese and Japanese prose), which GPT-2's pre-tokenizer cannot
cut: the trainer and the encoder read its runs in bounded pieces, by a pinned rule, and the tokenizer still
round-trips, encodes the same ids whole or in pieces, and learns multi-base DNA tokens."""

from __future__ import annotations

import json
import random

import pytest

from markovformer.data.readers import tokenizer as tokenizer_module
from markovformer.data.readers.tokenizer import BPETokenizer


def _dna(length: int, seed: int = 0) -> str:
    """Random bases with repeats (a short tandem unit and a longer element, each copied several times)."""
    rng = random.Random(seed)
    units = ["".join(rng.choice("ACGT") for _ in range(size)) for size in (6, 40)]
    parts: list[str] = []
    while sum(map(len, parts)) < length:
        random_bases = "".join(rng.choice("ACGT") for _ in range(rng.randint(20, 200)))
        parts.append(rng.choice(units) * rng.randint(2, 6) if rng.random() < 0.4 else random_bases)
    return "".join(parts)[:length]


def _soft_masked_fasta(length: int) -> str:
    """A FASTA record of 80-base lines with lowercase (soft-masked) stretches and runs of N, as assemblies have."""
    bases = list(_dna(length, seed=1))
    bases[500:900] = [base.lower() for base in bases[500:900]]
    bases[2000:2600] = "N" * 600
    sequence = "".join(bases)
    return ">chr1 soft-masked\n" + "\n".join(sequence[i : i + 80] for i in range(0, length, 80)) + "\n"


def _cjk(length: int, punctuation: bool, seed: int = 0) -> str:
    """Chinese characters and kana with no spaces: with punctuation (prose), or one unbroken run."""
    rng = random.Random(seed)
    letters = [chr(code) for code in (*range(0x4E00, 0x4E00 + 300), *range(0x3041, 0x3094))]
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 3))) for _ in range(200)]
    text = ""
    while len(text) < length:
        text += "。" if punctuation and rng.random() < 0.1 else rng.choice(words)
    return text[:length]


@pytest.mark.parametrize("text", [_dna(5000), _cjk(5000, punctuation=False), "x" * 5000 + " a b " + "y" * 3000])
def test_no_word_bpe_reads_is_longer_than_word_bytes(text):
    """The words a fitted tokenizer's trainer and encoder read (its pre-tokens) cover the text, none longer than
    WORD_BYTES bytes (after the byte-level pre-tokenizer a character stands for one byte)."""
    words = [word for word, _ in BPETokenizer.train(text, 300).hf_backend().pre_tokenizer.pre_tokenize_str(text)]
    byte_of = tokenizer_module._byte_level_bytes()
    assert bytes(byte_of[char] for word in words for char in word) == text.encode("utf-8")
    assert max(map(len, words)) == tokenizer_module.WORD_BYTES


def test_a_long_run_is_read_in_pieces_cut_every_word_bytes_from_its_start(monkeypatch):
    """The rule: a run longer than WORD_BYTES is cut every WORD_BYTES bytes from its start, for the trainer (the
    merges of the run's pieces fed one by one: no pair across a cut is counted) and the encoder (the ids of the
    pieces encoded one by one: no token spans a cut); text around it is read as it is."""
    monkeypatch.setattr(tokenizer_module, "WORD_BYTES", 100)
    line = _dna(3000)
    text = "head of the record\n" + line + "\ntail"
    pieces = ["head of the record\n" + line[:100], *(line[i : i + 100] for i in range(100, 3000, 100)), "\ntail"]
    tokenizer = BPETokenizer.train(text, 400)
    assert tokenizer.record() == BPETokenizer.train(iter(pieces), 400).record()
    assert tokenizer.encode(text) == [token for piece in pieces for token in tokenizer.encode(piece)]


def test_text_with_short_runs_learns_the_merges_of_the_whole_text_fed_at_once():
    """Prose (no word longer than WORD_BYTES) learns the merges GPT-2's pre-tokenizer gives, fed in pieces cut only
    where it cuts: the same as the Hugging Face trainer learns on the whole text in one piece."""
    rng = random.Random(2)
    prose = " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat.\n", "dog", "ran", "far,"]) for _ in range(30000))
    hf = tokenizer_module._import_tokenizers()
    reference = hf.Tokenizer(hf.models.BPE())
    reference.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = hf.trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>"], show_progress=False,
                                     initial_alphabet=hf.pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    reference.train_from_iterator([prose], trainer=trainer)
    learned = BPETokenizer.train(prose, 300).record()["tokenizer"]["model"]
    assert learned == json.loads(reference.to_str())["model"]


@pytest.mark.parametrize("name", ["dna_line", "fasta_soft_masked", "cjk_prose", "cjk_run"])
def test_whitespace_free_text_round_trips_and_encodes_the_same_ids_in_pieces(name):
    text = {"dna_line": _dna(40000), "fasta_soft_masked": _soft_masked_fasta(40000),
            "cjk_prose": _cjk(20000, punctuation=True), "cjk_run": _cjk(20000, punctuation=False)}[name]  # fmt: skip
    tokenizer = BPETokenizer.train(text, 600)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.encode_array(text, pieces=8).tolist() == ids


def test_dna_bpe_learns_multi_base_tokens_on_a_repetitive_sequence():
    line = _dna(40000)
    tokenizer = BPETokenizer.train(line, 1024)
    assert len(tokenizer.encode(line)) / len(line) < 0.4  # bases per token well above 1
