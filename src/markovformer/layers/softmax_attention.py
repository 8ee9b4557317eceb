"""Vanilla softmax attention (the Transformer baseline): global through ``scaled_dot_product_attention``, or local
(sliding window, the Mistral/Longformer baseline) through the banded op with no bias."""

from __future__ import annotations

import dataclasses

import torch.nn.functional as F
from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import (
    DROPOUT_HELP,
    SCOPE_HELP,
    SCOPES,
    WINDOW_HELP,
    check_fields,
    interval,
    one_of,
    option,
    scoped_window,
)
from markovformer.ops.lag_bias_attention import BACKENDS, lag_bias_attention, lag_bias_attention_naive
from markovformer.ops.lag_bias_attention.naive import dense_allowed
from markovformer.ops.masked_softmax import masked_sdpa


@dataclasses.dataclass(frozen=True)
class SoftmaxOptions:
    """The options of attention kind "softmax". ``scope="local"`` sees keys t-window..t (|t-j| <= window when
    bidirectional) and needs ``window``; ``backend`` picks the lag-bias op's path for local scope."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)
    backend: str = option("auto", one_of(BACKENDS), help="the op's path in local scope: auto, naive, banded or flex "
                          "(FlexAttention, CUDA); global scope runs scaled_dot_product_attention")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


class SoftmaxCore(nn.Module):
    """Softmax attention of already-projected heads; decodes from a key/value cache (``state["cache"]``)."""

    supports_state = True
    honours_segments = True  # packed documents: masked inside the band, chunk or dense mask

    def __init__(
        self, *, causal: bool, dropout: float = 0.0, scope: str = "global", window: int | None = None,
        backend: str = "auto",
    ) -> None:  # fmt: skip
        super().__init__()
        self.causal, self.dropout, self.backend = causal, dropout, backend
        self.window = scoped_window(scope, window)

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        if state is not None and "cache" in state:
            real = real_mask(attention_mask, x, none_if_all=True)
            return CoreOutput(state["cache"].attend(q, k, v, real), {}, None)
        keep_in_cache(state, self.window, k, v, attention_mask)
        dropout = self.dropout if self.training else 0.0
        if return_weights:
            heads, weights = lag_bias_attention_naive(
                q, k, v, window=self.window, causal=self.causal, attention_mask=attention_mask, dropout_p=dropout,
                segment_ids=segment_ids,
            )
            return CoreOutput(heads, {}, weights)
        if self.window is not None or segment_ids is not None:  # the Markov op with zero bias (as "markov")
            heads = lag_bias_attention(q, k, v, window=self.window, causal=self.causal, attention_mask=attention_mask,
                                     dropout_p=dropout, backend=self.backend, segment_ids=segment_ids)  # fmt: skip
            return CoreOutput(heads, {}, None)
        if attention_mask is None:
            return CoreOutput(
                F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=self.causal), {}, None
            )
        allowed = dense_allowed(q.shape[-2], None, self.causal, attention_mask, q.device)
        return CoreOutput(masked_sdpa(q, k, v, allowed, dropout), {}, None)


class SoftmaxAttention(SelfAttention):
    """Plain multi-head softmax attention, no Markov bias: over all (allowed) keys, or a sliding window:
    ``scope="local"`` sees keys t-window..t (|t-j| <= window when not ``causal``) and needs ``window``;
    ``backend`` picks the op's path in local scope (``SoftmaxOptions``); global scope runs
    scaled_dot_product_attention."""

    def __init__(
        self, *, d_model: int, n_heads: int, causal: bool = True, dropout: float = 0.0, rotary: bool = True,
        attention_bias: bool = False, scope: str = "global", window: int | None = None, backend: str = "auto",
    ) -> None:  # fmt: skip
        core = SoftmaxCore(causal=causal, dropout=dropout, scope=scope, window=window, backend=backend)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["SoftmaxAttention", "SoftmaxCore", "SoftmaxOptions"]
