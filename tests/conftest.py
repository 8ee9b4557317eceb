"""Shared test settings."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from types import SimpleNamespace

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
    """The command line as a process of its own, in a fresh folder (so default output directories never collide):
    for runs that must die, DDP ranks, second processes and what a fresh interpreter does; ``main_cli`` for the rest."""
    return lambda *args, **options: run_cli(*args, **{"cwd": tmp_path, **options})


@pytest.fixture
def main_cli(tmp_path):
    """The command line through ``main`` in this process (``run_in_process``), in a fresh folder: for commands that
    need no process of their own, training included. Runs that must die, DDP ranks and second processes use ``cli``."""
    return lambda *args, **options: run_in_process(*args, **{"cwd": tmp_path, **options})


def run_in_process(*args: str, cwd: str | Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``markovformer ARGS`` through ``main`` in this process, in ``cwd`` with ``env`` added to the environment: what
    ``run_cli`` returns (exit status, stdout, stderr) without an interpreter's start-up and Lightning's import (~10 s
    of every subprocess; a tiny training is ~1 s). For commands that train but need no process boundary: a run that
    must die (the kill-at-write variables), a second process, or DDP ranks needs ``run_cli``. Whatever a run
    changes for its process is put back: the working folder, the environment, warning filters and logger levels,
    signal handlers, torch's deterministic mode, thread count and random states."""
    import contextlib
    import io
    import logging
    import random
    import signal
    import warnings

    import numpy as np

    from markovformer.atomic import KILL_AT_WRITE
    from markovformer.cli.main import main  # deferred: the command line imports its frameworks

    env = {key: str(value) for key, value in (env or {}).items()}
    if KILL_AT_WRITE in env:
        raise ValueError(f"{KILL_AT_WRITE} kills a process: use run_cli")
    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_signals = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    saved_levels = {name: logger.level for name, logger in logging.root.manager.loggerDict.items()
                    if isinstance(logger, logging.Logger)}  # fmt: skip
    saved_torch = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
                   torch.get_num_threads(), torch.get_rng_state())  # fmt: skip
    saved_random = (random.getstate(), np.random.get_state())
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.update({"PYTHONUNBUFFERED": "1", **env})
        os.chdir(cwd)
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            _python_warning_defaults()  # not pytest's recorder: a warning a process would print is in stderr
            try:
                code = main(list(args))
            except SystemExit as error:  # argparse's usage errors
                code = error.code
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
        for number, handler in saved_signals.items():
            signal.signal(number, handler)
        for name, level in saved_levels.items():
            logging.getLogger(name).setLevel(level)
        torch.use_deterministic_algorithms(saved_torch[0], warn_only=saved_torch[1])
        torch.set_num_threads(saved_torch[2])
        torch.set_rng_state(saved_torch[3])
        random.setstate(saved_random[0])
        np.random.set_state(saved_random[1])
    return subprocess.CompletedProcess(["markovformer", *args], code, out.getvalue(), err.getvalue())


def _python_warning_defaults() -> None:
    """The warning filters of a fresh interpreter (``python -W`` unset), printing to the current ``sys.stderr``."""
    import warnings

    warnings.resetwarnings()  # also forgets which warnings were shown already
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category, append=True)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: sys.stderr.write(
        warnings.formatwarning(message, category, filename, lineno, line))


# Python's standard streams and files are ASCII here (the C locale with UTF-8 mode, its default there, turned off)
ASCII_LOCALE = {"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}


def run_cli(*args: str, timeout: float = 300, env: dict | None = None, **popen) -> subprocess.CompletedProcess:
    """``markovformer ARGS`` as its own process, with ``env`` added to this one's environment."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "markovformer", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, **popen)  # fmt: skip


def one_line_error(done: subprocess.CompletedProcess, *fragments: str, status: int = 2) -> str:
    """The command failed with ``status`` (bad input's 2 by default) and one ``markovformer: error:`` line holding
    ``fragments``."""
    assert done.returncode == status, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("markovformer: error:"), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def same_weights(a: Path, b: Path) -> bool:
    """Whether two run directories' saved weights (model/model.safetensors) are the same tensors, bit for bit."""
    from safetensors.torch import load_file

    ours, theirs = (load_file(Path(run) / "model" / "model.safetensors") for run in (a, b))
    return ours.keys() == theirs.keys() and all(torch.equal(ours[name], theirs[name]) for name in ours)


def shard_weights(directory: Path, parts: int = 2) -> dict[str, str]:
    """``directory``, a save_pretrained folder, as transformers' save_pretrained with a small max_shard_size writes it
    (with safetensors alone): its tensors, in name order, in ``parts`` files model-0000k-of-0000n.safetensors,
    model.safetensors.index.json naming each tensor's shard, no model.safetensors. Returns that weight_map."""
    import json

    from safetensors.torch import load_file, save_file

    whole = load_file(directory / "model.safetensors")
    names = sorted(whole)
    weight_map = {name: f"model-{position * parts // len(names) + 1:05d}-of-{parts:05d}.safetensors"
                  for position, name in enumerate(names)}  # fmt: skip
    for shard in sorted(set(weight_map.values())):
        save_file({name: whole[name] for name in names if weight_map[name] == shard}, directory / shard,
                  metadata={"format": "pt"})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (directory / "model.safetensors").unlink()
    return weight_map


# the bench's rows built from step times, read against a clock the test moves (no timed test)
class FakeClock:
    """What a bench module reads as ``time.perf_counter``: ``now`` moves only when a fake step advances it."""

    def __init__(self, monkeypatch) -> None:
        self.now, self._monkeypatch = 0.0, monkeypatch

    def perf_counter(self) -> float:
        return self.now

    def patch(self, module) -> FakeClock:
        """Make this the clock ``module`` reads (its ``time``)."""
        self._monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=self.perf_counter))
        return self

    def steps(self, durations: Iterable[float]) -> Callable[..., None]:
        """A step that lasts the next of ``durations`` each time it is called (whatever its arguments)."""
        pending = iter(durations)

        def step(*args, **kwargs) -> None:
            self.now += next(pending)

        return step


@pytest.fixture
def fake_clock(monkeypatch) -> FakeClock:
    return FakeClock(monkeypatch)


def keep_saved_figures(monkeypatch, module) -> dict:
    """{file name: figure} of the figures ``module`` saves from now on, kept with their artists (saving clears a
    figure); each file is left empty, not rendered, so a test reads what was drawn rather than pixels."""
    figures = {}

    def save(figure, out) -> Path:
        figures[Path(out).name] = figure
        Path(out).write_bytes(b"")
        return Path(out)

    monkeypatch.setattr(module, "save_figure", save)
    return figures


@pytest.fixture
def kept_figures(monkeypatch):
    """``kept_figures(module)``: ``keep_saved_figures`` for this test."""
    return lambda module: keep_saved_figures(monkeypatch, module)
