"""One Lightning module for every task: the model stays a plain ``nn.Module`` head; this adds the optimiser,
schedule, regularisers, logging and metrics."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import lightning as L
import torch

from markovformer.models.vmt.documents import walk_documents
from markovformer.training.batches import window_stride, world
from markovformer.training.metrics import TaskMetrics
from markovformer.training.optim import build_optimizer, lr_multiplier
from markovformer.training.run_config import ConfigError, TrainerConfig

MODEL_INPUTS = ("input_ids", "input_features", "attention_mask", "labels", "order",
                "src_ids", "src_mask", "tgt_ids", "tgt_mask")  # fmt: skip
IW_SAMPLES = 10  # K of the importance-weighted bound that VMT validation and evaluation report


def model_inputs(batch: dict) -> dict:
    """The batch entries a head's forward takes (a source may carry extra keys; a training batch may carry the
    ``order`` drawn for it)."""
    return {key: value for key, value in batch.items() if key in MODEL_INPUTS}


def check_trainer_options(model: torch.nn.Module, config: TrainerConfig) -> None:
    """ConfigError unless the model takes what the trainer options pass to it: ``trainer.orders`` and
    ``trainer.label_smoothing`` (an ``order`` / ``label_smoothing`` forward argument, every listed n
    accepted), and, set away from their defaults, ``trainer.kl_warmup_steps`` (``kl_weight``), ``trainer.carry``
    (``carry``) and ``trainer.window_overlap`` (``carry_index``)."""
    accepted = inspect.signature(model.forward).parameters
    options = (("orders", "order", bool(config.orders)),
               ("label_smoothing", "label_smoothing", config.label_smoothing),
               ("kl_warmup_steps", "kl_weight", config.kl_warmup_steps),
               ("carry", "carry", not config.carry),
               ("window_overlap", "carry_index", config.window_overlap))  # fmt: skip
    for key, argument, used in options:
        if used and argument not in accepted:
            raise ConfigError(f"trainer.{key} is set but {type(model).__name__} takes no {argument} argument")
    window_size = getattr(model, "window_size", None)
    for n in config.orders if window_size is not None else ():
        try:
            window_size(n)
        except ValueError as error:
            raise ConfigError(f"trainer.orders: {error}") from error


def scored_outputs(model: torch.nn.Module, batch: dict, orders: tuple[int, ...] = ()) -> Iterator:
    """(n, output) for each order n the batch is scored with, or (None, output) once without them."""
    inputs = model_inputs(batch)
    if not orders:
        yield None, model(**inputs)
    for n in orders:
        yield n, model(**inputs, order=n)


def kl_weight(step: int, warmup_steps: int) -> float:
    """The KL weight of the ``step``-th optimiser step (1-based): rising linearly to 1 over ``warmup_steps``."""
    return 1.0 if warmup_steps == 0 else min(1.0, step / warmup_steps)


def document_inputs(batch: dict) -> dict:
    """The observations of a batch of windows or documents: ``input_ids`` or ``input_features``, ``attention_mask``."""
    return {key: batch[key] for key in ("input_ids", "input_features", "attention_mask") if key in batch}


class DocumentWalk:
    """The VMT's evaluation pass over whole documents; one per pass over a split (its noise restarts with it).

    Each batch of documents is walked window by window (``models.vmt.documents.walk_documents``, the latent carried
    when ``carry``); added per window: the ELBO and the importance-weighted bound with K = ``iw_samples``, each
    chained bound summing to a bound on the documents' log-likelihood. Noise comes from two generators of its own
    seeded by ``seed``, so validation never moves the training's random stream and a rerun gives the same numbers.
    """

    def __init__(self, carry: bool = True, iw_samples: int = IW_SAMPLES, seed: int = 0) -> None:
        self.carry, self.iw_samples, self.seed = carry, iw_samples, seed
        self.generators: tuple[torch.Generator, torch.Generator] | None = None

    def __call__(self, model: torch.nn.Module, batch: dict, metrics: TaskMetrics) -> None:
        inputs = document_inputs(batch)
        y = inputs.get("input_ids", inputs.get("input_features"))
        if self.generators is None:
            self.generators = tuple(torch.Generator(device=y.device).manual_seed(self.seed + i) for i in (0, 1))
        iw_samples = (self.iw_samples,) if self.iw_samples else ()
        for scores in walk_documents(model, y, inputs.get("attention_mask"), carry=self.carry, iw_samples=iw_samples,
                                     elbo_generator=self.generators[0], iw_generator=self.generators[1]):  # fmt: skip
            metrics.update_documents(scores.elbo, scores.bounds.get(self.iw_samples))


def score_batch(
    model: torch.nn.Module,
    batch: dict,
    metrics: TaskMetrics,
    orders: tuple[int, ...] = (),
    beam_size: int = 1,
    documents: DocumentWalk | None = None,
) -> None:
    """Add one batch to ``metrics``: the one evaluation pass that validation and ``runner.evaluate`` share. For
    translation it also decodes the sources (greedy, or beam search) and adds the translations for BLEU; for the
    VMT the batch holds whole documents, walked by ``documents``."""
    if metrics.task == "vmt":
        if documents is None:
            raise ValueError("scoring VMT documents needs a DocumentWalk")
        documents(model, batch, metrics)
        return
    for n, output in scored_outputs(model, batch, orders):
        metrics.update(output, batch, n)
    if metrics.task == "translation":
        source_length = int(batch["src_mask"].sum(-1).max()) if "src_mask" in batch else batch["src_ids"].shape[1]
        max_length = min(2 * source_length + 10, model.config.max_positions)  # fairseq's usual a·|x| + b cap
        generated = model.generate(batch["src_ids"], batch.get("src_mask"), max_new_tokens=max_length,
                                   num_beams=beam_size)  # fmt: skip
        metrics.update_translations(generated, batch["labels"])


class SequenceTask(L.LightningModule):
    """Trains ``model`` (a head returning ``.loss``) and reports ``val/<metric>`` for its task.

    The RNG state is saved in checkpoints so that a resumed run draws the same dropout masks as an uninterrupted one.

    Task vmt: training batches are windows walked along documents (``DocumentWindows``); the last step's
    ``output.carry`` is passed to the next step for the rows that continue their document (``carry_mask``), with
    ``carry_index`` the last position before the next window starts, and saved in checkpoints so that a resumed run
    carries it on. Validation walks whole documents (``DocumentWalk``).
    """

    def __init__(
        self, model: torch.nn.Module, task: str, trainer_config: TrainerConfig, data_info: dict, tokenizer=None
    ) -> None:
        super().__init__()
        check_trainer_options(model, trainer_config)
        self.model, self.task, self.config = model, task, trainer_config
        self.val_metrics = TaskMetrics(task, data_info.get("num_labels"), data_info.get("label_names"),
                                       trainer_config.orders, tokenizer=tokenizer)  # fmt: skip
        smoothing = trainer_config.label_smoothing
        self.train_options = {"label_smoothing": smoothing} if smoothing else {}  # training only: never in validation
        self.carry: torch.Tensor | None = None  # vmt: the last training step's carry (B, latent_dim)
        self.documents: DocumentWalk | None = None

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        if self.task == "vmt":
            return self._document_training_step(batch)
        output = self.model(**model_inputs(batch), **self.train_options)
        self.log("train/loss", output.loss.detach(), prog_bar=True, batch_size=len(batch["labels"]))
        regularization = getattr(self.model, "regularization_loss", None)  # a model's own extra terms, if it has any
        return output.loss if regularization is None else output.loss + regularization()

    def _document_training_step(self, batch: dict) -> torch.Tensor:
        continues = batch["carry_mask"]
        carried = {}
        if self.carry is not None and bool(continues.any()):
            carried = {"carry": self.carry.to(continues.device), "carry_mask": continues}
        stride = window_stride(self.model.config.window, self.config.window_overlap)
        output = self.model(**document_inputs(batch), **carried, carry_index=stride - 1,
                            kl_weight=kl_weight(self.global_step + 1, self.config.kl_warmup_steps))  # fmt: skip
        self.carry = output.carry if self.config.carry else None
        rows = len(continues)
        for name in ("loss", "elbo", "reconstruction", "kl"):
            self.log(f"train/{name}", getattr(output, name).detach(), prog_bar=name == "loss", batch_size=rows)
        return output.loss

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self.documents = DocumentWalk(self.config.carry) if self.task == "vmt" else None

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        score_batch(self.model, batch, self.val_metrics, self.config.orders, documents=self.documents)

    def on_validation_epoch_end(self) -> None:
        for name, value in self.val_metrics.compute().items():
            self.log(f"val/{name}", value, prog_bar=name == "loss", sync_dist=False)

    def configure_optimizers(self):
        config = self.config
        optimizer = build_optimizer(self.model, config.lr, config.weight_decay, tuple(config.betas))
        decay_steps = config.decay_steps or config.max_steps
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_multiplier(step, config.warmup_steps, decay_steps, config.decay, config.lr_floor)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint["torch_rng_state"] = torch.get_rng_state()
        if self.task == "vmt":  # every process's lanes, in rank order (every process runs this hook)
            carry = self.carry if self.carry is None or world()[1] == 1 else self.all_gather(self.carry).flatten(0, 1)
            checkpoint["vmt_carry"] = None if carry is None else carry.detach().cpu()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            torch.set_rng_state(checkpoint["torch_rng_state"])
        carry = checkpoint.get("vmt_carry")
        if carry is not None:
            rank, world_size = world()
            lanes = len(carry) // world_size
            self.carry = carry[rank * lanes : (rank + 1) * lanes]
