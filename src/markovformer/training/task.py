"""One Lightning module for every task: the model stays a plain ``nn.Module`` head; this adds the optimiser,
schedule, regularisers, logging and metrics."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import lightning as L
import torch

from markovformer.training.metrics import TaskMetrics
from markovformer.training.optim import build_optimizer, lr_multiplier
from markovformer.training.run_config import ConfigError, TrainerConfig

MODEL_INPUTS = ("input_ids", "input_features", "attention_mask", "labels", "context_length",
                "src_ids", "src_mask", "tgt_ids", "tgt_mask")  # fmt: skip


def model_inputs(batch: dict) -> dict:
    """The batch entries a head's forward takes (a source may carry extra keys; a training batch may carry the
    ``context_length`` drawn for it)."""
    return {key: value for key, value in batch.items() if key in MODEL_INPUTS}


def check_trainer_options(model: torch.nn.Module, config: TrainerConfig) -> None:
    """ConfigError unless the model takes what ``trainer.context_lengths`` and ``trainer.label_smoothing`` pass to it
    (a ``context_length`` / ``label_smoothing`` forward argument) and accepts every listed n."""
    accepted = inspect.signature(model.forward).parameters
    for key, used in (("context_length", bool(config.context_lengths)), ("label_smoothing", config.label_smoothing)):
        if used and key not in accepted:
            raise ConfigError(f"trainer.{key}{'s' if key == 'context_length' else ''} is set but "
                              f"{type(model).__name__} takes no {key} argument")  # fmt: skip
    window_size = getattr(model, "window_size", None)
    for n in config.context_lengths if window_size is not None else ():
        try:
            window_size(n)
        except ValueError as error:
            raise ConfigError(f"trainer.context_lengths: {error}") from error


def scored_outputs(model: torch.nn.Module, batch: dict, context_lengths: tuple[int, ...] = ()) -> Iterator:
    """(n, output) for each context length n the batch is scored with, or (None, output) once without them."""
    inputs = model_inputs(batch)
    if not context_lengths:
        yield None, model(**inputs)
    for n in context_lengths:
        yield n, model(**inputs, context_length=n)


def score_batch(
    model: torch.nn.Module, batch: dict, metrics: TaskMetrics, context_lengths: tuple[int, ...] = (), beam_size: int = 1
) -> None:
    """Add one batch to ``metrics``: the one evaluation pass that validation and ``runner.evaluate`` share. For
    translation it also decodes the sources (greedy, or beam search) and adds the translations for BLEU."""
    for n, output in scored_outputs(model, batch, context_lengths):
        metrics.update(output, batch, n)
    if metrics.task == "translation":
        source_length = int(batch["src_mask"].sum(-1).max()) if "src_mask" in batch else batch["src_ids"].shape[1]
        max_length = min(2 * source_length + 10, model.config.max_positions)  # fairseq's usual a·|x| + b cap
        generated = model.generate(batch["src_ids"], batch.get("src_mask"), beam_size=beam_size, max_length=max_length)
        metrics.update_translations(generated.sequences, batch["labels"])


class SequenceTask(L.LightningModule):
    """Trains ``model`` (a head returning ``.loss``) and reports ``val/<metric>`` for its task.

    The RNG state is saved in checkpoints so that a resumed run draws the same dropout masks as an uninterrupted one.
    """

    def __init__(
        self, model: torch.nn.Module, task: str, trainer_config: TrainerConfig, data_info: dict, tokenizer=None
    ) -> None:
        super().__init__()
        check_trainer_options(model, trainer_config)
        self.model, self.task, self.config = model, task, trainer_config
        self.val_metrics = TaskMetrics(task, data_info.get("num_labels"), data_info.get("label_names"),
                                       trainer_config.context_lengths, tokenizer=tokenizer)  # fmt: skip
        smoothing = trainer_config.label_smoothing
        self.train_options = {"label_smoothing": smoothing} if smoothing else {}  # training only: never in validation

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        output = self.model(**model_inputs(batch), **self.train_options)
        self.log("train/loss", output.loss.detach(), prog_bar=True, batch_size=len(batch["labels"]))
        regularization = getattr(self.model, "regularization_loss", None)  # a model's own extra terms, if it has any
        return output.loss if regularization is None else output.loss + regularization()

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        score_batch(self.model, batch, self.val_metrics, self.config.context_lengths)

    def on_validation_epoch_end(self) -> None:
        for name, value in self.val_metrics.compute().items():
            self.log(f"val/{name}", value, prog_bar=name == "loss", sync_dist=False)

    def configure_optimizers(self):
        config = self.config
        optimizer = build_optimizer(self.model, config.lr, config.weight_decay, tuple(config.betas))
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_multiplier(step, config.warmup_steps, config.max_steps, config.decay, config.lr_floor),
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["torch_rng_state"] = torch.get_rng_state()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            torch.set_rng_state(checkpoint["torch_rng_state"])
