"""The divergence guard: a non-finite loss or gradient norm stops the run at that step, before the optimiser applies
it, so no checkpoint and no final model ever holds the diverged weights, and the run stays resumable with a lower
learning rate (``--resume RUN trainer.lr=...``)."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import torch

from markovformer.training.checkpoint import step_checkpoints
from markovformer.training.run_dir import resume_advice
from markovformer.training.trainer_config import TrainingDiverged


def gradient_norm(module: torch.nn.Module) -> torch.Tensor:
    """The 2-norm of all gradients (those of every rank, once DDP has averaged them), as a 0-dim tensor."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros(())
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


class DivergenceGuard(L.Callback):
    """Checks the step's loss (every micro-batch's) and its gradient norm before the optimiser step; raises
    ``TrainingDiverged`` naming the step, the value, the last checkpoint and what to lower. With ``16-mixed``
    precision non-finite gradients are the loss scaler's business (it skips the step), so only the loss is checked."""

    def __init__(self, run_dir: Path, lr: float, check_gradients: bool = True) -> None:
        self.run_dir, self.lr, self.check_gradients = run_dir, lr, check_gradients
        self.loss: torch.Tensor | None = None
        self.step_begins = True  # the next backward is the first micro-batch's of its step

    def on_before_backward(self, trainer: L.Trainer, module: L.LightningModule, loss: torch.Tensor) -> None:
        # the micro-batch's loss as its task computed it: what Lightning backpropagates is TrainingModule's sum of it
        # over the items, rescaled (training_step), a number no log shows. Of a step's micro-batches, the first
        # non-finite loss, else the last: a finite loss after it hid it (their summed gradient is non-finite alike)
        loss = getattr(module, "batch_loss", loss).detach()
        self.loss = loss if self.step_begins else torch.where(torch.isfinite(self.loss), loss, self.loss)
        self.step_begins = False

    def on_before_optimizer_step(self, trainer: L.Trainer, module: L.LightningModule, optimizer) -> None:
        # one device-to-host transfer per step: both values are read only when one of them is not finite
        self.step_begins = True
        loss = self.loss if self.loss is not None else torch.zeros(())
        norm = gradient_norm(module).to(loss.device) if self.check_gradients else torch.zeros((), device=loss.device)
        if bool(torch.isfinite(loss) & torch.isfinite(norm)):
            return
        step = trainer.global_step + 1  # the step this update would complete
        if not math.isfinite(float(loss)):
            raise TrainingDiverged(self.message(step, f"the training loss is {float(loss)}"))
        raise TrainingDiverged(self.message(step, f"the gradient norm is {float(norm)} (loss {float(loss):.6g})"))

    def message(self, step: int, what: str) -> str:
        saved = step_checkpoints(self.run_dir / "checkpoints")
        last = f"its last checkpoint, {saved[-1].name}, is whole" if saved else "it has no checkpoint yet"
        return (f"training diverged at step {step}: {what}; the run stopped and {last}: lower the learning rate "
                f"(trainer.lr={self.lr:g} now) or trainer.gradient_clip and continue with "
                f"{resume_advice(self.run_dir, 'trainer.lr=...', command=True)}")  # fmt: skip


__all__ = ["DivergenceGuard", "TrainingDiverged", "gradient_norm"]
