"""Incremental decoding of the Markovian Transformer causal LM (``generate`` calls it).

A model whose every layer is Markov or softmax attention (local or global scope) and has no GRU injection feeds
one token per step through per-layer key/value caches (``layers.decoding``): rolling caches of W + 1 entries for
local layers, so per-token time and memory stay flat in the generated length; preallocated caches for global
layers. Other models (random-feature, hybrid and baseline kinds, GRU injection) re-run the whole prefix each step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from markovformer.layers.decoding import block_step, new_cache
from markovformer.layers.registry import decodes_incrementally
from markovformer.models.generation import Step
from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig

if TYPE_CHECKING:
    from markovformer.models.markovian_transformer.modeling import MarkovianTransformerForCausalLM


def has_incremental_decoding(config: MarkovianTransformerConfig) -> bool:
    """True when every layer decodes from a key/value cache (Markov or softmax attention, no GRU injection)."""
    return config.causal and not config.gru and all(decodes_incrementally(kind) for kind in config.layer_kinds())


class IncrementalDecoder:
    """Feeds tokens through the model, keeping one key/value cache per layer, for sequences up to ``max_length``."""

    def __init__(self, model: MarkovianTransformerForCausalLM, batch: int, max_length: int) -> None:
        self.model = model
        dtype, device = model.dtype, model.device
        self.caches = [new_cache(block.attention, batch, max_length, dtype, device) for block in model.model.blocks]
        self.position = 0

    def feed(self, input_ids: Tensor, real: Tensor, prompt: bool = False) -> Tensor:
        """Next-token logits (B, n, V) after input_ids (B, n) at the next n positions; real (B, n) is False at
        padding. ``prompt``: the first call, run by each layer's full forward (one pass, not n steps)."""
        backbone = self.model.model
        hidden = backbone.embed_inputs(input_ids, start=self.position)
        for block, cache in zip(backbone.blocks, self.caches, strict=True):
            hidden = block_step(block, hidden, cache, real, prompt=prompt)
        self.position += input_ids.shape[1]
        return self.model.lm_head(backbone.final_norm(hidden))


def start_decoding(
    model: MarkovianTransformerForCausalLM, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
) -> tuple[Tensor, Step]:
    """The logits after the prompt (B, V) and the step function of ``GenerationMixin``: incremental when the model
    allows it (and learned positions cover the whole length), otherwise re-running the prefix (at most
    ``max_positions`` tokens of it) each step."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    config = model.config
    total = input_ids.shape[1] + max_new_tokens
    if has_incremental_decoding(config) and (config.position != "learned" or total <= config.max_positions):
        decoder = IncrementalDecoder(model, input_ids.shape[0], total)
        generated_real = torch.ones_like(real[:, :1])

        def step(tokens: Tensor) -> Tensor:
            return decoder.feed(tokens[:, None], generated_real)[:, -1]

        return decoder.feed(input_ids, real, prompt=True)[:, -1], step

    sequence = {"ids": input_ids, "real": real}

    def last_logits() -> Tensor:
        ids, mask = sequence["ids"], sequence["real"]
        if config.max_positions is not None:
            ids, mask = ids[:, -config.max_positions :], mask[:, -config.max_positions :]
        return model(ids, attention_mask=None if bool(mask.all()) else mask).logits[:, -1]

    def rerun(tokens: Tensor) -> Tensor:
        sequence["ids"] = torch.cat([sequence["ids"], tokens[:, None]], dim=1)
        sequence["real"] = torch.cat([sequence["real"], torch.ones_like(sequence["real"][:, :1])], dim=1)
        return last_logits()

    return last_logits(), rerun


__all__ = ["IncrementalDecoder", "has_incremental_decoding", "start_decoding"]
