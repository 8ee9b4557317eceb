"""Causal language modelling: next-token cross-entropy; with ``task_options.orders`` (models with a Markov context
window) every training batch uses one drawn n and validation scores every n."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from torch import Tensor, nn

from markovformer.data.bundle import DataBundle
from markovformer.ops.losses import IGNORE_INDEX, next_token_targets
from markovformer.training.tasks.base import Task, model_inputs
from markovformer.training.trainer_config import ConfigError, shown

if TYPE_CHECKING:  # the metrics are imported where scoring starts (``new_metrics``)
    from markovformer.training.metrics import LanguageModelMetrics


def characters_of_ids(examples, tokenizer) -> np.ndarray | None:
    """The characters each token id adds to decoded text (``characters_of_ids`` of the tokenizer), for bits per
    character = the bits of the tokens scored over their characters, so that character and BPE runs compare. None for
    data that is not text windows of a token store (a synthetic chain's tokens are no characters), or splits read as
    one (``eval --split all``) of which one is not."""
    parts = examples.splits if hasattr(examples, "splits") else [examples]
    if tokenizer is None or any(getattr(part, "store", None) is None for part in parts):
        return None
    return tokenizer.characters_of_ids()


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

    def loss_items(self, batch: dict) -> int:
        """The next tokens scored: the shifted labels that are not -100, less each packed document's first token
        (which the model does not score: its prediction would read the document before)."""
        position_ids = batch.get("position_ids")
        targets = next_token_targets(batch["labels"], position_ids if isinstance(position_ids, Tensor) else None)
        return int((targets != IGNORE_INDEX).sum())

    def describe_split(self, examples, tokenizer) -> None:
        self.characters_of_ids = characters_of_ids(examples, tokenizer)

    def new_metrics(self) -> LanguageModelMetrics:
        from markovformer.training.metrics import LanguageModelMetrics  # deferred: see Task.new_metrics

        answers = "chance_accuracy" in self.info.get("reference", {})  # the synthetic tasks' data say what chance is
        return LanguageModelMetrics(self.options.orders, self.characters_of_ids, accuracy=answers)

    def score(self, model: nn.Module, batch: dict, metrics: LanguageModelMetrics, beam_size: int = 1) -> None:
        """The head's ``next_token_score`` of the batch (its forward's numbers without holding its logits), once per
        n of the orders."""
        inputs, most_likely = model_inputs(batch), metrics.accuracy is not None
        for n in self.options.orders or (None,):
            order = {} if n is None else {"order": n}
            metrics.update(model.next_token_score(**inputs, **order, most_likely=most_likely), batch, n)
