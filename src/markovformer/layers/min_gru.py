"""minGRU injection: the GRU injection's role (Eq. 4-5, x <- x + W · RNN(x)) with a recurrence that trains in
parallel: z and h̃ come from x_t alone, so the states are one linear scan (``ops.scan.min_gru``), not a loop of
matrix products like nn.GRU's."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.scan import BACKENDS, min_gru
from markovformer.ops.segments import Segments, segment_ends, segment_starts


class MinGRUInjection(nn.Module):
    """minGRU over the sequence (both directions when ``bidirectional``), projected back to d_model.

    x (B, T, d_model) -> (B, T, d_model). z_t = σ(W_z x_t), h̃_t = W_h x_t (the paper's minGRU), one hidden state
    of size d_model per direction like ``GRUInjection``. Padded positions (attention_mask 0, anywhere) never change
    a carried state, so they never reach the real tokens; their outputs are zero. ``backend`` picks the scan.

    The gate and candidate weights are initialised as nn.GRU's are (uniform in ±1/√d_model), not by the model's
    N(0, 0.02²) for linear layers: minGRU stands in for nn.GRU, which the model's init leaves alone. In Table I's
    speech cell this init took minGRU's validation WER from 0.39 and 0.36 (seeds 0, 1) to 0.33 and 0.29.
    A unidirectional one decodes from its hidden state (``state["hidden"]``, (B, d_model)).
    """

    def __init__(self, d_model: int, bidirectional: bool = False, backend: str = "auto") -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
        self.d_model, self.bidirectional, self.backend = d_model, bidirectional, backend
        directions = 2 if bidirectional else 1
        # One matrix for (gate logits, candidates) of every direction: a single GEMM over the sequence. Parameters,
        # not an nn.Linear, so that the model's init for linear layers leaves them as reset_parameters sets them.
        self.weight = nn.Parameter(torch.empty(2 * d_model * directions, d_model))
        self.bias = nn.Parameter(torch.empty(2 * d_model * directions))
        self.proj = nn.Linear(d_model * directions, d_model, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw the gate and candidate weights and biases as nn.GRU's are: uniform in ±1/√d_model."""
        bound = self.weight.shape[1] ** -0.5
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        for name in ("weight", "bias"):  # checkpoints written when these were an nn.Linear named gates_and_candidates
            old = f"{prefix}gates_and_candidates.{name}"
            if old in state_dict:
                state_dict[f"{prefix}{name}"] = state_dict.pop(old)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def gates_and_candidates(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, T, 2·d_model·directions): gate logits then candidates, per direction."""
        return F.linear(x, self.weight, self.bias)

    honours_segments = True  # packed documents: the scan restarts at each document's first (last, backwards) step

    @property
    def supports_state(self) -> bool:
        """Whether it decodes from its hidden state, one token per call: a unidirectional one does."""
        return not self.bidirectional

    def forward(self, x: Tensor, attention_mask: Tensor | None = None, state: dict | None = None,
                segments: Segments | None = None) -> Tensor:  # fmt: skip
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask
        forward_resets = backward_resets = None
        if segments is not None:
            forward_resets, backward_resets = segment_starts(segments.ids), segment_ends(segments.ids)
        chunks = self.gates_and_candidates(x).chunk(4 if self.bidirectional else 2, dim=-1)
        if state is not None:
            if self.bidirectional:
                raise ValueError("a bidirectional minGRU reads the whole sequence: it cannot decode incrementally")
            hidden, state["hidden"] = min_gru(chunks[0], chunks[1], mask, backend=self.backend,
                                              initial_state=state.get("hidden"), output_final_state=True)  # fmt: skip
            out = self.proj(hidden)
            return out if mask is None else out * mask[..., None].to(out.dtype)
        states = [min_gru(chunks[0], chunks[1], mask, backend=self.backend, resets=forward_resets)]
        if self.bidirectional:
            states.append(min_gru(chunks[2], chunks[3], mask, reverse=True, backend=self.backend,
                                  resets=backward_resets))  # fmt: skip
        out = self.proj(torch.cat(states, dim=-1) if self.bidirectional else states[0])
        return out if mask is None else out * mask[..., None].to(out.dtype)
