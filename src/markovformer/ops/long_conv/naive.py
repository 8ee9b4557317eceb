"""The long convolution y_t = Σ_{l=0..t} f_l u_{t-l} + Σ_{l=1..T-1-t} g_{l-1} u_{t+l}, term by term (the reference)."""

from __future__ import annotations

import torch
from torch import Tensor


def check_kernels(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None) -> None:
    """ValueError naming ``u`` unless it is (B, T, C) with T >= 1, or the kernel that is not (>= T, C)."""
    if u.dim() != 3 or u.shape[1] == 0:
        raise ValueError(f"u must be (B, T, C) with T >= 1, got shape {tuple(u.shape)}")
    length, channels = u.shape[1], u.shape[2]
    for name, kernel in (("forward_kernel", forward_kernel), ("backward_kernel", backward_kernel)):
        if kernel is not None and (kernel.dim() != 2 or kernel.shape[0] < length or kernel.shape[1] != channels):
            raise ValueError(f"{name} must be (>= T, C) = (>= {length}, {channels}); got {tuple(kernel.shape)}")


def long_conv_naive(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None = None) -> Tensor:
    """u (B, T, C); f = ``forward_kernel`` and g = ``backward_kernel`` (>= T, C), only their first T rows used.

    The sums through a dense (T, T, C) Toeplitz matrix, O(T²). Returns (B, T, C) in u's dtype.
    """
    check_kernels(u, forward_kernel, backward_kernel)
    length = u.shape[1]
    steps = torch.arange(length, device=u.device)
    lag = steps[:, None] - steps[None, :]  # t - j
    matrix = forward_kernel[lag.clamp_min(0)] * (lag >= 0)[..., None]
    if backward_kernel is not None:
        matrix = matrix + backward_kernel[(-lag - 1).clamp_min(0)] * (lag < 0)[..., None]
    return torch.einsum("tjc,bjc->btc", matrix.to(u.dtype), u)


__all__ = ["check_kernels", "long_conv_naive"]
