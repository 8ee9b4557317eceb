"""The models the suite compares at equal size (the paper's 6 layers, d=256, 8 heads), and a GRU language model.
The paper's configuration (hybrid heads + recurrent injection) is timed with nn.GRU and with minGRU.

Every Transformer variant is a ``MarkovianTransformerConfig``: they differ only in the attention kind, so the
embedding, blocks (pre-LN, SwiGLU FFN), rotary positions and head are identical.
"""

from __future__ import annotations

import torch.nn.functional as F
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
}
MODELS = (*MODEL_ATTENTION, "gru")
LONG_MODELS = ("markov_local",)  # also timed at the long lengths: its tokens/s should not fall with T


class GRULanguageModel(nn.Module):
    """Embedding, a stacked GRU, LayerNorm and a linear head: the recurrent baseline at the same width and depth."""

    def __init__(self, vocab_size: int, d_model: int, n_layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.gru = nn.GRU(d_model, d_model, num_layers=n_layers, batch_first=True)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids: Tensor, labels: Tensor) -> Tensor:
        """Next-token cross-entropy of (B, T) ids (shifted inside, like the causal LMs)."""
        hidden, _ = self.gru(self.embed(input_ids))
        logits = self.head(self.norm(hidden))
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())


def model_config(name: str) -> MarkovianTransformerConfig:
    if name not in MODEL_ATTENTION:
        raise ValueError(f"no Transformer config for bench model {name!r}; expected one of {tuple(MODEL_ATTENTION)}")
    return MarkovianTransformerConfig(vocab_size=VOCAB_SIZE, max_order=MAX_ORDER, **SIZE, **MODEL_ATTENTION[name])


def build_model(name: str) -> nn.Module:
    """The named model; ``loss_of(model, ids)`` gives its training loss."""
    if name == "gru":
        return GRULanguageModel(VOCAB_SIZE, SIZE["d_model"], SIZE["n_layers"])
    return MarkovianTransformerForCausalLM(model_config(name))


def loss_of(model: nn.Module, input_ids: Tensor) -> Tensor:
    if isinstance(model, GRULanguageModel):
        return model(input_ids, input_ids)
    return model(input_ids, labels=input_ids).loss


def parameter_count(model: nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def describe_models() -> dict:
    """Each model's settings, as recorded in the results."""
    described = {name: {**SIZE, "vocab_size": VOCAB_SIZE, "max_order": MAX_ORDER, **options}
                 for name, options in MODEL_ATTENTION.items()}  # fmt: skip
    described["gru"] = {**SIZE, "vocab_size": VOCAB_SIZE, "kind": "torch.nn.GRU"}
    for name in MODELS:
        described[name]["parameters"] = parameter_count(build_model(name))
    return described
