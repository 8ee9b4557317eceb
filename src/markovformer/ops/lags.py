"""The lag and window convention, in one place: every mask and every bias placement calls these.

A query at position t and a key at position j have lag ``t - j``: past lags are >= 1, future lags <= -1, and
the diagonal (lag 0) never receives a Markov bias. A causal window W shows keys ``t - W <= j <= t`` (W + 1 keys,
the query included); a bidirectional window shows ``|t - j| <= W``; ``window=None`` shows every allowed key.
"""

from __future__ import annotations

import torch
from torch import Tensor


def lag_matrix(query_positions: Tensor, key_positions: Tensor) -> Tensor:
    """Integer lags ``t - j``, shape (Tq, Tk), for 1-D position tensors of lengths Tq and Tk."""
    return query_positions[:, None] - key_positions[None, :]


def visible(lag: Tensor, window: int | None, causal: bool) -> Tensor:
    """Boolean tensor (same shape as ``lag``): True where a key at this lag may be attended under the module
    docstring's convention: ``causal`` hides negative lags (future keys), ``window`` W hides lags beyond W in size
    (None: no window)."""
    allowed = torch.ones_like(lag, dtype=torch.bool)
    if causal:
        allowed = allowed & (lag >= 0)
    if window is not None:
        allowed = allowed & (lag.abs() <= window)
    return allowed


def lag_slot(lag: Tensor, max_order: int, direction: str) -> Tensor:
    """Index into a per-lag bias tensor's last axis for each lag, or -1 where the lag has no slot.

    ``direction`` "past": slot k-1 holds lag k (1 <= k <= K = ``max_order``); "future": slot k-1 holds lag -k.
    """
    if direction not in ("past", "future"):
        raise ValueError(f"direction must be 'past' or 'future'; got {direction!r}")
    signed = lag if direction == "past" else -lag
    in_range = (signed >= 1) & (signed <= max_order)
    return torch.where(in_range, signed - 1, torch.full_like(signed, -1))


def dense_lag_bias(lag: Tensor, past_bias: Tensor | None, future_bias: Tensor | None) -> Tensor | None:
    """Materialise the Markov bias B[t, j] = past_bias[t, k-1] at lag t - j = k >= 1 (future_bias[t, k-1] at
    lag -k) over a (Tq, Tk) lag matrix; 0 elsewhere and on the diagonal.

    past_bias / future_bias: (B, H, Tq, K) per-query per-lag values (gate times transition strength).
    Returns (B, H, Tq, Tk), or None when both are None. For the naive reference and inspection only:
    fast paths never build this.
    """
    dense = None
    for bias, direction in ((past_bias, "past"), (future_bias, "future")):
        if bias is None:
            continue
        slots = lag_slot(lag, bias.shape[-1], direction)  # (Tq, Tk)
        one_hot = (slots[..., None] == torch.arange(bias.shape[-1], device=lag.device)).to(bias.dtype)
        term = torch.einsum("bhtk,tjk->bhtj", bias, one_hot)
        dense = term if dense is None else dense + term
    return dense


def prediction_lags(source_lags: tuple[int, ...]) -> tuple[int, ...]:
    """A next-token source's lags as attention lags of the position that predicts.

    A chain whose next symbol x_{t+1} depends on x_{t+1-l} is read at position t (the last input), where that
    symbol sits at attention lag l - 1: source lag 1 is the query token itself (lag 0), source lag 4 is lag 3.
    """
    return tuple(lag - 1 for lag in source_lags)


def order_to_window(order: int | None) -> int | None:
    """MAT's Markov order k (y_i reads y_{i-k..i-1}) as a causal window: ``k - 1``, or None (unbounded) for None.

    Predicting y_i may read y_{i-k..i-1}; with the shifted-right decoder input position i holds y_{i-1}, so it
    attends to positions i-k+1..i: k keys including itself, which is causal window W = k - 1.
    """
    if order is None:
        return None
    if isinstance(order, bool) or not isinstance(order, int) or order < 1:
        raise ValueError(f"order={order!r} must be a positive integer (or None for an unbounded order)")
    return order - 1
