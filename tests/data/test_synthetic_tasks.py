"""The sequence-mixer tasks: constraints with errors naming the value, where the labels sit, and hand-written oracles
that read the answer off the input and solve every example; the sources' splits and references."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from markovformer.data.sources import DATA_SOURCES, source_tasks
from markovformer.data.synthetic import tasks
from markovformer.data.synthetic.ctc import SyntheticCTCSource
from markovformer.markov import add_beta_loss
from markovformer.training.tasks.ctc import symbols_to_words


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def mqar_oracle(inputs: torch.Tensor, labels: torch.Tensor, num_pairs: int) -> list[tuple[int, int]]:
    """(prediction, label) for every scored position: look the query key (the token before) up among the pairs."""
    answers = []
    for row, label_row in zip(inputs.tolist(), labels.tolist(), strict=True):
        table = {row[2 * i]: row[2 * i + 1] for i in range(num_pairs)}
        answers += [(table[row[t - 1]], label) for t, label in enumerate(label_row) if label != tasks.IGNORE]
    return answers


def test_mqar_oracle_solves_every_query_and_only_queries_are_scored():
    seq_len, pairs, vocab = 64, 8, 128
    inputs, labels = tasks.mqar_examples(500, seq_len, pairs, vocab, _generator())
    assert inputs.shape == labels.shape == (500, seq_len)
    scored = labels != tasks.IGNORE
    assert torch.all(scored.sum(-1) == pairs)  # each key queried exactly once
    assert not scored[:, : 2 * pairs + 1].any()  # nothing in the key-value context
    assert torch.all((scored.nonzero()[:, 1] - 2 * pairs) % 2 == 1)  # answers follow queries at even offsets
    answers = mqar_oracle(inputs, labels, pairs)
    assert len(answers) == 500 * pairs and all(p == label for p, label in answers)
    keys, values = inputs[:, 0 : 2 * pairs : 2], inputs[:, 1 : 2 * pairs : 2]
    assert keys.min() >= 1 and keys.max() < vocab // 2 and values.min() >= vocab // 2 and values.max() < vocab
    assert all(len(set(row)) == pairs for row in keys.tolist())  # keys drawn without replacement


def test_mqar_query_gaps_follow_the_power_law():
    """Gap g (query at context + 2g) has probability ∝ g'^(a-1), g' = g + 1: the first gap is the likeliest and the
    frequency of single draws matches the normalised weights."""
    seq_len, vocab = 64, 128
    inputs, labels = tasks.mqar_examples(20_000, seq_len, 1, vocab, _generator(1))
    gaps = (labels != tasks.IGNORE).nonzero()[:, 1] - 2 - 1  # answer position - context - 1 = 2g
    counts = torch.bincount(gaps // 2, minlength=(seq_len - 2) // 2).double()
    weights = torch.arange(1, (seq_len - 2) // 2 + 1, dtype=torch.float64) ** (0.01 - 1)
    expected = 20_000 * weights / weights.sum()
    assert torch.all((counts - expected).abs() < 5 * expected.sqrt() + 5)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((64, 17, 128), "num_pairs=17 needs 4 \\* num_pairs <= seq_len=64"),
        ((64, 4, 64), "vocab_size=64 must exceed seq_len=64"),
        ((63, 4, 128), "seq_len=63 must be even"),
        ((64, 0, 128), "num_pairs=0"),
    ],
)
def test_mqar_constraints_name_the_value(arguments, message):
    with pytest.raises(ValueError, match=message):
        tasks.mqar_examples(4, *arguments, _generator())
    with pytest.raises(ValueError, match=message):
        DATA_SOURCES["mqar"](seq_len=arguments[0], num_pairs=arguments[1], vocab_size=arguments[2])


def test_induction_oracle_reads_the_token_after_the_first_trigger():
    inputs, labels = tasks.induction_examples(1000, 32, 10, _generator())
    scored = labels != tasks.IGNORE
    assert torch.all(scored[:, -1]) and scored.sum() == 1000
    for row, label_row in zip(inputs.tolist(), labels.tolist(), strict=True):
        assert row.count(tasks.INDUCTION_TRIGGER) == 2 and row[-2] == tasks.INDUCTION_TRIGGER
        assert row[row.index(tasks.INDUCTION_TRIGGER) + 1] == label_row[-1]
    with pytest.raises(ValueError, match="vocab_size=2"):
        tasks.induction_examples(4, 32, 2, _generator())
    with pytest.raises(ValueError, match="seq_len=3"):
        DATA_SOURCES["induction"](seq_len=3)


def test_selective_copy_oracle_copies_the_non_noise_tokens_in_order():
    seq_len, count, vocab = 40, 8, 12
    inputs, labels = tasks.selective_copy_examples(500, seq_len, count, vocab, _generator())
    context = seq_len - count - 1
    assert torch.all(inputs[:, context:] == tasks.COPY_MARKER)
    assert torch.all((labels != tasks.IGNORE) == (torch.arange(seq_len) > context))
    for row, label_row in zip(inputs.tolist(), labels.tolist(), strict=True):
        copied = [token for token in row[:context] if token != tasks.COPY_NOISE]
        assert copied == label_row[context + 1 :]
    with pytest.raises(ValueError, match="seq_len=16 leaves a context of seq_len - num_tokens - 1 = 7"):
        tasks.selective_copy_examples(4, 16, 8, vocab, _generator())
    with pytest.raises(ValueError, match="vocab_size=2"):
        DATA_SOURCES["selective_copy"](vocab_size=2)


@pytest.mark.parametrize("beta", [1.0, 0.2])
def test_icl_markov_labels_are_the_next_symbols_and_the_reference_is_the_bayes_add_beta_loss(beta):
    """Rows ~ Dirichlet(beta): the Bayes predictor is add-beta (the reference was add-1 whatever beta was, which
    a model could beat by 0.05 nats at beta = 0.2)."""
    source = DATA_SOURCES["icl_markov"](seq_len=64, order=2, num_symbols=3, train_examples=8, val_examples=50,
                                        test_examples=60, beta=beta)  # fmt: skip
    bundle = source.build(seed=3)
    test = torch.stack([e["input_ids"] for e in bundle.test])
    labels = torch.stack([e["labels"] for e in bundle.test])
    assert torch.all(labels[:, :2] == tasks.IGNORE) and torch.equal(labels[:, 2:], test[:, 2:])
    bayes = bundle.info["reference"]["bayes_test_loss"]
    assert bayes == pytest.approx(add_beta_loss(test, 2, 3, beta))
    if beta != 1.0:
        assert bayes < add_beta_loss(test, 2, 3, 1.0)
    with pytest.raises(ValueError, match="seq_len=2 must exceed order=2"):
        DATA_SOURCES["icl_markov"](seq_len=2, order=2)


@pytest.mark.parametrize("name", ["mqar", "induction", "selective_copy", "icl_markov"])
def test_sources_give_disjoint_seeded_splits_for_causal_lm(name):
    source = DATA_SOURCES[name](train_examples=30, val_examples=10, test_examples=10)
    first, again = source.build(seed=5), source.build(seed=5)
    assert source_tasks(name) == ("causal_lm",)
    assert torch.equal(first.train[0]["input_ids"], again.train[0]["input_ids"])
    train, val, test = (torch.stack([e["input_ids"] for e in split[:10]]) for split in (first.train, first.val,
                                                                                       first.test))  # fmt: skip
    assert not torch.equal(train, val) and not torch.equal(train, test) and not torch.equal(val, test)  # own streams
    assert 0 < first.info["reference"]["chance_accuracy"] < 1
    with pytest.raises(ValueError, match="data.val_examples=0"):
        DATA_SOURCES[name](val_examples=0)


def _binary_entropy(p: float) -> float:
    return -sum(v * math.log(v) for v in (p, 1 - p) if v > 0)


def test_markov_chain_labels_ignore_the_targets_without_a_full_context():
    source = DATA_SOURCES["markov_chain"](kind="lagged", num_symbols=3, lags=(1, 2), seq_len=12, train_sequences=4,
                                          val_sequences=4, test_sequences=4)  # fmt: skip
    for example in source.build(seed=0).train:  # order 2: the first two targets have fewer than 2 symbols before
        assert (example["labels"][:2] == tasks.IGNORE).all()
        assert torch.equal(example["labels"][2:], example["input_ids"][2:])


def test_markov_chain_references_are_the_switching_chain_closed_forms():
    p, q = 0.2, 0.3
    source = DATA_SOURCES["markov_chain"](kind="switching", p=p, q=q, seq_len=8, train_sequences=2,
                                          val_sequences=2, test_sequences=2)  # fmt: skip
    reference = source.build(seed=0).info["reference"]
    assert reference["unigram_entropy"] == pytest.approx(_binary_entropy(p / (p + q)), abs=1e-12)  # H(pi)
    closed = (q * _binary_entropy(p) + p * _binary_entropy(q)) / (p + q)
    assert reference["entropy_rate"] == pytest.approx(closed, abs=1e-12)


def test_markov_chain_data_depends_on_the_run_seed():
    source = DATA_SOURCES["markov_chain"](kind="random", num_symbols=4, order=2, seq_len=16, train_sequences=4,
                                          val_sequences=4, test_sequences=4)  # fmt: skip
    first, again, other = source.build(seed=0), source.build(seed=0), source.build(seed=1)
    for split in ("train", "val", "test"):
        inputs = [torch.stack([e["input_ids"] for e in getattr(bundle, split)]) for bundle in (first, again, other)]
        assert torch.equal(inputs[0], inputs[1]) and not torch.equal(inputs[0], inputs[2])


@pytest.mark.parametrize("n, k", [(4095, 4), (31, 31), (100, 7)])
def test_the_k_smallest_draws_are_the_first_k_of_a_full_argsort(n, k):
    # MQAR's keys and values and selective copying's positions: the same examples as sorting every draw
    draws = torch.rand(64, n, generator=_generator(3))
    assert torch.equal(tasks._smallest(draws, k), draws.argsort(-1)[:, :k])


def test_synthetic_ctc_names_symbol_1_a_space_so_wer_counts_words_and_its_text_names_only_its_options():
    source = SyntheticCTCSource(num_symbols=4, train_examples=1, val_examples=1, test_examples=1)
    names = source.build(0).info["label_names"]
    assert names == ["<blank>", " ", "a", "b", "c"]
    assert symbols_to_words([2, 1, 3, 4], names).split() == ["a", "bc"]  # two words, split at symbol 1
    options = {field.name for field in dataclasses.fields(SyntheticCTCSource)}
    assert set(re.findall(r"``(\w+)``", SyntheticCTCSource.__doc__)) <= options  # data show prints this text
