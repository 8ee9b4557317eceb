"""nn.Modules built from ops: Markov bias and gates, attention kinds, FFNs, GRU injection, norms, the pre-LN block."""

from markovformer.layers.attention import AttentionOutput, SelfAttention
from markovformer.layers.block import PreLNBlock
from markovformer.layers.ffn import GELUMLP, SwiGLU, build_ffn
from markovformer.layers.gru import INJECTION_KINDS, GRUInjection, build_injection
from markovformer.layers.hybrid_attention import (
    HybridAttention,
    HybridParallelAttention,
    HybridSplitAttention,
)
from markovformer.layers.markov_attention import MarkovAttention
from markovformer.layers.markov_bias import MarkovBias
from markovformer.layers.min_gru import MinGRUInjection
from markovformer.layers.norm import NORMS, build_norm
from markovformer.layers.position import RotaryEmbedding
from markovformer.layers.random_feature_attention import RandomFeatureAttention
from markovformer.layers.registry import ATTENTION_KINDS, build_attention
from markovformer.layers.softmax_attention import SoftmaxAttention

__all__ = [
    "ATTENTION_KINDS",
    "AttentionOutput",
    "GELUMLP",
    "GRUInjection",
    "INJECTION_KINDS",
    "HybridAttention",
    "HybridParallelAttention",
    "HybridSplitAttention",
    "MarkovAttention",
    "MarkovBias",
    "MinGRUInjection",
    "NORMS",
    "PreLNBlock",
    "RandomFeatureAttention",
    "RotaryEmbedding",
    "SelfAttention",
    "SoftmaxAttention",
    "SwiGLU",
    "build_attention",
    "build_ffn",
    "build_injection",
    "build_norm",
]
