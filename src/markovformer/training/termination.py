"""SIGTERM in a run of several processes: every process stops at the same point.

Lightning's SIGTERM handler (2.5 and later) broadcasts a flag from process 0 inside the handler, and its loops stop
a process on that process's own flag. A signal landing while another process was in a gradient all-reduce paired
two different collectives, and every process waited for ever (Lightning issue #20806); one that reached the
processes a step apart stopped one of them while the other waited in the step's all-reduce, which then failed with
"Connection reset by peer", exit status 1 (here, 2 of 6 SIGTERMs to a 2-process run on the CPU).

``StopTogether`` replaces the handler, once Lightning has installed it (for ``fit``, and for the ``validate`` of a
last step), with one that only notes the signal. The processes combine their notes in one all-reduce at points every
process reaches in the same order: the start of each training step (all then raise Lightning's flag, so all stop
after that step and write its checkpoint), the end of training (a signal during the last step or its validation)
and the end of a ``validate``. A signal during a validation is thus acted on once it is over, where a single process
stops inside it; either way the run exits 143 with its one line.

A SIGTERM sent to the whole process group reaches the data loaders' workers too: ``training.worker_signals``.
"""

from __future__ import annotations

import signal

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException


class StopTogether(L.Callback):
    def __init__(self) -> None:
        self.signalled = False

    @staticmethod
    def _connector(trainer: L.Trainer):
        connector = getattr(trainer, "_signal_connector", None)  # Lightning's; absent: leave its handling alone
        return connector if trainer.world_size > 1 and hasattr(connector, "received_sigterm") else None

    def _note_signals(self, trainer: L.Trainer) -> None:
        if self._connector(trainer) is None:
            return

        def note(signum, frame) -> None:
            self.signalled = True

        signal.signal(signal.SIGTERM, note)  # Lightning's teardown restores the handler from before its stage

    def _agreed(self, trainer: L.Trainer) -> bool:
        """Whether any process has noted a SIGTERM (one all-reduce, which every process must reach)."""
        flag = torch.tensor([int(self.signalled)], device=trainer.strategy.root_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._note_signals(trainer)

    def on_validation_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING:  # within fit, on_train_start's handler stands
            self._note_signals(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        connector = self._connector(trainer)
        if connector is not None and self._agreed(trainer):
            connector.received_sigterm = True  # every process: each stops at the end of this step

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._connector(trainer) is not None and self._agreed(trainer):
            raise SIGTERMException  # noted after the last step's all-reduce: not lost

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.VALIDATING and self._connector(trainer) is not None and self._agreed(trainer):
            raise SIGTERMException
