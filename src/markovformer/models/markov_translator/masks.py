"""Attention masks of the translator, shared by the full forward pass (``modeling.py``) and incremental decoding
(``generation.py``). True = the query may attend to the key."""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.lags import lag_matrix, order_to_window, visible


def key_padding_allowed(mask: Tensor | None) -> Tensor | None:
    """A (B, T) mask (1 = real token) as (B, 1, 1, T) allowed keys; None stays None (everything visible)."""
    return None if mask is None else mask.bool()[:, None, None, :]


def decoder_self_allowed(
    query_positions: Tensor, key_positions: Tensor, order: int | None, key_mask: Tensor | None = None
) -> Tensor:
    """Causal order-k band (through ``ops.lags``) and key padding: (B or 1, 1, Tq, Tk) booleans."""
    band = visible(lag_matrix(query_positions, key_positions), window=order_to_window(order), causal=True)
    allowed = band[None, None]
    return allowed if key_mask is None else allowed & key_mask.bool()[:, None, None, :]
