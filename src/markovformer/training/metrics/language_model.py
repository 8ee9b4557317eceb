"""A language model's metrics: cross-entropy, bits per token and character, perplexity; per n with orders."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from markovformer.training.metrics.base import LossMetric, WeightedMean, perplexity


class LanguageModelMetrics(LossMetric):
    """Token-weighted cross-entropy (so uneven batches average correctly), bits per token and perplexity; for text
    (``characters_of_ids``: the characters of each token id), bits per character too: the bits of the tokens scored
    over the characters of those tokens (an end of document is a token scored, and no character).

    With ``orders``, every batch is scored once per n, ``update`` is told which, and ``loss`` is the mean over n
    of each n's token-weighted loss (``loss_n<n>``): the cross-entropy of an equal mixture of the n-gram predictions,
    since every n is scored on the same tokens. With ``accuracy`` (a task whose labels are answers: MQAR's values,
    an induction target), ``accuracy``: the share of scored targets whose most likely token is the label."""

    def __init__(self, orders: tuple[int, ...] = (), characters_of_ids: np.ndarray | None = None,
                 accuracy: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.orders = tuple(orders)
        self.loss_by_order = nn.ModuleList(WeightedMean() for _ in self.orders)
        self.accuracy = WeightedMean() if accuracy and not self.orders else None
        self.characters = None if characters_of_ids is None else WeightedMean()  # per token scored
        if characters_of_ids is not None:
            self.register_buffer("characters_of_ids", torch.as_tensor(characters_of_ids), persistent=False)

    def update(self, output, batch: dict, order: int | None = None) -> None:
        """Add one batch's score (a ``models.scoring.Score``: its ``loss``, and with ``accuracy`` its
        ``most_likely`` tokens); with orders, ``order`` says which n produced it."""
        if not (order in self.orders if self.orders else order is None):
            raise ValueError(f"order={order!r}: these metrics score n in {self.orders}")
        count = (batch["labels"][:, 1:] != -100).sum()  # the head shifts the labels inside
        loss = self.loss if order is None else self.loss_by_order[self.orders.index(order)]
        loss.update(output.loss.detach(), weight=count)
        targets = batch["labels"][:, 1:]
        scored = targets != -100
        if self.characters is not None:  # (every n scores the same tokens: their mean is the same)
            table = self.characters_of_ids
            self.characters.update(table[targets[scored].to(table.device)])
        if self.accuracy is not None:
            self.accuracy.update((output.most_likely[:, :-1] == targets)[scored].float())

    def compute(self) -> dict[str, float]:
        by_order = {f"loss_n{n}": float(m.compute()) for n, m in zip(self.orders, self.loss_by_order, strict=True)}
        loss = sum(by_order.values()) / len(by_order) if by_order else float(self.loss.compute())
        results = {"loss": loss, "bits_per_token": loss / math.log(2), "perplexity": perplexity(loss)}
        characters = float(self.characters.compute()) if self.characters is not None else 0.0
        if characters > 0:  # (the loss is a mean over the same tokens: bits per token x tokens / characters)
            results["bits_per_character"] = results["bits_per_token"] / characters
        if self.accuracy is not None:
            results["accuracy"] = float(self.accuracy.compute())
        return {**results, **by_order}
