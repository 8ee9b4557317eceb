"""The figures a reader needs: no panel that only rescales the loss, one line per distinct learning rate, the floors
drawn inside the loss axis, attention by lag against a naive loop, k = ∞ kept apart from the finite orders,
effective-bias bars per lag, and rows of repeats read top down at their mean and sample spread."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest
import torch

from markovformer.experiments.mat_order import order_curves
from markovformer.plots import experiments, plot_attention_lag_profile, plot_training_curves
from markovformer.plots.curves import plotted_families, read_metric_series
from markovformer.plots.experiments import LagPanel, Panel, panels_figure, plot_lag_bars, plot_panels
from markovformer.training.inspection import reference_lines
from markovformer.training.lag_profiles import attention_by_lag


def _csv(path: Path, rows: list[dict]) -> Path:
    columns = ["epoch", "lr-AdamW/pg1", "lr-AdamW/pg2", "step", "train/loss", "val/bits_per_token", "val/loss",
               "val/perplexity"]  # fmt: skip
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _rows() -> list[dict]:
    rows = []
    for step in range(10, 110, 10):
        loss = 2.0 + 1.0 / step
        rows.append({"step": step, "lr-AdamW/pg1": 1e-3, "lr-AdamW/pg2": 1e-3})
        rows.append({"epoch": 0, "step": step, "train/loss": loss + 0.01})
        rows.append({"epoch": 0, "step": step, "val/loss": loss, "val/bits_per_token": loss / math.log(2),
                     "val/perplexity": math.exp(loss)})  # fmt: skip
    return rows


def test_curves_leave_out_rescaled_losses_and_duplicate_learning_rates(tmp_path):
    series = read_metric_series(_csv(tmp_path / "metrics.csv", _rows()))
    assert plotted_families(series) == {"loss": ["train/loss", "val/loss"], "learning rate": ["lr-AdamW/pg1"]}
    different = {**series, "lr-AdamW/pg2": (series["lr-AdamW/pg2"][0], [2e-3] * 10)}
    assert plotted_families(different)["learning rate"] == ["lr-AdamW/pg1", "lr-AdamW/pg2"]
    no_loss = {k: v for k, v in series.items() if "loss" not in k}
    assert "bits_per_token" in plotted_families(no_loss)  # drawn when there is no loss to repeat


def test_an_n_gram_models_losses_by_order_share_one_panel_and_bits_per_character_repeats_the_loss(tmp_path):
    """A Scan Markov run scored at several orders drew loss_n2 ... loss_n5 each in a panel of its own, and its bits
    per character (the loss on another scale) in one more."""
    series = read_metric_series(_csv(tmp_path / "metrics.csv", _rows()))
    steps, values = series["val/loss"]
    orders = {f"val/loss_n{n}": (steps, [value + 0.1 * n for value in values]) for n in (2, 3, 4, 5)}
    characters = {"val/bits_per_character": (steps, [value / math.log(2) / 3.5 for value in values])}
    families = plotted_families({**series, **orders, **characters})
    assert families["loss by order n"] == list(orders) and "bits_per_character" not in families


def test_the_floors_stay_inside_the_loss_axis(tmp_path):
    """An entropy rate far below the curves still shows: the two images differ in the lower part of the panel."""
    path = _csv(tmp_path / "metrics.csv", _rows())
    plain = plot_training_curves(path, tmp_path / "plain.png")
    floored = plot_training_curves(path, tmp_path / "floored.png", reference_lines={"entropy rate": 1.0})
    a, b = matplotlib.image.imread(plain), matplotlib.image.imread(floored)
    assert a.shape == b.shape and not np.array_equal(a, b)
    lines = reference_lines({"entropy_rate": 1.7, "oracle_val_loss": 1.69, "val_log_likelihood_per_token": -2.5})
    assert lines == {"entropy rate": 1.7, "true chain (validation)": 1.69, "exact NLL (validation)": 2.5}


def test_attention_by_lag_matches_a_naive_loop():
    g = torch.Generator().manual_seed(0)
    batch, heads, length, max_lag = 2, 3, 10, 4
    scores = torch.randn(batch, heads, length, length, generator=g)
    weights = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), -math.inf).softmax(-1)
    mask = torch.ones(batch, length)
    mask[1, 7:] = 0  # padding: those queries are left out
    naive = torch.zeros(heads, max_lag + 1)
    count = 0
    for b in range(batch):
        for t in range(max_lag, length):
            if mask[b, t]:
                count += 1
                for k in range(max_lag + 1):
                    naive[:, k] += weights[b, :, t, t - k]
    torch.testing.assert_close(attention_by_lag(weights, max_lag, mask), naive / count)
    one_hot = torch.zeros(1, 1, length, length)
    one_hot[0, 0, torch.arange(2, length), torch.arange(0, length - 2)] = 1.0  # every query looks 2 back
    assert attention_by_lag(one_hot, 3)[0].tolist() == [0.0, 0.0, 1.0, 0.0]


def test_lag_figures_write_pngs(tmp_path):
    profile = plot_attention_lag_profile({0: torch.rand(4, 6), 1: torch.rand(4, 6)}, tmp_path / "p.png", (0, 1, 2))
    bars = plot_lag_bars([LagPanel("fixed-3", {"markov layer 0": [0.7, 0.3, 0.0, 0.1]}, (1, 2))], tmp_path / "b.png",
                         "effective bias")  # fmt: skip
    for path in (profile, bars):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unbounded_order_is_kept_apart_from_the_finite_orders(tmp_path):
    cells = [{"order": order, "transparent": transparent, "bleu": value}
             for order, value in ((1, 20.0), (2, 90.0), (None, 95.0)) for transparent in (True, False)]  # fmt: skip
    curves, apart, infinity = order_curves(cells, (1, 2, None), (True, False), "bleu")
    assert curves["transparent"] == ([1, 2], [20.0, 90.0]) and infinity == 3
    assert apart == {"transparent": (3, 95.0), "standard": (3, 95.0)}
    panel = Panel("BLEU", curves, apart=apart, tick_labels={infinity: "∞"})
    assert plot_panels([panel], tmp_path / "bleu.png", "k", "BLEU").is_file()


def test_the_loss_panel_comes_first_whatever_the_column_order():
    """Columns come sorted by name, so a learning rate ("lr-...") is met before "train/loss": the loss panel, the one
    the floors are drawn in, is moved to the top and the other families keep the order they were met in."""
    series = {"lr-AdamW/pg1": ([1, 2], [1e-3, 1e-3]), "val/accuracy": ([1, 2], [0.1, 0.2]),
              "train/loss": ([1, 2], [2.0, 1.5])}  # fmt: skip
    assert list(plotted_families(series)) == ["loss", "learning rate", "accuracy"]


def test_a_learning_rate_logged_at_other_steps_is_drawn_as_its_own_line():
    """Two columns are drawn once only when their (step, value) series are equal: the same values at other steps are
    another curve, not a repeat."""
    series = {"lr-AdamW/pg1": ([1, 2], [1e-3, 1e-3]), "lr-AdamW/pg2": ([3, 4], [1e-3, 1e-3])}
    assert plotted_families(series)["learning rate"] == ["lr-AdamW/pg1", "lr-AdamW/pg2"]


def test_the_divider_lies_strictly_between_the_finite_orders_and_the_unbounded_one():
    """Finite orders up to 4 and k = ∞ drawn at 8: a divider at 4 or 8 would run through a measured point."""
    panel = Panel("orders", {"mat": ([1, 2, 4], [0.5, 0.6, 0.7])}, apart={"mat": (8, 0.8)})
    axis = panels_figure([panel], "order k", "BLEU").axes[0]
    (divider,) = [line for line in axis.get_lines() if line.get_linestyle() == ":"]
    assert 4 < divider.get_xdata()[0] < 8


def test_the_bars_of_several_series_at_a_lag_stand_side_by_side(tmp_path, kept_figures):
    """Two series at lags 1 and 2 give four bars, each lag's two next to each other: drawn at the same x, the second
    series would hide the first."""
    figures = kept_figures(experiments)
    plot_lag_bars([LagPanel("p", {"a": [1.0, 2.0], "b": [1.0, 2.0]})], tmp_path / "x.png", "bias")
    spans = sorted((bar.get_x(), bar.get_x() + bar.get_width()) for bar in figures["x.png"].axes[0].patches)
    assert len(spans) == 4
    assert all(right <= left + 1e-9 for (_, right), (left, _) in zip(spans, spans[1:], strict=False)), spans


def test_rows_read_top_down_in_the_order_given_with_the_mean_and_sample_std(tmp_path, kept_figures):
    """Repeats 1, 2, 6: mean 3 and sample variance ((-2)^2 + (-1)^2 + 3^2) / 2 = 7, so the bar reaches sqrt(7) either
    side (the population std, sqrt(14/3), understates the spread of a few seeds); 4, 4 has none, a single 3 no bar."""
    figures = kept_figures(experiments)
    rows = {"first": {"a": [1.0, 2.0, 6.0]}, "second": {"a": [4.0, 4.0]}, "third": {"a": [3.0]}}
    experiments.plot_row_errorbars(rows, {}, tmp_path / "x.png", "score")
    axis = figures["x.png"].axes[0]
    ticks = sorted(zip(axis.get_yticks(), [label.get_text() for label in axis.get_yticklabels()], strict=True))
    assert [label for _, label in reversed(ticks)] == ["first", "second", "third"]  # top down
    ((marks, _, (bars,)),) = [container.lines for container in axis.containers]
    drawn = sorted(zip(marks.get_ydata(), marks.get_xdata(), [(b[1][0] - b[0][0]) / 2 for b in bars.get_segments()],
                       strict=True), reverse=True)  # fmt: skip
    assert [y for y, _, _ in drawn] == [y for y, _ in reversed(ticks)]  # one marker on each row's line
    assert [mean for _, mean, _ in drawn] == pytest.approx([3.0, 4.0, 3.0])
    assert [half for _, _, half in drawn] == pytest.approx([np.sqrt(7.0), 0.0, 0.0])
