"""Training progress as plain lines (for logs and pipes), with the run's wall clock carried across resumes."""

from __future__ import annotations

import time

import lightning as L


class PrintProgress(L.Callback):
    """Progress as lines (for logs and pipes) every ``every`` steps and after each validation, with the run's wall
    clock: the seconds of earlier processes up to the checkpoint this one resumed from, plus this process's."""

    def __init__(self, every: int, total: int, train_label: str = "train loss", labels: dict | None = None) -> None:
        self.every, self.total, self.start, self.earlier = every, total, time.perf_counter(), 0.0
        self.train_label, self.labels = train_label, labels or {}  # the task's names (Task.train_loss_label, ...)

    @property
    def seconds(self) -> float:
        return self.earlier + time.perf_counter() - self.start

    def state_dict(self) -> dict:
        return {"train_seconds": self.seconds}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier, self.start = float(state_dict["train_seconds"]), time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if trainer.is_global_zero and (step % self.every == 0 or step == self.total):
            lr = trainer.optimizers[0].param_groups[0]["lr"]
            loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
            print(f"step {step:>6}/{self.total}  {self.train_label} {loss:.4f}  lr {lr:.2e}  {self.seconds:7.1f}s",
                  flush=True)  # fmt: skip

    def on_validation_end(self, trainer, module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero:
            return
        shown = "  ".join(f"{self.labels.get(k[4:], k[4:])} {float(v):.4f}"
                          for k, v in trainer.callback_metrics.items() if k.startswith("val/"))  # fmt: skip
        print(f"step {trainer.global_step:>6}/{self.total}  validation: {shown}", flush=True)
