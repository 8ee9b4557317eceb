"""Translation data: parallel-text errors name file and line; the bucketed sampler covers every example once with
similar lengths per batch; collate builds <bos> y / y <eos>; the joint BPE round-trips; the synthetic task follows its
documented rule and really needs its order; BLEU and chrF agree with sacrebleu and a hand computation."""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from markovformer.data.readers.tokenizer import BPETokenizer
from markovformer.data.sources import TranslationFileSource
from markovformer.data.translation import (
    BOS_TOKEN_ID,
    EOS_TOKEN_ID,
    PAD_TOKEN_ID,
    SPECIAL_TOKENS,
    LengthBucketSampler,
    SyntheticTranslationSource,
    check_translation_tokenizer,
    collate_translation,
    corpus_bleu,
    corpus_chrf,
    decode_generated,
    load_translation,
    load_translation_tokenizer,
    paired_bootstrap_bleu,
    read_parallel,
    train_translation_tokenizer,
    translation_bundle,
    translation_lengths,
)

# --- reading parallel text ---------------------------------------------------------------------------------------


def test_read_tsv_strips_sides_and_accepts_crlf_and_bom(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("\ufeffHallo Welt\tHello world\r\n  Gut. \t Good. \n".encode())
    assert read_parallel(path) == [("Hallo Welt", "Hello world"), ("Gut.", "Good.")]


def test_read_two_aligned_files(tmp_path):
    (tmp_path / "src.txt").write_text("eins\nzwei\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("one\ntwo", encoding="utf-8")  # no final newline: still two lines
    assert read_parallel(tmp_path / "src.txt", tmp_path / "tgt.txt") == [("eins", "one"), ("zwei", "two")]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"a\tb\nno tab here\nc\td\n", r"line 2: expected 'source<TAB>target' \(exactly one tab\), found 0 tabs"),
        (b"a\tb\nc\td\te\n", r"line 2: .*found 2 tabs"),
        (b"a\tb\n\t\xc3\xa9\n", r"line 2: the source side is empty"),
        (b"a\tb\nc\td\ne\t  \n", r"line 3: the target side is empty"),
        (b"a\tb\n\nc\td\n", r"line 2: expected 'source<TAB>target'"),
        (b"a\tb\nc\t\xff\n", r"line 2: byte 0xff is not valid UTF-8"),
        (b"", r"the file is empty"),
        (b"\n\n", r"the file is empty"),
    ],
)
def test_malformed_tsv_names_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=f"{path}: {message}"):
        read_parallel(path)


def test_aligned_files_of_different_lengths_raise_naming_both(tmp_path):
    (tmp_path / "src.txt").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("one\ntwo\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"src.txt has 3 lines but .*tgt.txt has 2.*first unmatched line is 3"):
        read_parallel(tmp_path / "src.txt", tmp_path / "tgt.txt")


def test_empty_line_in_aligned_file_names_that_file(tmp_path):
    (tmp_path / "src.txt").write_text("eins\nzwei\n", encoding="utf-8")
    (tmp_path / "tgt.txt").write_text("one\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"tgt.txt: line 2: the target side is empty"):
        read_parallel(tmp_path / "src.txt", tmp_path / "tgt.txt")


def test_missing_file_raises_value_error(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        read_parallel(tmp_path / "absent.tsv")


# --- length-bucketed batches -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lengths() -> list[int]:
    generator = torch.Generator().manual_seed(3)
    return torch.randint(1, 80, (1003,), generator=generator).tolist()


@pytest.mark.parametrize(("seed", "epoch", "pool_batches"), [(0, 0, 50), (0, 1, 50), (5, 2, 4), (1, 0, 1000)])
def test_bucket_sampler_covers_every_example_exactly_once(lengths, seed, epoch, pool_batches):
    sampler = LengthBucketSampler(lengths, 32, seed=seed, pool_batches=pool_batches)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    flat = [index for batch in batches for index in batch]
    assert sorted(flat) == list(range(len(lengths)))
    assert all(1 <= len(batch) <= 32 for batch in batches) and len(batches) == len(sampler)


def test_bucket_sampler_batches_have_similar_lengths(lengths):
    sampler = LengthBucketSampler(lengths, 32, seed=0, pool_batches=10)
    spread = [max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in sampler]
    random_order = torch.randperm(len(lengths), generator=torch.Generator().manual_seed(0)).split(32)
    random_spread = [max(lengths[i] for i in b.tolist()) - min(lengths[i] for i in b.tolist()) for b in random_order]
    # lengths 1..79: random batches of 32 span ~73; pools of 320 sorted give batches spanning ~8
    assert sum(spread) / len(spread) < 0.2 * sum(random_spread) / len(random_spread)


def test_bucket_sampler_is_seeded_and_reshuffles_each_epoch(lengths):
    def order(seed: int, epoch: int) -> list[list[int]]:
        sampler = LengthBucketSampler(lengths, 16, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0, 0) == order(0, 0)
    assert order(0, 0) != order(0, 1)
    assert order(0, 0) != order(1, 0)


def test_unshuffled_bucket_sampler_is_a_global_length_sort(lengths):
    batches = list(LengthBucketSampler(lengths, 100, shuffle=False))
    flat = [index for batch in batches for index in batch]
    assert [lengths[i] for i in flat] == sorted(lengths)
    assert sorted(flat) == list(range(len(lengths))) and len(batches) == 11


def test_bucket_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        LengthBucketSampler([1, 2], 0)
    with pytest.raises(ValueError, match="at least one example"):
        LengthBucketSampler([], 4)


# --- collate -----------------------------------------------------------------------------------------------------


def test_collate_adds_bos_and_eos_and_pads_with_masks():
    examples = [
        {"src_ids": torch.tensor([10, 11, 12]), "tgt_ids": torch.tensor([20])},
        {"src_ids": torch.tensor([13]), "tgt_ids": torch.tensor([21, 22, 23])},
    ]
    batch = collate_translation(examples)
    assert batch["src_ids"].tolist() == [[10, 11, 12], [13, PAD_TOKEN_ID, PAD_TOKEN_ID]]
    assert batch["src_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["tgt_ids"].tolist() == [[BOS_TOKEN_ID, 20, 0, 0], [BOS_TOKEN_ID, 21, 22, 23]]
    assert batch["tgt_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert batch["labels"].tolist() == [[20, EOS_TOKEN_ID, -100, -100], [21, 22, 23, EOS_TOKEN_ID]]
    assert all(t.dtype == torch.long for t in batch.values())
    # labels are the decoder input shifted left by one: the model predicts position i+1's input at i
    real = batch["tgt_mask"].bool()
    assert torch.equal(batch["labels"][:, :-1][real[:, 1:]], batch["tgt_ids"][:, 1:][real[:, 1:]])


def test_collate_feeds_the_translator_directly():
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

    examples = [{"src_ids": torch.tensor([5, 6, 7]), "tgt_ids": torch.tensor([8, 9])},
                {"src_ids": torch.tensor([5]), "tgt_ids": torch.tensor([9, 9, 8, 8])}]  # fmt: skip
    model = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=16, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0))
    batch = collate_translation(examples)
    padded = model(**batch)
    alone = model(**collate_translation(examples[:1]))
    assert padded.logits.shape == (2, 5, 16)
    assert torch.allclose(padded.logits[0, :3], alone.logits[0], atol=1e-5)  # padding changes nothing


def test_collate_rejects_wrong_keys_and_empty_sources():
    with pytest.raises(ValueError, match="keys"):
        collate_translation([{"input_ids": torch.tensor([1])}])
    with pytest.raises(ValueError, match="at least one source token"):
        collate_translation([{"src_ids": torch.tensor([], dtype=torch.long), "tgt_ids": torch.tensor([4])}])


def test_translation_lengths_count_the_added_special_token():
    examples = [
        {"src_ids": torch.ones(5), "tgt_ids": torch.ones(2)},
        {"src_ids": torch.ones(2), "tgt_ids": torch.ones(5)},
    ]
    assert translation_lengths(examples) == [5, 6]


# --- tokenizer and loader ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def synthetic_pairs() -> list[tuple[str, str]]:
    pairs, _ = SyntheticTranslationSource(train_examples=300, val_examples=10, test_examples=10).text_pairs(0)
    return pairs["train"]


def test_joint_tokenizer_round_trips_the_synthetic_data_and_fixes_special_ids(tmp_path, synthetic_pairs):
    tokenizer = train_translation_tokenizer(synthetic_pairs, 400)
    assert [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3]
    for source, target in synthetic_pairs:
        for text in (source, target):
            ids = tokenizer.encode(text)
            assert min(ids) > 3 and tokenizer.decode(ids) == text
    tokenizer.save(tmp_path)
    loaded = load_translation_tokenizer(tmp_path)
    assert all(loaded.encode(s) == tokenizer.encode(s) for pair in synthetic_pairs[:20] for s in pair)


def test_a_language_model_tokenizer_is_not_a_translation_tokenizer(tmp_path):
    lm = BPETokenizer.train("some text to learn from " * 20, 300)
    with pytest.raises(ValueError, match="special token ids"):
        check_translation_tokenizer(lm)
    lm.save(tmp_path)
    with pytest.raises(ValueError, match="special token ids"):
        load_translation_tokenizer(tmp_path)


def test_bpe_special_tokens_must_start_with_pad():
    with pytest.raises(ValueError, match="special_tokens must start with '<pad>'"):
        BPETokenizer.train("text", 300, special_tokens=("<bos>", "<pad>"))
    with pytest.raises(ValueError, match=r"vocab_size must be an int >= 260 \(4 special tokens"):
        BPETokenizer.train("text", 259, special_tokens=SPECIAL_TOKENS)


@pytest.mark.parametrize("source", ["translation_file", "synthetic_translation"])
def test_a_vocabulary_too_small_for_the_bytes_is_refused_naming_the_option(source):
    """It failed in the BPE trainer, after the data were read, as 'BPE vocab_size must be an int >= 260', naming no
    option; the sources now refuse it when their options are read."""
    from markovformer.data.sources import DATA_SOURCES

    for bad in (259, "300", True):
        with pytest.raises(ValueError, match=rf"^data\.vocab_size={bad!r} must be an int of at least 260 \(<pad>"):
            DATA_SOURCES[source](vocab_size=bad)
    assert DATA_SOURCES[source](vocab_size=260).vocab_size == 260


def test_load_translation_splits_fits_on_train_and_decodes_back(tmp_path):
    pairs = [(f"quelle {i} satz", f"target {i} sentence") for i in range(40)]
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    bundle = load_translation(path, vocab_size=300, fractions=(0.5, 0.25, 0.25), seed=1)
    indices = bundle.splits["train"] + bundle.splits["val"] + bundle.splits["test"]
    assert sorted(indices) == list(range(40)) and len(bundle.splits["train"]) == 20
    for name in ("train", "val", "test"):
        for index, example in zip(bundle.splits[name], getattr(bundle, name), strict=True):
            assert bundle.tokenizer.decode(example["src_ids"].tolist()) == pairs[index][0]
            assert bundle.tokenizer.decode(example["tgt_ids"].tolist()) == pairs[index][1]
    assert bundle.info == {"vocab_size": bundle.tokenizer.vocab_size, "pad_token_id": 0, "bos_token_id": 1,
                           "eos_token_id": 2}  # fmt: skip
    again = TranslationFileSource(path=str(path), vocab_size=300, fractions=(0.5, 0.25, 0.25)).build(seed=1)
    assert again.splits["val"] == bundle.splits["val"]


def test_a_joint_bpe_smaller_than_the_asked_vocab_size_is_said(tmp_path, capsys):
    """As a text file's or a local dataset's BPE (announce_fitted): the model got the smaller vocabulary silently."""
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"quelle {i} satz\ttarget {i} sentence\n" for i in range(20)), encoding="utf-8")
    fitted = load_translation(path, vocab_size=5000).tokenizer.vocab_size
    assert fitted < 5000
    assert f"data.vocab_size=5000: the train part of {path} offers no more merges, so the BPE vocabulary has " \
           f"{fitted} tokens" in capsys.readouterr().err
    load_translation(path, vocab_size=fitted)
    assert capsys.readouterr().err == ""


def test_load_translation_max_length_drops_long_training_pairs_only(tmp_path):
    pairs = [("kurz", "short")] * 30 + [("lang " * 30, "long " * 30)] * 30
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s.strip()}\t{t.strip()}\n" for s, t in pairs), encoding="utf-8")
    bundle = load_translation(path, vocab_size=300, fractions=(0.8, 0.1, 0.1), max_length=10)
    long_in_train = sum(1 for i in bundle.splits["train"] if i >= 30)
    assert bundle.splits["dropped_long_train"] == long_in_train > 0
    assert all(len(e["src_ids"]) <= 10 for e in bundle.train)
    assert any(len(e["src_ids"]) > 10 for e in bundle.val + bundle.test)


def test_file_source_checks_paths(tmp_path):
    with pytest.raises(ValueError, match="data.path is required"):
        TranslationFileSource().build(0)
    with pytest.raises(ValueError, match="data.target_path=.*no such file"):
        TranslationFileSource(path=__file__, target_path=str(tmp_path / "absent")).build(0)


def test_decode_generated_cuts_at_eos_and_drops_padding(synthetic_pairs):
    tokenizer = train_translation_tokenizer(synthetic_pairs, 400)
    first, second = (tokenizer.encode(synthetic_pairs[i][1]) for i in (0, 1))
    rows = [[BOS_TOKEN_ID, *first, EOS_TOKEN_ID, *second], [*second, PAD_TOKEN_ID, PAD_TOKEN_ID]]
    width = max(map(len, rows))
    sequences = torch.tensor([row + [PAD_TOKEN_ID] * (width - len(row)) for row in rows])
    assert decode_generated(tokenizer, sequences) == [synthetic_pairs[0][1], synthetic_pairs[1][1]]


# --- the synthetic task ------------------------------------------------------------------------------------------


def _symbols(text: str) -> list[int]:
    """A word's symbol index: the letters after the side prefix, in base 26."""
    return [sum((ord(c) - 97) * 26**power for power, c in enumerate(reversed(word[1:]))) for word in text.split()]


def test_synthetic_targets_follow_the_documented_rule():
    task = SyntheticTranslationSource(source_symbols=5, target_symbols=30, order=2, train_examples=200)
    table = task.table()
    assert table.shape == (5, 31, 31) and int(table.max()) < 30
    pairs, _ = task.text_pairs(seed=4)
    for source, target in pairs["train"]:
        x, y = _symbols(source), _symbols(target)
        assert len(x) == len(y) and task.min_length <= len(x) <= task.max_length
        padded = [30, 30] + y  # the start symbol stands for y_0 and y_{-1}
        for i in range(len(x)):
            assert y[i] == int(table[x[i], padded[i + 1], padded[i]])  # table[x_i, y_{i-1}, y_{i-2}]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_synthetic_target_needs_exactly_its_order(order):
    """An oracle that sees x_i and the last ``order`` targets predicts every word; one that sees one target fewer
    (the best lookup from those counts on the data themselves) gets many wrong."""
    task = SyntheticTranslationSource(order=order, train_examples=3000, table_seed=7)
    pairs, _ = task.text_pairs(seed=0)
    sequences = [(_symbols(s), _symbols(t)) for s, t in pairs["train"]]

    def best_accuracy(context: int) -> float:
        counts: dict[tuple, Counter] = defaultdict(Counter)
        for x, y in sequences:
            padded = [-1] * order + y
            for i in range(len(x)):
                key = (x[i], *padded[order + i - context : order + i])
                counts[key][y[i]] += 1
        return sum(c.most_common(1)[0][1] for c in counts.values()) / sum(sum(c.values()) for c in counts.values())

    assert best_accuracy(order) == 1.0
    assert best_accuracy(order - 1) < 0.75


def test_synthetic_task_is_deterministic_given_its_seeds():
    task = SyntheticTranslationSource(train_examples=50, val_examples=5, test_examples=5)
    assert task.text_pairs(3) == task.text_pairs(3)
    assert task.text_pairs(3)[0]["train"] != task.text_pairs(4)[0]["train"]
    assert not torch.equal(task.table(), SyntheticTranslationSource(table_seed=1).table())


def test_synthetic_build_keeps_one_token_per_word():
    bundle = SyntheticTranslationSource(train_examples=300, val_examples=20, test_examples=20).build(0)
    assert bundle.info["true_order"] == 2 and bundle.info["bos_token_id"] == BOS_TOKEN_ID
    for example in bundle.train + bundle.test:
        for key in ("src_ids", "tgt_ids"):
            assert len(example[key]) == len(bundle.tokenizer.decode(example[key].tolist()).split())


def test_synthetic_build_refuses_a_vocabulary_that_splits_words():
    task = SyntheticTranslationSource(source_symbols=200, target_symbols=200, order=1, vocab_size=262,
                                      train_examples=200, val_examples=5, test_examples=5)  # fmt: skip
    with pytest.raises(ValueError, match="vocab_size=262 splits a word"):
        task.build(0)


def test_a_bad_max_length_is_named_as_the_data_option():
    with pytest.raises(ValueError, match=r"^data\.max_length=0: must be a positive int or None$"):
        translation_bundle({"train": [], "val": [], "test": []}, None, max_length=0)


def test_synthetic_options_are_validated():
    with pytest.raises(ValueError, match="data.order=0"):
        SyntheticTranslationSource(order=0)
    with pytest.raises(ValueError, match="max_length=2 must be >= min_length=6"):
        SyntheticTranslationSource(max_length=2)
    with pytest.raises(ValueError, match="needs a table of"):
        SyntheticTranslationSource(target_symbols=100, order=5)


# --- BLEU --------------------------------------------------------------------------------------------------------


def test_bleu_of_identical_text_is_100():
    sentences = ["Das ist gut.", "the cat sat on the mat", "ta tb tc td"]
    assert corpus_bleu(sentences, sentences) == pytest.approx(100.0)


def test_bleu_matches_a_hand_computation_and_sacrebleu():
    import sacrebleu

    # precisions 5/6, 3/5, 2/4, 1/3 and equal lengths (no brevity penalty)
    expected = 100 * math.exp(sum(math.log(p) for p in (5 / 6, 3 / 5, 2 / 4, 1 / 3)) / 4)
    assert corpus_bleu(["the cat sat on the mat"], ["the cat sat on a mat"]) == pytest.approx(expected, abs=1e-9)
    hypotheses = ["It is a guide to action.", "He read the book because he was interested in world history"]
    references = ["It is the guiding principle which guarantees action.", "He was interested in world history."]
    own = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert corpus_bleu(hypotheses, references) == pytest.approx(own, abs=1e-12)
    assert 0 < own < 100


def test_chrf_matches_a_hand_computation_and_sacrebleu_with_hypotheses_and_references_in_their_places():
    import sacrebleu

    # "ab" against "abc" (no spaces: chrF drops them): 1-grams match 2 of 2 (P) and 2 of 3 (R), 2-grams 1 of 1 and
    # 1 of 2; no 3-gram in the hypothesis. P and R are averaged over the two orders, then F2 = 5PR / (4P + R).
    precision, recall = 1.0, (2 / 3 + 1 / 2) / 2
    assert corpus_chrf(["a b"], ["abc"]) == pytest.approx(100 * 5 * precision * recall / (4 * precision + recall))
    assert corpus_chrf(["abc"], ["a b"]) == pytest.approx(100 * 5 * recall * precision / (4 * recall + precision))
    hypotheses = ["It is a guide to action.", "He was interested in history"]  # short: precise, little recall
    references = ["It is the guiding principle which guarantees action.", "He was interested in world history."]
    own = sacrebleu.corpus_chrf(hypotheses, [references]).score
    assert corpus_chrf(hypotheses, references) == pytest.approx(own, abs=1e-12)
    swapped = sacrebleu.corpus_chrf(references, [hypotheses]).score
    assert own < swapped - 10  # 42.6 and 60.8: recall weighs more than precision, the arguments' order shows


def test_bleu_rejects_mismatched_inputs():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        corpus_bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="not one string"):
        corpus_bleu("a b", "a b")


def _noisy_translations(seed: int, drop: float) -> tuple[list[str], list[str]]:
    """200 fixed references of 6-10 words, and hypotheses that lose each word with probability ``drop``."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(40)]
    references = [" ".join(rng.choice(words) for _ in range(rng.randint(6, 10))) for _ in range(200)]
    rng = random.Random(seed)
    hypotheses = [" ".join(w for w in r.split() if rng.random() >= drop) or "w0" for r in references]
    return hypotheses, references


def test_paired_bootstrap_interval_matches_a_naive_bootstrap_and_tells_systems_apart():
    worse, references = _noisy_translations(0, 0.4)
    better, _ = _noisy_translations(1, 0.1)
    result = paired_bootstrap_bleu({"worse": worse, "better": better, "copy": list(worse)}, references, "worse")
    assert result["worse"].bleu == pytest.approx(corpus_bleu(worse, references))
    assert result["better"].bleu == pytest.approx(corpus_bleu(better, references))
    assert result["worse"].p_value is None and result["copy"].p_value == 1.0
    assert result["better"].p_value < 0.01  # BLEU 81 against 28 on 200 sentences
    # the interval's half-width: a naive bootstrap of corpus_bleu over resampled sentences, its own random draws (200
    # of them: 1.06 times the interval, where 400 gave 1.07; a full width or a standard deviation is 2 or 0.5 times)
    rng = np.random.default_rng(7)
    scores = []
    for _ in range(200):
        chosen = rng.integers(0, len(worse), len(worse))
        scores.append(corpus_bleu([worse[i] for i in chosen], [references[i] for i in chosen]))
    low, high = np.percentile(scores, [2.5, 97.5])
    assert result["worse"].ci95 == pytest.approx((high - low) / 2, rel=0.25)
    assert 0 < result["worse"].ci95 < result["worse"].bleu


def test_paired_bootstrap_rejects_bad_inputs():
    hypotheses, references = _noisy_translations(0, 0.2)
    with pytest.raises(ValueError, match="baseline 'AT' is not one of the systems \\['a'\\]"):
        paired_bootstrap_bleu({"a": hypotheses}, references, "AT")
    with pytest.raises(ValueError, match="system 'b'.*199 hypotheses but 200 references"):
        paired_bootstrap_bleu({"a": hypotheses, "b": hypotheses[1:]}, references, "a")
    with pytest.raises(ValueError, match="at least 2 samples, got 1"):
        paired_bootstrap_bleu({"a": hypotheses}, references, "a", samples=1)


def test_pairs_whose_source_is_a_training_source_are_counted_and_the_run_says_so(tmp_path, capsys):
    """A TSV with repeated pairs put copies of training pairs into val and test, and a run scored them as held out
    without a word (the de-en recipe does not deduplicate either); data.max_length's dropped training pairs were
    counted only in data.json. Both are now counted per split and printed with the data line."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    pairs = [(f"quelle {i} satz", f"target {i} sentence") for i in range(30)]
    pairs += pairs[:10] + [(pairs[10][0], "another target")] + [("lang " * 30, "long " * 30)] * 12
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s.strip()}\t{t.strip()}\n" for s, t in pairs), encoding="utf-8")
    bundle = load_translation(path, vocab_size=300, fractions=(0.6, 0.2, 0.2), seed=3, max_length=10)
    train_sources = {pairs[i][0].strip() for i in bundle.splits["train"]}
    expected = {name: count for name in ("val", "test")
                if (count := sum(pairs[i][0].strip() in train_sources for i in bundle.splits[name]))}  # fmt: skip
    assert expected and bundle.info.get("sources_in_training") == expected  # this seed puts copies across
    dropped = bundle.splits["dropped_long_train"]
    assert dropped > 0
    train(resolve_run_config({"task": "translation", "model_type": "markov_translator",
                              "output_dir": str(tmp_path / "run"),
                              "model": {"d_model": 16, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1,
                                        "order": 2, "max_positions": 80},
                              "data": {"source": "translation_file", "path": str(path), "vocab_size": 300,
                                       "fractions": [0.6, 0.2, 0.2], "max_length": 10},
                              "trainer": {"max_steps": 1, "batch_size": 4, "eval_every": 1, "checkpoint_every": 1,
                                          "log_every": 1, "seed": 3}}))  # fmt: skip
    out = capsys.readouterr().out
    counts = " and ".join(f"{count} of {len(bundle.splits[name])} {what}" for name, what in
                          (("val", "validation"), ("test", "test")) if (count := expected.get(name)))  # fmt: skip
    assert f"warning: {counts} pairs have a source sentence that is also a training pair's source" in out
    assert f"{dropped} of {len(bundle.splits['train'])} training pairs are longer than data.max_length=10" in out
