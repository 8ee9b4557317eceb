"""Padding rules for the parts that read a sequence in order (recurrences, CTC): they need right padding."""

from __future__ import annotations

import torch
from torch import Tensor


def right_padded_lengths(attention_mask: Tensor, who: str) -> Tensor:
    """Lengths (B,) of a right-padded (B, T) mask (ones then zeros in every row); ValueError naming ``who`` else."""
    lengths = attention_mask.long().sum(-1)
    prefix = torch.arange(attention_mask.shape[-1], device=attention_mask.device)[None] < lengths[:, None]
    if not torch.equal(attention_mask.bool(), prefix):
        raise ValueError(f"{who} needs a right-padded attention_mask (ones then zeros in every row)")
    return lengths
