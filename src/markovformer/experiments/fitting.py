"""The small training loop of the testbed experiments: fresh samples every step, no dataset, no checkpoints.

The experiments train many tiny models on an endless stream of generated sequences, where the engine's
Lightning runs (datasets, checkpoints, logs) would cost more than the training itself. Each fit is one cell of an
experiment; an interrupted experiment resumes cell by cell (``ExperimentReport.cached``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

OPTIMIZERS = ("adamw", "sgd")


@dataclass
class FitResult:
    steps: list[int] = field(default_factory=list)  # the steps at which ``evaluate`` ran
    evaluations: list[float] = field(default_factory=list)
    seconds: float = 0.0


def fit_on_stream(
    model: nn.Module,
    loss_on_batch: Callable[[Tensor], Tensor],
    sample_batch: Callable[[torch.Generator], Tensor],
    evaluate: Callable[[], float],
    *,
    steps: int,
    lr: float,
    seed: int,
    eval_every: int,
    optimizer: str = "adamw",
    warmup_steps: int = 0,
    log: Callable[[str], None] | None = None,
    label: str = "",
) -> FitResult:
    """``optimizer`` "adamw" (no weight decay) or "sgd" (plain gradient steps, the discrete gradient flow of the
    theory), at a constant rate after a linear warm-up, on fresh batches from ``sample_batch``.

    ``evaluate()`` (a held-out loss, say) runs at step 0, every ``eval_every`` steps and at the end, in eval mode
    without gradients. The batch stream is seeded with ``seed``; the model's initialisation is the caller's.
    """
    if steps < 1 or eval_every < 1:
        raise ValueError(f"steps and eval_every must be >= 1; got steps={steps}, eval_every={eval_every}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} must be one of {OPTIMIZERS}")
    if optimizer == "sgd":
        optim = torch.optim.SGD(model.parameters(), lr=lr)
    else:
        optim = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optim, lambda step: min(1.0, (step + 1) / max(1, warmup_steps)))
    generator = torch.Generator().manual_seed(seed)
    result = FitResult()
    start = time.perf_counter()

    def record(step: int) -> None:
        model.eval()
        with torch.no_grad():
            value = float(evaluate())
        model.train()
        result.steps.append(step)
        result.evaluations.append(value)
        if log is not None:
            log(f"  {label} step {step:>6}/{steps}: held-out {value:.4f}  ({time.perf_counter() - start:.0f}s)")

    record(0)
    model.train()
    for step in range(1, steps + 1):
        loss = loss_on_batch(sample_batch(generator))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()
        schedule.step()
        if step % eval_every == 0 or step == steps:
            record(step)
    result.seconds = time.perf_counter() - start
    return result


def steps_to_reach(result: FitResult, target: float, tolerance: float) -> int | None:
    """The first evaluated step whose value is within ``tolerance`` of ``target``, or None if none was."""
    for step, value in zip(result.steps, result.evaluations, strict=True):
        if value <= target + tolerance:
            return step
    return None


def next_token_loss(model: nn.Module, x: Tensor, first_target: int) -> Tensor:
    """Mean next-token cross-entropy of a causal LM on x (B, T) over targets t = first_target..T-1 (an order-k
    chain's estimators and oracle score t >= k)."""
    logits = model(x).logits[:, first_target - 1 : -1]
    return F.cross_entropy(logits.flatten(0, 1), x[:, first_target:].flatten())
