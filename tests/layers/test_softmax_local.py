"""Sliding-window softmax attention (``attention="softmax", scope="local"``): the banded op with no bias equals a
dense masked reference written here from the window rule, on outputs and gradients, causal and bidirectional, padded."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers.softmax_attention import SoftmaxCore


def _dense_reference(q, k, v, window, causal, attention_mask):
    """softmax over keys j with t - W <= j <= t (causal) or |t - j| <= W, real keys only; rows with none give 0."""
    length = q.shape[-2]
    t = torch.arange(length)[:, None]
    j = torch.arange(length)[None, :]
    allowed = (t - j <= window) & (j <= t) if causal else (t - j).abs() <= window
    allowed = allowed[None, None] & attention_mask.bool()[:, None, None, :]
    scores = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return weights @ v


@pytest.mark.parametrize("backend", ["naive", "banded", "auto"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("window", [0, 1, 3, 20])
def test_sliding_window_softmax_equals_the_dense_masked_reference(window, causal, backend):
    generator = torch.Generator().manual_seed(window)
    q, k, v = (torch.randn(2, 3, 13, 4, generator=generator, dtype=torch.float64, requires_grad=True)
               for _ in range(3))  # fmt: skip
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[0, 10:] = 0  # right padding
    mask[1, :3] = 0  # left padding
    core = SoftmaxCore(causal=causal, scope="local", window=window, backend=backend)
    got = core(None, q, k, v, mask).heads
    want = _dense_reference(q, k, v, window, causal, mask)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    weights = torch.randn(got.shape, generator=generator, dtype=torch.float64)
    for got_grad, want_grad in zip(torch.autograd.grad((got * weights).sum(), (q, k, v)),
                                   torch.autograd.grad((want * weights).sum(), (q, k, v)), strict=True):  # fmt: skip
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-12)


def test_a_window_covering_the_sequence_is_global_softmax():
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    local = SoftmaxCore(causal=True, scope="local", window=8)(None, q, k, v).heads
    torch.testing.assert_close(local, SoftmaxCore(causal=True)(None, q, k, v).heads)
