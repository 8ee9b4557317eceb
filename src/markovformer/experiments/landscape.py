"""``landscape``: the reduced three-parameter model (e, w, b), logit(x) = e²(1 + 2w|w|)x + b − e²/2,
in closed form — no training noise.

For p + q < 1 and p + q > 1: the profiled loss surface min_b L(e, w, b) over (w, e), gradient-flow trajectories
from small and from larger initialisations, the saddle at (w, e) = (−1/√2, 0), and the basin boundary
E(e, w) = E_s derived from the conserved energy (``markov.reduced_model``). The tables say where each start ended,
whether the energy argument predicted it, and where small initialisations end for each chain.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch

from markovformer.experiments.report import ExperimentReport, cell_settings
from markovformer.experiments.settings import check_chains, configure, single_seed
from markovformer.markov import (
    basin_boundary,
    energy,
    gradient_flow,
    optimal_bias,
    reaches_global_minimum,
    reduced_loss,
    saddle_energy,
    saddle_point,
    switching_chain,
)

NAME = "landscape"
SUMMARY = "reduced (e, w, b) model: loss surface, gradient flows, saddle, energy and basin boundary"
TOLERANCE = 1e-3
WINDOW = ((-2.0, 1.5), (-1.8, 1.8))  # (w, e) ranges the figure shows at least: saddle, minima, the small starts


@dataclass(frozen=True)
class LandscapeSettings:
    chains: tuple[tuple[float, float], ...] = ((0.2, 0.3), (0.7, 0.9))  # (p, q)
    starts: int = 24  # per initialisation scale
    # Euler step and horizon: small enough that no step jumps e across 0 (the continuous flow never does)
    lr: float = 0.1
    steps: int = 10_000


QUICK = LandscapeSettings(starts=8)


def _starts(seed: int, count: int, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    e0, w0 = (torch.randn(2, count, generator=generator, dtype=torch.float64) * scale).unbind(0)
    return e0, w0


def _where(loss: float, rate: float, unigram: float) -> str:
    if abs(loss - rate) < TOLERANCE:
        return "global minimum"
    return "unigram (e = 0)" if abs(loss - unigram) < TOLERANCE else "not converged"


def flow_cell(p: float, q: float, seed: int, settings: LandscapeSettings) -> dict:
    """Profiled and ordinary flows from small (N(0, 0.1²)) and larger (N(0, 0.8²)) starts on P(p, q)."""
    chain = switching_chain(p, q)
    rate, unigram = chain.entropy_rate(), chain.marginal_entropy()
    count, steps, lr = settings.starts, settings.steps, settings.lr
    out: dict = {"p": p, "q": q, "seed": seed, "entropy_rate": rate, "unigram_entropy": unigram, "starts": {}}
    for kind, scale in (("small", 0.1), ("large", 0.8)):
        e0, w0 = _starts(seed, count, scale)
        profiled = gradient_flow(e0, w0, 0.0, p, q, steps=steps, lr=lr, profile_bias=True)
        free = gradient_flow(e0, w0, 0.0, p, q, steps=steps, lr=lr)
        predicted = reaches_global_minimum(e0, w0, p, q)
        starts = []
        for i in range(count):
            final_profiled, final_free = profiled[-1, i], free[-1, i]
            path_energy = energy(profiled[:, i, 0], profiled[:, i, 1])
            starts.append({
                "e0": float(e0[i]), "w0": float(w0[i]), "energy": float(path_energy[0]),
                "predicted": "global minimum" if predicted[i] else "unigram (e = 0)",
                "profiled_end": _where(float(reduced_loss(*final_profiled, p, q)), rate, unigram),
                "free_end": _where(float(reduced_loss(*final_free, p, q)), rate, unigram),
                "free_loss": float(reduced_loss(*final_free, p, q)),
                "energy_drift": float((path_energy - path_energy[0]).abs().max()),
                "path": profiled[:: max(1, steps // 200), i, :2].tolist(),
            })  # fmt: skip
        out["starts"][kind] = starts
    return out


def plot_window(paths: list[np.ndarray], margin: float = 0.05) -> tuple[tuple[float, float], tuple[float, float]]:
    """The (w, e) window of the landscape figure, ((w_low, w_high), (e_low, e_high)): ``WINDOW`` (the saddle, both
    minima and the small starts) widened to hold every point of every drawn ``paths`` (each (steps, 2), columns
    (w, e): start, path and end), with ``margin`` of the window's width or height beyond the outermost point. A
    fixed window left out large starts (σ = 0.8) beyond it, so the figure showed fewer flows than its table counts."""
    window = np.asarray(WINDOW)  # rows w, e; columns low, high
    points = np.concatenate([window.T, *(path[np.isfinite(path).all(axis=1)] for path in paths)])
    pad = margin * (points.max(axis=0) - points.min(axis=0))
    low = np.minimum(window[:, 0], points.min(axis=0) - pad)
    high = np.maximum(window[:, 1], points.max(axis=0) + pad)
    return (float(low[0]), float(high[0])), (float(low[1]), float(high[1]))


def _surface(p: float, q: float, w_grid: np.ndarray, e_grid: np.ndarray) -> np.ndarray:
    w, e = torch.meshgrid(torch.as_tensor(w_grid), torch.as_tensor(e_grid), indexing="xy")
    return reduced_loss(e, w, optimal_bias(e, w, p, q), p, q).numpy()


def run(
    out_dir: Path, *, quick: bool, seeds: tuple[int, ...] | None, overrides: dict, log: Callable[[str], None]
) -> Path:
    settings = configure(QUICK if quick else LandscapeSettings(), overrides, NAME)
    seed = single_seed(seeds, NAME)
    check_chains(settings.chains, NAME)
    # deferred, after the settings' checks: plots import matplotlib (0.4 s)
    from markovformer.plots.experiments import LandscapePanel, plot_landscapes
    report = ExperimentReport(out_dir, "The reduced model's loss landscape (e, w, b)", log, settings=asdict(settings))
    saddle_w, saddle_e = saddle_point()
    report.text(
        "logit(x) = e²(1 + 2w|w|)x + b − e²/2, exact expected BCE under the stationary switching chain. Flows are "
        f"explicit Euler, lr {settings.lr}, {settings.steps} steps; 'profiled' keeps b at its optimum (the flow that "
        "conserves E(e, w) = e² − w² − sign(w) log|w|), 'free' moves b by gradient too. Saddle (w, e) = "
        f"({saddle_w:.4f}, {saddle_e}); E_s = {saddle_energy():.4f}. A start ends at a minimum when its loss is within "
        f"{TOLERANCE} of it."
    )
    cells = []
    report.expect_cells(len(settings.chains))
    for p, q in settings.chains:
        cells.append(report.cached(f"p={p}_q={q}_seed={seed}", partial(flow_cell, p, q, seed, settings),
                                   depends_on=cell_settings(settings, ("chains",))))
    summary_rows, agreement_rows = [], []
    for cell in cells:
        for kind, starts in cell["starts"].items():
            for flow in ("profiled_end", "free_end"):
                ends = [start[flow] for start in starts]
                summary_rows.append([
                    cell["p"], cell["q"], f"{kind} (σ = {0.1 if kind == 'small' else 0.8})", flow.split("_")[0],
                    len(starts), ends.count("global minimum"), ends.count("unigram (e = 0)"),
                    ends.count("not converged"),
                ])  # fmt: skip
            agree = sum(start["predicted"] == start["profiled_end"] for start in starts)
            drift = max(start["energy_drift"] for start in starts)
            agreement_rows.append([cell["p"], cell["q"], kind, len(starts), agree, drift])
    report.table(
        ["p", "q", "initialisation", "flow", "starts", "→ global minimum", "→ unigram", "not converged"],
        summary_rows, caption=f"Where the flows end (seed {seed}). Expected: small initialisations reach the global "
        "minimum when p + q < 1 and the unigram minimum when p + q > 1.",
    )  # fmt: skip
    report.table(
        ["p", "q", "initialisation", "starts", "energy prediction correct", "max energy drift along a path"],
        agreement_rows, caption="The basin predicted from the conserved energy against where the profiled flow ended.",
    )  # fmt: skip
    reference_rows = [[cell["p"], cell["q"], cell["entropy_rate"], cell["unigram_entropy"]] for cell in cells]
    report.table(["p", "q", "entropy rate (global minimum)", "H(π) (unigram minimum)"], reference_rows)
    paths = [np.asarray(start["path"])[:, ::-1] for cell in cells for kind in cell["starts"].values()
             for start in kind]  # fmt: skip
    (w_low, w_high), (e_low, e_high) = plot_window(paths)
    w_grid, e_grid = np.linspace(w_low, w_high, 141), np.linspace(e_low, e_high, 145)
    boundary_w = np.linspace(w_low, -0.02, 200)
    panels = []
    for cell in cells:
        p, q = cell["p"], cell["q"]
        starts = cell["starts"]["small"] + cell["starts"]["large"]
        panels.append(LandscapePanel(
            title=f"p={p}, q={q} (p+q={p + q:.1f})", w_grid=w_grid, e_grid=e_grid, loss=_surface(p, q, w_grid, e_grid),
            trajectories=[np.asarray(start["path"])[:, ::-1] for start in starts],
            reached_global=[start["profiled_end"] == "global minimum" for start in starts],
            boundary=(boundary_w, basin_boundary(torch.as_tensor(boundary_w)).numpy()),
        ))  # fmt: skip
    figure = plot_landscapes(panels, (saddle_w, saddle_e), report.out_dir / "landscape.png")
    report.figure(figure, "Profiled loss over (w, e); every start's profiled flow, from its start (dot) to its end "
                  "(square; green: global minimum, red: unigram line), the saddle and the basin boundary "
                  "E(e, w) = E_s (dashed). The window is widened from w in [-2, 1.5], e in [-1.8, 1.8] to hold every "
                  "flow")  # fmt: skip
    report.results = {"settings": asdict(settings), "saddle": [saddle_w, saddle_e], "saddle_energy": saddle_energy(),
                      "cells": cells}  # fmt: skip
    return report.write()
