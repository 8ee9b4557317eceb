"""When and which step checkpoints a run writes, and what it adds to each.

``StepCheckpoints`` writes ``step-NNNNNN.ckpt`` and ``last.ckpt`` every ``checkpoint_every`` steps, as Lightning's
``ModelCheckpoint`` does, with these changes:

- at a step that is also due validation, the checkpoint is written after that validation instead of before it, so
  a run killed between the two resumes from the step before and validates when it reaches the step again (a
  checkpoint never stands for a step whose validation did not run);
- at any other step, the checkpoint is taken at the end of the step, as Lightning's, but written only once
  Lightning has logged the step's rows (at the next batch's start, when training ends or on SIGTERM): a run resumed
  from it never logs that step again, so a kill between the two lost the step's rows for good;
- the loggers are flushed before each checkpoint is written (TensorBoard holds its events in a queue);
- with ``keep`` > 0, only the newest ``keep`` step checkpoints stay (``last.ckpt`` always stays), and the one of
  early stopping's best validation (``ResumableEarlyStopping.best_step``), whose weights its stop line names;
- file names are fixed (a resumed run overwrites ``last.ckpt``, never adds ``last-v1.ckpt``).
"""

from __future__ import annotations

from pathlib import Path
from weakref import proxy

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from markovformer.training.checkpoint import STEP_CHECKPOINT, step_checkpoints
from markovformer.training.fingerprint import CHECKPOINT_KEY, SETTINGS_KEY


class StepCheckpoints(ModelCheckpoint):
    def __init__(self, dirpath: Path, every: int, eval_every: int, keep: int = 0) -> None:
        super().__init__(dirpath=dirpath, filename="step-{step:06d}", auto_insert_metric_name=False,
                         every_n_train_steps=every, save_top_k=-1, save_last=True,
                         enable_version_counter=False)  # fmt: skip
        self.eval_every, self.keep = eval_every, keep
        self.taken: list[tuple[str, dict]] = []  # (path, checkpoint) taken at a step's end, not written yet
        self._taking = False

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step % self.eval_every == 0 and step % self._every_n_train_steps == 0:
            if not self._should_skip_saving_checkpoint(trainer):
                self._defer_save_until_validation = True  # ModelCheckpoint.on_validation_end saves it
            return
        self._taking = True  # Lightning logs the step's rows after this hook: take the checkpoints, write them later
        try:
            super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)
        finally:
            self._taking = False

    # The first hook after the rows are logged; nothing a checkpoint holds changes before it (the weights, the
    # optimiser state and the step's counters stay as they were: the next optimiser step comes after these hooks).
    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx) -> None:
        self._write_taken(trainer)

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._write_taken(trainer)

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._write_taken(trainer)
        super().on_train_end(trainer, module)

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, SIGTERMException):  # raised once the step is logged: its checkpoint stands
            self._write_taken(trainer, barrier=False)  # (not another failure: it may have cut the logging short)
        self.taken = []
        super().on_exception(trainer, module, exception)

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing to restore: no best-k bookkeeping (every step file is kept or pruned by step), and a run directory
        that was moved or copied must not be warned about or reach back to its old path."""

    def on_load_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict) -> None:
        """Lightning's count of the steps logged, as a checkpoint taken at a step's end holds it: one behind
        ``global_step`` (Lightning counts the step after its checkpoint hooks and adds it again on restart). The
        last.ckpt Lightning writes when training ends (a run shorter than ``checkpoint_every``) counts the last step
        already; restarted from it, Lightning adds it again only when that step is one it validates (it passes the
        step once more to skip its validation), so only then is the count set back, else an extension of that run
        logged every row one step late."""
        loop = checkpoint.get("loops", {}).get("fit_loop", {})
        counts, progress = loop.get("epoch_loop.state_dict", {}), loop.get("epoch_loop.batch_progress", {})
        step = checkpoint.get("global_step", 0)
        validated = step % self.eval_every == 0  # the step at which Lightning restarts (eval_every of this resume)
        if step > 0 and counts.get("_batches_that_stepped") == step and not progress.get("is_last_batch") and validated:
            counts["_batches_that_stepped"] = step - 1

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        if self._taking:  # what trainer.save_checkpoint writes, written by _write_taken
            self.taken.append((filepath, trainer._checkpoint_connector.dump_checkpoint(self.save_weights_only)))
            self._last_global_step_saved, self._last_checkpoint_saved = trainer.global_step, filepath
            return
        flush_loggers(trainer)
        super()._save_checkpoint(trainer, filepath)
        self._prune(trainer)

    def _write_taken(self, trainer: L.Trainer, barrier: bool = True) -> None:
        taken, self.taken = self.taken, []
        for filepath, checkpoint in taken:
            flush_loggers(trainer)
            trainer.strategy.save_checkpoint(checkpoint, filepath)
            if barrier:  # not while failing: another process may not reach it
                trainer.strategy.barrier("StepCheckpoints")
            if trainer.is_global_zero:
                for logger in trainer.loggers:
                    logger.after_save_checkpoint(proxy(self))
            self._prune(trainer)

    def _prune(self, trainer: L.Trainer) -> None:
        if self.keep > 0 and trainer.is_global_zero:
            best = {c.best_step for c in trainer.callbacks if isinstance(c, ResumableEarlyStopping)}
            for old in step_checkpoints(Path(self.dirpath))[: -self.keep]:
                if int(STEP_CHECKPOINT.fullmatch(old.name).group(1)) not in best:
                    old.unlink(missing_ok=True)


def flush_loggers(trainer: L.Trainer) -> None:
    """Put every logged row on disk (a checkpoint must not stand for rows a kill could still lose)."""
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.save()


class RunFingerprint(L.Callback):
    """Stores the run's fingerprint (``training.fingerprint``) in every checkpoint, and the settings its steps were
    trained with (``run_checks.trained_settings``) when given."""

    def __init__(self, fingerprint: str, settings: str | None = None) -> None:
        self.fingerprint, self.settings = fingerprint, settings

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict) -> None:
        checkpoint[CHECKPOINT_KEY] = self.fingerprint
        if self.settings is not None:
            checkpoint[SETTINGS_KEY] = self.settings


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
    patience count is restored but the trainer's stop flag is not, so a resumed early-stopped run trained on. It
    also records the step of its best validation (``best_step``, kept in checkpoints): the run's model/ is its last
    step's weights, and the best's checkpoint is kept from ``keep_checkpoints`` pruning and named in the stop line."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.best_step: int | None = None

    def _run_early_stopping_check(self, trainer: L.Trainer) -> None:
        best = self.best_score
        super()._run_early_stopping_check(trainer)
        if self.best_score is not best:  # Lightning replaced it: this validation improved on it (any device)
            self.best_step = trainer.global_step

    def state_dict(self) -> dict:
        return {**super().state_dict(), "best_step": self.best_step}

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self.best_step = state_dict.get("best_step")  # absent from checkpoints written before it was recorded

    @property
    def state_key(self) -> str:  # Lightning's, so that checkpoints written with EarlyStopping itself still load
        return f"EarlyStopping{dict(monitor=self.monitor, mode=self.mode)!r}"

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self.wait_count >= self.patience:
            trainer.should_stop = True

    def stopped(self, trainer: L.Trainer) -> dict | None:
        """What metrics.json's ``early_stopping`` says of a run it stopped before ``max_steps``: the best score, its
        step and its checkpoint (relative to the run; None when the run kept none), the step it stopped at; None
        when it did not stop the run."""
        if self.wait_count < self.patience or trainer.global_step >= trainer.max_steps:
            return None
        folder, best = self._best_checkpoint(trainer)
        return {"monitor": self.monitor, "best": float(self.best_score), "best_step": self.best_step,
                "best_checkpoint": f"{folder.name}/{best.name}" if best is not None and best.is_file() else None,
                "stopped_at_step": trainer.global_step, "max_steps": trainer.max_steps,
                "validations_without_improvement": int(self.wait_count)}  # fmt: skip

    def stop_line(self, trainer: L.Trainer) -> str | None:
        """The line a run it stopped before ``max_steps`` prints (Lightning's own message is silenced with its logs,
        so the run ended at step 9 of 60 without a word); None when it did not stop the run."""
        if (stopped := self.stopped(trainer)) is None:
            return None
        folder, best = self._best_checkpoint(trainer)
        where = ""  # where the best validation's weights are: its step checkpoint, when the run wrote one and kept it
        if best is not None and best.is_file():
            where = f", the best's are in {best}"
        elif best is not None:
            where = f"; no checkpoint of step {self.best_step} is in {folder}"
        step = f" (step {self.best_step})" if self.best_step is not None else ""
        return (f"early stopping: {self.monitor} has not improved on its best, {stopped['best']:.4f}{step}, in "
                f"{self.wait_count} validations: the run stopped at step {trainer.global_step} of {trainer.max_steps}; "
                f"model/ holds the weights of step {trainer.global_step}{where}")  # fmt: skip

    def _best_checkpoint(self, trainer: L.Trainer) -> tuple[Path | None, Path | None]:
        """The run's checkpoint folder and the path the best validation's checkpoint has there (None, None: no
        folder or no best)."""
        folders = [Path(c.dirpath) for c in trainer.callbacks if isinstance(c, StepCheckpoints)]
        if self.best_step is None or not folders:
            return None, None
        return folders[0], folders[0] / f"step-{self.best_step:06d}.ckpt"


__all__ = ["LastValidation", "ResumableEarlyStopping", "RunFingerprint", "StepCheckpoints"]
