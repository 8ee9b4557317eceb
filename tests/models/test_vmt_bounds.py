"""The Variational Markov Transformer's bounds against the exact Kalman likelihood (the ELBO, the importance-weighted
and the carried bounds), its KL and densities (Gaussian and flow posteriors), its loss's terms and its resampling."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_vmts import linear_gaussian_vmt, tiny_vmt
from torch.distributions import Normal, kl_divergence

from markovformer.data.synthetic.state_space import LinearGaussianParameters, random_linear_gaussian
from markovformer.models.vmt.densities import gaussian_kl, gaussian_log_prob
from markovformer.models.vmt.posterior import FlowPosterior

# ------------------------------------------------------------------------------ bounds against the Kalman filter


def test_set_linear_gaussian_makes_the_generative_part_exact():
    parameters = random_linear_gaussian(0)
    model = linear_gaussian_vmt(parameters)
    x = torch.randn(5, 2, dtype=torch.float64)
    mean, std = model.transition(x, model.transition.prepare())
    torch.testing.assert_close(mean, x @ parameters.transition.T + parameters.transition_bias)
    torch.testing.assert_close(std, parameters.transition_std.expand(5, -1))
    y = torch.randn(5, 2, dtype=torch.float64)
    expected = Normal(x @ parameters.emission.T + parameters.emission_bias, parameters.emission_std)
    torch.testing.assert_close(model.emission.log_prob(y, x), expected.log_prob(y).sum(-1))
    torch.testing.assert_close(model.prior.log_prob(x), Normal(parameters.initial_mean, parameters.initial_std)
                               .log_prob(x).sum(-1))  # fmt: skip
    with pytest.raises(ValueError, match="not tokens"):
        tiny_vmt().set_linear_gaussian(**parameters.to_dict())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_elbo_is_below_the_exact_likelihood_and_importance_weighting_closes_the_gap(seed):
    parameters = random_linear_gaussian(seed)
    model = linear_gaussian_vmt(parameters, seed)
    y = parameters.sample(32, 4, torch.Generator().manual_seed(100 + seed))[1]
    exact = parameters.log_likelihood(y).sum(-1)  # (B,) nats
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        elbo = model.elbo(y, num_samples=256, generator=generator).elbo_terms.sum(-1)
        gaps = [float((exact - model.iw_bound(y, k, generator=generator, chunk_size=1000).per_sequence).mean())
                for k in (1, 10, 100, 1000)]  # fmt: skip
    # an untrained posterior: the gap is tens of nats per row, far beyond the Monte-Carlo error of 256 samples
    assert bool((elbo < exact).all())
    elbo_gap = float((exact - elbo).mean())
    assert gaps[0] == pytest.approx(elbo_gap, rel=0.5)  # K = 1 is the ELBO in expectation
    assert gaps[0] > gaps[1] > gaps[2] > gaps[3] > -0.05  # tightens monotonically, stays a lower bound
    assert gaps[3] < 0.35 * gaps[0] and gaps[1] < elbo_gap


def test_one_sample_bound_is_the_elbo_in_expectation():
    """The IW bound at K = 1 uses log P(x) − log Q(x) of the draw, the ELBO the closed-form KL (Gaussian posterior)
    or the same one-draw estimate (flow): equal on average, to within 5 standard errors of 2000 draws."""
    parameters = random_linear_gaussian(5, state_dim=2, obs_dim=1)
    flow = linear_gaussian_vmt(parameters, posterior="flow")
    with torch.no_grad():
        for coupling in flow.posterior_step.couplings:  # leave the identity start, so the flow matters
            torch.nn.init.normal_(coupling.out.weight, std=0.1)
    y = parameters.sample(4, 3, torch.Generator().manual_seed(0))[1]
    for vmt in (linear_gaussian_vmt(parameters), flow):
        generator = torch.Generator().manual_seed(1)
        with torch.no_grad():
            draws = vmt.iw_bound(y.repeat(2000, 1, 1), 1, generator=generator).per_sequence.view(2000, 4)
            elbo = vmt.elbo(y, num_samples=4000, generator=generator).elbo_terms.sum(-1)
        standard_error = draws.std(0) / math.sqrt(2000)
        assert bool(((draws.mean(0) - elbo).abs() < 5 * standard_error).all())


def test_the_carried_bound_is_the_likelihood_given_the_carried_state():
    parameters = random_linear_gaussian(7)
    model = linear_gaussian_vmt(parameters)
    model.posterior_step.base.residual_start()  # Q(x_k | x_{k-1}, h_k) := P(x_k | x_{k-1}): plain importance sampling
    x0 = torch.tensor([0.5, -1.0], dtype=torch.float64)
    given_x0 = LinearGaussianParameters(**{**parameters.to_dict(),
                                           "initial_mean": parameters.transition @ x0 + parameters.transition_bias,
                                           "initial_std": parameters.transition_std})  # fmt: skip
    y = given_x0.sample(32, 3, torch.Generator().manual_seed(0))[1]
    exact = given_x0.log_likelihood(y).sum(-1)
    without_carry = parameters.log_likelihood(y).sum(-1)
    assert float((exact - without_carry).abs().mean()) > 1.0  # the carried state matters here
    with torch.no_grad():
        bound = model.iw_bound(y, 4000, carry=x0.expand(32, -1), generator=torch.Generator().manual_seed(0),
                               chunk_size=1000).per_sequence  # fmt: skip
    # importance sampling from the prior: unbiased in the weights, ±0.15 nats per row at K = 4000 (measured)
    assert float((bound - exact).mean()) == pytest.approx(0.0, abs=0.06)
    torch.testing.assert_close(bound, exact, atol=1.0, rtol=0)


def test_a_documents_carried_bound_tends_to_its_exact_likelihood_as_k_grows():
    """Chained over a document's windows, the bound carried one resampled latent from window to window: however
    large K, every window then started from that one path, and the bound stalled below the exact log-likelihood
    (0.04 nats a step short at K = 1000 on a trained model, in the walk-through; here, windows of one step, 1.17
    nats a document at K = 1000 and still 0.95 at K = 10,000). Every path now carries its own latent, K ancestors
    resampled by weight at each window's end (a particle filter): with Q(x_k | x_(k-1), h_k) = P(x_k | x_(k-1)),
    the bootstrap filter, whose estimate of P(document) is unbiased and tends to it as K grows (0.02 at 1000)."""
    from markovformer.models.vmt.documents import walk_documents

    parameters = random_linear_gaussian(7)
    model = linear_gaussian_vmt(parameters)
    for posterior in (model.posterior_init, model.posterior_step):  # Q := P, from x_1 on
        posterior.base.residual_start()
    y = parameters.sample(32, 12, torch.Generator().manual_seed(0))[1]
    exact = parameters.log_likelihood(y).sum(-1)  # (32,) nats a document
    gaps = {}
    for k in (10, 1000):
        total = torch.zeros(32, dtype=torch.float64)
        for scores in walk_documents(model, y, window=1, iw_samples=(k,), iw_generator=torch.Generator().manual_seed(1),
                                     elbo_generator=torch.Generator().manual_seed(2)):  # fmt: skip
            total[scores.rows] += scores.bounds[k].per_sequence
        gaps[k] = float((exact - total).mean())
    assert gaps[10] > gaps[1000] > -0.05  # a lower bound in expectation, tighter with K
    assert gaps[1000] < 0.1  # nats per document of 12 steps


# ------------------------------------------------------------------------------------------------- the loss


def test_loss_combines_the_terms_with_warm_up_free_bits_and_weights():
    model = tiny_vmt(free_bits=0.0, loss_init_weight=0.0, loss_prior_weight=0.0, loss_skip_weight=0.0)
    y = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(0))
    carry = torch.randn(2, 3)
    plain = model(input_ids=y, carry=carry, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(plain.loss, -plain.elbo)
    weighted = tiny_vmt(free_bits=1000.0, loss_init_weight=0.5, loss_prior_weight=0.25, loss_skip_weight=0.125)
    out = weighted(input_ids=y, carry=carry, kl_weight=0.3, generator=torch.Generator().manual_seed(1))
    expected = (-out.reconstruction + 0.3 * 1000.0 + 0.5 * out.loss_init + 0.25 * out.loss_prior
                + 0.125 * out.loss_skip)  # fmt: skip
    torch.testing.assert_close(out.loss, expected)
    # under the free-bits floor the KL gets no gradient: the posterior is not pushed toward the prior
    weighted.zero_grad()
    (out.loss - 0.25 * out.loss_prior - 0.5 * out.loss_init - 0.125 * out.loss_skip + out.reconstruction).backward()
    assert all(p.grad is None or float(p.grad.abs().max()) == 0 for p in weighted.parameters())


def test_gaussian_densities_match_torch_distributions():
    mean_q, mean_p = torch.randn(4, 3), torch.randn(4, 3)
    std_q, std_p = torch.rand(4, 3) + 0.1, torch.rand(4, 3) + 0.1
    expected = kl_divergence(Normal(mean_q, std_q), Normal(mean_p, std_p)).sum(-1)
    torch.testing.assert_close(gaussian_kl(mean_q, std_q, mean_p, std_p), expected)
    value = torch.randn(4, 3)
    torch.testing.assert_close(gaussian_log_prob(value, mean_q, std_q), Normal(mean_q, std_q).log_prob(value).sum(-1))


@pytest.mark.parametrize("carried", [False, True], ids=["from_the_prior", "from_a_carry"])
def test_the_elbos_kl_is_kl_of_the_posterior_from_the_prior_once_they_differ(carried):
    """The ELBO's KL at each position is KL(Q || P) between the Gaussian Q drew that latent from and the P that
    scores it (P(x_1), or P(x_1 | x_0) from a carry; then P(x_k | x_{k-1}) of the drawn x_{k-1}), by the closed form
    of torch.distributions from the means and deviations each posterior returned. A fresh residual posterior equals
    its prior (the KL is 0 in both directions), so the posteriors are perturbed first: KL(P || Q) then differs, and
    a KL with its arguments swapped would fail."""
    model = tiny_vmt(3).double()
    generator = torch.Generator().manual_seed(0)
    drawn = []
    with torch.no_grad():
        for posterior in (model.posterior_init, model.posterior_step):
            for parameter in posterior.parameters():
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))

            def recording(*args, sample=posterior.sample, **kwargs):
                drawn.append(sample(*args, **kwargs))
                return drawn[-1]

            posterior.sample = recording  # each position's Q (mean, std), in the order the path is drawn
        y = torch.randint(0, 7, (2, 5), generator=generator)
        carry = torch.randn(2, 3, generator=generator, dtype=torch.float64) if carried else None
        out = model.elbo(y, carry=carry, num_samples=4, generator=generator)
        assert len(drawn) == 5
        previous, transition = carry, model.transition.prepare()
        forward, backward = [], []
        for q in drawn:
            p_mean, p_std = model.prior() if previous is None else model.transition(previous, transition)
            q_density, p_density = Normal(q.mean, q.std), Normal(p_mean.expand_as(q.mean), p_std.expand_as(q.std))
            forward.append(kl_divergence(q_density, p_density).sum(-1).mean(0))  # (B,), averaged over the 4 paths
            backward.append(kl_divergence(p_density, q_density).sum(-1).mean(0))
            previous = q.value
    forward, backward = torch.stack(forward, dim=1), torch.stack(backward, dim=1)
    torch.testing.assert_close(out.kl_terms, forward)
    assert float((backward - forward).abs().max()) > 0.3, (forward, backward)  # KLs of 0.1 to 4 nats here


def test_flow_posterior_density_is_its_change_of_variables():
    torch.manual_seed(0)
    flow = FlowPosterior(input_dim=2, context_dim=3, latent_dim=4, hidden_dim=16, layers=3).double()
    with torch.no_grad():
        for coupling in flow.couplings:
            torch.nn.init.normal_(coupling.out.weight, std=0.5)
    x, context = torch.randn(2, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    prepared = flow.prepare(context)
    noise = torch.randn(4, dtype=torch.float64)
    draw = flow.sample(x, prepared, noise)
    torch.testing.assert_close(flow.log_prob(draw.value, x, prepared), draw.log_prob)  # the inverse is exact

    def push(base: torch.Tensor) -> torch.Tensor:
        value = base
        for coupling, part in zip(flow.couplings, prepared[1:], strict=True):
            value = coupling(value, x, part)[0]
        return value

    base = draw.mean + draw.std * noise
    jacobian = torch.autograd.functional.jacobian(push, base)
    expected = gaussian_log_prob(base, draw.mean, draw.std) - torch.linalg.slogdet(jacobian)[1]
    torch.testing.assert_close(draw.log_prob, expected)


def test_resampling_never_draws_a_non_finite_weight_and_survives_a_row_without_any():
    from markovformer.models.vmt.modeling import resampling_probabilities

    nan, inf = float("nan"), float("inf")
    log_weights = torch.tensor([[0.0, nan, -inf], [math.log(3.0), nan, -inf], [nan, inf, -inf]])  # (s=3, B=3)
    probabilities = resampling_probabilities(log_weights)
    torch.testing.assert_close(probabilities[0], torch.tensor([0.25, 0.75, 0.0], dtype=torch.float64))
    torch.testing.assert_close(probabilities[1], torch.full((3,), 1 / 3, dtype=torch.float64))  # nothing finite
    torch.testing.assert_close(probabilities[2], torch.full((3,), 1 / 3, dtype=torch.float64))
    plain = torch.randn(4, 2, dtype=torch.float64)
    torch.testing.assert_close(resampling_probabilities(plain), plain.T.softmax(-1))


def test_the_elbo_is_differentiated_through_its_reparameterised_sequential_draws():
    """SPEC 5: reparameterised samples drawn x_1 -> x_n. With the noise fixed by the generator the ELBO is a smooth
    function of the posterior's weights, and autograd's gradient equals central differences that re-run the whole
    sequential draw: a sample (or an x_k fed to Q(x_{k+1} | x_k, h)) cut from the graph would drop its path's term."""
    parameters = random_linear_gaussian(3, state_dim=2, obs_dim=1)
    vmt = linear_gaussian_vmt(parameters)
    with torch.no_grad():
        for posterior in (vmt.posterior_init, vmt.posterior_step):
            torch.nn.init.normal_(posterior.base.out.weight, std=0.3)
    y = parameters.sample(3, 6, torch.Generator().manual_seed(0))[1]

    def elbo() -> torch.Tensor:
        return vmt.elbo(y, num_samples=2, generator=torch.Generator().manual_seed(5)).elbo_terms.sum()

    weights = dict(vmt.named_parameters())
    names = ("posterior_init.base.out.bias", "posterior_step.base.out.bias", "posterior_step.base.from_input.weight")
    for name in names:
        weight = weights[name]
        (gradient,) = torch.autograd.grad(elbo(), weight)
        for index in range(4):
            with torch.no_grad():
                weight.view(-1)[index] += 1e-6
                up = elbo().item()
                weight.view(-1)[index] -= 2e-6
                down = elbo().item()
                weight.view(-1)[index] += 1e-6
            assert gradient.view(-1)[index].item() == pytest.approx((up - down) / 2e-6, rel=1e-6, abs=1e-4), name
