"""The selective-attention layer: the paper's pseudo-code written out from the layer's own weights (head 0's causal
logits, ReLU, no self- or BOS-masking, shifted one query down, cumulative sum, subtracted from every head) on
outputs and every gradient; incremental decoding == full forward (the running selection per key is the state);
bidirectional use refused; registry and config options."""

from __future__ import annotations

import math

import pytest
import torch
from decoding_twin import assert_decoding_matches_full_forward

from markovformer import MarkovianTransformerConfig
from markovformer.layers.registry import build_attention
from markovformer.layers.selective_attention import SelectiveAttention

D_MODEL, HEADS, LENGTH = 8, 2, 9


def _pseudo_code(layer, x):
    """The paper's listing (no padding, global scope)."""
    batch = x.shape[0]
    q, k, v = layer.qkv(x).view(batch, LENGTH, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
    causal = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()
    logits = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~causal, -math.inf)
    s = torch.relu(logits[:, 0].masked_fill(~causal, 0.0))
    s = s * torch.cat([torch.zeros(1), torch.ones(LENGTH - 1)]).to(s)  # do not mask the first token
    s = s * (1 - torch.eye(LENGTH, dtype=s.dtype))  # a token does not mask itself
    s = torch.roll(s, 1, dims=-2)
    s[..., 0, :] = 0  # mask strictly in the future
    weights = torch.softmax(logits - s.cumsum(-2)[:, None], dim=-1)
    return layer.out_proj((weights @ v).transpose(1, 2).reshape(batch, LENGTH, D_MODEL))


def test_layer_matches_the_papers_pseudo_code_on_outputs_and_all_gradients():
    torch.manual_seed(0)
    layer = SelectiveAttention(d_model=D_MODEL, n_heads=HEADS).double()
    x = torch.randn(3, LENGTH, D_MODEL, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(3, LENGTH, D_MODEL, dtype=torch.float64)
    leaves = [x, *layer.parameters()]
    got, expected = layer(x), _pseudo_code(layer, x)
    torch.testing.assert_close(got, expected)
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    for index, (got_grad, expected_grad) in enumerate(zip(got_grads, expected_grads, strict=True)):
        torch.testing.assert_close(got_grad, expected_grad, msg=lambda m, i=index: f"leaf {i}: {m}")
    torch.testing.assert_close(layer(x, return_weights=True).output, got)


@pytest.mark.parametrize(("window", "step", "rotary"), [(None, 1, False), (None, 3, True), (3, 1, False),
                                                         (2, 2, True)])  # fmt: skip
def test_incremental_decoding_matches_the_full_forward(window, step, rotary):
    torch.manual_seed(1)
    layer = SelectiveAttention(d_model=D_MODEL, n_heads=HEADS, window=window, rotary=rotary).double()
    x = torch.randn(3, LENGTH + 4, D_MODEL, dtype=torch.float64)
    mask = torch.ones(3, LENGTH + 4, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, 5] = 0
    assert layer.supports_state
    assert_decoding_matches_full_forward(layer, x, mask, prefill=4, step=step)


def test_bidirectional_is_refused_and_the_registry_builds_the_kind():
    with pytest.raises(ValueError, match="causal only"):
        SelectiveAttention(d_model=D_MODEL, n_heads=HEADS, causal=False)
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    layer = build_attention("selective", **shared, scope="local", window=4, protect_first=False)
    assert layer.cores[0].window == 4 and not layer.cores[0].protect_first
    config = MarkovianTransformerConfig(vocab_size=4, attention="selective", scope="local", window=6)
    assert config.layer_specs()[0].options["window"] == 6
    with pytest.raises(ValueError, match=r"protect_first=.no."):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[{"kind": "selective",
                                                                         "protect_first": "no"}])  # fmt: skip


@pytest.mark.parametrize("attention", [
    [{"kind": "selective", "scope": "local", "window": 3}, {"kind": "selective", "protect_first": False}],
    [{"kind": "forgetting", "output_gate": True, "output_norm": True, "qk_norm": True, "kv_shift": True},
     {"kind": "selective"}],
])  # fmt: skip
def test_a_model_of_these_kinds_decodes_token_by_token_as_its_full_forward(attention):
    """The model-level contract (``forward(..., state=s)``): a prompt, then one token per call, gives the full
    forward's logits at every position (selective's running selection and FoX Pro's token shift included)."""
    from markovformer import MarkovianTransformerForCausalLM

    torch.manual_seed(3)
    config = MarkovianTransformerConfig(vocab_size=7, d_model=16, n_layers=2, n_heads=2, attention=attention)
    model = MarkovianTransformerForCausalLM(config).double().eval()
    assert model.model.decodes_incrementally
    ids = torch.randint(0, 7, (2, 12))
    with torch.no_grad():
        full = model(ids).logits
        state: dict = {}
        pieces = [model(ids[:, :5], state=state).logits]
        pieces += [model(ids[:, t : t + 1], state=state).logits for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), full)
