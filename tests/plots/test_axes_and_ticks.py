"""Axes a reader can trust: a speed axis from zero where the ratio is the point, tick labels that read as the values
they mark and do not overlap, y ranges fitted to the data."""

from __future__ import annotations

from markovformer.plots.experiments import Panel, panels_figure


def test_a_speed_panel_starts_at_zero_and_other_panels_fit_their_data():
    curves = {"transparent": ([1, 2], [14_000.0, 16_700.0])}
    speed = panels_figure([Panel("speed", curves, y_from_zero=True)], "k", "tokens/s").axes[0]
    assert speed.get_ylim()[0] == 0 and speed.get_ylim()[1] >= 16_700
    fitted = panels_figure([Panel("speed", curves)], "k", "tokens/s").axes[0]
    assert fitted.get_ylim()[0] > 10_000  # without the flag the axis fits the data
