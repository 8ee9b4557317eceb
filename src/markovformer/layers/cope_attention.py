"""CoPE (contextual position encoding) as an attention kind ("cope"): positions counted by sigmoid gates of the
query on the keys between key and query, interpolated over learned embeddings e[0..npos_max-1] (Golovneva et al.,
"Contextual Position Encoding: Learning to Count What's Important", arXiv:2405.18719, 2024; reference code in the
paper's appendix). The op is ``ops.cope_attention``. CoPE replaces position embeddings: use ``position='none'``.
Causal only (the paper's form).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import SCOPE_HELP, SCOPES, WINDOW_HELP, check_fields, interval, one_of, option
from markovformer.ops.cope_attention import cope_attention, cope_attention_naive, cope_over_cache


@dataclasses.dataclass(frozen=True)
class CoPEOptions:
    """The options of attention kind "cope": scope and window as the decay kinds; ``npos_max`` position embeddings
    (contextual positions beyond npos_max - 1 share the last one)."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    npos_max: int = option(64, interval(2, integer=True), help="learned position embeddings; contextual positions "
                           "beyond npos_max - 1 share the last one")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


class CoPECore(nn.Module):
    """CoPE attention of already-projected heads, one embedding table (npos_max, Dh) shared by the heads (as the
    paper); it starts at N(0, 0.02). Decodes from a key/value cache (``state["cache"]``)."""

    supports_state = True
    honours_segments = True  # packed documents: other documents' keys hidden per query chunk (the op's segment_ids)

    def __init__(self, *, head_dim: int, causal: bool, window: int | None, npos_max: int) -> None:
        super().__init__()
        if not causal:
            raise ValueError("CoPE attention is causal only (positions count the gates from the query backwards); "
                             "use causal=True")  # fmt: skip
        self.causal, self.window = causal, window
        self.position_embeddings = nn.Parameter(torch.randn(npos_max, head_dim) * 0.02)

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        if state is not None and "cache" in state:
            seen = state["cache"].extend(k, v, real_mask(attention_mask, x))
            heads = cope_over_cache(q, seen.keys, seen.values, self.position_embeddings, seen.query_positions,
                                    seen.key_positions, seen.key_real, window=self.window)  # fmt: skip
            return CoreOutput(heads, {}, None)
        keep_in_cache(state, self.window, k, v, attention_mask)
        options = dict(window=self.window, attention_mask=attention_mask, segment_ids=segment_ids)
        if return_weights:
            heads, weights = cope_attention_naive(q, k, v, self.position_embeddings, **options)
            return CoreOutput(heads, {}, weights)
        return CoreOutput(cope_attention(q, k, v, self.position_embeddings, **options), {}, None)


class CoPEAttention(SelfAttention):
    """Multi-head CoPE attention, global or over a window of keys."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = False,
                 attention_bias: bool = False, window: int | None = None, npos_max: int = 64) -> None:  # fmt: skip
        core = CoPECore(head_dim=d_model // n_heads, causal=causal, window=window, npos_max=npos_max)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["CoPEAttention", "CoPECore", "CoPEOptions"]
