"""Token-level cross-entropy as every model family's training loss computes it: torch's ``F.cross_entropy`` is the
reference, ``_ChunkedCrossEntropy`` the path taken (the same values and gradients, less memory at a large V); and
as scoring computes it from the states a head reads (``sliced_cross_entropy``: no logits beyond one slice)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.precision import autocast_off, compute_dtype
from markovformer.ops.segments import document_starts

IGNORE_INDEX = -100  # labels that take no part in the loss (Hugging Face's convention)
# Logits read at once by the loss, upcast where they are half precision: 16 MiB of float32 per slice of rows.
CHUNK_ELEMENTS = 1 << 22


def check_labels(labels: Tensor, num_classes: int, name: str = "labels", shape: tuple[int, ...] | None = None) -> None:
    """ValueError naming ``name`` unless ``labels`` are integers, each a class in [0, num_classes) or
    ``IGNORE_INDEX``: an id out of range is an IndexError deep in the loss on CPU and a device assert on CUDA; and,
    given ``shape``, unless they have that shape (the loss would flatten (B, T, 1) or (B·T,) labels without a word,
    or fail deep in torch on a batch of other sizes). The values are not checked inside ``torch.compile`` (a
    data-dependent branch, which broke every compiled forward's graph at its loss; Inductor's kernels refuse an id
    out of range themselves, without the value), as ``check_vocabulary`` does not check token ids there; a model's
    own ``compile`` runs this check eagerly before the graph (``models.inputs.check_input_values``)."""
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
    labels = labels.reshape(-1).long()
    return _per_label(_summed_cross_entropy(logits.reshape(-1, logits.shape[-1]), labels, label_smoothing), labels)


def _per_label(total: Tensor, labels: Tensor) -> Tensor:
    """A summed loss over the labels that are not ``IGNORE_INDEX``, as their mean (0 when there are none)."""
    return total / labels.ne(IGNORE_INDEX).sum().clamp(min=1)


def _summed_cross_entropy(logits: Tensor, labels: Tensor, label_smoothing: float = 0.0) -> Tensor:
    """The summed cross-entropy of logits (N, V) against labels (N,) (``IGNORE_INDEX`` rows add nothing)."""
    if torch.compiler.is_compiling() or logits.device.type != "cpu" or logits.numel() <= CHUNK_ELEMENTS:
        # the reference: Inductor fuses its passes itself; on a GPU the sliced loop is unmeasured (a slice of 16 MiB
        # is a few microseconds of a GPU's work, its kernel launches as many); logits of one slice gain nothing
        return F.cross_entropy(logits.to(compute_dtype(logits)), labels, ignore_index=IGNORE_INDEX,
                               reduction="sum", label_smoothing=label_smoothing)  # fmt: skip
    return _ChunkedCrossEntropy.apply(logits, labels, label_smoothing)


class _ChunkedCrossEntropy(torch.autograd.Function):
    """The summed cross-entropy of logits (N, V) against labels (N,) (``IGNORE_INDEX`` rows add nothing), read in
    slices of rows of ``CHUNK_ELEMENTS`` in at least float32; ``F.cross_entropy`` with ``reduction="sum"``.

    torch's keeps the log-probabilities (N, V) for the backward pass, which makes a zero-filled (N, V) gradient of
    them and then the logits' own, three logit-sized tensors alive at once (at V = 20k, B x T = 8 x 128: 80 MB
    each), and upcasts half-precision logits whole first. This keeps each row's log-sum-exp (two (N,) terms) and
    the logits themselves (which the caller holds anyway), and its backward writes the gradient, softmax - target,
    once: scoring allocates nothing of size (N, V), training one tensor, the gradient. That backward, written in
    place, has no derivative: one that builds a graph (``create_graph=True``: a gradient penalty) is torch's."""

    @staticmethod
    @autocast_off
    def forward(ctx, logits: Tensor, labels: Tensor, label_smoothing: float) -> Tensor:
        dtype = compute_dtype(logits)
        scored = labels != IGNORE_INDEX
        targets = labels.masked_fill(~scored, 0)
        losses = torch.empty(len(logits), dtype=dtype, device=logits.device)
        # per row: log Σ exp(logits) = largest + log Σ exp(logits - largest), kept as its two terms, so that the
        # backward's softmax, exp((logits - largest) - log_sums), rounds as torch's log_softmax does at any offset
        largest, log_sums = torch.empty_like(losses), torch.empty_like(losses)
        for rows in _row_slices(*logits.shape):
            part = logits[rows]
            log_probs, losses[rows] = _row_losses(part, targets[rows])
            if label_smoothing:  # the mean over classes of -log p: uniform smoothing's term
                losses[rows] = (1 - label_smoothing) * losses[rows] - label_smoothing * log_probs.mean(-1)
            # the largest log-probability is the largest logit's, -log Σ exp(logits - largest) (amax: max(dim)
            # also finds where, at ten times the time)
            largest[rows], log_sums[rows] = part.amax(-1), -log_probs.amax(-1)
        ctx.save_for_backward(logits, targets, scored, largest, log_sums)
        ctx.label_smoothing = label_smoothing
        return losses.masked_fill(~scored, 0).sum()

    @staticmethod
    @autocast_off
    def backward(ctx, grad_total: Tensor):
        logits, targets, scored, largest, log_sums = ctx.saved_tensors
        smoothing = ctx.label_smoothing
        if torch.is_grad_enabled():  # create_graph=True (a gradient penalty): torch's, whose backward has a derivative
            total = F.cross_entropy(logits.to(largest.dtype), targets.masked_fill(~scored, IGNORE_INDEX),
                                    ignore_index=IGNORE_INDEX, reduction="sum", label_smoothing=smoothing)
            return torch.autograd.grad(total, logits, grad_total, create_graph=True)[0], None, None
        grad = torch.empty_like(logits)
        weights = scored.to(largest.dtype) * grad_total
        for rows in _row_slices(*logits.shape):
            # softmax, written into the gradient itself unless half precision is upcast
            out = grad[rows] if grad.dtype == largest.dtype else None
            part = torch.sub(logits[rows], largest[rows, None], out=out).sub_(log_sums[rows, None]).exp_()
            if smoothing:
                part.sub_(smoothing / logits.shape[-1])
            part[torch.arange(len(part), device=part.device), targets[rows]] -= 1 - smoothing
            part.mul_(weights[rows, None])
            if out is None:
                grad[rows] = part
        return grad, None, None


@autocast_off
def _row_losses(logits: Tensor, targets: Tensor) -> tuple[Tensor, Tensor]:
    """The log-probabilities of a slice of logits (n, V), in at least float32, and each row's loss -log p(target)
    (n,): what the sliced loss and scoring sum."""
    log_probs = logits.log_softmax(-1, dtype=compute_dtype(logits))  # one fused pass (logsumexp takes four)
    return log_probs, -log_probs.gather(1, targets[:, None]).squeeze(1)


def _row_slices(rows: int, classes: int) -> list[slice]:
    """Slices of ``rows`` rows of logits of ``classes`` each, of at most ``CHUNK_ELEMENTS`` logits (one row at
    least)."""
    step = max(1, CHUNK_ELEMENTS // max(classes, 1))
    return [slice(start, start + step) for start in range(0, rows, step)]


@torch.no_grad()
def sliced_cross_entropy(states: Tensor, head: Callable[[Tensor], Tensor], labels: Tensor, num_classes: int,
                         most_likely: bool = False) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """For scoring (no gradient is kept): the summed cross-entropy of the logits ``head(states)`` (..., V =
    ``num_classes``) against ``labels`` (...) (``IGNORE_INDEX`` adds nothing), in at least float32, and with
    ``most_likely`` each position's most likely class (...), else None.

    The head reads the states (..., D) in slices of rows of ``CHUNK_ELEMENTS`` logits, so that no logits beyond a
    slice exist (all of them are a validation batch's largest tensor: 1.7 GB at 64 x 129 x 50,257). The sum is
    ``token_cross_entropy``'s of ``head(states)``: of the same rows' losses (``_row_losses``) in the same order on
    the CPU, bit for bit where the head's product of a slice of rows is those rows of its whole product; on a GPU,
    whose ``token_cross_entropy`` is one ``F.cross_entropy``, within its rounding."""
    check_labels(labels, num_classes, shape=states.shape[:-1])
    shape, states, labels = labels.shape, states.reshape(-1, states.shape[-1]), labels.reshape(-1).long()
    slices = _row_slices(len(states), num_classes)
    if len(slices) <= 1:  # one slice: the logits of training's loss, and its reference sum
        logits = head(states)
        predicted = logits.argmax(-1).view(shape) if most_likely else None
        return _summed_cross_entropy(logits, labels), predicted
    scored = labels != IGNORE_INDEX
    targets = labels.masked_fill(~scored, 0)
    losses, predicted = None, (labels.new_empty(len(labels)) if most_likely else None)
    for rows in slices:
        part = head(states[rows])  # in the caller's autocast, as its forward's head
        row_losses = _row_losses(part, targets[rows])[1]
        if losses is None:  # the dtype of the logits' losses, known from the first slice
            losses = row_losses.new_empty(len(labels))
        losses[rows] = row_losses
        if predicted is not None:
            predicted[rows] = part.argmax(-1)
    return losses.masked_fill(~scored, 0).sum(), None if predicted is None else predicted.view(shape)


def sliced_token_cross_entropy(states: Tensor, head: Callable[[Tensor], Tensor], labels: Tensor, num_classes: int,
                               most_likely: bool = False) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """``token_cross_entropy`` of the logits ``head(states)``, for scoring: the mean of ``sliced_cross_entropy``'s sum
    over the labels, and its most likely classes."""
    total, predicted = sliced_cross_entropy(states, head, labels, num_classes, most_likely)
    return _per_label(total, labels), predicted


def next_token_cross_entropy(logits: Tensor, labels: Tensor, position_ids: Tensor | None = None,
                             label_smoothing: float = 0.0) -> Tensor:  # fmt: skip
    """``token_cross_entropy`` of a causal LM: logits (B, T, V) at each position against the label of the next
    position (``next_token_targets``: labels (B, T) aligned with the inputs, no packed document's first token; the
    last position has none). The labels are shifted, not the logits: ``logits[:, :-1]`` flattens only as a copy of
    all of them (B, T - 1, V), and its backward zero-filled and copied one more."""
    return token_cross_entropy(logits, _next_token_labels(labels, position_ids), label_smoothing)


def _next_token_labels(labels: Tensor, position_ids: Tensor | None) -> Tensor:
    """(B, T): what each position of a causal LM is scored against (``next_token_targets``), ``IGNORE_INDEX`` at
    the last position, which has no next token."""
    return F.pad(next_token_targets(labels, position_ids), (0, 1), value=IGNORE_INDEX)


def sliced_next_token_cross_entropy(states: Tensor, head: Callable[[Tensor], Tensor], labels: Tensor,
                                    num_classes: int, position_ids: Tensor | None = None,
                                    most_likely: bool = False) -> tuple[Tensor, Tensor | None]:  # fmt: skip
    """``next_token_cross_entropy`` of the logits ``head(states)`` of a causal LM's final states (B, T, D), for
    scoring (``sliced_token_cross_entropy``), and with ``most_likely`` each position's most likely next token (B, T).
    """
    return sliced_token_cross_entropy(states, head, _next_token_labels(labels, position_ids), num_classes, most_likely)
