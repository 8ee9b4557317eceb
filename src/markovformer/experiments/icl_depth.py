"""``icl-depth``: in-context learning of random binary chains redrawn for every sequence, by depth.

Each sequence has its own kernel, rows ~ Dirichlet(1) (U[0, 1] for binary chains), so no fixed table can be
memorised: the model must count transitions in context. The floor is the oracle (the sequence's own kernel); the
Bayes-optimal in-context predictor is the add-1 estimator of the right order. Expected: 1 layer fails, 2 layers
learn small k, 3 layers reach larger k. Models are the GPT-2-style configuration (``gpt2_style_config``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import torch

from markovformer.experiments.fitting import fit_on_stream, next_token_loss, plateau_from, steps_to_reach
from markovformer.experiments.report import ExperimentReport, cell_settings, revisions_of, seed_reference
from markovformer.experiments.settings import configure
from markovformer.markov import RandomChainSampler, add_beta_loss, icl_oracle_loss
from markovformer.models.markovian_transformer import MarkovianTransformerForCausalLM, gpt2_style_config

NAME = "icl-depth"
SUMMARY = "random binary chains redrawn per sequence, orders 1-4 × depths 1-3, against the oracle and Bayes add-1"
# SPEC's Monte-Carlo reference losses (nats) at T = 512, rows ~ U[0, 1]: order -> (oracle, Bayes add-1). It says
# ±0.003; at order 3 a 40,000-sequence Monte Carlo gives 0.470 / 0.494 (±0.001), 0.005 above: the verdicts use the
# floors each run computes on its own held-out sequences, these are for comparison only.
REFERENCE_T512 = {1: (0.483, 0.492), 2: (0.473, 0.488), 3: (0.465, 0.489), 4: (0.477, 0.515), 8: (0.497, 0.634)}


@dataclass(frozen=True)
class ICLSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps", "plateau_delta", "plateau_patience")
    orders: tuple[int, ...] = (1, 2, 3, 4)
    depths: tuple[int, ...] = (1, 2, 3)
    d_model: int = 64
    n_heads: int = 4
    seq_len: int = 256
    batch_size: int = 16
    steps: int = 3000
    lr: float = 1e-3
    warmup_steps: int = 100
    eval_every: int = 250
    eval_batch: int = 256
    plateau_patience: int = 0  # > 0: stop a cell once this many evaluations improved less than plateau_delta
    plateau_delta: float = 2e-3  # nats


# Quick: order 1 at depths 1 and 2, at a higher learning rate. Two layers sit on the same plateau as one for about
# 900 steps, then drop towards Bayes add-1 (measured: 0.586 -> 0.537 by step 1,100; one layer 0.575 at 2,000), so
# quick mode needs no early stopping (it would stop on that plateau) but enough steps to pass it.
QUICK = ICLSettings(orders=(1,), depths=(1, 2), seq_len=128, steps=1500, lr=3e-3, eval_every=100, eval_batch=128)


def train_icl_cell(
    order: int, n_layers: int, seed: int, settings: ICLSettings, log: Callable[[str], None] | None = None
) -> dict:
    sampler = RandomChainSampler(order, 2, 1.0, per_sequence=True)
    held_out, kernels = sampler.sample(
        settings.eval_batch, settings.seq_len, torch.Generator().manual_seed(10**6 + seed)
    )
    torch.manual_seed(seed)
    # the model its cells were computed with: no attention biases, normal(0.02) init (gpt2_style_config's until
    # it became GPT-2's own)
    config = gpt2_style_config(2, settings.d_model, n_layers, settings.n_heads, settings.seq_len,
                               attention_bias=False, init_scheme="normal")  # fmt: skip
    model = MarkovianTransformerForCausalLM(config)

    def loss_on_batch(x: torch.Tensor) -> torch.Tensor:
        return model(x, labels=x).loss

    fit = fit_on_stream(
        model, loss_on_batch, lambda g: sampler.sample(settings.batch_size, settings.seq_len, g)[0],
        lambda: float(next_token_loss(model, held_out, order)), steps=settings.steps, lr=settings.lr, seed=seed,
        warmup_steps=settings.warmup_steps, eval_every=settings.eval_every, log=log,
        label=f"k={order} layers={n_layers} seed={seed}",
        plateau=plateau_from(settings.plateau_patience, settings.plateau_delta),
    )  # fmt: skip
    oracle = icl_oracle_loss(held_out, kernels)
    bayes = add_beta_loss(held_out, order, 2, 1.0)
    return {
        "order": order, "n_layers": n_layers, "seed": seed, "steps": fit.steps, "losses": fit.evaluations,
        "final_loss": fit.evaluations[-1], "oracle": oracle, "bayes_add1": bayes,
        "steps_to_add1_plus_0.01": steps_to_reach(fit, bayes, 0.01), "seconds": fit.seconds,
        "stopped_early": fit.stopped_early,
        "parameters": sum(p.numel() for p in model.parameters()),
    }  # fmt: skip


def check_settings(settings: ICLSettings) -> None:
    """Refuse, naming the setting, what a cell would fail on only after training (``seq_len=1``: 1,500 steps of
    held-out loss NaN, then "x must have length T > order=1") or once it starts (``orders=[0]``, ``depths=[0]``,
    ``n_heads=3``: errors naming the sampler's ``order`` or the model's config, not the experiment's setting)."""
    for key in ("orders", "depths"):
        if (low := min(getattr(settings, key))) < 1:
            raise ValueError(f"{NAME}.{key}: {low} must be >= 1")
    if settings.seq_len <= max(settings.orders):
        raise ValueError(f"{NAME}.seq_len={settings.seq_len} must exceed the largest order, "
                         f"{max(settings.orders)} (the floors score targets t >= k)")  # fmt: skip
    if settings.d_model % settings.n_heads:
        raise ValueError(f"{NAME}.d_model={settings.d_model} must be divisible by n_heads={settings.n_heads}")


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else ICLSettings(), overrides, NAME)
    plateau_from(settings.plateau_patience, settings.plateau_delta)  # checked before anything is written
    check_settings(settings)
    orders, depths = settings.orders, settings.depths
    seeds = seeds or (0,)
    # deferred, after the settings' checks: plots import matplotlib (0.4 s)
    from markovformer.plots.experiments import Panel, plot_panels
    title = "In-context learning of random Markov chains: depth against order"
    report = ExperimentReport(out_dir, title, log, settings=asdict(settings))
    report.text(
        f"GPT-2-style models (softmax attention, learned positions, GELU MLP, tied embeddings), d = "
        f"{settings.d_model}, {settings.n_heads} heads; AdamW lr {settings.lr}, {settings.steps} steps of "
        f"{settings.batch_size} fresh sequences of T = {settings.seq_len}, each with its own kernel (rows ~ U[0, 1]). "
        f"Losses (nats) on {settings.eval_batch} held-out sequences over targets t ≥ k; the oracle and the Bayes "
        "add-1 estimator are scored on the same sequences."
    )
    cells = []
    report.expect_cells(len(orders) * len(depths) * len(seeds))
    for order in orders:
        for n_layers in depths:
            for seed in seeds:
                key = f"k={order}_layers={n_layers}_seed={seed}"
                cells.append(report.cached(key, partial(train_icl_cell, order, n_layers, seed, settings, log),
                                           depends_on={**cell_settings(settings, ("orders", "depths")),
                                                       **revisions_of({"attention": "softmax"})}))
    rows = [
        [c["order"], c["n_layers"], c["seed"], c["final_loss"], c["oracle"], c["bayes_add1"],
         c["final_loss"] - c["bayes_add1"], c["steps_to_add1_plus_0.01"] or "—", round(c["seconds"])]
        for c in cells
    ]  # fmt: skip
    report.table(
        ["order k", "layers", "seed", "final loss", "oracle", "Bayes add-1", "− add-1", "steps to add-1 + 0.01", "s"],
        rows, caption=f"Final held-out loss at T = {settings.seq_len} against the two floors.",
    )  # fmt: skip
    report.table(
        ["order k", "oracle (reference, T=512)", "Bayes add-1 (reference, T=512)"],
        [[k, *REFERENCE_T512[k]] for k in orders if k in REFERENCE_T512],
        caption="SPEC's Monte-Carlo values at T = 512, for comparison (it says ±0.003; at order 3 a 40,000-sequence "
                "Monte Carlo gives 0.470 / 0.494 ± 0.001). The floors in the figure are computed on this run's own "
                "held-out sequences.",
    )  # fmt: skip
    panels = []
    for order in orders:
        order_cells = [c for c in cells if c["order"] == order]
        curves = {f"{c['n_layers']} layer{'s' if c['n_layers'] > 1 else ''} s{c['seed']}": (c["steps"], c["losses"])
                  for c in order_cells}  # fmt: skip
        references = {**seed_reference(order_cells, "oracle", "oracle"),
                      **seed_reference(order_cells, "bayes_add1", "Bayes add-1")}
        panels.append(Panel(f"order k = {order}", curves, references))
    figure = plot_panels(panels, report.out_dir / "loss_curves.png", "step", "held-out loss (nats)")
    report.figure(figure, "Held-out loss during training by depth, with the oracle and Bayes add-1 floors"
                  + (f" (each seed's held-out sequences have floors of their own, in the table; the lines are their "
                     f"mean over the {len(seeds)} seeds)" if len(seeds) > 1 else ""))  # fmt: skip
    report.results = {"settings": asdict(settings), "reference_T512": REFERENCE_T512, "cells": cells}
    return report.write()
