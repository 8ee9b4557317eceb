"""Rotary position embedding (relative property, the rotation itself) and SwiGLU against hand computations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from markovformer.layers import RotaryEmbedding, SwiGLU, build_ffn
from markovformer.layers.position import _pairs_view_as_complex


def test_rotary_scores_depend_only_on_the_offset():
    head_dim, length = 8, 24
    rotary = RotaryEmbedding(head_dim)
    g = torch.Generator().manual_seed(0)
    q0 = torch.randn(head_dim, generator=g, dtype=torch.float64)
    k0 = torch.randn(head_dim, generator=g, dtype=torch.float64)
    q = rotary(q0.expand(1, 1, length, head_dim))[0, 0]
    k = rotary(k0.expand(1, 1, length, head_dim))[0, 0]
    scores = q @ k.T  # scores[i, j] = rot_i(q0) . rot_j(k0)
    for offset in range(-length + 1, length):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[:1].expand_as(diagonal), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(torch.diagonal(scores, 0)[0], torch.diagonal(scores, 1)[0], atol=1e-3)
    # A rotation: norms are kept.
    torch.testing.assert_close(q.norm(dim=-1), q0.norm().expand(length), rtol=1e-6, atol=1e-6)


def test_rotary_rotates_each_pair_by_position_times_frequency():
    head_dim, length, base = 6, 5, 10000.0
    rotary = RotaryEmbedding(head_dim, base=base)
    x = torch.randn(2, 3, length, head_dim, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = rotary(x)
    for t in range(length):
        for pair in range(head_dim // 2):
            angle = t * base ** (-2 * pair / head_dim)
            even, odd = x[..., t, 2 * pair], x[..., t, 2 * pair + 1]
            torch.testing.assert_close(out[..., t, 2 * pair], even * math.cos(angle) - odd * math.sin(angle))
            torch.testing.assert_close(out[..., t, 2 * pair + 1], even * math.sin(angle) + odd * math.cos(angle))


def test_rotary_needs_even_head_dim():
    with pytest.raises(ValueError, match="7"):
        RotaryEmbedding(7)


@pytest.mark.parametrize("d_model, mult", [(16, 4), (24, 2)])
def test_swiglu_by_hand(d_model, mult):
    torch.manual_seed(0)
    ffn = SwiGLU(d_model, mult).double()
    hidden = math.ceil(int(2 * mult * d_model / 3) / 8) * 8  # 2/3 of mult * d_model, rounded up to 8
    assert ffn.down.weight.shape == (d_model, hidden)
    w1, w3 = ffn.gate_up.weight[:hidden], ffn.gate_up.weight[hidden:]
    w2 = ffn.down.weight
    x = torch.randn(2, 5, d_model, dtype=torch.float64)
    expected = (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T
    torch.testing.assert_close(ffn(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
def test_gelu_mlp_by_hand(bias):
    """SPEC 2.7's other FFN: W2 GELU(W1 x + b1) + b2, hidden width mult * d_model."""
    torch.manual_seed(0)
    ffn = build_ffn("gelu", 16, mult=3, bias=bias).double()
    assert ffn.up.weight.shape == (48, 16) and ffn.down.weight.shape == (16, 48)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    b1, b2 = (ffn.up.bias, ffn.down.bias) if bias else (0.0, 0.0)
    expected = F.gelu(x @ ffn.up.weight.T + b1) @ ffn.down.weight.T + b2
    torch.testing.assert_close(ffn(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["contiguous", "qkv_view", "expanded", "odd_stride"])
def test_rotary_complex_path_matches_the_pair_path_on_outputs_and_gradients(layout):
    """Every layout gets the pair formula, written out here on even/odd slices, on outputs and gradients; the
    pair-aligned float64 layouts take the complex-product path and the unaligned one the pair path."""
    head_dim, length = 8, 6
    rotary = RotaryEmbedding(head_dim)
    g = torch.Generator().manual_seed(0)
    if layout == "qkv_view":  # what attention passes: a permuted view of the fused projection
        x = torch.randn(2, length, 3, 2, head_dim, generator=g, dtype=torch.float64).permute(2, 0, 3, 1, 4)[0]
    elif layout == "expanded":
        x = torch.randn(1, 1, 1, head_dim, generator=g, dtype=torch.float64).expand(2, 2, length, head_dim)
    elif layout == "odd_stride":  # not pair-aligned: must take the pair path and still be right
        x = torch.randn(2, 2, length, head_dim + 1, generator=g, dtype=torch.float64)[..., :head_dim]
    else:
        x = torch.randn(2, 2, length, head_dim, generator=g, dtype=torch.float64)
    x = x.detach().requires_grad_()
    assert _pairs_view_as_complex(x) == (layout != "odd_stride")
    positions = torch.arange(3, 3 + length, dtype=torch.float32)[:, None] * rotary.inv_freq[None, :]
    cos, sin = positions.cos().double(), positions.sin().double()
    even, odd = x[..., 0::2], x[..., 1::2]
    expected = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    got = rotary(x, start=3)
    upstream = torch.randn(got.shape, generator=g, dtype=torch.float64)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    (grad_got,) = torch.autograd.grad((got * upstream).sum(), x)
    (grad_expected,) = torch.autograd.grad((expected * upstream).sum(), x)
    torch.testing.assert_close(grad_got, grad_expected, rtol=1e-12, atol=1e-12)


def test_rotary_layers_share_one_table_whose_rows_are_the_formula_near_and_beyond_its_end():
    """Every layer reads one table (a long decoding's memory does not grow with the depth), grown once to cover the
    positions asked for; its rows, and those past TABLE_POSITIONS (computed on the fly), equal the formula."""
    from markovformer.layers import position

    base = 1234.5  # a table of its own in this process
    layers = [RotaryEmbedding(8, base=base).double() for _ in range(3)]
    x = torch.randn(1, 2, 1, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    for start in (0, 700, RotaryEmbedding.TABLE_POSITIONS + 5):
        expected = layers[0]._at(x, torch.tensor([[start]]))  # cos and sin of position x frequency, no table
        for layer in layers:
            torch.testing.assert_close(layer(x, start=start), expected, rtol=1e-12, atol=1e-12)
    tables = [table for key, table in position._TABLES.items() if key[1] == tuple(layers[0].inv_freq.tolist())]
    assert len(tables) == 1 and tables[0][0].shape[0] == 701
    with torch.no_grad():  # frequencies edited in place (a context-extension scaling): that layer's rows follow them
        layers[1].inv_freq.mul_(0.5)
    torch.testing.assert_close(layers[1](x, start=700), layers[1]._at(x, torch.tensor([[700]])), rtol=1e-12,
                               atol=1e-12)  # fmt: skip
    assert not torch.allclose(layers[1](x, start=700), layers[0](x, start=700))


def test_an_unknown_ffn_kind_is_named():
    with pytest.raises(ValueError, match="ffn must be one of .*; got 'relu'"):
        build_ffn("relu", 8)


def test_the_default_position_extrapolates_a_local_model_reads_the_same_window_alike_at_any_position():
    """SPEC 2.7: the default position information extrapolates past the trained lengths. With the defaults (rotary,
    local scope) a token's logits depend on its last n_layers * window tokens alone, wherever they sit: the same 9
    tokens at positions 0..8 or 500..508 give the same logits at the last one (absolute positions would not)."""
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2)
    assert config.position == "rotary" and config.scope == "local"
    model = MarkovianTransformerForCausalLM(config).double().eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # away from the near-linear 0.02 init
    reach = config.n_layers * config.window
    g = torch.Generator().manual_seed(1)
    window = torch.randint(0, 11, (1, reach + 1), generator=g)
    far = torch.cat([torch.randint(0, 11, (1, 500), generator=g), window], dim=1)
    with torch.no_grad():
        near_logits, far_logits = model(window).logits[0, -1], model(far).logits[0, -1]
    assert near_logits.abs().max() > 1e-2
    torch.testing.assert_close(far_logits, near_logits, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("position", ["learned", "sinusoidal", "rotary", "none"])
def test_model_inputs_are_the_embedding_or_frame_projection_plus_the_additive_position(position):
    """SPEC 2.7: token ids go through an embedding, feature frames through a linear projection; learned absolute and
    sinusoidal positions are added to them (pe[t, 2i] = sin(t / 10000^(2i/D)), pe[t, 2i+1] = the cos), rotary and
    none add nothing (rotary acts inside attention)."""
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerModel

    d_model, length = 8, 5
    angle = torch.arange(length, dtype=torch.float64)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    sinusoid = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)
    for inputs in ({"vocab_size": 7}, {"vocab_size": None, "input_dim": 3}):
        torch.manual_seed(0)
        config = MarkovianTransformerConfig(**inputs, d_model=d_model, n_layers=1, n_heads=2, position=position,
                                            max_positions=16 if position == "learned" else None, causal=False)
        model = MarkovianTransformerModel(config).double()
        g = torch.Generator().manual_seed(1)
        if config.vocab_size:
            given = {"input_ids": torch.randint(0, 7, (2, length), generator=g)}
            expected = model.embed.weight[given["input_ids"]]
        else:
            given = {"input_features": torch.randn(2, length, 3, generator=g, dtype=torch.float64)}
            expected = given["input_features"] @ model.embed.weight.T + model.embed.bias
        if position == "learned":
            expected = expected + model.position_embedding.weight[:length]
        elif position == "sinusoidal":
            expected = expected + sinusoid
        torch.testing.assert_close(model.embed_inputs(**given), expected, rtol=1e-6, atol=1e-6)
