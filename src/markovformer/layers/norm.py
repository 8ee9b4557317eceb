"""The normalisation a pre-norm block applies before each sublayer and a model after its last block, by name."""

from __future__ import annotations

from torch import nn

NORMS = ("layernorm", "rmsnorm")
# both norms' eps, fixed: LayerNorm's torch default, so that switching the norm changes only the centring; for RMSNorm
# the rms_norm_eps of Llama 2's and 3's released configs (Llama 1 and transformers' LlamaConfig default: 1e-6).
# torch's RMSNorm default (None) would be the input dtype's machine epsilon: 7.8e-3 in bfloat16, a model per dtype.
NORM_EPS = 1e-5


def build_norm(kind: str, d_model: int, bias: bool = True) -> nn.Module:
    """The norm ``kind`` (one of ``NORMS``) over the last dimension, of width ``d_model``, with a learned scale
    starting at 1 and eps ``NORM_EPS``. "layernorm": (x - mean) / sqrt(var + eps) * weight (+ bias when
    ``bias``); "rmsnorm": x / sqrt(mean(x²) + eps) * weight, which has no additive term to switch (``bias`` is
    ignored, as SwiGLU's FFN ignores it)."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=NORM_EPS, bias=bias)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=NORM_EPS)
    raise ValueError(f"norm must be one of {NORMS}; got {kind!r}")
