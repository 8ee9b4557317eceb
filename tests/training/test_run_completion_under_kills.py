"""Runs that never lie (issue 27): run completion as one transaction (killed at every write, the run resumes to
the uninterrupted one), early stopping that stays stopped, and terminations (SIGTERM, Ctrl-C, an exit in fit) that
end in one line naming the checkpoint to resume from."""

import csv
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_line_error, same_weights  # beside this folder
from run_commands import ENV, at_each_write_point, config_file, run, run_process

from markovformer.atomic import KILL_AT_WRITE

# --------------------------------------------------------------------------------- completion as a transaction


def run_state(run_dir: Path) -> tuple:
    """What an uninterrupted run must equal: the weights' digest, metrics.json (but its clock), every log cell."""
    digest = hashlib.sha256((run_dir / "model" / "model.safetensors").read_bytes()).hexdigest()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    metrics.pop("train_seconds"), metrics.pop("train_step_seconds", None)
    rows = csv.DictReader((run_dir / "logs" / "metrics.csv").open())
    cells = sorted((row["step"], key, value) for row in rows for key, value in row.items() if value and key != "step")
    return digest, metrics, cells


def check_complete(run_dir: Path, reference: Path, tmp_path: Path) -> None:
    assert run_state(run_dir) == run_state(reference)
    assert (run_dir / "finished.json").is_file() and not list(run_dir.rglob(".*.tmp"))
    ran = run("eval", str(run_dir), cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished 20-step run and the same run extended to 30 steps without interruption."""
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("transaction")
    config = config_file(folder, TINY_RUN, max_steps=20, eval_every=10, checkpoint_every=10, log_every=5)
    assert run("train", str(config), "output_dir=short", cwd=folder).returncode == 0
    assert run("train", str(config), "output_dir=long", "trainer.max_steps=30", "trainer.decay_steps=20",
               cwd=folder).returncode == 0  # fmt: skip
    return folder, config


# the default suite kills at every other one of the last six writes (finished.json, the fingerprint, the model's
# config); the slow marker adds metrics.json, the weights and the last write before the final files
@pytest.mark.parametrize("from_end", [1, 3, 5, *(pytest.param(n, marks=pytest.mark.slow) for n in (2, 4, 6))])
def test_an_extension_killed_at_each_of_its_last_writes_is_resumable_and_never_mixed(finished_run, tmp_path,
                                                                                      from_end):  # fmt: skip
    """`--resume RUN trainer.max_steps=30` killed at each of its last six writes (the final model's config,
    weights and fingerprint, metrics.json, finished.json, the last log row): the run is then unfinished, eval reads
    its last checkpoint, and `--resume` completes it to exactly the uninterrupted extension (on main a kill here
    left the old model "finished", or weights and fingerprint that disagreed)."""
    import shutil

    folder, _ = finished_run
    total = count_writes(folder, ["train", "--resume", "RUN", "trainer.max_steps=30"])
    point = total - from_end + 1
    target = tmp_path / "run"
    shutil.copytree(folder / "short", target)
    killed = run_process(
        "train", "--resume", str(target), "trainer.max_steps=30", cwd=tmp_path, env={KILL_AT_WRITE: str(point)}
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (target / "finished.json").exists()  # never "finished" with another step's files
    finished = run("train", "--resume", str(target), "trainer.max_steps=30", cwd=tmp_path)  # or plain --resume
    assert finished.returncode == 0, finished.stderr[-2000:]
    check_complete(target, folder / "long", tmp_path)


_COUNTS: dict = {}


def count_writes(folder: Path, command: list[str]) -> int:
    """The number of write points of ``command`` run in this process on a copy of the finished short run (cached per
    command): a process killed at write k = 1, 2, ... dies at each of them in turn (``at_each_write_point``)."""
    import shutil

    key = tuple(command)
    if key not in _COUNTS:
        probe = folder / "probe"
        shutil.rmtree(probe, ignore_errors=True)
        shutil.copytree(folder / "short", probe)
        with pytest.MonkeyPatch.context() as monkeypatch:
            writes = at_each_write_point(monkeypatch, lambda: None)
            done = run(*[probe.name if part == "RUN" else part for part in command], cwd=folder)
        assert done.returncode == 0, done.stderr[-2000:]
        _COUNTS[key] = len(writes)
    return _COUNTS[key]


@pytest.mark.slow  # ~40 kill points, two processes each
def test_a_run_killed_at_every_write_resumes_to_the_uninterrupted_run(finished_run, tmp_path):
    """Every write point of a new 20-step run (start files, each checkpoint, each log row, the final files): kill
    there, `--resume` (or `train` again when config.yaml was not written yet), and the run equals the uninterrupted
    one: weights, metrics.json, every log cell; no temporary file left; eval opens it."""
    folder, config = finished_run
    point = 1
    while True:
        target = tmp_path / f"k{point}"
        killed = run_process("train", str(config), f"output_dir={target}", cwd=tmp_path,
                             env={KILL_AT_WRITE: str(point)})  # fmt: skip
        if killed.returncode == 0:
            break
        assert killed.returncode == -9, killed.stderr[-2000:]
        started = (target / "config.yaml").is_file()
        command = ["--resume", str(target)] if started else [str(config), f"output_dir={target}"]
        again = run("train", *command, cwd=tmp_path)
        assert again.returncode == 0, (point, again.stderr[-2000:])
        check_complete(target, folder / "short", tmp_path)
        point += 1
    assert point > 20  # every write was reached


def test_an_early_stopped_run_resumed_after_a_kill_in_its_final_files_stays_stopped(tmp_path):
    """Early stopping ends the run before max_steps; killed while writing its final files (finished.json gone), it
    resumes to the same step and weights: the patience count was restored but not the stop, and it trained on.
    A finished early-stopped run is refused by --resume, as a run that reached max_steps is."""
    import shutil

    from conftest import TINY_RUN

    from markovformer.training.run_dir import mark_unfinished

    config = config_file(tmp_path, TINY_RUN, max_steps=200, eval_every=5, checkpoint_every=5, log_every=5, lr=0.05,
                         early_stopping={"monitor": "val/loss", "patience": 1, "mode": "max"})  # fmt: skip
    assert run("train", str(config), "output_dir=stopped", cwd=tmp_path).returncode == 0
    steps = json.loads((tmp_path / "stopped" / "metrics.json").read_text())["steps"]
    assert steps < 200
    for extension in ([], ["trainer.max_steps=400"]):  # extended, it would stop at once: refused too
        one_line_error(run("train", "--resume", "stopped", *extension, cwd=tmp_path), "finished run",
                       f"ended it at step {steps})", "init_from=")  # fmt: skip
    shutil.copytree(tmp_path / "stopped", tmp_path / "killed")
    mark_unfinished(tmp_path / "killed")  # what a kill during the final files leaves
    assert run("train", "--resume", "killed", cwd=tmp_path).returncode == 0
    assert json.loads((tmp_path / "killed" / "metrics.json").read_text())["steps"] == steps
    assert same_weights(tmp_path / "stopped", tmp_path / "killed")


def test_early_stopping_state_keeps_lightnings_key():
    """Checkpoints written before ResumableEarlyStopping hold EarlyStopping's state under Lightning's key: the
    subclass reads it from there (its class name would make another key, and the patience count would start over)."""
    from lightning.pytorch.callbacks import EarlyStopping

    from markovformer.training.step_checkpoints import ResumableEarlyStopping

    for options in ({"monitor": "val/loss"}, {"monitor": "val/accuracy", "mode": "max"}):
        assert ResumableEarlyStopping(**options).state_key == EarlyStopping(**options).state_key


@pytest.mark.parametrize(("stop", "status", "words"), [
    ("SIGTERM", 143, "terminated (SIGTERM) at step"), ("SIGINT", 130, "interrupted (SIGINT, Ctrl-C) at step")])
def test_a_terminated_run_exits_in_one_line_naming_its_checkpoint_and_resumes(tmp_path, stop, status, words):
    """SIGTERM (a scheduler's stop) ended the command with status 0 and no word, as if the run had finished
    (Lightning raises a SystemExit without a code), and Ctrl-C with status 1 and no word, as a crash (Lightning's
    sys.exit(1)); now 143 or 130 and one line, and --resume finishes the run."""
    import signal
    import time

    from conftest import TINY_RUN

    config = config_file(tmp_path, TINY_RUN, max_steps=200, eval_every=100, checkpoint_every=10, log_every=100)
    command = [sys.executable, "-m", "markovformer", "train", str(config), "output_dir=run"]
    # (a process started in the background by a shell without job control inherits SIGINT ignored: restore it)
    process = subprocess.Popen(command, cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 300
    while not (tmp_path / "run" / "checkpoints" / "step-000010.ckpt").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(getattr(signal, stop))
    _, err = process.communicate(timeout=300)
    done = subprocess.CompletedProcess(command, process.returncode, "", err)
    line = one_line_error(done, words, "continue with markovformer train --resume", status=status)
    assert "its last checkpoint is step-" in line and not (tmp_path / "run" / "finished.json").exists()
    resumed = run("train", "--resume", "run", cwd=tmp_path)
    assert resumed.returncode == 0 and json.loads((tmp_path / "run" / "metrics.json").read_text())["steps"] == 200


def test_a_terminated_multi_process_run_prints_its_line_from_the_writer_alone(tmp_path, monkeypatch, capsys):
    """SIGTERM to a DDP run (Lightning forwards it to the other processes) stopped every process with the same
    line, so the terminal read it once per process; the processes that do not write the run now exit 143 without
    it. Here one process plays each part: the writer, then another process of the run (is_run_writer False)."""
    import lightning.pytorch as L
    from conftest import TINY_RUN
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from markovformer.cli.main import main
    from markovformer.training import runner

    class Terminated(L.Callback):
        def on_train_batch_end(self, *args):
            raise SIGTERMException  # what Lightning raises in each process after a SIGTERM

    build = runner.lightning_trainer
    monkeypatch.setattr(runner, "lightning_trainer", lambda tc, run_dir, log, callbacks: build(
        tc, run_dir, log, [*callbacks, Terminated()]))  # fmt: skip
    config = config_file(tmp_path, TINY_RUN)
    assert main(["train", str(config), f"output_dir={tmp_path / 'writer'}"]) == 143
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "terminated (SIGTERM) at step 1 of" in lines[0]
    monkeypatch.setattr(runner, "is_run_writer", lambda tc: False)
    assert main(["train", str(config), f"output_dir={tmp_path / 'other'}"]) == 143
    assert capsys.readouterr().err.strip() == ""


def test_an_exit_inside_fit_that_no_signal_caused_is_not_reported_as_a_ctrl_c(tmp_path, monkeypatch):
    """Lightning marks a run interrupted for any exception in fit: a callback's sys.exit(3) was reported as
    "interrupted (SIGINT, Ctrl-C)" with status 130. It leaves as it came."""
    import lightning.pytorch as L
    from conftest import TINY_RUN

    from markovformer.training import runner
    from markovformer.training.run_config import resolve_run_config

    class Exits(L.Callback):
        def on_train_batch_end(self, *args):
            sys.exit(3)

    build = runner.lightning_trainer
    monkeypatch.setattr(runner, "lightning_trainer", lambda tc, run_dir, log, callbacks: build(
        tc, run_dir, log, [*callbacks, Exits()]))  # fmt: skip
    with pytest.raises(SystemExit) as stopped:
        runner.train(resolve_run_config({**TINY_RUN, "output_dir": str(tmp_path / "run")}))
    assert stopped.value.code == 3 and type(stopped.value) is SystemExit


def test_a_ctrl_c_inside_fit_is_a_termination_and_gives_the_caller_its_handler_back(tmp_path, monkeypatch):
    """Lightning turns a KeyboardInterrupt into sys.exit(1) and ignores SIGINT from then on: the run is a
    termination (status 130, one line naming the step and how to continue), and the caller's SIGINT handler is its
    own again."""
    import signal

    import lightning.pytorch as L
    from conftest import TINY_RUN

    from markovformer.training import runner
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.trainer_config import RunTerminated

    class CtrlC(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            if trainer.global_step == 3:
                raise KeyboardInterrupt

    build = runner.lightning_trainer
    monkeypatch.setattr(runner, "lightning_trainer", lambda tc, run_dir, log, callbacks: build(
        tc, run_dir, log, [*callbacks, CtrlC()]))  # fmt: skip
    def own(number, frame):
        return None

    previous = signal.signal(signal.SIGINT, own)
    try:
        with pytest.raises(RunTerminated, match="interrupted \\(SIGINT, Ctrl-C\\) at step 3 of") as stopped:
            runner.train(resolve_run_config({**TINY_RUN, "output_dir": str(tmp_path / "run")}))
        assert stopped.value.exit_status == 130 and signal.getsignal(signal.SIGINT) is own
        run = str(tmp_path / "run")  # said to a Python caller: the call, not `markovformer train --resume RUN`
        assert str(stopped.value).endswith(f"continue with resume({run!r})"), stopped.value
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_sigterm_in_the_validation_after_the_last_step_is_a_termination_too(tmp_path, monkeypatch):
    """A run whose last step is not a validation step validates after fit; a SIGTERM there (Lightning's
    SIGTERMException, a SystemExit without a code) ended the command with status 0, no word and no metrics.json."""
    import lightning.pytorch as L
    from conftest import TINY_RUN
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train
    from markovformer.training.trainer_config import RunTerminated

    def terminated(*args, **kwargs):
        raise SIGTERMException

    values = {**TINY_RUN, "output_dir": str(tmp_path / "run"),
              "trainer": {**TINY_RUN["trainer"], "max_steps": 7, "eval_every": 5, "checkpoint_every": 5}}  # fmt: skip
    monkeypatch.setattr(L.Trainer, "validate", terminated)  # the validation after fit; fit's own are not this call
    with pytest.raises(RunTerminated, match="terminated \\(SIGTERM\\) at step 7 of 7: its last checkpoint is"):
        train(resolve_run_config(values))
    assert not (tmp_path / "run" / "metrics.json").exists()
