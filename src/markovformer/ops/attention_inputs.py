"""The argument checks every attention op's dispatcher shares: the shapes of q, k, v, of the padding mask and of the
packed documents' segment ids, the window (an int, or None for global scope) and the chunk size, each refused with
the bad value named; and the one check of a layer's own input (``check_layer_input``)."""

from __future__ import annotations

from torch import Tensor


def check_attention_inputs(q: Tensor, k: Tensor, v: Tensor, *, window: int | None, attention_mask: Tensor | None,
                           chunk_size: int, segment_ids: Tensor | None = None) -> None:  # fmt: skip
    """ValueError unless q, k, v are (B, H, T, Dh) with matching B, H, T (k shaped as q), ``window`` is a
    non-negative int or None, ``attention_mask`` and ``segment_ids`` are None or (B, T), and ``chunk_size`` a
    positive int."""
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"q, k, v must be (B, H, T, Dh) with matching B, H, T; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}, v {tuple(v.shape)}")  # fmt: skip
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"window must be a non-negative int or None (global scope); got {window!r}")
    if attention_mask is not None and tuple(attention_mask.shape) != (q.shape[0], q.shape[2]):
        raise ValueError(f"attention_mask must be (B, T) = {(q.shape[0], q.shape[2])}; "
                         f"got {tuple(attention_mask.shape)}")  # fmt: skip
    check_segment_ids(segment_ids, batch=q.shape[0], seq_len=q.shape[2])
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")


def check_segment_ids(segment_ids: Tensor | None, *, batch: int, seq_len: int) -> None:
    """ValueError unless ``segment_ids`` (packed documents, ``ops.segments``) is None or (B, T)."""
    if segment_ids is not None and tuple(segment_ids.shape) != (batch, seq_len):
        raise ValueError(f"segment_ids must be (B, T) = {(batch, seq_len)}; got {tuple(segment_ids.shape)}")


def check_layer_input(layer: str, x: Tensor, d_model: int, attention_mask: Tensor | None) -> None:
    """ValueError naming ``layer`` (its class name) unless x is (B, T, d_model) and ``attention_mask`` None or
    (B, T): every mixer's and injection's forward calls it first, so a wrong shape is named there, not deep inside
    a matmul or einsum. Shape comparisons only: nothing read from the device."""
    if x.dim() != 3 or x.shape[2] != d_model:
        raise ValueError(f"{layer}: x must be (B, T, D) = (B, T, {d_model}); got {tuple(x.shape)}")
    if attention_mask is not None and attention_mask.shape != x.shape[:2]:
        raise ValueError(f"{layer}: attention_mask must be (B, T) = {tuple(x.shape[:2])}; "
                         f"got {tuple(attention_mask.shape)}")  # fmt: skip


__all__ = ["check_attention_inputs", "check_layer_input", "check_segment_ids"]
