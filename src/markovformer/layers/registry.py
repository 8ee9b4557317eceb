"""Attention kinds by name, as in Hugging Face's attention-implementation registry.

Each builder receives the shared keyword arguments (``d_model, n_heads, causal, rotary``) plus every
attention option of the config and keeps the ones it uses. Register a new kind by adding one entry.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from markovformer.layers.baselines import (
    GRUMixer,
    HyenaMixer,
    LinformerAttention,
    RetNetAttention,
    RWKVTimeMix,
    S4DMixer,
    ScanMixer,
)
from markovformer.layers.decay_attention import AlibiAttention, ForgettingAttention
from markovformer.layers.hybrid_attention import (
    MARKOV_OPTIONS,
    RANDOM_FEATURE_OPTIONS,
    HybridParallelAttention,
    HybridSplitAttention,
    pick_options,
)
from markovformer.layers.markov_attention import MarkovAttention
from markovformer.layers.random_feature_attention import RandomFeatureAttention
from markovformer.layers.sliding_window_attention import SlidingWindowAttention
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
    # the mixer suite's relatives of per-lag biases (layers.decay_attention) and the local Transformer
    "alibi": lambda shared, options: AlibiAttention(**shared, **pick_options(options, ("window", "dropout"))),
    "forgetting": lambda shared, options: ForgettingAttention(**shared, **pick_options(options, ("window", "dropout"))),
    "sliding_window": lambda shared, options: SlidingWindowAttention(
        **shared, **pick_options(options, ("window", "dropout", "backend"))
    ),
    # the baseline zoo (layers.baselines): sequence mixers in the same blocks; some ignore n_heads and rotary
    "linformer": lambda shared, options: LinformerAttention(
        **shared, **pick_options(options, ("max_position", "linformer_k", "dropout"))
    ),
    "retnet": lambda shared, options: RetNetAttention(**shared, **pick_options(options, ("chunk_size",))),
    "s4d": lambda shared, options: S4DMixer(
        d_model=shared["d_model"], causal=shared["causal"], **pick_options(options, ("ssm_state_size",))
    ),
    "hyena": lambda shared, options: HyenaMixer(d_model=shared["d_model"], causal=shared["causal"]),
    "rwkv": lambda shared, options: RWKVTimeMix(d_model=shared["d_model"], causal=shared["causal"]),
    "gru": lambda shared, options: GRUMixer(d_model=shared["d_model"], causal=shared["causal"]),
    "scan": lambda shared, options: ScanMixer(d_model=shared["d_model"], causal=shared["causal"]),
}


def build_attention(kind: str, *, d_model: int, n_heads: int, causal: bool, rotary: bool, **options) -> nn.Module:
    """Build the attention layer registered as ``kind``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {tuple(ATTENTION_KINDS)}")
    shared = dict(d_model=d_model, n_heads=n_heads, causal=causal, rotary=rotary)
    return ATTENTION_KINDS[kind](shared, options)
