"""Reference CoPE attention: dense (T, T) gates, positions as sums of gates over an explicit triangular matrix, and
each pair's interpolated position embedding built in full. Tests, inspection and small T only."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.precision import compute_dtype
from markovformer.ops.segments import same_segment


def cope_positions_naive(gates: Tensor) -> Tensor:
    """(..., Tq, Tk) gates (0 where a key is not counted) -> positions p[t, j] = Σ_{l >= j} gates[t, l]."""
    keys = gates.shape[-1]
    steps = torch.arange(keys, device=gates.device)
    at_or_after = (steps[:, None] >= steps[None, :]).to(gates.dtype)  # [l, j] = l >= j
    return gates @ at_or_after


def cope_attention_naive(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    position_embeddings: Tensor,
    *,
    window: int | None,
    attention_mask: Tensor | None = None,
    segment_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Return (output (B, H, T, Dv), attention probabilities (B, H, T, T)); arguments as ``cope_attention``."""
    seq_len, npos = q.shape[-2], position_embeddings.shape[0]
    positions = torch.arange(seq_len, device=q.device)
    allowed = visible(lag_matrix(positions, positions), window, causal=True)[None, None]
    if attention_mask is not None:
        allowed = allowed & attention_mask.bool()[:, None, None, :]
    if segment_ids is not None:
        allowed = allowed & same_segment(segment_ids)
    compute = compute_dtype(q)  # half precision: positions and scores in float32, as the chunked path
    q_wide, table = q.to(compute), position_embeddings.to(compute)
    logits = q_wide @ k.to(compute).transpose(-1, -2) / math.sqrt(q.shape[-1])
    place = cope_positions_naive(torch.sigmoid(logits) * allowed).clamp(max=npos - 1)
    below = place.floor()
    fraction = place - below
    lower = table[below.long()]  # (B, H, T, T, Dh)
    upper = table[below.long().add(1).clamp(max=npos - 1)]
    embedding = (1 - fraction)[..., None] * lower + fraction[..., None] * upper
    scores = logits + torch.einsum("bhtd,bhtjd->bhtj", q_wide, embedding)
    probs = masked_softmax(scores, allowed)
    return probs.to(v.dtype) @ v, probs.to(q.dtype)
