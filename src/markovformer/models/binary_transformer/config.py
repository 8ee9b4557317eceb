"""BinaryTransformerConfig: the canonical single-layer binary model of "Attention with Markov"."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from markovformer.models.config_base import ModelConfig


@dataclasses.dataclass
class BinaryTransformerConfig(ModelConfig):
    """The talk's model on binary sequences x_n ∈ {0, 1}.

    ``d_model`` is the embedding width d (the talk's robust setting is 4), ``n_layers`` the number of
    attention + ReLU-MLP layers (1 in the talk; stacked without LayerNorm, more layers do not escape the
    weight-tying minimum at d = 4: docs/evidence/weight-tying-depth.md), ``d_ff`` the MLP width (default 4 d).
    ``tie_weights=True`` sets the read-out vector a equal to the embedding e.
    """

    model_type = "binary_transformer"

    d_model: int = 4
    n_layers: int = 1
    n_heads: int = 1
    d_ff: int | None = None
    max_positions: int = 1024
    tie_weights: bool = True
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        def fail(field: str, why: str) -> NoReturn:
            raise ValueError(f"BinaryTransformerConfig.{field}={getattr(self, field)!r}: {why}")

        for field in ("d_model", "n_layers", "n_heads", "max_positions"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "must be an integer >= 1")
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        if isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 1:
            fail("d_ff", "must be an integer >= 1 or None (4 * d_model)")
        if self.d_model % self.n_heads:
            fail("n_heads", f"must divide d_model={self.d_model}")
        if not isinstance(self.tie_weights, bool):
            fail("tie_weights", "must be true or false")
        if not 0 < self.initializer_range < float("inf"):  # inf draws inf weights: a nan loss at the first step
            fail("initializer_range", "must be a finite positive number")
