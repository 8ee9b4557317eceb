"""Random-feature (linear) attention: the Performer/RFA baseline and the paper's "QI-RFF" heads."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator

import torch
from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.options import check_fields, interval, one_of, option
from markovformer.ops.linear_attention import FEATURE_MAPS, draw_projection, feature_map, linear_attention
from markovformer.ops.linear_attention.naive import linear_attention_weights

_RECOMPUTING = contextvars.ContextVar("random_features_recomputing", default=False)


@contextlib.contextmanager
def recomputation() -> Iterator[None]:
    """Where activation checkpointing recomputes a block (the second context of ``checkpoint``'s ``context_fn``):
    a random-feature layer neither counts the pass nor redraws W there, so the recomputation uses the W its forward
    used and redraws keep their interval (counted twice, a redraw could fall between a forward and its
    recomputation: gradients of another W than the loss's)."""
    token = _RECOMPUTING.set(True)
    try:
        yield
    finally:
        _RECOMPUTING.reset(token)


class RandomFeatureCore(nn.Module):
    """Linear attention with random features of the queries and keys; O(T) time and memory.

    The projection W is a buffer (saved with the model). With ``redraw_interval`` > 0 it is redrawn every that many
    training forward passes, so evaluation always uses the latest draw. Decodes from the running sums of its
    causal keys (``state["sums"]``, the op's state).
    """

    supports_state = True
    honours_segments = True  # packed documents: prefix sums restart per document (sums per document, bidirectional)

    def __init__(
        self,
        *,
        head_dim: int,
        causal: bool,
        feature_map: str = "positive",
        num_features: int = 64,
        redraw_interval: int = 0,
        chunk_size: int = 64,
    ) -> None:
        super().__init__()
        self.causal, self.kind, self.chunk_size = causal, feature_map, chunk_size
        self.num_features, self.head_dim, self.redraw_interval = num_features, head_dim, redraw_interval
        self.normaliser = "positive" if feature_map == "positive" else "signed"
        self.register_buffer("projection", draw_projection(num_features, head_dim))
        self.register_buffer("forward_count", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def redraw(self, generator: torch.Generator | None = None) -> None:
        fresh = draw_projection(self.num_features, self.head_dim, generator=generator, device=self.projection.device)
        self.projection.copy_(fresh)

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        if self.training and self.redraw_interval > 0 and not _RECOMPUTING.get():
            self.forward_count += 1
            if int(self.forward_count) % self.redraw_interval == 0:
                self.redraw()
        projection = self.projection.to(q.dtype)
        q_features = feature_map(q, projection, self.kind, is_query=True)
        k_features = feature_map(k, projection, self.kind)
        options = dict(causal=self.causal, attention_mask=attention_mask, normaliser=self.normaliser)
        if segment_ids is not None:
            options["segment_ids"] = segment_ids
        if state is None:
            heads = linear_attention(q_features, k_features, v, chunk_size=self.chunk_size, **options)
        else:  # one chunk for a short input (a decoding step), not a chunk of mostly padding
            heads, state["sums"] = linear_attention(
                q_features, k_features, v, chunk_size=min(self.chunk_size, q.shape[2]),
                initial_state=state.get("sums"), output_final_state=True, **options,
            )  # fmt: skip
        weights = None
        if return_weights:
            weights = linear_attention_weights(
                q_features, k_features, causal=self.causal, attention_mask=attention_mask, normaliser=self.normaliser,
                segment_ids=segment_ids,
            )  # fmt: skip
        return CoreOutput(heads, {}, weights)


class RandomFeatureAttention(SelfAttention):
    """Multi-head random-feature attention (``feature_map`` "positive" = FAVOR+, "trig" = the paper's form).

    Keyword arguments are named like the config fields: ``d_model, n_heads, rotary``, and ``causal`` (default True),
    ``feature_map, num_features, redraw_interval, chunk_size`` (defaults and rules: ``RandomFeatureOptions``).
    """

    def __init__(self, *, d_model: int, n_heads: int, rotary: bool = True, attention_bias: bool = False,
                 **core_options) -> None:  # fmt: skip
        core_options.setdefault("causal", True)
        core = RandomFeatureCore(head_dim=d_model // n_heads, **core_options)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


@dataclasses.dataclass(frozen=True)
class RandomFeatureOptions:
    """The options of attention kind "rff" (feature map, feature count, redraw interval), named as the config fields."""

    feature_map: str = option("positive", one_of(FEATURE_MAPS), help="the random features: positive (FAVOR+, "
                              "Performer) or trig (sin/cos, RFA)")  # fmt: skip
    num_features: int = option(64, interval(1, integer=True), help="random features per head")
    redraw_interval: int = option(0, interval(0, integer=True), help="draw new random features every this many "
                                  "training forward passes (0: never)")  # fmt: skip
    chunk_size: int = option(64, interval(1, integer=True), help="positions per chunk of the causal linear "
                             "attention op (speed and memory only)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
