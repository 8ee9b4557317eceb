"""What the positional attention kinds learned about position (`markovformer inspect`): one figure per kind, one
row of panels per layer of that kind, one curve per head (colour ``C{head}``).

- ``plot_t5_bias``: T5's learned bias per distance bucket, drawn at every lag (a step at each bucket's edge);
- ``plot_dynamic_bias``: the bias the dynamic-bias MLP computes at each lag;
- ``plot_alibi_bias``: ALiBi's fixed slopes per head and the bias -m·|k| they give;
- ``plot_forget_gates``: FoX's forget gates f per head (a box of their quantiles over the tokens read) and the
  decay they add at each lag (median, with a 10..90% band);
- ``plot_cope_terms``: CoPE's position term q·e[p] at each contextual position p (median, with a 10..90% band).

Each takes the numbers it draws (``BiasPanel``, arrays) and the output path, and draws them as given. Lags are in
tokens (lag k: the key k tokens before the query; a key k tokens after it is drawn at -k); biases in nats, as they
are added to the attention logit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from markovformer.plots.legends import place_legend
from markovformer.plots.saving import new_figure, save_figure

BIAS_LABEL = "bias added to the logit (nats)"
LAG_LABEL = "lag k (tokens; the key k before the query)"
BOTH_SIDES = "lag k (tokens; the key k before the query, at \u2212k the key k after it)"


@dataclass(frozen=True)
class BiasPanel:
    """One layer's curves: ``values`` (H, n) at ``x`` (n,), one row per head; ``band`` (low, high), each (H, n),
    shaded around a data-dependent curve; ``marks`` {label: x}: dashed vertical lines (max_distance, the lags met
    in training)."""

    layer: int
    x: np.ndarray
    values: np.ndarray
    band: tuple[np.ndarray, np.ndarray] | None = None
    marks: Mapping[str, float] = field(default_factory=dict)


def _check(panels: Sequence[BiasPanel], name: str) -> None:
    if not panels:
        raise ValueError(f"{name} needs at least one layer's panel")
    for panel in panels:
        values = np.asarray(panel.values)
        if values.ndim != 2 or values.shape[1] != len(panel.x):
            raise ValueError(f"{name}: layer {panel.layer}'s values {values.shape} do not match its "
                             f"{len(panel.x)} x values (heads x lags)")  # fmt: skip


def _curves(ax, panel: BiasPanel, step: bool = False) -> None:
    """Each head's curve (and band), the marks (the legend: ``_save``)."""
    x = np.asarray(panel.x, dtype=float)
    for head, row in enumerate(np.asarray(panel.values, dtype=float)):
        ax.plot(x, row, color=f"C{head % 10}", lw=1.4, label=f"head {head}",
                drawstyle="steps-mid" if step else "default", ls="-" if head < 10 else "--")  # fmt: skip
        if panel.band is not None:
            ax.fill_between(x, panel.band[0][head], panel.band[1][head], color=f"C{head % 10}", alpha=0.15, lw=0)
    for index, (label, at) in enumerate(panel.marks.items()):
        ax.axvline(at, color="black", ls=("--", ":", "-.")[index % 3], lw=1.0, label=label)
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.grid(alpha=0.3)


def _save(figure, out: Path) -> Path:
    """Each panel's legend, placed once every panel is drawn where it covers no curve (``legends.place_legend``:
    matplotlib's "best" stood over curves that fill the panel), then the figure written to ``out``."""
    for ax in figure.axes:
        if ax.get_legend_handles_labels()[0]:
            place_legend(ax, fontsize=7)
    return save_figure(figure, out)


def _lag_label(panel: BiasPanel) -> str:
    """The lag axis' label: a bidirectional layer's panel has keys after the query too, at negative lags."""
    return BOTH_SIDES if np.min(panel.x) < 0 else LAG_LABEL


def _rows(title: str, count: int, columns: int = 1, width: float = 6.4):
    """A figure of ``count`` rows of ``columns`` panels under ``title``, wrapped to the figure's width (T5's ran past
    both edges of one column)."""
    figure = new_figure(width * columns, 3.0 * count + 0.6)
    figure.suptitle(title, wrap=True)
    return figure, figure.subplots(count, columns, squeeze=False)


def plot_t5_bias(panels: Sequence[BiasPanel], out: Path) -> Path:
    """T5's learned bias over its distance buckets, expanded to every lag (one step per bucket), per layer."""
    _check(panels, "plot_t5_bias")
    figure, axes = _rows("t5_bias: learned bias per head over T5's log-spaced distance buckets, by lag", len(panels))
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _curves(ax, panel, step=True)
        ax.set_title(f"layer {panel.layer}", fontsize=10)
        ax.set_xlabel(_lag_label(panel))
        ax.set_ylabel(BIAS_LABEL)
    return _save(figure, out)


def plot_dynamic_bias(panels: Sequence[BiasPanel], out: Path) -> Path:
    """The dynamic-bias MLP's output per head at each lag, per layer."""
    _check(panels, "plot_dynamic_bias")
    figure, axes = _rows("dynamic_bias: the MLP's bias per head as a function of the lag", len(panels))
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _curves(ax, panel)
        ax.set_title(f"layer {panel.layer}", fontsize=10)
        ax.set_xlabel(_lag_label(panel))
        ax.set_ylabel(BIAS_LABEL)
    return _save(figure, out)


def plot_alibi_bias(slopes: Mapping[int, np.ndarray], panels: Sequence[BiasPanel], out: Path) -> Path:
    """Per ALiBi layer: its fixed slopes m_h per head (bars), and the bias -m_h·|k| at each lag k (lines)."""
    _check(panels, "plot_alibi_bias")
    missing = [panel.layer for panel in panels if panel.layer not in slopes]
    if missing:
        raise ValueError(f"plot_alibi_bias: no slopes given for layer {missing[0]}")
    figure, axes = _rows("alibi: fixed per-head slopes (not learned) and the bias they add at each lag",
                          len(panels), columns=2, width=4.6)
    for (bars, lines), panel in zip(axes, panels, strict=True):
        values = np.asarray(slopes[panel.layer], dtype=float)
        bars.bar(range(len(values)), values, color=[f"C{head % 10}" for head in range(len(values))])
        bars.set_xticks(range(len(values)), [str(head) for head in range(len(values))])
        bars.set_xlabel("head")
        bars.set_ylabel("slope m (nats per token of lag)")
        bars.set_yscale("log")
        bars.set_title(f"layer {panel.layer}: slope m of head h = 2^(\u22128(h+1)/H)", fontsize=10)
        _curves(lines, panel)
        lines.set_title(f"layer {panel.layer}: bias \u2212m\u00b7|k|", fontsize=10)
        lines.set_xlabel(_lag_label(panel))
        lines.set_ylabel(BIAS_LABEL)
    return _save(figure, out)


def plot_forget_gates(gates: Mapping[int, np.ndarray], panels: Sequence[BiasPanel], out: Path) -> Path:
    """Per FoX layer: the forget gates f per head as boxes of their quantiles (``gates[layer]`` (H, 5): 5%, 25%,
    50%, 75%, 95%; whiskers at 5 and 95%), and the decay they add to the logit at each lag (the panel's median
    curve and band)."""
    _check(panels, "plot_forget_gates")
    missing = [panel.layer for panel in panels if panel.layer not in gates]
    if missing:
        raise ValueError(f"plot_forget_gates: no gate quantiles given for layer {missing[0]}")
    figure, axes = _rows("forgetting (FoX): data-dependent forget gates and the decay they add at each lag",
                          len(panels), columns=2, width=4.6)
    for (boxes, lines), panel in zip(axes, panels, strict=True):
        quantiles = np.asarray(gates[panel.layer], dtype=float)
        if quantiles.ndim != 2 or quantiles.shape[1] != 5:
            raise ValueError(f"plot_forget_gates: layer {panel.layer}'s gates {quantiles.shape} are not (heads, 5)")
        stats = [{"whislo": q[0], "q1": q[1], "med": q[2], "q3": q[3], "whishi": q[4], "label": str(head)}
                 for head, q in enumerate(quantiles)]  # fmt: skip
        drawn = boxes.bxp(stats, positions=range(len(stats)), showfliers=False, widths=0.6)
        for part in ("medians", "caps"):  # named, so that the lines drawn can be told apart when read back
            for line in drawn[part]:
                line.set_gid(part)
        boxes.set_ylim(min(0.0, quantiles.min()), 1.0)
        boxes.set_xlabel("head")
        boxes.set_ylabel("forget gate f (0: forget, 1: keep)")
        boxes.set_title(f"layer {panel.layer}: f per token, quantiles 5/25/50/75/95%", fontsize=10)
        _curves(lines, panel)
        lines.set_title(f"layer {panel.layer}: decay \u03a3 log f over the k latest tokens", fontsize=10)
        lines.set_xlabel(_lag_label(panel))
        lines.set_ylabel("decay added to the logit (nats)")
    return _save(figure, out)


def plot_cope_terms(panels: Sequence[BiasPanel], out: Path) -> Path:
    """Per CoPE layer: the position term q·e[p] added to the logit at each contextual position p (the panel's
    median curve and band over the queries)."""
    _check(panels, "plot_cope_terms")
    figure, axes = _rows("cope: the position embeddings' term q\u00b7e[p] by contextual position p", len(panels))
    for ax, panel in zip(axes[:, 0], panels, strict=True):
        _curves(ax, panel)
        ax.set_title(f"layer {panel.layer}", fontsize=10)
        ax.set_xlabel("contextual position p (gates summed back from the query)")
        ax.set_ylabel("q\u00b7e[p] added to the logit (nats)")
    return _save(figure, out)


__all__ = ["BIAS_LABEL", "BOTH_SIDES", "LAG_LABEL", "BiasPanel", "plot_alibi_bias", "plot_cope_terms",
           "plot_dynamic_bias", "plot_forget_gates", "plot_t5_bias"]
