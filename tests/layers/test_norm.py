"""The norms of the pre-norm block by name (``layers.norm``): RMSNorm against its formula written out, alone and in
the block's two places; LayerNorm, the default, as before."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from markovformer.layers import MarkovAttention, PreLNBlock, build_ffn
from markovformer.layers.norm import NORM_EPS, build_norm

D_MODEL, HEADS = 16, 2


def _naive_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = NORM_EPS) -> torch.Tensor:
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def _away_from_ones(module: nn.Module) -> nn.Module:
    with torch.no_grad():  # each norm's scale off 1, so that a scale read in the wrong place shows
        for name, parameter in module.named_parameters():
            if "norm" in name:
                parameter.normal_(1.0, 0.3, generator=torch.Generator().manual_seed(len(name)))
    return module


@pytest.mark.parametrize("scale", [1e-3, 1.0, 30.0])
def test_rmsnorm_is_x_over_its_root_mean_square_plus_eps_times_its_weight(scale):
    """At scale 1e-3 the mean square (1e-6) is below eps (1e-5): an eps other than the documented one shows."""
    norm = _away_from_ones(nn.ModuleDict({"norm": build_norm("rmsnorm", D_MODEL)})).double()["norm"]
    x = scale * torch.randn(3, 5, D_MODEL, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    torch.testing.assert_close(norm(x), _naive_rms_norm(x, norm.weight), rtol=1e-12, atol=0)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]  # no bias, whatever ``bias`` says


def test_rmsnorm_ignores_bias_and_layernorm_keeps_it():
    """RMSNorm has no additive term to switch: ``bias=True`` builds the same RMSNorm as ``bias=False``."""
    for bias in (True, False):
        assert [name for name, _ in build_norm("rmsnorm", D_MODEL, bias).named_parameters()] == ["weight"]
        layer_norm = build_norm("layernorm", D_MODEL, bias)
        assert isinstance(layer_norm, nn.LayerNorm) and (layer_norm.bias is not None) == bias
        assert layer_norm.eps == NORM_EPS == 1e-5  # as before (torch's default); switching changes only the centring


@pytest.mark.parametrize("ffn", ["swiglu", "gelu"])
def test_a_block_with_rmsnorm_is_its_two_residual_updates_of_rms_normed_inputs(ffn):
    torch.manual_seed(0)
    attention = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=2, window=2, causal=True)
    block = PreLNBlock(D_MODEL, attention, build_ffn(ffn, D_MODEL), norm="rmsnorm")
    block = _away_from_ones(block).double().eval()
    x = torch.randn(2, 7, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0
    expected = x + attention(_naive_rms_norm(x, block.attention_norm.weight), mask)
    expected = expected + block.ffn(_naive_rms_norm(expected, block.ffn_norm.weight))
    torch.testing.assert_close(block(x, mask).output, expected, rtol=1e-12, atol=1e-12)


def test_a_block_keeps_layernorm_by_default():
    block = PreLNBlock(D_MODEL, MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=2, window=2),
                       build_ffn("gelu", D_MODEL))  # fmt: skip
    assert type(block.attention_norm) is type(block.ffn_norm) is nn.LayerNorm
