"""RWKV-4 time mixing (Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer Era", §3.2-3.4).

Token shift, then receptance r, key k and value v (per channel c), and the WKV operator with per-channel decay
w = exp(time_decay) > 0 and bonus u = time_first:

    wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i} + e^{u+k_t})
    out_t = W_o (σ(r_t) ⊙ wkv_t)

Three forms of WKV, pinned together by the tests:
- ``wkv_naive``: the sums as written, dense (T×T); overflows once k reaches ~700 in float64 (the reference);
- ``wkv_recurrent``: the authors' numerically stable recurrence (state a, b with running exponent p), one step
  at a time;
- ``wkv_scan``: the same stabilisation in parallel form. With m_t = max_{i<=t}(k_i - (t-i)w) (a cumulative max,
  computed detached: any reference gives the same value, this one keeps every exponent <= 0), the sums relative
  to e^{m_t} obey N_t = e^{m_{t-1}-w-m_t} N_{t-1} + e^{k_t-m_t} v_t — a ``linear_scan`` with gates in [0, 1].
Non-causal layers (a bidirectional WKV, as Vision-RWKV's Bi-WKV without its 1/T decay scaling) add the mirrored
sum over i > t with the same decay: e^{-(i-1-t)w + k_i}. The initialisation is the authors' RWKV-4 one at the
middle layer (the builder does not know the layer index).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.baselines.padding import has_real_before, zero_padding
from markovformer.ops.scan import linear_scan


def wkv_naive(w: Tensor, u: Tensor, k: Tensor, v: Tensor, causal: bool = True) -> Tensor:
    """The WKV sums term by term. w, u (C,); k, v (B, T, C). Returns (B, T, C). Unstable for large k."""
    steps = torch.arange(k.shape[1], device=k.device)
    distance = (steps[:, None] - steps[None, :]).abs()  # |t - i|
    log_weight = -(distance[..., None] - 1) * w + k[:, None, :, :]  # (B, T, T, C): query t, key i
    log_weight = torch.where((distance == 0)[..., None], (u + k)[:, None, :, :], log_weight)
    if causal:
        log_weight = log_weight.masked_fill((steps[:, None] < steps[None, :])[..., None], float("-inf"))
    weight = torch.exp(log_weight)
    return (weight * v[:, None]).sum(2) / weight.sum(2)


def wkv_recurrent(w: Tensor, u: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The RWKV-4 stable recurrence (the authors' CUDA kernel, as a loop): causal WKV, (B, T, C)."""
    numerator = torch.zeros_like(k[:, 0])
    denominator = torch.zeros_like(k[:, 0])
    exponent = torch.full_like(k[:, 0], float("-inf"))
    outputs = []
    for k_t, v_t in zip(k.unbind(1), v.unbind(1), strict=True):
        bonus = u + k_t
        top = torch.maximum(exponent, bonus)
        old, new = torch.exp(exponent - top), torch.exp(bonus - top)
        outputs.append((old * numerator + new * v_t) / (old * denominator + new))
        decayed = exponent - w
        top = torch.maximum(decayed, k_t)
        old, new = torch.exp(decayed - top), torch.exp(k_t - top)
        numerator, denominator, exponent = old * numerator + new * v_t, old * denominator + new, top
    return torch.stack(outputs, dim=1)


def _past_sums(w: Tensor, k: Tensor, v: Tensor, attention_mask: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Σ_{i<t} e^{-(t-1-i)w + k_i - r_t} (v_i and 1) over real i, and the reference exponent r_t (B, T, C).

    r_t is the largest exponent among those terms when some real token lies before t; where none does, the sums
    are zero and r_t = -inf.
    """
    batch, length, _ = k.shape
    reference = k.detach()
    if attention_mask is not None:
        real = attention_mask.bool()[..., None]
        lowest = reference.masked_fill(~real, float("inf")).amin(1, keepdim=True)
        # padded keys weigh nothing; for the reference they take the row's lowest real key, so they never lead it
        reference = torch.where(real, reference, torch.where(torch.isfinite(lowest), lowest, 0.0))
        v = zero_padding(v, attention_mask)
    steps = torch.arange(length, device=k.device, dtype=torch.float64)[:, None]
    decay64 = w.detach().double()
    # m_t = max_{i<=t}(k_i - (t-i)w) as a cumulative max; float64 because k_i + i·w grows with t
    top = ((reference.double() + steps * decay64).cummax(1).values - steps * decay64).to(k.dtype)
    top_before = torch.cat([top[:, :1] + w.detach(), top[:, :-1]], dim=1)  # the gate at t = 0 is then 1
    gate = torch.exp(top_before - w - top)
    weight = zero_padding(torch.exp(k - top), attention_mask)
    states, _ = linear_scan(torch.cat([gate, gate], -1), torch.cat([weight * v, weight], -1))
    numerator, denominator = F.pad(states[:, :-1], (0, 0, 1, 0)).chunk(2, dim=-1)
    history = has_real_before(attention_mask, batch, length, k.device)[..., None]
    return numerator, denominator, torch.where(history, top_before, float("-inf"))


def wkv_scan(
    w: Tensor, u: Tensor, k: Tensor, v: Tensor, causal: bool = True, attention_mask: Tensor | None = None
) -> Tensor:
    """Stable WKV in parallel form (see the module docstring). w, u (C,); k, v (B, T, C); attention_mask (B, T):
    padded keys add nothing. Half-precision inputs are computed in float32. Returns (B, T, C) in k's dtype."""
    dtype = k.dtype
    compute = torch.promote_types(dtype, torch.float32)
    w, u, k, v = (x.to(compute) for x in (w, u, k, v))
    parts = [_past_sums(w, k, v, attention_mask)]
    if not causal:
        flip_mask = None if attention_mask is None else attention_mask.flip(1)
        parts.append(tuple(x.flip(1) for x in _past_sums(w, k.flip(1), v.flip(1), flip_mask)))
    bonus = u + k
    top = bonus.detach()
    for _, _, reference in parts:
        top = torch.maximum(top, reference)
    current = torch.exp(bonus - top)
    numerator, denominator = current * v, current
    for part_numerator, part_denominator, reference in parts:
        scale = torch.exp(reference - top)  # 0 where there is no history
        numerator = numerator + scale * part_numerator
        denominator = denominator + scale * part_denominator
    # the current term alone keeps the denominator >= 1 for real tokens; the clamp only guards padded rows
    return (numerator / denominator.clamp_min(torch.finfo(compute).tiny)).to(dtype)


class RWKVTimeMix(nn.Module):
    """RWKV-4 time mixing as a sequence mixer: (B, T, D) -> (B, T, D)."""

    def __init__(self, *, d_model: int, causal: bool = True, layer_ratio: float = 0.5) -> None:
        super().__init__()
        self.causal = causal
        channel = torch.arange(d_model, dtype=torch.float32)
        fraction = channel / max(d_model - 1, 1)
        self.time_decay = nn.Parameter(-5 + 8 * fraction ** (0.7 + 1.3 * layer_ratio))
        zigzag = ((channel + 1) % 3 - 1) * 0.5
        self.time_first = nn.Parameter(math.log(0.3) + zigzag)
        ramp, keep = channel / d_model, 1.0 - layer_ratio
        self.time_mix_k = nn.Parameter(ramp**keep)
        self.time_mix_v = nn.Parameter(ramp**keep + 0.3 * layer_ratio)
        self.time_mix_r = nn.Parameter(ramp ** (0.5 * keep))
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.output = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False
    ) -> Tensor:
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind."""
        x = zero_padding(x, attention_mask)
        shifted = F.pad(x[:, :-1], (0, 0, 1, 0))  # x_{t-1}; zero before the first (real) token
        k = self.key(x * self.time_mix_k + shifted * (1 - self.time_mix_k))
        v = self.value(x * self.time_mix_v + shifted * (1 - self.time_mix_v))
        r = torch.sigmoid(self.receptance(x * self.time_mix_r + shifted * (1 - self.time_mix_r)))
        wkv = wkv_scan(torch.exp(self.time_decay), self.time_first, k, v, self.causal, attention_mask)
        return zero_padding(self.output(r * wkv), attention_mask)


__all__ = ["RWKVTimeMix", "wkv_naive", "wkv_recurrent", "wkv_scan"]
