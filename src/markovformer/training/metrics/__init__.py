"""The metrics each task scores validation and ``eval`` with (``Task.new_metrics``), on torchmetrics' states, which
sync across processes. Imported where scoring starts, never by the tasks' modules at their top: reading a run's
config and ``generate`` need no torchmetrics."""

from __future__ import annotations

from markovformer.training.metrics.base import LossMetric, WeightedMean, perplexity
from markovformer.training.metrics.classification import ClassificationMetrics
from markovformer.training.metrics.ctc import CTCMetrics
from markovformer.training.metrics.documents import DocumentMetrics
from markovformer.training.metrics.language_model import LanguageModelMetrics
from markovformer.training.metrics.translation import TranslationMetrics

__all__ = ["CTCMetrics", "ClassificationMetrics", "DocumentMetrics", "LanguageModelMetrics", "LossMetric",
           "TranslationMetrics", "WeightedMean", "perplexity"]  # fmt: skip
