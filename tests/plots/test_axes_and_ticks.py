"""Axes a reader can trust: a speed axis from zero where the ratio is the point, tick labels that read as the values
they mark and do not overlap, y ranges fitted to the data."""

from __future__ import annotations

import numpy as np

from markovformer.plots.experiments import LandscapePanel, Panel, landscapes_figure, panels_figure
from markovformer.plots.markov import attention_lag_figure


def test_a_speed_panel_starts_at_zero_and_other_panels_fit_their_data():
    curves = {"transparent": ([1, 2], [14_000.0, 16_700.0])}
    speed = panels_figure([Panel("speed", curves, y_from_zero=True)], "k", "tokens/s").axes[0]
    assert speed.get_ylim()[0] == 0 and speed.get_ylim()[1] >= 16_700
    fitted = panels_figure([Panel("speed", curves)], "k", "tokens/s").axes[0]
    assert fitted.get_ylim()[0] > 10_000  # without the flag the axis fits the data


def _overlaps(labels) -> bool:
    boxes = sorted((label.get_window_extent() for label in labels if label.get_text()), key=lambda box: box.x0)
    return any(left.x1 > right.x0 for left, right in zip(boxes, boxes[1:], strict=False))


def test_attention_by_lag_at_window_32_has_readable_ticks_no_point_past_the_window_and_a_fitted_y_axis():
    rng = np.random.default_rng(0)
    window = 32
    profile = np.zeros((4, window + 2))  # lags 0..W+1; nothing is ever attended past the window
    profile[:, : window + 1] = rng.dirichlet(np.ones(window + 1), size=4) * 0.9
    figure = attention_lag_figure({0: profile, 1: profile[::-1]}, true_lags=[1, 2])
    figure.canvas.draw()
    assert "lags > 32, past the window and never attended, not drawn" in figure.get_suptitle()
    assert not _overlaps([axis.xaxis.label for axis in figure.axes])
    for axis in figure.axes:
        assert not _overlaps(axis.get_xticklabels())
        assert all(line.get_xdata().max() == window for line in axis.get_lines())  # no zero point at lag W + 1
        assert axis.get_ylim()[0] == 0 and profile.max() <= axis.get_ylim()[1] <= 1.2 * profile.max() < 1
    short = attention_lag_figure({0: rng.dirichlet(np.ones(5), size=2)}).axes[0]  # a few lags: every one labelled
    assert [label.get_text() for label in short.get_xticklabels()] == ["0", "1", "2", "3", "4"]


def test_a_log_x_axis_of_windows_4_and_16_reads_4_and_16():
    panel = Panel("hmm", {"VMT": ([4, 16], [2.1, 2.0]), "Transformer": ([4, 16], [2.3, 2.2])})
    axis = panels_figure([panel], "window length", "nats per token", log_x=True).axes[0]
    axis.figure.canvas.draw()
    shown = [label.get_text() for label in axis.get_xticklabels() if label.get_text()]
    minor = [label.get_text() for label in axis.get_xticklabels(minor=True) if label.get_text()]
    assert shown == ["4", "16"] and minor == []


def test_the_landscape_says_what_green_and_red_mean_and_keeps_flows_inside_the_axes():
    w_grid, e_grid = np.linspace(-2.0, 1.5, 15), np.linspace(-1.8, 1.8, 13)
    inside = np.column_stack([np.linspace(-1.0, 1.0, 20), np.linspace(0.5, 1.2, 20)])
    leaving = np.column_stack([np.linspace(-1.5, -4.0, 20), np.linspace(0.1, 0.0, 20)])  # runs off to w = -4
    panel = LandscapePanel("p=0.2, q=0.3", w_grid, e_grid, np.add.outer(e_grid**2, w_grid**2), [inside, leaving],
                           [True, False])  # fmt: skip
    axis = landscapes_figure([panel], (-0.7071, 0.0)).axes[0]
    texts = [text.get_text() for text in axis.get_legend().get_texts()]
    assert "flow reaching the global minimum" in texts and "flow ending on the unigram line e = 0" in texts
    assert "flow leaves the window" in texts
    (x0, x1), (y0, y1) = axis.get_xlim(), axis.get_ylim()
    for line in axis.get_lines():
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        assert ((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1)).all()
