"""The canonical binary model of "Attention with Markov", written out as in the talk:

    x_n = x_n · e + p_n                                       (scalar symbol times an embedding vector, plus position)
    y_n = x_n + W_O Σ_{i<=n} att_{n,i} W_V x_i                (causal softmax attention)
    z_n = y_n + W_2 ReLU(W_1 y_n)
    logit_n = <a, z_n> + b,    P(x_{n+1} = 1 | x_1..x_n) = σ(logit_n)

with a = e when ``tie_weights`` and the binary cross-entropy loss. There is no LayerNorm, as in the talk's
analysis. ``n_layers > 1`` stacks the attention + MLP pair.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.models.binary_transformer.config import BinaryTransformerConfig
from markovformer.models.pretrained import PreTrainedModel, model_output


@model_output
class BinaryTransformerOutput:
    """What ``BinaryTransformer.forward`` returns: ``logits`` (B, T), position n's logit of x_{n+1} = 1; ``loss``,
    given labels, the mean binary cross-entropy in nats."""

    logits: Tensor  # (B, T): logit of P(x_{n+1} = 1 | x_1..x_n)
    loss: Tensor | None = None


def check_binary(symbols: Tensor, name: str) -> None:
    """ValueError naming ``name`` and the first value that is neither 0 nor 1."""
    bad = (symbols != 0) & (symbols != 1)
    if bool(bad.any()):
        raise ValueError(f"{name} must hold only the symbols 0 and 1; got {symbols[bad].flatten()[0].item()!r}")


class _Layer(nn.Module):
    def __init__(self, config: BinaryTransformerConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.query, self.key, self.value, self.out = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.up = nn.Linear(d, config.d_ff, bias=False)
        self.down = nn.Linear(config.d_ff, d, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        batch, length, d = x.shape

        def heads(t: Tensor) -> Tensor:
            return t.view(batch, length, self.n_heads, d // self.n_heads).transpose(1, 2)

        mixed = F.scaled_dot_product_attention(heads(self.query(x)), heads(self.key(x)), heads(self.value(x)),
                                               is_causal=True)  # fmt: skip
        y = x + self.out(mixed.transpose(1, 2).reshape(batch, length, d))
        return y + self.down(F.relu(self.up(y)))


class BinaryTransformer(PreTrainedModel):
    """``forward(input_ids, labels=None)``: input_ids (B, T) with values in {0, 1}; labels, if given, are the
    inputs themselves (position n is scored on x_{n+1}), and ``loss`` is the mean BCE in nats."""

    config_class = BinaryTransformerConfig
    config: BinaryTransformerConfig  # the family's own fields, to a type checker (PreTrainedModel declares the base)

    def __init__(self, config: BinaryTransformerConfig) -> None:
        super().__init__(config)
        d, std = config.d_model, config.initializer_range
        self.embedding = nn.Parameter(torch.randn(d) * std)  # e
        self.positions = nn.Parameter(torch.randn(config.max_positions, d) * std)  # p_n
        self.layers = nn.ModuleList(_Layer(config) for _ in range(config.n_layers))
        for layer in self.layers:
            for module in layer.modules():
                if isinstance(module, nn.Linear):
                    nn.init.normal_(module.weight, std=std)
        self.readout = None if config.tie_weights else nn.Parameter(torch.randn(d) * std)  # a
        self.readout_bias = nn.Parameter(torch.zeros(()))  # b

    @property
    def readout_vector(self) -> Tensor:
        """a: the embedding itself when weights are tied."""
        return self.embedding if self.readout is None else self.readout

    @property
    def longest_input(self) -> int:
        """The most tokens one forward reads: its learned positions' ``max_positions``."""
        return self.config.max_positions

    def forward(self, input_ids: Tensor, labels: Tensor | None = None) -> BinaryTransformerOutput:
        """input_ids (B, T) of 0s and 1s -> ``logits`` (B, T), position n's logit of x_{n+1} = 1; with ``labels``
        (the inputs themselves, (B, T) of 0s and 1s), ``loss``: the mean binary cross-entropy in nats of positions
        0..T-2 against labels 1..T-1."""
        if input_ids.dim() != 2:
            raise ValueError(f"input_ids must be (B, T); got shape {tuple(input_ids.shape)}")
        length = input_ids.shape[1]
        if length > self.config.max_positions:
            raise ValueError(f"sequence length {length} exceeds max_positions={self.config.max_positions}")
        check_binary(input_ids, "input_ids")
        if labels is not None:
            if tuple(labels.shape) != tuple(input_ids.shape):
                raise ValueError(f"labels must be (B, T) = {tuple(input_ids.shape)}; got {tuple(labels.shape)}")
            check_binary(labels, "labels")  # binary cross-entropy would read any other value as a soft target
        hidden = input_ids.to(self.embedding.dtype)[..., None] * self.embedding + self.positions[:length]
        for layer in self.layers:
            hidden = layer(hidden)
        logits = hidden @ self.readout_vector + self.readout_bias
        loss = None
        if labels is not None:
            loss = F.binary_cross_entropy_with_logits(logits[:, :-1], labels[:, 1:].to(logits.dtype))
        return BinaryTransformerOutput(logits=logits, loss=loss)

    def next_symbol_log_probs(self, input_ids: Tensor) -> Tensor:
        """(B, T, 2) log-probabilities of x_{n+1} ∈ {0, 1} after each prefix."""
        logits = self(input_ids).logits
        return torch.stack((F.logsigmoid(-logits), F.logsigmoid(logits)), dim=-1)
