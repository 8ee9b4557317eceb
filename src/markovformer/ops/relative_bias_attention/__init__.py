"""Relative-bias attention: softmax attention whose logits carry a learned bias of the lag alone,
S_{t,j} = q_t·k_j/√Dh + b_h(t - j). T5's bucketed relative positions (Raffel et al., JMLR 2020) and x-transformers'
dynamic position bias (an MLP of the distance) are two ways of producing the per-lag vector b_h; this op takes the
vector itself, (H, 2T-1) with column ``lag + T - 1``, so building it costs O(H·T), never T×T.

- ``relative_bias_attention_naive``: the dense (T, T) bias, obviously correct; the reference the chunked path is
  tested against, and the path that returns attention weights.
- ``relative_bias_attention_chunked``: query chunks under activation checkpointing, O(T) memory.
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_attention_inputs
from markovformer.ops.relative_bias_attention.chunked import DEFAULT_CHUNK, relative_bias_attention_chunked
from markovformer.ops.relative_bias_attention.naive import dense_relative_bias, relative_bias_attention_naive


def relative_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    lag_bias: Tensor,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Softmax attention with a per-lag bias.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        lag_bias: (H, 2T-1), the bias of lag t - j in column t - j + T - 1 (lags -(T-1)..T-1).
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
    expected = (q.shape[1], 2 * q.shape[2] - 1)
    if tuple(lag_bias.shape) != expected:
        raise ValueError(f"lag_bias must be (H, 2T-1) = {expected}; got {tuple(lag_bias.shape)}")
    return relative_bias_attention_chunked(q, k, v, lag_bias, window=window, causal=causal,
                                           attention_mask=attention_mask, dropout_p=dropout_p,
                                           chunk_size=chunk_size, segment_ids=segment_ids)  # fmt: skip


__all__ = ["DEFAULT_CHUNK", "dense_relative_bias", "relative_bias_attention", "relative_bias_attention_chunked",
           "relative_bias_attention_naive"]  # fmt: skip
