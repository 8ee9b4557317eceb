"""Position information: rotary (applied to q, k inside attention) and sinusoidal (added to the input)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.layers.precision import KeepsFloat32, kept_float_dtype

POSITIONS = ("rotary", "sinusoidal", "learned", "none")


class RotaryEmbedding(KeepsFloat32):
    """Rotary position embedding of (..., T, Dh) queries or keys (Dh even), for any T. Rows of rotation come from a
    table of the positions seen (grown by doubling, up to ``TABLE_POSITIONS``), so a decoding step slices one row
    instead of computing it; beyond that length rows are computed on the fly (the same values). The table is shared
    by every rotary module whose frequencies are equal, for each dtype and device (``_TABLES``): a model's layers
    hold one copy, not one each, so a long decoding's memory stays flat (4 MiB at Dh = 32 in float32)."""

    TABLE_POSITIONS = 1 << 15
    float32_tensors = ("inv_freq",)  # a cast to half precision would bend every angle, more with every position

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary position needs an even head dimension; got {head_dim}")
        inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=kept_float_dtype()) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self._frequencies: tuple | None = None  # ((id, version) of inv_freq, its dtype and values): the table's key

    def _angles(self, start: int, end: int, x: Tensor) -> tuple[tuple[Tensor, Tensor, Tensor | None], slice]:
        """cos, sin (N, Dh/2) in x's dtype and the complex rotation (for float32/64), and the rows of positions
        start..end-1 in them."""
        if end > self.TABLE_POSITIONS:  # too long to keep: this call's rows only
            return _rotation_rows(start, end, self.inv_freq, x.dtype), slice(0, end - start)
        stamp = (id(self.inv_freq), self.inv_freq._version)  # a new or rewritten buffer (to(), meta init, an edit)
        if self._frequencies is None or self._frequencies[0] != stamp:
            self._frequencies = (stamp, self.inv_freq.dtype, tuple(self.inv_freq.tolist()))
        key = (*self._frequencies[1:], x.dtype, x.device)
        table = _TABLES.get(key)
        if table is None or table[0].shape[0] < end:
            size = min(max(end, 2 * table[0].shape[0] if table is not None else 0, 64), self.TABLE_POSITIONS)
            with torch.inference_mode(False):  # a table made while decoding in inference mode serves training too
                table = _TABLES[key] = _rotation_rows(0, size, self.inv_freq.to(x.device), x.dtype)
        return table, slice(start, end)

    def _at(self, x: Tensor, position_ids: Tensor) -> Tensor:
        """x (..., B, H, T, Dh) rotated to the positions ``position_ids`` (B, T) (no table: each batch has its own)."""
        positions = position_ids.to(device=x.device, dtype=torch.float32)[:, None]  # (B, 1, T)
        angles = positions[..., None] * self.inv_freq  # (B, 1, T, Dh/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)

    def forward(self, x: Tensor, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """x (..., T, Dh) at positions start..start+T-1, or (..., B, H, T, Dh) at ``position_ids`` (B, T) (packed
        documents: positions restart at each one)."""
        if position_ids is not None:
            return self._at(x, position_ids)
        if torch.compiler.is_compiling():  # no table (a Python-side cache) and no complex numbers inside a graph
            cos, sin, _ = _rotation_rows(start, start + x.shape[-2], self.inv_freq, x.dtype, complex_rows=False)
            even, odd = x[..., 0::2], x[..., 1::2]
            return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
        (cos, sin, rotation), rows = self._angles(start, start + x.shape[-2], x)
        if rotation is not None and _pairs_view_as_complex(x):
            rotation = rotation[rows]
            # Each (even, odd) pair is one complex number: the rotation is one complex product, forward and backward,
            # instead of four strided products and a stack (what the pair path below does).
            return torch.view_as_real(torch.view_as_complex(x.unflatten(-1, (-1, 2))) * rotation).flatten(-2)
        even, odd, cos, sin = x[..., 0::2], x[..., 1::2], cos[rows], sin[rows]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


# (frequency dtype, frequencies, dtype, device) -> (cos, sin, rotation): every rotary module's rows, see _angles
_TABLES: dict[tuple, tuple[Tensor, Tensor, Tensor | None]] = {}


def _rotation_rows(start: int, end: int, inv_freq: Tensor, dtype: torch.dtype, complex_rows: bool = True,
                   ) -> tuple[Tensor, Tensor, Tensor | None]:  # fmt: skip
    """cos, sin (end - start, Dh/2) of positions start..end-1 in ``dtype``, and for float32/64 the rotation
    cos + i sin, of which cos and sin are then views (one copy of the values)."""
    positions = torch.arange(start, end, device=inv_freq.device, dtype=torch.float32)
    angles = positions[:, None] * inv_freq[None, :]  # (T, Dh/2)
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    if complex_rows and dtype in (torch.float32, torch.float64):
        rotation = torch.complex(cos, sin)
        return rotation.real, rotation.imag, rotation
    return cos, sin, None


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
    return sinusoidal_at(torch.arange(start, start + seq_len, device=device), d_model)


def sinusoidal_at(positions: Tensor, d_model: int) -> Tensor:
    """The Transformer's sinusoidal vectors of integer ``positions`` (any shape) -> (..., D), float32: computed for
    those positions (per row under padding, a decoding step's one), not cut from a table up to the largest."""
    angles = positions.to(torch.float32)[..., None] * torch.exp(
        torch.arange(0, d_model, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = angles.new_zeros(*positions.shape, d_model)
    table[..., 0::2] = torch.sin(angles)
    table[..., 1::2] = torch.cos(angles)[..., : d_model // 2]
    return table
