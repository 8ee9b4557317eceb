"""A SIGTERM to a run's whole process group (a scheduler stopping every process of a job) with data loader workers:
the run stops after its step with its one line, as a SIGTERM to its main process alone does."""

import copy
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY_RUN
from torch.utils.data import DataLoader

from markovformer.training.worker_signals import ignore_outside_sigterm, starter_pid, worker_options

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}


def test_a_sigterm_to_the_process_group_of_a_run_with_workers_stops_it_in_one_line(tmp_path):
    """The workers took the signal too and died at once (PyTorch's handler), so the run failed on a dead worker with
    a traceback and exit status 1; now they leave it to the main process: status 143, the one line, no process of
    the group left behind."""
    values = {**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": 400, "checkpoint_every": 10,
                                      "eval_every": 200, "num_workers": 2}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(values))
    command = [sys.executable, "-m", "markovformer", "train", "run.yaml", "output_dir=run"]
    process = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (tmp_path / "run" / "checkpoints" / "step-000010.ckpt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(process.pid, signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the run was terminated (SIGTERM) at step" in lines[0], err[-3000:]
    time.sleep(1)
    try:
        os.killpg(process.pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("a worker of the stopped run is still alive")


def _wait_as_a_worker(ready) -> None:
    ignore_outside_sigterm(0)
    ready.set()
    time.sleep(60)


def test_a_worker_ignores_another_processs_sigterm_and_ends_on_its_parents():
    """A forked worker (PyTorch's default start method on Linux up to Python 3.13) takes a SIGTERM from its parent
    only: another process's leaves it running, its parent's ends it."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    worker = context.Process(target=_wait_as_a_worker, args=(ready,), daemon=True)
    worker.start()
    try:
        assert ready.wait(30)
        subprocess.run(["kill", "-TERM", str(worker.pid)], check=True)  # sent by a process that is not its parent
        worker.join(1)
        assert worker.is_alive()
        worker.terminate()  # its parent's SIGTERM, as a data loader ends a worker that outlived it
        worker.join(10)
        assert worker.exitcode == 0
    finally:
        if worker.is_alive():
            worker.kill()


def _start_a_worker_and_die(pid_sent) -> None:
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    context.Process(target=_wait_as_a_worker, args=(ready,)).start()
    ready.wait(30)
    pid_sent.send(multiprocessing.active_children()[0].pid)
    os._exit(0)  # killed, as far as the worker can tell: it never ends its worker


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no reaper has collected counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_whose_parent_died_obeys_any_sigterm():
    """A worker ignores an outsider's SIGTERM because its parent stops the run and ends it; when the parent was
    killed (SIGKILL, out of memory) nothing will: 1,002 workers of a killed run kept running (14 GB), and a
    SIGTERM, whoever sent it, did not end them."""
    receiver, sender = multiprocessing.get_context("fork").Pipe(duplex=False)
    parent = multiprocessing.get_context("fork").Process(target=_start_a_worker_and_die, args=(sender,))
    parent.start()
    assert receiver.poll(30)
    worker = receiver.recv()
    parent.join(10)
    try:
        assert _running(worker)
        os.kill(worker, signal.SIGTERM)  # from this test: not the worker's parent, which is gone
        deadline = time.monotonic() + 10
        while _running(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(worker)
    finally:
        if _running(worker):
            os.kill(worker, signal.SIGKILL)


def _send_starter_pid(queue) -> None:
    queue.put((starter_pid(), os.getppid()))


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_the_parent_a_worker_obeys_is_the_process_that_started_it(start_method):
    """Under forkserver a worker's OS parent is the fork server, not the process that started it: the trainer's
    SIGTERM was ignored as an outsider's (measured: the worker still alive 5 s after it). This checks the sender it
    obeys, under every start method."""
    context = multiprocessing.get_context(start_method)
    queue = context.Queue()
    worker = context.Process(target=_send_starter_pid, args=(queue,))
    worker.start()
    starter, os_parent = queue.get(timeout=60)
    worker.join(30)
    assert starter == os.getpid()
    assert (os_parent == os.getpid()) == (start_method != "forkserver")


def _signalled_before_its_init(worker_id: int) -> None:
    os.kill(os.getpid(), signal.SIGTERM)  # not its parent's: as a SIGTERM to the group reaches a starting worker
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()  # as import torch starts OpenMP's threads
    time.sleep(0.2)
    ignore_outside_sigterm(worker_id)


class _ThreadsLeavingSigterm:
    """Item i: i and the worker's threads, but the one that takes SIGTERM, that do not block it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, list[int]]:
        taker = next(thread.native_id for thread in threading.enumerate() if thread.name == "sigterm")
        unblocked = []
        for task in os.listdir("/proc/self/task"):
            status = (Path("/proc/self/task") / task / "status").read_text()
            mask = int(next(line for line in status.splitlines() if line.startswith("SigBlk:")).split()[1], 16)
            if int(task) != taker and not mask >> (signal.SIGTERM - 1) & 1:
                unblocked.append(int(task))
        return index, unblocked


@pytest.mark.parametrize("start_method", ["fork", "spawn", "forkserver"])
def test_an_outsiders_sigterm_before_a_workers_init_leaves_it_running(start_method):
    """A worker runs torch's import and worker loop before its worker_init_fn (a second or two under spawn or
    forkserver); a SIGTERM from the group then killed it with PyTorch's handler, and the loader failed ('DataLoader
    worker exited unexpectedly'). It starts with SIGTERM blocked: the signal waits for the worker's own handling,
    which ignores it, and the loader yields every item; a thread it started before (OpenMP's) blocks the signal too,
    where it took it with PyTorch's handler. The fork server runs before the loader starts a worker (a notebook's
    earlier loader), so a forkserver worker blocks SIGTERM itself as it arrives."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method(start_method, force=True)
    try:
        if start_method == "forkserver":
            multiprocessing.forkserver.ensure_running()
        options = {**worker_options(2), "worker_init_fn": _signalled_before_its_init}
        assert sorted(DataLoader(_ThreadsLeavingSigterm(), batch_size=None, **options)) == [[i, []] for i in range(8)]
    finally:
        multiprocessing.set_start_method(previous, force=True)


def test_a_loader_built_under_one_start_method_iterates_under_the_one_set_before_it_iterates():
    """A plain DataLoader takes the default start method when it iterates; its workers' context took it when the
    loader was built, so a notebook's set_start_method('spawn', force=True) between the two made the loader's queues
    under fork and its workers under spawn, and iterating failed ('A SemLock created in a fork context is being
    shared with a process in a spawn context'). The context now follows the start method set when it makes them."""
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("fork", force=True)
    try:
        loader = DataLoader(range(4), batch_size=None, **worker_options(1))
        multiprocessing.set_start_method("spawn", force=True)
        assert list(loader) == [0, 1, 2, 3]
    finally:
        multiprocessing.set_start_method(previous, force=True)


def test_a_sigterm_to_the_main_process_while_it_starts_a_worker_is_delivered_once_the_worker_has_started():
    """The main process blocks SIGTERM while it starts a worker (so that the worker inherits the mask): a SIGTERM
    sent meanwhile waits, and its handler runs once the mask is restored (not lost)."""
    script = """
import os, signal, time
from markovformer.training.worker_signals import sigterm_blocked
received = []
signal.signal(signal.SIGTERM, lambda signum, frame: received.append(signum))
with sigterm_blocked():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(0.2)
    print(len(received))
print(len(received))
"""
    done = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["0", "1"], done.stderr[-3000:]


def test_copying_a_worker_process_in_the_process_that_made_it_leaves_its_sigterm_unblocked():
    """A worker blocks SIGTERM as it is unpickled in the process it starts in; a deep copy where it was made (which
    rebuilds it the same way, and then fails on its authentication key) had blocked SIGTERM in the calling thread
    for good, where a SIGTERM would then never stop the run."""
    process = worker_options(1)["multiprocessing_context"].Process(target=print)
    try:
        with pytest.raises(TypeError):
            copy.deepcopy(process)
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
