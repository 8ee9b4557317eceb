"""Retention (RetNet, Sun et al. 2023 §2.1-2.2): per head a fixed decay γ, queries q, keys k, values v,

    O = (Q Kᵀ ⊙ D) V,   D_{nm} = γ^{n-m} if n >= m else 0        (causal)
                        D_{nm} = γ^{|n-m|}                      (non-causal)

``retention`` validates the form and dispatches; the three forms compute the same function:

- ``"parallel"``: the dense T×T form (``naive.retention_parallel``), the reference; also gives the weights;
- ``"recurrent"``: S_n = γ S_{n-1} + k_nᵀ v_n, o_n = q_n S_n, a loop over time (``naive.retention_recurrent``);
- ``"chunkwise"``: parallel inside chunks, the recurrence across them (``chunked.retention_chunkwise``).

Non-causal retention is the causal form run forwards and backwards, minus the doubly counted diagonal.
"""

from __future__ import annotations

from numbers import Integral

from torch import Tensor

from markovformer.ops.attention_inputs import check_segment_ids
from markovformer.ops.retention.chunked import retention_chunkwise
from markovformer.ops.retention.naive import decay_matrix, retention_parallel, retention_recurrent, retention_weights

RETENTION_FORMS = ("parallel", "recurrent", "chunkwise")


def check_form(form: str) -> None:
    """ValueError naming ``form`` unless it is one of RETENTION_FORMS."""
    if form not in RETENTION_FORMS:
        raise ValueError(f"form={form!r}: expected one of {RETENTION_FORMS}")


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, chunk_size: int, initial_state: Tensor | None,
                  segment_ids: Tensor | None) -> None:  # fmt: skip
    """ValueError naming the first input that is not as ``retention`` documents it."""
    if q.dim() != 4:
        raise ValueError(f"q must be (B, H, T, Dk), got shape {tuple(q.shape)}")
    if k.shape != q.shape:
        raise ValueError(f"k must match q {tuple(q.shape)} (B, H, T, Dk), got shape {tuple(k.shape)}")
    if v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"v must be (B, H, T, Dv) with (B, H, T) = {tuple(q.shape[:3])}, got shape {tuple(v.shape)}")
    batch, heads, length, key_dim = q.shape
    if tuple(gamma.shape) != (heads,):
        raise ValueError(f"gamma must be one decay per head, (H,) = ({heads},); got shape {tuple(gamma.shape)}")
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, Integral) or chunk_size < 1:
        raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
    state_shape = (batch, heads, key_dim, v.shape[-1])
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be the state S (B, H, Dk, Dv) = {state_shape}, "
                         f"got shape {tuple(initial_state.shape)}")  # fmt: skip
    check_segment_ids(segment_ids, batch=batch, seq_len=length)


def retention(
    q: Tensor, k: Tensor, v: Tensor, gamma: Tensor, causal: bool = True, form: str = "chunkwise",
    chunk_size: int = 64, initial_state: Tensor | None = None, output_final_state: bool = False,
    segment_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:  # fmt: skip
    """Retention in one of RETENTION_FORMS. q, k (B, H, T, Dk); v (B, H, T, Dv); gamma (H,).

    Returns (B, H, T, Dv). ``chunk_size`` only matters for ``"chunkwise"``. The state contract (causal
    ``"recurrent"`` and ``"chunkwise"``): ``initial_state`` S (B, H, Dk, Dv) in, and with ``output_final_state``
    the output and the final state out. ``segment_ids`` (B, T): packed documents (``ops.segments``), none read
    across a boundary (the recurrent form then runs chunkwise: the same retention).
    """
    check_form(form)
    _check_inputs(q, k, v, gamma, chunk_size, initial_state, segment_ids)
    if segment_ids is not None:
        if initial_state is not None or output_final_state:
            raise ValueError("packed documents (segment_ids) carry no retention state between calls")
        if form == "parallel":
            return retention_parallel(q, k, v, gamma, causal, segment_ids)
        output = retention_chunkwise(q, k, v, gamma, chunk_size, segment_ids=segment_ids)
        if causal:
            return output
        backward = retention_chunkwise(q.flip(2), k.flip(2), v.flip(2), gamma, chunk_size,
                                       segment_ids=segment_ids.flip(1)).flip(2)  # fmt: skip
        # both directions count the diagonal once; a padding query (segment -1) has none
        diagonal = (q * k).sum(-1, keepdim=True) * v
        return output + backward - diagonal * (segment_ids >= 0).to(q.device)[:, None, :, None]
    if initial_state is not None or output_final_state:
        if not causal or form == "parallel":
            raise ValueError("retention carries a state only when causal, in the recurrent or chunkwise form")
        if form == "recurrent":
            return retention_recurrent(q, k, v, gamma, initial_state, output_final_state)
        return retention_chunkwise(q, k, v, gamma, chunk_size, initial_state, output_final_state)
    if form == "parallel":
        return retention_parallel(q, k, v, gamma, causal)

    def causal_form(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        if form == "recurrent":
            return retention_recurrent(q, k, v, gamma)
        return retention_chunkwise(q, k, v, gamma, chunk_size)

    output = causal_form(q, k, v)
    if causal:
        return output
    backward = causal_form(q.flip(2), k.flip(2), v.flip(2)).flip(2)
    return output + backward - (q * k).sum(-1, keepdim=True) * v


__all__ = [
    "RETENTION_FORMS",
    "check_form",
    "decay_matrix",
    "retention",
    "retention_chunkwise",
    "retention_parallel",
    "retention_recurrent",
    "retention_weights",
]
