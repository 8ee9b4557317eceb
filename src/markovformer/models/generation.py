"""Sampling from causal language models: temperature, top-k and nucleus (top-p)."""

from __future__ import annotations

import torch
from torch import Tensor


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    banned_token_id: int | None = None,
) -> Tensor:
    """Draw one token per row from logits (B, V). temperature 0 means greedy (argmax). ``banned_token_id`` (e.g. the
    padding id of a tokenizer, which label smoothing gives a little mass) is never drawn."""
    if temperature < 0:
        raise ValueError(f"temperature={temperature!r} must be >= 0")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k={top_k!r} must be >= 1")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"top_p={top_p!r} must lie in (0, 1]")
    if banned_token_id is not None:
        logits = logits.float().index_fill(-1, torch.tensor([banned_token_id], device=logits.device), float("-inf"))
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        # keep the smallest prefix whose mass reaches top_p: drop a token when the mass before it already does
        drop = (probs.cumsum(-1) - probs) >= top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.multinomial(logits.softmax(-1), 1, generator=generator).squeeze(-1)


@torch.no_grad()
def generate_tokens(
    model: torch.nn.Module,
    input_ids: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    max_context: int | None = None,
    banned_token_id: int | None = None,
) -> Tensor:
    """Extend (B, T) prompts by ``max_new_tokens`` sampled tokens; the model sees at most ``max_context`` tokens and
    never draws ``banned_token_id``."""
    if input_ids.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    model.eval()
    tokens = input_ids
    for _ in range(max_new_tokens):
        context = tokens if max_context is None else tokens[:, -max_context:]
        logits = model(context).logits[:, -1]
        token = sample_next_token(logits, temperature, top_k, top_p, generator, banned_token_id)
        tokens = torch.cat([tokens, token[:, None]], dim=1)
    return tokens
