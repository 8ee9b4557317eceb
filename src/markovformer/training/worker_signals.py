"""A SIGTERM in a data loader's worker process.

A SIGTERM sent to the whole process group (``kill -- -PGID``, a scheduler stopping a job's every process) reaches
the data loaders' worker processes too, which PyTorch lets it kill at once: the run then failed on its dead worker
with a traceback and exit status 1 before it could stop after its step. ``ignore_outside_sigterm`` (every loader's
``worker_init_fn``, training's and ``eval``'s) leaves such a signal to the main process, which stops the run and ends
its workers; a SIGTERM from the main process itself (how it ends a worker that outlived its loader) still ends the
worker at once. Apart from ``training.termination`` (Lightning's side of a SIGTERM), so that ``eval`` imports no
Lightning.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading


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
    stands. A thread the worker had before this (under spawn or forkserver, the OpenMP threads ``import torch``
    starts where ``OMP_NUM_THREADS`` is unset) does not block the signal, and a SIGTERM the kernel hands to it ends
    the worker at once, as PyTorch's handler would: a forked worker (Linux's default up to Python 3.13) has none."""
    if not hasattr(signal, "sigwaitinfo"):
        return
    parent = starter_pid()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # the worker's threads start after this: all block it

    def take() -> None:
        while True:
            if signal.sigwaitinfo({signal.SIGTERM}).si_pid == parent:
                os._exit(0)

    threading.Thread(target=take, name="sigterm", daemon=True).start()
