"""Tests for markov/icl.py: the two labelled modes, Dirichlet rows, sampling frequencies, the oracle loss."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from markovformer.markov import RandomChainSampler, dirichlet_kernels, icl_oracle_loss, sample_from_kernels


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_fixed_mode_reuses_one_kernel():
    sampler = RandomChainSampler(2, 3, 0.5, per_sequence=False, generator=seeded(0))
    assert sampler.mode == "fixed"
    x, kernels = sampler.sample(5, 20, generator=seeded(1))
    assert x.shape == (5, 20) and x.dtype == torch.long
    assert kernels.shape == (5, 9, 3) and kernels.dtype == torch.float64
    for b in range(5):
        torch.testing.assert_close(kernels[b], sampler.chain.transition)


def test_per_sequence_mode_redraws_kernels():
    sampler = RandomChainSampler(1, 2, per_sequence=True)
    assert sampler.mode == "per_sequence" and sampler.chain is None
    _, kernels = sampler.sample(4, 10, generator=seeded(2))
    assert not torch.allclose(kernels[0], kernels[1])
    _, again = sampler.sample(4, 10, generator=seeded(2))
    torch.testing.assert_close(kernels, again)


def test_dirichlet_kernel_moments():
    # Dirichlet(β) over S symbols: mean 1/S, variance (S-1) / (S^2 (Sβ + 1))
    beta, symbols = 0.5, 3
    kernels = dirichlet_kernels(20000, 1, symbols, beta, seeded(3))
    rows = kernels.reshape(-1, symbols)
    torch.testing.assert_close(rows.sum(-1), torch.ones(rows.shape[0], dtype=torch.float64))
    assert rows.mean(0).sub(1 / symbols).abs().max() < 0.005
    variance = (symbols - 1) / (symbols**2 * (symbols * beta + 1))
    assert rows.var(0).sub(variance).abs().max() < 0.005


def test_sampled_transition_frequencies_match_each_kernel():
    kernels = torch.tensor([[[0.9, 0.1], [0.2, 0.8]], [[0.3, 0.7], [0.6, 0.4]]], dtype=torch.float64)
    x = sample_from_kernels(20000, kernels, seeded(4))
    for b in range(2):
        for context in range(2):
            followers = x[b, 1:][x[b, :-1] == context]
            frequency = followers.double().mean().item()
            assert frequency == pytest.approx(kernels[b, context, 1].item(), abs=0.02)


@pytest.mark.parametrize("order", [2, 3])
def test_sampling_follows_a_deterministic_kernel_from_the_first_step(order):
    """next = (1 + sum_i (i + 1) x_i) mod 3 over the context x_1..x_k (oldest first): the first context read with
    its symbols reversed (newest most significant) picks the wrong row."""
    kernel, rule = torch.zeros(3**order, 3, dtype=torch.float64), {}
    for row, context in enumerate(itertools.product(range(3), repeat=order)):  # oldest symbol most significant
        rule[context] = (1 + sum((i + 1) * symbol for i, symbol in enumerate(context))) % 3
        kernel[row, rule[context]] = 1.0
    x = sample_from_kernels(12, kernel.expand(64, -1, -1).contiguous(), seeded(1))
    for row in x.tolist():
        assert all(row[t] == rule[tuple(row[t - order : t])] for t in range(order, len(row))), row


def test_oracle_loss_by_hand():
    kernels = torch.tensor([[[0.8, 0.2], [0.4, 0.6]]], dtype=torch.float64)
    x = torch.tensor([[0, 1, 1, 0]])
    expected = -(math.log(0.2) + math.log(0.6) + math.log(0.4)) / 3
    assert icl_oracle_loss(x, kernels) == pytest.approx(expected, abs=1e-12)


def test_fixed_mode_oracle_loss_matches_chain_oracle_loss():
    sampler = RandomChainSampler(2, 2, per_sequence=False, generator=seeded(5))
    x, kernels = sampler.sample(8, 100, generator=seeded(6))
    assert icl_oracle_loss(x, kernels) == pytest.approx(sampler.chain.oracle_loss(x), abs=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"order": 0}, "order"),
        ({"num_symbols": 1}, "num_symbols"),
        ({"beta": -1.0}, "beta"),
        ({"per_sequence": 1}, "per_sequence"),
    ],
)
def test_bad_inputs_raise_value_error_naming_argument(kwargs, name):
    arguments = {"order": 1, "num_symbols": 2, "beta": 1.0, "per_sequence": True} | kwargs
    with pytest.raises(ValueError, match=name):
        RandomChainSampler(**arguments)


@pytest.mark.parametrize(("batch", "length", "name"), [(0, 5, "batch"), (2.0, 5, "batch"), (True, 5, "batch"),
                                                       (2, -1, "length"), (2, 5.0, "length")])  # fmt: skip
def test_sample_refuses_a_bad_batch_or_length_naming_it(batch, length, name):
    with pytest.raises(ValueError, match=f"^{name} must be an integer"):
        RandomChainSampler(1, 2, per_sequence=True).sample(batch, length)


def _binary_kernels(*rows: list[float]) -> torch.Tensor:
    return torch.tensor([list(rows)], dtype=torch.float64)


def _two_binary_kernels() -> torch.Tensor:
    return torch.cat([_binary_kernels([0.8, 0.2], [0.4, 0.6]), _binary_kernels([0.1, 0.9], [0.5, 0.5])])


@pytest.mark.parametrize(
    ("build", "name"),
    [
        # symbols outside the alphabet were indexed (2 read another row, -1 wrapped round): 0.693 and 0.357 returned
        (lambda: icl_oracle_loss(torch.tensor([[0, 2, 1]]), _binary_kernels([0.5, 0.5], [0.2, 0.8])), "x"),
        (lambda: icl_oracle_loss(torch.tensor([[0, -1, 1]]), _binary_kernels([0.5, 0.5], [0.2, 0.8])), "x"),
        (lambda: icl_oracle_loss(torch.tensor([[0.0, 1.7, 1.0]]), _binary_kernels([0.5, 0.5], [0.2, 0.8])), "x"),
        # rows summing to 3 gave a negative loss; a sampler renormalised them without a word
        (lambda: icl_oracle_loss(torch.tensor([[0, 1, 1]]), _binary_kernels([1.5, 1.5], [1.0, 2.0])), "kernels"),
        (lambda: sample_from_kernels(5, _binary_kernels([1.5, 1.5], [1.0, 2.0])), "kernels"),
        (lambda: sample_from_kernels(5, _binary_kernels([-0.5, 1.5], [0.2, 0.8])), "kernels"),
        (lambda: sample_from_kernels(5, _binary_kernels([math.nan, 1.0], [0.2, 0.8])), "kernels"),
        # one row per kernel is S**0 of them: order 0, no chain of this testbed (sampling was i.i.d.)
        (lambda: sample_from_kernels(5, _binary_kernels([0.3, 0.7])), "kernels"),
        (lambda: icl_oracle_loss(torch.tensor([[0, 1, 1]]), _binary_kernels([0.3, 0.7])), "kernels"),
        # kernels[b] scores x[b]: one row of x for two kernels never read the second, three raised an IndexError
        (lambda: icl_oracle_loss(torch.tensor([[0, 1, 1, 0]]), _two_binary_kernels()), "x"),
        (lambda: icl_oracle_loss(torch.tensor([[0, 1, 1, 0]] * 3), _two_binary_kernels()), "x"),
        # kernels[b] scores x[b] from its k-th symbol on: T = k leaves nothing to score
        (lambda: icl_oracle_loss(torch.tensor([[0]]), _binary_kernels([0.5, 0.5], [0.2, 0.8])), "x must have length"),
        (lambda: icl_oracle_loss(torch.tensor([[0, 1]]), torch.tensor([[0.5, 0.5]])), "kernels must have shape"),
        (lambda: sample_from_kernels(5, torch.full((1, 2, 1), 1.0)), "kernels must have shape"),
        # a nested list raised AttributeError ('list' object has no attribute 'shape') from the message itself
        (lambda: sample_from_kernels(5, [[[0.5, 0.5], [0.5, 0.5]]]), "kernels must be a torch.Tensor"),
        (lambda: icl_oracle_loss(torch.tensor([[0, 1, 1]]), [[[0.5, 0.5], [0.2, 0.8]]]), "kernels must be a torch"),
        # a negative length gave (B, k - 1) symbols
        (lambda: sample_from_kernels(-1, _binary_kernels([0.5, 0.5], [0.2, 0.8])), "x_length"),
        # beta <= 0 or nan gave all-NaN kernels; order 0 and one symbol gave kernels of no chain
        (lambda: dirichlet_kernels(2, 1, 2, 0.0), "beta"),
        (lambda: dirichlet_kernels(2, 1, 2, -1.0), "beta"),
        (lambda: dirichlet_kernels(2, 1, 2, math.nan), "beta"),
        (lambda: dirichlet_kernels(2, 0, 2, 1.0), "order"),
        (lambda: dirichlet_kernels(2, 1, 1, 1.0), "num_symbols"),
        (lambda: dirichlet_kernels(0, 1, 2, 1.0), "batch"),
    ],
)
def test_kernel_functions_refuse_bad_input_naming_it(build, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        build()


@pytest.mark.parametrize("per_sequence", [False, True])
def test_without_a_generator_draws_are_seeded_with_0_not_taken_from_the_global_rng(per_sequence):
    """SPEC 1: randomness goes through an explicit generator or seed; None means a generator seeded with 0."""

    def draws(global_seed: int) -> list[torch.Tensor]:
        torch.manual_seed(global_seed)
        sequences, kernels = RandomChainSampler(2, 2, beta=1.0, per_sequence=per_sequence).sample(3, 16)
        return [sequences, kernels, dirichlet_kernels(3, 2, 2, 1.0), sample_from_kernels(16, kernels)]

    for first, again in zip(draws(1), draws(2), strict=True):
        assert torch.equal(first, again)
