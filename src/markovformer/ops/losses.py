"""Token-level cross-entropy as every model family's training loss computes it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100  # labels that take no part in the loss (Hugging Face's convention)


def token_cross_entropy(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits (..., V) against labels (...) over the labels that are not ``IGNORE_INDEX``.

    Computed in at least float32 (half-precision logits are upcast, float64 kept). A batch with no labelled
    position has loss 0 with zero gradients, not the NaN of an empty mean (0 / 0), which would poison the weights.
    """
    logits = logits.reshape(-1, logits.shape[-1])
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    labels = labels.reshape(-1)
    total = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum",
                            label_smoothing=label_smoothing)  # fmt: skip
    return total / labels.ne(IGNORE_INDEX).sum().clamp(min=1)
