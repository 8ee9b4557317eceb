"""MarkovTranslatorConfig: the MAT encoder-decoder, validated on construction."""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from markovformer.models.config_base import ModelConfig


@dataclasses.dataclass
class MarkovTranslatorConfig(ModelConfig):
    """Configuration of the Markov Autoregressive Transformer and its three sibling decoders.

    ``order`` k (None = unbounded) and ``transparent`` pick the row of the paper's table: None/False is the
    autoregressive Transformer, None/True the transparent Transformer, k/False n-gram masked self-attention (leaks
    L·(k-1)+1 tokens with depth), k/True MAT (exactly k-th order Markov). The defaults are Transformer-base with MAT
    k=5, the paper's setting. ``vocab_size`` is the joint source/target vocabulary: one embedding, scaled by
    √d_model, shared by encoder and decoder and tied with the output projection. Positions are sinusoidal, at most
    ``max_positions`` per sequence. ``d_ff`` defaults to 4·d_model. ``pad_token_id``, ``bos_token_id`` and
    ``eos_token_id`` (0, 1, 2; eos must differ from pad): ``generate`` decodes from bos (not returned), ends a row
    at eos and fills the rest with pad, which it never chooses.
    """

    model_type = "markov_translator"
    # it only ever smoothed the training loss, a training option: the trainer's is the one home
    dropped_fields = {"label_smoothing": (0.0, "trainer.label_smoothing")}

    vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int | None = None
    order: int | None = 5
    transparent: bool = True
    dropout: float = 0.1
    max_positions: int = 1024
    pad_token_id: int = 0
    bos_token_id: int = 1
    eos_token_id: int = 2
    initializer_range: float = 0.02

    def __post_init__(self) -> None:
        def fail(field: str, message: str) -> NoReturn:
            raise ValueError(f"MarkovTranslatorConfig.{field}={getattr(self, field)!r}: {message}")

        def positive_int(field: str) -> None:
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "must be a positive integer")

        if self.d_ff is None:
            self.d_ff = 4 * self.d_model if isinstance(self.d_model, int) else None
        for field in ("vocab_size", "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers", "d_ff",
                      "max_positions"):  # fmt: skip
            positive_int(field)
        if self.order is not None:
            positive_int("order")
            if self.order > self.max_positions:  # the band would cover every position: a silent order=None
                fail("order", f"must be at most max_positions={self.max_positions} (a longer order sees the whole "
                     "target: use null, an unbounded order)")
        if self.d_model % self.n_heads:
            fail("d_model", f"must be divisible by n_heads={self.n_heads}")
        if not isinstance(self.transparent, bool):
            fail("transparent", "must be True or False")
        if not 0.0 <= self.dropout < 1.0:
            fail("dropout", "must lie in [0, 1)")
        for field in ("pad_token_id", "bos_token_id", "eos_token_id"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                fail(field, f"must be a token id in [0, vocab_size={self.vocab_size})")
        if self.eos_token_id == self.pad_token_id:
            fail("eos_token_id", "must differ from pad_token_id: generation never emits padding")
        if not 0 < self.initializer_range < float("inf"):  # inf draws inf weights: a nan loss at the first step
            fail("initializer_range", "must be a finite positive number")
