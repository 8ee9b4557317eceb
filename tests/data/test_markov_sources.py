"""The markov_chain source's data against its chain: the frequencies of each next token given the k tokens before it
(counted by hand from the sequences) converge to the chain's table, the k is the chain's order, chain_seed picks
the chain and the run seed the sequences."""

import pytest
import torch

from markovformer.data.synthetic.markov_sources import MarkovChainSource

SMALL = {"num_symbols": 3, "seq_len": 64, "train_sequences": 400, "val_sequences": 8, "test_sequences": 8}


def counts_of_contexts(sequences: torch.Tensor, order: int, num_symbols: int) -> torch.Tensor:
    """counts[c, j]: how often symbol j follows the ``order`` symbols of context c (oldest most significant)."""
    counts = torch.zeros(num_symbols**order, num_symbols, dtype=torch.float64)
    for row in sequences.tolist():
        for t in range(order, len(row)):
            context = sum(row[t - order + i] * num_symbols ** (order - 1 - i) for i in range(order))
            counts[context, row[t]] += 1
    return counts


@pytest.mark.parametrize(("options", "order"), [
    ({"kind": "random", "order": 2, "beta": 1.0}, 2),
    ({"kind": "lagged", "lags": (1, 3), "strength": 0.5}, 3),
    ({"kind": "switching", "p": 0.2, "q": 0.3, "num_symbols": 2}, 1),
])  # fmt: skip
def test_sampled_transition_frequencies_converge_to_the_chains_table(options, order):
    """~25,000 transitions: every context seen 200 times or more has each next-token frequency within 4.5 standard
    errors of the chain's probability, the k of the contexts being the option's order (max(lags) for lagged)."""
    source = MarkovChainSource(**{**SMALL, **options})
    chain = source.chain()
    assert chain.order == order
    if options["kind"] == "switching":  # then the data switches 0 -> 1 at rate p, 1 -> 0 at rate q
        assert torch.allclose(chain.transition, torch.tensor([[0.8, 0.2], [0.3, 0.7]], dtype=torch.float64))
    sequences = torch.stack([example["input_ids"] for example in source.build(seed=0).train])
    counts = counts_of_contexts(sequences, order, chain.num_symbols)
    seen = counts.sum(-1)
    assert int((seen >= 200).sum()) >= chain.num_contexts * 3 // 4  # most contexts are checked
    for context in torch.nonzero(seen >= 200).flatten().tolist():
        frequencies, p, n = counts[context] / seen[context], chain.transition[context], seen[context]
        error = (p * (1 - p) / n).sqrt()
        assert bool(((frequencies - p).abs() <= 4.5 * error + 1e-9).all()), (context, frequencies, p)


def test_an_order_k_source_conditions_on_exactly_k_previous_tokens():
    """The next token's frequencies depend on the k-th previous token (data of order k - 1 would give equal rows
    for contexts that differ only there); for lags (1, 3) they do not depend on the token at lag 2."""
    source = MarkovChainSource(**{**SMALL, "kind": "random", "order": 2})
    counts = counts_of_contexts(torch.stack([e["input_ids"] for e in source.build(seed=0).train]), 2, 3)
    rows = counts / counts.sum(-1, keepdim=True)  # context (a, b) is row 3a + b: b the newest
    oldest = max(float((rows[a * 3 + b] - rows[c * 3 + b]).abs().sum()) / 2
                 for b in range(3) for a in range(3) for c in range(3))  # fmt: skip
    assert oldest > 0.2  # total variation between contexts differing in the oldest token only

    lagged = MarkovChainSource(**{**SMALL, "kind": "lagged", "lags": (1, 3), "strength": 0.5})
    counts = counts_of_contexts(torch.stack([e["input_ids"] for e in lagged.build(seed=0).train]), 3, 3)
    by_lags = counts.view(3, 3, 3, 3).sum(1)  # (lag 3, lag 1, next): lag 2 summed out; 690 to 6,400 each
    p = lagged.chain().transition.view(3, 3, 3, 3)
    assert torch.allclose(p, p[:, :1].expand_as(p))  # the table itself is constant along lag 2
    n = by_lags.sum(-1, keepdim=True)
    error = (p[:, 0] * (1 - p[:, 0]) / n).sqrt()
    assert bool(((by_lags / n - p[:, 0]).abs() <= 4.5 * error).all())


def test_chain_seed_picks_the_chain_and_the_run_seed_the_sequences():
    """The same options and seed give the same chain and data; chain_seed another chain; the run seed other
    sequences from the same chain (its entropy rate unchanged), sharing no sequence with another seed's splits."""
    options = {**SMALL, "kind": "random", "order": 2, "seq_len": 32, "train_sequences": 64}
    source = MarkovChainSource(**options)
    assert torch.equal(source.chain().transition, MarkovChainSource(**options).chain().transition)
    assert not torch.allclose(source.chain().transition, MarkovChainSource(**options, chain_seed=1).chain().transition)
    lagged = {**SMALL, "kind": "lagged", "lags": (1, 2)}
    assert not torch.allclose(MarkovChainSource(**lagged).chain().transition,
                              MarkovChainSource(**lagged, chain_seed=1).chain().transition)  # fmt: skip
    bundles = [source.build(seed=0), source.build(seed=0), source.build(seed=1)]
    assert bundles[0].info["reference"]["entropy_rate"] == bundles[2].info["reference"]["entropy_rate"]
    sequences = {split: [{tuple(e["input_ids"].tolist()) for e in getattr(b, split)} for b in bundles]
                 for split in ("train", "val", "test")}  # fmt: skip
    for split, (first, again, other) in sequences.items():
        assert first == again and not first & other, split
    every_split = [sequences[split][index] for split in sequences for index in (0, 2)]
    assert sum(map(len, every_split)) == len(set().union(*every_split))  # no two (seed, split) streams overlap


def test_a_sequence_no_longer_than_the_chain_order_is_refused():
    """seq_len = order leaves every label -100 (no target with a full context): a run would score nothing."""
    with pytest.raises(ValueError, match="data.seq_len=2 must exceed the chain order 2"):
        MarkovChainSource(**{**SMALL, "kind": "random", "order": 2, "seq_len": 2}).build(seed=0)
    assert len(MarkovChainSource(**{**SMALL, "kind": "random", "order": 2, "seq_len": 3}).build(seed=0).train) == 400
