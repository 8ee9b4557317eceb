"""The padding rule every baseline mixer follows: padded positions (attention_mask 0) are zeroed on the way in and
on the way out, so they add nothing to real tokens' states and return zeros themselves.

Convolutions and decayed recurrences depend only on lags, so a run of padding at either end of a row (left or
right padding) leaves the real tokens' outputs exactly as without it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def zero_padding(x: Tensor, attention_mask: Tensor | None, time_dim: int = 1) -> Tensor:
    """``x`` with every position whose ``attention_mask`` (B, T) entry is 0 set to zero; ``x`` itself when no mask.

    x: (B, T, ...) with ``time_dim=1``, or heads (B, H, T, Dh) with ``time_dim=2``.
    """
    if attention_mask is None:
        return x
    shape = [attention_mask.shape[0]] + [1] * (x.dim() - 1)
    shape[time_dim] = attention_mask.shape[1]
    return x * attention_mask.reshape(shape).to(x.dtype)


def has_real_before(attention_mask: Tensor | None, batch: int, seq_len: int, device: torch.device) -> Tensor:
    """(B, T) bool: whether a real token lies strictly before each position (t > 0 when there is no mask)."""
    if attention_mask is None:
        return (torch.arange(seq_len, device=device) > 0).expand(batch, seq_len)
    real = attention_mask.long()
    return (real.cumsum(-1) - real) > 0
