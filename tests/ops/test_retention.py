"""Retention: the chunkwise and recurrent forms against the dense parallel form (forward and gradients, causal and
bidirectional, chunk sizes that do and do not divide the length), and a closed form on constant inputs."""

from __future__ import annotations

import pytest
import torch
from twins import assert_same_gradients, randn

from markovformer.layers.baselines.retnet import retention_decays
from markovformer.ops.retention import (
    retention,
    retention_chunkwise,
    retention_parallel,
    retention_recurrent,
)

LENGTH = 11


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 16])
def test_retention_parallel_recurrent_chunkwise_agree(chunk_size):
    q, k, v = randn(2, 3, LENGTH, 4, seed=1), randn(2, 3, LENGTH, 4, seed=2), randn(2, 3, LENGTH, 6, seed=3)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    gamma = torch.tensor([0.5, 0.9, 0.999], dtype=torch.float64)
    parallel = retention_parallel(q, k, v, gamma)
    recurrent = retention_recurrent(q, k, v, gamma)
    chunkwise = retention_chunkwise(q, k, v, gamma, chunk_size)
    torch.testing.assert_close(recurrent, parallel, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(chunkwise, parallel, rtol=1e-12, atol=1e-12)
    assert_same_gradients(chunkwise, parallel, inputs, rtol=1e-12, atol=1e-12)
    for form in ("recurrent", "chunkwise"):  # non-causal: γ^{|n-m|}
        torch.testing.assert_close(
            retention(q, k, v, gamma, causal=False, form=form, chunk_size=chunk_size),
            retention_parallel(q, k, v, gamma, causal=False),
            rtol=1e-12,
            atol=1e-12,
        )


def test_retention_closed_form_and_multiscale_decays():
    torch.testing.assert_close(retention_decays(3), torch.tensor([1 - 1 / 32, 1 - 1 / 64, 1 - 1 / 128]).double())
    ones = torch.ones(1, 1, 6, 1, dtype=torch.float64)
    gamma = torch.tensor([0.8], dtype=torch.float64)
    steps = torch.arange(6, dtype=torch.float64)
    expected = (1 - 0.8 ** (steps + 1)) / (1 - 0.8)  # Σ_{m<=n} γ^{n-m}
    torch.testing.assert_close(retention_chunkwise(ones, ones, ones, gamma, 4)[0, 0, :, 0], expected)
    bidirectional = expected + (1 - 0.8 ** (6 - steps)) / (1 - 0.8) - 1
    torch.testing.assert_close(retention(ones, ones, ones, gamma, causal=False)[0, 0, :, 0], bidirectional)


@pytest.mark.parametrize("length", [1, 7])
def test_retention_forms_agree_in_gradients_at_odd_lengths(length):
    q, k, v = randn(1, 2, length, 3, seed=4), randn(1, 2, length, 3, seed=5), randn(1, 2, length, 5, seed=6)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    gamma = torch.tensor([0.7, 0.95], dtype=torch.float64)
    for causal in (True, False):
        parallel = retention(q, k, v, gamma, causal=causal, form="parallel")
        for form in ("recurrent", "chunkwise"):
            other = retention(q, k, v, gamma, causal=causal, form=form, chunk_size=3)
            torch.testing.assert_close(other, parallel, rtol=1e-12, atol=1e-12)
            assert_same_gradients(other, parallel, inputs, rtol=1e-11, atol=1e-12)


def test_retention_names_an_unknown_form():
    q = randn(1, 1, 3, 2)
    with pytest.raises(ValueError, match="form='fast'"):
        retention(q, q, q, torch.tensor([0.5], dtype=torch.float64), form="fast")
