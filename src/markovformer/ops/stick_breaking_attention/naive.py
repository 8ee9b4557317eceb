"""Reference stick-breaking attention: the dense (T, T) shares, broken off the stick one key at a time, nearest key
first, in probability space. Tests, inspection and small T only."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.segments import same_segment


def stick_breaking_allowed(query_positions: Tensor, key_positions: Tensor, window: int | None,
                           attend_current: bool) -> Tensor:  # fmt: skip
    """(Tq, Tk) bool: key j may take a share for query t: j < t (j <= t with ``attend_current``), t - j <= W."""
    lags = lag_matrix(query_positions, key_positions)
    return visible(lags, window, causal=True) & ((lags >= 0) if attend_current else (lags >= 1))


def stick_breaking_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    attend_current: bool = False,
    attention_mask: Tensor | None = None,
    segment_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention weights (B, H, T, T)); arguments as ``stick_breaking_attention``."""
    seq_len = q.shape[-2]
    positions = torch.arange(seq_len, device=q.device)
    allowed = stick_breaking_allowed(positions, positions, window, attend_current)[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
    if segment_ids is not None:
        allowed = allowed & same_segment(segment_ids)
    shares = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])) * allowed
    columns, remaining = [], torch.ones_like(shares[..., 0])
    for j in reversed(range(seq_len)):  # nearest key first: each takes its share of what the later keys left
        columns.append(shares[..., j] * remaining)
        remaining = remaining * (1 - shares[..., j])
    weights = torch.stack(columns[::-1], dim=-1)
    return weights @ v, weights
