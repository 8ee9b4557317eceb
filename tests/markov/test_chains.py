"""Tests for markov/chains.py: closed forms, stationarity invariants, Monte-Carlo agreement."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from markovformer.markov import MarkovChain, add_beta_loss, lagged_chain, random_chain, switching_chain


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def naive_context_matrix(chain: MarkovChain) -> torch.Tensor:
    """Dense (S**k, S**k) context-transition matrix built symbol tuple by symbol tuple."""
    s, k = chain.num_symbols, chain.order
    index = {symbols: i for i, symbols in enumerate(itertools.product(range(s), repeat=k))}
    matrix = torch.zeros(s**k, s**k, dtype=torch.float64)
    for symbols, row in index.items():
        for j in range(s):
            matrix[row, index[symbols[1:] + (j,)]] += chain.transition[row, j]
    return matrix


def binary_entropy(p: float) -> float:
    return -sum(v * math.log(v) for v in (p, 1.0 - p) if v > 0)


# ---- closed forms ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "q", "entropy_rate", "marginal_entropy"),
    [
        (0.2, 0.3, 0.5446, 0.6730),
        (0.5, 0.8, 0.6190, 0.6663),
        (0.7, 0.9, 0.4858, 0.6853),
        (1.0, 0.8, 0.2780, 0.6870),
    ],
)
def test_switching_chain_matches_spec_reference(p, q, entropy_rate, marginal_entropy):
    chain = switching_chain(p, q)
    pi = chain.symbol_stationary()
    torch.testing.assert_close(pi, torch.tensor([q, p], dtype=torch.float64) / (p + q), rtol=0, atol=1e-12)
    assert chain.entropy_rate() == pytest.approx(entropy_rate, abs=1e-4)
    assert chain.marginal_entropy() == pytest.approx(marginal_entropy, abs=1e-4)
    closed_form = (q * binary_entropy(p) + p * binary_entropy(q)) / (p + q)
    assert chain.entropy_rate() == pytest.approx(closed_form, abs=1e-12)


def test_context_index_oldest_symbol_most_significant():
    chain = random_chain(3, 3, generator=seeded(0))
    x = torch.tensor([[2, 1, 0], [0, 0, 1], [1, 2, 2]])
    torch.testing.assert_close(chain.context_index(x), torch.tensor([21, 1, 17]))
    every = torch.arange(27)
    torch.testing.assert_close(chain.context_index(chain.context_symbols(every)), every)


def test_nested_transition_shape_is_flattened_in_context_order():
    nested = torch.rand(3, 3, 3, generator=seeded(1))
    nested = nested / nested.sum(-1, keepdim=True)
    chain = MarkovChain(2, 3, nested)
    for a, b in itertools.product(range(3), repeat=2):
        torch.testing.assert_close(chain.transition[a * 3 + b], nested[a, b].double())


def test_rows_are_renormalised_exactly():
    table = torch.tensor([[0.3, 0.7 + 5e-7], [0.5, 0.5]])
    chain = MarkovChain(1, 2, table)
    assert chain.transition.dtype == torch.float64
    torch.testing.assert_close(chain.transition.sum(-1), torch.ones(2, dtype=torch.float64), rtol=0, atol=1e-15)


def test_oracle_loss_by_hand():
    chain = switching_chain(0.2, 0.3)
    x = torch.tensor([[0, 1, 1, 0]])
    expected = -(math.log(0.2) + math.log(0.7) + math.log(0.3)) / 3
    assert chain.oracle_loss(x) == pytest.approx(expected, abs=1e-12)
    log_prob = chain.log_prob_next(x)
    assert log_prob.shape == (1, 3, 2)
    torch.testing.assert_close(log_prob.exp().sum(-1), torch.ones(1, 3, dtype=torch.float64))


def test_entropy_rate_equals_explicit_sum():
    chain = random_chain(2, 3, beta=0.5, generator=seeded(3))
    pi = chain.stationary()
    expected = 0.0
    for c in range(9):
        expected += pi[c].item() * -sum(v * math.log(v) for v in chain.transition[c].tolist() if v > 0)
    assert chain.entropy_rate() == pytest.approx(expected, abs=1e-12)


# ---- stationary distribution ----------------------------------------------------------------------


@pytest.mark.parametrize("order", [1, 2, 3])
def test_stationary_is_fixed_point_of_context_chain(order):
    chain = random_chain(order, 3, beta=0.7, generator=seeded(order))
    pi = chain.stationary()
    assert pi.shape == (3**order,)
    assert pi.sum().item() == pytest.approx(1.0, abs=1e-12)
    assert (pi >= 0).all()
    torch.testing.assert_close(pi @ naive_context_matrix(chain), pi, rtol=0, atol=1e-12)
    # stationarity makes the oldest and newest symbol marginals equal
    oldest = pi.reshape(3, -1).sum(1)
    torch.testing.assert_close(chain.symbol_stationary(), oldest, rtol=0, atol=1e-12)


def test_power_iteration_path_agrees_with_dense_and_fixed_point():
    chain = random_chain(9, 2, generator=seeded(5))  # 512 contexts: "auto" takes the power path
    pi = chain.stationary()
    torch.testing.assert_close(pi, chain.stationary(method="dense"), rtol=0, atol=1e-10)
    torch.testing.assert_close(pi @ naive_context_matrix(chain), pi, rtol=0, atol=1e-11)


def sticky_chain(order: int, p: float, q: float) -> MarkovChain:
    """Binary order-k chain that repeats its last symbol, leaving 0 with probability p and 1 with probability q:
    its symbol marginal is the switching chain's (q, p)/(p+q), and it mixes as slowly as p and q are small."""
    newest = torch.arange(2**order) % 2
    leave_0, leave_1 = torch.tensor([1 - p, p], dtype=torch.float64), torch.tensor([q, 1 - q], dtype=torch.float64)
    return MarkovChain(order, 2, torch.where(newest[:, None] == 0, leave_0, leave_1))


@pytest.mark.parametrize(("p", "q"), [(1e-4, 2e-4), (2e-3, 1e-3)])
def test_power_iteration_of_slowly_mixing_chain_meets_its_tolerance(p, q):
    # the step size alone stops 1/gap too early: at (1e-4, 2e-4) it left an L1 error of 6.7e-9
    pi = switching_chain(p, q).stationary(method="power")
    expected = torch.tensor([q, p], dtype=torch.float64) / (p + q)
    assert (pi - expected).abs().sum().item() < 2e-10


def test_power_iteration_reads_its_step_size_on_the_host_only_every_few_steps(monkeypatch):
    # each float() of a step waits for the device (on CPU, ~10 us of a 30 us step on a 2-context chain): read every
    # step it made the (1e-4, 2e-4) chain above, 160k steps, take 4.5 s
    steps, reads = [], []
    lazy_step, to_float = MarkovChain._lazy_step, torch.Tensor.__float__
    monkeypatch.setattr(MarkovChain, "_lazy_step", lambda chain, pi: steps.append(1) or lazy_step(chain, pi))
    monkeypatch.setattr(torch.Tensor, "__float__", lambda tensor: reads.append(1) or to_float(tensor))
    p, q = 2e-2, 1e-2
    pi = switching_chain(p, q).stationary(method="power")
    monkeypatch.undo()
    assert len(steps) > 500  # ~ 25 / gap: the rule still runs to the rounding floor
    assert len(reads) <= len(steps) / 32 + 2  # + 1 for the balance check
    assert (pi - torch.tensor([q, p], dtype=torch.float64) / (p + q)).abs().sum().item() < 1e-12


@pytest.mark.parametrize("rate", [1e-6, 1e-12, 1e-14, 3e-16])
def test_power_iteration_refuses_a_chain_it_cannot_converge_and_auto_solves_it_densely(rate, monkeypatch):
    # 512 contexts, so "auto" takes the power path. At rate 1e-12 one step from uniform moves 1e-12 in L1 and the
    # old step-size rule returned the uniform marginal (1/2, 1/2) instead of (2/3, 1/3). At 1e-14 and below a step
    # moves less than float64 rounding, and the power path returned (1/2, 1/2) with no error at all.
    monkeypatch.setattr("markovformer.markov.chains._POWER_MAX_ITERATIONS", 5_000)  # keeps the test fast
    chain = sticky_chain(9, rate, 2 * rate)
    with pytest.raises(RuntimeError, match="mixes too slowly"):
        chain.stationary(method="power")
    expected = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    for method in ("auto", "dense"):  # "auto" falls back to the dense solve
        marginal = chain.stationary(method=method).reshape(-1, 2).sum(0)
        torch.testing.assert_close(marginal, expected, rtol=0, atol=1e-12)


def masked_slow_mode_chain(rate: float) -> MarkovChain:
    """3 states: 0 and 1 mix within a step (stationary 1:3 between them), 1 leaves for 2 at ``rate`` and 2 returns
    at 3 * rate. Balance at 2 (pi_1 rate = pi_2 3 rate) and within the pair give pi = (0.2, 0.6, 0.2) for any rate,
    but from uniform the pair settles in a few steps (a fast mode) while the mass of 2 moves ~rate per step."""
    transition = torch.tensor([[0.25, 0.75, 0.0], [0.25, 0.75 - rate, rate], [0.0, 3 * rate, 1 - 3 * rate]],
                              dtype=torch.float64)  # fmt: skip
    return MarkovChain(1, 3, transition)


@pytest.mark.parametrize("rate", [1e-13, 1e-14, 1e-15, 3e-16])
def test_power_iteration_is_not_fooled_by_a_slow_mode_hidden_under_a_fast_one(rate, monkeypatch):
    # the fast mode's geometric tail said "converged" at step ~1e-12, before the slow mode showed: the power path
    # returned (1/6, 1/2, 1/3) (the pair settled, 2 still at its uniform 1/3), 0.267 off in L1
    monkeypatch.setattr("markovformer.markov.chains._POWER_MAX_ITERATIONS", 5_000)  # keeps the test fast
    chain = masked_slow_mode_chain(rate)
    with pytest.raises(RuntimeError, match="mixes too slowly"):
        chain.stationary(method="power")
    expected = torch.tensor([0.2, 0.6, 0.2], dtype=torch.float64)
    torch.testing.assert_close(chain.stationary(method="dense"), expected, rtol=0, atol=1e-8)


@pytest.mark.parametrize(("p", "q"), [(1e-6, 1e-2), (1e-9, 0.5), (1e-12, 0.5)])
def test_power_iteration_accepts_a_converged_chain_with_a_rarely_left_context(p, q):
    # state 0 holds nearly all the mass and is left at p; the rest (1) returns at q. The balance check divided 0's
    # imbalance by p alone and raised on a result exact to 4e-15 (measured 1.8e-9, 1.1e-6, 1.1e-3 from balance)
    pi = switching_chain(p, q).stationary(method="power")
    expected = torch.tensor([q, p], dtype=torch.float64) / (p + q)
    assert (pi - expected).abs().sum().item() < 1e-12


def test_auto_stationary_of_a_large_chain_with_a_sticky_context_is_not_refused():
    # 2048 contexts (above the dense fallback): the context 0...0 is left at 1e-9, every other one emits 0 with
    # probability 0.9, so the mass returns to 0...0 fast. "auto" raised "stalled 1.7e-06 (L1) from balance" on a
    # power result within 1e-10 of the exact one
    transition = torch.tensor([0.9, 0.1], dtype=torch.float64).repeat(2048, 1)
    transition[0] = torch.tensor([1 - 1e-9, 1e-9], dtype=torch.float64)
    chain = MarkovChain(11, 2, transition)
    exact = torch.linalg.solve(naive_context_matrix(chain).T - torch.eye(2048, dtype=torch.float64) + 1.0,
                               torch.ones(2048, dtype=torch.float64))  # (P^T - I + 1 1^T) pi = 1 with sum(pi) = 1
    assert (chain.stationary() - exact).abs().sum().item() < 1e-10


@pytest.mark.parametrize("rate", [3e-15, 1e-15, 1e-17, 1e-19, 1e-25, 1e-35])
def test_dense_stationary_of_a_chain_that_barely_moves(rate):
    # lazy steps change the matrix by < 1e-14 from the start: the old stopping rule took the first squaring
    # (still near the identity) for the limit and returned uniform (1/2, 1/2)
    # below float64 eps (1 - 1e-17 is 1.0) renormalising the rows of each squaring shrank the mass that leaves into
    # rounding: 1e-17, 1e-19 and 1e-25 came out (0.5, 0.5)
    pi = switching_chain(rate, 3 * rate).stationary(method="dense")
    torch.testing.assert_close(pi, torch.tensor([0.75, 0.25], dtype=torch.float64), rtol=0, atol=1e-12)


@pytest.mark.parametrize("method", ["dense", "power"])
def test_the_stationary_of_a_reducible_chain_is_the_limit_reached_from_uniform(method):
    """States 0 and 2 hold their mass; state 1 sends half of its third to each side: (1/3 + 1/6, 0, 1/3 + 1/6)
    from uniform, and a chain that never moves (the identity) keeps uniform. A solve from another start (one
    context's row of the limit matrix) gives (1, 0, 0) for both."""
    leaking = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.0, 0.5], [0.0, 0.0, 1.0]], dtype=torch.float64)
    for transition, limit in [(leaking, [0.5, 0.0, 0.5]), (torch.eye(3, dtype=torch.float64), [1 / 3] * 3)]:
        pi = MarkovChain(1, 3, transition).stationary(method=method)
        torch.testing.assert_close(pi, torch.tensor(limit, dtype=torch.float64), rtol=0, atol=1e-12)


def test_dense_stationary_refuses_a_chain_too_slow_for_its_squarings():
    # 128 squarings reach step 2**128 ~ 3e38: a chain moving at 1e-45 has not mixed; its matrix was returned as if
    with pytest.raises(RuntimeError, match="mixes too slowly"):
        switching_chain(1e-45, 3e-45).stationary(method="dense")


def test_power_iteration_error_is_within_its_tolerance():
    chain = random_chain(9, 2, generator=seeded(5))
    exact = torch.linalg.solve(naive_context_matrix(chain).T - torch.eye(512, dtype=torch.float64) + 1.0,
                               torch.ones(512, dtype=torch.float64))  # (P^T - I + 1 1^T) pi = 1 with sum(pi) = 1
    assert (chain.stationary(method="power") - exact).abs().sum().item() < 1.5e-12


def test_power_iteration_is_not_fooled_by_a_fast_mode_dying_in_one_step():
    """A period-2 chain (its lazy chain has eigenvalue 0) of two clusters joined by rare links: the first step
    removes the period's imbalance (1/3 in L1), the second moves 1e-7 (the slow mode, 2e-4 from its limit). One step
    ratio (3e-7) estimated the distance left at 3e-14 and stopped there, 2e-4 off in L1."""
    d, g = 1e-3, 1e-3 * (1 + 4e-4)
    transition = torch.zeros(6, 6, dtype=torch.float64)  # 0 -> {1, 2} or rarely {4, 5}; 3 -> {4, 5} or {1, 2}
    transition[0, [1, 2]], transition[0, [4, 5]] = (1 - d) / 2, d / 2
    transition[3, [4, 5]], transition[3, [1, 2]] = (1 - g) / 2, g / 2
    transition[[1, 2], 0] = transition[[4, 5], 3] = 1.0
    exact = torch.linalg.solve(transition.T - torch.eye(6, dtype=torch.float64) + 1.0,
                               torch.ones(6, dtype=torch.float64))  # fmt: skip
    pi = MarkovChain(1, 6, transition).stationary(method="power")
    assert (pi - exact).abs().sum().item() < 1e-10


@pytest.mark.parametrize("method", ["dense", "power"])
def test_periodic_chain_stationary(method):
    # period 2: plain power iteration from uniform oscillates between (1/6, 2/3, 1/6) and uniform
    chain = MarkovChain(1, 3, torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]))
    expected = torch.tensor([0.25, 0.5, 0.25], dtype=torch.float64)
    torch.testing.assert_close(chain.stationary(method=method), expected, rtol=0, atol=1e-10)


def test_stationary_scales_to_65k_contexts():
    chain = random_chain(8, 4, generator=seeded(6))  # 65536 contexts, never a dense matrix
    pi = chain.stationary()
    symbols = chain.context_symbols(torch.arange(chain.num_contexts))
    successor = torch.zeros_like(pi)
    for j in range(4):
        shifted = torch.cat([symbols[:, 1:], torch.full((chain.num_contexts, 1), j)], dim=1)
        successor.index_add_(0, chain.context_index(shifted), pi * chain.transition[:, j])
    torch.testing.assert_close(successor, pi, rtol=0, atol=1e-12)
    assert pi.sum().item() == pytest.approx(1.0, abs=1e-12)


# ---- sampling --------------------------------------------------------------------------------------


def test_oracle_loss_of_long_samples_matches_entropy_rate():
    chain = random_chain(2, 3, generator=seeded(7))
    x = chain.sample(64, 4000, generator=seeded(8))
    assert x.shape == (64, 4000) and x.dtype == torch.long
    # ~256k predictions: the Monte-Carlo standard error is about 0.002 nats
    assert chain.oracle_loss(x) == pytest.approx(chain.entropy_rate(), abs=0.01)


def test_lagged_chain_oracle_loss_matches_entropy_rate():
    chain = lagged_chain(3, (1, 3), generator=seeded(9))
    x = chain.sample(64, 4000, generator=seeded(10))
    assert chain.oracle_loss(x) == pytest.approx(chain.entropy_rate(), abs=0.01)
    assert chain.entropy_rate() < chain.marginal_entropy() - 0.05


def chi_square(counts: torch.Tensor, probabilities: torch.Tensor) -> float:
    expected = counts.sum(-1, keepdim=True) * probabilities
    return float(((counts - expected) ** 2 / expected).sum())


def test_sample_transition_frequencies_match_kernel():
    chain = random_chain(2, 3, beta=2.0, generator=seeded(11))
    x = chain.sample(32, 2000, generator=seeded(12))
    contexts = chain.context_index(x.unfold(1, 2, 1)[:, :-1]).reshape(-1)
    flat = contexts * 3 + x[:, 2:].reshape(-1)
    counts = torch.bincount(flat, minlength=27).reshape(9, 3).double()
    dof = 9 * 2
    # a 6-sigma chi-square band; a wrong kernel (another random chain) lands far outside it
    assert chi_square(counts, chain.transition) < dof + 6 * math.sqrt(2 * dof)
    other = random_chain(2, 3, beta=2.0, generator=seeded(13))
    assert chi_square(counts, other.transition) > 10 * dof


@pytest.mark.parametrize("initial", ["stationary", "uniform"])
def test_initial_context_distribution(initial):
    chain = random_chain(2, 2, beta=0.5, generator=seeded(14))
    x = chain.sample(40000, 2, generator=seeded(15), initial=initial)
    frequencies = torch.bincount(chain.context_index(x), minlength=4).double() / 40000
    target = chain.stationary() if initial == "stationary" else torch.full((4,), 0.25, dtype=torch.float64)
    torch.testing.assert_close(frequencies, target, rtol=0, atol=0.012)


def test_short_length_returns_start_of_initial_context():
    chain = random_chain(3, 2, generator=seeded(16))
    full = chain.sample(8, 10, generator=seeded(17))
    assert torch.equal(chain.sample(8, 2, generator=seeded(17)), full[:, :2])
    assert chain.sample(8, 0, generator=seeded(17)).shape == (8, 0)


def test_sampling_is_reproducible_per_seed():
    chain = random_chain(2, 4, generator=seeded(18))
    a = chain.sample(4, 300, generator=seeded(19))
    assert torch.equal(a, chain.sample(4, 300, generator=seeded(19)))
    assert not torch.equal(a, chain.sample(4, 300, generator=seeded(20)))


def deterministic_kernel(order: int, s: int) -> tuple[torch.Tensor, dict]:
    """next = (1 + sum_i (i + 1) x_i) mod s over the context x_1..x_k (oldest first): a reversed context differs."""
    kernel, rule = torch.zeros(s**order, s, dtype=torch.float64), {}
    for row, context in enumerate(itertools.product(range(s), repeat=order)):  # oldest symbol most significant
        rule[context] = (1 + sum((i + 1) * symbol for i, symbol in enumerate(context))) % s
        kernel[row, rule[context]] = 1.0
    return kernel, rule


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("initial", ["uniform", "stationary"])
def test_sample_follows_a_deterministic_kernel_from_the_first_step(order, initial):
    kernel, rule = deterministic_kernel(order, 3)
    x = MarkovChain(order, 3, kernel).sample(64, 12, generator=seeded(2), initial=initial)
    for row in x.tolist():
        assert all(row[t] == rule[tuple(row[t - order : t])] for t in range(order, len(row))), row


def test_zero_probability_transitions_never_sampled():
    chain = switching_chain(1.0, 1.0)  # deterministic alternation
    x = chain.sample(16, 200, generator=seeded(21))
    assert (x[:, 1:] != x[:, :-1]).all()


# ---- constructors ----------------------------------------------------------------------------------


def test_random_chain_dirichlet_moments_and_determinism():
    for beta in (0.1, 5.0):
        rows = random_chain(10, 2, beta=beta, generator=seeded(22)).transition[:, 0]
        # Dirichlet(beta, beta) marginal: mean 1/2, variance (1/4) / (2 beta + 1); 1024 rows
        assert rows.mean().item() == pytest.approx(0.5, abs=0.04)
        assert rows.var().item() == pytest.approx(0.25 / (2 * beta + 1), rel=0.15)
    first = random_chain(2, 3, generator=seeded(23)).transition
    assert torch.equal(first, random_chain(2, 3, generator=seeded(23)).transition)
    assert not torch.equal(first, random_chain(2, 3, generator=seeded(24)).transition)


def test_random_chains_of_many_seeds_are_all_distinct():
    """Each seed's chain draws from its own stream: a stream seeded from a few values repeats chains."""
    kernels = {tuple(random_chain(1, 2, generator=seeded(seed)).transition.flatten().tolist()) for seed in range(64)}
    assert len(kernels) == 64


def test_random_chain_tiny_beta_is_well_defined():
    chain = random_chain(2, 4, beta=1e-3, generator=seeded(25))
    assert torch.isfinite(chain.transition).all()
    torch.testing.assert_close(chain.transition.sum(-1), torch.ones(16, dtype=torch.float64))
    assert chain.transition.max(-1).values.min() > 0.9  # nearly one-hot rows


@pytest.mark.parametrize("lags", [(1, 3), (2, 3), (1, 2), (1, 3, 4), (3,)])
def test_lagged_chain_depends_on_exactly_its_lags(lags):
    """Lag sets other than (1, 3) tell lag l's axis (order - l) from axis l - 1 apart."""
    chain = lagged_chain(3, lags, strength=2.0, generator=seeded(26))
    assert chain.order == max(lags) and chain.true_lags == lags
    table = chain.transition.reshape((3,) * (chain.order + 1))  # (lag order, ..., lag 1, next)
    for lag in range(1, chain.order + 1):
        slices = [table.select(chain.order - lag, symbol) for symbol in range(3)]
        spread = max((other - slices[0]).abs().max().item() for other in slices[1:])
        assert spread > 1e-3 if lag in lags else spread < 1e-15, lag


def test_ordinary_chains_list_every_lag():
    assert random_chain(3, 2, generator=seeded(27)).true_lags == (1, 2, 3)
    assert switching_chain(0.2, 0.3).true_lags == (1,)


# ---- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda: MarkovChain(0, 2, torch.eye(2)), "order"),
        (lambda: MarkovChain(1, 1, torch.ones(1, 1)), "num_symbols"),
        (lambda: MarkovChain(2, 2, torch.eye(2)), "transition"),
        (lambda: MarkovChain(1, 2, torch.tensor([[1.2, -0.2], [0.5, 0.5]])), "transition"),
        (lambda: MarkovChain(1, 2, torch.tensor([[0.6, 0.6], [0.5, 0.5]])), "transition"),
        (lambda: MarkovChain(1, 2, torch.tensor([[float("nan"), 1.0], [0.5, 0.5]])), "transition"),
        (lambda: MarkovChain(2, 2, torch.full((4, 2), 0.5), true_lags=(3,)), "true_lags"),
        (lambda: MarkovChain(1, 2, [[0.5, 0.5], [0.5, 0.5]]), "transition must be a torch.Tensor"),
        (lambda: MarkovChain(1, 2, torch.tensor([[True, False], [False, True]])), "transition must be a real-valued"),
        (lambda: MarkovChain(1, 2, torch.full((2, 2), 0.5 + 0j)), "transition must be a real-valued"),
        (lambda: switching_chain(1.5, 0.3), "p"),
        (lambda: switching_chain(0.2, -0.1), "q"),
        (lambda: switching_chain(0.0, 0.0), "p \\+ q"),
        (lambda: random_chain(2, 2, beta=0.0), "beta"),
        (lambda: random_chain(0, 2), "order"),
        (lambda: lagged_chain(3, ()), "lags"),
        (lambda: lagged_chain(3, (0, 2)), "lags"),
        (lambda: lagged_chain(3, (2, 2)), "lags"),
        (lambda: lagged_chain(1, (1,)), "num_symbols"),
        (lambda: lagged_chain(3, (1, 2), strength=math.nan), "strength"),
        (lambda: lagged_chain(3, (1, 2), strength="2"), "strength"),
        (lambda: switching_chain(0.2, 0.3).sample(0, 5), "batch"),
        (lambda: switching_chain(0.2, 0.3).sample(2, -1), "length"),
        (lambda: switching_chain(0.2, 0.3).sample(2, 5, initial="zeros"), "initial"),
        (lambda: switching_chain(0.2, 0.3).stationary(method="eig"), "method"),
        (lambda: switching_chain(0.2, 0.3).oracle_loss(torch.tensor([[0, 2, 1]])), "x"),
        (lambda: switching_chain(0.2, 0.3).oracle_loss(torch.tensor([[0.0, 1.0]])), "x"),
        (lambda: switching_chain(0.2, 0.3).oracle_loss(torch.tensor([[1]])), "x"),
        (lambda: random_chain(2, 2).context_index(torch.tensor([0, 1, 1])), "x"),
        (lambda: switching_chain(0.2, 0.3).log_prob_next(torch.tensor([0, 1, 1])), "x must have shape \\(B, T\\)"),
    ],
)
def test_bad_inputs_raise_value_error_naming_argument(build, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        build()


def test_expected_loss_weights_each_prediction_by_the_true_kernel():
    chain = random_chain(2, 3, beta=1.0, generator=torch.Generator().manual_seed(5))
    x = chain.sample(4, 30, generator=torch.Generator().manual_seed(6))
    log_probs = torch.log_softmax(torch.randn(4, 30, 3, generator=torch.Generator().manual_seed(7)), dim=-1)
    brute = []
    for b in range(4):
        for t in range(chain.order - 1, 29):  # row t predicts x_{t+1} from the context ending at x_t
            context = int(x[b, t - 1]) * 3 + int(x[b, t])
            brute.append(-(chain.transition[context] * log_probs[b, t].double()).sum())
    assert chain.expected_loss(x, log_probs) == pytest.approx(float(torch.stack(brute).mean()), abs=1e-12)
    # with the true predictions it is the mean conditional entropy, which averages to the entropy rate
    long = chain.sample(256, 400, generator=torch.Generator().manual_seed(8))
    truth = torch.zeros(256, 400, 3, dtype=torch.float64)
    truth[:, 1:-1] = chain.log_prob_next(long)
    assert chain.expected_loss(long, truth) == pytest.approx(chain.entropy_rate(), abs=3e-3)
    with pytest.raises(ValueError, match="log_probs must have shape"):
        chain.expected_loss(x, log_probs[:, :-1])


def test_expected_loss_ignores_symbols_the_kernel_never_emits():
    chain = switching_chain(1.0, 0.8)  # from 0 the chain always moves to 1
    x = chain.sample(8, 50, generator=torch.Generator().manual_seed(9))
    truth = torch.zeros(8, 50, 2, dtype=torch.float64)
    truth[:, :-1] = chain.log_prob_next(x)  # holds log 0 = -inf
    value = chain.expected_loss(x, truth)
    assert math.isfinite(value) and value == pytest.approx(chain.entropy_rate(), abs=0.05)


def test_without_a_generator_draws_are_seeded_with_0_not_taken_from_the_global_rng():
    """SPEC 1: randomness goes through an explicit generator or seed; None means a generator seeded with 0."""

    def draws(global_seed: int) -> list[torch.Tensor]:
        torch.manual_seed(global_seed)
        chain = random_chain(2, 3)
        return [chain.transition, chain.sample(4, 20), switching_chain(0.3, 0.4).sample(4, 20)]

    for first, again in zip(draws(1), draws(2), strict=True):
        assert torch.equal(first, again)
    assert torch.equal(random_chain(2, 3).transition, random_chain(2, 3, generator=seeded(0)).transition)


def test_symbols_given_as_a_numpy_array_are_refused_as_not_a_tensor():
    """A numpy array of int64 symbols was refused with "x must be an integer symbol tensor, got int64": an integer
    dtype named as the fault. The message names what is wrong, the container, and how to pass the symbols."""
    symbols = np.zeros((1, 8), dtype=np.int64)
    chain = random_chain(1, 2, generator=seeded(0))
    for call in (lambda: chain.oracle_loss(symbols), lambda: add_beta_loss(symbols, 1, 2, 1.0)):
        with pytest.raises(ValueError, match=r"^x must be a torch\.Tensor of integer symbols, got numpy\.ndarray "
                                             r"\(torch\.as_tensor\(x\) converts it\)$"):  # fmt: skip
            call()
