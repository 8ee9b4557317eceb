"""``fit_chain`` and ``select_order`` against naive counting loops, a known chain's table and entropy rate, and the
order BIC recovers from the chain's samples."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer.markov import random_chain
from markovformer.markov.fitting import fit_chain, select_order


def _naive_counts(x: torch.Tensor, order: int, num_symbols: int, first_target: int) -> dict:
    counts = {}
    for row in x.tolist():
        for t in range(first_target, len(row)):
            context = tuple(row[t - order : t])
            counts.setdefault(context, [0] * num_symbols)[row[t]] += 1
    return counts


@pytest.mark.parametrize("beta", [0.0, 0.5])
def test_a_fitted_chain_is_the_naive_counts_normalised_and_unseen_contexts_are_uniform_without_beta(beta):
    x = torch.randint(0, 3, (3, 40), generator=torch.Generator().manual_seed(0))
    x[:, :5] = 0  # some contexts stay unseen: (2, 2, x) never follows, say
    chain = fit_chain(x, 2, 3, beta=beta)
    counts = _naive_counts(x, 2, 3, 2)
    for index in range(9):
        context = (index // 3, index % 3)  # the oldest symbol most significant
        row = counts.get(context)
        if row is None and beta == 0:
            expected = [1 / 3] * 3
        else:
            row = row or [0, 0, 0]
            expected = [(n + beta) / (sum(row) + 3 * beta) for n in row]
        assert chain.transition[index].tolist() == pytest.approx(expected, abs=1e-12), context


def test_a_long_sample_recovers_the_chains_table_and_the_fit_of_the_chosen_order_its_entropy_rate():
    truth = random_chain(2, 3, generator=torch.Generator().manual_seed(1))
    x = truth.sample(4, 50_000, generator=torch.Generator().manual_seed(2))
    fitted = fit_chain(x, 2, 3)
    weights = truth.stationary()  # rare contexts are estimated from fewer transitions
    assert float(((fitted.transition - truth.transition).abs().max(-1).values * weights).sum()) < 0.01
    selection = select_order(x, 3, 4)
    assert selection.order == 2 and selection.entropy_rate() == pytest.approx(truth.entropy_rate(), abs=0.005)


def test_bic_chooses_order_zero_for_independent_symbols_and_one_for_a_first_order_chain():
    independent = torch.randint(0, 4, (20_000,), generator=torch.Generator().manual_seed(3))
    assert select_order(independent, 4, 3).order == 0
    first = random_chain(1, 4, generator=torch.Generator().manual_seed(4)).sample(
        1, 20_000, generator=torch.Generator().manual_seed(5))[0]  # fmt: skip
    assert select_order(first, 4, 3).order == 1


def test_the_log_likelihoods_are_the_naive_sums_on_the_same_targets_and_the_criteria_their_closed_forms():
    x = torch.randint(0, 3, (2, 60), generator=torch.Generator().manual_seed(6))
    selection = select_order(x, 3, 3, criterion="aic")
    assert selection.targets == 2 * (60 - 3)
    for order in range(4):
        counts = _naive_counts(x, order, 3, 3)  # the targets of every order start at max_order
        expected = sum(n * math.log(n / sum(row)) for row in counts.values() for n in row if n)
        assert selection.log_likelihood[order] == pytest.approx(expected, rel=1e-12)
        p = 3**order * 2
        assert selection.parameters[order] == p
        assert selection.bic[order] == pytest.approx(-2 * expected + p * math.log(selection.targets))
        assert selection.aic[order] == pytest.approx(-2 * expected + 2 * p)
    assert selection.order == min(range(4), key=lambda k: selection.aic[k])
    assert selection.log_likelihood == tuple(sorted(selection.log_likelihood))  # a higher order never fits worse


@pytest.mark.parametrize(("call", "message"), [
    (lambda x: fit_chain(x, 0, 4), "order must be an integer >= 1, got 0"),
    (lambda x: fit_chain(x, 20, 4), r"order=20 with num_symbols=4 needs 4\*\*21 counts"),
    (lambda x: fit_chain(x, 1, 4, beta=-1.0), "beta must be a finite number >= 0, got -1.0"),
    (lambda x: fit_chain(x[:1], 1, 4), "longer than order=1"),
    (lambda x: fit_chain(x.float(), 1, 4), "integer symbol tensor"),
    (lambda x: fit_chain(x, 1, 3), r"outside \[0, 3\)"),
    (lambda x: select_order(x, 4, -1), "max_order must be an integer >= 0, got -1"),
    (lambda x: select_order(x, 4, 2, criterion="bick"), "criterion='bick' must be one of"),
    (lambda x: select_order(x[None, None], 4, 2), r"shape \(T,\) or \(B, T\)"),
])  # fmt: skip
def test_bad_arguments_are_refused_naming_the_value(call, message):
    x = torch.tensor([0, 1, 2, 3, 0, 1])
    with pytest.raises(ValueError, match=message):
        call(x)


def test_a_chain_fitted_on_one_sample_scores_a_held_out_one_near_the_entropy_rate_and_above_its_in_sample_fit():
    truth = random_chain(2, 4, generator=torch.Generator().manual_seed(7))
    train = truth.sample(1, 5_000, generator=torch.Generator().manual_seed(8))
    held_out = truth.sample(1, 50_000, generator=torch.Generator().manual_seed(9))
    fitted = fit_chain(train, 2, 4, beta=0.5)  # smoothed: a held-out transition unseen in training costs a finite loss
    in_sample = select_order(train, 4, 2).entropy_rate(2)
    assert in_sample < truth.entropy_rate() < fitted.oracle_loss(held_out) < truth.entropy_rate() + 0.02


def test_sequences_of_different_lengths_count_as_their_padded_batch_would_without_the_padding():
    """A list of records of any lengths (FASTA, documents): the same fit and selection as each record alone, counts
    summed; a record no longer than max_order adds no target."""
    generator = torch.Generator().manual_seed(10)
    records = [torch.randint(0, 4, (n,), generator=generator) for n in (300, 41, 3, 1000)]
    chain = fit_chain(records, 2, 4, beta=0.5)
    counts = {}
    for record in records:
        for context, row in _naive_counts(record[None], 2, 4, 2).items():
            counts[context] = [a + b for a, b in zip(counts.get(context, [0] * 4), row, strict=True)]
    for (older, newer), row in counts.items():
        expected = [(n + 0.5) / (sum(row) + 2.0) for n in row]
        assert chain.transition[older * 4 + newer].tolist() == pytest.approx(expected, abs=1e-12)
    selection = select_order(records, 4, 3)
    assert selection.targets == (300 - 3) + (41 - 3) + 0 + (1000 - 3)
    alone = [select_order(record, 4, 3).log_likelihood for record in records if len(record) > 3]
    assert selection.log_likelihood[0] <= sum(ll[0] for ll in alone) + 1e-9  # one pooled fit, not one per record
    with pytest.raises(ValueError, match=r"x\[1\] must be one sequence"):
        select_order([records[0], records[0][None]], 4, 2)
    with pytest.raises(ValueError, match="longest sequence has 3 symbols"):
        select_order([records[2]], 4, 3)
