"""Linear attention in O(T): key sums when bidirectional, chunked prefix sums when causal.

Causal: split T into chunks of C. A query sees (a) earlier keys of its own chunk through a (C, C) causal
product and (b) all earlier chunks through the running state S = sum phi(k) [v, 1]^T (the last column is the
normaliser z = sum phi(k)), taken as an exclusive torch.cumsum over chunks. No Python loop over steps or chunks;
memory O(T C + (T / C) F Dv).
"""

from __future__ import annotations

from numbers import Integral

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.linear_attention.naive import key_mask, normalise
from markovformer.ops.precision import autocast_off, compute_dtype
from markovformer.ops.scan import linear_scan
from markovformer.ops.segments import last_real_segment


def _exclusive_cumsum(x: Tensor, dim: int) -> Tensor:
    """Sum of the strictly earlier entries along ``dim`` (shift then cumsum, no subtraction of large sums)."""
    shifted = x.narrow(dim, 0, x.shape[dim] - 1)
    zeros = torch.zeros_like(x.narrow(dim, 0, 1))
    return torch.cat([zeros, shifted], dim=dim).cumsum(dim=dim)


def _with_ones(v: Tensor) -> Tensor:
    """(..., Dv) -> (..., Dv + 1): the normaliser sum(phi(q)·phi(k)) is the product with a column of ones, so one
    set of products gives numerator and denominator together (measured 20 % faster than separate sums)."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def _bidirectional(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Numerator (B, H, T, Dv) and denominator (B, H, T, 1) from sums over all (already masked) keys."""
    both = q @ torch.einsum("bhtf,bhtd->bhfd", k, _with_ones(v))
    return both[..., :-1], both[..., -1:]


def _causal(
    q: Tensor, k: Tensor, v: Tensor, chunk_size: int, initial_state: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """Numerator (B, H, T, Dv) and denominator (B, H, T, 1) over keys j <= t (and the sums of ``initial_state``),
    chunk by chunk in parallel, and the sums S = Σ_j phi(k_j) [v_j, 1]ᵀ (B, H, F, Dv + 1) after the last key."""
    batch, heads, length, _ = q.shape
    num_chunks = -(-length // chunk_size)
    pad = num_chunks * chunk_size - length
    values = _with_ones(v)
    if pad:  # zero-padded tail positions add nothing to any sum and are cropped at the end
        q, k, values = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, values))
    q, k, values = (x.unflatten(2, (num_chunks, chunk_size)) for x in (q, k, values))
    scores = (q @ k.transpose(-2, -1)).tril()  # within a chunk, keys up to the query
    chunk_sums = torch.einsum("bhncf,bhncd->bhnfd", k, values)
    state = _exclusive_cumsum(chunk_sums, dim=2)
    if initial_state is not None:
        state = state + initial_state[:, :, None].to(state.dtype)
    both = scores @ values + q @ state
    both = both.reshape(batch, heads, num_chunks * chunk_size, -1)[:, :, :length]
    return both[..., :-1], both[..., -1:], state[:, :, -1] + chunk_sums[:, :, -1]


def _bidirectional_segments(q: Tensor, k: Tensor, v: Tensor, ids: Tensor) -> tuple[Tensor, Tensor]:
    """``_bidirectional`` over each query's own segment (packed documents, ``ids`` (B, T)): the sums of the G
    segments of a row (B, H, G, F, Dv + 1), read by each query through a one-hot of its segment (memory T·G·Dv)."""
    count = int(ids.max()) + 1 if ids.numel() else 1
    onehot = F.one_hot(ids.clamp_min(0), max(count, 1)).to(q.dtype)  # padding keys are zero already
    sums = torch.einsum("bhtf,btg,bhtd->bhgfd", k, onehot, _with_ones(v))
    both = torch.einsum("bhtf,bhgfd,btg->bhtd", q, sums, onehot)
    return both[..., :-1], both[..., -1:]


def _causal_segments(q: Tensor, k: Tensor, v: Tensor, chunk_size: int, ids: Tensor) -> tuple[Tensor, Tensor]:
    """``_causal`` over each query's own segment (packed documents, ``ids`` (B, T), padding keys already zero).
    Within a chunk the causal product is masked to the query's segment; across chunks the carried sums restart:
    chunk m adds the keys of the segment of its last real token (its "tail") and keeps the carry only when that
    segment continues the previous chunk's, a linear scan over chunks with gates 0 or 1. A query reads the carry
    iff its segment is the one the previous chunk ended in."""
    batch, heads, length, _ = q.shape
    num_chunks = -(-length // chunk_size)
    pad = num_chunks * chunk_size - length
    values = _with_ones(v)
    if pad:
        q, k, values = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, values))
        ids = F.pad(ids, (0, pad), value=-1)
    q, k, values = (x.unflatten(2, (num_chunks, chunk_size)) for x in (q, k, values))
    last = last_real_segment(ids).view(batch, num_chunks, chunk_size)[..., -1]  # (B, n): the segment a chunk ends in
    ids = ids.view(batch, num_chunks, chunk_size)
    same = ids[..., :, None] == ids[..., None, :]  # (B, n, C, C)
    scores = (q @ k.transpose(-2, -1)).tril() * same[:, None].to(q.dtype)
    tail = (ids == last[..., None]).to(q.dtype)
    tail_sums = torch.einsum("bhncf,bnc,bhncd->bnhfd", k, tail, values)  # (B, n, H, F, Dv + 1)
    continues = torch.zeros_like(last, dtype=torch.bool)
    continues[:, 1:] = last[:, 1:] == last[:, :-1]
    flat = tail_sums.flatten(2)
    carried, _ = linear_scan(continues[..., None].to(q.dtype).expand_as(flat).contiguous(), flat.contiguous())
    carry = torch.cat([torch.zeros_like(carried[:, :1]), carried[:, :-1]], dim=1).view_as(tail_sums)
    previous = torch.full_like(last, -2)  # the segment the previous chunk ended in (none before the first)
    previous[:, 1:] = last[:, :-1]
    reads = (ids == previous[..., None]).to(q.dtype)[:, None, ..., None]  # (B, 1, n, C, 1)
    both = scores @ values + (q @ carry.transpose(1, 2)) * reads
    both = both.reshape(batch, heads, num_chunks * chunk_size, -1)[:, :, :length]
    return both[..., :-1], both[..., -1:]


@autocast_off  # its sums stay in float32 under mixed precision: keys up to e^60 overflow float16
def linear_attention_chunked(
    q_features: Tensor,
    k_features: Tensor,
    v: Tensor,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    chunk_size: int = 64,
    normaliser: str = "positive",
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    segment_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention without a (T, T) matrix; same result as ``linear_attention_naive`` up to rounding.

    q_features, k_features (B, H, T, F); v (B, H, T, Dv); attention_mask (B, T), 1 = real, 0 = padding.
    Returns (B, H, T, Dv) in ``v``'s dtype. ``chunk_size`` only matters when causal.
    Causal attention carries the running sums S = Σ_j phi(k_j) [v_j, 1]ᵀ (B, H, F, Dv + 1) of the keys before the
    call (``initial_state``, in float32 or wider) and, with ``output_final_state``, returns them after its last key.
    ``segment_ids`` (B, T): packed documents (``ops.segments``); each query reads the keys of its own only.
    """
    if segment_ids is not None and (initial_state is not None or output_final_state):
        raise ValueError("packed documents (segment_ids) carry no state between calls")
    if not causal and (initial_state is not None or output_final_state):
        raise ValueError("bidirectional linear attention reads the whole sequence: it carries no state")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    batch, heads, length, features = q_features.shape
    state_shape = (batch, heads, features, v.shape[-1] + 1)
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be the running sums (B, H, F, Dv + 1) = {state_shape}, "
                         f"got shape {tuple(initial_state.shape)}")  # fmt: skip
    dtype = compute_dtype(q_features)
    real = key_mask(attention_mask, batch, length, q_features.device)
    if segment_ids is not None:  # segment -1 is padding, with or without an attention_mask
        real = real & (segment_ids.to(q_features.device) >= 0)
    real = real[:, None, :, None]
    zero = torch.zeros((), dtype=dtype, device=q_features.device)
    q = q_features.to(dtype)
    # Padded keys are removed by zeroing their features and values (where, not *, so inf/NaN cannot leak).
    k = torch.where(real, k_features.to(dtype), zero)
    values = torch.where(real, v.to(dtype), zero)
    final = None
    if segment_ids is not None:
        ids = segment_ids.to(q.device)
        if causal:
            numerator, denominator = _causal_segments(q, k, values, chunk_size, ids)
        else:
            numerator, denominator = _bidirectional_segments(q, k, values, ids)
        has_key = real  # a real query sees itself; a padding one (segment -1) nothing
    elif causal:
        numerator, denominator, final = _causal(q, k, values, chunk_size, initial_state)
        # a carried state may hold keys; where it holds none its sums are zero and so is the output either way
        has_key = (real.cumsum(dim=2) > 0) | (initial_state is not None)
    else:
        numerator, denominator = _bidirectional(q, k, values)
        has_key = real.any(dim=2, keepdim=True)
    output = normalise(numerator, denominator, has_key, normaliser).to(v.dtype)
    return (output, final) if output_final_state else output
