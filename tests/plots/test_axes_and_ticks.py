"""Axes a reader can trust: a speed axis from zero where the ratio is the point, tick labels that read as the values
they mark and do not overlap, y ranges fitted to the data, lengths on the log axis they double along, and outlines
framing the very column a starred tick names."""

from __future__ import annotations

import numpy as np

from markovformer.plots import markov, position_biases
from markovformer.plots.experiments import LandscapePanel, Panel, landscapes_figure, panels_figure
from markovformer.plots.markov import attention_lag_figure
from markovformer.plots.position_biases import ProfilePanel


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


def test_the_true_lags_starred_tick_and_its_outline_are_the_same_column(tmp_path, kept_figures):
    """Lags 1..4 are image columns 0..3, each spanning its index +- 0.5: lag 3's tick reads 3* and its black outline
    spans 1.5 .. 2.5 (one to the right, it would frame lag 4)."""
    figures = kept_figures(markov)
    strengths = [{"past": np.arange(12, dtype=float).reshape(3, 4), "future": None}]
    markov.plot_transition_strengths(strengths, tmp_path / "x.png", true_lags=(3,))
    axis = figures["x.png"].axes[0]
    assert [label.get_text() for label in axis.get_xticklabels()] == ["1", "2", "3*", "4"]
    outlines = [patch for patch in axis.patches if tuple(patch.get_edgecolor()[:3]) == (0.0, 0.0, 0.0)]
    assert [(patch.get_x(), patch.get_x() + patch.get_width()) for patch in outlines] == [(1.5, 2.5)]


def test_a_needed_lag_is_framed_on_its_own_column(tmp_path, kept_figures):
    """Attention lags 0, 1, 2 are image columns 0, 1, 2, each spanning its index +- 0.5: the needed lag 2 is framed
    from 1.5 to 2.5."""
    figures = kept_figures(position_biases)
    panel = ProfilePanel("order 2", {"softmax": [0.1, 0.2, 0.7], "alibi": [0.3, 0.3, 0.4]}, needed=(2,))
    position_biases.plot_distance_profiles([panel], tmp_path / "x.png")
    (frame,) = figures["x.png"].axes[0].patches
    assert (frame.get_x(), frame.get_x() + frame.get_width()) == (1.5, 2.5)


def test_extrapolation_lengths_lie_on_a_log2_axis_read_as_multiples_of_t(tmp_path, kept_figures):
    """Lengths 1, 2 and 4 x T double at each step, so a base-2 log axis spaces them evenly; the ticks name them as
    multiples of the training length T, the first being T itself (not 1T)."""
    figures = kept_figures(position_biases)
    position_biases.plot_extrapolation({"order 2": {"softmax": [0.1, 0.2, 0.4]}}, [1, 2, 4], tmp_path / "x.png")
    axis = figures["x.png"].axes[0]
    assert axis.get_xscale() == "log" and axis.xaxis.get_transform().base == 2
    assert [label.get_text() for label in axis.get_xticklabels()] == ["T", "2T", "4T"]


def _covered_points(axis) -> list[tuple[float, float]]:
    """The data points of ``axis``' lines (markers) that lie under its legend's box, in data coordinates."""
    box = axis.get_legend().get_window_extent(axis.figure.canvas.get_renderer())
    covered = []
    for line in axis.get_lines():
        xy = np.column_stack([line.get_xdata(), line.get_ydata()]).astype(float)
        shown = axis.transData.transform(xy)
        inside = ((shown[:, 0] >= box.x0) & (shown[:, 0] <= box.x1) & (shown[:, 1] >= box.y0)
                  & (shown[:, 1] <= box.y1))  # fmt: skip
        covered += [tuple(point) for point in xy[inside]]
    return covered


def test_the_attention_by_lag_legend_covers_no_measured_point():
    """A local Markov layer's heads near 0.2 at every lag up to the window (lags 0..4), and a bidirectional layer's
    two heads near 0.11 from -4 to 4: a legend fixed at the upper right stood over lag 4's points (the demo's
    layer 1, a CTC run's every layer)."""
    causal = np.array([[0.18, 0.23, 0.21, 0.19, 0.195], [0.18, 0.21, 0.21, 0.20, 0.20],
                       [0.18, 0.22, 0.21, 0.19, 0.20], [0.18, 0.22, 0.21, 0.20, 0.195]])  # fmt: skip
    figure = attention_lag_figure({0: causal, 1: causal[::-1]}, true_lags=[0, 1, 2])
    figure.canvas.draw()
    assert _covered_points(figure.axes[-1]) == []
    past = np.array([[0.10, 0.12, 0.11, 0.11, 0.11, 0.0], [0.10, 0.11, 0.11, 0.12, 0.11, 0.0],
                     [0.04] * 5 + [0.04], [0.04] * 5 + [0.04]])  # fmt: skip
    labels = {0: ["head 0 (Markov)", "head 1 (Markov)", "head 2 (random features)", "head 3 (random features)"]}
    figure = attention_lag_figure({0: past}, head_labels=labels, future={0: past})
    figure.canvas.draw()
    assert _covered_points(figure.axes[0]) == []


def test_the_training_curves_step_axis_ticks_whole_steps(tmp_path, kept_figures):
    """A run of 5 steps had ticks at 1.5, 2.5 ..., a run of one step at 0.96 .. 1.04: the optimiser takes whole
    steps."""
    from markovformer.plots import curves

    figures = kept_figures(curves)
    for steps in (1, 5, 37):
        path = tmp_path / f"metrics-{steps}.csv"
        rows = [f"{step},{3.0 - step / 100}," for step in range(1, steps + 1)] + [f"{steps},,2.5"]
        path.write_text("step,train/loss,val/loss\n" + "\n".join(rows) + "\n")
        curves.plot_training_curves(path, tmp_path / f"curves-{steps}.png")
        axis = figures[f"curves-{steps}.png"].axes[-1]
        axis.figure.canvas.draw()
        low, high = axis.get_xlim()
        ticks = [tick for tick in axis.get_xticks() if low <= tick <= high]
        assert ticks and all(float(tick).is_integer() for tick in ticks), (steps, ticks)


def test_the_strengths_title_stays_inside_when_the_chain_reaches_past_max_order(tmp_path, kept_figures):
    """The demo's chain (biased lags 1, 2) under model.max_order=1: the title's note '(outlined, *: the chain's lag
    1; the chain's lag 2 lies beyond max_order 1)' ran 34 pixels past each edge of the 5.5-inch figure."""
    figures = kept_figures(markov)
    markov.plot_transition_strengths([{"past": np.full((4, 1), 0.7), "future": None}] * 2, tmp_path / "t.png",
                                     true_lags=(1, 2))  # fmt: skip
    figure = figures["t.png"]
    figure.canvas.draw()
    title = figure._suptitle.get_window_extent(figure.canvas.get_renderer())
    assert 0 <= title.x0 and title.x1 <= figure.bbox.width
    assert "lag 2 lies beyond max_order 1" in " ".join(figure._suptitle.get_text().split())


def test_the_attention_maps_title_stays_inside_a_one_head_figure():
    """One head on 16 tokens (model.n_heads=1 data.seq_len=16): a 4.5-inch figure whose title, 'Attention
    probabilities of example 0 (rows: query, columns: key)', ran past both edges."""
    import torch

    weights = torch.softmax(torch.randn(1, 1, 16, 16), dim=-1)
    figure = markov.attention_maps_figure([weights], [0])
    figure.canvas.draw()
    title = figure._suptitle.get_window_extent(figure.canvas.get_renderer())
    assert 0 <= title.x0 and title.x1 <= figure.bbox.width
