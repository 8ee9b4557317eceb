"""The long convolution: the dense reference and the FFT form against the sums written out by hand, and the FFT
form against the reference in gradients, at odd lengths, causal and two-sided."""

from __future__ import annotations

import pytest
import torch
from twins import assert_same_gradients, randn

from markovformer.ops.long_conv import long_conv_fft, long_conv_naive


@pytest.mark.parametrize("two_sided", [False, True], ids=["causal", "two_sided"])
@pytest.mark.parametrize("length", [1, 2, 9])
def test_fft_long_conv_equals_direct_convolution(length, two_sided):
    u = randn(3, length, 5, seed=1)
    forward, backward = randn(length + 3, 5, seed=2), randn(length + 3, 5, seed=3) if two_sided else None
    by_hand = torch.zeros_like(u)
    for t in range(length):
        for j in range(length):
            if j <= t:
                by_hand[:, t] += forward[t - j] * u[:, j]
            elif two_sided:
                by_hand[:, t] += backward[j - t - 1] * u[:, j]
    torch.testing.assert_close(long_conv_naive(u, forward, backward), by_hand, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(long_conv_fft(u, forward, backward), by_hand, rtol=1e-10, atol=1e-10)


def test_long_conv_half_precision_runs_in_float32():
    u, kernel = randn(2, 8, 3, seed=1), randn(8, 3, seed=2)
    out = long_conv_fft(u.to(torch.bfloat16), kernel.to(torch.bfloat16))
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.double(), long_conv_naive(u, kernel), rtol=0.05, atol=0.05)


@pytest.mark.parametrize("two_sided", [False, True], ids=["causal", "two_sided"])
@pytest.mark.parametrize("length", [1, 7, 13])
def test_fft_long_conv_gradients_equal_naive(length, two_sided):
    u = randn(2, length, 3, seed=4).requires_grad_()
    forward = randn(length, 3, seed=5).requires_grad_()
    backward = randn(length, 3, seed=6).requires_grad_() if two_sided else None
    inputs = [u, forward] + ([backward] if two_sided else [])
    fft, naive = long_conv_fft(u, forward, backward), long_conv_naive(u, forward, backward)
    torch.testing.assert_close(fft, naive, rtol=1e-10, atol=1e-10)
    assert_same_gradients(fft, naive, inputs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("convolve", [long_conv_fft, long_conv_naive], ids=["fft", "naive"])
def test_long_conv_names_a_kernel_shorter_than_the_input(convolve):
    u = randn(1, 6, 2)
    with pytest.raises(ValueError, match=r"forward_kernel must be \(>= T, C\) = \(>= 6, 2\); got \(5, 2\)"):
        convolve(u, randn(5, 2))
    with pytest.raises(ValueError, match="backward_kernel"):
        convolve(u, randn(6, 2), randn(6, 3))


@pytest.mark.parametrize("convolve", [long_conv_fft, long_conv_naive], ids=["fft", "naive"])
def test_long_conv_names_an_input_that_is_not_a_sequence(convolve):
    with pytest.raises(ValueError, match=r"u must be \(B, T, C\) with T >= 1, got shape \(4, 2\)"):
        convolve(randn(4, 2), randn(4, 2))
    with pytest.raises(ValueError, match=r"u must be \(B, T, C\) with T >= 1, got shape \(1, 0, 2\)"):
        convolve(randn(1, 0, 2), randn(0, 2))
