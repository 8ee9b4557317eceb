"""Causal language modelling: next-token cross-entropy; with ``trainer.orders`` (models with a Markov context
window) every training batch uses one drawn n and validation scores every n."""

from __future__ import annotations

import math

from torch import nn
from torchmetrics import MeanMetric

from markovformer.data.bundle import DataBundle
from markovformer.training.tasks.base import LossMetric, Task, model_inputs
from markovformer.training.trainer_config import ConfigError


class LanguageModelMetrics(LossMetric):
    """Token-weighted cross-entropy (so uneven batches average correctly), bits per token and perplexity.

    With ``orders``, every batch is scored once per n, ``update`` is told which, and ``loss`` is the mean over n
    of each n's token-weighted loss (``loss_n<n>``): the cross-entropy of an equal mixture of the n-gram predictions,
    since every n is scored on the same tokens."""

    def __init__(self, orders: tuple[int, ...] = ()) -> None:
        super().__init__()
        self.orders = tuple(orders)
        self.loss_by_order = nn.ModuleList(MeanMetric() for _ in self.orders)

    def update(self, output, batch: dict, order: int | None = None) -> None:
        """Add one batch's output; with orders, ``order`` says which n produced it."""
        if not (order in self.orders if self.orders else order is None):
            raise ValueError(f"order={order!r}: these metrics score n in {self.orders}")
        count = (batch["labels"][:, 1:] != -100).sum()  # the head shifts the labels inside
        loss = self.loss if order is None else self.loss_by_order[self.orders.index(order)]
        loss.update(output.loss.detach(), weight=count)

    def compute(self) -> dict[str, float]:
        by_order = {f"loss_n{n}": float(m.compute()) for n, m in zip(self.orders, self.loss_by_order, strict=True)}
        loss = sum(by_order.values()) / len(by_order) if by_order else float(self.loss.compute())
        return {"loss": loss, "bits_per_token": loss / math.log(2), "perplexity": math.exp(min(loss, 700.0)),
                **by_order}  # fmt: skip


class CausalLM(Task):
    name = "causal_lm"
    options = {"orders": "order", "label_smoothing": "label_smoothing"}
    continues_prompts = True
    sizes_from_data = tuple(key for key in Task.sizes_from_data if key != "num_labels")  # predicts tokens, not labels

    def check_model(self, model: nn.Module) -> None:
        super().check_model(model)
        for n in self.trainer.orders:
            try:
                model.window_size(n)  # a head that takes ``order`` has a Markov context window
            except ValueError as error:
                raise ConfigError(f"trainer.orders: {error}") from error

    def check_data(self, bundle: DataBundle) -> None:
        """Validation must never score a position with less context than the largest n of ``trainer.orders``:
        text windows must overlap by at least that much (``data.overlap``)."""
        super().check_data(bundle)
        overlap = bundle.splits.get("overlap")
        longest = max(self.trainer.orders, default=0)
        if overlap is not None and longest > overlap:
            raise ConfigError(f"trainer.orders reaches n={longest} but data.overlap={overlap}: the first "
                              f"positions of each validation window would see fewer than n tokens; set data.overlap "
                              f">= {longest}")  # fmt: skip

    def new_metrics(self) -> LanguageModelMetrics:
        return LanguageModelMetrics(self.trainer.orders)

    def score(self, model: nn.Module, batch: dict, metrics: LanguageModelMetrics, beam_size: int = 1) -> None:
        inputs = model_inputs(batch)
        if not self.trainer.orders:
            metrics.update(model(**inputs), batch)
        for n in self.trainer.orders:
            metrics.update(model(**inputs, order=n), batch, n)
