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


@pytest.mark.parametrize("chunk_size", [2, 3, 4])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_chunkwise_segments_with_padding_match_parallel(causal, chunk_size):
    """Packed documents with padding (segment -1): a hole inside a document at a chunk's end keeps the document's
    state, padding neither reads nor is read, and a padding query returns zeros (the parallel form's rule)."""
    q, k, v = randn(2, 2, 10, 3, seed=7), randn(2, 2, 10, 3, seed=8), randn(2, 2, 10, 4, seed=9)
    gamma = torch.tensor([0.6, 0.9], dtype=torch.float64)
    ids = torch.full((2, 10), -1)
    ids[0, :7] = 0
    ids[0, chunk_size - 1] = -1  # a hole ending the first chunk, inside document 0
    ids[1, 1:9] = torch.tensor([0, 0, 0, 1, 1, 1, 1, 1])
    ids[1, 2 * chunk_size - 1] = -1
    parallel = retention(q, k, v, gamma, causal, "parallel", segment_ids=ids)
    for form in ("recurrent", "chunkwise"):
        other = retention(q, k, v, gamma, causal, form, chunk_size, segment_ids=ids)
        torch.testing.assert_close(other, parallel, rtol=1e-12, atol=1e-12)
        assert not other.masked_select((ids < 0)[:, None, :, None]).any()


@pytest.mark.parametrize("gamma_value", [0.0, 1e-300, 1e-8])
def test_retention_forms_agree_at_a_decay_of_zero(gamma_value):
    """γ = 0 is a head without memory: o_n = (q_n·k_n) v_n, in every form (exp(0·log 0) would be NaN)."""
    q, k, v = randn(1, 2, 7, 3, seed=1), randn(1, 2, 7, 3, seed=2), randn(1, 2, 7, 2, seed=3)
    gamma = torch.tensor([gamma_value, 0.5], dtype=torch.float64, requires_grad=True)
    inputs = [x.requires_grad_() for x in (q, k, v)] + [gamma]
    recurrent = retention(q, k, v, gamma, True, "recurrent")
    if gamma_value == 0:
        memoryless = (q * k).sum(-1, keepdim=True) * v
        torch.testing.assert_close(recurrent[:, 0], memoryless[:, 0], rtol=1e-12, atol=1e-12)
    for causal in (True, False):
        parallel = retention(q, k, v, gamma, causal, "parallel")
        for form in ("recurrent", "chunkwise"):
            other = retention(q, k, v, gamma, causal, form, 3)
            torch.testing.assert_close(other, parallel, rtol=1e-12, atol=1e-12)
            assert_same_gradients(other, parallel, inputs, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gamma": torch.tensor([0.9, 0.9, 0.9])}, r"gamma must be one decay per head, \(H,\) = \(2,\)"),
        ({"chunk_size": 0}, "chunk_size must be an integer >= 1, got 0"),
        ({"initial_state": torch.zeros(1, 2, 3, 3)}, r"initial_state must be .* \(1, 2, 4, 3\), got shape"),
        ({"q": torch.zeros(2, 5, 4)}, r"q must be \(B, H, T, Dk\), got shape \(2, 5, 4\)"),
        ({"k": torch.zeros(1, 2, 5, 3)}, r"k must match q \(1, 2, 5, 4\) \(B, H, T, Dk\), got shape \(1, 2, 5, 3\)"),
        ({"v": torch.zeros(1, 2, 4, 3)}, r"v must be \(B, H, T, Dv\) with \(B, H, T\) = \(1, 2, 5\), got shape"),
        ({"initial_state": torch.zeros(1, 2, 4, 3), "segment_ids": torch.zeros(1, 5, dtype=torch.long)},
         r"packed documents \(segment_ids\) carry no retention state"),
    ],
)
def test_retention_bad_arguments_raise_naming_them(change, message):
    arguments = dict(q=randn(1, 2, 5, 4), k=randn(1, 2, 5, 4), v=randn(1, 2, 5, 3), gamma=torch.tensor([0.9, 0.8]))
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        retention(**arguments, output_final_state="initial_state" in change)


def test_chunkwise_retention_refuses_a_state_across_packed_documents():
    q, k, v = randn(1, 2, 5, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 3)
    with pytest.raises(ValueError, match=r"packed documents \(segment_ids\) carry no retention state"):
        retention_chunkwise(q, k, v, torch.tensor([0.9, 0.8]), output_final_state=True,
                            segment_ids=torch.zeros(1, 5, dtype=torch.long))  # fmt: skip
