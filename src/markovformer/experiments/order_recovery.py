"""``order-recovery``: does the Markovian Transformer's learned lag structure reveal a chain's true order?

None of the source papers checked this. The Markovian Transformer (local scope, token-wise order gates) is trained
on fixed chains of known order k = 1..4 (``lagged_chain`` with lags 1..k: every lag up to k matters) and on
in-context binary chains of order 2 (a fresh kernel per sequence); a softmax Transformer of the same size is the
baseline. A local window cannot count transitions over the whole sequence, which in-context estimation needs, so
the in-context source also trains a global-scope Markovian Transformer. After training, each lag's *effective
bias* — the gate probability averaged over held-out tokens times the learned transition strength, i.e. the mean
logit added to that lag's score — is read per layer and head.

The position predicting x_{t+1} sits at x_t, so a chain of order k needs attention lags 0..k−1 (source lag l is
attention lag l − 1; lag 0, the token itself, never gets a bias). The recovered order is 1 + the largest attention
lag whose effective bias (maximum over layers and heads) reaches ``RECOVERY_FRACTION`` of the model's largest one,
or 1 when no bias exceeds ``MIN_BIAS``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F

from markovformer.experiments.fitting import fit_on_stream, next_token_loss, plateau_from, steps_to_reach
from markovformer.experiments.report import ExperimentReport, cell_settings, revisions_of, seed_reference
from markovformer.experiments.settings import configure
from markovformer.markov import RandomChainSampler, add_beta_loss, icl_oracle_loss, lagged_chain
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM

NAME = "order-recovery"
SUMMARY = "do the Markovian Transformer's gates and strengths recover a chain's true order? (vs softmax baseline)"
RECOVERY_FRACTION = 0.25
MIN_BIAS = 0.5  # logit units
CONVERGED = 0.02  # nats above the floor that count as converged


@dataclass(frozen=True)
class RecoverySettings:
    MAY_BE_ZERO: ClassVar[tuple[str, ...]] = ("warmup_steps", "plateau_delta", "plateau_patience", "strength")
    sources: tuple[str, ...] = ("fixed-1", "fixed-2", "fixed-3", "fixed-4", "icl-2")  # fixed-k or icl-k
    num_symbols: int = 8
    strength: float = 1.0
    max_order: int = 6
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    seq_len: int = 128
    batch_size: int = 32
    steps: int = 1000
    lr: float = 3e-3
    warmup_steps: int = 100
    eval_every: int = 50
    eval_batch: int = 128
    plateau_patience: int = 0  # > 0: stop a cell once this many evaluations improved less than plateau_delta
    plateau_delta: float = 2e-3  # nats


# Quick: orders 1 and 3 of the fixed chains (the recovered order must tell them apart), stopped on a plateau.
QUICK = RecoverySettings(sources=("fixed-1", "fixed-3"), steps=400, eval_every=25, eval_batch=64, plateau_patience=4)


def _model(kind: str, vocab_size: int, settings: RecoverySettings) -> MarkovianTransformerForCausalLM:
    shared = dict(vocab_size=vocab_size, d_model=settings.d_model, n_layers=settings.n_layers,
                  n_heads=settings.n_heads)  # fmt: skip
    if kind.startswith("markov"):
        scope = "global" if kind == "markov-global" else "local"
        return MarkovianTransformerForCausalLM(
            MarkovianTransformerConfig(**shared, attention="markov", scope=scope, max_order=settings.max_order)
        )
    return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**shared, attention="softmax", scope="global"))


def effective_lag_bias(model: MarkovianTransformerForCausalLM, x: torch.Tensor) -> torch.Tensor:
    """(layers, H, K) mean past-lag bias: gate probability averaged over tokens times the transition strength."""
    with torch.no_grad():
        gates = model(x, return_gates=True).gates
    strengths = model.model.transition_strengths()
    per_layer = []
    for layer_gates, layer_strengths in zip(gates, strengths, strict=True):
        strength = layer_strengths["past"]  # (H, K)
        gate = layer_gates["past"][..., : strength.shape[-1]].mean(dim=(0, 2))  # (H, K)
        per_layer.append(gate * strength)
    return torch.stack(per_layer)


def recovered_order(bias: torch.Tensor) -> int:
    """1 + the largest attention lag whose max-over-layers-and-heads bias reaches RECOVERY_FRACTION of the largest."""
    per_lag = bias.amax(dim=(0, 1))  # (K,): attention lags 1..K
    if float(per_lag.max()) < MIN_BIAS:
        return 1
    used = torch.nonzero(per_lag >= RECOVERY_FRACTION * per_lag.max()).flatten()
    return 1 + int(used.max()) + 1


def train_recovery_cell(source: str, kind: str, seed: int, settings: RecoverySettings, log=None) -> dict:
    """source: "fixed-k" (k = 1..) or "icl-k"; kind: "markov" (local scope), "markov-global" or "softmax"."""
    family, order = source.split("-")
    order = int(order)
    eval_generator = torch.Generator().manual_seed(10**6 + seed)
    if family == "fixed":
        chain = lagged_chain(settings.num_symbols, tuple(range(1, order + 1)), strength=settings.strength,
                             generator=torch.Generator().manual_seed(1000 + order))  # fmt: skip
        vocab_size = settings.num_symbols
        held_out = chain.sample(settings.eval_batch, settings.seq_len, generator=eval_generator)
        floor, floor_name = chain.entropy_rate(), "entropy rate"

        def sample(g: torch.Generator) -> torch.Tensor:
            return chain.sample(settings.batch_size, settings.seq_len, generator=g)
    else:
        sampler = RandomChainSampler(order, 2, 1.0, per_sequence=True)
        vocab_size = 2
        held_out, kernels = sampler.sample(settings.eval_batch, settings.seq_len, eval_generator)
        floor, floor_name = add_beta_loss(held_out, order, 2, 1.0), "Bayes add-1"

        def sample(g: torch.Generator) -> torch.Tensor:
            return sampler.sample(settings.batch_size, settings.seq_len, g)[0]

    torch.manual_seed(seed)
    model = _model(kind, vocab_size, settings)

    def evaluate() -> float:
        if family == "fixed":
            return chain.expected_loss(held_out, F.log_softmax(model(held_out).logits.double(), dim=-1))
        return float(next_token_loss(model, held_out, order))

    fit = fit_on_stream(
        model, lambda x: model(x, labels=x).loss, sample, evaluate, steps=settings.steps, lr=settings.lr, seed=seed,
        warmup_steps=settings.warmup_steps, eval_every=settings.eval_every, log=log, label=f"{source} {kind}",
        plateau=plateau_from(settings.plateau_patience, settings.plateau_delta),
    )  # fmt: skip
    cell = {
        "source": source, "kind": kind, "seed": seed, "true_order": order, "floor": floor, "floor_name": floor_name,
        "steps": fit.steps, "losses": fit.evaluations, "final_loss": fit.evaluations[-1],
        "steps_to_converge": steps_to_reach(fit, floor, CONVERGED), "seconds": fit.seconds,
    }  # fmt: skip
    if family == "icl":
        cell["oracle"] = icl_oracle_loss(held_out, kernels)
    if kind.startswith("markov"):
        model.eval()
        bias = effective_lag_bias(model, held_out)
        cell["effective_bias"] = bias.tolist()
        cell["recovered_order"] = recovered_order(bias)
    return cell


def _kinds(source: str) -> tuple[str, ...]:
    """The models trained on a source: in-context sources also get a global-scope Markovian Transformer."""
    return ("markov", "markov-global", "softmax") if source.startswith("icl") else ("markov", "softmax")


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else RecoverySettings(), overrides, NAME)
    plateau_from(settings.plateau_patience, settings.plateau_delta)  # checked before anything is written
    sources = settings.sources
    _check_sources(sources, settings)
    seeds = seeds or (0,)
    title = "Order recovery: the Markovian Transformer's lags against the true order"
    report = ExperimentReport(out_dir, title, log, settings=asdict(settings))
    _introduction(report, settings)
    cells = []
    report.expect_cells(sum(len(_kinds(source)) for source in sources) * len(seeds))
    for source in sources:
        kinds = _kinds(source)
        for kind in kinds:
            for seed in seeds:
                key = f"{source}_{kind}_seed={seed}"
                trains = {"attention": kind.split("-")[0]}  # markov-global is markov attention in global scope
                depends_on = {**cell_settings(settings, _not_read(source, kind)), **revisions_of(trains)}
                cells.append(report.cached(key, partial(train_recovery_cell, source, kind, seed, settings, log),
                                           depends_on=depends_on))
    _results_table(report, cells)
    _effective_bias(report, cells, settings)
    _loss_figure(report, cells, sources)
    report.results = {"settings": asdict(settings), "recovery_fraction": RECOVERY_FRACTION, "min_bias": MIN_BIAS,
                      "converged_within": CONVERGED, "cells": cells}  # fmt: skip
    return report.write()


def _not_read(source: str, kind: str) -> tuple[str, ...]:
    """The settings a cell of ``source`` and ``kind`` does not depend on: the grid's list of sources, the fixed
    chains' alphabet and strength on an in-context source (binary, rows ~ U[0, 1]), and the lags of a softmax model."""
    unread = ("sources", *(("num_symbols", "strength") if source.startswith("icl") else ()))
    return unread + (() if kind.startswith("markov") else ("max_order",))


def _check_sources(sources: tuple[str, ...], settings: RecoverySettings) -> None:
    """ValueError naming the setting, before any cell trains: a source's name, and a sequence too short for the
    highest order (the held-out loss needs T > k: it failed after the lower orders' cells had trained)."""
    for source in sources:
        family, _, order = source.partition("-")
        if family not in ("fixed", "icl") or not order.isdigit() or int(order) < 1:
            raise ValueError(f"{NAME}.sources: {source!r} must be 'fixed-K' or 'icl-K' with an order K >= 1")
    highest = max(int(source.partition("-")[2]) for source in sources)
    if settings.seq_len <= highest:
        raise ValueError(f"{NAME}.seq_len={settings.seq_len}: must exceed the highest source order {highest} (the "
                         "held-out loss scores the symbols after the first k)")  # fmt: skip


def _introduction(report: ExperimentReport, settings: RecoverySettings) -> None:
    """The report's opening paragraph: the sources, both models and the training set-up."""
    report.text(
        f"Fixed chains: `lagged_chain` over {settings.num_symbols} symbols with lags 1..k (strength "
        f"{settings.strength}). In-context (icl-k): binary order-k chains with a fresh kernel per sequence (rows ~ "
        f"U[0, 1]). "
        f"Both models: d = {settings.d_model}, {settings.n_layers} layers, {settings.n_heads} heads, rotary positions, "
        f"SwiGLU; Markovian: markov attention, local window {settings.max_order}, K = {settings.max_order} lags, "
        f"linear token gates with a null slot (on the in-context sources also in global scope, every key: a local "
        f"window cannot count transitions over the sequence); softmax: global causal softmax attention. AdamW lr "
        f"{settings.lr}, {settings.steps} steps of {settings.batch_size} × T = {settings.seq_len}. Converged = "
        f"within {CONVERGED} nats of the floor. Recovered order: 1 + the largest attention lag whose effective bias "
        f"(gate probability × transition strength, maximum over layers and heads) reaches {RECOVERY_FRACTION:.0%} "
        f"of the model's largest, or 1 when none exceeds {MIN_BIAS} (attention lag l − 1 reads source lag l)."
    )


def _results_table(report: ExperimentReport, cells: list[dict]) -> None:
    """Final loss against the floor, recovered order and steps to converge, one row per cell."""
    rows = [
        [c["source"], c["kind"], c["seed"], c["true_order"], c.get("recovered_order", "—"), c["floor_name"],
         c["floor"], c["final_loss"], c["final_loss"] - c["floor"], c["steps_to_converge"] or "—", round(c["seconds"])]
        for c in cells
    ]  # fmt: skip
    report.table(
        ["source", "model", "seed", "true order", "recovered", "floor", "floor value", "final loss", "− floor",
         "steps to converge", "s"],
        rows, caption="Final held-out loss (nats; fixed chains: exact expected loss), steps to converge, wall time.",
    )  # fmt: skip


def _effective_bias(report: ExperimentReport, cells: list[dict], settings: RecoverySettings) -> None:
    """The Markovian cells' effective bias per attention lag: a table and, per source, a bar figure."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import LagPanel, plot_lag_bars

    lag_columns = [f"lag {lag}" for lag in range(1, settings.max_order + 1)]
    profile_rows = []
    for cell in cells:
        if "effective_bias" not in cell:
            continue
        bias = torch.tensor(cell["effective_bias"])
        for layer in range(bias.shape[0]):
            profile_rows.append([cell["source"], cell["kind"], cell["seed"], layer, *bias[layer].amax(0).tolist()])
    report.table(
        ["source", "model", "seed", "layer", *lag_columns], profile_rows,
        caption="Effective bias per attention lag (max over heads): mean gate × strength, logit units. A chain of "
        "order k needs attention lags 0..k−1.",
    )  # fmt: skip
    bias_panels = []
    for source in settings.sources:
        biased = [c for c in cells if c["source"] == source and "effective_bias" in c]
        if not biased:
            continue
        needed = tuple(range(1, biased[0]["true_order"]))  # a chain of order k needs attention lags 0..k-1
        series = {f"{c['kind']} layer {layer} s{c['seed']}": torch.tensor(c["effective_bias"])[layer].amax(0).tolist()
                  for c in biased for layer in range(len(c["effective_bias"]))}  # fmt: skip
        bias_panels.append(LagPanel(f"{source} (true order {biased[0]['true_order']})", series, needed))
    if bias_panels:
        figure = plot_lag_bars(bias_panels, report.out_dir / "effective_bias.png", "effective bias (logit units)",
                               threshold=(f"MIN_BIAS = {MIN_BIAS:g}: all bars below → order 1", MIN_BIAS))  # fmt: skip
        report.figure(figure, "Effective bias per attention lag (mean gate × strength, max over heads) of each "
                      "Markovian layer; shaded: the lags 1..k−1 a chain of order k needs besides lag 0 (the token "
                      f"itself, which never gets a bias). Red dashed line: MIN_BIAS = {MIN_BIAS:g}. When no lag's "
                      "bias (max over layers and heads) reaches it, every lag counts as unused and the recovered "
                      "order is 1; otherwise the order is 1 + the largest lag whose bias reaches "
                      f"{RECOVERY_FRACTION:g} of the largest")  # fmt: skip


def _loss_figure(report: ExperimentReport, cells: list[dict], sources: tuple[str, ...]) -> None:
    """Held-out loss curves of every cell, one panel per source, with the source's floor."""
    # deferred: plots import matplotlib
    from markovformer.plots.experiments import Panel, plot_panels

    panels = []
    for source in sources:
        source_cells = [c for c in cells if c["source"] == source]
        curves = {f"{c['kind']} s{c['seed']}": (c["steps"], c["losses"]) for c in source_cells}
        panels.append(Panel(source, curves, seed_reference(source_cells, "floor", source_cells[0]["floor_name"])))
    figure = plot_panels(panels, report.out_dir / "loss_curves.png", "step", "held-out loss (nats)")
    report.figure(figure, "Held-out loss of the Markovian and softmax Transformers, with each source's floor (an "
                  "in-context source's Bayes add-1 is computed on each seed's held-out sequences: with several seeds, "
                  "the line is their mean; the table has each)")  # fmt: skip
