"""Softmax attention with a learned bias of the lag alone, the closest published relatives of the Markovian
Transformer's per-lag table (which is gated per token and limited to K lags):

- ``"t5_bias"``: T5's relative position bias (Raffel et al., "Exploring the Limits of Transfer Learning with a
  Unified Text-to-Text Transformer", JMLR 2020, section 2.1; reference: mesh-tensorflow / HF transformers'
  ``T5Attention``): one learned scalar per head and log-spaced distance bucket. Two departures from T5: every layer
  learns its own table (T5 learns one in each stack's first layer and adds it in every layer), and the logits are
  q·k/√Dh + b (T5 leaves q·k unscaled, folding 1/√Dh into W_q's initialisation: the same functions, other scales).
- ``"dynamic_bias"``: dynamic position bias (x-transformers' ``DynamicPositionBias``, after SwinV2's continuous
  position bias, Liu et al. CVPR 2022): a small MLP maps the (log) distance to one bias per head, so it is defined
  at every distance, including those never seen in training.

Both compute their bias for each distinct lag, (H, 2T-1), and run the ``relative_bias_attention`` op (O(T) memory,
no T×T bias). Local scope (``window`` W) sees keys t-W..t; ``window=None`` is global scope. They decode from a
key/value cache; new queries read the per-lag bias through the cache's per-lag slots.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

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
)
from markovformer.ops.relative_bias_attention import relative_bias_attention, relative_bias_attention_naive
from markovformer.ops.relative_bias_attention.buckets import check_t5_buckets, t5_buckets


@dataclasses.dataclass(frozen=True)
class T5BiasOptions:
    """The options of attention kind "t5_bias": scope and window as the decay kinds; ``num_buckets`` (split by sign
    when bidirectional) and ``max_distance``, from which on every distance shares the last bucket. How many buckets
    are needed and how far they must reach depend on ``causal``, which the model config knows: it checks them
    (``check_t5_buckets``), as ``T5Bias`` does for a layer built directly."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)
    num_buckets: int = option(32, interval(2, integer=True), help="T5's distance buckets per head (exact for short "
                              "distances, log-spaced after; split by sign when bidirectional)")  # fmt: skip
    max_distance: int = option(128, interval(2, integer=True), help="the distance from which on every lag shares "
                               "the last bucket")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class DynamicBiasOptions:
    """The options of attention kind "dynamic_bias": scope and window as the decay kinds; the MLP's ``bias_hidden``
    width and ``bias_depth`` (hidden layers); ``log_distance`` feeds it sign(d)·log(1 + |d|) rather than d."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)
    bias_hidden: int = option(32, interval(1, integer=True), help="width of the bias MLP's hidden layers")
    bias_depth: int = option(2, interval(1, integer=True), help="number of the bias MLP's hidden layers")
    log_distance: bool = option(True, one_of((True, False)), help="the MLP reads sign(d) log(1 + |d|) of the "
                                "distance d (false: d itself)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


class T5Bias(nn.Module):
    """Per-head scalars over T5's distance buckets: ``forward(lags (n,)) -> (H, n)``."""

    def __init__(self, n_heads: int, num_buckets: int, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        check_t5_buckets(num_buckets, max_distance, bidirectional)  # the options cannot: they do not know causal
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.table = nn.Parameter(torch.randn(n_heads, num_buckets) * 0.02)

    def forward(self, lags: Tensor) -> Tensor:
        return self.table[:, t5_buckets(lags, self.num_buckets, self.max_distance, self.bidirectional)]


class DynamicBias(nn.Module):
    """An MLP of the (log) distance, one output per head: ``forward(lags (n,)) -> (H, n)``. Linear(1, hidden), SiLU,
    then ``depth - 1`` times Linear(hidden, hidden), SiLU, then Linear(hidden, H) (as x-transformers' layout)."""

    def __init__(self, n_heads: int, hidden: int, depth: int, log_distance: bool) -> None:
        super().__init__()
        self.log_distance = log_distance
        layers: list[nn.Module] = [nn.Linear(1, hidden), nn.SiLU()]
        for _ in range(depth - 1):
            layers += [nn.Linear(hidden, hidden), nn.SiLU()]
        self.mlp = nn.Sequential(*layers, nn.Linear(hidden, n_heads))

    def forward(self, lags: Tensor) -> Tensor:
        distance = lags.to(self.mlp[0].weight.dtype)
        if self.log_distance:
            distance = torch.sign(distance) * torch.log1p(distance.abs())
        return self.mlp(distance[:, None]).transpose(0, 1)


class RelativeBiasCore(nn.Module):
    """Attention over ``n_heads`` heads whose score of query t on key j gains ``lag_bias(t - j)`` (a T5Bias or
    DynamicBias). Decodes from a key/value cache (``state["cache"]``)."""

    supports_state = True
    honours_segments = True  # packed documents: masked per query chunk (the op's segment_ids)

    def __init__(self, *, lag_bias: nn.Module, causal: bool, window: int | None, dropout: float) -> None:
        super().__init__()
        self.lag_bias, self.causal, self.window, self.dropout = lag_bias, causal, window, dropout

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        if state is not None and "cache" in state:
            return CoreOutput(self._decode(state["cache"], q, k, v, real_mask(attention_mask, x)), {}, None)
        keep_in_cache(state, self.window, k, v, attention_mask)
        seq_len = q.shape[-2]
        lag_bias = self.lag_bias(torch.arange(1 - seq_len, seq_len, device=q.device))
        options = dict(window=self.window, causal=self.causal, attention_mask=attention_mask,
                       dropout_p=self.dropout if self.training else 0.0)  # fmt: skip
        if segment_ids is not None:
            options["segment_ids"] = segment_ids
        if return_weights:
            heads, weights = relative_bias_attention_naive(q, k, v, lag_bias, **options)
            return CoreOutput(heads, {}, weights)
        return CoreOutput(relative_bias_attention(q, k, v, lag_bias, **options), {}, None)

    def _decode(self, cache, q, k, v, real) -> Tensor:
        """New queries over the cache: the cache's per-lag slots hold b(k) - b(0) for lags k >= 1 (softmax ignores
        a constant per row, and the cache gives lag 0 no slot). The table of b(k) - b(0) is computed once per
        decoding (the weights do not change within one) and kept in the cache, grown by doubling in global scope,
        so a step reads its rows instead of running the bias over every distance again."""
        longest = max(self.window if self.window is not None else cache.length + q.shape[-2] - 1, 1)
        table = cache.derived.get("lag_bias")  # (H, n): b(k) - b(0) for lags 1..n
        if table is None or table.shape[1] < longest:
            size = longest if self.window is not None else max(longest, 2 * (0 if table is None else table.shape[1]))
            values = self.lag_bias(torch.arange(0, size + 1, device=q.device)).to(q.dtype)  # (H, n + 1)
            table = cache.derived["lag_bias"] = values[:, 1:] - values[:, :1]
        past = table[None, :, None, :longest].expand(q.shape[0], -1, q.shape[2], -1)
        return cache.attend(q, k, v, real, past_bias=past)


class T5BiasAttention(SelfAttention):
    """Multi-head attention with T5's bucketed relative position bias (buckets split by sign when not causal).
    It replaces position embeddings: use it with ``position='none'``."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = False,
                 attention_bias: bool = False, window: int | None = None, dropout: float = 0.0,
                 num_buckets: int = 32, max_distance: int = 128) -> None:  # fmt: skip
        bias = T5Bias(n_heads, num_buckets, max_distance, bidirectional=not causal)
        core = RelativeBiasCore(lag_bias=bias, causal=causal, window=window, dropout=dropout)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


class DynamicBiasAttention(SelfAttention):
    """Multi-head attention with a dynamic position bias (an MLP of the distance). Use with ``position='none'``."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = False,
                 attention_bias: bool = False, window: int | None = None, dropout: float = 0.0,
                 bias_hidden: int = 32, bias_depth: int = 2, log_distance: bool = True) -> None:  # fmt: skip
        bias = DynamicBias(n_heads, bias_hidden, bias_depth, log_distance)
        core = RelativeBiasCore(lag_bias=bias, causal=causal, window=window, dropout=dropout)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["DynamicBias", "DynamicBiasAttention", "DynamicBiasOptions", "RelativeBiasCore", "T5Bias",
           "T5BiasAttention", "T5BiasOptions"]  # fmt: skip
