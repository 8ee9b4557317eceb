"""CoPE, contextual position encoding (Golovneva, Wang, Weston, Sukhbaatar, "Contextual Position Encoding: Learning
to Count What's Important", arXiv:2405.18719, 2024; the paper's appendix gives its reference code). Positions are
counted by the context: query t gates every key, g_{t,j} = sigmoid(z_{t,j}) with z = q·k/√Dh, and key j sits at the
fractional position p_{t,j} = Σ_{l=j..t} g_{t,l} (so a head can count words, sentences or a chosen symbol rather than
tokens). p is clamped to ``npos_max - 1`` and interpolated between learned embeddings e[0..npos_max-1]:

    e(p) = (1 - (p - ⌊p⌋)) e[⌊p⌋] + (p - ⌊p⌋) e[⌊p⌋ + 1],     S_{t,j} = z_{t,j} + q_t·e(p_{t,j}),

then a softmax over the keys. Causal (the paper's decoder form). Keys outside the window or padded are not
counted.

- ``cope_attention_naive``: dense (T, T), each pair's interpolated embedding built in full.
- ``cope_attention_chunked``: query chunks under checkpointing, interpolating the logits q·e[p], O(T) memory.
- ``cope_over_cache``: new queries over a key/value cache (incremental decoding).
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_attention_inputs
from markovformer.ops.cope_attention.chunked import DEFAULT_CHUNK, cope_attention_chunked, cope_over_cache
from markovformer.ops.cope_attention.naive import cope_attention_naive, cope_positions_naive


def cope_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    position_embeddings: Tensor,
    *,
    window: int | None,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Causal CoPE attention.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        position_embeddings: (P, Dh), e[0..P-1] shared by the heads; positions are clamped to P - 1.
        window: W, the query at t sees keys t-W..t, or None for global scope.
        attention_mask: (B, T), 1 = real token, 0 = padding (as a key). Queries with no visible key output 0.
        chunk_size: queries per chunk.
        segment_ids: (B, T) packed documents (``ops.segments``): other documents' keys are hidden (no gate, no score).

    Returns:
        (B, H, T, Dv).
    """
    check_attention_inputs(q, k, v, window=window, attention_mask=attention_mask, chunk_size=chunk_size,
                           segment_ids=segment_ids)  # fmt: skip
    table = tuple(position_embeddings.shape)
    if len(table) != 2 or table[0] < 1 or table[1] != q.shape[-1]:
        raise ValueError(f"position_embeddings must be (P, Dh) with P >= 1 and Dh = {q.shape[-1]}; got {table}")
    return cope_attention_chunked(q, k, v, position_embeddings, window=window, attention_mask=attention_mask,
                                  chunk_size=chunk_size, segment_ids=segment_ids)  # fmt: skip


__all__ = ["DEFAULT_CHUNK", "cope_attention", "cope_attention_chunked", "cope_attention_naive", "cope_over_cache",
           "cope_positions_naive"]  # fmt: skip
