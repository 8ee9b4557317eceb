"""The chunked fast paths' shared loop: queries are taken ``chunk_size`` at a time, each chunk against only the keys
it may see (a window W reaches W back, and W ahead when the attention is bidirectional), and each chunk's scores are
recomputed in the backward pass instead of kept, so no T x T tensor lives at once.

A chunk's (rows, keys) mask is built inside its recomputed block from a ``ChunkMask`` (the O(B·T) pieces every chunk
shares) and its ``Chunk`` (four ints): built outside and passed in, each chunk's mask would be saved for the backward
pass, T²/2 bytes per batch row and layer in all for global scope."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.segments import same_segment


class Chunk(NamedTuple):
    """Queries start..end-1, which may see keys low..high-1."""

    start: int
    end: int
    low: int
    high: int

    @property
    def rows(self) -> slice:
        return slice(self.start, self.end)

    @property
    def keys(self) -> slice:
        return slice(self.low, self.high)


def query_chunks(seq_len: int, chunk_size: int, window: int | None, causal: bool = True) -> Iterator[Chunk]:
    """A ``Chunk`` (start, end, low, high) per ``chunk_size`` queries: queries start..end-1 may see keys low..high-1.

    Causal global scope (``window`` None) is the exception: a chunk's keys are all those before its end, so a chunk
    takes as many queries as keep its (queries, keys) block at about ``chunk_size`` x ``seq_len`` entries, the last
    chunk's size (the first takes about sqrt(chunk_size x seq_len) queries, never fewer than ``chunk_size``). Blocks
    of one size let the allocator reuse a chunk's freed scores for the next; blocks growing chunk by chunk never fit
    the memory freed before them, so the heap grew by every chunk's block, O(T²) in all (forgetting attention,
    1 layer, d = 32: 3.8 GB resident at T = 16k, 15x the 4k run's)."""
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:  # (0 looped for ever)
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    start = 0
    while start < seq_len:
        rows = chunk_size
        if window is None and causal:  # rows x (start + rows) <= chunk_size x seq_len
            # int(sqrt), not math.isqrt (the same below 2^52): Dynamo traces it for a symbolic length, where isqrt
            # broke the graph and dropped the whole layer loop to eager at every new length
            rows = max(chunk_size, (int(math.sqrt(start * start + 4 * chunk_size * seq_len)) - start) // 2)
        end = min(start + rows, seq_len)
        low = 0 if window is None else max(0, start - window)
        high = end if causal else (seq_len if window is None else min(seq_len, end + window))
        yield Chunk(start, end, low, high)
        start = end


@dataclass(frozen=True)
class ChunkMask:
    """Which keys each query may see, as the pieces all chunks share (none larger than (B, T)); ``allowed`` builds
    one chunk's block from them."""

    positions: Tensor  # (T,): 0..T-1
    window: int | None
    causal: bool
    key_real: Tensor | None = None  # (B, T) bool: the attention mask
    segment_ids: Tensor | None = None  # (B, T): packed documents, -1 = padding
    sees_itself: bool = True  # False: a query never sees its own key (stick-breaking without attend_current)

    @classmethod
    def of(cls, q: Tensor, *, window: int | None, causal: bool, attention_mask: Tensor | None = None,
           segment_ids: Tensor | None = None, sees_itself: bool = True) -> ChunkMask:  # fmt: skip
        """The mask of queries q (B, H, T, Dh) over their own keys."""
        real = None if attention_mask is None else attention_mask.bool()
        return cls(torch.arange(q.shape[-2], device=q.device), window, causal, real, segment_ids, sees_itself)

    @property
    def seq_len(self) -> int:
        return self.positions.shape[0]

    def lags(self, chunk: Chunk) -> Tensor:
        """(R, S) long: query minus key position over the chunk's rows and keys."""
        return lag_matrix(self.positions[chunk.rows], self.positions[chunk.keys])

    def allowed(self, chunk: Chunk, lags: Tensor | None = None) -> Tensor:
        """(B or 1, 1, R, S) boolean: query may see key, by window and causality, the attention mask and the
        documents. ``lags``: the chunk's ``lags`` when the caller has them already."""
        lags = self.lags(chunk) if lags is None else lags
        allowed = visible(lags, self.window, self.causal)
        if not self.sees_itself:
            allowed = allowed & (lags != 0)
        allowed = allowed[None, None]
        if self.key_real is not None:
            allowed = allowed & self.key_real[:, None, None, chunk.keys]
        if self.segment_ids is not None:  # packed documents: the (chunk, keys) block of this chunk only
            allowed = allowed & same_segment(self.segment_ids, chunk.rows, chunk.keys)
        return allowed


ResultT = TypeVar("ResultT")  # what a chunk's block returns: its output, or the output and a running selection


def recomputed(block: Callable[..., ResultT], *pieces) -> ResultT:
    """``block(*pieces)``; when a tensor piece needs gradients, under activation checkpointing (its scores and
    probabilities are recomputed in the backward pass rather than saved). The checkpoint keeps the tensor pieces
    (and any object piece alive), so they should be slices of the inputs and O(B·T) tensors, never a chunk's mask."""
    if torch.is_grad_enabled() and any(isinstance(p, Tensor) and p.requires_grad for p in pieces):
        return checkpoint(block, *pieces, use_reentrant=False)
    return block(*pieces)


__all__ = ["Chunk", "ChunkMask", "query_chunks", "recomputed"]
