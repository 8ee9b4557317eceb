"""T5 bucket bias and dynamic position bias layers against dense references written from their definitions (the
bias of each (query, key) pair looked up one by one), on outputs and the gradients of the input and every
parameter; causal and bidirectional, global and windowed, padded (float64); incremental decoding == full forward."""

from __future__ import annotations

import math

import pytest
import torch
from decoding_twin import assert_decoding_matches_full_forward

from markovformer import MarkovianTransformerConfig
from markovformer.layers.position_bias_attention import DynamicBiasAttention, T5BiasAttention
from markovformer.layers.registry import build_attention
from markovformer.ops.relative_bias_attention.buckets import t5_buckets

D_MODEL, HEADS, LENGTH = 8, 2, 10


def mixed_mask(length: int) -> torch.Tensor:
    """(4, T) rows: no padding, left padding, right padding, everything padded."""
    mask = torch.ones(4, length, dtype=torch.long)
    mask[1, :3], mask[2, -3:], mask[3] = 0, 0, 0
    return mask


def _t5_bias(layer, t, j):
    core = layer.cores[0].lag_bias
    bucket = t5_buckets(torch.tensor(t - j), core.num_buckets, core.max_distance, core.bidirectional)
    return core.table[:, bucket]


def _dynamic_bias(layer, t, j):
    mlp = layer.cores[0].lag_bias.mlp
    distance = torch.tensor([[math.copysign(math.log1p(abs(t - j)), t - j)]], dtype=torch.float64)
    return mlp(distance)[0]


CASES = {
    "t5_bias": (lambda **o: T5BiasAttention(num_buckets=8, max_distance=6, **o), _t5_bias),
    "dynamic_bias": (DynamicBiasAttention, _dynamic_bias),
}


def _dense_reference(layer, x, mask, causal, window):
    batch = x.shape[0]
    q, k, v = layer.qkv(x).view(batch, LENGTH, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
    rows = []
    for t in range(LENGTH):
        row = [_bias_of(layer)(layer, t, j) for j in range(LENGTH)]
        rows.append(torch.stack(row, dim=-1))
    bias = torch.stack(rows, dim=-2)  # (H, T, T)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    lag = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]
    allowed = lag.abs() <= (window if window is not None else LENGTH)
    if causal:
        allowed = allowed & (lag >= 0)
    allowed = allowed[None, None] & mask.bool()[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0)
    return layer.out_proj((weights @ v).transpose(1, 2).reshape(batch, LENGTH, D_MODEL))


def _bias_of(layer):
    return _t5_bias if isinstance(layer, T5BiasAttention) else _dynamic_bias


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 3])
def test_layer_matches_dense_reference_on_outputs_and_all_gradients(kind, causal, window):
    build, _ = CASES[kind]
    torch.manual_seed(0)
    layer = build(d_model=D_MODEL, n_heads=HEADS, causal=causal, window=window).double()
    x = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64, requires_grad=True)
    mask = mixed_mask(LENGTH)
    upstream = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64)
    leaves = [x, *layer.parameters()]
    got = layer(x, attention_mask=mask)
    expected = _dense_reference(layer, x, mask, causal, window)
    torch.testing.assert_close(got, expected)
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    for index, (got_grad, expected_grad) in enumerate(zip(got_grads, expected_grads, strict=True)):
        torch.testing.assert_close(got_grad, expected_grad, msg=lambda m, i=index: f"leaf {i}: {m}")
    weights = layer(x, attention_mask=mask, return_weights=True)  # the inspection path agrees
    torch.testing.assert_close(weights.output, got)


def test_t5_buckets_split_by_sign_only_when_bidirectional():
    assert not T5BiasAttention(d_model=D_MODEL, n_heads=HEADS, causal=True).cores[0].lag_bias.bidirectional
    assert T5BiasAttention(d_model=D_MODEL, n_heads=HEADS, causal=False).cores[0].lag_bias.bidirectional


@pytest.mark.parametrize("kind", list(CASES))
# several new positions per call only in global scope: the rolling cache of a local kind (layers.kv_cache) keeps
# W + 1 slots, so the first of two new queries loses its oldest key (softmax's local scope alike)
@pytest.mark.parametrize(("window", "step"), [(None, 1), (None, 2), (3, 1)])
def test_incremental_decoding_matches_the_full_forward(kind, window, step):
    build, _ = CASES[kind]
    torch.manual_seed(1)
    layer = build(d_model=D_MODEL, n_heads=HEADS, causal=True, window=window).double().eval()
    x = torch.randn(3, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, :2] = 0  # left padding
    assert layer.supports_state
    assert_decoding_matches_full_forward(layer, x, mask, prefill=4, step=step)
    assert_decoding_matches_full_forward(layer, x, None, prefill=1, step=step)


def test_registry_and_config_build_the_kinds_with_their_options():
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    layer = build_attention("t5_bias", **shared, scope="local", window=5, num_buckets=16, max_distance=64)
    assert layer.cores[0].window == 5 and layer.cores[0].lag_bias.table.shape == (HEADS, 16)
    layer = build_attention("dynamic_bias", **shared, bias_hidden=7, bias_depth=3)
    assert layer.cores[0].window is None and layer.cores[0].lag_bias.mlp[0].out_features == 7
    assert len(layer.cores[0].lag_bias.mlp) == 7  # 3 x (Linear, SiLU) + Linear
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=2, position="none", attention=[
        {"kind": "t5_bias", "num_buckets": 8, "max_distance": 16}, "dynamic_bias"])  # fmt: skip
    assert config.layer_specs()[0].options["num_buckets"] == 8
    with pytest.raises(ValueError, match=r"attention\[0\]\.max_distance=4: must exceed"):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[
            {"kind": "t5_bias", "num_buckets": 8, "max_distance": 4}])  # fmt: skip
    with pytest.raises(ValueError, match=r"bias_depth=0"):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[{"kind": "dynamic_bias", "bias_depth": 0}])


def test_the_config_checks_t5_buckets_for_its_own_causality():
    """Bidirectional buckets are split by sign: 3 leave one per direction (refused by the config, naming the layer's
    option, not later by the layer naming none), while max_distance only has to exceed the exact buckets of one
    direction (num_buckets // 2 // 2), so 32 buckets reaching 16 are a valid non-causal T5 bias and a causal error."""
    with pytest.raises(ValueError, match=r"^MarkovianTransformerConfig\.attention\[0\]\.num_buckets=3: bidirectional"):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, causal=False,
                                   attention=[{"kind": "t5_bias", "num_buckets": 3}])  # fmt: skip
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=1, causal=False,
                                        attention=[{"kind": "t5_bias", "num_buckets": 32, "max_distance": 16}])
    assert config.layer_specs()[0].options["max_distance"] == 16
    with pytest.raises(ValueError, match=r"attention\[0\]\.max_distance=16: must exceed num_buckets // 2 = 16"):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1,
                                   attention=[{"kind": "t5_bias", "num_buckets": 32, "max_distance": 16}])


def test_t5_bias_states_its_departures_from_t5_and_they_hold():
    """T5 shares one bucket table, learned in a stack's first layer, with every layer, and leaves q·k unscaled; here
    each layer has its own table and the logits are q·k/√Dh + b (the dense reference above): the docstring says
    both (it said neither, so a reader comparing with HF's T5Attention would count one table)."""
    import markovformer.layers.position_bias_attention as module
    from markovformer import MarkovianTransformerForCausalLM
    from markovformer.layers.position_bias_attention import T5Bias

    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=2,
                                                                       attention="t5_bias"))  # fmt: skip
    tables = [m.table for m in model.modules() if isinstance(m, T5Bias)]
    assert len(tables) == 2 and tables[0] is not tables[1]
    doc = " ".join(module.__doc__.split())
    assert "every layer learns its own table" in doc and "q·k/√Dh + b" in doc
