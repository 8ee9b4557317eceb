"""Token-level cross-entropy as every model family's training loss computes it."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.precision import compute_dtype
from markovformer.ops.segments import document_starts

IGNORE_INDEX = -100  # labels that take no part in the loss (Hugging Face's convention)


def check_labels(labels: Tensor, num_classes: int, name: str = "labels", shape: tuple[int, ...] | None = None) -> None:
    """ValueError naming ``name`` unless ``labels`` are integers, each a class in [0, num_classes) or
    ``IGNORE_INDEX``: an id out of range is an IndexError deep in the loss on CPU and a device assert on CUDA; and,
    given ``shape``, unless they have that shape (the loss would flatten (B, T, 1) or (B·T,) labels without a word,
    or fail deep in torch on a batch of other sizes). The values are not checked inside ``torch.compile`` (a
    data-dependent branch, which broke every compiled forward's graph at its loss; Inductor's kernels refuse an id
    out of range themselves), as ``check_vocabulary`` does not check token ids there."""
    if not isinstance(labels, Tensor):
        raise TypeError(f"{name} must be a tensor of class ids; got {type(labels).__name__}")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be integer class ids; got {labels.dtype}")
    if shape is not None and tuple(labels.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}; got {tuple(labels.shape)}")
    if torch.compiler.is_compiling():
        return
    outside = (labels != IGNORE_INDEX) & ((labels < 0) | (labels >= num_classes))
    if bool(outside.any()):
        raise ValueError(f"{name} holds {labels[outside][0].item()}, outside the classes [0, {num_classes}) (and not "
                         f"the ignored {IGNORE_INDEX})")  # fmt: skip


def next_token_targets(labels: Tensor, position_ids: Tensor | None = None) -> Tensor:
    """(B, T - 1): what a causal LM's logits at positions 0..T-2 are scored against, the labels (B, T) shifted by
    one, with ``IGNORE_INDEX`` at each packed document's first token (``position_ids`` (B, T) restarting): its
    prediction would read the document before. Every causal LM's loss and every count of its scored tokens use it."""
    targets = labels[:, 1:]
    if position_ids is not None:
        targets = targets.masked_fill(document_starts(position_ids)[:, 1:], IGNORE_INDEX)
    return targets


def token_cross_entropy(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy of logits (..., V) against labels (...), one per position of the logits, over the labels
    that are not ``IGNORE_INDEX``.

    Labels are checked first (``check_labels``). Computed in at least float32 (half-precision logits are upcast,
    float64 kept). A batch with no labelled position has loss 0 with zero gradients, not the NaN of an empty mean
    (0 / 0), which would poison the weights.
    """
    check_labels(labels, logits.shape[-1], shape=logits.shape[:-1])
    logits = logits.reshape(-1, logits.shape[-1])
    logits = logits.to(compute_dtype(logits))
    labels = labels.reshape(-1).long()
    total = F.cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, reduction="sum",
                            label_smoothing=label_smoothing)  # fmt: skip
    return total / labels.ne(IGNORE_INDEX).sum().clamp(min=1)


def next_token_cross_entropy(logits: Tensor, labels: Tensor, position_ids: Tensor | None = None,
                             label_smoothing: float = 0.0) -> Tensor:  # fmt: skip
    """``token_cross_entropy`` of a causal LM: logits (B, T, V) at each position against the label of the next
    position (``next_token_targets``: labels (B, T) aligned with the inputs, no packed document's first token; the
    last position has none). The labels are shifted, not the logits: ``logits[:, :-1]`` flattens only as a copy of
    all of them (B, T - 1, V), and its backward zero-filled and copied one more."""
    targets = F.pad(next_token_targets(labels, position_ids), (0, 1), value=IGNORE_INDEX)
    return token_cross_entropy(logits, targets, label_smoothing)
