"""The VMT's densities: diagonal Gaussians (learned, or conditioned on a latent and a context), the categorical
token emission, and the closed forms they share (log density, KL between diagonal Gaussians)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

MIN_STD = 1e-3  # every standard deviation is softplus(raw) + MIN_STD: never 0, so log densities stay finite
LOG_2PI = math.log(2 * math.pi)


def std_from_raw(raw: Tensor) -> Tensor:
    return F.softplus(raw) + MIN_STD


def raw_from_std(std: Tensor) -> Tensor:
    """The inverse of ``std_from_raw`` (std > MIN_STD)."""
    std = torch.as_tensor(std, dtype=torch.float64)
    if not bool((std > MIN_STD).all()):
        raise ValueError(f"standard deviations must exceed {MIN_STD}; got {std.tolist()}")
    return torch.log(torch.expm1(std - MIN_STD))


def gaussian_log_prob(value: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """log N(value; mean, diag std²), summed over the last dimension: (..., d) -> (...) nats."""
    return (-0.5 * ((value - mean) / std) ** 2 - std.log() - 0.5 * LOG_2PI).sum(-1)


def gaussian_kl(mean_q: Tensor, std_q: Tensor, mean_p: Tensor, std_p: Tensor) -> Tensor:
    """KL(N(mean_q, diag std_q²) || N(mean_p, diag std_p²)), summed over the last dimension: (..., d) -> (...)."""
    ratio = (std_q / std_p) ** 2
    return 0.5 * (ratio + ((mean_q - mean_p) / std_p) ** 2 - 1.0 - ratio.log()).sum(-1)


class LearnedGaussian(nn.Module):
    """An unconditional N(mean, diag std²) on R^d with learned mean and std: the prior P(x_1)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.mean = nn.Parameter(torch.zeros(dim))
        # std 1, from a number: raw_from_std checks a tensor's values, which a model built on the meta device lacks
        self.raw_std = nn.Parameter(torch.full((dim,), math.log(math.expm1(1 - MIN_STD))))

    def forward(self) -> tuple[Tensor, Tensor]:
        """(mean, std), each (d,)."""
        return self.mean, std_from_raw(self.raw_std)

    def log_prob(self, value: Tensor) -> Tensor:
        mean, std = self()
        return gaussian_log_prob(value, mean, std)

    @torch.no_grad()
    def set(self, mean: Tensor, std: Tensor) -> None:
        self.mean.copy_(torch.as_tensor(mean))
        self.raw_std.copy_(raw_from_std(std))


class ConditionalGaussian(nn.Module):
    """N(mean, diag std²) on R^out conditioned on an input x (the previous latent; may be absent) and a context c
    (encoder features; may be absent):

        pre = W_x x + W_c c + b,  split into (linear (out), hidden (hidden_dim))
        mean = linear + Δ,  std = softplus(r + r₀) + MIN_STD,  (Δ, r) = W_o GELU(hidden) + b_o

    So the mean is a linear map plus a one-hidden-layer correction, and a linear-Gaussian map is held exactly
    (``set_linear``: W_o = 0). The context part is computed for every position at once by ``prepare``; a
    sequential sampler then adds only W_x x per step.

    Given an ``anchor`` (mean_a, std_a) — a residual posterior's prior — the result is an offset from it instead:
    mean = mean_a + linear + Δ, std = max(std_a · softplus(r + r₀), MIN_STD). ``residual_start()`` zeroes the
    offset, so the density starts equal to its anchor.
    """

    def __init__(self, input_dim: int, context_dim: int, out_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.out_dim, self.hidden_dim = out_dim, hidden_dim
        width = out_dim + hidden_dim
        self.from_input = nn.Linear(input_dim, width, bias=False) if input_dim else None
        self.from_context = nn.Linear(context_dim, width, bias=False) if context_dim else None
        self.bias = nn.Parameter(torch.zeros(width))
        self.out = nn.Linear(hidden_dim, 2 * out_dim)
        self.raw_std_bias = nn.Parameter(torch.zeros(out_dim))

    def prepare(self, context: Tensor | None = None) -> Tensor:
        """The context's share of ``pre``: context (..., context_dim) -> (..., out + hidden); the bias alone if None."""
        if self.from_context is None:
            return self.bias
        return self.from_context(context) + self.bias

    def forward(
        self, x: Tensor | None, prepared: Tensor, anchor: tuple[Tensor, Tensor] | None = None
    ) -> tuple[Tensor, Tensor]:
        """(mean, std), each (..., out), from x (..., input_dim) or None and ``prepare``'s output (broadcast);
        relative to ``anchor`` = (mean, std) when given."""
        pre = prepared if x is None else prepared + self.from_input(x)
        linear, hidden = pre.split([self.out_dim, self.hidden_dim], dim=-1)
        delta, raw = self.out(F.gelu(hidden)).chunk(2, dim=-1)
        if anchor is None:
            return linear + delta, std_from_raw(raw + self.raw_std_bias)
        return anchor[0] + linear + delta, (anchor[1] * F.softplus(raw + self.raw_std_bias)).clamp_min(MIN_STD)

    @torch.no_grad()
    def residual_start(self) -> None:
        """Zero the offset from an anchor: linear part and output layer 0, std multiplier softplus(r₀) = 1."""
        for layer in (self.from_input, self.from_context):
            if layer is not None:
                layer.weight[: self.out_dim].zero_()
        self.bias.zero_()
        self.out.weight.zero_()
        self.out.bias.zero_()
        self.raw_std_bias.fill_(math.log(math.e - 1))

    @torch.no_grad()
    def set_linear(self, weight: Tensor, bias: Tensor, std: Tensor) -> None:
        """Make this exactly N(weight · x + bias, diag std²): weight (out, input_dim), bias and std (out,)."""
        if self.from_input is None or self.from_context is not None:
            raise ValueError("set_linear needs a Gaussian conditioned on an input only")
        weight = torch.as_tensor(weight)
        if tuple(weight.shape) != (self.out_dim, self.from_input.in_features):
            raise ValueError(
                f"weight has shape {tuple(weight.shape)}; expected {(self.out_dim, self.from_input.in_features)}"
            )
        self.from_input.weight[: self.out_dim].copy_(weight)
        self.bias[: self.out_dim].copy_(torch.as_tensor(bias))
        self.out.weight.zero_()
        self.out.bias.zero_()
        self.raw_std_bias.copy_(raw_from_std(std))


class GaussianEmission(nn.Module):
    """P(y | x) for real vectors: a ``ConditionalGaussian`` of the latent."""

    def __init__(self, latent_dim: int, input_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.density = ConditionalGaussian(latent_dim, 0, input_dim, hidden_dim)

    def log_prob(self, y: Tensor, x: Tensor) -> Tensor:
        """y (..., F), x (..., dx) -> (...) nats."""
        mean, std = self.density(x, self.density.prepare())
        return gaussian_log_prob(y, mean, std)

    def sample(self, x: Tensor, generator: torch.Generator | None, temperature: float = 1.0) -> Tensor:
        """x (B, dx) -> y (B, F): mean + temperature · std · noise (temperature 0: the mean)."""
        mean, std = self.density(x, self.density.prepare())
        return mean + temperature * std * standard_normal(mean.shape, mean, generator)


class CategoricalEmission(nn.Module):
    """P(y | x) for tokens: softmax(W x + b + W_o GELU(W_h x + b_h)), a linear read-out with a nonlinear correction."""

    vocabulary_modules = ("linear", "hidden.2")  # the layers with a row per token id: W, b and W_o, the logits

    def __init__(self, latent_dim: int, vocab_size: int, hidden_dim: int) -> None:
        super().__init__()
        self.linear = nn.Linear(latent_dim, vocab_size)
        self.hidden = nn.Sequential(nn.Linear(latent_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, vocab_size))

    def logits(self, x: Tensor) -> Tensor:
        return self.linear(x) + self.hidden(x)

    def log_prob(self, y: Tensor, x: Tensor) -> Tensor:
        """y (...) token ids, x (..., dx) -> (...) nats."""
        log_probs = self.logits(x).float().log_softmax(-1)
        return log_probs.gather(-1, y.expand(log_probs.shape[:-1])[..., None]).squeeze(-1).to(x.dtype)


def standard_normal(shape: torch.Size | tuple[int, ...], like: Tensor, generator: torch.Generator | None) -> Tensor:
    """N(0, 1) noise of ``shape`` with ``like``'s dtype and device, drawn from ``generator`` (on its own device; the
    global generator when None)."""
    device = generator.device if generator is not None else like.device
    return torch.randn(shape, generator=generator, device=device, dtype=like.dtype).to(like.device)


__all__ = ["CategoricalEmission", "ConditionalGaussian", "GaussianEmission", "LearnedGaussian", "MIN_STD",
           "gaussian_kl", "gaussian_log_prob", "raw_from_std", "standard_normal", "std_from_raw"]  # fmt: skip
