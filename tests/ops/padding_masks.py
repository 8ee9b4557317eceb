"""Padding masks the attention tests share (imported as ``padding_masks``: pytest puts this folder on the path)."""

import torch


def mixed_mask(length: int) -> torch.Tensor:
    """(4, T) mask rows: no padding, left padding, right padding, everything padded."""
    pad = (length + 2) // 3
    mask = torch.ones(4, length, dtype=torch.long)
    mask[1, :pad] = 0
    mask[2, length - pad :] = 0
    mask[3] = 0
    return mask
