"""The models the suite compares at one shape (the paper's 6 layers, d=256, 8 heads), the recurrent baseline
among them. The paper's configuration (hybrid heads + recurrent injection) is timed with nn.GRU and with minGRU.
One shape is not one size: each kind's own weights differ (4.88M parameters for softmax, 7.67M for the hybrid
with its GRU injection); ``describe_models`` records each count and the printed table lists them.

Every model is a ``MarkovianTransformerForCausalLM``: they differ only in the attention kind, so the embedding,
blocks (pre-LN, SwiGLU FFN), rotary positions and head are identical. ``gru`` is attention kind "gru": each block's
attention replaced by a one-layer ``nn.GRU`` and an output projection, what ``markovformer train`` builds for it.
"""

from __future__ import annotations

from torch import Tensor, nn

from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

VOCAB_SIZE = 256  # bytes
SIZE = dict(d_model=256, n_layers=6, n_heads=8)
MAX_ORDER = 4  # K = W for the local Markov models

# The paper's configuration is the hybrid with the recurrent injection in every block (nn.GRU, or minGRU on the scan).
MODEL_ATTENTION = {
    "paper_hybrid_gru": dict(attention="hybrid_split", scope="local", markov_head_ratio=0.5, gru=True),
    "paper_hybrid_min_gru": dict(
        attention="hybrid_split", scope="local", markov_head_ratio=0.5, gru=True, gru_kind="min_gru"
    ),
    "markov_local_hybrid": dict(attention="hybrid_split", scope="local", markov_head_ratio=0.5),
    "markov_local": dict(attention="markov", scope="local"),
    "softmax": dict(attention="softmax"),
    "random_feature": dict(attention="rff"),
    "gru": dict(attention="gru"),
}
MODELS = tuple(MODEL_ATTENTION)
LONG_MODELS = ("markov_local",)  # also timed at the long lengths: its tokens/s should not fall with T


def model_config(name: str) -> MarkovianTransformerConfig:
    if name not in MODEL_ATTENTION:
        raise ValueError(f"unknown bench model {name!r}; expected one of {MODELS}")
    return MarkovianTransformerConfig(vocab_size=VOCAB_SIZE, max_order=MAX_ORDER, **SIZE, **MODEL_ATTENTION[name])


def build_model(name: str) -> MarkovianTransformerForCausalLM:
    """The named model; ``loss_of(model, ids)`` gives its training loss."""
    return MarkovianTransformerForCausalLM(model_config(name))


def loss_of(model: MarkovianTransformerForCausalLM, input_ids: Tensor) -> Tensor:
    """Next-token cross-entropy of (B, T) ids (the model shifts the labels)."""
    return model(input_ids, labels=input_ids).loss


def parameter_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def describe_models() -> dict:
    """Each model's settings, as recorded in the results."""
    described = {name: {**SIZE, "vocab_size": VOCAB_SIZE, "max_order": MAX_ORDER, **options}
                 for name, options in MODEL_ATTENTION.items()}  # fmt: skip
    for name in MODELS:
        described[name]["parameters"] = parameter_count(build_model(name))
    return described
