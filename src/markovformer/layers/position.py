"""Position information: rotary (applied to q, k inside attention) and sinusoidal (added to the input)."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

POSITIONS = ("rotary", "sinusoidal", "learned", "none")


class RotaryEmbedding(nn.Module):
    """Rotary position embedding of (B, H, T, Dh) queries or keys (Dh even). Computed on the fly for any T."""

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position needs an even head dimension; got {head_dim}")
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: Tensor, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """x (..., T, Dh) at positions start..start+T-1, or (B, H, T, Dh) at ``position_ids`` (B, T) (packed
        documents: positions restart at each one)."""
        if position_ids is None:
            positions = torch.arange(start, start + x.shape[-2], device=x.device, dtype=torch.float32)
        else:
            positions = position_ids.to(device=x.device, dtype=torch.float32)[:, None]  # (B, 1, T)
        angles = positions[..., None] * self.inv_freq  # (T, Dh/2) or (B, 1, T, Dh/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        if _pairs_view_as_complex(x):
            # Each (even, odd) pair is one complex number: the rotation is one complex product, forward and backward,
            # instead of four strided products and a stack (what the pair path below does).
            rotation = torch.complex(cos, sin)  # (T, Dh/2)
            return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation).flatten(-2)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


def _pairs_view_as_complex(x: Tensor) -> bool:
    """Whether x's (even, odd) pairs can be viewed as complex numbers without a copy (float32/64 only: PyTorch's
    half-precision complex type supports too few operations)."""
    return (
        x.dtype in (torch.float32, torch.float64)
        and x.stride(-1) == 1
        and all(stride % 2 == 0 for stride in x.stride()[:-1])
    )


def sinusoidal_positions(seq_len: int, d_model: int, device: torch.device | None = None, start: int = 0) -> Tensor:
    """The Transformer's fixed sinusoidal table for positions start..start+T-1, (T, D)."""
    positions = torch.arange(start, start + seq_len, device=device, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(seq_len, d_model, device=device)
    table[:, 0::2] = torch.sin(positions * div)
    table[:, 1::2] = torch.cos(positions * div)[:, : d_model // 2]
    return table
