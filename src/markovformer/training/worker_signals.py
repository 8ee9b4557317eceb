"""A SIGTERM in a data loader's worker process.

A SIGTERM sent to the whole process group (``kill -- -PGID``, a scheduler stopping a job's every process) reaches
the data loaders' worker processes too, which PyTorch lets it kill at once: the run then failed on its dead worker
with a traceback and exit status 1 before it could stop after its step. ``ignore_outside_sigterm`` (the
``worker_init_fn`` of every loader, training's and ``eval``'s: ``worker_options``) leaves such a signal to the main
process, which stops the run and ends its workers; a SIGTERM from the main process itself (how it ends a worker
that outlived its loader) still ends the worker at once. Apart from ``training.termination`` (Lightning's side of a
SIGTERM), so that ``eval`` imports no Lightning.

A worker runs ``import torch`` and PyTorch's worker loop before its ``worker_init_fn``: under spawn or forkserver
(Python 3.14's default on Linux, a notebook's ``set_start_method``) for a second or two, in which a SIGTERM to the
group killed it, and the threads it started then (OpenMP's, where ``OMP_NUM_THREADS`` is unset) did not block the
signal, so that a later one could still reach PyTorch's handler: 9 of 10 tiny runs under spawn, 7 of 10 under
forkserver, signalled up to 3 s after their first worker appeared, failed on a dead worker with exit status 1. A
worker now starts with SIGTERM blocked (``WorkerContext``): a SIGTERM sent meanwhile waits for the thread
``ignore_outside_sigterm`` starts, and every thread the worker starts blocks it too.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import signal
import threading

# Where a worker can read a SIGTERM's sender (sigwaitinfo: Linux), it takes the signal itself; elsewhere PyTorch does.
TAKES_SIGTERM = hasattr(signal, "sigwaitinfo")


def starter_pid() -> int:
    """The process that started this one: under forkserver the OS parent (``os.getppid``) is the fork server, which
    no run signals; multiprocessing records the process that asked for the worker."""
    started_by = multiprocessing.parent_process()
    return os.getppid() if started_by is None else started_by.pid


def ignore_outside_sigterm(worker_id: int) -> None:
    """A data loader worker's ``worker_init_fn``: a SIGTERM from any process but the worker's parent (the process
    that started it) is ignored (the parent, signalled with it, stops the run and ends its workers); one from the
    parent ends the worker at once, as PyTorch's own handler does. The signal is blocked and taken by a thread of
    the worker, which reads its sender; where the platform cannot read it (no ``sigwaitinfo``), PyTorch's handling
    stands. A worker started by ``WorkerContext`` has blocked it since it started, so that its threads (the OpenMP
    threads ``import torch`` starts where ``OMP_NUM_THREADS`` is unset) block it too: a thread that did not would
    take the signal with PyTorch's handler, which ends the worker at once."""
    if not TAKES_SIGTERM:
        return
    parent = starter_pid()
    block_sigterm()

    def take() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent or not _parent_alive(parent):
                os._exit(0)

    threading.Thread(target=take, name="sigterm", daemon=True).start()


def _parent_alive(parent: int) -> bool:
    """Whether the process that started this worker still runs. A worker whose parent was killed (SIGKILL, out of
    memory) has no one left to stop it: it obeys any SIGTERM then, where it had ignored every one but a dead
    parent's (found with 1,002 workers left running, 14 GB, which only kill -9 ended)."""
    started_by = multiprocessing.parent_process()
    if started_by is not None:
        return started_by.is_alive()
    return os.getppid() == parent


def block_sigterm() -> None:
    """Block SIGTERM in this thread and the threads it starts (one sent meanwhile waits); where a worker can take it."""
    if TAKES_SIGTERM:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


@contextlib.contextmanager
def sigterm_blocked():
    """SIGTERM blocked in this thread inside the block (``block_sigterm``); one sent meanwhile is delivered on
    leaving it, when the mask is restored."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if TAKES_SIGTERM else None
    try:
        yield
    finally:
        if previous is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _block_sigterm_away_from(maker: int) -> None:
    """``block_sigterm`` in a process other than ``maker`` (the worker's, not a copy made where it was made)."""
    if os.getpid() != maker:
        block_sigterm()


class _SigtermBlockedOnArrival:
    """Unpickled first of a ``WorkerProcess``: blocks SIGTERM before the rest (torch, the data) is unpickled, in the
    worker only: a deep copy in the process that made it rebuilds it the same way."""

    def __reduce__(self):
        return _block_sigterm_away_from, (os.getpid(),)


def _arrived(sigterm_blocked_first: None, kind: type, state: dict) -> WorkerProcess:
    """A pickled ``WorkerProcess``, rebuilt once its first argument has blocked SIGTERM."""
    process = kind.__new__(kind)
    process.__dict__.update(state)
    return process


class WorkerProcess(multiprocessing.Process):
    """A data loader worker (the default start method's process) that starts with SIGTERM blocked. It inherits the
    mask it is started with under fork and spawn, and from a fork server its own start launches (which then leaves
    a SIGTERM to its group to wait, and ends with the main process). A fork server that ran before passes on its own
    mask, so a worker started by pickling blocks the signal itself as it is unpickled, before the rest of it (torch's
    worker loop, the data). The loader's queues, made before its workers, have started multiprocessing's resource
    tracker, whose first start unblocks SIGTERM in the thread that starts it."""

    def start(self) -> None:
        with sigterm_blocked():
            super().start()

    def __reduce__(self):
        return _arrived, (_SigtermBlockedOnArrival(), type(self), self.__dict__)


class WorkerContext(multiprocessing.context.BaseContext):
    """The default start method's context, whose processes are ``WorkerProcess``: a DataLoader's
    ``multiprocessing_context``. It takes the start method set when it makes a queue or a process (when the loader
    iterates), as a plain loader does: fixed when the loader was built, a ``set_start_method`` in between made the
    queues under one method and the workers under another, and iterating failed on a SemLock shared across them."""

    Process = WorkerProcess

    def get_context(self, method: str | None = None) -> multiprocessing.context.BaseContext:
        return multiprocessing.get_context(method)

    def get_start_method(self, allow_none: bool = False) -> str | None:
        return multiprocessing.get_start_method(allow_none)


def worker_options(num_workers: int) -> dict:
    """A DataLoader's worker arguments: ``num_workers`` workers that leave an outsider's SIGTERM to the main process
    from their start."""
    return {"num_workers": num_workers, "worker_init_fn": ignore_outside_sigterm,
            "multiprocessing_context": WorkerContext() if num_workers > 0 else None}  # fmt: skip
