"""The Hyena operator (Poli et al. 2023, "Hyena Hierarchy: Towards Larger Convolutional Language Models"), order 2.

Definition 3.1 with N = 2: three projections (v, x¹, x²) of the input, each passed through a short depthwise
causal convolution (width 3), then

    z¹ = v,   z^{n+1} = xⁿ ⊙ (hⁿ * zⁿ + bⁿ ⊙ zⁿ)  (n = 1, 2),   y = W_out z³

where * is a long convolution computed by FFT and hⁿ an *implicit* filter (§3.3): hⁿ_l = window_l · FFN(pos(l)),
FFN a small MLP with sine activations, window_l = exp(-α_c l) a fixed per-channel exponential decay, bⁿ a learned
per-channel bias (the "D" term). Differences from the authors' code, for reasons: pos(l) are sinusoids of the lag
with fixed periods 2..10⁴ and α_c is set per lag (1% reached at lags 8..4096 across channels) instead of both
being scaled by a fixed maximum length, so one layer runs at any T and a filter depends on lags only (left
padding changes nothing); the gates follow the paper's Definition 3.1 (the authors' safari code gates v
before its first convolution and has order - 1 filters).
Non-causal layers learn a second, strictly-future filter per order (two-sided convolution).
A causal layer decodes incrementally: it keeps the last ``short_kernel - 1`` projections its short convolution
reads and, in a growing key/value cache (``layers.kv_cache``, storage that doubles when full), the inputs of its two
long convolutions (order 1's as the keys, order 2's as the values); a one-token step is then two dot products over
the lags, O(T·D), where re-running the prefix was O(T log T) per layer and token, and the filter's taps are computed
(in reverse, so that a step reads them in the cache's order) once per doubling of the cache (``cache.derived``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.kv_cache import KeyValueCache, after_carried_inputs
from markovformer.layers.precision import KeepsFloat32, kept_float_dtype
from markovformer.ops.attention_inputs import check_layer_input
from markovformer.ops.long_conv import long_conv_fft, long_conv_naive
from markovformer.ops.padding import zero_padding
from markovformer.ops.precision import compute_dtype

CONVOLUTIONS = ("fft", "direct")


class SineMLP(nn.Module):
    """Linear → sin(ω ⊙ ·) → ... → Linear, ω learned per unit. Plain parameters with PyTorch's Linear init,
    so a model's own weight init (which targets nn.Linear) leaves the filter's scale alone."""

    def __init__(self, sizes: list[int], frequency: float = 1.0) -> None:
        super().__init__()
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        self.frequencies = nn.ParameterList()
        for index, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:], strict=False)):
            bound = 1 / math.sqrt(fan_in)
            self.weights.append(nn.Parameter(torch.empty(fan_out, fan_in).uniform_(-bound, bound)))
            self.biases.append(nn.Parameter(torch.empty(fan_out).uniform_(-bound, bound)))
            if index < len(sizes) - 2:
                self.frequencies.append(nn.Parameter(torch.full((fan_out,), frequency)))

    def forward(self, x: Tensor) -> Tensor:
        for index, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = F.linear(x, weight, bias)
            if index < len(self.frequencies):
                x = torch.sin(self.frequencies[index] * x)
        return x


class ImplicitFilter(KeepsFloat32):
    """``filters`` filters of ``channels`` channels, h_l = window_l ⊙ SineMLP(pos(l)) for lags l = 0..T-1:
    (T, filters · channels). Every filter spans the same windows, from short (channel 0) to long."""

    float32_tensors = ("angular", "decay")  # multiplied by the lag: bf16 bends the filter more with every lag

    def __init__(self, channels: int, filters: int = 1, num_bands: int = 8, hidden: int = 64, depth: int = 3):
        super().__init__()
        periods = torch.logspace(math.log10(2.0), 4.0, num_bands, dtype=torch.float64)
        kept = kept_float_dtype()
        self.register_buffer("angular", (2 * math.pi / periods).to(kept), persistent=False)
        spans = torch.logspace(math.log10(8.0), math.log10(4096.0), channels, dtype=torch.float64)
        self.register_buffer("decay", (math.log(100.0) / spans).to(kept).repeat(filters), persistent=False)
        self.mlp = SineMLP([2 * num_bands] + [hidden] * depth + [filters * channels])

    def forward(self, length: int) -> Tensor:
        lags = torch.arange(length, device=self.angular.device, dtype=self.angular.dtype)[:, None]
        angles = lags * self.angular
        features = torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)
        return self.mlp(features.to(self.mlp.weights[0].dtype)) * torch.exp(-lags * self.decay).to(features.dtype)


class HyenaMixer(nn.Module):
    """Order-2 Hyena: (B, T, D) -> (B, T, D). ``convolution="direct"`` swaps the FFT for the O(T²) reference."""

    order = 2
    supports_state = True  # when causal

    def __init__(
        self, *, d_model: int, causal: bool = True, short_kernel: int = 3, filter_hidden: int = 64,
        convolution: str = "fft",
    ) -> None:  # fmt: skip
        super().__init__()
        if convolution not in CONVOLUTIONS:
            raise ValueError(f"convolution={convolution!r}: expected one of {CONVOLUTIONS}")
        self.d_model, self.causal, self.convolution = d_model, causal, convolution
        width = (self.order + 1) * d_model
        self.in_proj = nn.Linear(d_model, width)
        self.short_conv = nn.Conv1d(width, width, short_kernel, groups=width, padding=short_kernel - 1)
        directions = 1 if causal else 2
        self.filter = ImplicitFilter(d_model, filters=self.order * directions, hidden=filter_hidden)
        self.filter_bias = nn.Parameter(torch.randn(self.order, d_model))
        self.out_proj = nn.Linear(d_model, d_model)

    def filters(self, length: int) -> list[tuple[Tensor, Tensor | None]]:
        """Per order n: (past-and-present filter (T, D), strictly-future filter (T, D) or None when causal)."""
        parts = self.filter(length).split(self.d_model, dim=-1)
        if self.causal:
            return [(part, None) for part in parts]
        return [(parts[2 * n], parts[2 * n + 1]) for n in range(self.order)]

    def short_convolved(self, projected: Tensor, state: dict | None) -> Tensor:
        """The causal short convolution of the projections (B, T, 3D), over the ones before (the carried ones in
        ``state``, else zeros)."""
        extended = after_carried_inputs(projected, state, "short", self.short_conv.kernel_size[0] - 1)
        weight, bias = self.short_conv.weight, self.short_conv.bias
        return F.conv1d(extended.transpose(1, 2), weight, bias, groups=weight.shape[0]).transpose(1, 2)

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None,
    ) -> Tensor:  # fmt: skip
        """x (B, T, D), attention_mask (B, T). Gates and weights do not exist for this kind."""
        check_layer_input(type(self).__name__, x, self.d_model, attention_mask)
        if state is not None and not self.causal:
            raise ValueError("a bidirectional Hyena reads the whole sequence: it cannot decode incrementally")
        projected = zero_padding(self.in_proj(x), attention_mask)
        # re-zero padding after the short convolution, since its bias would leak into it
        z, *gates = zero_padding(self.short_convolved(projected, state), attention_mask).split(self.d_model, dim=-1)
        if state is not None:
            return zero_padding(self.out_proj(self._orders_with_state(z, gates, state)), attention_mask)
        conv = long_conv_fft if self.convolution == "fft" else long_conv_naive
        for n, ((past, future), gate) in enumerate(zip(self.filters(x.shape[1]), gates, strict=True)):
            future = None if future is None else future.to(z.dtype)
            z = gate * (conv(z, past.to(z.dtype), future) + self.filter_bias[n] * z)
        return zero_padding(self.out_proj(z), attention_mask)

    def _orders_with_state(self, z: Tensor, gates: list[Tensor], state: dict) -> Tensor:
        """The two gated long convolutions of a causal layer for the next n positions, whose inputs before them are
        in ``state["cache"]`` (order 1's as its keys, order 2's as its values); appends theirs. By FFT for a chunk,
        whatever ``convolution`` says; a single token by a dot product over the lags."""
        cache = state.setdefault("cache", KeyValueCache(window=None))
        seen, count = cache.length, z.shape[1]
        reversed_filters = self._reversed_filters(cache, seen + count)
        end = reversed_filters.shape[0]  # row end - 1 - l holds lag l
        compute = compute_dtype(z)  # as the FFT's
        before = cache.visible()[:2] if seen else (None, None)
        inputs = []
        for n, gate in enumerate(gates):
            inputs.append(z)
            taps = reversed_filters[:, n * self.d_model : (n + 1) * self.d_model].to(compute)
            if count == 1:  # y_t = h_0 z_t + Σ_{l >= 1} h_l z_{t-l}: one pass over the lags, the taps in their order
                convolved = taps[end - 1] * z.to(compute)
                if seen:
                    lagged = before[n][:, 0].to(compute) * taps[end - 1 - seen : end - 1]
                    convolved = convolved + lagged.sum(1, keepdim=True)
                convolved = convolved.to(z.dtype)
            else:
                extended = z if not seen else torch.cat([before[n][:, 0], z], dim=1)
                convolved = long_conv_fft(extended, taps[end - seen - count :].flip(0))[:, seen:]
            z = gate * (convolved + self.filter_bias[n] * z)
        cache.write(inputs[0][:, None], inputs[1][:, None], None)
        return z

    def _reversed_filters(self, cache: KeyValueCache, length: int) -> Tensor:
        """Both orders' causal filters, lags L-1 .. 0 (L >= length, 2D), kept in ``cache.derived`` for a decoding
        (computed again for twice the length when it runs out: O(log T) evaluations of the filter's MLP in a decoding
        of T tokens); recomputed at every call while gradients are on (the weights may change between calls)."""
        if torch.is_grad_enabled():
            return self.filter(length).flip(0)
        filters = cache.derived.get("reversed_filters")
        if filters is None or filters.shape[0] < length:
            filters = cache.derived["reversed_filters"] = self.filter(max(2 * length, 64)).flip(0)
        return filters


__all__ = ["CONVOLUTIONS", "HyenaMixer", "ImplicitFilter", "SineMLP"]
