"""Training progress as plain lines (for logs and pipes), with the run's wall clock carried across resumes, and on a
terminal a progress bar (tqdm, which Lightning depends on) over the optimiser steps between the lines."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateMonitor

from markovformer.training.tasks.base import real_positions


def starts_a_step(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether batch ``batch_idx`` is the first micro-batch of an optimiser step (every batch without gradient
    accumulation)."""
    return batch_idx % trainer.accumulate_grad_batches == 0


class PrintProgress(L.Callback):
    """Progress as lines (for logs and pipes) every ``every`` steps and after each validation, with the run's wall
    clock: the seconds of earlier processes up to the checkpoint this one resumed from, plus this process's. Each
    batch counts ``tokens_of`` it (the task's ``batch_tokens``; by default ``real_positions``). At each line and each
    checkpoint's step (``checkpoint_every``) every process's count is summed, with the steps' own seconds since
    (validation's left out, and the start-up, which ``seconds`` includes): ``tokens`` and ``step_seconds`` since the
    run started (so a checkpoint holds those of its steps), and each line gives the tokens per second of its steps.

    With ``bar`` (the runner passes ``sys.stdout.isatty()``), a tqdm bar of the optimiser steps with steps per second
    and the time left stands below the lines; it is cleared while a line is printed, so lines stay whole."""

    def __init__(self, every: int, total: int, train_label: str = "train loss", labels: dict | None = None,
                 bar: bool = False, stream=None, checkpoint_every: int | None = None,
                 tokens_of: Callable[[dict], int] = real_positions) -> None:  # fmt: skip
        self.every, self.total, self.start, self.earlier = every, total, time.perf_counter(), 0.0
        self.checkpoint_every, self.tokens_of = checkpoint_every or every, tokens_of
        self.train_label, self.labels = train_label, labels or {}  # the task's names (Task.train_loss_label, ...)
        self.show_bar, self.stream, self.bar = bar, stream, None
        self.shown_step = 0  # the last optimiser step given a line: accumulated micro-batches end on the same step
        self.step_lr = float("nan")  # the learning rate the step being taken uses (metrics.csv logs the same)
        # earlier processes' tokens and step seconds (up to the checkpoint resumed from; None: it did not count them)
        self.earlier_tokens: int | None = 0
        self.earlier_step_seconds: float | None = 0.0
        self.counted_tokens, self.counted_seconds = 0, 0.0  # this process's, every process's tokens
        self.local_tokens = 0  # this process's own since the last count
        self.count_start, self.validation_start = None, None  # the clock at the last count, and at validation's start
        self.since_count_validation = 0.0  # validation's seconds since the last count
        self.line_mark = (0, 0.0)  # (counted_tokens, counted_seconds) at the last line

    @property
    def seconds(self) -> float:
        return self.earlier + time.perf_counter() - self.start

    @property
    def tokens(self) -> int | None:
        return None if self.earlier_tokens is None else self.earlier_tokens + self.counted_tokens

    @property
    def step_seconds(self) -> float | None:
        return None if self.earlier_step_seconds is None else self.earlier_step_seconds + self.counted_seconds

    def state_dict(self) -> dict:
        return {"train_seconds": self.seconds, "tokens": self.tokens, "step_seconds": self.step_seconds}

    def load_state_dict(self, state_dict: dict) -> None:
        self.earlier, self.start = float(state_dict["train_seconds"]), time.perf_counter()
        self.earlier_tokens, self.earlier_step_seconds = state_dict.get("tokens"), state_dict.get("step_seconds")
        self.counted_tokens, self.counted_seconds, self.line_mark = 0, 0.0, (0, 0.0)

    def _print(self, line: str) -> None:
        if self.bar is not None:
            self.bar.clear()
        print(line, file=self.stream or sys.stdout, flush=True)
        if self.bar is not None:
            self.bar.refresh()

    def on_train_start(self, trainer, module) -> None:
        self.shown_step, self.local_tokens = trainer.global_step, 0
        self.count_start, self.since_count_validation = self.seconds, 0.0
        if self.show_bar and trainer.is_global_zero:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, initial=trainer.global_step, unit="step", dynamic_ncols=True,
                            file=self.stream or sys.stdout, leave=False)  # fmt: skip

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        if starts_a_step(trainer, batch_idx):
            self.step_lr = trainer.optimizers[0].param_groups[0]["lr"]

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
        self.local_tokens += self.tokens_of(batch)
        step = trainer.global_step
        if self.bar is not None and step > self.bar.n:
            self.bar.update(step - self.bar.n)
        if step == self.shown_step:  # a micro-batch of gradient accumulation: no optimiser step yet
            return
        self.shown_step = step
        line = step % self.every == 0 or step == self.total
        if line or step % self.checkpoint_every == 0:  # every process: the counts are summed over them
            self._count_tokens(trainer)
        if line:
            tokens, seconds = self.counted_tokens - self.line_mark[0], self.counted_seconds - self.line_mark[1]
            self.line_mark = (self.counted_tokens, self.counted_seconds)
            if trainer.is_global_zero:
                loss = float(trainer.callback_metrics.get("train/loss", float("nan")))
                rate = f"{tokens / seconds:>9,.0f} tok/s" if seconds > 0 else ""
                self._print(f"step {step:>6}/{self.total}  {self.train_label} {loss:.4f}  lr {self.step_lr:.2e}  "
                            f"{rate}  {self.seconds:7.1f}s")  # fmt: skip

    def _count_tokens(self, trainer) -> None:
        """Adds every process's tokens since the last count, and the steps' seconds since (validation's left out)."""
        tokens = self.local_tokens
        if trainer.world_size > 1:
            tokens = int(trainer.strategy.reduce(torch.tensor(tokens, device=trainer.strategy.root_device),
                                                 reduce_op="sum"))  # fmt: skip
        now = self.seconds
        self.counted_tokens, self.local_tokens = self.counted_tokens + tokens, 0
        if self.count_start is not None:
            self.counted_seconds += now - self.count_start - self.since_count_validation
        self.count_start, self.since_count_validation = now, 0.0

    def on_train_end(self, trainer, module) -> None:
        if self.local_tokens or trainer.world_size > 1:  # the steps after the last line (a stopped run's)
            self._count_tokens(trainer)
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def on_validation_start(self, trainer, module) -> None:
        self.validation_start = self.seconds

    def on_validation_end(self, trainer, module) -> None:
        if self.validation_start is not None:
            self.since_count_validation += self.seconds - self.validation_start
            self.validation_start = None
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
