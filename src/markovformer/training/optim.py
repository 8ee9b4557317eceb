"""AdamW with decay on weight matrices only, and warm-up then linear or cosine decay to a floor (paper §4.2)."""

from __future__ import annotations

import math

import torch
from torch import nn

from markovformer.layers.decay_attention import ForgetGate
from markovformer.layers.markov_bias import HeadwiseLinear
from markovformer.layers.min_gru import MinGRUInjection

# The modules whose weight matrices decay: their ``weight``, or every ``weight_*`` of a recurrent layer (nn.GRU's
# input and hidden maps, per layer and direction). The last three hold theirs as plain parameters, not nn.Linear.
DECAYED_MODULES = (nn.Linear, nn.Embedding, HeadwiseLinear, ForgetGate, MinGRUInjection, nn.RNNBase)
# Runs trained before the GRU injection's, the minGRU's and FoX's forget gate's weights decayed: their checkpoints'
# optimiser states group those weights with the biases (``regroup_optimizer_state``).
UNDECAYED_BEFORE = (ForgetGate, MinGRUInjection, nn.RNNBase)
DECAYS = ("constant", "cosine", "linear")  # the schedules of lr_multiplier after its warm-up


def weight_matrices(module: nn.Module) -> list[nn.Parameter]:
    """The weight matrices of one module of ``DECAYED_MODULES`` (its own parameters, not its children's)."""
    if isinstance(module, nn.RNNBase):
        return [p for name, p in module.named_parameters(recurse=False) if name.startswith("weight_")]
    return [module.weight]


def parameter_groups(model: nn.Module, weight_decay: float, modules: tuple[type, ...] = DECAYED_MODULES) -> list[dict]:
    """Decay the weight matrices (linear and embedding layers, the gate networks' headwise linear maps, the GRU
    injection's and FoX's forget gate's); never biases, norms or transition strengths. ``modules``: the module
    types whose weights decay."""
    decayed = {id(p) for m in model.modules() if isinstance(m, modules) for p in weight_matrices(m)}
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if id(p) in decayed], "weight_decay": weight_decay},
        {"params": [p for p in params if id(p) not in decayed], "weight_decay": 0.0},
    ]


def regroup_optimizer_state(model: nn.Module, state: dict) -> bool:
    """Reorder a saved AdamW state (``state_dict()``) of ``model`` whose groups are those of a run trained before
    the weights of ``UNDECAYED_BEFORE`` decayed into this version's groups, each parameter keeping its moments, so
    that the run resumes (those weights decay from then on); True when it did, False for a state already grouped
    so (or another optimiser's)."""
    groups = state.get("param_groups") or []
    current = parameter_groups(model, 0.0)
    legacy = parameter_groups(model, 0.0, tuple(t for t in DECAYED_MODULES if t not in UNDECAYED_BEFORE))
    sizes = [len(group["params"]) for group in groups]
    if sizes == [len(group["params"]) for group in current] or sizes != [len(group["params"]) for group in legacy]:
        return False
    index = {id(p): i for i, p in enumerate(p for group in current for p in group["params"])}
    saved_ids = [i for group in groups for i in group["params"]]
    moved = {saved: index[id(p)] for saved, p in zip(saved_ids, (p for g in legacy for p in g["params"]), strict=True)}
    state["state"] = {moved[saved]: value for saved, value in state["state"].items()}
    start = 0
    for group, new in zip(groups, current, strict=True):
        group["params"] = list(range(start, start + len(new["params"])))
        start += len(new["params"])
    return True


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
