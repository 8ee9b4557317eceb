"""``linear_scan`` and ``windowed_linear_scan``: validate the inputs once, then run the chosen backend (the
backends are listed in the package docstring)."""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.scan.chunked import DEFAULT_CHUNK_SIZE, linear_scan_chunked
from markovformer.ops.scan.naive import linear_scan_naive, windowed_linear_scan_naive
from markovformer.ops.scan.sequential import linear_scan_sequential
from markovformer.ops.scan.windowed import windowed_linear_scan_offsets

BACKENDS = ("auto", "naive", "sequential", "chunked")
WINDOWED_BACKENDS = ("auto", "naive", "offsets")


def _check_floating(**tensors: Tensor | None) -> None:
    """ValueError naming the first tensor that is not floating point or disagrees with the first in dtype/device."""
    first_name, first = next(iter(tensors.items()))
    for name, tensor in tensors.items():
        if tensor is None:
            continue
        if not tensor.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {tensor.dtype}")
        if tensor.dtype != first.dtype:
            raise ValueError(f"{name} has dtype {tensor.dtype} but {first_name} has {first.dtype}; they must match")
        if tensor.device != first.device:
            raise ValueError(f"{name} is on {tensor.device} but {first_name} is on {first.device}; they must match")


def _autocast_free(*tensors: Tensor | None) -> list[Tensor | None]:
    """Floating inputs in one dtype, at least float32: under an active autocast (mixed precision) the recurrence runs
    in full precision, whatever dtypes autocast gave the products that feed it (the caller runs it autocast-off)."""
    dtype = torch.float32
    for tensor in tensors:
        if tensor is not None and tensor.is_floating_point():
            dtype = torch.promote_types(dtype, tensor.dtype)
    return [t.to(dtype) if t is not None and t.is_floating_point() else t for t in tensors]


def linear_scan(
    a: Tensor, b: Tensor, h0: Tensor | None = None, backend: str = "auto", chunk_size: int = DEFAULT_CHUNK_SIZE
) -> tuple[Tensor, Tensor]:
    """h_t = a_t ⊙ h_{t-1} + b_t for t = 0..T-1, with h_{-1} = h0 (zeros when None).

    a, b (B, T, D), T >= 1; h0 (B, D) or None; all of one floating dtype and device.
    Returns all states h (B, T, D) and the final state h_{T-1} (B, D).
    ``backend``: one of BACKENDS (see the module docstring). ``chunk_size`` only matters for ``chunked``.
    Under an active autocast the inputs may differ in dtype: the recurrence runs in float32 (or the widest input).
    """
    if torch.is_autocast_enabled(a.device.type):
        with torch.autocast(a.device.type, enabled=False):
            return linear_scan(*_autocast_free(a, b, h0), backend=backend, chunk_size=chunk_size)
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    if a.dim() != 3:
        raise ValueError(f"a must be (B, T, D), got shape {tuple(a.shape)}")
    if b.shape != a.shape:
        raise ValueError(f"b must match a {tuple(a.shape)} (B, T, D), got shape {tuple(b.shape)}")
    if a.shape[1] == 0:
        raise ValueError(f"a must have at least one time step (T >= 1), got shape {tuple(a.shape)}")
    if h0 is not None and tuple(h0.shape) != (a.shape[0], a.shape[2]):
        raise ValueError(f"h0 must be (B, D) = {(a.shape[0], a.shape[2])} or None, got shape {tuple(h0.shape)}")
    _check_floating(a=a, b=b, h0=h0)
    if backend == "auto":
        backend = "chunked" if a.is_cuda else "sequential"
    if backend == "naive":
        return linear_scan_naive(a, b, h0)
    if backend == "sequential":
        return linear_scan_sequential(a, b, h0)
    return linear_scan_chunked(a, b, h0, chunk_size=chunk_size)


def windowed_linear_scan(a: Tensor, b: Tensor, window: int, backend: str = "auto") -> Tensor:
    """The recurrence restarted from a zero state at every position, over the last ``window`` steps.

    Shared inputs: a, b (B, T, D); h_t = Σ_{s = max(0, t-window+1)..t} (Π_{r = s+1..t} a_r) ⊙ b_s.
    Per-window inputs: a, b (B, T, window, D) where [:, t, o] is offset o of the window ending at t (step
    t - window + 1 + o, see ``window_offsets``), for inputs that differ per window (e.g. positions counted from
    the window start); offsets before the sequence start are ignored.
    Returns (B, T, D). ``backend``: ``"naive"`` (each window from scratch), ``"offsets"`` or ``"auto"`` (= offsets).
    Under an active autocast, as ``linear_scan``: float32 (or the widest input).
    """
    if torch.is_autocast_enabled(a.device.type):
        with torch.autocast(a.device.type, enabled=False):
            return windowed_linear_scan(*_autocast_free(a, b), window, backend=backend)
    if backend not in WINDOWED_BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {WINDOWED_BACKENDS}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window={window!r}: must be a positive integer")
    if a.dim() not in (3, 4):
        raise ValueError(f"a must be (B, T, D) or (B, T, window, D), got shape {tuple(a.shape)}")
    if b.shape != a.shape:
        raise ValueError(f"b must match a {tuple(a.shape)}, got shape {tuple(b.shape)}")
    if a.dim() == 4 and a.shape[2] != window:
        raise ValueError(f"a is per-window (B, T, window, D) but has {a.shape[2]} offsets for window={window}")
    if a.shape[1] == 0:
        raise ValueError(f"a must have at least one time step (T >= 1), got shape {tuple(a.shape)}")
    _check_floating(a=a, b=b)
    if backend == "naive":
        return windowed_linear_scan_naive(a, b, window)
    return windowed_linear_scan_offsets(a, b, window)


__all__ = ["BACKENDS", "WINDOWED_BACKENDS", "linear_scan", "windowed_linear_scan"]
