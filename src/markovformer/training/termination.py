"""SIGTERM in a run of several processes: every process stops after the same step.

Lightning's SIGTERM handler (2.5 and later) broadcasts a flag from process 0 inside the handler, and its loops stop
a process on that process's own flag. A signal landing while another process was in a gradient all-reduce paired
two different collectives, and every process waited for ever (Lightning issue #20806); one that reached the
processes a step apart stopped one of them while the other waited in the step's all-reduce, which then failed with
"Connection reset by peer", exit status 1 (here, 2 of 6 SIGTERMs to a 2-process run on the CPU).

``StopTogether`` replaces the handler, once Lightning has installed it, with one that only notes the signal; at the
start of every training step all processes combine their notes in one all-reduce (the same collective at the same
point in each), and all of them then raise Lightning's flag, so that all of them stop after that step, write its
checkpoint and exit 143. A signal during validation stops the run after the next step, as a single process does.
"""

from __future__ import annotations

import signal

import lightning as L
import torch


class StopTogether(L.Callback):
    def __init__(self) -> None:
        self.signalled = False

    def _connector(self, trainer: L.Trainer):
        connector = getattr(trainer, "_signal_connector", None)  # Lightning's; absent: leave its handling alone
        return connector if trainer.world_size > 1 and hasattr(connector, "received_sigterm") else None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if self._connector(trainer) is None:
            return

        def note(signum, frame) -> None:
            self.signalled = True

        signal.signal(signal.SIGTERM, note)  # Lightning's teardown restores the handler from before the run

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        connector = self._connector(trainer)
        if connector is None:
            return
        flag = torch.tensor([int(self.signalled)], device=trainer.strategy.root_device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        if flag.item():
            connector.received_sigterm = True  # every process: each stops at the end of this step
