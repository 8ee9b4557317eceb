"""ALiBi, FoX (forgetting) and sliding-window attention layers against dense references written from their papers'
formulas, on outputs and the gradients of the input and every parameter (causal, padded, float64)."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer import MarkovianTransformerConfig
from markovformer.layers.decay_attention import AlibiAttention, ForgettingAttention, alibi_slopes
from markovformer.layers.registry import build_attention

D_MODEL, HEADS, LENGTH = 8, 2, 10


def mixed_mask(length: int) -> torch.Tensor:
    """(4, T) rows: no padding, left padding, right padding, everything padded."""
    mask = torch.ones(4, length, dtype=torch.long)
    mask[1, :3], mask[2, -3:], mask[3] = 0, 0, 0
    return mask


def _dense_reference(layer, x, mask, bias, window):
    """The layer's attention from its own weights with a dense (B, H, T, T) ``bias``: softmax over keys j <= t
    (and t - j <= window), real keys only, rows without keys give 0. Returns the output and the softmax weights."""
    batch = x.shape[0]
    q, k, v = layer.qkv(x).view(batch, LENGTH, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    lag = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]
    allowed = (lag >= 0) & (lag <= (window if window is not None else LENGTH))
    allowed = allowed[None, None] & mask.bool()[:, None, None, :]
    weights = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1).nan_to_num(0.0)
    heads = (weights @ v).transpose(1, 2).reshape(batch, LENGTH, D_MODEL)
    return layer.out_proj(heads), weights


def _alibi_bias(layer, x):
    distance = (torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]).abs().to(x.dtype)
    return -alibi_slopes(HEADS).to(x.dtype)[:, None, None] * distance


def _forgetting_bias(layer, x):
    gate = torch.sigmoid(layer.cores[0].forget_gate(x)).transpose(1, 2)  # (B, H, T): f_t
    bias = torch.zeros(*gate.shape, LENGTH, dtype=x.dtype)
    for t in range(LENGTH):
        for j in range(t):  # D_{t,j} = log prod_{l=j+1..t} f_l
            bias[..., t, j] = torch.log(torch.prod(gate[..., j + 1 : t + 1], dim=-1))
    return bias



CASES = {
    "alibi": (AlibiAttention, _alibi_bias),
    "forgetting": (ForgettingAttention, _forgetting_bias),
}


@pytest.mark.parametrize("kind", list(CASES))
@pytest.mark.parametrize("window", [None, 3])
def test_layer_matches_dense_reference_on_outputs_and_all_gradients(kind, window):
    cls, bias_of = CASES[kind]
    torch.manual_seed(0)
    layer = cls(d_model=D_MODEL, n_heads=HEADS, causal=True, window=window, rotary=False).double()
    x = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64, requires_grad=True)
    mask = mixed_mask(LENGTH)
    upstream = torch.randn(4, LENGTH, D_MODEL, dtype=torch.float64)
    leaves = [x, *layer.parameters()]

    got = layer(x, attention_mask=mask)
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    expected, expected_weights = _dense_reference(layer, x, mask, bias_of(layer, x), window)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    torch.testing.assert_close(got, expected)
    for index, (got_grad, expected_grad) in enumerate(zip(got_grads, expected_grads, strict=True)):
        torch.testing.assert_close(got_grad, expected_grad, msg=lambda m, i=index: f"leaf {i}: {m}")
    inspected = layer(x, attention_mask=mask, return_weights=True)  # the inspection path agrees
    torch.testing.assert_close(inspected.output, expected)
    torch.testing.assert_close(inspected.weights, expected_weights)


def test_forget_gate_depends_on_the_token_and_alibi_does_not():
    torch.manual_seed(0)
    x = torch.randn(1, LENGTH, D_MODEL)
    fox = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS).cores[0].log_forget(x, HEADS)
    alibi = AlibiAttention(d_model=D_MODEL, n_heads=HEADS).cores[0].log_forget(x, HEADS)
    assert fox.std(-1).min() > 0 and torch.all(fox <= 0)
    torch.testing.assert_close(alibi[0, :, 0], -alibi_slopes(HEADS))
    assert alibi.std(-1).max() == 0


def _papers_slopes(heads: int) -> list[float]:
    """ALiBi's slopes as Press et al. (ICLR 2022, section 3; their reference code's ``get_slopes``) describe them:
    for n heads, n a power of two, the geometric sequence that starts at 2^(-8/n) and has that ratio; for any other
    n, the slopes of the closest power of two below n, then every other slope (the first, third, ...) of the
    sequence for twice that power, until there are n."""

    def geometric(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start * start**i for i in range(n)]

    power = 1
    while power * 2 <= heads:
        power *= 2
    return geometric(power) + geometric(2 * power)[0::2][: heads - power]


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 8, 12, 16, 24, 112])
def test_alibi_slopes_are_the_papers_for_every_head_count(heads):
    """The paper's sequence for a power of two is 2^(-8h/H); for other H the old code used that too (6 heads:
    0.397, 0.157, 0.0625, ... instead of the paper's 0.25, 0.0625, 0.0156, 0.0039, 0.5, 0.125)."""
    torch.testing.assert_close(alibi_slopes(heads), torch.tensor(_papers_slopes(heads)))
    if heads & (heads - 1) == 0:  # a power of two: the very numbers computed before the fix
        assert torch.equal(alibi_slopes(heads), 2.0 ** (-8.0 * torch.arange(1, heads + 1) / heads))


def test_registry_and_config_build_the_kinds_with_their_scope():
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    assert build_attention("alibi", **shared, window=None).cores[0].window is None
    assert build_attention("forgetting", **shared, scope="local", window=5).cores[0].window == 5
    with pytest.raises(ValueError, match="needs a window"):
        MarkovianTransformerConfig(vocab_size=4, attention="alibi", scope="local")


def test_a_fox_model_keeps_the_forget_gates_documented_start():
    """The model's init (normal weights, zero biases for every linear layer) must leave the forget gate's biases at
    1..5 across heads (f from 0.73 to 0.99): zeroed, every head would start at f = 0.5, attending a few tokens back."""
    from markovformer import MarkovianTransformerForCausalLM

    config = MarkovianTransformerConfig(vocab_size=11, d_model=32, n_layers=2, n_heads=4, attention="forgetting",
                                        position="none")  # fmt: skip
    model = MarkovianTransformerForCausalLM(config)
    gates = [block.attention.cores[0].forget_gate for block in model.model.blocks]
    assert len(gates) == 2
    for gate in gates:
        torch.testing.assert_close(gate.bias.detach(), torch.linspace(1.0, 5.0, 4))
        assert gate.weight.std().item() == pytest.approx(0.02, rel=0.3)

