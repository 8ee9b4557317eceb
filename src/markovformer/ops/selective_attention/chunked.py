"""Selective attention over query chunks, O(T) memory (O(T·W) time with a window).

The accumulated selection F[t, j] = Σ_{j<m<t} S[m, j] is a running sum per key: chunks of queries are taken in
order, each starts from the sum its predecessors left (``carried``, one value per key and batch row), adds its own
rows' selections with a cumulative sum along its queries, and hands the new per-key totals on. Each chunk's
(chunk, keys) block is recomputed in the backward pass (activation checkpointing), so nothing of size T×T exists;
autograd gives every gradient, the selection's included.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.masked_softmax import masked_softmax
from markovformer.ops.query_chunks import Chunk, ChunkMask, query_chunks, recomputed
from markovformer.ops.selective_attention.naive import first_real_positions, selection_allowed

DEFAULT_CHUNK = 64  # queries per chunk


def selective_block(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, allowed: Tensor, selects: Tensor,
                    carried: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
    """q_rows (B, H, R, Dh) in increasing position, keys (B, H, S, D*), allowed (B or 1, 1, R, S), selects (B or 1,
    R, S): row m may mask key j, carried (B, S): Σ S[m, j] over the tokens before the rows.
    -> (output (B, H, R, Dv), carried after the rows (B, S))."""
    logits = q_rows @ k_keys.transpose(-1, -2) / math.sqrt(q_rows.shape[-1])
    selection = torch.where(selects, F.relu(logits[:, 0]), 0.0)
    totals = selection.cumsum(-2)
    masked_by = carried[:, None, :] + totals - selection  # the rows strictly before each query
    output = masked_softmax(logits - masked_by[:, None], allowed) @ v_keys
    return output, carried + totals[:, -1]


def _chunk(q_rows: Tensor, k_keys: Tensor, v_keys: Tensor, carried: Tensor, protected: Tensor | None,
           mask: ChunkMask, chunk: Chunk) -> tuple[Tensor, Tensor]:  # fmt: skip
    """One chunk, its masks built here (protected (B,): ``first_real_positions``): the backward pass rebuilds them
    instead of keeping them."""
    selects = selection_allowed(mask.positions[chunk.rows], mask.positions[chunk.keys], mask.window, protected)
    if mask.key_real is not None:
        selects = selects & mask.key_real[:, chunk.rows, None] & mask.key_real[:, None, chunk.keys]
    return selective_block(q_rows, k_keys, v_keys, mask.allowed(chunk), selects, carried)


def selective_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    protect_first: bool = True,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
) -> tuple[Tensor, Tensor]:
    """(output (B, H, T, Dv), each key's total selection by the tokens after it (B, T)); arguments as
    ``selective_attention``."""
    batch, _, seq_len, _ = q.shape
    mask = ChunkMask.of(q, window=window, causal=True, attention_mask=attention_mask)
    protected = first_real_positions(attention_mask, batch, q.device) if protect_first else None
    # per key, the selection of the tokens already passed: ``live`` holds keys live_low.. up to the last chunk's end,
    # ``finished`` the keys before them, which no later chunk reads. Each chunk gets a tensor of its own keys only (a
    # view of one (B, T) tensor would keep that whole tensor saved for the backward pass, O(T²/chunk) in all). In global
    # scope a chunk's keys are all those before its end, so these sums still add up to 2·B·T²/chunk bytes (float32).
    finished, live, live_low = [], q.new_zeros(batch, 0), 0
    outputs = []
    for chunk in query_chunks(seq_len, chunk_size, window):
        start, end, low, _ = chunk
        finished.append(live[:, : low - live_low])
        carried = torch.cat([live[:, low - live_low :], q.new_zeros(batch, end - start)], dim=1)  # keys low..end-1
        pieces = (q[:, :, start:end], k[:, :, low:end], v[:, :, low:end], carried, protected, mask, chunk)
        output, live = recomputed(_chunk, *pieces)
        live_low = low
        outputs.append(output)
    return torch.cat(outputs, dim=-2), torch.cat([*finished, live], dim=1)


def selective_over_cache(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    carried: Tensor,
    query_positions: Tensor,
    key_positions: Tensor,
    key_real: Tensor,
    query_real: Tensor,
    *,
    window: int | None,
    protected: Tensor | None,
) -> tuple[Tensor, Tensor]:
    """Selective attention of new queries (B, H, Tq, Dh) at ``query_positions`` (increasing) over cache slots
    (B, H, C, Dh) at ``key_positions`` (C,; < 0: empty) in any order; carried (B, C): each slot's accumulated
    selection by the tokens before the queries; key_real (B, C), query_real (B, Tq); protected (B,): each row's
    position no token masks (``first_real_positions`` of the whole sequence; None: none).
    -> (output (B, H, Tq, Dv), each slot's accumulated selection after the queries (B, C))."""
    lags_allowed = visible(lag_matrix(query_positions, key_positions), window, causal=True) & (key_positions >= 0)
    allowed = lags_allowed[None, None] & key_real[:, None, None, :]
    selects = selection_allowed(query_positions, key_positions, window, protected) & (key_positions >= 0)
    selects = selects & key_real[:, None, :] & query_real[:, :, None]
    return selective_block(q, keys, values, allowed, selects, carried)
