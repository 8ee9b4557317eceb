"""Sequence classification (one label per sequence) and token classification (one label per position, -100
ignored): cross-entropy, micro accuracy and macro F1; sequence classification adds macro one-vs-rest AUROC."""

from __future__ import annotations

from typing import TYPE_CHECKING

from markovformer.training.tasks.base import Task
from markovformer.training.trainer_config import ConfigError

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import ClassificationMetrics


def name_the_labels(model, info: dict) -> None:
    """The data's class names in the model's saved config.json, as transformers keeps them (``id2label``,
    ``label2id``): the model loaded on its own (``AutoModelForSequenceClassification``, a pipeline) names its
    classes as the data does, not LABEL_0, LABEL_1, ..."""
    names = [str(name) for name in info.get("label_names") or ()]
    if names and hasattr(model, "transformers_settings"):
        model.transformers_settings.update(id2label=dict(enumerate(names)),
                                           label2id={name: index for index, name in enumerate(names)})  # fmt: skip


class SequenceClassification(Task):
    name = "sequence_classification"
    loss_unit = "nats/sequence"
    writes_predictions = True

    def prepare_model(self, model) -> None:
        name_the_labels(model, self.info)

    def new_metrics(self) -> ClassificationMetrics:
        from markovformer.training.metrics import ClassificationMetrics  # deferred: see Task.new_metrics

        return ClassificationMetrics(self.info["num_labels"], auroc=True, label_names=self.info.get("label_names"))


class TokenClassification(Task):
    name = "token_classification"
    loss_unit = "nats/labelled step"
    writes_predictions = True

    def new_metrics(self) -> ClassificationMetrics:
        from markovformer.training.metrics import ClassificationMetrics  # deferred: see Task.new_metrics

        return ClassificationMetrics(self.info["num_labels"], label_names=self.info.get("label_names"), per_token=True)

    def prepare_model(self, model) -> None:
        """Names the labels (``name_the_labels``). ConfigError when a row's label looks ahead (the data's
        ``label_leads``) and the model sees later rows: the label would be read off the next row's features (a
        forecast's next return is that row's feature)."""
        name_the_labels(model, self.info)
        leads = self.info.get("label_leads", 0)
        if leads and not getattr(model.config, "causal", True):
            raise ConfigError(f"the data's labels look {leads} row(s) ahead (its label_leads: a forecast) and the "
                              f"model sees later rows (causal=false): each label can be read off the next rows' "
                              f"features; use model.causal=true, or task sequence_classification (its window ends at "
                              f"the labelled row)")  # fmt: skip
