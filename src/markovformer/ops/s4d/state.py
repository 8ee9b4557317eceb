"""The S4D state x_t = Ā x_{t-1} + u_t (B̄ folded into C) in closed form, for the convolution form of the layer:
what a carried state adds to the outputs, and the state after a whole sequence. ``s4d_recurrence`` is their twin.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.s4d.naive import check_initial_state


def s4d_state_response(state: Tensor, dt_a: Tensor, c_b: Tensor, length: int) -> Tensor:
    """What x_{-1} = ``state`` (B, C, N/2) adds to y_t = 2 Re(Σ_n c_b x_t), t = 0..length-1: 2 Re(Σ_n c_b Ā^{t+1}
    state). dt_a = Δ·A, c_b complex (C, N/2). Returns (B, length, C), real."""
    lags = torch.arange(1, length + 1, device=dt_a.device, dtype=dt_a.real.dtype)
    powers = torch.exp(dt_a[..., None] * lags)  # (C, N/2, T): Ā^{t+1}
    return 2 * torch.einsum("bcn,cnt->btc", state * c_b, powers).real


def s4d_final_state(u: Tensor, dt_a: Tensor, initial_state: Tensor | None = None) -> Tensor:
    """x_{T-1} = Σ_i Ā^{T-1-i} u_i + Ā^T x_{-1} for u (B, T, C) real; dt_a complex (C, N/2); initial_state x_{-1}
    (B, C, N/2) or None (zeros). Returns (B, C, N/2), complex."""
    check_initial_state(initial_state, u, tuple(dt_a.shape))
    length = u.shape[1]
    lags = torch.arange(length - 1, -1, -1, device=dt_a.device, dtype=dt_a.real.dtype)
    powers = torch.exp(dt_a[..., None] * lags)  # (C, N/2, T): Ā^{T-1-i}
    state = torch.einsum("btc,cnt->bcn", u.to(powers.dtype), powers)
    if initial_state is not None:
        state = state + torch.exp(dt_a * length) * initial_state
    return state


__all__ = ["s4d_final_state", "s4d_state_response"]
