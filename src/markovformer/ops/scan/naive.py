"""Loop references for the gated linear recurrence h_t = a_t ⊙ h_{t-1} + b_t.

Both functions are the definitions written out, one time step per Python iteration, differentiated by autograd.
They are slow on purpose (indexing ``a[:, t]`` makes the backward pass O(T²)) and are the twins every fast path is
tested against.
"""

from __future__ import annotations

import torch
from torch import Tensor


def linear_scan_naive(a: Tensor, b: Tensor, h0: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """h_t = a_t ⊙ h_{t-1} + b_t with h_{-1} = h0 (zeros when None).

    a, b (B, T, D); h0 (B, D) or None. Returns all states h (B, T, D) and the final state h_{T-1} (B, D).
    """
    state = torch.zeros_like(b[:, 0]) if h0 is None else h0
    states = []
    for t in range(a.shape[1]):
        state = a[:, t] * state + b[:, t]
        states.append(state)
    return torch.stack(states, dim=1), state


def windowed_linear_scan_naive(a: Tensor, b: Tensor, window: int) -> Tensor:
    """Each position's state recomputed from scratch over its own window (see ``windowed_linear_scan``).

    a, b (B, T, D) (shared inputs) or (B, T, window, D) (per-window inputs, [:, t, o] = offset o of the window
    ending at t). Returns (B, T, D): h_t = the recurrence started from a zero state at max(0, t - window + 1).
    """
    per_window = a.dim() == 4
    outputs = []
    for t in range(a.shape[1]):
        state = torch.zeros_like(b[:, 0, 0] if per_window else b[:, 0])
        for offset in range(window):
            source = t - window + 1 + offset
            if source < 0:
                continue
            if per_window:
                state = a[:, t, offset] * state + b[:, t, offset]
            else:
                state = a[:, source] * state + b[:, source]
        outputs.append(state)
    return torch.stack(outputs, dim=1)
