"""When and which step checkpoints a run writes, and what it adds to each.

``StepCheckpoints`` writes ``step-NNNNNN.ckpt`` and ``last.ckpt`` every ``checkpoint_every`` steps, as Lightning's
``ModelCheckpoint`` does, with two changes:

- at a step that is also due validation, the checkpoint is written after that validation instead of before it, so
  a run killed between the two resumes from the step before and validates when it reaches the step again (a
  checkpoint never stands for a step whose validation did not run);
- with ``keep`` > 0, only the newest ``keep`` step checkpoints stay (``last.ckpt`` always stays);
- file names are fixed (a resumed run overwrites ``last.ckpt``, never adds ``last-v1.ckpt``).
"""

from __future__ import annotations

import re
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint

from markovformer.training.fingerprint import CHECKPOINT_KEY

STEP_CHECKPOINT = re.compile(r"step-(\d+)\.ckpt")


def step_checkpoints(folder: Path) -> list[Path]:
    """The step checkpoints in ``folder``, oldest first."""
    found = [(int(m.group(1)), p) for p in folder.glob("step-*.ckpt") if (m := STEP_CHECKPOINT.fullmatch(p.name))]
    return [path for _, path in sorted(found)]


class StepCheckpoints(ModelCheckpoint):
    def __init__(self, dirpath: Path, every: int, eval_every: int, keep: int = 0) -> None:
        super().__init__(dirpath=dirpath, filename="step-{step:06d}", auto_insert_metric_name=False,
                         every_n_train_steps=every, save_top_k=-1, save_last=True,
                         enable_version_counter=False)  # fmt: skip
        self.eval_every, self.keep = eval_every, keep

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.eval_every == 0 and step % self._every_n_train_steps == 0:
            if not self._should_skip_saving_checkpoint(trainer):
                self._defer_save_until_validation = True  # ModelCheckpoint.on_validation_end saves it
            return
        super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing to restore: no best-k bookkeeping (every step file is kept or pruned by step), and a run directory
        that was moved or copied must not be warned about or reach back to its old path."""

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        super()._save_checkpoint(trainer, filepath)
        if self.keep > 0 and trainer.is_global_zero:
            for old in step_checkpoints(Path(self.dirpath))[: -self.keep]:
                old.unlink(missing_ok=True)


class RunFingerprint(L.Callback):
    """Stores the run's fingerprint (``training.fingerprint``) in every checkpoint."""

    def __init__(self, fingerprint: str) -> None:
        self.fingerprint = fingerprint

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = self.fingerprint


class LastValidation(L.Callback):
    """The metrics of the latest validation and its step, carried in checkpoints: a run resumed from the checkpoint
    of a validated step (its last, say, killed while writing its final files) reports them instead of validating
    again, which would log the step's validation row twice."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.metrics: dict[str, float] = {}

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.step = trainer.global_step
        self.metrics = {k[4:]: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}

    def state_dict(self) -> dict:
        return {"step": self.step, "metrics": self.metrics}

    def load_state_dict(self, state_dict: dict) -> None:
        self.step, self.metrics = state_dict["step"], dict(state_dict["metrics"])

    def metrics_at(self, step: int) -> dict[str, float] | None:
        return self.metrics if self.step == step and self.metrics else None


class ResumableEarlyStopping(EarlyStopping):
    """Lightning's early stopping, stopped again when resumed from a checkpoint written after it stopped: its
    patience count is restored but the trainer's stop flag is not, so a resumed early-stopped run trained on."""

    @property
    def state_key(self) -> str:  # Lightning's, so that checkpoints written with EarlyStopping itself still load
        return f"EarlyStopping{dict(monitor=self.monitor, mode=self.mode)!r}"

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.wait_count >= self.patience:
            trainer.should_stop = True


__all__ = ["LastValidation", "ResumableEarlyStopping", "RunFingerprint", "StepCheckpoints", "step_checkpoints"]
