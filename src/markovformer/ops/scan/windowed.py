"""The recurrence restarted at every position over a window of the last n steps (the Scan Markov model's
"markov" context mode).

For the window of size n ending at t, offset o = 0..n-1 is step t - n + 1 + o; offsets before the sequence start
(t - n + 1 + o < 0) are absent, so the first n - 1 positions use the prefix they have. The state before a
window is zero, so h_t = Σ_{s = max(0, t-n+1)..t} (Π_{r = s+1..t} a_r) ⊙ b_s.
``window_offsets`` owns this convention; everything else calls it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def window_offsets(length: int, window: int, device: torch.device | str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Where each window's offsets point, for windows of size ``window`` ending at t = 0..length-1.

    Returns three (T, window) tensors: ``source`` (the step index t - window + 1 + o, clamped to 0 where absent),
    ``position`` (o counted from the window's first present step, 0 where absent) and ``present`` (bool).
    """
    ends = torch.arange(length, device=device).unsqueeze(1)
    offsets = torch.arange(window, device=device).unsqueeze(0)
    source = ends - window + 1 + offsets
    present = source >= 0
    # A window cut by the sequence start begins at step 0, so its positions are the step indices themselves.
    position = offsets - (window - 1 - ends).clamp_min(0)
    return source.clamp_min(0), position.clamp_min(0), present


def windowed_linear_scan_offsets(a: Tensor, b: Tensor, window: int) -> Tensor:
    """All windows at once by a loop over the ``window`` offsets, each step vectorised over (B, T).

    a, b (B, T, D): shared inputs, by Horner's rule h^(k)_t = a_t ⊙ h^(k-1)_{t-1} + b_t, k = 1..window.
    a, b (B, T, window, D): per-window inputs, h = a[:, :, o] ⊙ h + b[:, :, o] with absent offsets skipped.
    Returns (B, T, D); gradients come from autograd.
    """
    if a.dim() == 3:
        states = b
        for _ in range(window - 1):
            states = torch.addcmul(b, a, F.pad(states[:, :-1], (0, 0, 1, 0)))
        return states
    _, _, present = window_offsets(a.shape[1], window, a.device)
    states = torch.zeros_like(b[:, :, 0])
    for offset in range(window):
        step = torch.addcmul(b[:, :, offset], a[:, :, offset], states)
        # Absent offsets come first in a window, so skipping them keeps the state at its zero start.
        states = torch.where(present[:, offset, None], step, states)
    return states
