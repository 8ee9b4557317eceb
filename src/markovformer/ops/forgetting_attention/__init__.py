"""Forgetting attention (FoX, Lin et al., ICLR 2025): softmax attention whose logits carry a data-dependent decay.

Per head, a forget gate f_t in (0, 1] (given as log f_t <= 0) decays the score of query t on key j by
D_{t,j} = sum_{l=j+1..t} log f_l, so S_{t,j} = q_t·k_j/√Dh + D_{t,j}. With a constant log f = -m this is ALiBi's
linear distance penalty with slope m. The bidirectional form uses the mirror image for keys after the query.

- ``forgetting_attention_naive``: the dense (T, T) bias, obviously correct; the reference every path is tested
  against, and the path that returns attention weights for inspection.
- ``forgetting_attention_chunked``: query chunks under activation checkpointing, O(T) memory (O(T·W) time with a
  window); the path ``forgetting_attention`` runs.
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_attention_inputs
from markovformer.ops.forgetting_attention.chunked import DEFAULT_CHUNK, forgetting_attention_chunked
from markovformer.ops.forgetting_attention.naive import dense_decay_bias, forgetting_attention_naive


def forgetting_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    log_forget: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Softmax attention with the forgetting decay bias.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        log_forget: (B, H, T), log f_t <= 0 (the gate of position t decays every key before t).
        window: W, the query at t sees keys t-W..t (causal, |t-j| <= W bidirectional), or None for global scope.
        causal: hide keys after the query.
        attention_mask: (B, T), 1 = real token, 0 = padding (as a key). Queries with no visible key output 0.
        dropout_p: dropout on the attention probabilities (pass 0 at evaluation).
        chunk_size: queries per chunk.
        segment_ids: (B, T) packed documents (``ops.segments``): a query sees keys of its own document only.

    Returns:
        (B, H, T, Dv).
    """
    check_attention_inputs(q, k, v, window=window, attention_mask=attention_mask, chunk_size=chunk_size,
                           segment_ids=segment_ids)  # fmt: skip
    if tuple(log_forget.shape) != tuple(q.shape[:3]):
        raise ValueError(f"log_forget must be (B, H, T) = {tuple(q.shape[:3])}; got {tuple(log_forget.shape)}")
    return forgetting_attention_chunked(q, k, v, log_forget, window=window, causal=causal,
                                        attention_mask=attention_mask, dropout_p=dropout_p,
                                        chunk_size=chunk_size, segment_ids=segment_ids)  # fmt: skip


__all__ = ["DEFAULT_CHUNK", "dense_decay_bias", "forgetting_attention", "forgetting_attention_chunked",
           "forgetting_attention_naive"]  # fmt: skip
