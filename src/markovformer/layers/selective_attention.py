"""Selective attention as an attention kind ("selective"): head 0's ReLU'd logits, accumulated over the tokens
between key and query, are subtracted from every head's later logits, so a token can mask what came before it for
everything that follows (Leviathan, Kalman, Matias, "Selective Attention Improves Transformer", arXiv:2410.02703,
ICLR 2025). The op is ``ops.selective_attention``. Selection is not a position encoding: use it with a position
(the paper uses the model's own; ``position='rotary'`` here) or with ``position='none'`` to test it alone.
Causal only (the paper's form).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import SCOPE_HELP, SCOPES, WINDOW_HELP, check_fields, interval, one_of, option
from markovformer.ops.selective_attention import (
    first_real_positions,
    selective_attention,
    selective_attention_naive,
    selective_over_cache,
)


@dataclasses.dataclass(frozen=True)
class SelectiveOptions:
    """The options of attention kind "selective": scope and window as the decay kinds; ``protect_first``: each row's
    first real token is never masked (the paper's BOS rule; a left-padded row's first unpadded token)."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    protect_first: bool = option(True, one_of((True, False)), help="each row's first real token is never masked "
                                 "(the paper's rule for BOS)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


def _carry(state: dict, selection: Tensor, positions: Tensor, length: int, window: int | None) -> None:
    """Store each key's accumulated selection in ``state["selection"]`` (B, n) by position (from
    ``state["selection_start"]``), keeping only the positions a later query can still see."""
    start = state.get("selection_start", 0)
    table = state.get("selection")
    grow = length - start - (0 if table is None else table.shape[1])
    zeros = selection.new_zeros(selection.shape[0], grow)
    table = zeros if table is None else torch.cat([table, zeros], dim=1)
    keep = positions >= start
    table = table.index_copy(1, positions[keep] - start, selection[:, keep])
    if window is not None and table.shape[1] > window + 1:  # a query sees at most the W keys before it
        drop = table.shape[1] - (window + 1)
        table, start = table[:, drop:], start + drop
    state["selection"], state["selection_start"] = table, start


class SelectiveCore(nn.Module):
    """Selective attention of already-projected heads (its first head selects). Decodes from a key/value cache
    (``state["cache"]``) and each cached key's running selection (``state["selection"]``)."""

    supports_state = True

    def __init__(self, *, causal: bool, window: int | None, protect_first: bool) -> None:
        super().__init__()
        if not causal:
            raise ValueError("selective attention is causal only (a token masks earlier tokens for the queries "
                             "after it); use causal=True")  # fmt: skip
        self.causal, self.window, self.protect_first = causal, window, protect_first

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None) -> CoreOutput:
        options = dict(window=self.window, protect_first=self.protect_first)
        if state is not None and "cache" in state:
            real = real_mask(attention_mask, x)
            seen = state["cache"].extend(k, v, real)
            # each row's first real position, protected from masking: a row padded so far gets it from these tokens
            arrived = torch.where(real.any(-1), seen.query_positions[real.to(torch.int8).argmax(-1)], -1)
            state["first_real"] = torch.where(state["first_real"] >= 0, state["first_real"], arrived)
            start, table = state["selection_start"], state["selection"]
            index = seen.key_positions - start
            inside = (index >= 0) & (index < table.shape[1])  # keys already passed by a token (new keys: 0)
            carried = torch.where(inside, table[:, index.clamp(0, max(table.shape[1] - 1, 0))], 0.0)
            heads, after = selective_over_cache(q, seen.keys, seen.values, carried, seen.query_positions,
                                                seen.key_positions, seen.key_real, real, window=self.window,
                                                protected=state["first_real"] if self.protect_first else None)
            kept = seen.key_positions >= start
            _carry(state, after[:, kept], seen.key_positions[kept], int(seen.query_positions[-1]) + 1, self.window)
            return CoreOutput(heads, {}, None)
        weights = None
        if return_weights:
            heads, weights = selective_attention_naive(q, k, v, attention_mask=attention_mask, **options)
        if state is not None or not return_weights:
            heads, selection = selective_attention(q, k, v, attention_mask=attention_mask, return_selection=True,
                                                   **options)  # fmt: skip
        if state is not None:
            keep_in_cache(state, self.window, k, v, attention_mask)
            state["first_real"] = first_real_positions(attention_mask, k.shape[0], k.device)
            _carry(state, selection, torch.arange(k.shape[2], device=k.device), k.shape[2], self.window)
        return CoreOutput(heads, {}, weights)


class SelectiveAttention(SelfAttention):
    """Multi-head selective attention, global or over a window of keys."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = False,
                 attention_bias: bool = False, window: int | None = None,
                 protect_first: bool = True) -> None:  # fmt: skip
        core = SelectiveCore(causal=causal, window=window, protect_first=protect_first)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["SelectiveAttention", "SelectiveCore", "SelectiveOptions"]
