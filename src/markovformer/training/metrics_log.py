"""The run's CSV metrics log (``logs/metrics.csv``): one row per ``log_metrics`` call, appended and flushed at once,
so a kill loses at most the row being written; never rewritten from a partial copy.

Lightning's own ``CSVLogger`` deletes an existing ``metrics.csv`` when it starts and buffers rows in memory, so a
resume that failed, or a run killed twice, lost rows. Here a resumed run keeps every earlier row: the rows that the
resumed run will log again (those of steps at or after the checkpoint it resumed from) are dropped only when it logs
its first row, and a row cut short by a kill is repaired away at the same moment. Both rewrites (and a new column,
which changes the header) replace the file atomically with the whole of its old contents plus the change.

The ``step`` column counts optimiser steps done, from 1, as the console's ``step N/M`` lines do (Lightning hands a
logger the steps done before the batch, so the batch that reaches step g would be logged under g - 1). The run's
TensorBoard events (``RunTensorBoardLogger``) carry the same steps, and a resumed run purges the events it logs again.
"""

from __future__ import annotations

import csv
import io
import math
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.loggers.logger import Logger
from lightning.pytorch.utilities import rank_zero_only

from markovformer.atomic import atomic_write, write_point
from markovformer.training.log_rows import read_log_rows


@contextmanager
def naming_failed_writes(path: Path) -> Iterator[None]:
    """Name ``path`` in an OSError that names no file: a failed write() or close() names none (a full disk read "no
    space left on the device while writing a file")."""
    try:
        yield
    except OSError as error:
        if error.errno is None or error.filename is not None:
            raise
        raise OSError(error.errno, error.strerror, str(path)) from error


@contextmanager
def tensorboard_thread_errors_left_to_the_run() -> Iterator[None]:
    """Leave a failed write of TensorBoard's writer thread (a full disk) to the run, which the writer raises it to at
    its next call: the thread raised it too, so the process printed the thread's traceback above the run's one-line
    error. The process's own hook (``threading.excepthook``) takes every other thread's error, and is back after."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        # (by its module, not by importing tensorboard's private writer class: a renamed class leaves runs working)
        if not type(args.thread).__module__.startswith("tensorboard."):
            previous(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = previous


def _row_step(row: dict[str, str]) -> int:
    try:
        return int(float(row["step"]))
    except (TypeError, ValueError):
        return -1  # a damaged step cell: kept as an earlier row


class AppendingCSVLogger(Logger):
    """A Lightning logger that appends to ``path``; ``resume_from_step(g)`` makes the first row logged drop the old
    rows of steps > g (those the resumed run logs again).

    Rows are labelled with the steps done, as the console prints them: Lightning passes the batches stepped before
    the one logging, so one is added; a validation after fit has ended (``trainer.validate``) is labelled with the
    steps the run has done (``after_fit``)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self.columns: list[str] | None = None  # read from the file on the first write
        self.drop_from_step: int | None = None
        self.after_fit_step: int | None = None
        self.relogged = False  # the last row replaced one an earlier process logged (the validation after fit)

    def after_fit(self, step: int) -> None:
        """Label the rows from here on (the validation after fit) with ``step``, the steps the run has done: a run
        resumed at its last step has Lightning's count one behind (its checkpoint is written before the count is).
        That validation replaces one of the same step an earlier process logged (killed in its final files)."""
        self.after_fit_step = step

    @property
    def name(self) -> str:
        return "logs"

    @property
    def version(self) -> str:
        return ""

    @property
    def save_dir(self) -> str:
        return str(self.path.parent)

    def resume_from_step(self, step: int) -> None:
        self.drop_from_step = step

    def labelled(self, metrics: dict[str, float], step: int | None) -> tuple[dict[str, float], int | None]:
        """What Lightning's ``log_metrics(metrics, step)`` logs and the step it is labelled with: the steps done (see
        the class). Lightning's epoch count is left out: a run's training stream is one endless Lightning epoch, so
        it read 0 after any number of passes over the data."""
        metrics = {key: value for key, value in metrics.items() if key != "epoch"}
        if self.after_fit_step is None:
            return metrics, None if step is None else step + 1
        return metrics, self.after_fit_step

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        """The resolved config is the run's config.yaml; nothing to add to the CSV."""

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        metrics, done = self.labelled(metrics, step)
        row = {"step": "" if done is None else str(done)}  # steps done, as printed
        for key, value in metrics.items():
            value = float(value)
            row[key] = repr(value) if math.isfinite(value) else str(value)
        if self.columns is None:
            self._start()
        # the validation after fit replaces one of its step that an earlier process logged
        validated = [key for key in metrics if key.startswith("val/")] if self.after_fit_step is not None else []

        def repeated(old: dict[str, str]) -> bool:
            return _row_step(old) == done and any(old.get(key) for key in validated)

        replaced = self.relogged = bool(validated) and any(repeated(old) for old in read_log_rows(self.path)[1])
        if replaced or any(key not in self.columns for key in row):
            kept = [old for old in read_log_rows(self.path)[1] if not repeated(old)]
            self._rewrite(sorted(set(self.columns) | set(row)), [*kept, row])
            return
        write_point()
        with naming_failed_writes(self.path), self.path.open("a", encoding="utf-8", newline="") as handle:
            csv.DictWriter(handle, fieldnames=self.columns).writerow(row)
            handle.flush()

    def _start(self) -> None:
        """Repair the file left by earlier processes: no torn last row, none of the steps this run logs again."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        columns, rows = read_log_rows(self.path)
        kept = rows if self.drop_from_step is None else [r for r in rows if _row_step(r) <= self.drop_from_step]
        whole = self.path.is_file() and self.path.read_bytes().endswith(b"\n")
        if columns and whole and len(kept) == len(rows):
            self.columns = columns
        else:
            self._rewrite(columns, kept)

    def _rewrite(self, columns: list[str], rows: list[dict[str, str]]) -> None:
        text = io.StringIO()
        writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore")
        if columns:
            writer.writeheader()
        writer.writerows(rows)
        atomic_write(self.path, lambda temporary: temporary.write_text(text.getvalue(), encoding="utf-8"))
        self.columns = columns


class RunTensorBoardLogger(TensorBoardLogger):
    """Lightning's TensorBoard logger (``RUN_DIR/tensorboard/``) labelling its events with the steps of the run's
    CSV log ``steps``, which must come before it in the trainer's loggers: the steps done, as each row is labelled;
    a resumed run purges the events of the steps after its checkpoint (``resume_from_step``: those it logs again,
    hidden from TensorBoard by its purge marker); a validation after fit that replaced one an earlier process logged
    (and flushed: the run was killed in its final files) is not logged twice."""

    def __init__(self, run_dir: str | Path, steps: AppendingCSVLogger) -> None:
        super().__init__(run_dir, name="tensorboard", version="", default_hp_metric=False)  # no placeholder metric
        self.steps = steps

    @property
    def experiment(self) -> Any:
        if self._experiment is None and self.steps.drop_from_step is not None:  # the writer is made on first use
            self._kwargs["purge_step"] = self.steps.drop_from_step + 1
        with self._naming_failed_writes():
            return super().experiment

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if not self.steps.relogged:
            with self._naming_failed_writes():
                super().log_metrics(*self.steps.labelled(metrics, step))

    @rank_zero_only
    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        with self._naming_failed_writes():
            super().log_hyperparams(params, *args, **kwargs)

    @rank_zero_only
    def save(self) -> None:
        with self._naming_failed_writes():
            super().save()

    @rank_zero_only
    def finalize(self, status: str) -> None:
        with self._naming_failed_writes():
            super().finalize(status)

    def _naming_failed_writes(self) -> AbstractContextManager[None]:
        """The writer thread's failed write, raised at the next call here, names no file: name the events' folder."""
        return naming_failed_writes(Path(self.log_dir))


__all__ = ["AppendingCSVLogger", "RunTensorBoardLogger"]
