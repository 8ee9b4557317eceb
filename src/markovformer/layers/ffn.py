"""Position-wise feed-forward networks: SwiGLU (Eq. 3) and the GELU MLP."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.ops.swiglu import swiglu_lean

FFNS = ("swiglu", "gelu")


class SwiGLU(nn.Module):
    """W2 · (SiLU(W1 x) ⊙ W3 x); hidden width 2/3 of ``mult * d_model`` (rounded up to 8) to match GELU's size.

    Runs ``ops.swiglu.swiglu_lean`` (half the saved activations) when training without dropout or autocast; with no
    gradient to save for (evaluation, decoding) the plain composition, which skips the autograd function's overhead.
    Inside ``torch.compile`` or ``torch.export`` also the composition: Dynamo cannot trace the lean function's
    ``out=`` products (a graph break around every FFN) and export refuses them on tensors that need gradients.
    """

    def __init__(self, d_model: int, mult: int = 4, dropout: float = 0.0) -> None:
        super().__init__()
        hidden = -(-int(2 * mult * d_model / 3) // 8) * 8
        self.gate_up = nn.Linear(d_model, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, d_model, bias=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        plain = not torch.is_grad_enabled() or torch.is_autocast_enabled(x.device.type) or torch.compiler.is_compiling()
        if plain or (self.training and self.dropout.p > 0):
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            hidden = F.silu(gate) * up
            return self.down(self.dropout(hidden) if self.training and self.dropout.p else hidden)
        return swiglu_lean(x, self.gate_up.weight, self.down.weight)


class GELUMLP(nn.Module):
    """W2 · dropout(GELU(W1 x + b1)) + b2: x (..., d_model) -> (..., d_model), hidden width ``mult * d_model``;
    ``bias=False`` drops both biases."""

    def __init__(self, d_model: int, mult: int = 4, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, mult * d_model, bias=bias)
        self.down = nn.Linear(mult * d_model, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.down(self.dropout(F.gelu(self.up(x))))


def build_ffn(kind: str, d_model: int, mult: int = 4, dropout: float = 0.0, bias: bool = True) -> nn.Module:
    """The feed-forward network ``kind`` (one of ``FFNS``: "swiglu" or "gelu") of width ``d_model``, hidden width
    from ``mult`` (see ``SwiGLU``, ``GELUMLP``). ``bias``: the GELU MLP's linear biases (SwiGLU has none)."""
    if kind == "swiglu":
        return SwiGLU(d_model, mult, dropout)
    if kind == "gelu":
        return GELUMLP(d_model, mult, dropout, bias)
    raise ValueError(f"ffn must be one of {FFNS}; got {kind!r}")
