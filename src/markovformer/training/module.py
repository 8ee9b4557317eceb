"""The Lightning module every run trains: the model stays a plain ``nn.Module`` head and the task object says how to
train and score it; this adds the optimiser, the schedule, logging and the random state in checkpoints."""

from __future__ import annotations

import lightning as L
import torch

from markovformer.training.optim import build_optimizer, lr_multiplier
from markovformer.training.tasks import Task


class TrainingModule(L.LightningModule):
    """Trains ``model`` (a head returning ``.loss``) as ``task`` says and reports ``val/<metric>``.

    The RNG state is saved in checkpoints so that a resumed run draws the same dropout masks as an uninterrupted one;
    so is the task's own training state (the VMT's carried latent)."""

    def __init__(self, model: torch.nn.Module, task: Task) -> None:
        super().__init__()
        task.check_model(model)
        self.model, self.task, self.config = model, task, task.trainer
        self.val_metrics = task.new_metrics()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self.task.training_step(self, batch)

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self.task.start_scoring()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.task.score(self.model, batch, self.val_metrics)

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
        self.task.save_state(self, checkpoint)

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        if "torch_rng_state" in checkpoint:
            torch.set_rng_state(checkpoint["torch_rng_state"])
        self.task.load_state(checkpoint)
