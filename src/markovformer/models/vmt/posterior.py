"""The VMT's posteriors Q(x | previous latent, context): a diagonal Gaussian, or that Gaussian pushed through
conditional affine couplings (a normalising flow). Both draw reparameterised samples with their exact log density
and evaluate the log density of given values (for Loss_init and Loss_skip).

A posterior is run in two stages: ``prepare(context)`` once for every position (the encoder features' share of
each network's first layer), then ``sample``/``log_prob`` per step with the previous latent.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.models.vmt.densities import LOG_2PI, ConditionalGaussian, gaussian_log_prob


class PosteriorSample(NamedTuple):
    value: Tensor  # (..., dx): the reparameterised draw
    log_prob: Tensor  # (...): its exact log density under the posterior
    mean: Tensor  # (..., dx): the base Gaussian's mean (the posterior's own for "gaussian")
    std: Tensor  # (..., dx)


Anchor = tuple[Tensor, Tensor]


class GaussianPosterior(nn.Module):
    """Q(x | input, context) = N(mean, diag std²) with mean and std from a ``ConditionalGaussian``; with
    ``residual``, an offset from an anchor Gaussian (the prior at that step) passed to every call, starting at it."""

    def __init__(self, input_dim: int, context_dim: int, latent_dim: int, hidden_dim: int, residual: bool = False):
        super().__init__()
        self.residual = residual
        self.base = ConditionalGaussian(input_dim, context_dim, latent_dim, hidden_dim)
        if residual:
            self.base.residual_start()

    def _anchor(self, anchor: Anchor | None) -> Anchor | None:
        if self.residual and anchor is None:
            raise ValueError("a residual posterior needs its anchor (the prior's mean and std)")
        return anchor if self.residual else None

    def prepare(self, context: Tensor) -> list[Tensor]:
        """context (..., context_dim) -> one tensor (..., width) per network, to be sliced like the context."""
        return [self.base.prepare(context)]

    def sample(
        self, x: Tensor | None, prepared: list[Tensor], noise: Tensor, anchor: Anchor | None = None
    ) -> PosteriorSample:
        """x (..., input_dim) or None; noise (..., dx) standard normal; ``anchor`` (mean, std) (..., dx)."""
        mean, std = self.base(x, prepared[0], self._anchor(anchor))
        value = mean + std * noise
        log_prob = (-0.5 * noise**2 - std.log() - 0.5 * LOG_2PI).sum(-1)
        return PosteriorSample(value, log_prob, mean.expand_as(value), std.expand_as(value))

    def log_prob(self, value: Tensor, x: Tensor | None, prepared: list[Tensor], anchor: Anchor | None = None) -> Tensor:
        mean, std = self.base(x, prepared[0], self._anchor(anchor))
        return gaussian_log_prob(value, mean, std)


class AffineCoupling(nn.Module):
    """z_b ← z_b · exp(s) + t with (s, t) from (z_a, input, context) and s = tanh(·) (a bounded log-scale), z_a
    unchanged; ``flip`` swaps which half conditions. Starts as the identity (zero output layer)."""

    def __init__(self, latent_dim: int, input_dim: int, context_dim: int, hidden_dim: int, flip: bool) -> None:
        super().__init__()
        half = latent_dim // 2
        first, second = torch.arange(half), torch.arange(half, latent_dim)
        kept, moved = (second, first) if flip else (first, second)
        self.register_buffer("kept", kept, persistent=False)
        self.register_buffer("moved", moved, persistent=False)
        self.from_kept = nn.Linear(len(kept), hidden_dim, bias=False)
        self.from_input = nn.Linear(input_dim, hidden_dim, bias=False) if input_dim else None
        self.from_context = nn.Linear(context_dim, hidden_dim)
        self.out = nn.Linear(hidden_dim, 2 * len(moved))
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def prepare(self, context: Tensor) -> Tensor:
        return self.from_context(context)

    def _scale_shift(self, z: Tensor, x: Tensor | None, prepared: Tensor) -> tuple[Tensor, Tensor]:
        pre = prepared + self.from_kept(z[..., self.kept])
        if x is not None:
            pre = pre + self.from_input(x)
        log_scale, shift = self.out(F.gelu(pre)).chunk(2, dim=-1)
        return torch.tanh(log_scale), shift

    def forward(self, z: Tensor, x: Tensor | None, prepared: Tensor) -> tuple[Tensor, Tensor]:
        """z (..., dx) -> (z', log |det ∂z'/∂z| (...))."""
        log_scale, shift = self._scale_shift(z, x, prepared)
        out = z.clone()
        out[..., self.moved] = z[..., self.moved] * log_scale.exp() + shift
        return out, log_scale.sum(-1)

    def inverse(self, z: Tensor, x: Tensor | None, prepared: Tensor) -> tuple[Tensor, Tensor]:
        """z' -> (z, log |det ∂z'/∂z|) (the forward map's log-determinant at the recovered z)."""
        log_scale, shift = self._scale_shift(z, x, prepared)  # z_a is unchanged, so (s, t) are the same
        out = z.clone()
        out[..., self.moved] = (z[..., self.moved] - shift) * (-log_scale).exp()
        return out, log_scale.sum(-1)


class FlowPosterior(GaussianPosterior):
    """A diagonal Gaussian base pushed through ``layers`` conditional affine couplings, halves alternating:
    log Q(x) = log N(z_0) − Σ log |det| of the couplings."""

    def __init__(
        self, input_dim: int, context_dim: int, latent_dim: int, hidden_dim: int, layers: int, residual: bool = False
    ) -> None:
        super().__init__(input_dim, context_dim, latent_dim, hidden_dim, residual)
        self.couplings = nn.ModuleList(
            AffineCoupling(latent_dim, input_dim, context_dim, hidden_dim, flip=bool(i % 2)) for i in range(layers)
        )

    def prepare(self, context: Tensor) -> list[Tensor]:
        return [self.base.prepare(context), *(coupling.prepare(context) for coupling in self.couplings)]

    def sample(
        self, x: Tensor | None, prepared: list[Tensor], noise: Tensor, anchor: Anchor | None = None
    ) -> PosteriorSample:
        base = super().sample(x, prepared, noise, anchor)
        value, log_prob = base.value, base.log_prob
        for coupling, part in zip(self.couplings, prepared[1:], strict=True):
            value, log_det = coupling(value, x, part)
            log_prob = log_prob - log_det
        return PosteriorSample(value, log_prob, base.mean, base.std)

    def log_prob(self, value: Tensor, x: Tensor | None, prepared: list[Tensor], anchor: Anchor | None = None) -> Tensor:
        total_log_det = value.new_zeros(value.shape[:-1])
        for coupling, part in zip(reversed(self.couplings), reversed(prepared[1:]), strict=True):
            value, log_det = coupling.inverse(value, x, part)
            total_log_det = total_log_det + log_det
        return super().log_prob(value, x, prepared, anchor) - total_log_det


def build_posterior(kind: str, input_dim: int, context_dim: int, latent_dim: int, hidden_dim: int,
                    flow_layers: int, residual: bool = False) -> GaussianPosterior:  # fmt: skip
    if kind == "gaussian":
        return GaussianPosterior(input_dim, context_dim, latent_dim, hidden_dim, residual)
    if kind == "flow":
        return FlowPosterior(input_dim, context_dim, latent_dim, hidden_dim, flow_layers, residual)
    raise ValueError(f"posterior={kind!r} must be 'gaussian' or 'flow'")


__all__ = ["AffineCoupling", "FlowPosterior", "GaussianPosterior", "PosteriorSample", "build_posterior"]
