"""Tests for markov/reduced_model.py: closed-form gradient vs autograd, the saddle, gradient-flow outcomes."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer.markov import (
    basin_boundary,
    energy,
    gradient_flow,
    optimal_bias,
    reaches_global_minimum,
    reduced_gradient,
    reduced_loss,
    saddle_energy,
    saddle_point,
    switching_chain,
    unigram_bias,
)


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.7, 0.9), (0.5, 0.8), (1.0, 0.8)])
def test_closed_form_gradient_equals_autograd(p, q):
    generator = torch.Generator().manual_seed(0)
    for point in torch.randn(20, 3, generator=generator, dtype=torch.float64) * 1.5:
        theta = point.clone().requires_grad_(True)
        expected = torch.autograd.grad(reduced_loss(theta[0], theta[1], theta[2], p, q), theta)[0]
        closed = torch.stack(reduced_gradient(*point, p, q))
        torch.testing.assert_close(closed, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.7, 0.9)])
def test_saddle_is_stationary(p, q):
    w, e = saddle_point()
    assert (w, e) == (-1 / math.sqrt(2), 0.0)
    gradient = torch.stack(reduced_gradient(e, w, unigram_bias(p, q), p, q))
    assert gradient.abs().max() < 1e-14
    # a saddle, not a minimum: near it L ≈ H(π) − e² κ (1−p−q)(1 + 2w|w|), so moving e off 0 lowers the loss on
    # one side of w = −1/√2 and raises it on the other, whichever the sign of 1−p−q
    unigram = switching_chain(p, q).marginal_entropy()
    side = 1.0 if p + q < 1 else -1.0
    assert reduced_loss(0.05, w + side * 0.1, unigram_bias(p, q), p, q).item() < unigram
    assert reduced_loss(0.05, w - side * 0.1, unigram_bias(p, q), p, q).item() > unigram


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.5, 0.8), (0.7, 0.9), (1.0, 0.8)])
def test_unigram_line_gives_marginal_entropy(p, q):
    chain = switching_chain(p, q)
    for w in (-2.0, -1 / math.sqrt(2), 0.0, 1.3):
        loss = reduced_loss(0.0, w, unigram_bias(p, q), p, q).item()
        assert loss == pytest.approx(chain.marginal_entropy(), abs=1e-12)
    # and the unigram bias is optimal there: nearby biases are worse
    assert reduced_loss(0.0, 0.0, unigram_bias(p, q) + 0.01, p, q) > chain.marginal_entropy()


@pytest.mark.parametrize("p, q", [(0.3, 0.0), (0.0, 0.3), (0.2, 0.3)])
def test_the_unigram_bias_is_the_logit_of_the_stationary_probability_of_1_even_when_a_rate_is_0(p, q):
    """With a rate of 0 the chain stays in one state: the logit is ±inf (it raised ZeroDivisionError at q = 0 and
    a bare "math domain error" at p = 0, rates the chain's own check accepts)."""
    pi_1 = p / (p + q)
    assert torch.sigmoid(torch.tensor(unigram_bias(p, q), dtype=torch.float64)).item() == pytest.approx(pi_1)


@pytest.mark.parametrize("p, q", [(0.2, 0.3), (0.7, 0.9)])
def test_global_minimum_reaches_entropy_rate(p, q):
    # the model can express any pair of logits: slope e^2 (1 + 2w|w|) spans R, bias absorbs the offset
    slope = math.log((1 - q) / q) - math.log(p / (1 - p))
    w = math.copysign(math.sqrt(abs(slope - 1) / 2), slope - 1)
    bias = math.log(p / (1 - p)) + 0.5
    assert reduced_loss(1.0, w, bias, p, q).item() == pytest.approx(switching_chain(p, q).entropy_rate(), abs=1e-12)


@pytest.mark.parametrize(
    ("p", "q", "target"),
    [(0.2, 0.3, "entropy_rate"), (0.3, 0.3, "entropy_rate"), (0.7, 0.9, "unigram"), (0.5, 0.8, "unigram")],
)
def test_small_initialisation_flow_outcome(p, q, target):
    # small init converges to the global minimum when p+q < 1 and to the unigram minimum when p+q > 1
    chain = switching_chain(p, q)
    trajectory = gradient_flow(0.1, 0.1, 0.0, p, q, steps=5000, lr=1.0)
    assert trajectory.shape == (5001, 3)
    torch.testing.assert_close(trajectory[0], torch.tensor([0.1, 0.1, 0.0], dtype=torch.float64))
    final_loss = reduced_loss(*trajectory[-1], p, q).item()
    expected = chain.entropy_rate() if target == "entropy_rate" else chain.marginal_entropy()
    assert final_loss == pytest.approx(expected, abs=1e-6)
    if target == "unigram":
        assert abs(trajectory[-1, 0].item()) < 1e-6


def test_flow_takes_euler_steps_on_the_gradient():
    trajectory = gradient_flow(0.4, -0.3, 0.2, 0.2, 0.3, steps=2, lr=0.1)
    step = torch.stack(reduced_gradient(0.4, -0.3, 0.2, 0.2, 0.3))
    torch.testing.assert_close(trajectory[1], trajectory[0] - 0.1 * step, rtol=0, atol=1e-15)
    assert reduced_loss(*trajectory[2], 0.2, 0.3) < reduced_loss(*trajectory[0], 0.2, 0.3)


@pytest.mark.parametrize(("p", "q"), [(0.2, 0.3), (0.7, 0.9), (1.0, 0.8)])
def test_optimal_bias_zeroes_the_bias_gradient_and_beats_a_scan(p, q):
    e = torch.tensor([0.0, 0.5, 1.3, -0.8])
    w = torch.tensor([0.3, -1.2, 0.7, -0.4])
    b = optimal_bias(e, w, p, q)
    torch.testing.assert_close(
        reduced_gradient(e, w, b, p, q)[2], torch.zeros(4, dtype=torch.float64), atol=1e-12, rtol=0
    )
    scan = torch.linspace(-8, 8, 4001, dtype=torch.float64)
    for i in range(4):
        assert reduced_loss(e[i], w[i], b[i], p, q) <= reduced_loss(e[i], w[i], scan, p, q).min() + 1e-12


@pytest.mark.parametrize(("p", "q"), [(1e-3, 0.5), (0.9, 1e-4), (1e-5, 1e-5)])
def test_optimal_bias_for_rare_switches_is_found_far_from_zero(p, q):
    """On the unigram line (e = 0) the root is the closed form log(p / q); off it the bias gradient vanishes. A
    bracket of the root that starts too close to 0 misses it when a switch is rare."""
    assert optimal_bias(0.0, 0.3, p, q).item() == pytest.approx(math.log(p / q), abs=1e-9)
    e, w = torch.tensor([0.5, 1.0]), torch.tensor([0.3, -0.9])
    gradient = reduced_gradient(e, w, optimal_bias(e, w, p, q), p, q)[2]
    assert gradient.abs().max().item() < 1e-12


@pytest.mark.parametrize(("p", "q"), [(0.2, 0.3), (0.7, 0.9)])
def test_profiled_flow_conserves_the_energy(p, q):
    starts_e = torch.tensor([0.3, 0.8, -0.5, 1.1])
    starts_w = torch.tensor([0.2, -0.3, -1.0, 0.6])
    # 2,000 steps: the largest drift of the 4,000 (7.6e-4 and 2.3e-3) is reached by then, the starts at their minima
    trajectory = gradient_flow(starts_e, starts_w, 0.0, p, q, steps=2000, lr=0.005, profile_bias=True)
    e, w = trajectory[..., 0], trajectory[..., 1]
    drift = (energy(e, w) - energy(e[0], w[0])).abs().max()
    assert drift < 5e-3  # explicit Euler: O(lr) drift over the whole path
    assert (e[-1] - e[0]).abs().max() > 0.05  # the trajectories really moved
    # and the energy is not conserved by the ordinary flow with b out of equilibrium (it has moved by more than 1
    # within a tenth of the profiled path)
    free = gradient_flow(starts_e, starts_w, 3.0, p, q, steps=400, lr=0.005)
    assert (energy(free[-1, :, 0], free[-1, :, 1]) - energy(starts_e, starts_w)).abs().max() > 0.05


def test_basin_boundary_lies_on_the_saddle_level_set():
    w = torch.linspace(-2.0, -0.01, 50, dtype=torch.float64)
    e = basin_boundary(w)
    torch.testing.assert_close(energy(e, w), torch.full_like(w, saddle_energy()), atol=1e-12, rtol=0)
    assert basin_boundary(-1 / math.sqrt(2)).item() == pytest.approx(0.0, abs=1e-7)
    assert saddle_energy() == pytest.approx(energy(0.0, saddle_point()[0]).item(), abs=1e-15)
    with pytest.raises(ValueError, match="w < 0"):
        basin_boundary(0.5)
    with pytest.raises(ValueError, match=r"w < 0 only, got w=0\.25"):  # the bad value among good ones, named
        basin_boundary(torch.tensor([-0.5, 0.25, -1.0]))
    with pytest.raises(ValueError, match="got w=nan"):  # NaN was let through: a NaN boundary
        basin_boundary(torch.tensor([-0.5, math.nan]))


# the default suite keeps one chain with p + q < 1 and one with p + q > 1; the slow marker adds (0.5, 0.8), a second
# p + q > 1 chain whose p = 1/2 makes a swap of p and 1 - p invisible
@pytest.mark.parametrize(("p", "q"), [(0.2, 0.3), (0.7, 0.9), pytest.param(0.5, 0.8, marks=pytest.mark.slow)])
def test_predicted_basins_match_where_the_profiled_flow_ends(p, q):
    chain = switching_chain(p, q)
    generator = torch.Generator().manual_seed(3)
    e0 = torch.rand(60, generator=generator, dtype=torch.float64) * 2.4 - 1.2
    w0 = torch.rand(60, generator=generator, dtype=torch.float64) * 2.6 - 1.6
    keep = (e0.abs() > 0.15) & (w0.abs() > 0.05)
    # starts too close to the boundary converge too slowly to classify within the budget
    keep &= (energy(e0, w0) - saddle_energy()).abs() > 0.1
    e0, w0 = e0[keep], w0[keep]
    # a small step: large Euler steps can jump e across 0, which the continuous flow never does. Every start is within
    # 1e-3 of its minimum by step 231 and 1e-8 by step 381, on the same side from step 500 to 10,000: 2,000 steps
    final = gradient_flow(e0, w0, 0.0, p, q, steps=2000, lr=0.1, profile_bias=True)[-1]
    losses = reduced_loss(final[:, 0], final[:, 1], final[:, 2], p, q)
    at_rate = (losses - chain.entropy_rate()).abs() < 1e-3
    at_unigram = (losses - chain.marginal_entropy()).abs() < 1e-3
    assert bool((at_rate | at_unigram).all())
    predicted = reaches_global_minimum(e0, w0, p, q)
    assert torch.equal(predicted, at_rate)
    assert predicted.any() and (~predicted).any()  # both outcomes occur among the starts


@pytest.mark.parametrize(("p", "q"), [(0.2, 0.3), (0.7, 0.9)])
def test_starts_on_the_unigram_line_or_at_w_zero_are_predicted_where_the_flow_ends(p, q):
    """e = 0 is a fixed line of the flow (the gradient in e and w carries a factor e), so such a start ends at H(pi)
    whatever its w: the prediction said True there for (0, 0.3) and (0, -0.3) at p + q < 1 and (0, -1.2) at p + q > 1.
    w = 0 with e != 0 keeps w = 0 (slope e^2 > 0): global minimum iff p + q < 1."""
    chain = switching_chain(p, q)
    e0 = torch.tensor([0.0, 0.0, 0.0, 0.8, -0.6], dtype=torch.float64)
    w0 = torch.tensor([0.3, -0.3, -1.2, 0.0, 0.0], dtype=torch.float64)
    # every start is within 1e-8 of its minimum by step 264, on the same side from step 300 to 3,000
    final = gradient_flow(e0, w0, 0.0, p, q, steps=1000, lr=0.1, profile_bias=True)[-1]
    losses = reduced_loss(final[:, 0], final[:, 1], final[:, 2], p, q)
    at_rate = (losses - chain.entropy_rate()).abs() < 1e-3
    at_unigram = (losses - chain.marginal_entropy()).abs() < 1e-3
    assert bool((at_rate | at_unigram).all())
    assert torch.equal(reaches_global_minimum(e0, w0, p, q), at_rate)
    assert not bool(reaches_global_minimum(0.0, -1.2 if p + q > 1 else 0.3, p, q))


@pytest.mark.parametrize(("p", "q"), [(0.4, 0.6), (0.5, 0.5), (0.25, 0.75)])
def test_independent_symbols_make_every_start_reach_the_global_minimum(p, q):
    """p + q = 1: P(1 | 0) = p = 1 - q = P(1 | 1), so the entropy rate is H(π) and the unigram minimum is global:
    starts on either side of w = -1/√2, above and below the saddle's energy, all reach it."""
    chain = switching_chain(p, q)
    assert chain.entropy_rate() == pytest.approx(chain.marginal_entropy(), abs=1e-12)
    e = torch.tensor([0.1, 1.5, 0.8, 0.3], dtype=torch.float64)
    w = torch.tensor([-2.0, 0.4, -0.9, -0.3], dtype=torch.float64)
    assert bool(reaches_global_minimum(e, w, p, q).all())


@pytest.mark.parametrize(
    ("build", "name"),
    [
        # rates outside [0, 1] gave numbers (0.715), p = q = 0 gave nan, optimal_bias stopped at its bracket's edge
        (lambda: reduced_loss(1.0, 0.5, 0.0, p=1.5, q=0.3), "p"),
        (lambda: reduced_loss(1.0, 0.5, 0.0, p=0.0, q=0.0), "p \\+ q"),
        (lambda: reduced_gradient(1.0, 0.5, 0.0, p=0.3, q=-0.1), "q"),
        (lambda: optimal_bias(1.0, 0.5, p=-0.2, q=0.3), "p"),
        (lambda: optimal_bias(1.0, 0.5, p=math.nan, q=0.3), "p"),
        (lambda: gradient_flow(0.5, 0.5, 0.0, p=2.0, q=0.3, steps=3, lr=0.1), "p"),
        (lambda: reduced_loss(1.0, 0.5, 0.0, p=torch.tensor([0.2, 1.2]), q=0.3), "p"),
        (lambda: reaches_global_minimum(0.5, 0.5, p=1.2, q=0.3), "p"),
        (lambda: unigram_bias(0.4, 1.3), "q"),
    ],
)
def test_switching_rates_outside_the_unit_interval_are_refused(build, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        build()


@pytest.mark.parametrize(("steps", "lr", "name"), [(-1, 0.1, "steps"), (2.0, 0.1, "steps"), (True, 0.1, "steps"),
                                                   (3, 0.0, "lr"), (3, math.inf, "lr"), (3, "0.1", "lr")])  # fmt: skip
def test_gradient_flow_refuses_a_bad_step_count_or_rate_naming_it(steps, lr, name):
    with pytest.raises(ValueError, match=f"^{name} must be"):
        gradient_flow(0.5, 0.5, 0.0, p=0.2, q=0.3, steps=steps, lr=lr)
