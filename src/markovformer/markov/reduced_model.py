"""The reduced 3-parameter model (e, w, b) of the single-layer tied transformer on a switching chain.

On the binary switching chain P(p, q) = [[1-p, p], [q, 1-q]] with stationary π = (q, p)/(p+q), the model predicts
P(x_{n+1} = 1 | x_n = x) = sigmoid(logit(x)) with

    logit(x) = e² (1 + 2 w|w|) x + b − e²/2,    x ∈ {0, 1}.

Its loss is the exact expected binary cross-entropy (nats) under the stationary chain,

    L(e, w, b) = Σ_x π(x) BCE(P(1|x), sigmoid(logit(x))),    P(1|0) = p, P(1|1) = 1 − q,

so the global minimum is the entropy rate and, on the line e = 0 (the model ignores its input), the best b gives
the unigram loss H(π). At w = −1/√2 the slope 1 + 2w|w| vanishes: (w, e) = (−1/√2, 0) is a saddle point of
the loss.

**Energy and basins.** With b held at its optimum (the profiled loss L*(e, w) = min_b L, whose gradient is
∇_{e,w} L by the envelope theorem) the residuals satisfy g_0 = −g_1, and the flow dθ/dt = −∇L* obeys
dw/de = 2e|w| / (1 + 2w|w|). Separating variables gives the conserved energy

    E(e, w) = e² − w² − sign(w) log|w|,

so every trajectory of the profiled flow stays on one level set of E. For w < 0 the function −w² + log|w| peaks
at the saddle's w = −1/√2 with value E_s = E(0, −1/√2) = −1/2 − (log 2)/2. A level set with E < E_s meets the
unigram line e = 0 on both sides of the saddle, so it never crosses w = −1/√2, where the slope 1 + 2w|w| of the
logit changes sign; a level set with E > E_s (w < 0) crosses it. Level sets with w > 0 never reach w = 0. Hence,
when p + q > 1 (the target slope is negative, reachable only with w < −1/√2), a start with slope ≥ 0 reaches the
global minimum only if w < 0 and E > E_s: the **basin boundary** is the curve e² = E_s + w² − log|w|, w < 0.
Small initialisations (|w| small) have E far below E_s and end on the unigram line, as the talk shows. When
p + q < 1 the target slope is positive and every start with w > −1/√2 and e ≠ 0 reaches the global minimum.

All functions accept Python floats or tensors (broadcast elementwise) and compute in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from markovformer.markov.chains import check_switching_rates


def _as_float64(*values: float | Tensor) -> list[Tensor]:
    return [torch.as_tensor(value, dtype=torch.float64) for value in values]


def _logits(e: Tensor, w: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """(logit(0), logit(1)) of the reduced model."""
    slope = e**2 * (1 + 2 * w * w.abs())
    offset = b - e**2 / 2
    return offset, offset + slope


def _targets(p: Tensor, q: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(π(0), π(1), P(1|0), P(1|1)) of the switching chain; ValueError unless p, q lie in [0, 1], p + q > 0."""
    check_switching_rates(p, q)
    return q / (p + q), p / (p + q), p, 1 - q


def reduced_loss(e: float | Tensor, w: float | Tensor, b: float | Tensor, p: float, q: float) -> Tensor:
    """Exact expected BCE loss in nats L(e, w, b) on the switching chain of rates ``p``, ``q`` (module docstring),
    float64: 0-d for scalar arguments, else broadcast over e, w and b (differentiable in e, w, b).

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
    """Closed-form (∂L/∂e, ∂L/∂w, ∂L/∂b), float64 tensors broadcast over the arguments.

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
    """The optimal b on the line e = 0: logit(π(1)) = log(p / q), giving loss H(π); ±inf when a rate is 0 (the
    chain stays in one state, π(1) is 1 or 0)."""
    check_switching_rates(p, q)
    if p == 0 or q == 0:
        return math.copysign(math.inf, p - q)
    return math.log(p / q)


def optimal_bias(
    e: float | Tensor, w: float | Tensor, p: float, q: float, initial: Tensor | None = None, iterations: int = 200
) -> Tensor:
    """argmin_b L(e, w, b), float64, broadcast over e and w.

    ∂L/∂b is increasing in b, so Newton's method runs inside a bracket [lo, hi] that always holds the root and
    falls back to bisection whenever a Newton step would leave it (plain Newton diverges where the logit's slope
    is large). ``initial`` warm-starts the iteration (a trajectory passes the previous step's b); iteration stops
    once every step is below 1e-13.
    """
    e, w, p, q = _as_float64(e, w, p, q)
    pi_0, pi_1, target_0, target_1 = _targets(p, q)
    shape = torch.broadcast_shapes(e.shape, w.shape)
    if initial is None:
        initial = torch.logit(pi_0 * target_0 + pi_1 * target_1)  # the optimum when the slope is 0
    b = torch.broadcast_to(torch.as_tensor(initial, dtype=torch.float64), shape).clone()
    slope = (e**2 * (1 + 2 * w * w.abs())).abs()
    lo = torch.broadcast_to(-slope - 50.0 + e**2 / 2, shape).clone()  # σ(l) ∈ (0, 1) at every logit bound
    hi = torch.broadcast_to(slope + 50.0 + e**2 / 2, shape).clone()
    b = b.clamp(lo, hi)
    for _ in range(iterations):
        logit_0, logit_1 = _logits(e, w, b)
        s0, s1 = torch.sigmoid(logit_0), torch.sigmoid(logit_1)
        gradient = pi_0 * (s0 - target_0) + pi_1 * (s1 - target_1)
        curvature = pi_0 * s0 * (1 - s0) + pi_1 * s1 * (1 - s1)
        lo = torch.where(gradient < 0, b, lo)
        hi = torch.where(gradient > 0, b, hi)
        newton = b - gradient / curvature.clamp_min(1e-300)
        inside = (newton >= lo) & (newton <= hi)
        updated = torch.where(inside, newton, (lo + hi) / 2)
        done = float((updated - b).abs().max()) < 1e-13
        b = updated
        if done:
            break
    return b


def energy(e: float | Tensor, w: float | Tensor) -> Tensor:
    """E(e, w) = e² − w² − sign(w) log|w|: conserved by the profiled gradient flow (module docstring); w ≠ 0."""
    e, w = torch.as_tensor(e, dtype=torch.float64), torch.as_tensor(w, dtype=torch.float64)
    return e**2 - w**2 - torch.sign(w) * torch.log(w.abs())


def saddle_energy() -> float:
    """E_s = E(0, −1/√2) = −1/2 − (log 2)/2: the level set through the saddle is the basin boundary."""
    return -0.5 - math.log(2.0) / 2


def basin_boundary(w: float | Tensor) -> Tensor:
    """|e| on the basin boundary E(e, w) = E_s for w < 0: e = sqrt(E_s + w² − log|w|) (module docstring)."""
    w = torch.as_tensor(w, dtype=torch.float64)
    if not bool((w < 0).all()):  # w >= 0 or NaN
        raise ValueError(f"basin_boundary is defined for w < 0 only, got w={w[~(w < 0)].flatten()[0].item()!r}")
    return (saddle_energy() + w**2 - torch.log(w.abs())).clamp_min(0).sqrt()


def reaches_global_minimum(e: float | Tensor, w: float | Tensor, p: float, q: float) -> Tensor:
    """Boolean tensor: whether the profiled flow from (e, w) ends at the global minimum rather than at e = 0.

    For e ≠ 0, from the energy argument of the module docstring: p + q < 1 needs the positive-slope side
    (w > −1/√2) or a level set that crosses the saddle's line (w < 0, E > E_s); p + q > 1 needs the negative-slope
    side or such a crossing. A start on the unigram line e = 0 stays there (∂L/∂e and ∂L/∂w vanish with e), so it
    never does; w = 0 stays 0 with slope e² > 0, the positive side. p + q = 1 (independent symbols) has no slope to
    learn: every start is optimal.
    """
    check_switching_rates(p, q)
    e, w = torch.as_tensor(e, dtype=torch.float64), torch.as_tensor(w, dtype=torch.float64)
    crosses = (w < 0) & (energy(e, w) > saddle_energy())
    positive_side = 1 + 2 * w * w.abs() > 0
    if math.isclose(p + q, 1.0):
        return torch.ones_like(crosses)
    return (crosses | (positive_side if p + q < 1 else ~positive_side)) & (e != 0)


def gradient_flow(
    e0: float | Tensor,
    w0: float | Tensor,
    b0: float | Tensor,
    p: float,
    q: float,
    steps: int,
    lr: float,
    *,
    profile_bias: bool = False,
) -> Tensor:
    """Explicit-Euler gradient flow θ ← θ − lr ∇L(θ) on the closed-form gradient, for one start or many.

    e0, w0, b0: floats or tensors of one shape S (many starts run at once). ``profile_bias=True`` keeps b at
    ``optimal_bias`` after every step (the flow of the profiled loss, which conserves ``energy``); b0 is then
    ignored. Returns the trajectory, float64 (steps + 1, *S, 3), columns (e, w, b); row 0 is the initial point.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be an integer >= 0, got {steps!r}")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    e, w, b = torch.broadcast_tensors(*_as_float64(e0, w0, b0))
    e, w, b = e.clone(), w.clone(), b.clone()
    if profile_bias:
        b = optimal_bias(e, w, p, q)
    trajectory = torch.empty(steps + 1, *e.shape, 3, dtype=torch.float64)
    trajectory[0] = torch.stack((e, w, b), dim=-1)
    for step in range(1, steps + 1):
        grad_e, grad_w, grad_b = reduced_gradient(e, w, b, p, q)
        e, w, b = e - lr * grad_e, w - lr * grad_w, b - lr * grad_b
        if profile_bias:
            b = optimal_bias(e, w, p, q, initial=b)
        trajectory[step] = torch.stack((e, w, b), dim=-1)
    return trajectory
