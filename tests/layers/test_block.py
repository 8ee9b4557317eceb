"""The pre-LN block (x += Attn(LN1 x); x += W_gru GRU(x); x += FFN(LN2 x)) against its three residual updates
written out by hand."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers import GRUInjection, MarkovAttention, PreLNBlock, build_ffn
from markovformer.ops.segments import Segments

D_MODEL, HEADS = 16, 2


@pytest.mark.parametrize("ffn", ["swiglu", "gelu"])
@pytest.mark.parametrize("with_gru", [False, True])
def test_block_is_three_residual_updates(with_gru, ffn):
    torch.manual_seed(0)
    attention = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=2, window=2, causal=True)
    gru = GRUInjection(D_MODEL) if with_gru else None
    block = PreLNBlock(D_MODEL, attention, build_ffn(ffn, D_MODEL), gru).double().eval()
    with torch.no_grad():  # LayerNorm affine parameters away from (1, 0), so each norm's place matters
        for norm in (block.attention_norm, block.ffn_norm):
            norm.weight.normal_(1.0, 0.3)
            norm.bias.normal_(0.0, 0.3)
    x = torch.randn(2, 7, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    result = block(x, mask, return_gates=True)
    expected = x + attention(block.attention_norm(x), mask)
    if with_gru:
        expected = expected + gru(expected, mask)
    expected = expected + block.ffn(block.ffn_norm(expected))
    torch.testing.assert_close(result.output, expected, rtol=1e-12, atol=1e-12)
    assert set(result.gates) == {"past"}


def test_a_block_refuses_a_state_it_cannot_carry_naming_its_mixer():
    x = torch.randn(1, 4, D_MODEL)
    bidirectional = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=2, window=2, causal=False)
    block = PreLNBlock(D_MODEL, bidirectional, build_ffn("gelu", D_MODEL))
    with pytest.raises(ValueError, match="a block of MarkovAttention cannot decode incrementally"):
        block(x, state={})
    causal = PreLNBlock(D_MODEL, MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=2, window=2, causal=True),
                        build_ffn("gelu", D_MODEL))  # fmt: skip
    packed = Segments.from_positions(torch.tensor([[0, 1, 0, 1]]))
    with pytest.raises(ValueError, match=r"packed documents \(position_ids\) cannot be decoded incrementally"):
        causal(x, state={}, segments=packed)
