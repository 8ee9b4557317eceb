"""Shared test settings."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml


@pytest.fixture(autouse=True, scope="session")
def _single_thread():
    """The suite runs thousands of tiny ops: one intra-op thread avoids thread start-up and, on a busy 2-core
    machine, spin-wait contention that made them up to 100x slower. Restored afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True, scope="session")
def _token_cache(tmp_path_factory):
    """Token stores the tests build go to a temporary cache, never the user's (children inherit it)."""
    previous = os.environ.get("MARKOVFORMER_CACHE")
    os.environ["MARKOVFORMER_CACHE"] = str(tmp_path_factory.mktemp("token_cache"))
    yield
    if previous is None:
        os.environ.pop("MARKOVFORMER_CACHE", None)
    else:
        os.environ["MARKOVFORMER_CACHE"] = previous


TINY_RUN = {
    "task": "causal_lm",
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "dropout": 0.1},
    "data": {
        "source": "markov_chain",
        "kind": "lagged",
        "num_symbols": 4,
        "lags": [1, 2],
        "seq_len": 24,
        "train_sequences": 512,
        "val_sequences": 64,
        "test_sequences": 32,
    },  # fmt: skip
    "trainer": {
        "max_steps": 40,
        "batch_size": 8,
        "warmup_steps": 5,
        "eval_every": 20,
        "checkpoint_every": 10,
        "log_every": 10,
        "deterministic": True,
        "seed": 3,
        "eval_batch_size": 16,
    },  # fmt: skip
}


@pytest.fixture
def tiny_config(tmp_path) -> Path:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY_RUN))
    return path


@pytest.fixture
def tiny_run() -> dict:
    return TINY_RUN


@pytest.fixture
def cli(tmp_path):
    """The command line, run in a fresh folder (so default output directories never collide)."""
    return lambda *args, **options: run_cli(*args, **{"cwd": tmp_path, **options})


@pytest.fixture
def main_cli(tmp_path, monkeypatch, capsys):
    """The command line through ``main`` in this process, in a fresh folder: what ``cli`` returns (exit status,
    stdout, stderr) without an interpreter's start-up (several seconds each), for commands that stop before any
    training (refusals, listings). Commands that train or must die as a process use ``cli``."""

    def run(*args: str) -> subprocess.CompletedProcess:
        from markovformer.cli.main import main  # deferred: the command line imports its frameworks

        monkeypatch.chdir(tmp_path)
        try:
            code = main(list(args))
        except SystemExit as error:  # argparse's usage errors
            code = error.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["markovformer", *args], code, out, err)

    return run


def run_cli(*args: str, timeout: float = 300, **popen) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "markovformer", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **popen)  # fmt: skip
