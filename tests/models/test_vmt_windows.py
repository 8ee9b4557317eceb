"""The Variational Markov Transformer's windows: what the posterior may see, the carry from window to window, padding
and edge cases (a window of one token, padded real vectors holding NaN)."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_vmts import reading_vmt, tiny_vmt

from markovformer.models.vmt import reverse_within_lengths

# -------------------------------------------------------------------------------------- what the posterior sees


def test_reverse_within_lengths_keeps_padding_in_place():
    x = torch.arange(10).view(2, 5)
    lengths = torch.tensor([5, 3])
    assert reverse_within_lengths(x, lengths).tolist() == [[4, 3, 2, 1, 0], [7, 6, 5, 8, 9]]
    assert torch.equal(reverse_within_lengths(reverse_within_lengths(x, lengths), lengths), x)


@pytest.mark.parametrize("changed", [0, 3, 6])
def test_h_k_depends_on_y_k_to_y_n_only(changed):
    model = tiny_vmt().eval()
    y = torch.randint(0, 7, (2, 7), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    perturbed = y.clone()
    perturbed[:, changed] = (perturbed[:, changed] + 1) % 7
    with torch.no_grad():
        before, after = model.encode(y, mask), model.encode(perturbed, mask)
    moved = (before - after).abs().amax(-1)  # (B, T)
    assert bool((moved[0, changed + 1 :] == 0).all())  # the future of the change: untouched
    assert bool((moved[0, : changed + 1] > 1e-4).all())  # the change and everything before it: it is read
    if changed < 5:
        assert bool((moved[1, changed + 1 : 5] == 0).all()) and bool((moved[1, : changed + 1] > 1e-4).all())
    else:  # a change in the padding reaches no real position
        assert bool((moved[1, :5] == 0).all())


# ------------------------------------------------------------------------------------------------------ the carry


def test_the_carry_really_carries():
    model = reading_vmt()
    first = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(0))
    other_first = (first + 3) % 7
    second = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(1))

    def second_loss(window_one: torch.Tensor | None) -> tuple[float, torch.Tensor]:
        carry = None
        if window_one is not None:
            out = model(input_ids=window_one, generator=torch.Generator().manual_seed(2))
            assert not out.carry.requires_grad  # no gradient crosses windows (truncated BPTT)
            carry = out.carry
        out = model(input_ids=second, carry=carry, generator=torch.Generator().manual_seed(3))
        return float(out.loss.detach()), out

    with_one, out_one = second_loss(first)
    with_other, _ = second_loss(other_first)
    assert abs(with_one - with_other) > 1e-3  # the carried state of window 1 changes window 2's loss
    without, out_none = second_loss(None)
    assert float(out_one.loss_init.detach()) > 0 and float(out_none.loss_init) == 0.0
    assert without == second_loss(None)[0]


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_carry_mask_mixes_rows_that_continue_with_rows_that_start(posterior):
    model = tiny_vmt(posterior=posterior)
    y = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(0))
    carry = torch.randn(2, 3)
    carry[1] = float("nan")  # an unused row may hold anything

    def run(**options):
        return model.elbo(y, num_samples=2, generator=torch.Generator().manual_seed(5), **options)

    mixed = run(carry=carry, carry_mask=torch.tensor([True, False]))
    all_carried = run(carry=torch.nan_to_num(carry))
    none_carried = run()

    def row(result, name: str, index: int) -> torch.Tensor:
        return getattr(result, name)[:, index] if name == "latents" else getattr(result, name)[index]

    for name in ("elbo_terms", "kl_terms", "latents"):
        torch.testing.assert_close(row(mixed, name, 0), row(all_carried, name, 0))
        torch.testing.assert_close(row(mixed, name, 1), row(none_carried, name, 1))
    assert float(mixed.loss_init.detach()) > 0
    none_masked = run(carry=torch.zeros(2, 3), carry_mask=torch.tensor([False, False]))
    torch.testing.assert_close(none_masked.elbo, none_carried.elbo)
    with pytest.raises(ValueError, match="carry_mask needs a carry"):
        model.elbo(y, carry_mask=torch.tensor([True, False]))


def test_the_carry_is_the_latent_at_the_carry_position():
    model = tiny_vmt()
    y = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]])
    last = model.elbo(y, mask, num_samples=2, generator=torch.Generator().manual_seed(0))
    assert last.latents.shape == (2, 2, 6, 3)
    torch.testing.assert_close(last.carry, torch.stack([last.latents[0, 0, 5], last.latents[0, 1, 2]]))
    middle = model.elbo(y, mask, generator=torch.Generator().manual_seed(0), carry_index=3)
    torch.testing.assert_close(middle.carry, torch.stack([middle.latents[0, 0, 3], middle.latents[0, 1, 2]]))
    with pytest.raises(ValueError, match="carry_index=-1"):
        model.elbo(y, carry_index=-1)


# ----------------------------------------------------------------------------------- padding and edge cases


def test_a_window_of_one_token_gives_finite_terms():
    model = tiny_vmt()
    y = torch.tensor([[3], [5]])
    out = model(input_ids=y, generator=torch.Generator().manual_seed(0))
    for name in ("loss", "elbo", "reconstruction", "kl", "loss_prior"):
        assert math.isfinite(float(getattr(out, name).detach())), name
    assert float(out.loss_skip) == 0.0 and float(out.loss_init) == 0.0  # no pair k, k + t fits; no carry
    carried = model(input_ids=y, carry=out.carry, generator=torch.Generator().manual_seed(1))
    assert math.isfinite(float(carried.loss.detach())) and float(carried.loss_init.detach()) > 0
    out.loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_padding_changes_nothing_for_real_tokens(posterior):
    model = tiny_vmt(posterior=posterior)
    y = torch.randint(0, 7, (1, 5), generator=torch.Generator().manual_seed(0))
    carry = torch.randn(1, 3)
    padded = torch.cat([y, torch.tensor([[6, 2, 4]])], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 3])
    other_padding = padded.clone()
    other_padding[0, 5:] = torch.tensor([0, 1, -100])  # even an id outside the vocabulary is ignored there
    results = [model.elbo(y, carry=carry, num_samples=2, generator=torch.Generator().manual_seed(4))]
    for tokens in (padded, other_padding):
        results.append(model.elbo(tokens, mask, carry=carry, num_samples=2, generator=torch.Generator().manual_seed(4)))
    reference = results[0]
    for result in results[1:]:
        for name in ("elbo", "reconstruction", "kl", "loss_init", "loss_prior", "loss_skip", "carry"):
            torch.testing.assert_close(getattr(result, name), getattr(reference, name), msg=name)
        torch.testing.assert_close(result.elbo_terms[:, :5], reference.elbo_terms)
        assert bool((result.elbo_terms[:, 5:] == 0).all()) and result.num_tokens == 5


def test_padding_of_real_vectors_may_hold_nan():
    model = tiny_vmt(vocab_size=None, input_dim=2)
    y = torch.randn(2, 4, 2)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    y[1, 2:] = float("nan")
    out = model(input_features=y, attention_mask=mask, generator=torch.Generator().manual_seed(0))
    assert math.isfinite(float(out.loss.detach()))
    alone = model.elbo(y[1:, :2], generator=torch.Generator().manual_seed(0))
    assert math.isfinite(float(alone.elbo.detach()))
    y[0, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        model(input_features=y, attention_mask=mask)
