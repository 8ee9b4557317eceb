"""Long convolutions along time, per channel, with a causal kernel and an optional strictly-future one:

    y_t = Σ_{l=0..t} f_l · u_{t-l}  +  Σ_{l=1..T-1-t} g_{l-1} · u_{t+l}

- ``long_conv_naive``: the sums through a dense (T, T, C) Toeplitz matrix, O(T²); the reference.
- ``long_conv_fft``: one FFT of length 2T, O(T log T); what S4D and Hyena run.
"""

from markovformer.ops.long_conv.fft import long_conv_fft
from markovformer.ops.long_conv.naive import check_kernels, long_conv_naive

__all__ = ["check_kernels", "long_conv_fft", "long_conv_naive"]
