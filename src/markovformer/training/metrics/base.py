"""What every task's metrics build on: a weighted mean that keeps nan, and the mean loss (``LossMetric``) that each
task's metrics extend."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from markovformer.data.translation.parallel import one_line


class WeightedMean(Metric):
    """The mean of the values given, each weighted by its ``weight``; a nan value makes the mean nan. torchmetrics'
    ``MeanMetric`` drops a nan value with its weight (a warning once), so a batch whose loss was nan left a finite,
    plausible validation loss (2.0 for batches at 2.0 and nan); with ``nan_strategy="disable"`` it ignores the
    weights. Synced across processes as two sums."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("weight", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, value: Tensor | float, weight: Tensor | float = 1.0) -> None:
        value, weight = (torch.as_tensor(x, dtype=self.total.dtype, device=self.total.device) for x in (value, weight))
        value, weight = torch.broadcast_tensors(value, weight)
        self.total += (value * weight).sum()
        self.weight += weight.sum()

    def compute(self) -> Tensor:
        return self.total / self.weight


def perplexity(loss: float) -> float:
    """exp(loss): inf past float range (ln of the largest float, 709.78), nan of a nan loss."""
    try:
        return math.exp(loss)
    except OverflowError:
        return math.inf


class LossMetric(nn.Module):
    """The mean validation loss, each batch weighted by what its loss averages over; a task's metrics extend it.

    ``compute()`` returns plain floats; every torchmetrics state is synced across processes by torchmetrics.

    A task whose examples have a prediction to read (a translation, a class, a transcript) names its columns in
    ``PREDICTION_COLUMNS`` and, while ``keep_predictions`` is set (``eval --predictions``), adds one row per scored
    example to ``predictions``; ``table`` writes them."""

    PREDICTION_COLUMNS: ClassVar[tuple[str, ...]] = ()  # none: the task's scoring predicts nothing to read

    def __init__(self) -> None:
        super().__init__()
        self.loss = WeightedMean()
        self.keep_predictions = False
        self.predictions: list[tuple] = []

    def update(self, output, batch: dict) -> None:
        labels = batch["labels"]
        self.loss.update(output.loss.detach(), weight=(labels != -100).sum() if labels.dim() > 1 else len(labels))

    def compute(self) -> dict[str, float]:
        return {"loss": float(self.loss.compute())}

    def reset(self) -> None:
        """Empty every state, its floating ones in float32: a run in trainer.precision bf16-true or 16-true has its
        whole LightningModule cast, these states with it (torchmetrics refuses ``.half()`` but not ``.to(dtype)``),
        and low-precision sums go wrong (300 batches of 6,001 tokens at a loss of 2.50 read 2.39 in bf16, nan in fp16).
        ``.to(dtype)`` casts floating tensors only: integer counts stay exact."""
        self.to(dtype=torch.float32)
        for module in self.modules():
            if isinstance(module, Metric):
                module.reset()
        self.predictions = []

    def breakdown(self) -> dict:
        """Results beside the metrics that ``eval`` reports but validation does not log (a classifier's numbers per
        class); none by default."""
        return {}

    def table(self) -> str:
        """The kept predictions as tab-separated lines under a header line (``PREDICTION_COLUMNS``), in the order
        scored, each field on one line (``one_line``). One process's share."""
        rows = [self.PREDICTION_COLUMNS, *self.predictions]
        return "".join("\t".join(one_line(str(field)) for field in row) + "\n" for row in rows)
