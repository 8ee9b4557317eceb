"""Reference selective attention: the dense (T, T) selection matrix, accumulated over the queries with a cumulative
sum, as the paper's pseudo-code writes it. Tests, inspection and small T only."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax


def first_real_positions(attention_mask: Tensor | None, batch: int, device: torch.device) -> Tensor:
    """(B,) long: each row's first real position, the paper's BOS, which no token masks: 0 without a mask, a
    left-padded row's first unpadded one; -1 (none) for a row without a real token."""
    if attention_mask is None:
        return torch.zeros(batch, dtype=torch.long, device=device)
    real = attention_mask.bool()
    return torch.where(real.any(-1), real.to(torch.int8).argmax(-1), -1)


def selection_allowed(query_positions: Tensor, key_positions: Tensor, window: int | None,
                      protected: Tensor | None) -> Tensor:  # fmt: skip
    """(B or 1, Tq, Tk) bool: the token at a query position may mask the key: the key is strictly earlier (a token
    does not mask itself), within the window, and not at its row's ``protected`` position ((B,), from
    ``first_real_positions``; None: every key may be masked)."""
    lags = lag_matrix(query_positions, key_positions)
    allowed = (visible(lags, window, causal=True) & (lags >= 1))[None]
    if protected is not None:
        allowed = allowed & (key_positions[None, :] != protected[:, None])[:, None, :]
    return allowed


def selective_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    protect_first: bool = True,
    attention_mask: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention weights (B, H, T, T)); arguments as ``selective_attention``."""
    seq_len = q.shape[-2]
    positions = torch.arange(seq_len, device=q.device)
    allowed = visible(lag_matrix(positions, positions), window, causal=True)[None, None]
    protected = first_real_positions(attention_mask, q.shape[0], q.device) if protect_first else None
    selects = selection_allowed(positions, positions, window, protected)  # (B or 1, T, T)
    if attention_mask is not None:
        real = attention_mask.bool()
        allowed = allowed & real[:, None, None, :]
        selects = selects & real[:, :, None] & real[:, None, :]  # padding neither masks nor is masked
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    selection = torch.where(selects, F.relu(logits[:, 0]), 0.0)  # S[m, j]: how much token m masks key j (head 0)
    masked_by = selection.cumsum(-2) - selection  # F[t, j] = Σ_{m < t} S[m, j] (strictly before the query)
    weights = masked_softmax(logits - masked_by[:, None], allowed)
    return weights @ v, weights
