"""The ``position-biases`` figures: each kind's distance profile (attention mass by lag) as one heatmap per
hidden-order chain, and the loss above the entropy rate as the evaluation length grows past the training length."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from markovformer.plots.saving import new_figure, save_figure


@dataclass(frozen=True)
class ProfilePanel:
    """One heatmap: ``rows`` {kind label: attention mass at lags 0..L}; ``needed`` lags framed."""

    title: str
    rows: dict[str, Sequence[float]]
    needed: tuple[int, ...] = ()


def plot_distance_profiles(panels: Sequence[ProfilePanel], out: Path) -> Path:
    """Heatmaps side by side, kinds down, attention lags across, each cell its mass (0..1, annotated)."""
    if not panels:
        raise ValueError("plot_distance_profiles needs at least one panel")
    rows = max(len(panel.rows) for panel in panels)
    figure = new_figure(1.2 + 0.55 * sum(len(next(iter(p.rows.values()))) for p in panels) + 2.2 * len(panels),
                        1.2 + 0.32 * rows)  # fmt: skip
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for index, (ax, panel) in enumerate(zip(axes, panels, strict=True)):
        values = np.array([list(v) for v in panel.rows.values()], dtype=float)
        image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis", aspect="auto")
        for (row, lag), value in np.ndenumerate(values):
            ax.text(lag, row, f"{value:.2f}", ha="center", va="center", fontsize=6,
                    color="black" if value > 0.6 else "white")  # fmt: skip
        for lag in panel.needed:
            ax.add_patch(_frame(lag, len(values)))
        ax.set_xticks(range(values.shape[1]))
        ax.set_yticks(range(len(values)))
        ax.set_yticklabels(list(panel.rows) if index == 0 else [""] * len(values), fontsize=8)
        ax.set_xlabel("attention lag (key this many tokens before the query)")
        ax.set_title(panel.title, fontsize=10)
    figure.colorbar(image, ax=list(axes), shrink=0.8, label="attention mass")
    return save_figure(figure, out)


def _frame(lag: int, rows: int):
    from matplotlib.patches import Rectangle  # deferred: only this figure draws frames

    return Rectangle((lag - 0.5, -0.5), 1.0, rows, fill=False, edgecolor="red", lw=1.5)


def plot_extrapolation(curves: dict[str, dict[str, Sequence[float]]], multiples: Sequence[int], out: Path) -> Path:
    """One panel per hidden-order chain: {chain: {kind label: loss above the entropy rate at 1, m1, m2.. x T}};
    ``multiples`` strictly increasing, since each line joins its points in the order given."""
    if not curves:
        raise ValueError("plot_extrapolation needs at least one chain")
    if list(multiples) != sorted(set(multiples)):
        raise ValueError(f"plot_extrapolation: multiples {list(multiples)} must be strictly increasing")
    figure = new_figure(4.8 * len(curves), 3.8)
    axes = figure.subplots(1, len(curves), squeeze=False, sharey=True)[0]
    for ax, (title, series) in zip(axes, curves.items(), strict=True):
        for index, (label, values) in enumerate(series.items()):
            ax.plot(multiples, values, marker="o", label=label, color=f"C{index % 10}",
                    ls="-" if index < 10 else "--")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(multiples), [f"{m}T" if m > 1 else "T" for m in multiples])
        ax.set_xlabel("evaluation length")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test loss − entropy rate (nats)")
    axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return save_figure(figure, out)


__all__ = ["ProfilePanel", "plot_distance_profiles", "plot_extrapolation"]
