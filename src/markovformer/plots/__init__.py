"""Figures and reports (interpretability: transition strengths, gate statistics, training curves): every function
takes plain data and an output path, writes the file atomically and returns its path.

Figures are drawn on matplotlib's Agg canvas through the object-oriented API, never pyplot, so importing this
package selects no backend and leaves no figure open (see ``saving``). ``import markovformer`` does not import it.
"""

from markovformer.plots.curves import metric_family, plot_training_curves, read_metric_series
from markovformer.plots.markov import (
    plot_attention_lag_profile,
    plot_attention_maps,
    plot_order_gates,
    plot_transition_strengths,
)
from markovformer.plots.report import write_html_report
from markovformer.plots.saving import replace_folder

__all__ = [
    "metric_family",
    "plot_attention_lag_profile",
    "plot_attention_maps",
    "plot_order_gates",
    "plot_training_curves",
    "plot_transition_strengths",
    "read_metric_series",
    "replace_folder",
    "write_html_report",
]
