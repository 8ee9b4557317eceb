"""The Lightning wrapper around a plain ``nn.Module`` head: optimisation, regularisers and logging."""

from __future__ import annotations

import math

import lightning as L
import torch

from markovformer.training.optim import build_optimizer, lr_multiplier


class CausalLMTask(L.LightningModule):
    """Next-token training of a ``...ForCausalLM``: loss + the model's ``regularization_loss()``.

    Logs ``train/loss`` and, on validation, ``val/loss`` (nats per predicted token) and ``val/bits_per_token``.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        lr: float = 3e-3,
        weight_decay: float = 0.1,
        warmup_steps: int = 100,
        total_steps: int = 1000,
        decay: str = "cosine",
    ) -> None:
        super().__init__()
        self.model = model
        self.lr, self.weight_decay = lr, weight_decay
        self.warmup_steps, self.total_steps, self.decay = warmup_steps, total_steps, decay
        self._val_sum = self._val_count = 0.0

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        output = self.model(batch["input_ids"], labels=batch["labels"])
        loss = output.loss + self.model.regularization_loss()
        self.log("train/loss", output.loss, prog_bar=True)
        return loss

    def on_validation_epoch_start(self) -> None:
        self._val_sum = self._val_count = 0.0

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        output = self.model(batch["input_ids"], labels=batch["labels"])
        count = int((batch["labels"][:, 1:] != -100).sum())
        self._val_sum += float(output.loss) * count  # token-weighted, so uneven batches average correctly
        self._val_count += count

    def on_validation_epoch_end(self) -> None:
        loss = self._val_sum / max(self._val_count, 1)
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/bits_per_token", loss / math.log(2))

    def configure_optimizers(self):
        optimizer = build_optimizer(self.model, self.lr, self.weight_decay)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_multiplier(step, self.warmup_steps, self.total_steps, self.decay)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}
