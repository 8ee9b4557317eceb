"""The S4D kernel: the blocked Vandermonde form against every exponential computed, and the convolution by that
kernel against the state recurrence run step by step, forward and gradients, at odd lengths."""

from __future__ import annotations

import math

import pytest
import torch
from twins import assert_same_gradients, randn

from markovformer.ops.long_conv import long_conv_naive
from markovformer.ops.s4d import s4d_final_state, s4d_kernel, s4d_kernel_naive, s4d_recurrence

CHANNELS, MODES = 3, 4


def _ssm(seed: int = 0) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Real leaves and the complex (Δ·A, C·B̄) they make (C, N/2), in S4D's parameterisation, with steps large
    enough that the kernel is far from zero over the tested lengths."""
    log_dt = (randn(CHANNELS, seed=seed) - 1.0).requires_grad_()
    log_a_real = (randn(CHANNELS, MODES, seed=seed + 1) * 0.3 + math.log(0.5)).requires_grad_()
    a_imag = (math.pi * torch.arange(MODES, dtype=torch.float64).expand(CHANNELS, MODES).clone()).requires_grad_()
    c = randn(CHANNELS, MODES, 2, seed=seed + 2).requires_grad_()
    a = torch.complex(-torch.exp(log_a_real), a_imag)
    dt_a = a * torch.exp(log_dt)[:, None]
    c_b = torch.view_as_complex(c) * (torch.exp(dt_a) - 1) / a
    return [log_dt, log_a_real, a_imag, c], dt_a, c_b


@pytest.mark.parametrize("length", [1, 2, 5, 11, 17])
def test_blocked_kernel_equals_every_exponential(length):
    leaves, dt_a, c_b = _ssm()
    fast, naive = s4d_kernel(dt_a, c_b, length), s4d_kernel_naive(dt_a, c_b, length)
    assert fast.shape == (length, CHANNELS)
    torch.testing.assert_close(fast, naive, rtol=1e-12, atol=1e-12)
    assert_same_gradients(fast, naive, leaves, rtol=1e-10, atol=1e-12)


def test_naive_kernel_is_the_closed_form_term_by_term():
    _, dt_a, c_b = _ssm(seed=3)
    kernel = s4d_kernel_naive(dt_a, c_b, 4)
    for lag in range(4):
        for channel in range(CHANNELS):
            expected = sum(2 * (c_b[channel, n] * torch.exp(dt_a[channel, n]) ** lag).real for n in range(MODES))
            torch.testing.assert_close(kernel[lag, channel], expected)


@pytest.mark.parametrize("length", [1, 7, 12])
def test_convolution_by_the_kernel_is_the_recurrence(length):
    leaves, dt_a, c_b = _ssm(seed=5)
    u = randn(2, length, CHANNELS, seed=8).requires_grad_()
    recurrence = s4d_recurrence(u, torch.exp(dt_a), c_b)
    convolution = long_conv_naive(u, s4d_kernel_naive(dt_a, c_b, length))
    torch.testing.assert_close(recurrence, convolution, rtol=1e-10, atol=1e-12)
    assert_same_gradients(recurrence, convolution, [u, *leaves], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("kernel", [s4d_kernel, s4d_kernel_naive], ids=["vandermonde", "naive"])
def test_kernel_names_a_bad_length(kernel):
    _, dt_a, c_b = _ssm()
    assert kernel(dt_a, c_b, 0).shape == (0, CHANNELS)
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match=f"length must be a non-negative integer .*, got {bad}"):
            kernel(dt_a, c_b, bad)


@pytest.mark.parametrize("rows", [1, 3])
def test_a_carried_state_of_another_batch_is_refused_not_broadcast(rows):
    """A decoding state of 1 row continued with 2 rows of inputs (or 3 with 2) broadcast into a batch it never
    held: an S4D model's state started on 1 row gave logits (2, 1, V) for 2 new rows without a word, and one of 2
    rows gave (2, 1, V) for a 1-row step. The other recurrent ops name a state of the wrong shape; so do these."""
    _, dt_a, c_b = _ssm()
    u = randn(2, 3, CHANNELS, seed=4)
    state = torch.zeros(rows, CHANNELS, MODES, dtype=dt_a.dtype)
    message = rf"^initial_state must be the SSM state \(B, C, N/2\) = \(2, 3, 4\), got shape \({rows}, 3, 4\)$"
    with pytest.raises(ValueError, match=message):
        s4d_recurrence(u, torch.exp(dt_a), c_b, state)
    with pytest.raises(ValueError, match=message):
        s4d_final_state(u, dt_a, state)
