"""Recurrent baselines as sequence mixers: a GRU (Cho et al. 2014) and the Scan Markov gated linear recurrence
(h_t = A_t ⊙ h_{t-1} + B_t ⊙ x_t, gates computed from the input), so both run inside the same blocks, embeddings
and heads as the attention kinds.

The stand-alone systems stay where they are: ``models.scan_markov.ScanMarkovForCausalLM`` is the seed's model, and
``layers.gru.GRUInjection`` is the Markovian Transformer's GRU path beside attention (Eq. 4-5), which the "gru"
kind reuses as the mixer itself.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from markovformer.layers.gru import GRUInjection
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.padding import zero_padding
from markovformer.ops.scan import linear_scan
from markovformer.ops.segments import Segments, segment_ends, segment_starts


class GRUMixer(GRUInjection):
    """W · GRU(x) in place of attention: unidirectional when causal, bidirectional otherwise. Padding before or
    after the real tokens of a row (packed sequences), like the GRU injection, whose state it carries."""

    def __init__(self, *, d_model: int, causal: bool = True) -> None:
        super().__init__(d_model, bidirectional=not causal)

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind."""
        return super().forward(x, attention_mask, state)


class ScanMixer(nn.Module):
    """The Scan Markov recurrence as a mixer: [A_t, B_t] = σ(gate_proj(x_t)) (Linear–GELU–Linear),
    h_t = A_t ⊙ h_{t-1} + B_t ⊙ x_t (h_{-1} = 0), output W_o h_t. Non-causal layers add the same recurrence run
    backwards (same gates) and subtract the doubly counted B_t ⊙ x_t. A causal one decodes from h
    (``state["hidden"]``, (B, D))."""

    supports_state = True  # when causal
    honours_segments = True  # packed documents: the scans restart at each document's first (last, backwards) step

    def __init__(self, *, d_model: int, causal: bool = True) -> None:
        super().__init__()
        self.d_model, self.causal = d_model, causal
        self.gate_proj = nn.Sequential(nn.Linear(d_model, d_model), nn.GELU(), nn.Linear(d_model, 2 * d_model))
        self.out_proj = nn.Linear(d_model, d_model, bias=False)

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None, segments: Segments | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind. ``segments``: packed
        documents (``ops.segments``)."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.causal:
            raise ValueError("a non-causal scan reads the whole sequence: it cannot decode incrementally")
        keep, write = torch.sigmoid(self.gate_proj(x)).chunk(2, dim=-1)
        inputs = zero_padding(write * x, attention_mask)  # padded steps add nothing to the state
        keep = keep.to(inputs.dtype)  # under autocast the gates come out of the Linear in half precision
        keep_forward = keep_backward = keep
        if segments is not None:
            keep_forward = keep.masked_fill(segment_starts(segments.ids)[..., None], 0.0)
            keep_backward = keep.masked_fill(segment_ends(segments.ids)[..., None], 0.0)
        states, final = linear_scan(keep_forward, inputs, None if state is None else state.get("hidden"))
        if state is not None:
            state["hidden"] = final
        if not self.causal:
            backward, _ = linear_scan(keep_backward.flip(1), inputs.flip(1))
            states = states + backward.flip(1) - inputs
        return zero_padding(self.out_proj(states), attention_mask)


__all__ = ["GRUMixer", "ScanMixer"]
