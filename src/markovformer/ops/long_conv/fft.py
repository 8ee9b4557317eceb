"""The long convolution by FFT, O(T log T): the fast form of ``long_conv_naive`` (same arguments, same sums).

One FFT of length 2T holds both halves without wrap-around: f at indices 0..T-1, g reversed at T+1..2T-1.
Half-precision inputs are convolved in float32 (cuFFT half needs power-of-two sizes; CPU has no half FFT).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from markovformer.ops.long_conv.naive import check_kernels
from markovformer.ops.precision import compute_dtype


def long_conv_fft(u: Tensor, forward_kernel: Tensor, backward_kernel: Tensor | None = None) -> Tensor:
    """u (B, T, C); kernels (>= T, C), only their first T rows used. Returns (B, T, C) in u's dtype."""
    check_kernels(u, forward_kernel, backward_kernel)
    length = u.shape[1]
    compute = compute_dtype(u)
    kernel = forward_kernel[:length].to(compute)
    if backward_kernel is None:
        kernel = F.pad(kernel, (0, 0, 0, length))
    else:
        future = backward_kernel[: length - 1].to(compute).flip(0)  # g_{T-2} .. g_0 at indices T+1 .. 2T-1
        kernel = torch.cat([kernel, kernel.new_zeros(1, kernel.shape[1]), future], dim=0)
    spectrum = torch.fft.rfft(u.to(compute), n=2 * length, dim=1) * torch.fft.rfft(kernel, n=2 * length, dim=0)
    return torch.fft.irfft(spectrum, n=2 * length, dim=1)[:, :length].to(u.dtype)


__all__ = ["long_conv_fft"]
