"""Diagonal state space references (S4D, Gu et al. 2022), per channel c and complex mode n:

    x_t = Ā x_{t-1} + B̄ u_t,   y_t = 2 Re(C x_t)   <=>   y = K * u,   K_l = 2 Re(Σ_n C_n B̄_n Ā_n^l)

``s4d_kernel_naive`` computes K term by term; ``s4d_recurrence`` runs the recurrence one step at a time.
"""

from __future__ import annotations

from numbers import Integral

import torch
from torch import Tensor


def check_length(length: int) -> None:
    """ValueError naming ``length`` unless it is a non-negative integer (the number of kernel taps)."""
    if isinstance(length, bool) or not isinstance(length, Integral) or length < 0:
        raise ValueError(f"length must be a non-negative integer (kernel taps), got {length!r}")


def check_initial_state(initial_state: Tensor | None, u: Tensor, modes: tuple[int, ...]) -> None:
    """ValueError unless ``initial_state`` is None or x_{-1} (B, C, N/2) for inputs u (B, T, C) and modes (C, N/2):
    a state of another batch would broadcast into rows it never held."""
    state_shape = (u.shape[0], *modes)
    if initial_state is not None and tuple(initial_state.shape) != state_shape:
        raise ValueError(f"initial_state must be the SSM state (B, C, N/2) = {state_shape}, "
                         f"got shape {tuple(initial_state.shape)}")  # fmt: skip


def s4d_kernel_naive(dt_a: Tensor, c_b: Tensor, length: int) -> Tensor:
    """K_l = 2 Re(Σ_n c_b[c, n] · exp(dt_a[c, n] · l)) for l = 0..length-1, every exponential computed.

    dt_a = Δ·A and c_b = C·B̄, both complex (C, N/2). Returns the real kernel (length, C).
    """
    check_length(length)
    lags = torch.arange(length, device=dt_a.device, dtype=dt_a.real.dtype)
    return 2 * (c_b[..., None] * torch.exp(dt_a[..., None] * lags)).sum(1).real.transpose(0, 1)


def s4d_recurrence(
    u: Tensor, a_bar: Tensor, c_b: Tensor, initial_state: Tensor | None = None, output_final_state: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """x_t = Ā x_{t-1} + u_t (complex state per mode, x_{-1} = ``initial_state`` or 0), y_t = 2 Re(Σ_n c_b x_t),
    one step at a time.

    u (B, T, C) real; a_bar, c_b complex (C, N/2); initial_state complex (B, C, N/2). Returns y (B, T, C) without the
    D u term, and with ``output_final_state`` also x_{T-1} (B, C, N/2).
    """
    check_initial_state(initial_state, u, tuple(a_bar.shape))
    state = torch.zeros(u.shape[0], *a_bar.shape, dtype=a_bar.dtype, device=u.device)
    if initial_state is not None:
        state = initial_state
    outputs = []
    for step in u.unbind(1):
        state = a_bar * state + step[..., None]
        outputs.append(2 * (c_b * state).sum(-1).real)
    output = torch.stack(outputs, dim=1)
    return (output, state) if output_final_state else output


__all__ = ["check_initial_state", "check_length", "s4d_kernel_naive", "s4d_recurrence"]
