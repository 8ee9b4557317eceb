"""The stick-breaking layer against the paper's formula A_{t,j} = β_{t,j} Π_{j<l<t} (1 - β_{t,l}) written pair by
pair from the layer's own weights, on outputs and every gradient (global and windowed, padded, float64); incremental
decoding == full forward; bidirectional use refused; registry and per-layer config options."""

from __future__ import annotations

import math

import pytest
import torch
from decoding_twin import assert_decoding_matches_full_forward

from markovformer import MarkovianTransformerConfig
from markovformer.layers.registry import build_attention
from markovformer.layers.stick_breaking_attention import StickBreakingAttention

D_MODEL, HEADS, LENGTH = 8, 2, 9


def _formula(layer, x, mask, window):
    batch = x.shape[0]
    q, k, v = layer.qkv(x).view(batch, LENGTH, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
    beta = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]))
    real = mask.bool()[:, None]

    def takes(t, j):  # key j is in the query's reach and real
        return 0 <= t - j - 1 < (window if window is not None else LENGTH) and j >= 0

    rows = []
    for t in range(LENGTH):
        row = []
        for j in range(LENGTH):
            weight = beta[..., t, j] * real[..., j] if takes(t, j) else torch.zeros_like(beta[..., 0, 0])
            for later in range(j + 1, t):
                if takes(t, later):
                    weight = weight * (1 - beta[..., t, later] * real[..., later])
            row.append(weight)
        rows.append(torch.stack(row, -1))
    weights = torch.stack(rows, -2)
    return layer.out_proj((weights @ v).transpose(1, 2).reshape(batch, LENGTH, D_MODEL))


@pytest.mark.parametrize("window", [None, 3])
def test_layer_matches_the_papers_formula_on_outputs_and_all_gradients(window):
    torch.manual_seed(0)
    layer = StickBreakingAttention(d_model=D_MODEL, n_heads=HEADS, window=window).double()
    x = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(4, LENGTH, dtype=torch.long)
    mask[1, :3], mask[2, -3:], mask[3] = 0, 0, 0
    mask[0, 4] = 0  # a padded key in the middle: the stick passes it by
    upstream = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64)
    leaves = [x, *layer.parameters()]
    got, expected = layer(x, attention_mask=mask), _formula(layer, x, mask, window)
    torch.testing.assert_close(got, expected)
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    for index, (got_grad, expected_grad) in enumerate(zip(got_grads, expected_grads, strict=True)):
        torch.testing.assert_close(got_grad, expected_grad, msg=lambda m, i=index: f"leaf {i}: {m}")
    torch.testing.assert_close(layer(x, attention_mask=mask, return_weights=True).output, got)


@pytest.mark.parametrize(("window", "step", "attend_current"), [(None, 1, False), (None, 3, True), (3, 1, True)])
def test_incremental_decoding_matches_the_full_forward(window, step, attend_current):
    torch.manual_seed(1)
    layer = StickBreakingAttention(d_model=D_MODEL, n_heads=HEADS, window=window,
                                   attend_current=attend_current).double()  # fmt: skip
    x = torch.randn(3, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, :2] = 0
    assert layer.supports_state
    assert_decoding_matches_full_forward(layer, x, mask, prefill=4, step=step)


def test_bidirectional_is_refused_and_the_registry_builds_the_kind():
    with pytest.raises(ValueError, match="causal only"):
        StickBreakingAttention(d_model=D_MODEL, n_heads=HEADS, causal=False)
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    layer = build_attention("stick_breaking", **shared, scope="local", window=4, attend_current=True)
    assert layer.cores[0].window == 4 and layer.cores[0].attend_current
    config = MarkovianTransformerConfig(vocab_size=4, attention="stick_breaking", scope="local", window=6,
                                        position="none")  # fmt: skip
    assert config.layer_specs()[0].options["window"] == 6
    with pytest.raises(ValueError, match=r"attend_current=.yes."):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[{"kind": "stick_breaking",
                                                                         "attend_current": "yes"}])  # fmt: skip
