"""The commands the runs-never-lie tests (test_ddp_runs_are_exact.py, test_run_completion_under_kills.py,
test_run_guards.py) run and read: a command as its own process or in this one, a run's config (their one-line errors:
conftest.one_line_error), and the write points of a command run in this one (``at_each_write_point``)."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, run_in_process  # beside this folder

from markovformer import atomic

# TRANSFORMERS_VERBOSITY: Lightning's torchmetrics imports transformers where it is installed, and transformers logs
# two lines on import where it cannot run this torch (5.24 with torch 2.5), which the one-line checks would count
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}


def run_process(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``markovformer ARGS`` as its own process: for runs killed at a write, DDP ranks and inherited variables."""
    return run_cli(*args, timeout=600, cwd=cwd, env={"TRANSFORMERS_VERBOSITY": "error", **(env or {})})


run = run_in_process  # every other command: the same exit status and output, without ~10 s of start-up


def config_file(folder: Path, values: dict, **trainer) -> Path:
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump({**values, "trainer": {**values["trainer"], **trainer}}))
    return path


def at_each_write_point(monkeypatch: pytest.MonkeyPatch, note: Callable[[], object]) -> list:
    """``note()`` at each write point (``markovformer.atomic.write_point``) of the commands run in this process from
    now on, in order: the k-th is where a process run with ``MARKOVFORMER_KILL_AT_WRITE=k`` dies. Returns the list the
    notes are appended to."""
    notes: list = []
    count = atomic.write_point

    def traced() -> None:
        notes.append(note())
        count()

    for module in list(sys.modules.values()):  # the modules that imported it by name too
        if getattr(module, "write_point", None) is count:
            monkeypatch.setattr(module, "write_point", traced)
    return notes
