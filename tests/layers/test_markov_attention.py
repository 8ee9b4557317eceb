"""MarkovAttention against softmax attention recomputed by hand from its own projections and the Markov bias; the
null gate slot switching the bias off; the local window's reach."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer.layers import MarkovAttention, SoftmaxAttention

D_MODEL, HEADS, ORDER, LENGTH = 16, 2, 3, 9
HEAD_DIM = D_MODEL // HEADS


def _layer(seed: int = 0, **options) -> MarkovAttention:
    torch.manual_seed(seed)
    options.setdefault("window", None if options.get("scope") == "global" else ORDER)
    layer = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, max_order=ORDER, **options).double().eval()
    with torch.no_grad():
        for theta in layer.markov_bias.theta.values():
            theta.normal_(0.0, 1.5)  # strong enough that a misplaced bias shows
    return layer


def _input(batch: int = 2, length: int = LENGTH, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, length, D_MODEL, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _spec_rotate(heads: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position by hand: each pair (2i, 2i+1) of a (B, H, T, Dh) query or key turned by pos / 10000^(2i/Dh)
    (the frequencies made in float32, as the layer makes them before its cast to float64)."""
    frequencies = (1.0 / 10000.0 ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM)).double()
    angle = positions.double()[:, None] * frequencies  # (T, Dh/2)
    out = torch.empty_like(heads)
    for i in range(HEAD_DIM // 2):
        even, odd, cos, sin = heads[..., 2 * i], heads[..., 2 * i + 1], angle[:, i].cos(), angle[:, i].sin()
        out[..., 2 * i], out[..., 2 * i + 1] = even * cos - odd * sin, even * sin + odd * cos
    return out


def _spec_gates(layer: MarkovAttention, x: torch.Tensor, q_raw: torch.Tensor, directions) -> dict:
    """The linear order gate by its formula: alpha_t = softmax(W u_t + b) over the K lags and the null slot, u_t the
    layer input x_t (token gate, one output per head) or the head's query projection q_t^(h) before any rotation
    (query gate, one map per head)."""
    gates = {}
    for direction in directions:
        (final,) = layer.markov_bias.gate_networks[direction]  # gate="linear": one map
        if layer.markov_bias.gate_input == "query":
            logits = torch.einsum("bhtd,hds->bhts", q_raw, final.weight) + final.bias[None, :, None, :]
        else:
            batch, length = x.shape[:2]
            logits = (x @ final.weight[0] + final.bias[0]).view(batch, length, HEADS, -1).transpose(1, 2)
        gates[direction] = torch.softmax(logits, dim=-1)
    return gates


def _spec_bias(gates, strengths, length: int, directions) -> torch.Tensor:
    """The Markov bias element by element: B[t, j] = sum_k alpha_{t,k} T_k [j = t - k] (+ the future term)."""
    batch, heads = gates["past"].shape[:2]
    bias = torch.zeros(batch, heads, length, length, dtype=torch.float64)
    for t in range(length):
        for lag in range(1, ORDER + 1):
            if "past" in directions and t - lag >= 0:
                bias[:, :, t, t - lag] += gates["past"][:, :, t, lag - 1] * strengths["past"][:, lag - 1]
            if "future" in directions and t + lag < length:
                bias[:, :, t, t + lag] += gates["future"][:, :, t, lag - 1] * strengths["future"][:, lag - 1]
    return bias


@pytest.mark.parametrize("rotary, gate_input", [(False, "token"), (True, "token"), (True, "query")])
@pytest.mark.parametrize("scope", ["global", "local"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_weights_equal_softmax_of_scores_plus_spec_bias(causal, scope, rotary, gate_input):
    """With rotary position the scores read the rotated q and k, and the query gate the query before rotation (Eq.
    23: a gate that read the rotated query would depend on the absolute position)."""
    window = 4 if scope == "local" else None
    layer = _layer(causal=causal, bidirectional=not causal, scope=scope, window=window, rotary=rotary,
                   gate_input=gate_input)  # fmt: skip
    x = _input()
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, 6:] = 0
    result = layer(x, mask, return_gates=True, return_weights=True)

    q_raw, k, v = layer.qkv(x).view(2, LENGTH, 3, HEADS, HEAD_DIM).permute(2, 0, 3, 1, 4)
    q = q_raw
    if rotary:
        q, k = _spec_rotate(q_raw, torch.arange(LENGTH)), _spec_rotate(k, torch.arange(LENGTH))
        assert not torch.allclose(q, q_raw, atol=1e-2)  # the rotation is live
    directions = ("past",) if causal else ("past", "future")
    gates = _spec_gates(layer, x, q_raw, directions)
    assert set(result.gates) == set(directions)
    for direction in directions:
        torch.testing.assert_close(result.gates[direction], gates[direction], rtol=1e-12, atol=1e-12)
    if gate_input == "query" and rotary:  # the check has power: gates of the rotated query differ
        rotated = _spec_gates(layer, x, q, directions)
        assert not torch.allclose(rotated["past"][:, :, 1:], gates["past"][:, :, 1:], atol=1e-3)
    bias = _spec_bias(gates, layer.markov_bias.transitions(), LENGTH, directions)

    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM) + bias
    positions = torch.arange(LENGTH)
    lag = positions[:, None] - positions[None, :]
    allowed = mask.bool()[:, None, None, :].expand(2, 1, LENGTH, LENGTH)
    if causal:
        allowed = allowed & (lag >= 0)
    if window is not None:
        allowed = allowed & (lag.abs() <= window)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    torch.testing.assert_close(result.weights, weights, rtol=1e-12, atol=1e-12)

    heads = (weights @ v).transpose(1, 2).reshape(2, LENGTH, D_MODEL)
    torch.testing.assert_close(result.output, layer.out_proj(heads), rtol=1e-12, atol=1e-12)
    # The fast path (banded for local scope) gives the same output as the weights path.
    torch.testing.assert_close(layer(x, mask), result.output, rtol=1e-10, atol=1e-10)
    # The bias matters here: without it the weights differ.
    plain = torch.softmax((scores - bias).masked_fill(~allowed, float("-inf")), dim=-1)
    assert not torch.allclose(plain, weights, atol=1e-3)


def _gate_on_null_slot(layer: MarkovAttention, gate_input: str) -> None:
    """Final gate layer weights 0 and bias -1e4 on every lag, +1e4 on the null slot."""
    null_logits = torch.tensor([-1e4] * ORDER + [1e4], dtype=torch.float64)
    with torch.no_grad():
        for network in layer.markov_bias.gate_networks.values():
            final = network[-1]
            final.weight.zero_()
            if gate_input == "query":  # one group per head, slots outputs each
                final.bias.copy_(null_logits.expand(HEADS, -1))
            else:  # one group, heads * slots outputs, head-major
                final.bias.copy_(null_logits.repeat(HEADS)[None])


@pytest.mark.parametrize("gate_input", ["token", "query"])
@pytest.mark.parametrize("scope", ["global", "local"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_null_slot_switches_the_bias_off(causal, scope, gate_input):
    window = LENGTH + 2 if scope == "local" else None
    layer = _layer(
        causal=causal, bidirectional=not causal, scope=scope, window=window, gate="mlp", gate_input=gate_input
    )
    torch.manual_seed(5)
    plain = SoftmaxAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal).double().eval()
    plain.qkv.load_state_dict(layer.qkv.state_dict())
    plain.out_proj.load_state_dict(layer.out_proj.state_dict())
    x = _input()
    assert not torch.allclose(layer(x), plain(x), atol=1e-4)  # the bias is live before the gate is forced

    _gate_on_null_slot(layer, gate_input)
    result = layer(x, return_gates=True)
    for alpha in result.gates.values():
        assert torch.equal(alpha[..., -1], torch.ones_like(alpha[..., -1]))
    torch.testing.assert_close(result.output, plain(x), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_local_scope_reaches_exactly_the_window(causal, window):
    length = 12
    layer = _layer(causal=causal, bidirectional=not causal, scope="local", window=window, gate_input="token")
    x = _input(batch=1, length=length)
    base = layer(x)
    for source in range(length):
        changed = x.clone()
        changed[0, source] += torch.randn(D_MODEL, generator=torch.Generator().manual_seed(source), dtype=x.dtype)
        moved = (layer(changed) - base).abs().amax(-1)[0]  # (T,)
        for t in range(length):
            lag = t - source
            inside = 0 <= lag <= window if causal else abs(lag) <= window
            if inside:
                assert moved[t] > 1e-8, (source, t)
            else:
                assert moved[t] < 1e-12, (source, t)


@pytest.mark.parametrize("scope", ["global", "local"])
def test_decoded_query_gates_read_the_unrotated_query_whatever_the_position(scope):
    """Decoding (a prefill, then one token per call) returns at every position the gates of the query before
    rotation, as the full forward does; so a token repeated at every position has the same gates at every one,
    though its rotated query turns with the position."""
    layer = _layer(scope=scope, window=None if scope == "global" else ORDER, gate_input="query")  # rotary by default
    assert layer.rotary is not None
    x = _input(batch=2, length=LENGTH)
    x[1] = x[1, :1]  # row 1: one token repeated
    state: dict = {}
    pieces = [layer(x[:, :3], state=state, return_gates=True).gates["past"]]
    pieces += [layer(x[:, t : t + 1], state=state, return_gates=True).gates["past"] for t in range(3, LENGTH)]
    decoded = torch.cat(pieces, dim=2)  # (B, H, T, K + 1)

    q_raw = layer.qkv(x).view(2, LENGTH, 3, HEADS, HEAD_DIM)[:, :, 0].transpose(1, 2)
    expected = _spec_gates(layer, x, q_raw, ("past",))["past"]
    torch.testing.assert_close(decoded, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer(x, return_gates=True).gates["past"], expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(decoded[1], decoded[1, :, :1].expand(-1, LENGTH, -1), rtol=1e-12, atol=1e-12)
