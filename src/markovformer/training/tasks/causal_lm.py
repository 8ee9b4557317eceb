"""Causal language modelling: next-token cross-entropy; with ``task_options.orders`` (models with a Markov context
window) every training batch uses one drawn n and validation scores every n."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from markovformer.data.bundle import DataBundle
from markovformer.training.tasks.base import LossMetric, Task, WeightedMean, model_inputs, perplexity
from markovformer.training.trainer_config import ConfigError, shown


def characters_of_ids(examples, tokenizer) -> np.ndarray | None:
    """The characters each token id adds to decoded text (``characters_of_ids`` of the tokenizer), for bits per
    character = the bits of the tokens scored over their characters, so that character and BPE runs compare. None for
    data that is not text windows of a token store (a synthetic chain's tokens are no characters), or splits read as
    one (``eval --split all``) of which one is not."""
    parts = examples.splits if hasattr(examples, "splits") else [examples]
    if tokenizer is None or any(getattr(part, "store", None) is None for part in parts):
        return None
    return tokenizer.characters_of_ids()


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
        """Add one batch's output; with orders, ``order`` says which n produced it."""
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
            self.accuracy.update((output.logits[:, :-1].argmax(-1) == targets)[scored].float())

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


@dataclass
class CausalLMOptions:
    """The causal LM's options (a run's ``task_options:`` section)."""

    # Models with a markov context window (scan_markov): each training batch uses an n drawn uniformly from this list
    # (a function of seed and step); validation scores every n and reports their mean as the loss. () = the model's.
    orders: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in self.orders):
            raise ConfigError(f"task_options.orders={shown(list(self.orders))} must be positive integers")
        if len(set(self.orders)) != len(self.orders):
            raise ConfigError(f"task_options.orders={shown(list(self.orders))} repeats a value")


class CausalLM(Task):
    name = "causal_lm"
    Options = CausalLMOptions
    forward_arguments = {"orders": "order", "label_smoothing": "label_smoothing"}
    continues_prompts = True
    characters_of_ids: np.ndarray | None = None  # of the split scored (describe_split): text only
    sizes_from_data = tuple(key for key in Task.sizes_from_data if key != "num_labels")  # predicts tokens, not labels

    def check_model(self, model: nn.Module) -> None:
        """Also: without ``task_options.orders`` the model's own window n (``model.order``) must fit in the
        validation windows' overlap, as every n of the orders must (``check_data``)."""
        super().check_model(model)
        for n in self.options.orders:
            try:
                model.window_size(n)  # a head that takes ``order`` has a Markov context window
            except ValueError as error:
                raise ConfigError(f"task_options.orders: {error}") from error
        overlap = getattr(self, "overlap", None)
        window = None if self.options.orders or not hasattr(model, "window_size") else model.window_size()
        if overlap is not None and window is not None and window > overlap:
            raise ConfigError(f"model.order={window} but data.overlap={overlap}: the first positions of each "
                              f"validation window would see fewer than n tokens; set data.overlap >= {window}")

    def check_data(self, bundle: DataBundle) -> None:
        """Reads the validation split's characters per token id (text). Validation must never score a position with
        less context than the largest n of ``task_options.orders``:
        text windows must overlap by at least that much (``data.overlap``); the model's own n is checked by
        ``check_model``."""
        super().check_data(bundle)
        self.describe_split(bundle.val, bundle.tokenizer)
        overlap = self.overlap = bundle.splits.get("overlap")
        longest = max(self.options.orders, default=0)
        if overlap is not None and longest > overlap:
            raise ConfigError(f"task_options.orders reaches n={longest} but data.overlap={overlap}: the first "
                              f"positions of each validation window would see fewer than n tokens; set data.overlap "
                              f">= {longest}")  # fmt: skip

    def batch_tokens(self, batch: dict) -> int:
        """The tokens predicted (the shifted labels that are not -100): B x seq_len for windows of seq_len + 1 tokens,
        the tokens seen as nanoGPT and the scaling literature count them."""
        return int((batch["labels"][:, 1:] != -100).sum())

    def describe_split(self, examples, tokenizer) -> None:
        self.characters_of_ids = characters_of_ids(examples, tokenizer)

    def new_metrics(self) -> LanguageModelMetrics:
        answers = "chance_accuracy" in self.info.get("reference", {})  # the synthetic tasks' data say what chance is
        return LanguageModelMetrics(self.options.orders, self.characters_of_ids, accuracy=answers)

    def score(self, model: nn.Module, batch: dict, metrics: LanguageModelMetrics, beam_size: int = 1) -> None:
        inputs = model_inputs(batch)
        if not self.options.orders:
            metrics.update(model(**inputs), batch)
        for n in self.options.orders:
            metrics.update(model(**inputs, order=n), batch, n)
