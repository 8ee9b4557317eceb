"""Attention kinds by name, as in Hugging Face's attention-implementation registry.

Each builder receives the shared keyword arguments (``d_model, n_heads, causal, rotary``) plus every
attention option of the config and keeps the ones it uses. Register a new kind by adding one entry.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from markovformer.layers.hybrid_attention import (
    MARKOV_OPTIONS,
    RANDOM_FEATURE_OPTIONS,
    HybridParallelAttention,
    HybridSplitAttention,
    pick_options,
)
from markovformer.layers.markov_attention import MarkovAttention
from markovformer.layers.random_feature_attention import RandomFeatureAttention
from markovformer.layers.softmax_attention import SoftmaxAttention

ATTENTION_KINDS: dict[str, Callable[..., nn.Module]] = {
    "markov": lambda shared, options: MarkovAttention(**shared, **pick_options(options, MARKOV_OPTIONS)),
    "softmax": lambda shared, options: SoftmaxAttention(**shared, **pick_options(options, ("dropout",))),
    "rff": lambda shared, options: RandomFeatureAttention(**shared, **pick_options(options, RANDOM_FEATURE_OPTIONS)),
    "hybrid_split": lambda shared, options: HybridSplitAttention(
        **shared, **pick_options(options, MARKOV_OPTIONS + RANDOM_FEATURE_OPTIONS + ("markov_head_ratio",))
    ),
    "hybrid_parallel": lambda shared, options: HybridParallelAttention(
        **shared, **pick_options(options, MARKOV_OPTIONS + RANDOM_FEATURE_OPTIONS)
    ),
}


def build_attention(kind: str, *, d_model: int, n_heads: int, causal: bool, rotary: bool, **options) -> nn.Module:
    """Build the attention layer registered as ``kind``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {tuple(ATTENTION_KINDS)}")
    shared = dict(d_model=d_model, n_heads=n_heads, causal=causal, rotary=rotary)
    return ATTENTION_KINDS[kind](shared, options)
