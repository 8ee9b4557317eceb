"""minGRU injection: the GRU injection's role (Eq. 4-5, x <- x + W · RNN(x)) with a recurrence that trains in
parallel: z and h̃ come from x_t alone, so the states are one linear scan (``ops.scan.min_gru``), not a loop of
matrix products like nn.GRU's."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from markovformer.ops.scan import BACKENDS, min_gru


class MinGRUInjection(nn.Module):
    """minGRU over the sequence (both directions when ``bidirectional``), projected back to d_model.

    x (B, T, d_model) -> (B, T, d_model). z_t = σ(W_z x_t), h̃_t = W_h x_t (the paper's minGRU), one hidden state
    of size d_model per direction like ``GRUInjection``. Padded positions (attention_mask 0, anywhere) never change
    a carried state, so they never reach the real tokens; their outputs are zero. ``backend`` picks the scan.
    """

    def __init__(self, d_model: int, bidirectional: bool = False, backend: str = "auto") -> None:
        super().__init__()
        if backend not in BACKENDS:
            raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
        self.bidirectional, self.backend = bidirectional, backend
        directions = 2 if bidirectional else 1
        # One matrix for (gate logits, candidates) of every direction: a single GEMM over the sequence.
        self.gates_and_candidates = nn.Linear(d_model, 2 * d_model * directions)
        self.proj = nn.Linear(d_model * directions, d_model, bias=False)

    def forward(self, x: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        mask = None if attention_mask is None or bool(attention_mask.all()) else attention_mask
        chunks = self.gates_and_candidates(x).chunk(4 if self.bidirectional else 2, dim=-1)
        states = [min_gru(chunks[0], chunks[1], mask, backend=self.backend)]
        if self.bidirectional:
            states.append(min_gru(chunks[2], chunks[3], mask, reverse=True, backend=self.backend))
        out = self.proj(torch.cat(states, dim=-1) if self.bidirectional else states[0])
        return out if mask is None else out * mask[..., None].to(out.dtype)
