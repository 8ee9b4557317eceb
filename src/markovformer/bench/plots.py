"""The suite's figures: op time and memory against T, model throughput and memory, longest trainable context."""

from __future__ import annotations

from pathlib import Path

from markovformer.plots.saving import new_figure, save_figure


def _against_length(axis, table: dict[str, dict], ylabel: str) -> None:
    for kind, series in table.items():
        lengths = sorted(series, key=int)
        axis.plot([int(t) for t in lengths], [series[t] for t in lengths], marker="o", label=kind)
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("sequence length T")
    axis.set_ylabel(ylabel)
    axis.grid(True, which="both", alpha=0.3)
    if table:
        axis.legend(fontsize=8)


def _bars(axis, values: dict[str, float | None], ylabel: str, title: str) -> None:
    names = list(values)
    axis.bar(range(len(names)), [values[name] or 0.0 for name in names])
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    axis.set_ylabel(ylabel)
    axis.set_title(title, fontsize=9)
    for index, name in enumerate(names):
        if values[name] is None:
            axis.text(index, 0, "n/a", ha="center", va="bottom", fontsize=8)


def _by_window(axis, table: dict[str, dict], ylabel: str) -> None:
    """One line per (implementation, T) against W; SDPA (no window) as a horizontal line per T."""
    lines: dict[tuple[str, int], dict[int, float]] = {}
    for kind, series in table.items():
        name, _, window = kind.rpartition("_w")
        for length, value in series.items():
            if kind == "softmax_sdpa":
                axis.axhline(value, linestyle=":", color="grey", label=f"causal SDPA T={length}")
            else:
                lines.setdefault((name, int(length)), {})[int(window)] = value
    for (name, length), points in sorted(lines.items()):
        windows = sorted(points)
        axis.plot(windows, [points[w] for w in windows], marker="o", label=f"{name} T={length}",
                  linestyle="-" if name == "banded" else "--")  # fmt: skip
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    axis.set_xlabel("window W")
    axis.set_ylabel(ylabel)
    axis.grid(True, which="both", alpha=0.3)
    if table:
        axis.legend(fontsize=7)


def write_plots(record: dict, out: Path) -> list[Path]:
    """PNG files for the parts present in ``record`` (the suite's JSON record), written into ``out``."""
    summary, written = record.get("summary", {}), []
    device = record.get("machine", {}).get("device", "")
    if "ops" in summary:
        figure = new_figure(11, 4.2)
        time_axis, memory_axis = figure.subplots(1, 2)
        _against_length(time_axis, summary["ops"]["seconds"], "forward+backward time (s)")
        _against_length(memory_axis, summary["ops"]["peak_mib"], "peak memory (MiB)")
        figure.suptitle(f"attention ops on {device} (missing points: skipped, see bench.json)", fontsize=10)
        written.append(save_figure(figure, Path(out) / "ops.png"))
    if "windows" in summary:
        figure = new_figure(11, 4.2)
        time_axis, pair_axis = figure.subplots(1, 2)
        _by_window(time_axis, summary["windows"]["seconds"], "forward+backward time (s)")
        _by_window(pair_axis, summary["windows"]["ns_per_query_key"], "ns per (query, visible key)")
        figure.suptitle(f"local attention by window W on {device}: banded vs local-attention (SDPA: whole causal "
                        "sequence)", fontsize=10)  # fmt: skip
        written.append(save_figure(figure, Path(out) / "windows.png"))
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
        figure = new_figure(6, 4)
        _bars(figure.subplots(), summary["longest"], "longest trained T", "longest context within the caps")
        written.append(save_figure(figure, Path(out) / "longest.png"))
    return written
