"""FoX Pro (the Forgetting Transformer's "Pro" block as options of kind "forgetting"): the layer with QK-norm and the
key/value token shift, and with all four parts on, against the paper's formulas written position by position from
the layer's own weights (outputs and gradients); each part changes the output (it is wired); with all four on,
incremental decoding == full forward (the shift's previous token is part of the state); the registry passes the
options through."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from decoding_twin import assert_decoding_matches_full_forward

from markovformer import MarkovianTransformerConfig
from markovformer.layers.decay_attention import PRO_PARTS, ForgettingAttention
from markovformer.layers.registry import build_attention

D_MODEL, HEADS, LENGTH = 8, 2, 7
ALL_ON = dict.fromkeys(PRO_PARTS, True)


def _randomise(layer):
    """Move every Pro parameter off its initial value, so an unwired scale would show."""
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, parameter in layer.named_parameters():
            if "norm" in name or "shift" in name or "gate" in name:
                parameter.copy_(torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))


def _by_hand(layer, x):
    """Token shift, QK-norm, FoX attention and, when the layer has them, the output norm (RMSNorm of each head's
    output times its scale) and then the output gate sigmoid(x_t W_G) on it, before W_O: one position and one head at
    a time (global, no padding)."""
    core = layer.cores[0]
    dh = D_MODEL // HEADS
    q, k, v = layer.qkv(x).view(1, LENGTH, 3, HEADS, dh).unbind(2)  # (1, T, H, Dh) each
    alpha = torch.sigmoid(x @ core.kv_shift.weight.T)[0]  # (T, 2H)
    log_f = F.logsigmoid(x @ core.forget_gate.weight.T + core.forget_gate.bias)[0]  # (T, H)
    out = torch.zeros(LENGTH, D_MODEL, dtype=x.dtype)
    for h in range(HEADS):
        keys, values = [], []
        for t in range(LENGTH):
            k_prev = k[0, t - 1, h] if t > 0 else torch.zeros(dh, dtype=x.dtype)
            v_prev = v[0, t - 1, h] if t > 0 else torch.zeros(dh, dtype=x.dtype)
            key = alpha[t, h] * k_prev + (1 - alpha[t, h]) * k[0, t, h]
            values.append(alpha[t, HEADS + h] * v_prev + (1 - alpha[t, HEADS + h]) * v[0, t, h])
            keys.append(key / torch.sqrt((key**2).mean() + 1e-6) * core.k_norm[h])
        for t in range(LENGTH):
            query = q[0, t, h] / torch.sqrt((q[0, t, h] ** 2).mean() + 1e-6) * core.q_norm[h]
            scores = torch.stack([query @ keys[j] / math.sqrt(dh) + log_f[j + 1 : t + 1, h].sum()
                                  for j in range(t + 1)])  # fmt: skip
            head = torch.softmax(scores, 0) @ torch.stack(values[: t + 1])
            if core.output_norm is not None:
                head = head / torch.sqrt((head**2).mean() + 1e-6) * core.output_norm[h]
            if core.output_gate is not None:
                head = head * torch.sigmoid(x[0, t] @ core.output_gate.weight[h * dh : (h + 1) * dh].T)
            out[t, h * dh : (h + 1) * dh] = head
    return out[None] @ layer.out_proj.weight.T


@pytest.mark.parametrize("parts", [dict(qk_norm=True, kv_shift=True), ALL_ON], ids=["shift_and_qk_norm", "all_on"])
def test_the_pro_parts_match_the_papers_formulas(parts):
    torch.manual_seed(0)
    layer = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, **parts).double()
    _randomise(layer)
    x = torch.randn(1, LENGTH, D_MODEL, dtype=torch.float64, requires_grad=True)
    got, want = layer(x), _by_hand(layer, x)
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    leaves = [x, *layer.parameters()]
    upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    got_grads = torch.autograd.grad((got * upstream).sum(), leaves)
    want_grads = torch.autograd.grad((want * upstream).sum(), leaves)
    for got_grad, want_grad in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("part", PRO_PARTS)
def test_each_part_changes_the_output(part):
    torch.manual_seed(1)
    plain = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS).double()
    with_part = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, **{part: True}).double()
    missing, unexpected = with_part.load_state_dict(plain.state_dict(), strict=False)
    assert not unexpected and missing  # the part brings its own parameters, the rest is shared
    x = torch.randn(2, LENGTH, D_MODEL, dtype=torch.float64)
    assert (with_part(x) - plain(x)).abs().max() > 1e-3


@pytest.mark.parametrize(("window", "step"), [(None, 1), (None, 3), (3, 1), (2, 2)])
def test_all_parts_on_decode_as_the_full_forward(window, step):
    torch.manual_seed(2)
    layer = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, window=window, **ALL_ON).double()
    _randomise(layer)
    x = torch.randn(3, LENGTH + 4, D_MODEL, dtype=torch.float64)
    mask = torch.ones(3, LENGTH + 4, dtype=torch.long)
    mask[1, :2] = 0
    mask[2, 4] = 0  # a padded token in the middle passes on zeros to the shift, in both paths
    assert layer.supports_state
    assert_decoding_matches_full_forward(layer, x, mask, prefill=4, step=step)


def test_a_left_padded_row_shifts_and_decodes_as_it_does_alone():
    """The shift passes on zeros from padding: a row left-padded by 2 gives, at its real tokens, what the row gives
    alone, in the full forward and decoded from a prefill of padding only (the twin above cannot see this: a shift
    that read padding would do so in both paths)."""
    torch.manual_seed(2)
    layer = ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, **ALL_ON).double()
    _randomise(layer)
    x = torch.randn(2, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, :2] = 0

    state: dict = {}
    decoded = torch.cat([layer(x[:, :2], attention_mask=mask[:, :2], state=state)]  # row 1: padding only
                        + [layer(x[:, t : t + 1], attention_mask=mask[:, t : t + 1], state=state)
                           for t in range(2, LENGTH)], dim=1)  # fmt: skip
    alone = layer(x[1:, 2:])
    torch.testing.assert_close(layer(x, attention_mask=mask)[1, 2:], alone[0], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(decoded[1, 2:], alone[0], rtol=1e-10, atol=1e-10)


def test_registry_and_config_take_the_pro_options():
    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False)
    layer = build_attention("forgetting", **shared, **ALL_ON)
    core = layer.cores[0]
    assert core.output_gate is not None and core.q_norm is not None and core.kv_shift is not None
    assert build_attention("forgetting", **shared).cores[0].kv_shift is None
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=1, position="none",
                                        attention=[{"kind": "forgetting", "qk_norm": True}])  # fmt: skip
    assert config.layer_specs()[0].options["qk_norm"] is True
    with pytest.raises(ValueError, match=r"kv_shift=.on."):
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, attention=[{"kind": "forgetting", "kv_shift": "on"}])
    with pytest.raises(ValueError, match=r"attention\[0\]\.kv_shift=True: .*set causal=True"):  # by the config
        MarkovianTransformerConfig(vocab_size=4, n_layers=1, causal=False,
                                   attention=[{"kind": "forgetting", "kv_shift": True}])  # fmt: skip
    with pytest.raises(ValueError, match="causal=True"):
        ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, causal=False, kv_shift=True)(torch.randn(1, 3, D_MODEL))
    with pytest.raises(ValueError, match=r"unknown FoX Pro parts \['k_shift'\]; expected some of"):
        ForgettingAttention(d_model=D_MODEL, n_heads=HEADS, k_shift=True)
