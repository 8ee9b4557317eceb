"""The fused masked attention against the explicit masked softmax, including queries that see no key."""

from __future__ import annotations

import math

import torch

from markovformer.ops.masked_softmax import masked_sdpa, masked_softmax


def test_masked_sdpa_equals_explicit_masked_softmax_and_zeroes_empty_rows():
    generator = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 5, 4, generator=generator, dtype=torch.float64)  # 5 queries
    k, v = (torch.randn(2, 3, 6, 4, generator=generator, dtype=torch.float64) for _ in range(2))  # over 6 keys
    allowed = torch.rand(2, 1, 5, 6, generator=generator) > 0.4
    allowed[0, 0, 2] = False  # a query with no visible key
    expected = masked_softmax(q @ k.transpose(-1, -2) / math.sqrt(4), allowed) @ v
    output = masked_sdpa(q, k, v, allowed)
    torch.testing.assert_close(output, expected)
    assert torch.equal(output[0, :, 2], torch.zeros(3, 4, dtype=torch.float64))
    assert torch.isfinite(output).all()
    everything = masked_softmax(q @ k.transpose(-1, -2) / 2.0, torch.ones(1, 1, 5, 6, dtype=torch.bool)) @ v
    torch.testing.assert_close(masked_sdpa(q, k, v, None), everything)


def test_a_row_whose_allowed_scores_are_all_minus_infinity_gets_zeros_not_the_masked_keys():
    """SPEC: no visible key -> zeros. Allowed scores of -inf leave no key to attend; the masked keys (here the
    future ones) must not take the row's mass."""
    scores = torch.tensor([[-math.inf, 1.0, 2.0], [-math.inf, 1.0, 2.0]])
    allowed = torch.tensor([[True, False, False], [True, True, False]])
    weights = masked_softmax(scores, allowed)
    assert torch.equal(weights[0], torch.zeros(3))
    torch.testing.assert_close(weights[1], torch.tensor([0.0, 1.0, 0.0]))
