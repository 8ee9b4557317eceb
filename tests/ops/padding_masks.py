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


def padded_segments(length: int) -> torch.Tensor:
    """(4, T) segment ids of packed rows (``ops.segments``; -1 = padding) for a test without an attention_mask, so
    that id -1 alone must hide padded keys: one document, two documents, two documents then right padding, left
    padding then one document."""
    pad, half = (length + 2) // 3, length // 2
    ids = torch.zeros(4, length, dtype=torch.long)
    ids[1, half:] = 1
    ids[2, half:] = 1
    ids[2, length - pad :] = -1
    ids[3, :pad] = -1
    return ids
