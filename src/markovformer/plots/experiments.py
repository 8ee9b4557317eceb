"""Figures of the named experiments: measured curves drawn against their analytic reference values."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from markovformer.plots.saving import new_figure, save_figure

_REFERENCE_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)))


@dataclass
class Panel:
    """One subplot: measured ``curves`` {label: (x, y)} and horizontal ``references`` {label: value}.

    ``apart`` {label: (x, y)}: a measurement that is not a point of its curve's axis (MAT's unbounded order k = ∞),
    drawn as a lone marker in the colour of the curve of the same label, behind a dotted divider and never joined;
    ``tick_labels`` {x: text} names such positions on the x axis. ``y_from_zero``: the y axis starts at 0 (where a
    ratio is the point, e.g. speeds, so that noise never reads as a large effect).
    """

    title: str
    curves: dict[str, tuple[Sequence[float], Sequence[float]]]
    references: dict[str, float] = field(default_factory=dict)
    apart: dict[str, tuple[float, float]] = field(default_factory=dict)
    tick_labels: dict[float, str] = field(default_factory=dict)
    y_from_zero: bool = False
    log_y: bool = False  # values spanning orders of magnitude (16 to 16,384 floats of state)


_SEED_STYLES = ("-", "--", ":", "-.")


def plot_panels(panels: Sequence[Panel], out: Path, xlabel: str, ylabel: str, log_x: bool = False) -> Path:
    """``panels_figure`` saved as a PNG to ``out``."""
    return save_figure(panels_figure(panels, xlabel, ylabel, log_x), out)


def panels_figure(panels: Sequence[Panel], xlabel: str, ylabel: str, log_x: bool = False):
    """Panels side by side (shared y axis), each with its curves and black reference lines (the first dashed, the
    second dotted, then dash-dot; named with their values in the legend). With ``log_x`` the x ticks are the
    measured x values, written plainly (4 and 16, never 4x10^0).

    Curves labelled ``"<group> s<seed>"`` are drawn in their group's colour with one legend entry per group; where a
    panel has several seeds, each seed has its own line style (solid, dashed, dotted, dash-dot), named in the legend
    by grey lines ("seed 0", "seed 1"). A measurement ``apart`` (a star) is named in the legend with its tick label
    ("transparent at ∞"). The legend stands where it covers no point (``legends.place_legend``). ``log_y``: a log y
    axis.
    """
    from matplotlib.lines import Line2D

    from markovformer.plots.legends import place_legend

    if not panels:
        raise ValueError("plot_panels needs at least one panel")
    figure = new_figure(4.2 * len(panels), 3.6)
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        # curves labelled "<group> s<seed>" share their group's colour and one legend entry; seeds differ by style
        colours: dict[str, str] = {}
        seeds = list(dict.fromkeys(_seed(label) for label in panel.curves if _seed(label) is not None))
        styles = {seed: _SEED_STYLES[index % len(_SEED_STYLES)] for index, seed in enumerate(seeds)}
        for label, (x, y) in panel.curves.items():
            group = re.sub(r" s\d+$", "", label)
            first = group not in colours
            colours.setdefault(group, f"C{len(colours) % 10}")
            style = styles.get(_seed(label), "-") if len(seeds) > 1 else "-"
            ax.plot(x, y, label=group if first else None, color=colours[group], linewidth=1.2, alpha=0.85,
                    linestyle=style, marker="o" if len(x) <= 12 else None, markersize=3)  # fmt: skip
        if len(seeds) > 1:
            for seed, style in styles.items():
                ax.add_line(Line2D([], [], color="grey", linestyle=style, linewidth=1.2, label=f"seed {seed}"))
        if panel.apart:
            finite = [x for xs, _ in panel.curves.values() for x in xs]
            divider = (max(finite) + min(x for x, _ in panel.apart.values())) / 2 if finite else None
            if divider is not None:
                ax.axvline(divider, color="grey", linestyle=":", linewidth=1)
            for label, (x, y) in panel.apart.items():
                group = re.sub(r" s\d+$", "", label)
                colours.setdefault(group, f"C{len(colours) % 10}")
                ax.plot([x], [y], linestyle="none", marker="*", markersize=10, color=colours[group],
                        label=f"{group} at {panel.tick_labels.get(x, f'{x:g}')}")  # fmt: skip
        if panel.tick_labels:
            ticks = sorted({float(x) for xs, _ in panel.curves.values() for x in xs} | set(panel.tick_labels))
            ax.set_xticks(ticks, [panel.tick_labels.get(x, f"{x:g}") for x in ticks])
        for index, (label, value) in enumerate(panel.references.items()):
            style = _REFERENCE_STYLES[index % len(_REFERENCE_STYLES)]
            ax.axhline(value, color="black", linestyle=style, linewidth=1, label=f"{label} = {value:.4f}")
        if log_x:
            from matplotlib.ticker import NullLocator

            ax.set_xscale("log")
            xs = sorted({float(x) for xs, _ in panel.curves.values() for x in xs} | set(panel.tick_labels))
            ax.set_xticks(xs, [panel.tick_labels.get(x, f"{x:g}") for x in xs])
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlabel(xlabel)
        if panel.log_y:
            ax.set_yscale("log")
        if panel.y_from_zero:
            ax.set_ylim(bottom=0)
    axes[0].set_ylabel(ylabel)
    for ax in axes:  # once every panel is drawn: the shared y axis has its final limits
        place_legend(ax, fontsize=7)
    return figure


def _seed(label: str) -> int | None:
    """The seed of a curve labelled ``"<group> s<seed>"``; None for another label."""
    found = re.search(r" s(\d+)$", label)
    return int(found.group(1)) if found else None


@dataclass
class LandscapePanel:
    """The reduced model's profiled loss on a (w, e) grid, with gradient-flow trajectories."""

    title: str
    w_grid: np.ndarray  # (W,)
    e_grid: np.ndarray  # (E,)
    loss: np.ndarray  # (E, W): min over b of L(e, w, b)
    trajectories: list[np.ndarray]  # each (steps, 2): columns (w, e)
    reached_global: list[bool]
    boundary: tuple[np.ndarray, np.ndarray] | None = None  # (w, e) points of the basin boundary (e >= 0)


def plot_landscapes(panels: Sequence[LandscapePanel], saddle: tuple[float, float], out: Path) -> Path:
    """``landscapes_figure`` saved as a PNG to ``out``."""
    return save_figure(landscapes_figure(panels, saddle), out)


def _inside_window(trajectory: np.ndarray, w_grid: np.ndarray, e_grid: np.ndarray) -> tuple[np.ndarray, bool]:
    """The part of a (steps, 2) trajectory before it first leaves the plotted (w, e) window, and whether it left."""
    w, e = trajectory[:, 0], trajectory[:, 1]
    inside = (w >= w_grid[0]) & (w <= w_grid[-1]) & (e >= e_grid[0]) & (e <= e_grid[-1])
    if inside.all():
        return trajectory, False
    return trajectory[: int(np.argmin(inside))], True


def landscapes_figure(panels: Sequence[LandscapePanel], saddle: tuple[float, float]):
    """Filled contours of each panel's loss, trajectories (green: reaching the global minimum, red: ending on the
    unigram line e = 0; said in the legend), each from its start (dot) to its end (square), the saddle (black cross)
    and the basin boundary (dashed, mirrored to e < 0). A trajectory that leaves the plotted window is cut where it
    leaves, marked by a triangle."""
    from matplotlib.lines import Line2D

    figure = new_figure(5.2 * len(panels), 5.2)
    axes = figure.subplots(1, len(panels), squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        # the corners of the grid reach losses far above both minima: spread the colours over the lower 70 %
        levels = np.linspace(panel.loss.min(), np.quantile(panel.loss, 0.7), 30)
        filled = ax.contourf(panel.w_grid, panel.e_grid, panel.loss, levels=levels, cmap="viridis", extend="max")
        figure.colorbar(filled, ax=ax, label="loss (nats), b at its optimum")
        cut_any = False
        for whole, reached in zip(panel.trajectories, panel.reached_global, strict=True):
            color = "limegreen" if reached else "red"
            trajectory, cut = _inside_window(np.asarray(whole), panel.w_grid, panel.e_grid)
            if not len(trajectory):
                continue
            cut_any |= cut
            ax.plot(trajectory[:, 0], trajectory[:, 1], color=color, linewidth=1)
            ax.plot(trajectory[0, 0], trajectory[0, 1], "o", color=color, markersize=3)
            ax.plot(trajectory[-1, 0], trajectory[-1, 1], "^" if cut else "s", color=color, markersize=4)
        handles = [Line2D([], [], color=color, label=label) for color, label in (
            ("limegreen", "flow reaching the global minimum"), ("red", "flow ending on the unigram line e = 0"))]
        handles += [Line2D([], [], color="grey", marker=marker, markersize=size, linestyle="none", label=label)
                    for marker, size, label in (("o", 3, "start of a flow"), ("s", 4, "end of a flow"))]  # fmt: skip
        if cut_any:
            handles.append(Line2D([], [], color="grey", marker="^", linestyle="none", label="flow leaves the window"))
        if panel.boundary is not None:
            w, e = panel.boundary
            ax.plot(w, e, "w--", linewidth=1.2, label="basin boundary E(e, w) = E_s")
            ax.plot(w, -e, "w--", linewidth=1.2)
        ax.plot(*saddle, "kx", markersize=9, markeredgewidth=2, label="saddle (-1/√2, 0)")
        ax.set_xlim(panel.w_grid[0], panel.w_grid[-1])
        ax.set_ylim(panel.e_grid[0], panel.e_grid[-1])
        ax.set_xlabel("w")
        ax.set_ylabel("e")
        ax.set_title(panel.title, fontsize=10)
        # below the axes: inside, the box hid flows wherever it stood (the window holds every one of them)
        ax.legend(handles=handles + ax.get_legend_handles_labels()[0], fontsize=7, loc="upper center", ncol=2,
                  bbox_to_anchor=(0.5, -0.14), facecolor="0.8")  # grey: the white boundary line shows
    return figure


@dataclass
class LagPanel:
    """One subplot of per-lag values: ``series`` {label: values at lags 1..K}, ``marked`` lags shaded."""

    title: str
    series: dict[str, Sequence[float]]
    marked: tuple[int, ...] = ()


def plot_lag_bars(panels: Sequence[LagPanel], out: Path, ylabel: str,
                  threshold: tuple[str, float] | None = None) -> Path:  # fmt: skip
    """Grouped bars of per-lag values (one group per lag k = 1..K, one bar per series), panels side by side with a
    shared y axis through zero; the marked lags of each panel are shaded. Lags are integers: nothing is joined.
    ``threshold`` (label, value): a dashed red horizontal line at ``value`` in every panel, named ``label`` in the
    legend (the bias below which a lag counts as unused). Each legend stands where it covers no bar."""
    from markovformer.plots.legends import place_legend

    if not panels:
        raise ValueError("plot_lag_bars needs at least one panel")
    figure = new_figure(4.6 * len(panels), 3.8)
    axes = figure.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, panel in zip(axes, panels, strict=True):
        count = max(len(values) for values in panel.series.values())
        lags = np.arange(1, count + 1)
        for lag in panel.marked:
            ax.axvspan(lag - 0.45, lag + 0.45, color="gold", alpha=0.35, lw=0)
        width = 0.8 / max(len(panel.series), 1)
        for index, (label, values) in enumerate(panel.series.items()):
            offset = (index - (len(panel.series) - 1) / 2) * width
            ax.bar(lags[: len(values)] + offset, values, width=width, label=label, color=f"C{index % 10}")
        ax.axhline(0.0, color="black", lw=0.8)
        if threshold is not None:
            label, value = threshold
            ax.axhline(value, color="tab:red", linestyle="--", lw=1.2, label=label)
        ax.set_xticks(lags)
        ax.set_xlabel("attention lag k (key k tokens before the query)")
        ax.set_title(panel.title, fontsize=10)
        ax.grid(alpha=0.3, axis="y")
    axes[0].set_ylabel(ylabel)
    for ax in axes:  # once every panel is drawn: the shared y axis has its final limits
        place_legend(ax, fontsize=7)
    return save_figure(figure, out)


def plot_row_errorbars(rows: dict[str, dict[str, Sequence[float]]], references: dict[str, float], out: Path,
                       xlabel: str) -> Path:  # fmt: skip
    """One line per row (top to bottom), a marker per series at the mean of its values with a ± std bar (none for
    a single value), and dashed vertical reference lines: measurements of several rows scored several ways."""
    if not rows:
        raise ValueError("plot_row_errorbars needs at least one row")
    figure = new_figure(7.5, 0.45 * len(rows) + 1.6)
    ax = figure.subplots()
    series = list(dict.fromkeys(name for values in rows.values() for name in values))
    positions = np.arange(len(rows))[::-1]
    for index, name in enumerate(series):
        offset = (index - (len(series) - 1) / 2) * 0.25
        points = [(y + offset, np.mean(values[name]), np.std(values[name], ddof=1) if len(values[name]) > 1 else 0.0)
                  for y, values in zip(positions, rows.values(), strict=True) if values.get(name)]  # fmt: skip
        ys, means, stds = zip(*points, strict=True)
        ax.errorbar(means, ys, xerr=stds, fmt="o", markersize=4, capsize=3, color=f"C{index % 10}", label=name)
    for index, (label, value) in enumerate(references.items()):
        ax.axvline(value, color="black", linestyle=_REFERENCE_STYLES[index % len(_REFERENCE_STYLES)], linewidth=1,
                   label=label)  # fmt: skip
    ax.set_yticks(positions, list(rows), fontsize=7)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7)
    return save_figure(figure, out)
