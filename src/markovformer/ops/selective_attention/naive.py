"""Reference selective attention: the dense (T, T) selection matrix, accumulated over the queries with a cumulative
sum, as the paper's pseudo-code writes it. Tests, inspection and small T only."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax


def selection_allowed(query_positions: Tensor, key_positions: Tensor, window: int | None,
                      protect_first: bool) -> Tensor:  # fmt: skip
    """(Tq, Tk) bool: the token at a query position may mask the key: the key is strictly earlier (a token does not
    mask itself), within the window, and not position 0 when ``protect_first`` (the paper never masks the BOS)."""
    lags = lag_matrix(query_positions, key_positions)
    allowed = visible(lags, window, causal=True) & (lags >= 1)
    if protect_first:
        allowed = allowed & (key_positions != 0)[None, :]
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
    selects = selection_allowed(positions, positions, window, protect_first)[None]  # (1, T, T)
    if attention_mask is not None:
        real = attention_mask.bool()
        allowed = allowed & real[:, None, None, :]
        selects = selects & real[:, :, None] & real[:, None, :]  # padding neither masks nor is masked
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    selection = torch.where(selects, F.relu(logits[:, 0]), 0.0)  # S[m, j]: how much token m masks key j (head 0)
    masked_by = selection.cumsum(-2) - selection  # F[t, j] = Σ_{m < t} S[m, j] (strictly before the query)
    weights = masked_softmax(logits - masked_by[:, None], allowed)
    return weights @ v, weights
