"""RetNet, RWKV-4 time mixing and Hyena written out by hand from their modules' docstrings (the papers' equations),
one position (and head, channel or lag) at a time from the layer's own weights, against the layer's output and the
gradients of its input and every parameter (float64, tight tolerances), and against a causal layer's incremental
decoding. test_baselines.py checks each layer's forms against each other; these pin the formulas themselves."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer.layers.baselines import HyenaMixer, RetNetAttention
from markovformer.layers.baselines.rwkv import RWKVTimeMix

D_MODEL, HEADS, LENGTH = 8, 2, 7


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _assert_same_outputs_and_gradients(got: torch.Tensor, want: torch.Tensor, inputs: list[torch.Tensor]) -> None:
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    upstream = _randn(*got.shape, seed=9)
    got_grads = torch.autograd.grad((got * upstream).sum(), inputs)
    want_grads = torch.autograd.grad((want * upstream).sum(), inputs)
    for index, (got_grad, want_grad) in enumerate(zip(got_grads, want_grads, strict=True)):
        torch.testing.assert_close(got_grad, want_grad, rtol=1e-8, atol=1e-10, msg=lambda m, i=index: f"input {i}: {m}")


def _decoded(layer: torch.nn.Module, x: torch.Tensor, ends: tuple[int, ...]) -> torch.Tensor:
    """The layer's incremental decoding of x in pieces ending at ``ends`` (a prefill, then single tokens)."""
    state: dict = {}
    with torch.no_grad():
        return torch.cat([layer(x[:, a:b], state=state) for a, b in zip((0, *ends), ends, strict=False)], dim=1)


# --- RetNet ----------------------------------------------------------------------------------------------------------


def _retnet_by_hand(layer: RetNetAttention, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-scale retention (Sun et al. 2023 §2.1-2.2) per head h, query n and key m: q, k, v = x W_QKV, rotated
    pair by pair by angle n θ_i (θ_i the rotary frequencies), k / √Dh, γ_h = 1 - 2^{-5-h},
    o_n = Σ_m γ^{|n-m|} (q_n · k_m) v_m over m <= n (all m when non-causal), LayerNorm of o_n over the head's Dh
    channels (eps 1e-5) with the head's weight and bias, times swish(x_n W_G), then W_O. Returns the output and the
    retention weights γ^{|n-m|} q_n · k_m."""
    core = layer.cores[0]
    batch, length, _ = x.shape
    dh = D_MODEL // HEADS
    q, k, v = (x @ layer.qkv.weight.T).view(batch, length, 3, HEADS, dh).unbind(2)  # (B, T, H, Dh) each
    theta = layer.rotary.inv_freq  # (Dh/2,)
    rotated = []
    for u in (q, k):
        turned = torch.zeros_like(u)
        for n in range(length):
            for i in range(dh // 2):
                cos, sin = torch.cos(n * theta[i]), torch.sin(n * theta[i])
                even, odd = u[:, n, :, 2 * i], u[:, n, :, 2 * i + 1]
                turned[:, n, :, 2 * i] = even * cos - odd * sin
                turned[:, n, :, 2 * i + 1] = even * sin + odd * cos
        rotated.append(turned)
    q, k = rotated[0], rotated[1] / math.sqrt(dh)
    swish = x @ core.gate.weight.T
    swish = swish * torch.sigmoid(swish)
    heads = torch.zeros(batch, length, D_MODEL, dtype=x.dtype)
    weights = torch.zeros(batch, HEADS, length, length, dtype=x.dtype)
    for h in range(HEADS):
        gamma = 1 - 2.0 ** (-5 - h)
        part = slice(h * dh, (h + 1) * dh)
        for n in range(length):
            o = torch.zeros(batch, dh, dtype=x.dtype)
            for m in range(length if not layer.cores[0].causal else n + 1):
                score = gamma ** abs(n - m) * (q[:, n, h] * k[:, m, h]).sum(-1)
                weights[:, h, n, m] = score.detach()
                o = o + score[:, None] * v[:, m, h]
            mean = o.mean(-1, keepdim=True)
            variance = ((o - mean) ** 2).mean(-1, keepdim=True)
            normed = (o - mean) / torch.sqrt(variance + 1e-5) * core.norm_weight[h, 0] + core.norm_bias[h, 0]
            heads[:, n, part] = normed * swish[:, n, part]
    return heads @ layer.out_proj.weight.T, weights


@pytest.mark.parametrize("form", ["parallel", "recurrent", "chunkwise"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_retnet_layer_is_multi_scale_retention_by_hand(causal, form):
    torch.manual_seed(0)
    layer = RetNetAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, chunk_size=3, form=form).double()
    with torch.no_grad():  # off their initial ones and zeros, so an unwired norm weight or bias would show
        layer.cores[0].norm_weight.copy_(1 + 0.5 * _randn(*layer.cores[0].norm_weight.shape, seed=2))
        layer.cores[0].norm_bias.copy_(0.5 * _randn(*layer.cores[0].norm_bias.shape, seed=3))
    x = _randn(2, LENGTH, D_MODEL, seed=1).requires_grad_()
    want, want_weights = _retnet_by_hand(layer, x)
    _assert_same_outputs_and_gradients(layer(x), want, [x, *layer.parameters()])
    # the weights show the key scale that the per-head norm all but hides in the output
    torch.testing.assert_close(layer(x, return_weights=True).weights, want_weights, rtol=1e-9, atol=1e-10)
    if causal:
        torch.testing.assert_close(_decoded(layer, x, (3, 4, 5, 6, 7)), want.detach(), rtol=1e-9, atol=1e-10)


# --- RWKV ------------------------------------------------------------------------------------------------------------


def _rwkv_by_hand(layer: RWKVTimeMix, x: torch.Tensor) -> torch.Tensor:
    """RWKV-4 time mixing (Peng et al. 2023 §3.2-3.4) one position and channel at a time: token shift
    x_{t-1} (0 before the first), k_t = W_k(μ_k x_t + (1 - μ_k) x_{t-1}) (likewise v, r), w = exp(time_decay),
    u = time_first, wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i}
    + e^{u+k_t}) (non-causal: plus the mirrored terms e^{-(i-1-t)w + k_i} of i > t), out_t = W_o(σ(r_t) ⊙ wkv_t)."""
    length = x.shape[1]
    w, u = torch.exp(layer.time_decay), layer.time_first
    k, v, r = [], [], []
    for t in range(length):
        previous = x[:, t - 1] if t > 0 else torch.zeros_like(x[:, 0])
        mu = {name: getattr(layer, f"time_mix_{name}") for name in "kvr"}
        mixed = {name: mu[name] * x[:, t] + (1 - mu[name]) * previous for name in "kvr"}
        k.append(mixed["k"] @ layer.key.weight.T)
        v.append(mixed["v"] @ layer.value.weight.T)
        r.append(torch.sigmoid(mixed["r"] @ layer.receptance.weight.T))
    out = []
    for t in range(length):
        numerator = torch.exp(u + k[t]) * v[t]
        denominator = torch.exp(u + k[t])
        for i in range(length):
            if i < t or (i > t and not layer.causal):
                weight = torch.exp(-(abs(t - i) - 1) * w + k[i])
                numerator, denominator = numerator + weight * v[i], denominator + weight
        out.append((r[t] * numerator / denominator) @ layer.output.weight.T)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_rwkv_time_mix_is_its_formulas_by_hand(causal):
    torch.manual_seed(0)
    layer = RWKVTimeMix(d_model=D_MODEL, causal=causal).double()
    with torch.no_grad():  # off the init's ramps (a mix of 0 at channel 0 would hide a swapped mix there)
        layer.time_decay.copy_(_randn(D_MODEL, seed=2))
        layer.time_first.copy_(_randn(D_MODEL, seed=3))
        for seed, name in enumerate(("time_mix_k", "time_mix_v", "time_mix_r"), start=4):
            getattr(layer, name).copy_(torch.rand(D_MODEL, generator=torch.Generator().manual_seed(seed)))
    x = _randn(2, LENGTH, D_MODEL, seed=1).requires_grad_()
    want = _rwkv_by_hand(layer, x)
    _assert_same_outputs_and_gradients(layer(x), want, [x, *layer.parameters()])
    if causal:
        torch.testing.assert_close(_decoded(layer, x, (3, 4, 5, 6, 7)), want.detach(), rtol=1e-9, atol=1e-10)


# --- Hyena -----------------------------------------------------------------------------------------------------------


def _hyena_filters_by_hand(layer: HyenaMixer, length: int) -> torch.Tensor:
    """The implicit filters (T, filters · D): h_l = exp(-α_c l) · FFN(pos(l)), pos(l) = (sin, cos)(2π l / period)
    over the module's periods, FFN linear layers with sin(ω ⊙ ·) between them."""
    bank, mlp = layer.filter, layer.filter.mlp
    rows = []
    for lag in range(length):
        angles = lag * bank.angular
        hidden = torch.cat([torch.sin(angles), torch.cos(angles)])
        for index, (weight, bias) in enumerate(zip(mlp.weights, mlp.biases, strict=True)):
            hidden = weight @ hidden + bias
            if index < len(mlp.weights) - 1:
                hidden = torch.sin(mlp.frequencies[index] * hidden)
        rows.append(hidden * torch.exp(-lag * bank.decay))
    return torch.stack(rows)


def _hyena_by_hand(layer: HyenaMixer, x: torch.Tensor) -> torch.Tensor:
    """Hyena of order 2 (Poli et al. 2023, Definition 3.1): (v, x¹, x²) = x W_in + b, each through the causal
    depthwise short convolution s_t = b_c + Σ_m w_{c,m} p_{t-(K-1-m)}, then z¹ = v,
    z^{n+1} = xⁿ ⊙ (hⁿ * zⁿ + bⁿ ⊙ zⁿ) with the direct convolution (hⁿ * z)_t = Σ_{l=0..t} hⁿ_l z_{t-l} (non-causal:
    plus Σ_{s>t} gⁿ_{s-t-1} z_s, gⁿ the strictly-future filter), y = z³ W_out + b."""
    length, d = x.shape[1:]
    projected = x @ layer.in_proj.weight.T + layer.in_proj.bias
    taps = layer.short_conv.weight[:, 0]  # (3D, K)
    width = taps.shape[1]
    short = torch.zeros_like(projected)
    for t in range(length):
        short[:, t] = layer.short_conv.bias
        for m in range(width):
            if t - (width - 1 - m) >= 0:
                short[:, t] = short[:, t] + taps[:, m] * projected[:, t - (width - 1 - m)]
    z, *gates = short.split(d, dim=-1)
    filters = _hyena_filters_by_hand(layer, length).split(d, dim=-1)
    for n, gate in enumerate(gates):
        past, future = (filters[n], None) if layer.causal else (filters[2 * n], filters[2 * n + 1])
        convolved = torch.zeros_like(z)
        for t in range(length):
            for s in range(length):
                if s <= t:
                    convolved[:, t] = convolved[:, t] + past[t - s] * z[:, s]
                elif future is not None:
                    convolved[:, t] = convolved[:, t] + future[s - t - 1] * z[:, s]
        z = gate * (convolved + layer.filter_bias[n] * z)
    return z @ layer.out_proj.weight.T + layer.out_proj.bias


def test_hyena_filter_bank_follows_its_documented_periods_and_windows():
    layer = HyenaMixer(d_model=D_MODEL, causal=True).double()
    periods = torch.logspace(math.log10(2.0), 4.0, 8, dtype=torch.float64)  # sinusoids of periods 2..10⁴
    torch.testing.assert_close(layer.filter.angular, 2 * math.pi / periods, rtol=1e-6, atol=0)
    spans = torch.logspace(math.log10(8.0), math.log10(4096.0), D_MODEL, dtype=torch.float64)
    windows = torch.exp(-spans * layer.filter.decay[:D_MODEL])  # 1% reached at lags 8..4096 across channels
    torch.testing.assert_close(windows, torch.full_like(windows, 0.01), rtol=1e-5, atol=0)


@pytest.mark.parametrize("convolution", ["fft", "direct"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_hyena_layer_is_its_order_2_recurrence_by_hand(causal, convolution):
    torch.manual_seed(0)
    layer = HyenaMixer(d_model=D_MODEL, causal=causal, filter_hidden=16, convolution=convolution).double()
    x = _randn(2, LENGTH, D_MODEL, seed=1).requires_grad_()
    want = _hyena_by_hand(layer, x)
    _assert_same_outputs_and_gradients(layer(x), want, [x, *layer.parameters()])
    if causal:  # a chunk by FFT over the cached inputs, then one token at a time by dot products over the lags
        torch.testing.assert_close(_decoded(layer, x, (3, 5, 6, 7)), want.detach(), rtol=1e-9, atol=1e-10)
