"""Packed documents: per-token segment ids derived once from ``position_ids``, and the re-batching of a packed
batch into one padded row per document (the generic path for a mixer that cannot mask by segment itself).

The Hugging Face convention (``DataCollatorWithFlattening``): ``position_ids`` (B, T) restart at 0 at each document.
A new segment starts wherever a position is not its predecessor's plus one (so a window that begins inside a
document, at position 57, is one segment too). Padding (``attention_mask`` 0) belongs to no segment: id -1.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from torch import Tensor


def document_starts(position_ids: Tensor) -> Tensor:
    """(B, T) boolean: the token opens a segment (position 0 of the row, or not its predecessor's position + 1)."""
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] != position_ids[:, :-1] + 1
    return starts


def check_position_ids(position_ids: Tensor, max_positions: int | None = None) -> None:
    """ValueError naming the bad value unless ``position_ids`` are >= 0 and, given ``max_positions`` (a table of
    learned positions), below it. Inside ``torch.compile`` (reading the values back would break the graph) they are
    device-side assertions, a RuntimeError without the value: a model's own ``compile`` runs this eagerly first."""
    if torch.compiler.is_compiling():
        torch._assert_async(~(position_ids < 0).any(), "position_ids must be >= 0")
        if max_positions is not None:
            torch._assert_async(position_ids.max() < max_positions,
                                f"position_ids must lie below max_positions={max_positions}")  # fmt: skip
        return
    if bool((position_ids < 0).any()):
        raise ValueError(f"position_ids must be >= 0; got {int(position_ids.min())}")
    if max_positions is not None and int(position_ids.max()) >= max_positions:
        raise ValueError(f"position_ids reach {int(position_ids.max())} but max_positions={max_positions}")


def segment_ids(position_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
    """(B, T) long: 0, 1, ... numbering the documents of each row left to right; -1 at padding."""
    if position_ids.dim() != 2:
        raise ValueError(f"position_ids must be (B, T); got shape {tuple(position_ids.shape)}")
    if attention_mask is not None and attention_mask.shape != position_ids.shape:
        raise ValueError(f"position_ids {tuple(position_ids.shape)} and attention_mask "
                         f"{tuple(attention_mask.shape)} must have the same shape")  # fmt: skip
    check_position_ids(position_ids)
    ids = document_starts(position_ids).long().cumsum(-1) - 1
    if attention_mask is not None:
        ids = ids.masked_fill(~attention_mask.bool(), -1)
    return ids


@dataclass
class Segments:
    """The documents of a packed batch, derived once per forward pass and handed to every layer.

    ``position_ids`` (B, T): each token's position in its document; ``ids`` (B, T): its segment (-1 at padding)."""

    position_ids: Tensor
    ids: Tensor

    @classmethod
    def from_positions(cls, position_ids: Tensor, attention_mask: Tensor | None = None) -> Segments:
        return cls(position_ids.long(), segment_ids(position_ids, attention_mask))

    @cached_property
    def layout(self) -> SegmentBatch:
        """Where each real token goes in the (n_segments, max_len) re-batched form (computed on first use)."""
        return SegmentBatch.of(self.ids)


@dataclass
class SegmentBatch:
    """Index arithmetic between a packed (B, T, ...) batch and its documents as rows of an (N, L, ...) batch,
    L = the longest document, right padded (``mask`` (N, L), 1 = real)."""

    source: Tensor  # (R,) flat indices into B·T of the real tokens, in order
    row: Tensor  # (R,) their document's row in the re-batched form
    column: Tensor  # (R,) their offset in that row
    shape: tuple[int, int, int, int]  # B, T, N, L
    mask: Tensor  # (N, L) long

    @classmethod
    def of(cls, ids: Tensor) -> SegmentBatch:
        batch, seq_len = ids.shape
        flat = ids.reshape(-1)
        source = (flat >= 0).nonzero().flatten()
        real = flat[source]
        # a new document wherever the segment id changes, the previous real token is not the flat neighbour, or a
        # batch row begins (a row's last token and the next row's first are flat neighbours and may share an id)
        new = torch.ones_like(source, dtype=torch.bool)
        new[1:] = ((real[1:] != real[:-1]) | (source[1:] != source[:-1] + 1)
                   | (source[1:] // seq_len != source[:-1] // seq_len))  # fmt: skip
        row = new.long().cumsum(0) - 1
        count = int(row[-1]) + 1 if row.numel() else 0
        first = torch.zeros(count, dtype=torch.long, device=ids.device).scatter_reduce(
            0, row, torch.arange(row.numel(), device=ids.device), "amin", include_self=False
        )
        column = torch.arange(row.numel(), device=ids.device) - first[row]
        lengths = torch.bincount(row, minlength=count)
        longest = int(lengths.max()) if count else 0
        mask = (torch.arange(longest, device=ids.device)[None, :] < lengths[:, None]).long()
        return cls(source, row, column, (batch, seq_len, count, longest), mask)

    def pack(self, x: Tensor, time_dim: int = 1) -> Tensor:
        """(B, T, ...) or, with ``time_dim=2``, (B, h, T, ...) -> the same with (N, L) for (B, T); zeros at padding."""
        batch, seq_len, count, longest = self.shape
        x = x.movedim(time_dim, 1)
        flat = x.reshape(batch * seq_len, *x.shape[2:])
        out = flat.new_zeros(count, longest, *x.shape[2:])
        out = out.index_put((self.row, self.column), flat[self.source])
        return out.movedim(1, time_dim)

    def unpack(self, y: Tensor, time_dim: int = 1) -> Tensor:
        """The inverse of ``pack``: (N, L, ...) -> (B, T, ...), zeros at padding."""
        batch, seq_len, count, longest = self.shape
        y = y.movedim(time_dim, 1)
        out = y.new_zeros(batch * seq_len, *y.shape[2:])
        out = out.index_put((self.source,), y[self.row, self.column])
        return out.view(batch, seq_len, *y.shape[2:]).movedim(1, time_dim)

    def unpack_pairs(self, weights: Tensor) -> Tensor:
        """(N, h, L, L) per-document attention weights -> (B, h, T, T), block-diagonal by document (zeros
        elsewhere)."""
        batch, seq_len, count, longest = self.shape
        table = self.source.new_full((count, longest), -1)
        table[self.row, self.column] = self.source  # flat B·T index of each (document, offset)
        pairs = (table[:, :, None] >= 0) & (table[:, None, :] >= 0)  # (N, L, L)
        document, query, key = pairs.nonzero().unbind(-1)
        flat_query, flat_key = table[document, query], table[document, key]
        out = weights.new_zeros(batch, seq_len, seq_len, weights.shape[1])
        out[flat_query // seq_len, flat_query % seq_len, flat_key % seq_len] = weights.permute(0, 2, 3, 1)[
            document, query, key]
        return out.permute(0, 3, 1, 2)


def segment_starts(ids: Tensor) -> Tensor:
    """(B, T) boolean: the token's segment differs from its predecessor's (t = 0 included): where a forward
    recurrence restarts from a zero state."""
    starts = torch.ones_like(ids, dtype=torch.bool)
    starts[:, 1:] = ids[:, 1:] != ids[:, :-1]
    return starts


def segment_ends(ids: Tensor) -> Tensor:
    """(B, T) boolean: the token's successor lies in another segment (t = T-1 included): where a backward
    recurrence restarts."""
    ends = torch.ones_like(ids, dtype=torch.bool)
    ends[:, :-1] = ids[:, :-1] != ids[:, 1:]
    return ends


def last_real_segment(ids: Tensor) -> Tensor:
    """(B, T): the segment of the last real token at or before t (-1 before the first): padding (-1) inside a
    document then continues that document, so a chunk that ends on a hole still carries its document's sums."""
    positions = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids)
    latest = torch.where(ids >= 0, positions, -1).cummax(dim=-1).values
    return torch.where(latest >= 0, ids.gather(-1, latest.clamp_min(0)), -1)


def same_segment(ids: Tensor, queries: slice = slice(None), keys: slice = slice(None)) -> Tensor:
    """(B, 1, Tq, Tk) boolean: query t (of ``queries``) and key j (of ``keys``) lie in the same document; padding
    (id -1) lies in none. The whole (T, T) block for the reference paths, one chunk's block for the chunked ones."""
    rows, columns = ids[:, queries], ids[:, keys]
    return (rows[:, None, :, None] == columns[:, None, None, :]) & (columns >= 0)[:, None, None, :]


__all__ = ["SegmentBatch", "Segments", "document_starts", "last_real_segment", "same_segment", "segment_ends",
           "segment_ids", "segment_starts"]
