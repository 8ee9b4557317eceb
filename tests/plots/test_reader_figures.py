"""The figures a reader needs: no panel that only rescales the loss, one line per distinct learning rate, the floors
drawn inside the loss axis, attention by lag against a naive loop, k = ∞ kept apart from the finite orders, and
effective-bias bars per lag."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import matplotlib.image
import numpy as np
import torch

from markovformer.experiments.mat_order import order_curves
from markovformer.plots import plot_attention_lag_profile, plot_training_curves
from markovformer.plots.curves import plotted_families, read_metric_series
from markovformer.plots.experiments import LagPanel, Panel, plot_lag_bars, plot_panels
from markovformer.training.inspection import attention_by_lag, reference_lines


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
