"""Causal retention by chunks (RetNet's chunkwise form): the parallel form inside a chunk, the state recurrence
across chunks, so no T×T matrix exists. Pinned to ``retention_parallel`` and ``retention_recurrent`` by the tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.retention.naive import decay_matrix, decay_powers
from markovformer.ops.scan import linear_scan
from markovformer.ops.segments import last_real_segment


def retention_chunkwise(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, chunk_size: int = 64, initial_state: Tensor | None = None,
    output_final_state: bool = False, segment_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """Causal retention by chunks of C: the parallel form inside, the state recurrence R_i = γ^C R_{i-1} + Kᵢᵀ(Vᵢ ⊙ ζ)
    across (one ``linear_scan`` over T/C chunk states of size Dk·Dv). Time O(T·C + T·Dk·Dv), no T×T matrix.

    q, k (B, H, T, Dk); v (B, H, T, Dv); gamma (H,); initial_state S_{-1} (B, H, Dk, Dv) or None (zeros).
    Returns (B, H, T, Dv), and with ``output_final_state`` also S_{T-1} (``retention_recurrent``'s state).

    ``segment_ids`` (B, T): packed documents (``ops.segments``). Inside a chunk the decay matrix is masked to the
    query's document; a chunk's state holds only the keys of the document it ends in, and carries the previous
    chunk's state only when that document continues (the scan's gate is 0 at a new document); a query reads the
    entering state only when it lies in the document the previous chunk ended in.
    """
    if segment_ids is not None and (initial_state is not None or output_final_state):
        raise ValueError("packed documents (segment_ids) carry no retention state between calls")
    batch, heads, length, key_dim = q.shape
    value_dim = v.shape[-1]
    chunks = -(-length // chunk_size)
    pad = chunks * chunk_size - length  # zero keys and values add nothing; padded queries are cropped
    q, k, v = (F.pad(x, (0, 0, 0, pad)).unflatten(2, (chunks, chunk_size)) for x in (q, k, v))
    gamma = gamma.to(q.device)
    steps = torch.arange(chunk_size, device=q.device)
    inner_decay = decay_matrix(gamma, chunk_size, True, q.device).to(q.dtype)[:, None]  # (H, 1, C, C)
    query_decay = decay_powers(gamma, steps + 1).to(q.dtype)[:, None, :, None]  # γ^{j+1}
    key_decay = decay_powers(gamma, chunk_size - 1 - steps).to(q.dtype)[:, None, :, None]  # γ^{C-1-j}
    reads = None
    if segment_ids is not None:
        padded = F.pad(segment_ids.to(q.device), (0, pad), value=-1)
        ids = padded.view(batch, chunks, chunk_size)
        present = ids >= 0  # segment -1 is padding: it neither reads nor is read
        same = (ids[..., :, None] == ids[..., None, :]) & present[..., None, :]
        inner_decay = inner_decay * same[:, None].to(q.dtype)  # (B, H|1, n, C, C)
        # (B, n): the document of each chunk's last real token (a hole at a chunk's end continues its document)
        last = last_real_segment(padded).view(batch, chunks, chunk_size)[..., -1]
        key_decay = key_decay * ((ids == last[..., None]) & present)[:, None, ..., None].to(q.dtype)  # its keys only
        previous_last = F.pad(last[:, :-1], (1, 0), value=-2)
        reads = ((ids == previous_last[..., None]) & present)[:, None, ..., None].to(q.dtype)  # (B, 1, n, C, 1)
    inner = ((q @ k.transpose(-1, -2)) * inner_decay) @ v
    chunk_states = (k * key_decay).transpose(-1, -2) @ v  # (B, H, n, Dk, Dv): each chunk's own contribution
    flat = chunk_states.permute(0, 2, 1, 3, 4).reshape(batch, chunks, heads * key_dim * value_dim)
    carry = decay_powers(gamma, chunk_size).to(q.dtype)[:, None].expand(heads, key_dim * value_dim).reshape(1, 1, -1)
    carry = carry.expand_as(flat)
    if segment_ids is not None:  # the previous chunk's state only where the document continues
        carry = carry * (last == previous_last)[..., None].to(q.dtype)
    # (the one-token recurrence keeps its state in float32: it enters this path's dtype)
    entering = None if initial_state is None else initial_state.to(flat.dtype).reshape(batch, -1)
    states, _ = linear_scan(carry.contiguous(), flat, entering)  # state after each chunk
    if entering is None:
        before = F.pad(states[:, :-1], (0, 0, 1, 0))
    else:
        before = torch.cat([entering[:, None], states[:, :-1]], dim=1)
    previous = before.view(batch, chunks, heads, key_dim, value_dim).transpose(1, 2)
    cross = (q * query_decay) @ previous
    if reads is not None:
        cross = cross * reads
    output = (inner + cross).flatten(2, 3)[:, :, :length]
    if not output_final_state:
        return output
    # the last chunk holds r real steps (the rest is padding): S_{T-1} = γ^r S_before + Σ_{j<r} γ^{r-1-j} k_jᵀ v_j
    real = length - (chunks - 1) * chunk_size
    last_decay = decay_powers(gamma, real - 1 - steps[:real]).to(q.dtype)[:, :, None]  # (H, r, 1)
    last = (k[:, :, -1, :real] * last_decay).transpose(-1, -2) @ v[:, :, -1, :real]
    final = decay_powers(gamma, real).to(q.dtype)[:, None, None] * previous[:, :, -1] + last
    return output, final


__all__ = ["retention_chunkwise"]
