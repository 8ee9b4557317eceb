"""The VMT's auxiliary losses (the text's Algorithm 1) and its residual posterior, recomputed term by term from
public pieces: the latents ``elbo`` draws, the features ``encode`` gives and each density's ``log_prob``."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from tiny_vmts import reading_vmt  # beside this file

from markovformer.models.vmt.densities import ConditionalGaussian

LENGTHS, SAMPLES, SKIP = (6, 4), 3, 2


@pytest.fixture(scope="module")
def drawn():
    """One ELBO of two right-padded rows (lengths 6 and 4), the first continuing from a carry and the second starting
    afresh, with skip_length=2: every row's skip t is 2."""
    model = reading_vmt(skip_length=SKIP).double().eval()
    y = torch.randint(0, 7, (2, max(LENGTHS)), generator=torch.Generator().manual_seed(0))
    mask = (torch.arange(max(LENGTHS))[None] < torch.tensor(LENGTHS)[:, None]).long()
    carry = torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        out = model.elbo(y, mask, carry=carry, num_samples=SAMPLES, generator=torch.Generator().manual_seed(2),
                         carry_mask=torch.tensor([True, False]))  # fmt: skip
        h = model.encode(y, mask)
    return SimpleNamespace(model=model, out=out, x=out.latents, h=h)  # x: (S, B, T, latent_dim)


def posterior_context(h: torch.Tensor, b: int, k: int) -> torch.Tensor:
    """h_k with the log of the number of tokens it has read appended: y_k..y_n, n - k of them for a 0-based k."""
    return torch.cat([h[b, k], h.new_tensor([math.log(LENGTHS[b] - k)])])


@torch.no_grad()
def test_loss_prior_averages_over_every_sample_and_real_position(drawn):
    terms = [-drawn.model.prior.log_prob(drawn.x[s, b, k]) for s in range(SAMPLES) for b in range(2)
             for k in range(LENGTHS[b])]  # fmt: skip
    torch.testing.assert_close(drawn.out.loss_prior, torch.stack(terms).mean(), rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_loss_init_scores_the_first_latent_of_carried_rows_only(drawn):
    """Q(x_1 | h_1) learns the start of the paths that began from a carry: the second row (drawn from Q(x_1 | h_1)
    itself) is left out."""
    init = drawn.model.posterior_init
    prepared = init.prepare(posterior_context(drawn.h, 0, 0))
    terms = [-init.log_prob(drawn.x[s, 0, 0], None, prepared, drawn.model.prior()) for s in range(SAMPLES)]
    torch.testing.assert_close(drawn.out.loss_init, torch.stack(terms).mean(), rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_loss_skip_scores_x_k_plus_t_from_x_k_h_k_plus_1_and_log_t(drawn):
    """-log Q_skip(x_{k+t} | x_k, h_{k+1}, log t) over every sample and every pair with k + t inside its row."""
    skip = drawn.model.posterior_skip
    terms = []
    for s in range(SAMPLES):
        for b in range(2):
            for k in range(LENGTHS[b] - SKIP):
                context = torch.cat([posterior_context(drawn.h, b, k + 1), drawn.h.new_tensor([math.log(SKIP)])])
                terms.append(-skip.log_prob(drawn.x[s, b, k + SKIP], drawn.x[s, b, k], skip.prepare(context)))
    assert len(terms) == SAMPLES * (4 + 2)
    torch.testing.assert_close(drawn.out.loss_skip, torch.stack(terms).mean(), rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_a_residual_posterior_shifts_and_scales_with_its_anchor():
    """Q = N(mean_p + Δ, (std_p · s)²) with Δ and s read from x and the context, never from the anchor (mean_p,
    std_p): shifting the anchor's mean shifts Q's, scaling its std scales Q's, once s is no longer 1."""
    torch.manual_seed(0)
    density = ConditionalGaussian(3, 5, 3, 8).double()
    density.residual_start()
    for parameter in density.parameters():  # away from the residual start (Δ = 0, s = 1)
        parameter.add_(0.5 * torch.randn_like(parameter))
    x, context = torch.randn(4, 3, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    prepared = density.prepare(context)
    mean_p, std_p = torch.randn(4, 3, dtype=torch.float64), torch.rand(4, 3, dtype=torch.float64) + 0.5
    mean, std = density(x, prepared, (mean_p, std_p))
    assert not torch.allclose(std, std_p)
    shifted_mean, scaled_std = density(x, prepared, (mean_p + 1.5, 3.0 * std_p))
    torch.testing.assert_close(shifted_mean, mean + 1.5)
    torch.testing.assert_close(scaled_std, 3.0 * std)
