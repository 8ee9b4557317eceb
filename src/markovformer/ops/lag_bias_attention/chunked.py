"""Global-scope Markov attention in O(T) memory: exact softmax over query chunks, recomputed in the backward pass.

Queries are taken ``chunk`` rows at a time; a chunk's scores against every key it may see (keys before its end when
causal) are one (B·H, chunk, keys) batched product, the K per-lag biases are added in place on the K strided
diagonals of that block (keys are padded by K zero rows at each end so every lag has a column), masks are additive,
and the softmax is exact. Nothing of size T×T is kept: the forward saves only its inputs, and the backward rebuilds
each chunk's probabilities, then accumulates the key and value gradients in place (``baddbmm_``). Chunks write
into two (forward) or three (backward) workspaces of one chunk's size, (B·H, chunk, T), allocated once per call, so
extra memory grows linearly in T; time is the O(T²) of global attention, half of it when causal.

Dropout draws each chunk's mask from a generator seeded per chunk, so the backward pass redraws the same mask.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.ops.first_order import first_order_only
from markovformer.ops.precision import compute_dtype

MAX_CHUNK, MIN_CHUNK = 64, 16  # queries per chunk: 64 measured best on CPU for T = 256..8k (32-256 within 20 %)
CHUNK_ELEMENTS = 1 << 23  # but a chunk's scores stay below 32 MiB, glibc's limit for reusing freed memory


def default_chunk_size(batch_heads: int, seq_len: int) -> int:
    """Queries per chunk: ``MAX_CHUNK``, fewer when the (B·H, chunk, T) scores would pass ``CHUNK_ELEMENTS``."""
    return max(MIN_CHUNK, min(MAX_CHUNK, CHUNK_ELEMENTS // max(1, batch_heads * seq_len)))


def _sees_own_segment(ids: Tensor, real: Tensor | None, causal: bool) -> Tensor:
    """(B, T): the query's document (``ids``, -1 = padding) holds a real key (``real`` (B, T) or all) that it may
    see: any when bidirectional, one at or before it when causal. By each document's first real key, O(B·T)."""
    batch, length = ids.shape
    positions = torch.arange(length, device=ids.device).expand(batch, length)
    keys = ids >= 0 if real is None else real & (ids >= 0)
    documents = int(ids.max()) + 1 if ids.numel() else 1
    first = torch.full((batch, max(documents, 1)), length, dtype=positions.dtype, device=ids.device)
    first = first.scatter_reduce(1, ids.clamp_min(0), torch.where(keys, positions, length), "amin")
    own_first = first.gather(1, ids.clamp_min(0))
    return (ids >= 0) & (own_first <= positions if causal else own_first < length)


class _Plan:
    """Everything the forward and the backward pass share: sizes, masks and how to rebuild a chunk's scores."""

    def __init__(self, q, past_bias, future_bias, causal, attention_mask, dropout_p, chunk_size, seed,
                 segment_ids=None):  # fmt: skip
        self.batch, self.heads, self.seq_len, head_dim = q.shape
        self.causal, self.dropout_p, self.seed = causal, dropout_p, seed
        self.scale = 1.0 / math.sqrt(head_dim)
        self.chunk = chunk_size or default_chunk_size(self.batch * self.heads, self.seq_len)
        # Lags beyond the sequence never have a key; future lags have none when causal.
        self.past_count = 0 if past_bias is None else min(past_bias.shape[-1], self.seq_len - 1)
        self.future_count = 0 if (future_bias is None or causal) else min(future_bias.shape[-1], self.seq_len - 1)
        self.counts = {"past": self.past_count, "future": self.future_count}
        self.hidden = torch.finfo(q.dtype).min / 4  # masked score: finite, several may add up
        device, dtype = q.device, q.dtype
        self.key_add = None  # (B, 1, 1, Kp + T + Kf): 0 for a real key, hidden for padding and the pad columns
        self.has_key = None  # (B, 1, T, 1): the query sees at least one key
        real = None
        if attention_mask is not None:
            real = attention_mask.to(device).bool()
            pads = (self.past_count, self.future_count)
            present = torch.nn.functional.pad(real, pads, value=False)
            self.key_add = torch.where(present, torch.zeros((), dtype=dtype, device=device), self.hidden)
            self.key_add = self.key_add[:, None, None, :]
            seen = real.cumsum(-1) > 0 if causal else real.any(-1, keepdim=True).expand_as(real)
            self.has_key = seen[:, None, :, None]
        self.query_segments = self.key_segments = None
        if segment_ids is not None:  # packed documents: (B, 1, T, 1) against (B, 1, 1, Kp + T + Kf) per chunk
            ids = segment_ids.to(device)
            self.query_segments = ids[:, None, :, None]
            pads = (self.past_count, self.future_count)
            self.key_segments = torch.nn.functional.pad(ids, pads, value=-1)[:, None, None, :]
            self.has_key = _sees_own_segment(ids, real, causal)[:, None, :, None]

    def columns(self, end: int) -> int:
        """Key columns (padded coordinates) that a chunk ending at query ``end`` reads."""
        return self.past_count + (end if self.causal else self.seq_len + self.future_count)

    def workspace(self, q_flat: Tensor) -> Tensor:
        """Flat buffer for one chunk's (B·H, rows, columns) block: allocated once per call and reused by every
        chunk, so no chunk pays for fresh memory."""
        return q_flat.new_empty(self.batch * self.heads * self.chunk * self.columns(self.seq_len))

    def probabilities(self, q_rows, k_padded, start, end, past_bias, future_bias, scores_space, probs_space):
        """(B·H, rows, columns) attention probabilities of the (pre-scaled) queries start..end: exact softmax over
        the visible keys, zero rows for queries that see none. Written into ``probs_space`` (a ``workspace``)."""
        width = self.columns(end)
        rows = end - start
        shape = (q_rows.shape[0], rows, width)
        scores = _view(scores_space, shape)
        torch.bmm(q_rows, k_padded[:, :width].transpose(1, 2), out=scores)  # q_rows carry the 1/sqrt(Dh) scale
        scores[..., : self.past_count] = self.hidden
        grid = scores.view(self.batch, self.heads, rows, width)
        if self.causal:
            # Key column past_count + j is visible from query t iff j <= t: only the diagonal block needs a mask.
            offsets = torch.arange(rows, device=scores.device)
            later = offsets[None, :] > offsets[:, None]
            grid[..., self.past_count + start : width].masked_fill_(later, self.hidden)
        else:
            scores[..., self.past_count + self.seq_len :] = self.hidden
        if self.key_add is not None:
            grid += self.key_add[..., :width]
        if self.query_segments is not None:  # (B, 1, rows, width): this chunk's keys of other documents
            grid.masked_fill_(self.query_segments[:, :, start:end] != self.key_segments[..., :width], self.hidden)
        for bias, direction in ((past_bias, "past"), (future_bias, "future")):
            count = self.counts[direction]
            if count:
                values = bias[:, :, start:end, :count].reshape(-1, rows, count)
                self.lag_diagonals(scores, start, direction).add_(values.flip(-1) if direction == "past" else values)
        probs = torch.ops.aten._softmax.out(scores, -1, False, out=_view(probs_space, shape))
        if self.has_key is not None:
            probs.view(self.batch, self.heads, rows, width).mul_(self.has_key[:, :, start:end])
        return probs

    def lag_diagonals(self, scores: Tensor, start: int, direction: str) -> Tensor:
        """(B·H, rows, count) strided view: [n, i, j] is query start+i's score on the key at lag ``count - j``
        (past) or ``-(j + 1)`` (future); padded key column c holds position c - past_count."""
        total, rows, width = scores.shape
        count = self.counts[direction]
        offset = start if direction == "past" else self.past_count + start + 1
        return scores.as_strided((total, rows, count), (rows * width, width + 1, 1), scores.storage_offset() + offset)

    def dropout_keep(self, probs: Tensor, chunk_index: int) -> Tensor | None:
        if self.dropout_p == 0:
            return None
        generator = torch.Generator(device=probs.device).manual_seed(self.seed + chunk_index)
        keep = torch.zeros(probs.shape, device=probs.device, dtype=probs.dtype)
        if self.dropout_p >= 1:  # every probability dropped: zeros, as F.dropout (not 0/0)
            return keep
        return keep.bernoulli_(1.0 - self.dropout_p, generator=generator).div_(1.0 - self.dropout_p)

    def chunks(self):
        for index, start in enumerate(range(0, self.seq_len, self.chunk)):
            yield index, start, min(start + self.chunk, self.seq_len)


def _view(space: Tensor, shape: tuple[int, ...]) -> Tensor:
    """A contiguous tensor of ``shape`` at the start of a flat workspace."""
    return space[: math.prod(shape)].view(shape)


def _padded_keys(x: Tensor, plan: _Plan) -> Tensor:
    """(B, H, T, D) -> (B·H, Kp + T + Kf, D) with zero rows before and after."""
    batch_heads = plan.batch * plan.heads
    out = x.new_zeros(batch_heads, plan.past_count + plan.seq_len + plan.future_count, x.shape[-1])
    out[:, plan.past_count : plan.past_count + plan.seq_len] = x.reshape(batch_heads, plan.seq_len, -1)
    return out


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, past_bias, future_bias, causal, attention_mask, dropout_p, chunk_size, seed,
                segment_ids=None):  # fmt: skip
        plan = _Plan(q, past_bias, future_bias, causal, attention_mask, dropout_p, chunk_size, seed, segment_ids)
        batch_heads = plan.batch * plan.heads
        q_flat = q.reshape(batch_heads, plan.seq_len, -1) * plan.scale
        k_padded, v_padded = _padded_keys(k, plan), _padded_keys(v, plan)
        out = q.new_empty(batch_heads, plan.seq_len, v.shape[-1])
        spaces = plan.workspace(q_flat), plan.workspace(q_flat)
        with torch.no_grad():
            for index, start, end in plan.chunks():
                probs = plan.probabilities(q_flat[:, start:end], k_padded, start, end, past_bias, future_bias, *spaces)
                keep = plan.dropout_keep(probs, index)
                if keep is not None:
                    probs.mul_(keep)
                torch.bmm(probs, v_padded[:, : probs.shape[-1]], out=out[:, start:end])
        ctx.save_for_backward(q_flat, k_padded, v_padded, past_bias, future_bias)
        ctx.plan = plan
        ctx.bias_present = (past_bias is not None, future_bias is not None)
        return out.view(plan.batch, plan.heads, plan.seq_len, -1)

    @staticmethod
    @first_order_only("the chunked lag-bias attention", "backend='naive' has one")
    def backward(ctx, grad_out):
        q_flat, k_padded, v_padded, past_bias, future_bias = ctx.saved_tensors
        plan = ctx.plan
        batch_heads = plan.batch * plan.heads
        grad_flat = grad_out.reshape(batch_heads, plan.seq_len, -1)
        grad_q = torch.empty_like(q_flat)
        grad_k, grad_v = torch.zeros_like(k_padded), torch.zeros_like(v_padded)
        grad_past = None if past_bias is None else torch.zeros_like(past_bias)
        grad_future = None if future_bias is None else torch.zeros_like(future_bias)
        scores_space, probs_space, grad_space = (plan.workspace(q_flat) for _ in range(3))
        for index, start, end in plan.chunks():
            rows = end - start
            q_rows, grad_rows = q_flat[:, start:end], grad_flat[:, start:end]
            probs = plan.probabilities(q_rows, k_padded, start, end, past_bias, future_bias, scores_space, probs_space)
            width = probs.shape[-1]
            keep = plan.dropout_keep(probs, index)
            grad_attended = torch.bmm(
                grad_rows, v_padded[:, :width].transpose(1, 2), out=_view(grad_space, probs.shape)
            )
            attended = probs
            if keep is not None:
                grad_attended.mul_(keep)
                attended = probs * keep
            grad_v[:, :width].baddbmm_(attended.transpose(1, 2), grad_rows)
            # scores_space is free again: the gradient of the scores goes there
            grad_scores = _view(scores_space, probs.shape)
            torch.ops.aten._softmax_backward_data.out(grad_attended, probs, -1, probs.dtype, grad_input=grad_scores)
            del grad_attended, attended, probs
            for grad_bias, direction in ((grad_past, "past"), (grad_future, "future")):
                count = plan.counts[direction]
                if grad_bias is not None and count:
                    diagonals = plan.lag_diagonals(grad_scores, start, direction)
                    diagonals = diagonals.flip(-1) if direction == "past" else diagonals
                    grad_bias[:, :, start:end, :count] = diagonals.reshape(plan.batch, plan.heads, rows, count)
            torch.bmm(grad_scores, k_padded[:, :width], out=grad_q[:, start:end])
            grad_k[:, :width].baddbmm_(grad_scores.transpose(1, 2), q_rows)
        grad_q.mul_(plan.scale)  # scores = (scale·q)·k, so k's gradient already carries the scale through q_flat
        crop = slice(plan.past_count, plan.past_count + plan.seq_len)
        shape = (plan.batch, plan.heads, plan.seq_len)
        return (grad_q.view(*shape, -1), grad_k[:, crop].reshape(*shape, -1), grad_v[:, crop].reshape(*shape, -1),
                grad_past, grad_future, None, None, None, None, None, None)  # fmt: skip


def lag_bias_attention_chunked(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    chunk_size: int | None = None,
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Global-scope Markov attention, O(T) memory. Shapes as the naive reference; returns (B, H, T, Dv) in q's dtype.

    ``chunk_size``: queries per chunk (default ``default_chunk_size``). Half-precision inputs are computed in float32.
    ``segment_ids``: (B, T) packed documents; each chunk masks the keys of other documents.
    """
    dtype = q.dtype
    compute = compute_dtype(dtype)
    tensors = [None if t is None else t.to(compute).contiguous() for t in (q, k, v, past_bias, future_bias)]
    seed = int(torch.randint(0, 2**62, (1,)).item()) if dropout_p > 0 else 0
    out = _ChunkedAttention.apply(*tensors, causal, attention_mask, dropout_p, chunk_size, seed, segment_ids)
    return out.to(dtype)
