"""The Python API in one long-lived process (a notebook): a run that stops early leaves the process as it found it."""

import random
import signal

import lightning.pytorch as L
import numpy as np
import pytest
import torch
import yaml
from conftest import TINY_RUN

from markovformer.training import runner
from markovformer.training.run_config import resolve_run_config
from markovformer.training.trainer_config import RunTerminated


def draws() -> tuple:
    return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]


def seed(value: int) -> None:
    torch.manual_seed(value), np.random.seed(value), random.seed(value)


def test_a_run_interrupted_by_ctrl_c_leaves_the_callers_random_states_as_it_found_them(tmp_path, monkeypatch):
    """Lightning's isolate_rng restores the random states only when its block ends normally: after a run stopped by
    a Ctrl-C (a real SIGINT, RunTerminated), torch, numpy and Python drew from the run's seed (trainer.seed=3:
    np.random's key began [3, ...]), not from the caller's."""

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                signal.raise_signal(signal.SIGINT)  # as the notebook's interrupt button sends it

    build = runner.lightning_trainer
    monkeypatch.setattr(runner, "lightning_trainer", lambda tc, run_dir, log, callbacks: build(
        tc, run_dir, log, [*callbacks, CtrlC()]))  # fmt: skip
    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["trainer"]["logger"] = "csv"
    values["output_dir"] = str(tmp_path / "run")
    seed(1234)
    expected = draws()
    seed(1234)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own: a KeyboardInterrupt
    try:
        with pytest.raises(RunTerminated, match="interrupted \\(SIGINT, Ctrl-C\\) at step 3 of"):
            runner.train(resolve_run_config(values))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)
    assert draws() == expected
