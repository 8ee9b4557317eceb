"""S4D: a diagonal state space layer (Gu, Gupta, Goel & Ré 2022, "On the Parameterization and Initialization of
Diagonal State Space Models"), as in the authors' minimal ``s4d.py`` of the state-spaces repository.

Per channel c, N/2 complex modes n (conjugate pairs, hence the factor 2 and the real part):

    x_t = Ā x_{t-1} + B̄ u_t,   y_t = 2 Re(C x_t) + D u_t,   Ā = exp(Δ A),  B̄ = (exp(Δ A) - 1) / A  (zero-order hold)

with B = 1 folded into C. S4D-Lin initialisation: A_n = -1/2 + iπn, Δ log-uniform in [0.001, 0.1], C ~ CN(0, 1).
The layer is the recurrence's convolution form, y = K * u + D u with K_l = 2 Re(Σ_n C_n B̄_n Ā_n^l) (an FFT
convolution), or, with ``mode="recurrent"``, the recurrence itself step by step (slow; the reference and the
form for token-by-token decoding). Then GELU and a position-wise Linear(D, 2D) + GLU, as in the S4 block.
Non-causal layers add a second SSM read backwards (strictly future lags), as the repository's bidirectional S4.
Padding: zeroed inputs (``ops.padding.zero_padding``); the convolution depends only on lags.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.precision import KeepsFloat32, kept_float_dtype
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.long_conv import long_conv_fft
from markovformer.ops.padding import zero_padding
from markovformer.ops.precision import compute_dtype
from markovformer.ops.s4d import s4d_final_state, s4d_kernel, s4d_recurrence, s4d_state_response

S4D_MODES = ("convolution", "recurrent")


@dataclasses.dataclass(frozen=True)
class DecodingTables:
    """``DiagonalSSM.discretised_for(repeat)`` kept in a decoding's state (``state["ssm_tables"]``) and reused at
    every step, the weights being fixed while decoding; not a tensor, so beam search's row reordering passes it by."""

    parts: tuple[Tensor, Tensor, Tensor]


class DiagonalSSM(KeepsFloat32):
    """The S4D-Lin state space model over ``channels`` channels (twice as many when non-causal: the second set reads
    backwards), without the D term: ``ssm(u)`` for whole sequences, ``ssm_with_state(u, state)`` for decoding.
    S4D's mixer is one (subclassed, so its parameter names stay as they were); H3 holds one for its key-value
    products."""

    float32_tensors = ("log_dt", "log_a_real", "a_imag", "c")  # poles and steps: bf16 bends the kernel by lag 100

    def __init__(
        self, *, channels: int, causal: bool = True, ssm_state_size: int = 64, dt_min: float = 1e-3,
        dt_max: float = 1e-1, mode: str = "convolution",
    ) -> None:  # fmt: skip
        super().__init__()
        if ssm_state_size < 2 or ssm_state_size % 2:
            raise ValueError(f"ssm_state_size={ssm_state_size}: must be an even integer >= 2 (conjugate pairs)")
        if mode not in S4D_MODES:
            raise ValueError(f"mode={mode!r}: expected one of {S4D_MODES}")
        self.channels, self.causal, self.mode = channels, causal, mode
        total, modes = channels * (1 if causal else 2), ssm_state_size // 2  # a second SSM reads backwards
        dtype = kept_float_dtype()
        log_dt = torch.rand(total, dtype=dtype) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)
        self.log_a_real = nn.Parameter(torch.full((total, modes), math.log(0.5), dtype=dtype))
        self.a_imag = nn.Parameter(math.pi * torch.arange(modes, dtype=dtype).expand(total, modes).clone())
        self.c = nn.Parameter(torch.view_as_real(torch.randn(total, modes, dtype=dtype.to_complex())))

    def discretised(self) -> tuple[Tensor, Tensor, Tensor]:
        """(Δ·A, Ā, C·B̄), each complex (channels, N/2); zero-order hold, in float32 at least (no complex half)."""
        compute = compute_dtype(self.log_dt)
        a = torch.complex(-torch.exp(self.log_a_real.to(compute)), self.a_imag.to(compute))
        dt_a = a * torch.exp(self.log_dt.to(compute))[:, None]
        a_bar = torch.exp(dt_a)
        return dt_a, a_bar, torch.view_as_complex(self.c.to(compute)) * (a_bar - 1) / a

    def kernel(self, length: int) -> Tensor:
        """The convolution kernel (length, channels): forward SSM channels first, then the backward ones."""
        dt_a, _, c_b = self.discretised()
        return s4d_kernel(dt_a, c_b, length)

    def discretised_for(self, repeat: int) -> tuple[Tensor, Tensor, Tensor]:
        """``discretised()`` with each channel's row repeated ``repeat`` times in a row (channel c serves the input
        channels c·repeat .. c·repeat + repeat - 1)."""
        parts = self.discretised()
        return parts if repeat == 1 else tuple(part.repeat_interleave(repeat, dim=0) for part in parts)

    def _decoding_tables(self, state: dict, repeat: int) -> tuple[Tensor, Tensor, Tensor]:
        """The discretisation, computed once per decoding (its exponentials were a third of an H3 layer's one-token
        step at d = 256); recomputed every call while gradients are on (the weights may change between calls)."""
        if torch.is_grad_enabled():
            return self.discretised_for(repeat)
        tables = state.get("ssm_tables")
        if tables is None:
            tables = state["ssm_tables"] = DecodingTables(self.discretised_for(repeat))
        return tables.parts

    def ssm_with_state(self, u: Tensor, state: dict, repeat: int = 1) -> Tensor:
        """The causal SSM's output (without D u) for (B, T, channels · repeat) inputs (``repeat`` consecutive input
        channels per SSM channel) from the state ``state["ssm"]`` (zero when absent), leaving the state after the
        last input there."""
        dt_a, a_bar, c_b = self._decoding_tables(state, repeat)
        compute = compute_dtype(u)
        initial = state.get("ssm")
        if u.shape[1] == 1 or self.mode == "recurrent":
            y, state["ssm"] = s4d_recurrence(u.to(compute), a_bar, c_b, initial, output_final_state=True)
            return y.to(u.dtype)
        y = long_conv_fft(u, s4d_kernel(dt_a, c_b, u.shape[1]))
        if initial is not None:  # a state a one-token step left in a wider dtype (float64 inputs) joins the tables'
            initial = initial.to(dt_a.dtype)
            y = y + s4d_state_response(initial, dt_a, c_b, u.shape[1]).to(y.dtype)
        state["ssm"] = s4d_final_state(u.to(compute), dt_a, initial)
        return y

    def ssm(self, u: Tensor, repeat: int = 1) -> Tensor:
        """The SSM's output (without D u) for (B, T, channels · repeat) inputs (``repeat`` consecutive input channels
        per SSM channel), in the current ``mode``."""
        c = self.channels * repeat
        if self.mode == "convolution":
            kernel = self.kernel(u.shape[1])
            kernel = kernel if repeat == 1 else kernel.repeat_interleave(repeat, dim=1)
            return long_conv_fft(u, kernel[:, :c], None if self.causal else kernel[:, c:])
        _, a_bar, c_b = self.discretised_for(repeat)
        compute = compute_dtype(u)
        y = s4d_recurrence(u.to(compute), a_bar[:c], c_b[:c])
        if not self.causal:  # future lags l >= 1: the backward recurrence over the reversed input, one step later
            backward = s4d_recurrence(u.to(compute).flip(1), a_bar[c:], c_b[c:]).flip(1)
            y = y + F.pad(backward[:, 1:], (0, 0, 0, 1))
        return y.to(u.dtype)


class S4DMixer(DiagonalSSM):
    """S4D sequence mixer: (B, T, D) -> (B, T, D); ``ssm_state_size`` N counts real dimensions (N/2 complex modes).
    A causal one decodes from the SSM state x (``state["ssm"]``, complex (B, D, N/2)): one token by the
    recurrence, longer inputs by the convolution plus the carried state's closed-form share."""

    supports_state = True  # when causal

    def __init__(
        self,
        *,
        d_model: int,
        causal: bool = True,
        ssm_state_size: int = 64,
        dt_min: float = 1e-3,
        dt_max: float = 1e-1,
        mode: str = "convolution",
    ) -> None:
        super().__init__(channels=d_model, causal=causal, ssm_state_size=ssm_state_size, dt_min=dt_min,
                         dt_max=dt_max, mode=mode)  # fmt: skip
        self.d_model = d_model
        self.skip = nn.Parameter(torch.randn(d_model))  # D
        self.output = nn.Linear(d_model, 2 * d_model)  # followed by GLU

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.causal:
            raise ValueError("a bidirectional S4D reads the whole sequence: it cannot decode incrementally")
        u = zero_padding(x, attention_mask)
        y = F.gelu((self.ssm(u) if state is None else self.ssm_with_state(u, state)) + self.skip * u)
        return zero_padding(F.glu(self.output(y), dim=-1), attention_mask)


__all__ = ["S4D_MODES", "DiagonalSSM", "S4DMixer"]
