"""The suite's figures: op time and memory against T, model throughput and memory, longest trainable context, and
every target with met / not met."""

from __future__ import annotations

import math
from itertools import cycle
from pathlib import Path

from matplotlib.figure import Figure

from markovformer.bench.measure import CAP_REACHED
from markovformer.plots.saving import new_figure, save_figure

# Series that measure the same (e.g. two kinds at the same memory) would hide each other: each gets its own marker and
# line style, and the ones drawn first are drawn larger and hollow, so a later, smaller one sits inside them.
SERIES_STYLES = tuple(zip("os^Dvx+*", ("-", "--", ":", "-.", (0, (5, 1)), (0, (1, 2)), (0, (3, 1, 1, 1)), "-"),
                          strict=True))  # fmt: skip
CAPPED_HATCH = "//"
NON_POSITIVE_NOTE = "filled markers on the bottom edge: measured ≤ 0 (below the log axis)"


def _against_length(axis, table: dict[str, dict], ylabel: str) -> None:
    """One line per kind on log-log axes. A measured value <= 0 (a CPU peak is VmHWM above a baseline, so it can be
    0 or below) has no place on a log axis: it breaks the line and is drawn as a filled marker on the bottom edge,
    with a note as the axis title, rather than vanishing as if it had not been measured."""
    any_non_positive = False
    for index, ((kind, series), (marker, linestyle)) in enumerate(zip(table.items(), cycle(SERIES_STYLES))):
        lengths = sorted(series, key=int)
        larger = 1 - index / max(1, len(table) - 1)  # 1 for the first series drawn, 0 for the last
        values = [series[t] if series[t] > 0 else math.nan for t in lengths]
        (line,) = axis.plot([int(t) for t in lengths], values, marker=marker, linestyle=linestyle,
                            markersize=4 + 7 * larger, markerfacecolor="none", linewidth=1 + 2 * larger, label=kind,
                            zorder=2 + index)  # fmt: skip
        non_positive = [int(t) for t in lengths if series[t] <= 0]
        if non_positive:
            any_non_positive = True
            axis.plot(non_positive, [0.0] * len(non_positive), marker=marker, linestyle="none", markersize=7,
                      color=line.get_color(), clip_on=False, transform=axis.get_xaxis_transform(),
                      label=f"_{kind} ≤ 0", zorder=2 + index)  # fmt: skip
    if any_non_positive:
        axis.set_title(NON_POSITIVE_NOTE, fontsize=8)  # above the axes, where it covers no point
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    if not any(value > 0 for series in table.values() for value in series.values()):
        axis.set_ylim(1, 10)  # no positive value to scale the log axis by: a neutral decade, so the figure still draws
    axis.set_xlabel("sequence length T")
    axis.set_ylabel(ylabel)
    axis.grid(True, which="both", alpha=0.3)


def _bars(axis, values: dict[str, float | None], ylabel: str, title: str, capped: frozenset[str] = frozenset()) -> None:
    """One bar per name; a bar in ``capped`` stopped at the search cap, so it is hatched and labelled "≥": a lower
    bound, not a measured maximum."""
    names = list(values)
    bars = axis.bar(range(len(names)), [values[name] or 0.0 for name in names])
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=9)
    axis.margins(y=0.15)  # room for the value labels above the bars
    for index, (name, bar) in enumerate(zip(names, bars, strict=True)):
        if values[name] is None:
            # at the foot of the axes (axes coordinates in y), which also holds on a log axis
            axis.text(index, 0.01, "n/a", ha="center", va="bottom", fontsize=8, transform=axis.get_xaxis_transform())
        elif name in capped:
            bar.set_hatch(CAPPED_HATCH)
            bar.set_facecolor("white")
            bar.set_edgecolor("tab:blue")
            axis.text(index, values[name], f"≥ {values[name]:g}\n(cap)", ha="center", va="bottom", fontsize=7)
        else:
            axis.text(index, values[name], f"{values[name]:g}", ha="center", va="bottom", fontsize=7)


def longest_figure(record: dict) -> Figure:
    """Longest trained context per model; models that trained at every T up to ``longest_max`` are marked as capped
    (hatched, "≥ T (cap)") and the cap is drawn as a line, so a cap never reads as a measured maximum."""
    longest = record["summary"]["longest"]
    entries = record.get("parts", {}).get("longest", {}).get("longest", {})
    capped = frozenset(model for model, entry in entries.items() if entry.get("stopped_by") == CAP_REACHED)
    cap = record.get("settings", {}).get("longest_max")
    figure = new_figure(6, 4)
    axis = figure.subplots()
    _bars(axis, longest, "longest trained T", "longest context within the caps", capped)
    measured = [value for value in longest.values() if value]
    if measured:
        axis.set_yscale("log", base=2)
        axis.set_ylim(min(measured) / 2, max([*measured, cap or 0]) * 2.5)
    if cap is not None:
        axis.axhline(cap, color="tab:red", linestyle="--", linewidth=1, label=f"search cap longest_max = {cap}")
        axis.legend(fontsize=8, loc="upper left")
    if capped:
        axis.set_title(f"longest context within the caps ({len(capped)} of {len(longest)} reached the search cap: "
                       "a lower bound)", fontsize=9)  # fmt: skip
    return figure


TARGET_COLOURS = {True: "tab:green", False: "tab:red"}


def _margin(target: dict) -> float | None:
    """How far a measured target is from its bound, as a factor that is >= 1 exactly when it is met; None only when
    it was not measured. A value <= 0 has no ratio to a positive bound: it meets any "<=" bound (inf) and misses any
    ">=" one (0), and the figure draws it at the edge of its log axis."""
    value = target["value"]
    if value is None:
        return None
    sign, bound = target["target"].split()
    if value <= 0:
        return math.inf if sign == "<=" else 0.0
    return value / float(bound) if sign == ">=" else float(bound) / value


def targets_figure(targets: dict) -> Figure:
    """One bar per target: its margin (value over bound for ">=", bound over value for "<=", so >= 1 is met), green
    met, red not met, an "n/a" where the run did not measure it; each bar labelled with the value and the bound."""
    names = list(targets)
    figure = new_figure(9, 1.2 + 0.24 * len(names))
    axis = figure.subplots()
    margins = {name: _margin(targets[name]) for name in names}
    finite = [margin for margin in margins.values() if margin is not None and 0 < margin < math.inf]
    edges = (min([*finite, 1.0]) / 4, max([*finite, 1.0]) * 4)  # where a value <= 0 is drawn: off the ratio scale
    for row, name in enumerate(names):
        target, margin = targets[name], margins[name]
        if margin is None:
            axis.text(1, row, "  n/a (not measured)", va="center", fontsize=7, color="grey")
            continue
        note = ""
        if not 0 < margin < math.inf:
            margin, note = edges[margin > 0], "; ≤ 0, drawn at the edge"
        axis.barh(row, margin, color=TARGET_COLOURS[target["met"]], left=0)
        axis.text(margin, row, f"  {target['value']:.3g} ({target['target']}{note})", va="center", fontsize=7)
    axis.axvline(1, color="black", linewidth=1)
    axis.set_xscale("log")
    axis.set_yticks(range(len(names)), names, fontsize=7)
    axis.invert_yaxis()
    axis.margins(x=0.3)
    axis.set_xlabel("margin: value / bound for >= targets, bound / value for <= targets (>= 1: met)")
    met = sum(target["met"] is True for target in targets.values())
    measured = sum(target["met"] is not None for target in targets.values())
    axis.set_title(f"targets: {met} of {measured} measured are met ({len(names) - measured} not measured)",
                   fontsize=9)  # fmt: skip
    return figure


FIGURE_FILES = ("ops.png", "models.png", "longest.png", "targets.png")


def write_plots(record: dict, out: Path) -> list[Path]:
    """PNG files for the parts present in ``record`` (the suite's JSON record), written into ``out``; the figures of
    parts it does not hold are removed from ``out``, so a rerun with fewer parts leaves no earlier run's figure beside
    its bench.json."""
    summary, written = record.get("summary", {}), []
    device = record.get("machine", {}).get("device", "")
    if "ops" in summary:
        figure = new_figure(11, 4.2)
        time_axis, memory_axis = figure.subplots(1, 2)
        _against_length(time_axis, summary["ops"]["seconds"], "forward+backward time (s)")
        _against_length(memory_axis, summary["ops"]["peak_mib"], "peak memory (MiB)")
        figure.suptitle(f"attention ops on {device} (missing points: skipped, see bench.json)", fontsize=10)
        if summary["ops"]["seconds"]:  # one legend for both panels, below them, where it covers no line
            figure.legend(*time_axis.get_legend_handles_labels(), loc="outside lower center", fontsize=8,
                          ncol=min(6, len(summary["ops"]["seconds"])))  # fmt: skip
        written.append(save_figure(figure, Path(out) / "ops.png"))
    if "models" in summary:
        lengths = sorted({int(t) for series in summary["models"]["tokens_per_second"].values() for t in series})
        figure = new_figure(4 * max(1, len(lengths)), 4)
        axes = figure.subplots(2, max(1, len(lengths)), squeeze=False)
        for column, length in enumerate(lengths):
            for row, key, label in ((0, "tokens_per_second", "training tokens/s"), (1, "peak_mib", "peak MiB")):
                values = {model: series.get(length, series.get(str(length)))
                          for model, series in summary["models"][key].items()}  # fmt: skip
                _bars(axes[row][column], values, label, f"T={length}")
        figure.suptitle(f"6 layers, d=256, 8 heads, training step on {device}", fontsize=10)
        written.append(save_figure(figure, Path(out) / "models.png"))
    if "longest" in summary:
        written.append(save_figure(longest_figure(record), Path(out) / "longest.png"))
    if summary.get("targets"):
        written.append(save_figure(targets_figure(summary["targets"]), Path(out) / "targets.png"))
    for name in set(FIGURE_FILES) - {path.name for path in written}:
        (Path(out) / name).unlink(missing_ok=True)
    return written
