"""``weight-tying``: the canonical single-layer binary model on switching chains, tied vs untied
(x_n·e + p_n, one head, ReLU MLP, logit = ⟨a, z_n⟩ + b; tied means a = e).

The talk's claim: with a = e (tied), d = 4 and p + q > 1, training from a small initialisation ends at the
unigram minimum (loss H(π), the same prediction P(1|x) ≈ π₁ for both inputs); untied, or with p + q < 1, it
reaches the entropy rate. Plain SGD is the discrete gradient flow the theory studies. AdamW runs too: it rescales
the tiny gradients along the unigram minimum's flat directions (the talk's Hessian there is only "almost"
positive-definite) into full-size steps, and can drift out of the minimum. Each cell trains one model; the
held-out loss is the exact expected cross-entropy given the sampled contexts (``MarkovChain.expected_loss``), so
it carries no target-sampling noise.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import torch

from markovformer.experiments.fitting import OPTIMIZERS, fit_on_stream, plateau_from
from markovformer.experiments.report import ExperimentReport, cell_settings
from markovformer.experiments.settings import check_chains, configure
from markovformer.markov import switching_chain
from markovformer.models.binary_transformer import BinaryTransformer, BinaryTransformerConfig

NAME = "weight-tying"
SUMMARY = "single-layer binary model on switching chains, tied vs untied: entropy rate or the unigram H(π)"
# The verdict threshold: a final loss within this of a reference value is said to have reached it.
TOLERANCE = 0.01
ADAMW_LR = 1e-3


@dataclass(frozen=True)
class WeightTyingSettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("plateau_delta", "plateau_patience")
    chains: tuple[tuple[float, float], ...] = ((0.2, 0.3), (0.5, 0.8), (0.7, 0.9), (1.0, 0.8))  # (p, q)
    optimizers: tuple[str, ...] = ("sgd", "adamw")
    depths: tuple[int, ...] = (1,)  # attention + MLP layers; the talk's model has one
    d_model: int = 4
    seq_len: int = 128
    batch_size: int = 64
    steps: int = 1500
    lr: float = 1.0  # SGD; AdamW cells use ADAMW_LR
    eval_every: int = 100
    eval_batch: int = 64
    plateau_patience: int = 0  # > 0: stop a cell once this many evaluations improved less than plateau_delta
    plateau_delta: float = 1e-3  # nats


# Quick: one chain on each side of p + q = 1, SGD only, stopped once the held-out loss is flat for 200 steps (the
# full run's curves are flat after a few hundred of their 1,500 steps).
QUICK = WeightTyingSettings(chains=((0.2, 0.3), (0.7, 0.9)), optimizers=("sgd",), eval_every=50,
                            plateau_patience=4)  # fmt: skip


def held_out_sequences(chain, seed: int, settings: WeightTyingSettings) -> torch.Tensor:
    """The evaluation sequences of a cell: fixed by the seed, never seen in training."""
    return chain.sample(settings.eval_batch, settings.seq_len, generator=torch.Generator().manual_seed(10**6 + seed))


def held_out_floor(p: float, q: float, seed: int, settings: WeightTyingSettings) -> float:
    """The true kernel's expected loss on the cell's held-out sequences: the entropy rate up to their sampling."""
    chain = switching_chain(p, q)
    x = held_out_sequences(chain, seed, settings)
    truth = torch.zeros(*x.shape, 2, dtype=torch.float64)
    truth[:, :-1] = chain.log_prob_next(x)
    return chain.expected_loss(x, truth)


def train_switching_cell(
    p: float,
    q: float,
    tied: bool,
    seed: int,
    settings: WeightTyingSettings,
    optimizer: str = "sgd",
    log: Callable[[str], None] | None = None,
    n_layers: int = 1,
) -> dict:
    """Train one binary model of ``n_layers`` on P(p, q); return its curve, final loss and mean prediction
    P(1 | x_n = x)."""
    chain = switching_chain(p, q)
    torch.manual_seed(seed)
    config = BinaryTransformerConfig(d_model=settings.d_model, n_layers=n_layers, tie_weights=tied,
                                     max_positions=settings.seq_len)  # fmt: skip
    model = BinaryTransformer(config)
    held_out = held_out_sequences(chain, seed, settings)

    def evaluate() -> float:
        return chain.expected_loss(held_out, model.next_symbol_log_probs(held_out))

    def loss_on_batch(x: torch.Tensor) -> torch.Tensor:
        return model(x, labels=x).loss

    fit = fit_on_stream(
        model, loss_on_batch, lambda g: chain.sample(settings.batch_size, settings.seq_len, generator=g), evaluate,
        steps=settings.steps, lr=settings.lr if optimizer == "sgd" else ADAMW_LR, seed=seed, optimizer=optimizer,
        eval_every=settings.eval_every, log=log, label=f"p={p} q={q} {_label_of(tied, optimizer, seed, n_layers)}",
        plateau=plateau_from(settings.plateau_patience, settings.plateau_delta),
    )  # fmt: skip
    model.eval()
    with torch.no_grad():
        probability_one = model.next_symbol_log_probs(held_out)[..., 1].exp()
    return {
        "p": p, "q": q, "tied": tied, "seed": seed, "optimizer": optimizer, "n_layers": n_layers,
        "steps": fit.steps, "losses": fit.evaluations, "final_loss": fit.evaluations[-1],
        "p1_given_0": float(probability_one[held_out == 0].mean()),
        "p1_given_1": float(probability_one[held_out == 1].mean()),
        "entropy_rate": chain.entropy_rate(), "unigram_entropy": chain.marginal_entropy(),
        "seconds": fit.seconds, "stopped_early": fit.stopped_early,
    }  # fmt: skip


def verdict(cell: dict) -> str:
    """Which reference the final loss reached: 'entropy rate', 'unigram H(π)' or 'neither'."""
    if abs(cell["final_loss"] - cell["entropy_rate"]) <= TOLERANCE:
        return "entropy rate"
    if abs(cell["final_loss"] - cell["unigram_entropy"]) <= TOLERANCE:
        return "unigram H(π)"
    return "neither"


def _label_of(tied: bool, optimizer: str, seed: int, n_layers: int) -> str:
    """A cell's name in logs and legends; the layer count only where it is not the talk's one."""
    layers = f" {n_layers} layers" if n_layers != 1 else ""
    return f"{'tied' if tied else 'untied'}{layers} {optimizer} s{seed}"


def _label(cell: dict) -> str:
    return _label_of(cell["tied"], cell["optimizer"], cell["seed"], cell.get("n_layers", 1))


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else WeightTyingSettings(), overrides, NAME)
    plateau_from(settings.plateau_patience, settings.plateau_delta)  # checked before anything is written
    check_chains(settings.chains, NAME)
    if (low := min(settings.depths)) < 1:
        raise ValueError(f"{NAME}.depths: {low} must be >= 1")
    chains, optimizers, depths = settings.chains, settings.optimizers, settings.depths
    for optimizer in optimizers:
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"{NAME}.optimizers: {optimizer!r} is not one of {OPTIMIZERS}")
    seeds = seeds if seeds is not None else ((0,) if quick else (0, 1, 2))
    title = "Weight tying on switching chains (canonical single-layer binary model)"
    report = ExperimentReport(out_dir, title, log, settings=asdict(settings))
    _introduction(report, settings)
    cells = []
    report.expect_cells(len(chains) * len(optimizers) * len(depths) * 2 * len(seeds))
    for p, q in chains:
        for optimizer in optimizers:
            # the grid's axes, and lr for AdamW (its cells train at ADAMW_LR)
            axes = ("chains", "optimizers", "depths", *(("lr",) if optimizer != "sgd" else ()))
            depends_on = cell_settings(settings, axes)
            for n_layers in depths:
                layers = f"_layers={n_layers}" if n_layers != 1 else ""  # one layer: the keys cells had before depths
                for tied in (True, False):
                    for seed in seeds:
                        key = f"p={p}_q={q}_{'tied' if tied else 'untied'}{layers}_{optimizer}_seed={seed}"
                        train = partial(train_switching_cell, p, q, tied, seed, settings, optimizer, log,
                                        n_layers=n_layers)  # fmt: skip
                        cells.append(report.cached(key, train, depends_on=depends_on))
    floors = {(p, q, seed): held_out_floor(p, q, seed, settings) for p, q in settings.chains for seed in seeds}
    _tables(report, cells, floors)
    _loss_figure(report, cells, chains)
    report.results = {"settings": asdict(settings), "adamw_lr": ADAMW_LR, "tolerance": TOLERANCE, "cells": cells,
                      "true_kernel_losses": [{"p": p, "q": q, "seed": seed, "loss": loss}
                                             for (p, q, seed), loss in floors.items()]}  # fmt: skip
    return report.write()


def _introduction(report: ExperimentReport, settings: WeightTyingSettings) -> None:
    """The report's opening paragraph: the model, the training and what counts as reaching a reference."""
    report.text(
        f"Model: x_n·e + p_n, one head, ReLU MLP, logit = <a, z_n> + b, BCE; d = {settings.d_model}; "
        f"{', '.join(map(str, settings.depths))} attention + MLP layer(s), no LayerNorm. "
        f"Training: {settings.steps} steps of fresh batches of {settings.batch_size} × T = {settings.seq_len}, "
        f"SGD at lr {settings.lr} (the gradient flow of the theory) and, in the full run, AdamW at lr {ADAMW_LR}. "
        f"Held-out loss: exact expected cross-entropy on {settings.eval_batch} held-out sequences. A final loss "
        f"within {TOLERANCE} nats of a reference counts as reaching it."
        + (f" **Quick mode**: a cell stops once {settings.plateau_patience} evaluations in a row (every "
           f"{settings.eval_every} steps) improve its held-out loss by less than {settings.plateau_delta} nats; the "
           "*steps* column says where it stopped." if settings.plateau_patience else "")
    )


def _tables(report: ExperimentReport, cells: list[dict], floors: dict[tuple, float]) -> None:
    """The results table (final loss against each reference, ``floors`` the true kernel's held-out loss per (p, q,
    seed), predicted against true P(1 | x)) and the closed-form reference values."""
    rows = [
        [
            cell["p"], cell["q"], round(cell["p"] + cell["q"], 2), "tied" if cell["tied"] else "untied",
            cell.get("n_layers", 1), cell["optimizer"], cell["seed"], cell["steps"][-1], cell["final_loss"],
            cell["final_loss"] - floors[(cell["p"], cell["q"], cell["seed"])],
            cell["final_loss"] - cell["entropy_rate"], cell["final_loss"] - cell["unigram_entropy"],
            cell["p1_given_0"], cell["p"], cell["p1_given_1"],
            round(1 - cell["q"], 10), verdict(cell), round(cell["seconds"]),
        ]
        for cell in cells
    ]  # fmt: skip
    report.table(
        ["p", "q", "p+q", "weights", "layers", "optimizer", "seed", "steps", "final loss", "− true kernel",
         "− entropy rate", "− H(π)", "P(1|0)", "true", "P(1|1)", "true", "reached", "seconds"],
        rows, caption="Final held-out loss (nats); its distance to the true kernel's loss on the same held-out "
        "sequences, to the entropy rate and to H(π); the mean predicted P(1 | x_n = x) against the chain's.",
    )  # fmt: skip
    references = sorted({(cell["p"], cell["q"], cell["entropy_rate"], cell["unigram_entropy"]) for cell in cells})
    report.table(
        ["p", "q", "entropy rate", "H(π)", "π₁"],
        [[p, q, rate, unigram, p / (p + q)] for p, q, rate, unigram in references],
        caption="Reference values (closed form).",
    )


def _loss_figure(report: ExperimentReport, cells: list[dict], chains: tuple) -> None:
    """Held-out loss curves of every cell, one panel per chain, with the entropy rate and H(π)."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel, plot_panels

    panels = []
    for p, q in chains:
        chain_cells = [cell for cell in cells if (cell["p"], cell["q"]) == (p, q)]
        curves = {_label(cell): (cell["steps"], cell["losses"]) for cell in chain_cells}
        references = {"entropy rate": chain_cells[0]["entropy_rate"], "H(π)": chain_cells[0]["unigram_entropy"]}
        panels.append(Panel(f"p={p}, q={q} (p+q={p + q:.1f})", curves, references))
    figure = plot_panels(panels, report.out_dir / "loss_curves.png", "step", "held-out loss (nats)")
    report.figure(figure, "Held-out loss during training, with the entropy rate (dashed) and H(π) (dotted) as black "
                          "lines")  # fmt: skip
