"""RWKV-4 time mixing (Peng et al. 2023, "RWKV: Reinventing RNNs for the Transformer Era", §3.2-3.4).

Token shift, then receptance r, key k and value v (per channel c), and the WKV operator with per-channel decay
w = exp(time_decay) > 0 and bonus u = time_first:

    wkv_t = (Σ_{i<t} e^{-(t-1-i)w + k_i} v_i + e^{u+k_t} v_t) / (Σ_{i<t} e^{-(t-1-i)w + k_i} + e^{u+k_t})
    out_t = W_o (σ(r_t) ⊙ wkv_t)

WKV is ``ops.wkv.wkv_scan``, the stable parallel form (``ops.wkv`` holds its naive and recurrent twins).
Non-causal layers (a bidirectional WKV, as Vision-RWKV's Bi-WKV without its 1/T decay scaling) add the mirrored
sum over i > t with the same decay: e^{-(i-1-t)w + k_i}. The initialisation is the authors' RWKV-4 one at the
middle layer (the builder does not know the layer index).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.padding import zero_padding
from markovformer.ops.segments import Segments, segment_starts
from markovformer.ops.wkv import wkv_scan


class RWKVTimeMix(nn.Module):
    """RWKV-4 time mixing as a sequence mixer: (B, T, D) -> (B, T, D). A causal one decodes from the last input
    (``state["previous"]``, the token shift) and the WKV state (``state["wkv"]``)."""

    supports_state = True  # when causal
    honours_segments = True  # packed documents: token shift and WKV sums restart at each document

    def __init__(self, *, d_model: int, causal: bool = True, layer_ratio: float = 0.5) -> None:
        super().__init__()
        self.d_model, self.causal = d_model, causal
        channel = torch.arange(d_model, dtype=torch.float32)
        fraction = channel / max(d_model - 1, 1)
        self.time_decay = nn.Parameter(-5 + 8 * fraction ** (0.7 + 1.3 * layer_ratio))
        zigzag = ((channel + 1) % 3 - 1) * 0.5
        self.time_first = nn.Parameter(math.log(0.3) + zigzag)
        ramp, keep = channel / d_model, 1.0 - layer_ratio
        self.time_mix_k = nn.Parameter(ramp**keep)
        self.time_mix_v = nn.Parameter(ramp**keep + 0.3 * layer_ratio)
        self.time_mix_r = nn.Parameter(ramp ** (0.5 * keep))
        with torch.no_grad():  # computed in float32, held in the default dtype as the Linear layers' weights are (a
            for name in ("time_decay", "time_first", "time_mix_k", "time_mix_v", "time_mix_r"):  # bf16 build)
                getattr(self, name).data = getattr(self, name).data.to(torch.get_default_dtype())
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.output = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None, segments: Segments | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind. ``segments``: packed
        documents (``ops.segments``)."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.causal:
            raise ValueError("bidirectional RWKV reads the whole sequence: it cannot decode incrementally")
        x = zero_padding(x, attention_mask)
        previous = None if state is None else state.get("previous")
        if previous is None:
            shifted = F.pad(x[:, :-1], (0, 0, 1, 0))  # x_{t-1}; zero before the first (real) token
        else:
            shifted = torch.cat([previous[:, None], x[:, :-1]], dim=1)
        if segments is not None:  # no token shift across a document boundary
            shifted = shifted.masked_fill(segment_starts(segments.ids)[..., None], 0.0)
        k = self.key(x * self.time_mix_k + shifted * (1 - self.time_mix_k))
        v = self.value(x * self.time_mix_v + shifted * (1 - self.time_mix_v))
        r = torch.sigmoid(self.receptance(x * self.time_mix_r + shifted * (1 - self.time_mix_r)))
        decay = torch.exp(self.time_decay)
        if state is None:
            wkv = wkv_scan(decay, self.time_first, k, v, self.causal, attention_mask,
                           segment_ids=None if segments is None else segments.ids)  # fmt: skip
        else:
            wkv, state["wkv"] = wkv_scan(decay, self.time_first, k, v, True, attention_mask, state.get("wkv"),
                                         output_final_state=True)  # fmt: skip
            state["previous"] = x[:, -1]
        return zero_padding(self.output(r * wkv), attention_mask)


__all__ = ["RWKVTimeMix"]
