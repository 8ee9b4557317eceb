"""AdamW with decay on weight matrices only, and warm-up then linear or cosine decay to a floor (paper §4.2)."""

from __future__ import annotations

import math

import torch
from torch import nn

from markovformer.layers.markov_bias import HeadwiseLinear

DECAYED_MODULES = (nn.Linear, nn.Embedding, HeadwiseLinear)
DECAYS = ("constant", "cosine", "linear")  # the schedules of lr_multiplier after its warm-up


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay the weight matrices (linear and embedding layers, and the gate networks' headwise linear maps); never
    biases, norms or transition strengths."""
    decayed = {id(m.weight) for m in model.modules() if isinstance(m, DECAYED_MODULES)}
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0},
    ]


def build_optimizer(
    model: nn.Module, lr: float, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95)
) -> torch.optim.AdamW:
    return torch.optim.AdamW(parameter_groups(model, weight_decay), lr=lr, betas=betas)


def lr_multiplier(step: int, warmup_steps: int, total_steps: int, decay: str = "cosine", floor: float = 0.1) -> float:
    """Multiplier of the peak learning rate at ``step``: linear warm-up, then decay to ``floor`` at total_steps
    (``decay`` "cosine" or "linear"), or the peak rate to the end ("constant")."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if decay == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    if decay == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if decay == "linear":
        return floor + (1 - floor) * (1 - progress)
    raise ValueError(f"decay={decay!r} must be one of {DECAYS}")
