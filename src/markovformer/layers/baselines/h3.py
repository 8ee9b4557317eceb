"""H3 (Fu, Dao, Saab, Thomas, Rudra & Ré 2023, "Hungry Hungry Hippos: Towards Language Modeling with State Space
Models"), one of Zoology's gated convolutions.

Three projections q, k, v of the input; per head h of ``head_dim`` channels (the authors' default is 1; Zoology's
figure-2 configs use 2, which ``experiment mixers`` follows):

    k̄ = shift(k) + D_k ⊙ k,   S_t = SSM_diag(k̄ᵀ v)_t + D_h · k̄_tᵀ v_t,   y_t = W_out (q_t S_t)

``shift`` is the shift SSM: A the shift matrix, so its kernel is a learned FIR filter over the last
``shift_taps`` inputs (the authors' code: as many taps as ``d_state``, 64, started as nn.Conv1d's weights);
``SSM_diag`` is S4D-Lin (``s4d.DiagonalSSM``) applied along time to every entry of the head's ``head_dim`` x
``head_dim`` outer product, with one kernel per head. Both are long convolutions by FFT (``ops.long_conv``).
Departures from the authors' code: the FIR taps are one learned filter per channel (theirs is the
cross-correlation of a learned B with a learned C: the same filters); non-causal layers add a strictly-future FIR
filter and a backward diagonal SSM (the authors' H3 is causal only).
A causal layer decodes from the last ``shift_taps - 1`` keys and the diagonal SSM's state. Padding: zeroed
projections, as every baseline (``ops.padding.zero_padding``).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.baselines.s4d import DiagonalSSM
from markovformer.layers.kv_cache import after_carried_inputs
from markovformer.layers.options import check_fields, interval, option
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.long_conv import long_conv_fft
from markovformer.ops.padding import zero_padding
from markovformer.ops.precision import compute_dtype

# a decoding call of at most this many tokens runs the causal shift filter as a sum over its windows (B, T, taps, D),
# not by FFT: a one-token step at d = 256, 64 taps is 15x (batch 1) to 50x (batch 16) faster so; longer chunks,
# prompts and training (batch 16 at 32 tokens is a tie, and the windows' backward is slower) keep the FFT
DIRECT_SHIFT_MAX_LENGTH = 16


@dataclasses.dataclass(frozen=True)
class H3Options:
    """The options of attention kind "h3", set per layer (``attention: [{kind: h3, head_dim: 8}, ...]``) but for
    the shared ``ssm_state_size``: channels per head of the key-value outer product (the authors' default 1), the
    diagonal SSM's state size N (real dimensions: N/2 complex modes) and the shift filter's taps (the authors' code
    uses d_state, 64)."""

    head_dim: int = option(1, interval(1, integer=True), help="channels per head of the key-value outer product "
                           "(divides d_model; the authors' default 1)")  # fmt: skip
    ssm_state_size: int = option(64, interval(2, integer=True), help="the diagonal SSM's state size N (even: N/2 "
                                 "complex modes)")  # fmt: skip
    shift_taps: int = option(64, interval(1, integer=True), help="taps of the shift filter over the last keys")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.ssm_state_size % 2:
            raise ValueError(f"ssm_state_size={self.ssm_state_size!r}: must be even (conjugate pairs of modes)")


class H3Mixer(nn.Module):
    """H3: (B, T, D) -> (B, T, D). A causal one carries ``state["keys"]`` (B, shift_taps - 1, D), the keys the
    shift filter still reads, and ``state["ssm"]`` (B, head_dim · D, N/2), the diagonal SSM's complex state (the
    head_dim² entries of head h in a row)."""

    supports_state = True  # when causal

    def __init__(
        self, *, d_model: int, causal: bool = True, head_dim: int = 1, ssm_state_size: int = 64, shift_taps: int = 64,
        mode: str = "convolution",
    ) -> None:  # fmt: skip
        super().__init__()
        if head_dim < 1 or d_model % head_dim:
            raise ValueError(f"head_dim={head_dim}: must divide d_model={d_model}")
        if shift_taps < 1:
            raise ValueError(f"shift_taps={shift_taps}: must be >= 1")
        self.d_model, self.causal, self.head_dim, self.shift_taps = d_model, causal, head_dim, shift_taps
        self.heads = d_model // head_dim
        self.in_proj = nn.Linear(d_model, 3 * d_model)  # q, k, v
        # FIR taps for lags 0..taps-1 (and, non-causal, lags 1..taps ahead), uniform in ±1/√taps as the authors'
        # (nn.Conv1d's init); plain parameters, so the model's init for nn.Linear leaves them alone
        bound = shift_taps**-0.5
        self.shift_past = nn.Parameter(torch.empty(shift_taps, d_model).uniform_(-bound, bound))
        self.shift_future = None if causal else nn.Parameter(torch.empty(shift_taps, d_model).uniform_(-bound, bound))
        self.shift_skip = nn.Parameter(torch.randn(d_model))  # D_k
        self.kv_ssm = DiagonalSSM(channels=self.heads, causal=causal, ssm_state_size=ssm_state_size, mode=mode)
        self.kv_skip = nn.Parameter(torch.randn(self.heads))  # D_h
        self.out_proj = nn.Linear(d_model, d_model)

    def shifted(self, k: Tensor, state: dict | None) -> Tensor:
        """shift(k) + D_k ⊙ k for k (B, T, D): the FIR filter over the keys before (the carried ones in ``state``,
        else zeros) and, non-causal, after; by FFT (``ops.long_conv``), whose backward pass is far cheaper on CPU
        than a depthwise convolution's with 64 taps, but for a short chunk of a decoding: its windows' weighted
        sum."""
        taps = self.shift_taps
        extended = after_carried_inputs(k, state, "keys", taps - 1)
        if state is not None and k.shape[1] <= DIRECT_SHIFT_MAX_LENGTH:  # (a decoding layer is causal)
            compute = compute_dtype(k)  # as the FFT's
            windows = extended.unfold(1, taps, 1).transpose(2, 3)  # (B, T, taps, D): the keys at lags taps-1 .. 0
            shifted = (windows.to(compute) * self.shift_past.flip(0).to(compute)).sum(2).to(k.dtype)
            return shifted + self.shift_skip.to(k.dtype) * k
        padding = (0, 0, 0, max(extended.shape[1] - taps, 0))  # the kernels cover every lag of the extended keys
        past = F.pad(self.shift_past.to(k.dtype), padding)
        future = None if self.shift_future is None else F.pad(self.shift_future.to(k.dtype), padding)
        return long_conv_fft(extended, past, future)[:, taps - 1 :] + self.shift_skip.to(k.dtype) * k

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.causal:
            raise ValueError("a bidirectional H3 reads the whole sequence: it cannot decode incrementally")
        batch, length, _ = x.shape
        heads, size = self.heads, self.head_dim
        q, k, v = zero_padding(self.in_proj(x), attention_mask).split(self.d_model, dim=-1)
        k = self.shifted(k, state)
        # every head's outer product k̄ᵀv: size² channels per head, in a row, each a sequence of the head's SSM
        kv = (k.reshape(batch, length, heads, size, 1) * v.reshape(batch, length, heads, 1, size)).flatten(2)
        repeat = size * size
        mixed = self.kv_ssm.ssm(kv, repeat) if state is None else self.kv_ssm.ssm_with_state(kv, state, repeat)
        mixed = mixed + self.kv_skip.to(kv.dtype).repeat_interleave(repeat) * kv
        y = (q.reshape(batch, length, heads, size, 1) * mixed.reshape(batch, length, heads, size, size)).sum(3)
        return zero_padding(self.out_proj(y.reshape(batch, length, self.d_model)), attention_mask)


__all__ = ["H3Mixer", "H3Options"]
