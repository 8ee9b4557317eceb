"""The reduced 3-parameter model (e, w, b) of the single-layer tied transformer on a switching chain (SPEC 6).

On the binary switching chain P(p, q) = [[1-p, p], [q, 1-q]] with stationary π = (q, p)/(p+q), the model predicts
P(x_{n+1} = 1 | x_n = x) = sigmoid(logit(x)) with

    logit(x) = e² (1 + 2 w|w|) x + b − e²/2,    x ∈ {0, 1}.

Its loss is the exact expected binary cross-entropy (nats) under the stationary chain,

    L(e, w, b) = Σ_x π(x) BCE(P(1|x), sigmoid(logit(x))),    P(1|0) = p, P(1|1) = 1 − q,

so the global minimum is the entropy rate and, on the line e = 0 (the model ignores its input), the best b gives
the unigram loss H(π). At w = −1/√2 the slope 1 + 2w|w| vanishes: (w, e) = (−1/√2, 0) is the saddle of SPEC 6.

The seed talk defines no energy function and no basin boundary for this model, so neither is implemented here.
All functions accept Python floats or 0-d tensors and compute in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def _as_float64(*values: float | Tensor) -> list[Tensor]:
    return [torch.as_tensor(value, dtype=torch.float64) for value in values]


def _logits(e: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(logit(0), logit(1)) of the reduced model."""
    slope = e**2 * (1 + 2 * w * w.abs())
    offset = b - e**2 / 2
    return offset, offset + slope


def _targets(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(π(0), π(1), P(1|0), P(1|1)) of the switching chain."""
    return q / (p + q), p / (p + q), p, 1 - q


def reduced_loss(e: float | Tensor, w: float | Tensor, b: float | Tensor, p: float, q: float) -> Tensor:
    """Exact expected BCE loss in nats, float64 0-d tensor (differentiable in e, w, b).

    BCE(y, sigmoid(l)) = softplus(l) − y l, which is stable for any logit l.
    """
    e, w, b, p, q = _as_float64(e, w, b, p, q)
    logit_0, logit_1 = _logits(e, w, b)
    pi_0, pi_1, target_0, target_1 = _targets(p, q)
    bce_0 = torch.nn.functional.softplus(logit_0) - target_0 * logit_0
    bce_1 = torch.nn.functional.softplus(logit_1) - target_1 * logit_1
    return pi_0 * bce_0 + pi_1 * bce_1


def reduced_gradient(
    e: float | Tensor, w: float | Tensor, b: float | Tensor, p: float, q: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Closed-form (∂L/∂e, ∂L/∂w, ∂L/∂b), float64 0-d tensors.

    With residuals g_x = π(x) (sigmoid(logit(x)) − P(1|x)) (the derivative of π(x) BCE w.r.t. logit(x)):
        ∂logit(0)/∂e = −e,   ∂logit(1)/∂e = 2e(1 + 2w|w|) − e,   ∂logit(1)/∂w = 4e²|w|,   ∂logit(x)/∂b = 1,
    so ∂L/∂e = −e g_0 + e(1 + 4w|w|) g_1,   ∂L/∂w = 4e²|w| g_1,   ∂L/∂b = g_0 + g_1.
    """
    e, w, b, p, q = _as_float64(e, w, b, p, q)
    logit_0, logit_1 = _logits(e, w, b)
    pi_0, pi_1, target_0, target_1 = _targets(p, q)
    residual_0 = pi_0 * (torch.sigmoid(logit_0) - target_0)
    residual_1 = pi_1 * (torch.sigmoid(logit_1) - target_1)
    grad_e = -e * residual_0 + e * (1 + 4 * w * w.abs()) * residual_1
    grad_w = 4 * e**2 * w.abs() * residual_1
    grad_b = residual_0 + residual_1
    return grad_e, grad_w, grad_b


def saddle_point() -> tuple[float, float]:
    """(w, e) = (−1/√2, 0): where the slope 1 + 2w|w| of logit in x vanishes on the unigram line e = 0."""
    return -1.0 / math.sqrt(2.0), 0.0


def unigram_bias(p: float, q: float) -> float:
    """The optimal b on the line e = 0: logit(π(1)) = log(p / q), giving loss H(π)."""
    return math.log(p / q)


def gradient_flow(e0: float, w0: float, b0: float, p: float, q: float, steps: int, lr: float) -> Tensor:
    """Explicit-Euler gradient flow θ ← θ − lr ∇L(θ) on the closed-form gradient.

    Returns the trajectory, float64 (steps + 1, 3), columns (e, w, b); row 0 is the initial point.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    trajectory = torch.empty(steps + 1, 3, dtype=torch.float64)
    theta = torch.tensor([e0, w0, b0], dtype=torch.float64)
    trajectory[0] = theta
    for step in range(1, steps + 1):
        theta = theta - lr * torch.stack(reduced_gradient(theta[0], theta[1], theta[2], p, q))
        trajectory[step] = theta
    return trajectory
