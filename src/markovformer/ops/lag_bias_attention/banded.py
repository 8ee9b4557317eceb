"""Banded (look-around) Markov attention: O(T·W) time and memory, contiguous 3-D ``bmm`` only.

Every (batch, head) sequence is cut into query blocks of C positions; all blocks of all heads are stacked into one
batch axis of N = B·H·nb blocks. Block n's queries see one contiguous key window of L positions starting W_left
before the block, so both matmuls are plain batched 3-D products, and the windows are overlapping strided views of
one padded key buffer: nothing is gathered or copied per window. Windows at a sequence edge read padding or the
neighbouring head's keys; the edge mask hides those.

L is rounded up to a multiple of 16: CPU softmax over a last axis of 16k entries runs several times faster than over,
say, 20 (measured on AVX-512), so the extra masked columns pay for themselves.

Forward and backward are written out in one ``autograd.Function`` that walks the blocks in groups small enough for
every temporary to stay in cache (and below the size at which glibc hands out fresh, page-faulting memory on every
call; at T = 64k that cost more than the arithmetic). The lag biases are added in place on the K strided diagonals
of each group's scores (no index tensors); the backward accumulates the key and value gradients straight into one
buffer with in-place ``baddbmm_`` on the window slices that can hold a visible key, instead of materialising window
gradients and folding them. Only the queries, the padded key/value buffers and the probabilities are saved. No
(T, T) tensor exists. Half-precision inputs are computed in float32.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.first_order import first_order_only
from markovformer.ops.lags import lag_matrix, visible
from markovformer.ops.precision import autocast_off, compute_dtype

SPAN_MULTIPLE = 16  # key-window length rounded up to this: CPU softmax vectorises whole 16-float rows
MIN_BLOCK = 8  # queries per block at least: smaller blocks starve the matmuls
# Wide windows: 64-query blocks beat the fitted 16 by 1.2-1.25x at W = 256 and 1024 (T=4096, H=8, Dh=32, fwd+bwd,
# 1 thread, shared machine; C = 32..128 within 10% of each other), and lose at W = 64.
WIDE_REACH, WIDE_BLOCK = 256, 64
GROUP_ELEMENTS = 1 << 20  # elements of a group's largest temporary (4 MiB in float32): measured best of 2^16..2^30


def default_block_size(window: int, causal: bool = True) -> int:
    """Queries per block: the largest power of two (so C divides most T: no padding copies) that fits, with the
    window's reach, in the smallest key span that is a multiple of ``SPAN_MULTIPLE`` and holds ``MIN_BLOCK``
    queries. Measured best on CPU for W = 1..64, causal and bidirectional (e.g. W=4 causal: C=8, L=16).
    From a reach of ``WIDE_REACH`` keys on, ``WIDE_BLOCK`` queries per block (more work per matmul)."""
    reach = window if causal else 2 * window
    if reach >= WIDE_REACH:
        return WIDE_BLOCK
    span = SPAN_MULTIPLE * (-(-(reach + MIN_BLOCK) // SPAN_MULTIPLE))
    return 1 << ((span - reach).bit_length() - 1)


@dataclass(frozen=True)
class _Layout:
    """Sizes of the block decomposition of one call."""

    batch: int
    heads: int
    seq_len: int
    block: int  # C: queries per block
    num_blocks: int  # nb per (batch, head) sequence
    left: int  # keys before the block's first query that its window holds
    right: int  # keys after the block's last query that its window holds
    span: int  # L: keys per window, a multiple of SPAN_MULTIPLE unless the caller fixed the block size
    group: int  # blocks per group

    @property
    def total_blocks(self) -> int:  # N
        return self.batch * self.heads * self.num_blocks

    @property
    def padded_len(self) -> int:
        return self.num_blocks * self.block

    @property
    def used(self) -> int:
        """Window columns that can hold a visible key (the rest only pad the span)."""
        return self.block + self.left + self.right

    def groups(self):
        for start in range(0, self.total_blocks, self.group):
            yield start, min(start + self.group, self.total_blocks)


def _layout(q: Tensor, value_dim: int, window: int, causal: bool, block_size: int | None) -> _Layout:
    batch, heads, seq_len, head_dim = q.shape
    right = 0 if causal else window
    block = block_size or default_block_size(window, causal)
    used = block + window + right
    span = SPAN_MULTIPLE * (-(-used // SPAN_MULTIPLE)) if block_size is None else used
    group = max(1, GROUP_ELEMENTS // (block * max(span, head_dim, value_dim)))
    return _Layout(batch, heads, seq_len, block, -(-seq_len // block), window, right, span, group)


def _key_buffer(x: Tensor, layout: _Layout) -> Tensor:
    """(B, H, T, D) -> flat (N·C + L - C, D) buffer: row ``left + g·C + i`` holds position i of global block g; the
    per-sequence tail and both buffer ends are zero (finite, so masked scores stay finite)."""
    dim = x.shape[-1]
    rows = layout.total_blocks * layout.block
    buffer = x.new_empty(rows + layout.span - layout.block, dim)
    buffer[: layout.left].zero_()
    buffer[layout.left + rows :].zero_()
    body = buffer[layout.left : layout.left + rows].view(layout.batch, layout.heads, layout.padded_len, dim)
    body[:, :, : layout.seq_len].copy_(x)
    body[:, :, layout.seq_len :].zero_()
    return buffer


def _windows(buffer: Tensor, layout: _Layout) -> Tensor:
    """(N, L, D) overlapping view: window n is buffer rows n·C .. n·C + L."""
    dim = buffer.shape[-1]
    return buffer.as_strided((layout.total_blocks, layout.span, dim), (layout.block * dim, dim, 1))


def _gradient_buffer(layout: _Layout, dim: int, like: Tensor) -> Tensor:
    """Zeroed buffer for ``_accumulate_windows``: room for every slice of every window."""
    pieces = -(-layout.used // layout.block)
    return like.new_zeros(layout.total_blocks * layout.block + (pieces - 1) * layout.block, dim)


def _accumulate_windows(buffer: Tensor, weights: Tensor, values: Tensor, start: int, layout: _Layout) -> None:
    """buffer[window rows of blocks start..] += weights^T @ values, for (G, C, L) weights and (G, C, D) values: the
    adjoint of reading windows from a ``_key_buffer``. Window columns are taken C at a time, so each slice of
    window rows is a contiguous (G, C, D) view of the buffer that ``baddbmm_`` updates in place."""
    total, block, dim = values.shape
    for piece in range(0, layout.used, block):
        width = min(block, layout.used - piece)
        first = start * block + piece
        target = buffer[first : first + total * block].view(total, block, dim)
        part = weights[:, :, piece : piece + width].transpose(1, 2)
        if width == block:
            target.baddbmm_(part, values)
        else:  # a partial slice is not contiguous, where in-place baddbmm_ is slow: add a product instead
            target[:, :width] += torch.bmm(part, values)


def _unbuffer(buffer: Tensor, layout: _Layout) -> Tensor:
    """The (B, H, T, D) rows of a key-shaped buffer."""
    rows = layout.total_blocks * layout.block
    body = buffer[layout.left : layout.left + rows].view(layout.batch, layout.heads, layout.padded_len, -1)
    return body[:, :, : layout.seq_len]


def _query_blocks(x: Tensor, layout: _Layout) -> Tensor:
    """(B, H, T, D) -> (N, C, D), zero-padded at each sequence's tail (a view when nothing needs padding)."""
    pad = layout.padded_len - layout.seq_len
    if pad:
        x = F.pad(x, (0, 0, 0, pad))
    return x.reshape(layout.total_blocks, layout.block, x.shape[-1])


def _lag_diagonal(scores: Tensor, layout: _Layout, lag: int) -> Tensor:
    """(G, C) strided view of ``scores`` (G, C, L): entry [n, i] is query i's score on the key at ``lag``."""
    # query 0's column; query i's is i columns further (a diagonal view: no storage offset, which compile cannot read)
    return scores.diagonal(layout.left - lag, dim1=1, dim2=2)


def _lag_slots(bias: Tensor | None, direction: str, layout: _Layout) -> list[tuple[int, int]]:
    """(slot, lag) pairs of a per-lag bias that a window can see: past slot k-1 is lag k, future slot k-1 lag -k."""
    if bias is None:
        return []
    reach = layout.left if direction == "past" else layout.right
    sign = 1 if direction == "past" else -1
    return [(slot, sign * (slot + 1)) for slot in range(min(bias.shape[-1], reach))]


class _Masks:
    """Additive masks (0 visible, ``hidden`` not) and which queries see any key, for one call."""

    def __init__(self, layout: _Layout, window: int, causal: bool, attention_mask: Tensor | None, q: Tensor,
                 segment_ids: Tensor | None = None):  # fmt: skip
        device, dtype = q.device, q.dtype
        self.layout = layout
        hidden = torch.finfo(dtype).min / 4  # several may add up without overflowing to -inf
        zero = torch.zeros((), dtype=dtype, device=device)
        query_offsets = torch.arange(layout.block, device=device) + layout.left
        band = visible(lag_matrix(query_offsets, torch.arange(layout.span, device=device)), window, causal)
        self.band_add = torch.where(band, zero, hidden)[None]  # (1, C, L)
        positions = torch.arange(layout.num_blocks, device=device)[:, None] * layout.block - layout.left
        positions = positions + torch.arange(layout.span, device=device)[None, :]  # (nb, L)
        present = (positions >= 0) & (positions < layout.seq_len)
        self.has_key = None  # (N, C, 1) where a mask can leave a query with nothing to see
        self.absent_by_batch = None  # (B, nb, L)
        if attention_mask is not None:
            real = attention_mask.to(device=device).bool()
            gathered = real[:, positions.clamp(0, layout.seq_len - 1)]  # (B, nb, L)
            present = present[None] & gathered
            self.absent_by_batch = torch.where(present, zero, hidden)
        else:
            self.absent_table = torch.where(present, zero, hidden)  # (nb, L)
            # blocks whose window reaches past a sequence end, from the sizes alone: no data-dependent nonzero()
            self.edges = [index for index in range(layout.num_blocks)
                          if index * layout.block < layout.left
                          or index * layout.block - layout.left + layout.span > layout.seq_len]  # fmt: skip
        self.hidden, self.query_segments = hidden, None
        seen = band[None, None] & present[..., None, :]  # (B or 1, nb, C, L): visible by band, edges and padding
        if segment_ids is not None:  # packed documents: per block, each query's segment and each window key's
            ids = segment_ids.to(device)
            self.key_segments = ids[:, positions.clamp(0, layout.seq_len - 1)]  # (B, nb, L); edges hidden above
            padded = F.pad(ids, (0, layout.padded_len - layout.seq_len), value=-1)
            self.query_segments = padded.view(layout.batch, layout.num_blocks, layout.block)  # (B, nb, C)
            queries = self.query_segments[..., None]  # a padding query (segment -1) sees nothing
            seen = seen & (queries == self.key_segments[:, :, None, :]) & (queries >= 0)
        if attention_mask is not None or segment_ids is not None:  # both masks at once, as the naive path
            has_key = seen.any(-1)  # (B, nb, C)
            self.has_key = has_key[:, None].expand(-1, layout.heads, -1, -1).reshape(-1, layout.block, 1)

    def add_absent(self, scores: Tensor, start: int, stop: int) -> None:
        """Hide the keys of blocks start..stop that are padding or lie beyond their sequence."""
        layout = self.layout
        blocks = torch.arange(start, stop, device=scores.device)
        within = blocks % layout.num_blocks
        batch_index = blocks // (layout.heads * layout.num_blocks)
        if self.query_segments is not None:  # keys of another document: (G, C, L), no (T, T) tensor
            queries, keys = self.query_segments[batch_index, within], self.key_segments[batch_index, within]
            scores.masked_fill_(queries[:, :, None] != keys[:, None], self.hidden)
        if self.absent_by_batch is not None:
            scores += self.absent_by_batch[batch_index, within][:, None, :]
            return
        per_sequence = layout.num_blocks
        edges = [first + edge - start for first in range(start - start % per_sequence, stop, per_sequence)
                 for edge in self.edges if start <= first + edge < stop]  # fmt: skip
        if edges:
            scores[edges] += self.absent_table[within[edges]][:, None, :]


class _BandedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, past_bias, future_bias, window, causal, attention_mask, dropout_p, block_size,
                segment_ids=None):  # fmt: skip
        layout = _layout(q, v.shape[-1], window, causal, block_size)
        scale = 1.0 / math.sqrt(q.shape[-1])
        masks = _Masks(layout, window, causal, attention_mask, q, segment_ids)
        q_blocks = _query_blocks(q, layout)
        k_buffer, v_buffer = _key_buffer(k, layout), _key_buffer(v, layout)
        k_windows, v_windows = _windows(k_buffer, layout), _windows(v_buffer, layout)
        lags = []  # (per-block bias (N, C, K), slot, lag) for every lag a window can see
        for bias, direction in ((past_bias, "past"), (future_bias, "future")):
            lags += [(_query_blocks(bias, layout), slot, lag) for slot, lag in _lag_slots(bias, direction, layout)]
        out = q.new_empty(layout.total_blocks, layout.block, v.shape[-1])
        saved = []
        for start, stop in layout.groups():
            scores = torch.baddbmm(masks.band_add, q_blocks[start:stop], k_windows[start:stop].transpose(1, 2),
                                   alpha=scale)  # fmt: skip
            masks.add_absent(scores, start, stop)
            for bias_blocks, slot, lag in lags:
                _lag_diagonal(scores, layout, lag).add_(bias_blocks[start:stop, :, slot])
            probs = torch.softmax(scores, dim=-1)
            if masks.has_key is not None:  # a query with no visible key returns zeros
                probs.mul_(masks.has_key[start:stop])
            attended = probs
            if dropout_p > 0:
                keep = torch.zeros_like(probs)  # p = 1 drops every probability: zeros, as F.dropout (not 0/0)
                if dropout_p < 1:
                    keep.bernoulli_(1.0 - dropout_p).div_(1.0 - dropout_p)
                attended = probs * keep
                saved.append(keep)
            used = slice(0, layout.used)
            torch.bmm(attended[:, :, used], v_windows[start:stop, used], out=out[start:stop])
            saved.append(probs)
        ctx.save_for_backward(q_blocks, k_buffer, v_buffer, *saved)
        ctx.layout, ctx.scale, ctx.dropout_p = layout, scale, dropout_p
        ctx.lag_slots = [_lag_slots(bias, direction, layout) for bias, direction in
                         ((past_bias, "past"), (future_bias, "future"))]  # fmt: skip
        ctx.bias_shapes = [None if b is None else b.shape for b in (past_bias, future_bias)]
        out = out.view(layout.batch, layout.heads, layout.padded_len, v.shape[-1])
        return out[:, :, : layout.seq_len]

    @staticmethod
    @first_order_only("the banded lag-bias attention", "backend='naive' has one")
    @autocast_off
    def backward(ctx, grad_out):
        q_blocks, k_buffer, v_buffer, *saved = ctx.saved_tensors
        layout, scale = ctx.layout, ctx.scale
        k_windows, v_windows = _windows(k_buffer, layout), _windows(v_buffer, layout)
        grad_blocks = _query_blocks(grad_out, layout)
        grad_q = torch.empty_like(q_blocks)
        grad_k = _gradient_buffer(layout, k_buffer.shape[-1], k_buffer)
        grad_v = _gradient_buffer(layout, v_buffer.shape[-1], v_buffer)
        bias_grads = [None if shape is None else q_blocks.new_zeros(layout.total_blocks, layout.block, shape[-1])
                      for shape in ctx.bias_shapes]  # fmt: skip
        per_group = 2 if ctx.dropout_p > 0 else 1
        for index, (start, stop) in enumerate(layout.groups()):
            keep, probs = saved[per_group * index : per_group * (index + 1)] if per_group == 2 else (None, saved[index])
            upstream = grad_blocks[start:stop]
            grad_attended = torch.bmm(upstream, v_windows[start:stop].transpose(1, 2))
            attended = probs
            if keep is not None:
                grad_attended.mul_(keep)
                attended = probs * keep
            _accumulate_windows(grad_v, attended, upstream, start, layout)
            grad_scores = torch._softmax_backward_data(grad_attended, probs, -1, probs.dtype)
            for grad_bias, slots in zip(bias_grads, ctx.lag_slots, strict=True):
                for slot, lag in slots:
                    if grad_bias is not None:
                        grad_bias[start:stop, :, slot] = _lag_diagonal(grad_scores, layout, lag)
            grad_scores.mul_(scale)
            torch.bmm(grad_scores, k_windows[start:stop], out=grad_q[start:stop])
            _accumulate_windows(grad_k, grad_scores, q_blocks[start:stop], start, layout)
        crop = (layout.batch, layout.heads, layout.padded_len)
        grad_q = grad_q.view(*crop, -1)[:, :, : layout.seq_len]
        bias_grads = [None if g is None else g.view(*crop, -1)[:, :, : layout.seq_len] for g in bias_grads]
        grad_k, grad_v = _unbuffer(grad_k, layout), _unbuffer(grad_v, layout)
        return grad_q, grad_k, grad_v, *bias_grads, None, None, None, None, None, None, None


@autocast_off
def lag_bias_attention_banded(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    window: int,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    block_size: int | None = None,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Local-scope Markov attention. Shapes as the naive reference; returns (B, H, T, Dv) in q's dtype.

    ``block_size``: queries per block (default: fill a 16-multiple key span, see ``default_block_size``).
    ``segment_ids``: (B, T) packed documents; each block masks the keys of other documents in its window.
    """
    dtype = q.dtype
    compute = compute_dtype(dtype)
    tensors = [None if t is None else t.to(compute) for t in (q, k, v, past_bias, future_bias)]
    out = _BandedAttention.apply(*tensors, window, causal, attention_mask, dropout_p, block_size, segment_ids)
    return out.to(dtype)
