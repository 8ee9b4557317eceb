"""Long convolutions along time by FFT (O(T log T)), with a direct O(T²) reference; shared by S4D and Hyena.

    y_t = Σ_{l=0..t} f_l · u_{t-l}  +  Σ_{l=1..T-1-t} g_{l-1} · u_{t+l}

per channel: ``f`` is the causal (past and present) kernel, ``g`` the optional anti-causal (strictly future) one.
One FFT of length 2T holds both halves without wrap-around: f at indices 0..T-1, g reversed at T+1..2T-1.
Half-precision inputs are convolved in float32 (cuFFT half needs power-of-two sizes; CPU has no half FFT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _check(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None) -> None:
    length, channels = u.shape[1], u.shape[2]
    for name, kernel in (("forward_kernel", forward_kernel), ("backward_kernel", backward_kernel)):
        if kernel is not None and (kernel.dim() != 2 or kernel.shape[0] < length or kernel.shape[1] != channels):
            raise ValueError(f"{name} must be (>= T, C) = (>= {length}, {channels}); got {tuple(kernel.shape)}")


def long_conv(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None = None) -> Tensor:
    """u (B, T, C); kernels (>= T, C), only their first T rows used. Returns (B, T, C) in u's dtype."""
    _check(u, forward_kernel, backward_kernel)
    length = u.shape[1]
    compute = torch.promote_types(u.dtype, torch.float32)
    kernel = forward_kernel[:length].to(compute)
    if backward_kernel is None:
        kernel = F.pad(kernel, (0, 0, 0, length))
    else:
        future = backward_kernel[: length - 1].to(compute).flip(0)  # g_{T-2} .. g_0 at indices T+1 .. 2T-1
        kernel = torch.cat([kernel, kernel.new_zeros(1, kernel.shape[1]), future], dim=0)
    spectrum = torch.fft.rfft(u.to(compute), n=2 * length, dim=1) * torch.fft.rfft(kernel, n=2 * length, dim=0)
    return torch.fft.irfft(spectrum, n=2 * length, dim=1)[:, :length].to(u.dtype)


def long_conv_naive(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None = None) -> Tensor:
    """The same sums, term by term through a dense (T, T, C) Toeplitz matrix: the reference for ``long_conv``."""
    _check(u, forward_kernel, backward_kernel)
    length = u.shape[1]
    steps = torch.arange(length, device=u.device)
    lag = steps[:, None] - steps[None, :]  # t - j
    matrix = forward_kernel[lag.clamp_min(0)] * (lag >= 0)[..., None]
    if backward_kernel is not None:
        matrix = matrix + backward_kernel[(-lag - 1).clamp_min(0)] * (lag < 0)[..., None]
    return torch.einsum("tjc,bjc->btc", matrix.to(u.dtype), u)


__all__ = ["long_conv", "long_conv_naive"]
