"""The state contract of the recurrent ops (fla's: ``initial_state`` in, ``final_state`` out): a sequence cut in two,
the second part started from the first part's final state, gives the whole sequence's outputs and final state, and
every fast path's final state equals its naive twin's. Float64, odd lengths and cuts, including one-step parts."""

from __future__ import annotations

import pytest
import torch
from twins import randn

from markovformer.ops.linear_attention import linear_attention, linear_attention_naive
from markovformer.ops.retention import retention, retention_recurrent
from markovformer.ops.s4d import s4d_final_state, s4d_recurrence, s4d_state_response
from markovformer.ops.scan import min_gru, min_gru_naive
from markovformer.ops.wkv import wkv_recurrent, wkv_scan

LENGTH = 23
CUTS = [1, 8, 22]


def _close(got, want) -> None:
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("cut", CUTS)
@pytest.mark.parametrize("form", ["chunkwise", "recurrent"])
def test_retention_carries_its_state_across_a_cut(form, cut):
    q, k, v = (randn(2, 3, LENGTH, 4, seed=seed) for seed in range(3))
    gamma = 1 - 2.0 ** (-5 - torch.arange(3, dtype=torch.float64))
    whole, whole_state = retention_recurrent(q, k, v, gamma, output_final_state=True)
    first, state = retention(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], gamma, form=form, chunk_size=8,
                             output_final_state=True)  # fmt: skip
    second, final = retention(q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], gamma, form=form, chunk_size=8,
                              initial_state=state, output_final_state=True)  # fmt: skip
    _close(torch.cat([first, second], dim=2), whole)
    _close(final, whole_state)


def test_retention_refuses_a_state_without_a_recurrence():
    q = randn(1, 1, 3, 2)
    with pytest.raises(ValueError, match="state"):
        retention(q, q, q, torch.tensor([0.9], dtype=torch.float64), form="parallel", output_final_state=True)


@pytest.mark.parametrize("cut", CUTS)
def test_wkv_scan_carries_the_recurrent_state_across_a_cut(cut):
    w, u = torch.rand(5, dtype=torch.float64), randn(5, seed=1)
    k, v = 3 * randn(2, LENGTH, 5, seed=2), randn(2, LENGTH, 5, seed=3)
    whole, (numerator, denominator, exponent) = wkv_recurrent(w, u, k, v, output_final_state=True)
    first, state = wkv_scan(w, u, k[:, :cut], v[:, :cut], output_final_state=True)
    second, final = wkv_scan(w, u, k[:, cut:], v[:, cut:], initial_state=state, output_final_state=True)
    _close(torch.cat([first, second], dim=1), whole)
    # states are sums relative to their exponent: compare them at the recurrence's exponent
    _close(final[0] * torch.exp(final[2] - exponent), numerator)
    _close(final[1] * torch.exp(final[2] - exponent), denominator)
    recurrent_first, recurrent_state = wkv_recurrent(w, u, k[:, :cut], v[:, :cut], output_final_state=True)
    _close(wkv_recurrent(w, u, k[:, cut:], v[:, cut:], initial_state=recurrent_state), whole[:, cut:])


@pytest.mark.parametrize("cut", CUTS)
def test_s4d_closed_form_state_equals_the_recurrence(cut):
    dt_a = torch.complex(-torch.rand(3, 4, dtype=torch.float64) - 0.1, randn(3, 4, seed=1))
    c_b = torch.complex(randn(3, 4, seed=2), randn(3, 4, seed=3))
    u = randn(2, LENGTH, 3, seed=4)
    a_bar = torch.exp(dt_a)
    whole, whole_state = s4d_recurrence(u, a_bar, c_b, output_final_state=True)
    first, state = s4d_recurrence(u[:, :cut], a_bar, c_b, output_final_state=True)
    _close(s4d_final_state(u[:, :cut], dt_a), state)
    second = s4d_recurrence(u[:, cut:], a_bar, c_b, initial_state=state)
    _close(torch.cat([first, second], dim=1), whole)
    # the convolution form's share of a carried state, and its final state from a carried one
    zero_start = s4d_recurrence(u[:, cut:], a_bar, c_b)
    _close(zero_start + s4d_state_response(state, dt_a, c_b, LENGTH - cut), whole[:, cut:])
    _close(s4d_final_state(u[:, cut:], dt_a, initial_state=state), whole_state)


@pytest.mark.parametrize("cut", CUTS)
def test_min_gru_carries_its_state_across_a_cut_with_padding(cut):
    gates, candidates = randn(2, LENGTH, 4, seed=1), randn(2, LENGTH, 4, seed=2)
    mask = torch.ones(2, LENGTH, dtype=torch.bool)
    mask[1, :5] = False
    mask[1, 12] = False
    whole, whole_state = min_gru_naive(gates, candidates, mask, output_final_state=True)
    first, state = min_gru(gates[:, :cut], candidates[:, :cut], mask[:, :cut], output_final_state=True)
    second, final = min_gru(gates[:, cut:], candidates[:, cut:], mask[:, cut:], initial_state=state,
                            output_final_state=True)  # fmt: skip
    _close(torch.cat([first, second], dim=1), whole)
    _close(final, whole_state)
    _, naive_state = min_gru_naive(gates[:, :cut], candidates[:, :cut], mask[:, :cut], output_final_state=True)
    _close(state, naive_state)


@pytest.mark.parametrize("normaliser", ["positive", "signed"])
@pytest.mark.parametrize("cut", CUTS)
def test_linear_attention_carries_its_running_sums_across_a_cut(cut, normaliser):
    q, k = randn(2, 2, LENGTH, 6, seed=1).exp(), randn(2, 2, LENGTH, 6, seed=2).exp()
    v = randn(2, 2, LENGTH, 3, seed=3)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, :4] = 0
    options = dict(causal=True, normaliser=normaliser, chunk_size=4)
    whole = linear_attention_naive(q, k, v, attention_mask=mask, causal=True, normaliser=normaliser)
    first, state = linear_attention(q[:, :, :cut], k[:, :, :cut], v[:, :, :cut], attention_mask=mask[:, :cut],
                                    output_final_state=True, **options)  # fmt: skip
    second, final = linear_attention(q[:, :, cut:], k[:, :, cut:], v[:, :, cut:], attention_mask=mask[:, cut:],
                                     initial_state=state, output_final_state=True, **options)  # fmt: skip
    _close(torch.cat([first, second], dim=2), whole)
    real = mask.bool()[:, None, :, None]
    values = torch.cat([torch.where(real, v, 0.0), real.double().expand(-1, 2, -1, 1)], dim=-1)
    sums = torch.einsum("bhtf,bhtd->bhfd", torch.where(real, k, 0.0), values)
    _close(final, sums)
