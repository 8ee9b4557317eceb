"""Training progress as plain lines (for logs and pipes), with the run's wall clock carried across resumes, and on a
terminal a progress bar (tqdm, which Lightning depends on) over the optimiser steps between the lines."""

from __future__ import annotations

import sys
import time

import lightning as L
from lightning.pytorch.callbacks import LearningRateMonitor


def starts_a_step(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether batch ``batch_idx`` is the first micro-batch of an optimiser step (every batch without gradient
    accumulation)."""
    return batch_idx % trainer.accumulate_grad_batches == 0


class PrintProgress(L.Callback):
    """Progress as lines (for logs and pipes) every ``every`` steps and after each validation, with the run's wall
    clock: the seconds of earlier processes up to the checkpoint this one resumed from, plus this process's.

    With ``bar`` (the runner passes ``sys.stdout.isatty()``), a tqdm bar of the optimiser steps with steps per second
    and the time left stands below the lines; it is cleared while a line is printed, so lines stay whole."""

    def __init__(self, every: int, total: int, train_label: str = "train loss", labels: dict | None = None,
                 bar: bool = False, stream=None) -> None:  # fmt: skip
        self.every, self.total, self.start, self.earlier = every, total, time.perf_counter(), 0.0
        self.train_label, self.labels = train_label, labels or {}  # the task's names (Task.train_loss_label, ...)
        self.show_bar, self.stream, self.bar = bar, stream, None
        self.shown_step = 0  # the last optimiser step given a line: accumulated micro-batches end on the same step
        self.step_lr = float("nan")  # the learning rate the step being taken uses (metrics.csv logs the same)

    @property
    def seconds(self) -> float:
        return self.earlier + time.perf_counter() - self.start

    def state_dict(self) -> dict:
        return {"train_seconds": self.seconds}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier, self.start = float(state_dict["train_seconds"]), time.perf_counter()

    def _print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.clear()
        print(line, file=self.stream or sys.stdout, flush=True)
        if self.bar is not None:
            self.bar.refresh()

    def on_train_start(self, trainer, module) -> None:
        self.shown_step = trainer.global_step
        if self.show_bar and trainer.is_global_zero:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=trainer.global_step, unit="step", dynamic_ncols=True,
                            file=self.stream or sys.stdout, leave=False)  # fmt: skip

    def on_train_end(self, trainer, module) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if starts_a_step(trainer, batch_idx):
            self.step_lr = trainer.optimizers[0].param_groups[0]["lr"]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if self.bar is not None and step > self.bar.n:
            self.bar.update(step - self.bar.n)
        if step == self.shown_step:  # a micro-batch of gradient accumulation: no optimiser step yet
            return
        self.shown_step = step
        if trainer.is_global_zero and (step % self.every == 0 or step == self.total):
            loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
            self._print(f"step {step:>6}/{self.total}  {self.train_label} {loss:.4f}  lr {self.step_lr:.2e}  "
                        f"{self.seconds:7.1f}s")  # fmt: skip

    def on_validation_end(self, trainer, module) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_global_zero:
            return
        shown = "  ".join(f"{self.labels.get(k[4:], k[4:])} {float(v):.4f}"
                          for k, v in trainer.callback_metrics.items() if k.startswith("val/"))  # fmt: skip
        self._print(f"step {trainer.global_step:>6}/{self.total}  validation: {shown}")


class StepLearningRateMonitor(LearningRateMonitor):
    """Lightning's learning-rate log, once per optimiser step: its own logs the rate at every micro-batch of a
    gradient accumulation (``accumulate_grad_batches`` rows of the same step in metrics.csv)."""

    def __init__(self) -> None:
        super().__init__(logging_interval="step")

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if starts_a_step(trainer, batch_idx):
            super().on_train_batch_start(trainer, module, batch, batch_idx)
