"""Stick-breaking attention (Tan et al., "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", ICLR 2025, arXiv:2410.17980; reference implementation:
github.com/shawntan/stickbreaking-attention). No softmax and no position embedding: for query t the keys, nearest
first, each take the share β_{t,j} = sigmoid(q_t·k_j/√Dh) of the attention mass the nearer keys left,

    A_{t,j} = β_{t,j} Π_{j<l<t} (1 - β_{t,l}),    o_t = Σ_j A_{t,j} v_j,

and the mass left over after the farthest key (1 - Σ_j A_{t,j}) is dropped: the analogue of the Markov gate's null
slot (a head can attend to nothing). Causal by construction (the stick is broken from the query backwards).
By default a query does not attend to itself (the paper's form); ``attend_current`` lets it take the first share.

- ``stick_breaking_attention_naive``: dense (T, T), the stick broken key by key in probability space.
- ``stick_breaking_attention_chunked``: log space with one reverse cumulative sum per query chunk, O(T) memory,
  O(T·W) time with a window (keys t-W..t-1).
- ``stick_breaking_over_cache``: new queries over a key/value cache (incremental decoding).
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_attention_inputs
from markovformer.ops.stick_breaking_attention.chunked import (
    DEFAULT_CHUNK,
    stick_breaking_attention_chunked,
    stick_breaking_over_cache,
)
from markovformer.ops.stick_breaking_attention.naive import stick_breaking_allowed, stick_breaking_attention_naive


def stick_breaking_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    attend_current: bool = False,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Causal stick-breaking attention.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        window: W, the query at t breaks its stick over keys t-W..t (t-W..t-1 without ``attend_current``), or None.
        attend_current: the query's own key takes the first share.
        attention_mask: (B, T), 1 = real token, 0 = padding: padded keys take no share (the stick passes them).
        chunk_size: queries per chunk.
        segment_ids: (B, T) packed documents (``ops.segments``): other documents' keys take no share.

    Returns:
        (B, H, T, Dv); a query with no allowed key returns zeros.
    """
    check_attention_inputs(q, k, v, window=window, attention_mask=attention_mask, chunk_size=chunk_size,
                           segment_ids=segment_ids)  # fmt: skip
    return stick_breaking_attention_chunked(q, k, v, window=window, attend_current=attend_current,
                                            attention_mask=attention_mask, chunk_size=chunk_size,
                                            segment_ids=segment_ids)  # fmt: skip


__all__ = ["DEFAULT_CHUNK", "stick_breaking_allowed", "stick_breaking_attention", "stick_breaking_attention_chunked",
           "stick_breaking_attention_naive", "stick_breaking_over_cache"]  # fmt: skip
