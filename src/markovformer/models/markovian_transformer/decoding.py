"""The start of ``generate`` for the Markovian Transformer causal LM: one pass over the prompt with a fresh decoding
state, then one token per step through the same ``forward`` (each layer reads and extends its own state), or,
when learned positions would run past ``max_positions``, the prefix re-run each step (its last ``max_positions``
tokens)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from markovformer.models.generation import Step

if TYPE_CHECKING:
    from markovformer.models.markovian_transformer.modeling import MarkovianTransformerForCausalLM


def start_decoding(
    model: MarkovianTransformerForCausalLM, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int
) -> tuple[Tensor, Step]:
    """The logits after the prompt (B, V) and the step function of ``GenerationMixin``: incremental when the model
    allows it (and learned positions cover the whole length), otherwise re-running the prefix (at most
    ``model.longest_input`` tokens of it) each step."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    total = input_ids.shape[1] + max_new_tokens
    if model.model.decodes_incrementally and (model.longest_input is None or total <= model.longest_input):
        state: dict = {}

        def step(tokens: Tensor) -> Tensor:
            return model(tokens[:, None], state=state).logits[:, -1]

        return model(input_ids, attention_mask=attention_mask, state=state, logits_to_keep=1).logits[:, -1], step

    sequence = {"ids": input_ids, "real": real}

    def last_logits() -> Tensor:
        ids, mask = sequence["ids"], sequence["real"]
        if model.longest_input is not None:
            ids, mask = ids[:, -model.longest_input :], mask[:, -model.longest_input :]
        return model(ids, attention_mask=None if bool(mask.all()) else mask, logits_to_keep=1).logits[:, -1]

    def rerun(tokens: Tensor) -> Tensor:
        sequence["ids"] = torch.cat([sequence["ids"], tokens[:, None]], dim=1)
        sequence["real"] = torch.cat([sequence["real"], torch.ones_like(sequence["real"][:, :1])], dim=1)
        return last_logits()

    return last_logits(), rerun


__all__ = ["start_decoding"]
