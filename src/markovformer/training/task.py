"""One Lightning module for every task: the model stays a plain ``nn.Module`` head; this adds the optimiser,
schedule, regularisers, logging and metrics."""

from __future__ import annotations

import lightning as L
import torch

from markovformer.training.metrics import TaskMetrics
from markovformer.training.optim import build_optimizer, lr_multiplier
from markovformer.training.run_config import TrainerConfig

MODEL_INPUTS = ("input_ids", "input_features", "attention_mask", "labels")


def model_inputs(batch: dict) -> dict:
    """The batch entries a head's forward takes (a source may carry extra keys)."""
    return {key: value for key, value in batch.items() if key in MODEL_INPUTS}


class SequenceTask(L.LightningModule):
    """Trains ``model`` (a head returning ``.loss``) and reports ``val/<metric>`` for its task.

    The RNG state is saved in checkpoints so that a resumed run draws the same dropout masks as an uninterrupted one.
    """

    def __init__(self, model: torch.nn.Module, task: str, trainer_config: TrainerConfig, data_info: dict) -> None:
        super().__init__()
        self.model, self.task, self.config = model, task, trainer_config
        self.val_metrics = TaskMetrics(task, data_info.get("num_labels"), data_info.get("label_names"))

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        output = self.model(**model_inputs(batch))
        self.log("train/loss", output.loss.detach(), prog_bar=True, batch_size=len(batch["labels"]))
        return output.loss + self.model.regularization_loss()

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.val_metrics.update(self.model(**model_inputs(batch)), batch)

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
