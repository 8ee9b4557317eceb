"""Character and BPE tokenizers round-trip exactly; load_text_lm splits in order, fits on train, windows the text."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from markovformer.data.readers.text import load_text_lm, text_windows
from markovformer.data.readers.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer

_EXOTIC = "ab \n\r\t\x00éß€漢字😀\u200b\ufeff"


def _random_text(seed: int, length: int, alphabet: str = _EXOTIC) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(length))


@pytest.fixture(scope="module")
def prose() -> str:
    words = ["the", "chain", "order", "state", "Markov", "attention", "window", "gate", "lag", "token"]
    rng = random.Random(0)
    return " ".join(rng.choice(words) + rng.choice(["", ",", ".\n"]) for _ in range(1500))


@pytest.mark.parametrize("seed", range(5))
def test_char_tokenizer_round_trips_arbitrary_text(seed):
    text = _random_text(seed, 300)
    tokenizer = CharTokenizer.from_text(text)
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert min(ids) >= 1 and max(ids) == tokenizer.vocab_size - 1 == len(set(text))


def test_char_ids_follow_sorted_characters_and_zero_is_padding():
    tokenizer = CharTokenizer.from_text("cab")
    assert tokenizer.encode("abcba") == [1, 2, 3, 2, 1]
    assert tokenizer.vocab_size == 4
    with pytest.raises(ValueError, match="token id 0"):
        tokenizer.decode([0, 1])


def test_char_tokenizer_unknown_character_is_named():
    with pytest.raises(ValueError, match="'z' at offset 2"):
        CharTokenizer.from_text("abc").encode("abz")


def test_char_tokenizer_save_load(tmp_path):
    text = _random_text(7, 200)
    tokenizer = CharTokenizer.from_text(text)
    tokenizer.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, CharTokenizer) and loaded.encode(text) == tokenizer.encode(text)


def test_bpe_round_trips_exactly_including_unseen_characters(prose):
    tokenizer = BPETokenizer.train(prose, vocab_size=320)
    assert 257 < tokenizer.vocab_size <= 320
    for text in [prose[:500], _random_text(1, 400), "  leading and trailing  ", "\r\n\r\n", "Ω≈ç√ unseen 😀"]:
        ids = tokenizer.encode(text)
        assert 0 not in ids
        assert tokenizer.decode(ids) == text
    # merges were learned: common words compress below one token per character
    assert len(tokenizer.encode(prose)) < 0.6 * len(prose)


def test_bpe_save_load_gives_identical_ids(tmp_path, prose):
    tokenizer = BPETokenizer.train(prose, vocab_size=300)
    tokenizer.save(tmp_path)
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, BPETokenizer)
    sample = prose[1000:3000] + _random_text(2, 100)
    assert loaded.encode(sample) == tokenizer.encode(sample)
    assert loaded.vocab_size == tokenizer.vocab_size


def test_bpe_vocab_size_too_small_raises():
    with pytest.raises(ValueError, match="vocab_size"):
        BPETokenizer.train("abc", vocab_size=100)


def test_bpe_vocab_size_beyond_what_the_text_can_merge_fits_as_a_saturating_one(tmp_path, prose):
    """A vocab_size of billions (a typo) used to make the trainer reserve memory for that many entries and abort the
    process. The text offers fewer merges than it has bytes, so it must give the tokenizer of any vocab_size large
    enough to take every merge. In a child process: the abort would take the test runner with it."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose, encoding="utf-8")
    script = textwrap.dedent(f"""
        import json
        from markovformer.data.readers.text import load_text_lm
        from markovformer.data.readers.tokenizer import BPETokenizer
        text = open({str(corpus)!r}, encoding="utf-8").read()
        print(json.dumps(BPETokenizer.train(text, 5_000_000_000).record()))
        bundle = load_text_lm({str(corpus)!r}, tokenizer="bpe", vocab_size=5_000_000_000, seq_len=8,
                              cache_dir={str(tmp_path / "cache")!r})
        print(json.dumps(bundle.tokenizer.record()))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    whole, from_file = done.stdout.splitlines()[:2]
    saturated = 1 + 256 + len(prose.encode("utf-8"))  # more merges than bytes are impossible
    assert json.loads(whole) == BPETokenizer.train(prose, saturated).record()
    sane = load_text_lm(corpus, tokenizer="bpe", vocab_size=saturated, seq_len=8, cache_dir=tmp_path / "sane")
    assert json.loads(from_file) == sane.tokenizer.record()


def test_a_bpe_vocabulary_smaller_than_asked_is_said_on_every_build(tmp_path, prose, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose, encoding="utf-8")
    for _ in range(2):  # fitted, then read back from the cached plan
        bundle = load_text_lm(corpus, tokenizer="bpe", vocab_size=50_000, seq_len=8, cache_dir=tmp_path / "cache")
        size = len(bundle.tokenizer.hf_backend().get_vocab())
        assert size == bundle.tokenizer.vocab_size == bundle.info["vocab_size"] < 50_000
        assert f"data.vocab_size=50000: the train part of {corpus} offers no more merges, so the BPE vocabulary has " \
               f"{size} tokens" in capsys.readouterr().err
    load_text_lm(corpus, tokenizer="bpe", vocab_size=size, seq_len=8, cache_dir=tmp_path / "cache")
    assert "vocab_size" not in capsys.readouterr().err



def test_a_bpe_vocabulary_cut_short_by_fit_bytes_says_so(tmp_path, capsys):
    """The vocabulary fitted on a sample of the train part (data.fit_bytes) is smaller than asked: the line named the
    train part as offering no more merges, where the whole part offers more and data.fit_bytes is what limits."""
    rng = random.Random(0)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(" ".join("".join(rng.choices("abcdefghij", k=6)) for _ in range(3000)), encoding="utf-8")
    sampled = load_text_lm(corpus, tokenizer="bpe", vocab_size=50_000, seq_len=8, fit_bytes=1024,
                           cache_dir=tmp_path / "cache").tokenizer.vocab_size  # fmt: skip
    whole = load_text_lm(corpus, tokenizer="bpe", vocab_size=50_000, seq_len=8, cache_dir=tmp_path / "cache")
    assert sampled < whole.tokenizer.vocab_size < 50_000  # the whole part offers more merges than the sample
    sample_line, whole_line = capsys.readouterr().err.splitlines()
    assert f"the data.fit_bytes=1024 bytes of the train part of {corpus} that BPE learned its merges on offer no " \
           f"more merges, so the BPE vocabulary has {sampled} tokens" in sample_line  # fmt: skip
    assert "raise data.fit_bytes (the train part has 18,899 bytes)" in sample_line  # 0.9 of 20,999
    assert f"the train part of {corpus} offers no more merges" in whole_line and "fit_bytes" not in whole_line

def test_bpe_of_many_small_files_is_fitted_on_about_fit_bytes_of_whole_files_spread_evenly(tmp_path, prose,
                                                                                             monkeypatch):  # fmt: skip
    """Each file's share of fit_bytes was raised to 1024 bytes at least, so a corpus of small documents fed the
    trainer far more than data.fit_bytes (300 files of 600 bytes: all 162 KB of the train part for a fit_bytes of
    16 KB). Now shares under a file's size are passed on, and every k-th file is read whole."""
    folder = tmp_path / "documents"
    folder.mkdir()
    texts = [f"{index:03d} {prose[index * 20 : index * 20 + 596]}" for index in range(300)]  # 600 bytes each
    for index, text in enumerate(texts):
        (folder / f"{index:03d}.txt").write_text(text, encoding="utf-8")
    real, fed = BPETokenizer.train.__func__, []

    def counted(cls, text, *args, **kwargs):
        pieces = list(text)
        fed.extend(pieces)
        return real(cls, iter(pieces), *args, **kwargs)

    monkeypatch.setattr(BPETokenizer, "train", classmethod(counted))
    load_text_lm(folder, tokenizer="bpe", vocab_size=300, seq_len=8, fit_bytes=16 << 10, cache_dir=tmp_path / "c")
    assert 12 << 10 <= sum(len(piece.encode()) for piece in fed) <= 16 << 10
    assert set(fed) <= set(texts[:270]) and len(fed) == len(set(fed))  # whole files of the train part, none twice
    taken = sorted(texts.index(piece) for piece in fed)
    assert taken[0] < 30 and taken[-1] >= 240 and max(np.diff(taken)) <= 12  # spread over the part


def test_a_token_cache_inside_the_folder_of_documents_is_refused_unless_hidden(tmp_path):
    """The cache's files were read as documents by the next run: with data.cache_dir=corpus/cache a second run
    failed on 'corpus/cache/KEY/offsets.npy: byte 0x93 at offset 0 is not valid UTF-8', and eval of the first on
    'corpus/cache/KEY/meta.json: character '{' ... is not in the run's saved char alphabet'."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for index in range(10):
        (folder / f"{index}.txt").write_text(f"document {index} of 0123456789.\n" * 4, encoding="utf-8")
    for cache in (folder / "cache", folder):
        with pytest.raises(ValueError, match=rf"^the token cache {cache} \(data.cache_dir, .* lies inside "
                                             rf"data.path='{folder}'.* in a hidden folder there"):  # fmt: skip
            load_text_lm(folder, seq_len=4, fractions=(0.8, 0.1, 0.1), cache_dir=cache)
    first, again = (load_text_lm(folder, seq_len=4, fractions=(0.8, 0.1, 0.1), cache_dir=folder / ".cache")
                    for _ in range(2))  # fmt: skip
    assert len(first.splits["documents"]) == len(again.splits["documents"]) == 10


def test_load_tokenizer_rejects_unknown_kind(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"kind": "wordpiece"}')
    with pytest.raises(ValueError, match="wordpiece"):
        load_tokenizer(tmp_path)


def test_text_split_is_contiguous_and_windows_rebuild_each_part(tmp_path):
    text = _random_text(3, 2000, alphabet="abcdefgh \n")
    path = tmp_path / "corpus.txt"
    path.write_bytes(text.encode("utf-8"))
    seq_len = 15
    bundle = load_text_lm(path, tokenizer="char", seq_len=seq_len, fractions=(0.8, 0.1, 0.1))
    offsets = [bundle.splits[name] for name in ("train", "val", "test")]
    assert offsets == [[0, 1600], [1600, 1800], [1800, 2000]]
    assert bundle.info == {"vocab_size": len(set(text[:1600])) + 1}
    for name, (start, stop) in zip(("train", "val", "test"), offsets, strict=True):
        examples = getattr(bundle, name)
        assert len(examples) == (stop - start) // (seq_len + 1)
        for example in examples:
            assert example["input_ids"].shape == (seq_len + 1,) and example["input_ids"].dtype == torch.long
            assert torch.equal(example["labels"], example["input_ids"])
        joined = torch.cat([example["input_ids"] for example in examples]).tolist()
        assert bundle.tokenizer.decode(joined) == text[start:stop][: len(joined)]


def test_char_vocabulary_is_fitted_on_train_only(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("ab" * 475 + "abZb" * 5 + "ab" * 15, encoding="utf-8")  # 1000 chars; 'Z' only in the test part
    with pytest.raises(ValueError, match="corpus.txt: character 'Z' at offset 952 in the test part"):
        load_text_lm(path, seq_len=4, fractions=(0.9, 0.05, 0.05))


def test_bpe_is_fitted_on_train_only(tmp_path, prose):
    path = tmp_path / "corpus.txt"
    path.write_text(prose, encoding="utf-8")
    bundle = load_text_lm(path, tokenizer="bpe", vocab_size=300, seq_len=32, fractions=(0.5, 0.25, 0.25))
    train_end = bundle.splits["train"][1]
    fitted_on_train = BPETokenizer.train(prose[:train_end], vocab_size=300)
    fitted_on_all = BPETokenizer.train(prose, vocab_size=300)
    sample = prose[train_end:]
    assert bundle.tokenizer.encode(sample) == fitted_on_train.encode(sample)
    assert fitted_on_all.encode(sample) != fitted_on_train.encode(sample)  # so the check above can tell them apart
    val_tokens = torch.cat([example["input_ids"] for example in bundle.val]).tolist()
    val_text = prose[bundle.splits["val"][0] : bundle.splits["val"][1]]
    assert val_tokens == fitted_on_train.encode(val_text)[: len(val_tokens)]


@pytest.mark.parametrize(
    "content, message",
    [(b"", "empty"), (b"abc\xff\xfeabc", "0xff at offset 3 is not valid UTF-8")],
)
def test_unreadable_text_names_the_path(tmp_path, content, message):
    path = tmp_path / "broken.txt"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"broken.txt.*{message}"):
        load_text_lm(path, seq_len=4)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tokenizer": "char", "vocab_size": 300}, "^data.vocab_size=300 applies only"),
        ({"tokenizer": "bpe"}, "^data.tokenizer='bpe' needs data.vocab_size"),
        ({"tokenizer": "bpe", "vocab_size": 100}, r"^data.vocab_size=100 must be an int of at least 257 \(<pad> and"),
        ({"tokenizer": "bpe", "vocab_size": 257, "documents": "blank_line"},
         r"^data.vocab_size=257 must be an int of at least 258 \(<pad>, <eod> and the 256 bytes"),
        ({"tokenizer": "words"}, "^data.tokenizer must be .*'words'"),
        ({"seq_len": 0}, "^data.seq_len must be a positive int"),
        ({"overlap": 8}, r"^data.overlap=8 must be an int in \[0, data.seq_len=8\)"),
        ({"window_starts": "middle"}, "^data.window_starts='middle'"),
        ({"documents": "xml"}, "^data.documents='xml' must be one of"),
        ({"text_column": "body"}, "^data.text_column='body' applies only to data.documents='jsonl'"),
        ({"text_column": "body", "documents": "blank_line"}, "^data.text_column='body' applies only to"),
        ({"seq_len": 200}, "fewer than seq_len"),
        ({"fit_bytes": 1000}, r"^data.fit_bytes=1000 must be an int of at least 1024$"),
        ({"fractions": (0.0, 0.5, 0.5)}, r"corpus.txt: the train part is empty \(fractions \(0.0, 0.5, 0.5\)\)$"),
        ({"fractions": (0.0, 0.5, 0.5), "tokenizer": "bpe", "vocab_size": 300}, r"corpus.txt: the train part is empty"),
    ],
)
def test_bad_options_raise(tmp_path, options, message):
    """Each names the option as a run config sets it (data.NAME): 'tokenizer='bpe' needs vocab_size' and
    'overlap=8 must be ...' named bare words; a BPE vocab_size below the bytes and special tokens was refused by the
    trainer as 'BPE vocab_size must be an int >= 258 (2 special tokens + 256 bytes)', naming no option; a
    text_column without data.documents=jsonl was ignored, a JSONL file trained on as its raw JSON."""
    path = tmp_path / "corpus.txt"
    path.write_text("abcd" * 250, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_text_lm(path, **{"seq_len": 8, **options})


def test_a_part_of_exactly_seq_len_plus_one_tokens_is_one_window(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abcd" * 25, encoding="utf-8")  # 100 characters
    bundle = load_text_lm(path, seq_len=8, fractions=(0.91, 0.09, 0.0), cache_dir=tmp_path / "c")
    assert bundle.splits["val"] == [91, 100]  # 9 characters: seq_len + 1 tokens, enough for one window
    assert len(bundle.val) == 1 and bundle.tokenizer.decode(bundle.val[0]["input_ids"].tolist()) == "dabcdabcd"


@pytest.mark.parametrize("length, seq_len, overlap", [(100, 9, 3), (101, 9, 3), (8, 9, 3), (4, 9, 3), (57, 6, 5)])
def test_overlapping_windows_score_every_token_once_with_enough_context(length, seq_len, overlap):
    tokens = torch.arange(length) + 1
    examples = text_windows(tokens, seq_len, overlap)
    scored = []
    for example in examples:
        window, labels = example["input_ids"], example["labels"]
        assert len(window) <= seq_len + 1 and len(window) > overlap  # every window scores at least one token
        assert torch.all(labels[:overlap] == -100) and torch.equal(labels[overlap:], window[overlap:])
        start = int(window[0]) - 1
        assert torch.equal(window, tokens[start : start + len(window)])  # a contiguous piece of the stream
        scored += [int(token) - 1 for token in window[overlap:]]  # each has >= overlap tokens before it in the window
    assert scored == list(range(overlap, length))  # every token from offset `overlap` on, once, in order
    assert all(len(example["input_ids"]) == seq_len + 1 for example in examples[:-1])


def test_without_overlap_windows_tile_the_stream_and_drop_the_tail():
    examples = text_windows(torch.arange(23), seq_len=4)
    assert [example["input_ids"].tolist() for example in examples] == [list(range(i, i + 5)) for i in (0, 5, 10, 15)]
    assert all(example["labels"] is example["input_ids"] for example in examples)


def test_overlap_reaches_the_bundle_and_its_record(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(_random_text(4, 1000, alphabet="abcdef \n"), encoding="utf-8")
    bundle = load_text_lm(path, seq_len=20, fractions=(0.9, 0.1, 0.0), overlap=4)
    assert bundle.splits["overlap"] == 4 and bundle.splits["val"] == [900, 1000] and len(bundle.test) == 0
    targets = sum(int((example["labels"][1:] != -100).sum()) for example in bundle.val)
    assert targets == 100 - 4
    with pytest.raises(ValueError, match="overlap=20"):
        load_text_lm(path, seq_len=20, overlap=20)


SHAKESPEARE = Path(__file__).resolve().parents[2] / "../shared/data/tiny_shakespeare.txt"


@pytest.mark.skipif(not SHAKESPEARE.is_file(), reason=f"Tiny Shakespeare is not at {SHAKESPEARE}")
def test_tiny_shakespeare_split_is_contiguous_disjoint_and_its_vocabulary_round_trips_the_text():
    """Scan Markov's data: 1,115,394 characters, 65 symbols, first 90 % train, last 10 % val, never overlapping."""
    bundle = load_text_lm(SHAKESPEARE, seq_len=128, fractions=(0.9, 0.1, 0.0), overlap=5)
    text = SHAKESPEARE.read_text(encoding="utf-8")
    assert bundle.splits["num_characters"] == len(text) == 1_115_394
    train, val, test = (bundle.splits[name] for name in ("train", "val", "test"))
    assert train[0] == 0 and train[1] == val[0] and val[1] == test[0] == test[1] == len(text)
    assert val[1] - val[0] == round(0.1 * len(text))
    assert bundle.tokenizer.vocab_size == 65 + 1  # the characters and padding
    assert bundle.tokenizer.decode(bundle.tokenizer.encode(text)) == text
    for name, (start, stop) in (("train", train), ("val", val)):  # each split's windows lie inside its own part
        examples = getattr(bundle, name)
        first, last = examples[0]["input_ids"], examples[-1]["input_ids"]
        assert bundle.tokenizer.decode(first.tolist()) == text[start : start + len(first)]
        assert bundle.tokenizer.decode(last.tolist()) == text[stop - len(last) : stop]


def test_char_lookup_table_encoding_equals_the_python_encoding_and_names_unknown_characters():
    from markovformer.data.readers.token_store import UnknownCharacter

    alphabet_text = _random_text(3, 400)  # multi-byte, astral and control characters
    tokenizer = CharTokenizer.from_text(alphabet_text)
    text = _random_text(4, 2000)
    assert tokenizer.encode_array(text).tolist() == tokenizer.encode(text)
    assert [ids.tolist() for ids in tokenizer.encode_batch([text[:7], "", text[7:]])] == [
        tokenizer.encode(text[:7]), [], tokenizer.encode(text[7:])]  # fmt: skip
    # outside the alphabet: a codepoint inside the table's range ('c', between 'b' and 'é'), the first past its
    # end (the table's length: a bound check of <= lets it index past the table) and one far beyond it
    for unknown in ("c", chr(ord(max(tokenizer.alphabet)) + 1), "\U0001f680"):
        bad = text[:123] + unknown + text[123:]
        with pytest.raises(ValueError, match=f"{unknown!r} at offset 123"):
            tokenizer.encode(bad)
        with pytest.raises(UnknownCharacter) as raised:
            tokenizer.encode_array(bad)
        assert (raised.value.character, raised.value.index) == (unknown, 123)


def test_bpe_fitted_on_small_pieces_learns_the_merges_of_the_whole_text(monkeypatch, prose):
    from markovformer.data.readers import tokenizer as tokenizer_module
    from markovformer.data.readers.bpe_cuts import safe_pieces

    whole = BPETokenizer.train(prose, vocab_size=330)
    monkeypatch.setattr(tokenizer_module, "FIT_PIECE", 40)  # a cut every ~40 characters or more
    pieces = list(safe_pieces(prose, 40, whole.safe_cut))
    assert len(pieces) > 50 and "".join(pieces) == prose
    cut = BPETokenizer.train(iter(["".join(pieces[:20]), "".join(pieces[20:])]), vocab_size=330)  # read once
    assert cut.record() == whole.record()  # the same vocabulary and merges


def test_a_damaged_cached_plan_is_prepared_again(tmp_path, prose):
    """The cached plan is a cache: one that is not a JSON object of a plan is computed again. One nested too deeply
    for Python's parser raised RecursionError, which its reader's ``except ValueError`` did not catch."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(prose, encoding="utf-8")
    fresh = load_text_lm(corpus, tokenizer="char", seq_len=8, cache_dir=tmp_path / "cache")
    (plan,) = (tmp_path / "cache" / "plans").glob("*.json")
    for damage in ("[" * 100_000 + "]" * 100_000, "[]", "\xff"):
        plan.write_bytes(damage.encode("latin-1"))
        again = load_text_lm(corpus, tokenizer="char", seq_len=8, cache_dir=tmp_path / "cache")
        assert again.tokenizer.record() == fresh.tokenizer.record()
        assert json.loads(plan.read_text(encoding="utf-8"))["parts"]
