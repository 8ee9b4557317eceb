"""The CoPE layer (its op is pinned to the dense reference in tests/ops/test_cope_attention.py): incremental
decoding == full forward (global and windowed, padded), the inspection path == the fast path, bidirectional use
refused, registry and per-layer config options."""

from __future__ import annotations

import pytest
import torch
from decoding_twin import assert_decoding_matches_full_forward

from markovformer import MarkovianTransformerConfig
from markovformer.layers.cope_attention import CoPEAttention
from markovformer.layers.registry import build_attention

D_MODEL, HEADS, LENGTH = 8, 2, 9


@pytest.mark.parametrize(("window", "step"), [(None, 1), (None, 3), (3, 1)])
def test_incremental_decoding_matches_the_full_forward(window, step):
    torch.manual_seed(1)
    layer = CoPEAttention(d_model=D_MODEL, n_heads=HEADS, window=window, npos_max=4).double()
    x = torch.randn(3, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, :2] = 0
    assert layer.supports_state
    assert_decoding_matches_full_forward(layer, x, mask, prefill=4, step=step)
    full = layer(x, attention_mask=mask)
    torch.testing.assert_close(layer(x, attention_mask=mask, return_weights=True).output, full)


def test_bidirectional_is_refused_and_the_registry_builds_the_kind():
    with pytest.raises(ValueError, match="causal only"):
        CoPEAttention(d_model=D_MODEL, n_heads=HEADS, causal=False)
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    layer = build_attention("cope", **shared, scope="local", window=4, npos_max=10)
    assert layer.cores[0].window == 4 and layer.cores[0].position_embeddings.shape == (10, D_MODEL // HEADS)
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=1, position="none", attention=[
        {"kind": "cope", "npos_max": 16}])  # fmt: skip
    assert config.layer_specs()[0].options["npos_max"] == 16
    with pytest.raises(ValueError, match=r"attention\[0\]\.npos_max=1"):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[{"kind": "cope", "npos_max": 1}])
