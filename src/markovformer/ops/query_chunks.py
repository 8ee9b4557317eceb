"""The chunked fast paths' shared loop: queries are taken ``chunk_size`` at a time, each chunk against only the keys
it may see (a window W reaches W back, and W ahead when the attention is bidirectional), and each chunk's scores are
recomputed in the backward pass instead of kept, so no T x T tensor lives at once."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def query_chunks(seq_len: int, chunk_size: int, window: int | None, causal: bool = True) -> Iterator[tuple[int, ...]]:
    """(start, end, low, high) per chunk: queries start..end-1 may see keys low..high-1."""
    for start in range(0, seq_len, chunk_size):
        end = min(start + chunk_size, seq_len)
        low = 0 if window is None else max(0, start - window)
        high = end if causal else (seq_len if window is None else min(seq_len, end + window))
        yield start, end, low, high


def recomputed(block: Callable[..., Tensor], *pieces) -> Tensor:
    """``block(*pieces)``; when a tensor piece needs gradients, under activation checkpointing (its scores and
    probabilities are recomputed in the backward pass rather than saved)."""
    if torch.is_grad_enabled() and any(isinstance(p, Tensor) and p.requires_grad for p in pieces):
        return checkpoint(block, *pieces, use_reentrant=False)
    return block(*pieces)


__all__ = ["query_chunks", "recomputed"]
