"""Training curves from a Lightning ``CSVLogger`` ``metrics.csv``.

The logger writes one row per logging call with every known column, leaving blanks for metrics not logged in that
call, so each metric is read as its own (step, value) series. Columns are grouped into families by their name
without the split prefix (``train/``, ``val/``, ``test/``) and without Lightning's ``_step``/``_epoch`` suffixes:
``train/loss`` and ``val/loss`` share the loss panel; every ``lr-*`` column (LearningRateMonitor) shares one
learning-rate panel.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from matplotlib.ticker import MaxNLocator

from markovformer.plots.saving import new_figure, save_figure
from markovformer.training.log_rows import read_log_rows

_INDEX_COLUMNS = ("step", "epoch")
_SPLITS = ("train/", "val/", "validation/", "test/")
BLEU = "BLEU (sacrebleu, 0-100)"  # the other scores (exact match, accuracy, error rates) are fractions
_UNITS = {
    "bleu": BLEU,
    "loss": "loss (nats)",
    "loss by order n": "loss (nats)",
    "bits_per_token": "bits per token",
    "learning rate": "learning rate",
    "perplexity": "perplexity",
}


def read_metric_series(metrics_csv: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Every metric column of ``metrics_csv`` as ``{column: (steps, values)}``, in file column order.

    The file is read as the logger reads it (``read_log_rows``), so a last row cut short by a kill is left out rather
    than plotted as a truncated value. Rows where the column (or ``step``) is blank or not a number are skipped;
    non-finite values (nan, inf: a diverged run) are kept, for the plot to show them; columns left empty are
    dropped. Raises ValueError naming the file when it has no ``step`` column or no metric value at all.
    """
    metrics_csv = Path(metrics_csv)
    if not metrics_csv.is_file():
        raise FileNotFoundError(f"{metrics_csv}: no such metrics file")
    fieldnames, rows = read_log_rows(metrics_csv)
    if not fieldnames:
        raise ValueError(f"{metrics_csv}: the file is empty")
    if "step" not in fieldnames:
        raise ValueError(f"{metrics_csv}: no 'step' column, not a Lightning CSVLogger metrics file")
    columns = [c for c in fieldnames if c not in _INDEX_COLUMNS]
    series: dict[str, tuple[list[int], list[float]]] = {column: ([], []) for column in columns}
    for row in rows:
        step = _number(row.get("step"))
        if step is None or not math.isfinite(step):
            continue
        for column in columns:
            value = _number(row.get(column))
            if value is not None:
                series[column][0].append(int(step))
                series[column][1].append(value)
    series = {column: points for column, points in series.items() if points[0]}
    if not series:
        raise ValueError(f"{metrics_csv}: no metric values to plot")
    return series


def metric_family(column: str) -> str:
    """The panel a column belongs to: ``val/loss_epoch`` -> ``loss``, ``lr-AdamW/pg1`` -> ``learning rate``."""
    if column.startswith("lr-"):
        return "learning rate"
    name = column
    for split in _SPLITS:
        if name.startswith(split):
            name = name[len(split) :]
            break
    for suffix in ("_step", "_epoch"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    if re.fullmatch(r"loss_n\d+", name):  # an n-gram model's loss at each order n (task_options.orders): one panel
        return "loss by order n"
    return name


# Monotone rescalings of the loss (bits = nats / ln 2, per character: also over the split's characters per token,
# perplexity = exp(loss)): a second panel would repeat the loss
# curve on another scale, so they are drawn only when the file has no loss column.
RESCALED_LOSS_FAMILIES = ("bits_per_token", "bits_per_character", "perplexity")


def plotted_families(series: dict[str, tuple[list[int], list[float]]]) -> dict[str, list[str]]:
    """The panels ``plot_training_curves`` draws, {family: columns}, loss first: rescalings of the loss are left out
    when the loss is there, and columns whose (step, value) series equals an earlier one of the same family (the
    learning rate of several parameter groups) are drawn once."""
    families: dict[str, list[str]] = {}
    for column in series:
        same = [c for c in families.get(metric_family(column), []) if series[c] == series[column]]
        if not same:
            families.setdefault(metric_family(column), []).append(column)
    if "loss" in families:
        families = {family: columns for family, columns in families.items() if family not in RESCALED_LOSS_FAMILIES}
    return {family: families[family] for family in sorted(families, key=lambda family: family != "loss")}


def plot_training_curves(metrics_csv: Path, out: Path, reference_lines: dict[str, float] | None = None,
                         curve_labels: dict[str, str] | None = None, loss_title: str | None = None,
                         panel_titles: dict[str, str] | None = None,
                         panel_lines: dict[str, dict[str, float]] | None = None) -> Path:  # fmt: skip
    """One panel per metric family (``plotted_families``) against the optimiser step, stacked; returns ``out``.

    ``curve_labels`` {column: legend label} names curves whose column would not say what they are (a column logged
    as ``train/loss_step`` takes the label of ``train/loss``), and ``loss_title`` titles the loss panel: a task whose
    training objective is not its validation loss (the VMT's objective with auxiliary terms against its -ELBO).

    The loss panel (train and validation together) comes first and carries ``reference_lines`` (label -> value in
    the loss's own unit, nats; e.g. ``{"entropy rate": 1.73}``) as dashed horizontal lines, always inside the axis
    with the text of each value, so the gap between the curves and the floor reads off the figure (there is nowhere
    to draw them when the file has no loss column). ``panel_titles`` {family: title} and ``panel_lines`` {family:
    {label: value}} do the same for other panels (a VMT's bounds: the K of the importance-weighted bound, the exact
    log-likelihood they bound). Raises ValueError naming the file when it holds no values.
    """
    series = read_metric_series(metrics_csv)
    families = plotted_families(series)
    figure = new_figure(9.0, 2.8 * len(families) + 0.6)
    axes = figure.subplots(len(families), 1, sharex=True, squeeze=False)[:, 0]
    figure.suptitle("Training curves")
    for ax, (family, columns) in zip(axes, families.items(), strict=True):
        for column in columns:
            steps, values = series[column]
            label = "learning rate" if family == "learning rate" else _curve_label(column, curve_labels or {})
            # nan breaks the line, so a diverged stretch shows as a gap rather than a segment joining its ends
            finite = [value if math.isfinite(value) else math.nan for value in values]
            ax.plot(steps, finite, label=label, marker="o" if len(steps) <= 50 else None, markersize=3, lw=1.2)
            _mark_non_finite(ax, steps, values, label)
        lines = reference_lines if family == "loss" else (panel_lines or {}).get(family)
        if lines:
            low, high = ax.get_ylim()
            for index, (label, value) in enumerate(lines.items()):
                ax.axhline(value, ls=("--", ":", "-.")[index % 3], lw=1.2, color="black",
                           label=f"{label} = {value:.4f}")  # fmt: skip
            values = list(lines.values())
            margin = 0.05 * (max(high, *values) - min(low, *values))
            ax.set_ylim(min(low, *values) - margin, max(high, *values) + margin)
        if family == "loss" and loss_title:
            ax.set_title(loss_title)
            ax.set_ylabel("nats")
        else:
            ax.set_title((panel_titles or {}).get(family, family.replace("_", " ")))
            ax.set_ylabel(_UNITS.get(family, family.replace("_", " ")))
        if family == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    axes[-1].set_xlabel("step (optimiser updates)")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # not 1.5, 2.5: steps are whole
    return save_figure(figure, out)


def _curve_label(column: str, labels: dict[str, str]) -> str:
    """``labels``' name for ``column`` or for it without Lightning's ``_step``/``_epoch`` suffix; else the column."""
    for suffix in ("", "_step", "_epoch"):
        if column.endswith(suffix) and column[: len(column) - len(suffix)] in labels:
            return labels[column[: len(column) - len(suffix)]]
    return column


NON_FINITE_COLOUR = "tab:red"


def _mark_non_finite(ax, steps: list[int], values: list[float], label: str) -> None:
    """A red x on the top edge of the axis (axes coordinates in y, so never read as a value) at each step whose value
    is nan or inf, named in the legend: a gap in the line alone would not tell a diverged value from a step that
    logged nothing."""
    bad_steps = [step for step, value in zip(steps, values, strict=True) if not math.isfinite(value)]
    if bad_steps:
        ax.plot(bad_steps, [1.0] * len(bad_steps), ls="none", marker="x", markersize=7, mew=1.5, clip_on=False,
                color=NON_FINITE_COLOUR, transform=ax.get_xaxis_transform(),
                label=f"{label}: nan/inf ({len(bad_steps)} steps)")  # fmt: skip


def _number(text: str | None) -> float | None:
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        return None
