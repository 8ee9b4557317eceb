"""Selective attention (Leviathan, Kalman, Matias, "Selective Attention Improves Transformer", arXiv:2410.02703,
ICLR 2025). A token can mask earlier tokens for everything that follows: one head's (here head 0's) scaled logits,
ReLU'd, are the selection S[m, j] = max(0, z⁰_{m,j}) of token m on an earlier key j, and every head's logit of a
later query t on key j is lowered by what the tokens between them selected,

    F[t, j] = Σ_{j<m<t} S[m, j],      A_t = softmax_j(z_{t,j} - F[t, j]),

(the paper's pseudo-code: causal logits of head 0, ReLU, no masking of the first token or of a token by itself,
shifted one query down, cumulative sum over the queries, subtracted from every head's logits). Causal only: the
selection is a token's verdict on what came before it, applied to what comes after it. ``protect_first`` keeps
position 0 unmasked (the paper's BOS rule). Padded tokens neither select nor are attended.

- ``selective_attention_naive``: dense (T, T), the cumulative sum of the selection over all queries at once.
- ``selective_attention_chunked``: query chunks with the per-key running sum carried between them, O(T) memory.
- ``selective_over_cache``: new queries over a key/value cache and each slot's running sum (incremental decoding).
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_attention_inputs
from markovformer.ops.selective_attention.chunked import (
    DEFAULT_CHUNK,
    selective_attention_chunked,
    selective_over_cache,
)
from markovformer.ops.selective_attention.naive import (
    first_real_positions,
    selection_allowed,
    selective_attention_naive,
)


def selective_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int | None,
    protect_first: bool = True,
    attention_mask: Tensor | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    return_selection: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal selective attention.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv). Head 0 also selects.
        window: W, the query at t sees keys t-W..t, or None.
        protect_first: each row's first real token is never masked (the paper's BOS rule; a left-padded row's
            first unpadded token).
        attention_mask: (B, T), 1 = real token, 0 = padding.
        chunk_size: queries per chunk.
        return_selection: also return each key's total selection by the tokens after it, (B, T) (what a decoder
            carries on).

    Returns:
        (B, H, T, Dv) (and the selection); a query with no allowed key returns zeros.
    """
    check_attention_inputs(q, k, v, window=window, attention_mask=attention_mask, chunk_size=chunk_size)
    output, selection = selective_attention_chunked(q, k, v, window=window, protect_first=protect_first,
                                                    attention_mask=attention_mask, chunk_size=chunk_size)  # fmt: skip
    return (output, selection) if return_selection else output


__all__ = ["DEFAULT_CHUNK", "first_real_positions", "selection_allowed", "selective_attention",
           "selective_attention_chunked", "selective_attention_naive", "selective_over_cache"]  # fmt: skip
