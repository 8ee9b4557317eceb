"""Runs that never lie (issue 27): exact multi-process validation and resume, run completion as one transaction
(killed at every write), the lock and the new-run guard against inherited rank variables and links, weight checks
without holes, and loud divergence."""

import csv
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from conftest import run_cli, run_in_process, same_weights  # beside this folder

from markovformer.atomic import COUNT_WRITES, KILL_AT_WRITE
from markovformer.strict_json import strict_json
from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
from markovformer.training.run_dir import write_json
from markovformer.training.runner import evaluate

# TRANSFORMERS_VERBOSITY: Lightning's torchmetrics imports transformers where it is installed, and transformers logs
# two lines on import where it cannot run this torch (5.24 with torch 2.5), which the one-line checks would count
ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}


def run_process(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``markovformer ARGS`` as its own process: for runs killed at a write, DDP ranks and inherited variables."""
    return run_cli(*args, timeout=600, cwd=cwd, env={"TRANSFORMERS_VERBOSITY": "error", **(env or {})})


run = run_in_process  # every other command: the same exit status and output, without ~10 s of start-up


def one_line(done: subprocess.CompletedProcess, code: int, *fragments: str) -> str:
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("markovformer: error:"), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def config_file(folder: Path, values: dict, **trainer) -> Path:
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump({**values, "trainer": {**values["trainer"], **trainer}}))
    return path


# ------------------------------------------------------------------------------------------ 1. DDP validation


# the default suite keeps 33 on 2: its split is uneven (a padding sampler repeats an example, as with 64 on 3) and
# its ranks also score different numbers of batches; the slow marker adds the 3 processes of the reported case
@pytest.mark.parametrize(("processes", "val_sequences"), [(2, 33), pytest.param(3, 64, marks=pytest.mark.slow)])
def test_multi_process_validation_scores_every_example_exactly_once(tiny_run, tmp_path, processes, val_sequences):
    """The validation loss a DDP run logs is the single-process loss of the whole split. With 33 sequences on 2
    processes one rank scores 2 batches and the other 1; Lightning's padding sampler counted repeated examples
    twice (64 on 3 processes was 0.65% off)."""
    values = {**tiny_run, "data": {**tiny_run["data"], "val_sequences": val_sequences}}
    config = config_file(tmp_path, values, max_steps=10, eval_every=10, checkpoint_every=10, deterministic=False)
    done = run_process("train", str(config), "output_dir=ddp", f"trainer.devices={processes}", "trainer.strategy=ddp",
               "trainer.batch_size=4", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    logged = json.loads((tmp_path / "ddp" / "metrics.json").read_text())["val"]["loss"]
    assert logged == pytest.approx(evaluate(tmp_path / "ddp")["metrics"]["loss"], rel=1e-5)


def test_multi_process_validation_scores_the_bleu_of_every_processs_translations(tmp_path):
    """A 2-process translation run logs the BLEU and exact match of the whole validation split, as eval scores
    them in one process (each process translated its share; only rank 0's share was scored, every other sentence),
    and greedy translations that do not depend on which sources share a batch."""
    values = {"task": "translation", "model_type": "markov_translator",
              "model": {"d_model": 32, "n_heads": 2, "n_encoder_layers": 1, "n_decoder_layers": 1, "order": 2,
                        "dropout": 0.0, "max_positions": 40},
              "data": {"source": "synthetic_translation", "train_examples": 128, "val_examples": 21,
                       "test_examples": 8, "max_length": 8},
              "trainer": {"max_steps": 30, "batch_size": 16, "lr": 3e-3, "warmup_steps": 5, "eval_every": 30,
                          "checkpoint_every": 30, "log_every": 30, "eval_batch_size": 4}}  # fmt: skip
    config = config_file(tmp_path, values)
    done = run_process("train", str(config), "output_dir=ddp", "trainer.devices=2", "trainer.strategy=ddp",
                       cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    logged = json.loads((tmp_path / "ddp" / "metrics.json").read_text())["val"]
    alone = evaluate(tmp_path / "ddp")["metrics"]  # one process, other batches
    assert 0 < alone["bleu"] < 100
    for name in ("loss", "bleu", "exact_match"):
        assert logged[name] == pytest.approx(alone[name], rel=1e-5), name


# ---------------------------------------------------------------------------------------- 2. exact DDP resume


CTC_RUN = {
    "task": "ctc",
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": False, "dropout": 0.2},
    "data": {"source": "synthetic_ctc", "num_symbols": 4, "input_dim": 8, "noise": 0.5},
    "trainer": {"max_steps": 20, "batch_size": 4, "warmup_steps": 5, "eval_every": 10, "checkpoint_every": 10,
                "log_every": 10, "seed": 3, "eval_batch_size": 16, "decay_steps": 20, "devices": 2,
                "strategy": "ddp"},
}  # fmt: skip


def test_a_resumed_ddp_run_with_dropout_matches_the_uninterrupted_one(tmp_path):
    """Utterances of different lengths make the two ranks draw different numbers of dropout bits, so their random
    states drift apart; each rank's state is saved and restored (on main every rank restored rank 0's: the weights
    differed by 5e-3)."""
    config = config_file(tmp_path, CTC_RUN)
    assert run_process("train", str(config), "output_dir=whole", cwd=tmp_path).returncode == 0
    half = run_process("train", str(config), "output_dir=half", "trainer.max_steps=10", cwd=tmp_path)
    assert half.returncode == 0, half.stderr[-3000:]
    states = load_checkpoint_file(tmp_path / "half" / "checkpoints" / "last.ckpt")["rng_states"]
    assert len(states) == 2
    extended = run_process("train", "--resume", "half", "trainer.max_steps=20", cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr[-3000:]
    assert same_weights(tmp_path / "half", tmp_path / "whole")
    if torch.equal(states[0]["cpu"], states[1]["cpu"]):  # seen with torch 2.5.1 and 2.6.0
        pytest.skip(f"torch {torch.__version__}'s CPU dropout takes the same amount of random state per call, whatever "
                    "its size: the ranks never drift apart, so restoring rank 0's state on every rank would pass too")


# ------------------------------------------------------------------------------ 3. completion as a transaction


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
    """The number of write points of ``command`` run on a copy of the finished short run: it is killed at write
    k = 1, 2, ... until it runs to its end (cached per command)."""
    import shutil

    key = tuple(command)
    if key not in _COUNTS:
        probe = folder / "probe"
        shutil.rmtree(probe, ignore_errors=True)
        shutil.copytree(folder / "short", probe)
        marker = folder / "writes"
        done = run_process(*[probe.name if part == "RUN" else part for part in command], cwd=folder,
                           env={COUNT_WRITES: str(marker)})  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        _COUNTS[key] = int(marker.read_text())
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
        one_line(run("train", "--resume", "stopped", *extension, cwd=tmp_path), 2, "finished run",
                 f"at step {steps} of 200", "init_from=")  # fmt: skip
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
    line = one_line(done, status, words, "continue with markovformer train --resume")
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
    termination (status 130, one line naming the step), and the caller's SIGINT handler is its own again."""
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


# ----------------------------------------------------------------------------- 4. the lock and new-run guard


def test_resuming_after_the_data_file_changed_is_refused_naming_what_changed(tmp_path):
    """The same path with other text of the same length and alphabet (a rotation) resumed silently, mixing two
    corpora in one run; the rebuilt data's record is compared with data.json's."""
    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(300))
    (tmp_path / "notes.txt").write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16, "path": "notes.txt"},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv"}}  # fmt: skip
    config = config_file(tmp_path, values)
    assert run("train", str(config), "output_dir=run", cwd=tmp_path).returncode == 0
    (tmp_path / "notes.txt").write_text(text[5000:] + text[:5000])
    one_line(run("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path), 2,
             str((tmp_path / "notes.txt").resolve()), "changed since the run started", "sha256", "data.json")
    (tmp_path / "notes.txt").write_text(text)  # restored: the same tokens, though its mtime (in the store's key) is new
    assert run("train", "--resume", "run", "trainer.max_steps=4", cwd=tmp_path).returncode == 0


@pytest.mark.slow  # three processes of DDP start-up: ~80 s beside other work
def test_a_refused_resume_stops_every_process_of_a_multi_process_run(tmp_path):
    """Two ranks started as torchrun starts them (its variables; without its agent, which would kill the survivor
    as srun does not): a resume after the data file changed is refused by both, each on its own line and exit 2.
    Before, only the writer checked the data; the other rank waited for it in DDP's rendezvous until its timeout."""
    import socket

    text = "".join(f"line {i} of the notes, words and more words\n" for i in range(300))
    (tmp_path / "notes.txt").write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16, "path": "notes.txt"},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv", "devices": 2,
                          "strategy": "ddp"}}  # fmt: skip
    config = config_file(tmp_path, values)
    trained = run_process("train", str(config), "output_dir=run", cwd=tmp_path)  # Lightning starts the second rank
    assert trained.returncode == 0, trained.stderr[-3000:]
    (tmp_path / "notes.txt").write_text(text[5000:] + text[:5000])
    with socket.socket() as probe:  # a free port for the rendezvous rank 0 would host
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    launch = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
              "GROUP_RANK": "0", "NODE_RANK": "0", "TORCHELASTIC_RUN_ID": "resume-refused"}  # fmt: skip
    command = [sys.executable, "-m", "markovformer", "train", "--resume", "run", "trainer.max_steps=4"]
    ranks = [subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**ENV, **launch, "RANK": str(rank), "LOCAL_RANK": str(rank)})
             for rank in range(2)]  # fmt: skip
    try:
        for rank in ranks:
            _, stderr = rank.communicate(timeout=180)
            one_line(subprocess.CompletedProcess(command, rank.returncode, "", stderr), 2,
                     "changed since the run started")  # fmt: skip
    finally:
        for rank in ranks:
            rank.kill()


def test_a_new_run_replaces_the_start_files_a_killed_start_left(tmp_path):
    """A start killed before config.yaml leaves data.json and tokenizer/; a new `train` of another text into that
    folder kept them, so the run trained on text B while its tokenizer (same size: no error anywhere) decoded A's
    characters for eval and generate. They are written afresh, as a fresh folder's."""
    import shutil

    words = "the cat sat on a mat and ran to see the dog".split()
    text_a = "\n".join(" ".join(words[(i * 7 + j) % len(words)] for j in range(8)) for i in range(300)) + "\n"
    text_b = text_a.translate(str.maketrans("abcdefghijklmnopqrstuvwxyz", "nopqrstuvwxyzabcdefghijklm"))
    for name, text in (("a.txt", text_a), ("b.txt", text_b)):
        (tmp_path / name).write_text(text)
    values = {"task": "causal_lm", "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_order": 2},
              "data": {"source": "text", "tokenizer": "char", "seq_len": 16},
              "trainer": {"max_steps": 2, "batch_size": 8, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                          "log_every": 1, "eval_batch_size": 8, "logger": "csv"}}  # fmt: skip
    config = config_file(tmp_path, values)
    for name, text in (("started", "a.txt"), ("fresh", "b.txt")):
        assert run("train", str(config), f"output_dir={name}", f"data.path={text}", cwd=tmp_path).returncode == 0
    (tmp_path / "killed").mkdir()
    for name in ("environment.json", "data.json", "tokenizer"):  # what a start killed at config.yaml leaves
        copy = shutil.copytree if name == "tokenizer" else shutil.copy
        copy(tmp_path / "started" / name, tmp_path / "killed" / name)
    assert run("train", str(config), "output_dir=killed", "data.path=b.txt", cwd=tmp_path).returncode == 0
    for name in ("data.json", "tokenizer/tokenizer.json"):
        fresh, killed = (json.loads((tmp_path / run_dir / name).read_text()) for run_dir in ("fresh", "killed"))
        assert killed == fresh, name


def test_an_inherited_rank_variable_neither_skips_the_lock_nor_the_new_run_guard(tiny_config, tmp_path):
    """A SLURM sweep of single-process jobs inherits SLURM_PROCID/RANK/LOCAL_RANK: a second `train` into a finished
    run is still refused and the run untouched (on main the guard was skipped and the run overwritten)."""
    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    before = (tmp_path / "run" / "model" / "model.safetensors").read_bytes()
    inherited = {"RANK": "1", "LOCAL_RANK": "1", "SLURM_PROCID": "3", "NODE_RANK": "1"}
    # its own process: Lightning reads the rank variables when it is imported
    again = run_process("train", str(tiny_config), "output_dir=run", "trainer.seed=5", cwd=tmp_path, env=inherited)
    one_line(again, 2, "already holds a run")
    assert (tmp_path / "run" / "model" / "model.safetensors").read_bytes() == before


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tiny_config, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / ".lock").symlink_to(victim)
    one_line(run("train", str(tiny_config), "output_dir=run", cwd=tmp_path), 2, ".lock", "symbolic link")
    (tmp_path / "run2").mkdir()
    os.link(victim, tmp_path / "run2" / ".lock")
    one_line(run("train", str(tiny_config), "output_dir=run2", cwd=tmp_path), 2, ".lock", "hard link")
    assert victim.read_text() == "keep me\n"


# ------------------------------------------------------------------------------------- 5. weight checks


def test_the_fingerprint_covers_the_model_config_and_is_required(tiny_config, tmp_path):
    """Editing model/config.json (a different model over the same weights) or deleting model/fingerprint.json makes
    eval refuse the run in one line (on main both were scored, exit 0)."""
    import shutil

    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    edited = tmp_path / "edited"
    shutil.copytree(tmp_path / "run", edited)
    values = json.loads((edited / "model" / "config.json").read_text())
    values["position"] = "learned" if values.get("position") != "learned" else "rotary"
    (edited / "model" / "config.json").write_text(json.dumps(values))
    one_line(run("eval", str(edited), cwd=tmp_path), 2, "config.json", "does not match")
    bare = tmp_path / "bare"
    shutil.copytree(tmp_path / "run", bare)
    (bare / "model" / "fingerprint.json").unlink()
    one_line(run("eval", str(bare), cwd=tmp_path), 2, "fingerprint.json is missing")
    # a run written before fingerprints and finished.json existed still loads by names, shapes and dtypes
    legacy = tmp_path / "legacy"
    shutil.copytree(bare, legacy)
    environment = json.loads((legacy / "environment.json").read_text())
    environment.pop("run_format")
    (legacy / "environment.json").write_text(json.dumps(environment))
    (legacy / "finished.json").unlink()
    assert evaluate(legacy)["metrics"]["loss"] == pytest.approx(evaluate(tmp_path / "run")["metrics"]["loss"])


# ---------------------------------------------------------------------------------------------- 6. divergence


def test_a_diverging_run_stops_in_one_line_keeps_its_last_finite_checkpoint_and_resumes_with_a_lower_lr(
    tiny_config, tmp_path
):
    """trainer.lr=1e6 (on main: trained to the end, exit 0, all-NaN weights, bare NaN in metrics.json)."""
    diverge = ["trainer.lr=1e6", "trainer.warmup_steps=0", "trainer.gradient_clip=0"]
    # checkpoints every step: every step before the divergence is kept, all finite, none after it
    done = run("train", str(tiny_config), "output_dir=each", *diverge, "trainer.checkpoint_every=1", cwd=tmp_path)
    line = one_line(done, 1, "training diverged at step", "trainer.lr=1e+06", "--resume")
    step = int(line.split("at step ")[1].split(":")[0])
    assert f"its last checkpoint, step-{step - 1:06d}.ckpt, is whole" in line
    assert not (tmp_path / "each" / "metrics.json").exists() and not (tmp_path / "each" / "model").exists()
    saved = sorted((tmp_path / "each" / "checkpoints").glob("step-*.ckpt"))
    assert [path.name for path in saved] == [f"step-{n:06d}.ckpt" for n in range(1, step)]
    for path in saved:
        checkpoint = load_checkpoint_file(path)
        assert checkpoint["global_step"] < step
        assert all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values() if t.is_floating_point())
    again = run("train", "--resume", "each", "trainer.lr=3e-3", cwd=tmp_path)
    assert f"(step {step - 1})" in again.stdout  # it continues from the last finite checkpoint
    # (whose weights one step at lr 1e6 has wrecked: that resume may diverge again, and says so in one line)
    assert again.returncode == 0 or "training diverged at step" in again.stderr, again.stderr[-2000:]
    # before any checkpoint: the run is resumed from step 0 with the lower rate and finishes beating uniform
    done = run("train", str(tiny_config), "output_dir=run", *diverge, cwd=tmp_path)
    one_line(done, 1, "training diverged at step", "it has no checkpoint yet", "--resume")
    resumed = run("train", "--resume", "run", "trainer.lr=3e-3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "starting from step 0" in resumed.stdout
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["val"]["loss"] < math.log(4)  # beats uniform


def test_metrics_files_are_strict_json_and_non_finite_weights_are_refused_by_eval(tiny_config, tmp_path):
    path = tmp_path / "metrics.json"
    write_json(path, {"val": {"loss": float("nan"), "bleu": float("inf"), "ok": 1.5}, "list": [float("-inf")]})
    assert json.loads(path.read_text(), parse_constant=lambda name: pytest.fail(name)) == {
        "val": {"loss": None, "bleu": None, "ok": 1.5}, "list": [None]}  # fmt: skip
    assert strict_json((1.0, float("nan"))) == [1.0, None]
    assert run("train", str(tiny_config), "output_dir=run", "trainer.max_steps=10", cwd=tmp_path).returncode == 0
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    checkpoint = load_checkpoint_file(last)
    name = next(k for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    checkpoint["state_dict"][name] = torch.full_like(checkpoint["state_dict"][name], float("nan"))
    save_checkpoint_file(checkpoint, last)
    one_line(run("eval", str(last), cwd=tmp_path), 2, "non-finite weights", name.removeprefix("model."))


def test_a_full_disk_while_writing_the_final_files_leaves_an_unfinished_resumable_run(tmp_path, monkeypatch):
    """safetensors reports ENOSPC as its own error type (a traceback on main): now an OSError naming the disk and
    saying the run is not finished; no finished.json, metrics.json or fingerprint is written after the failure."""
    from safetensors import SafetensorError

    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
    from markovformer.training.run_dir import finished_steps, write_final_files

    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=8, n_layers=1, n_heads=2))

    def full_disk(directory):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: \"No "
                              "space left on device\" }) (os error 28)")  # fmt: skip

    monkeypatch.setattr(model, "save_pretrained", full_disk)
    (tmp_path / "finished.json").write_text('{"steps": 5}')  # an extension of a finished run
    with pytest.raises(OSError) as raised:
        write_final_files(tmp_path, model, "fingerprint", {"steps": 10, "val": {"loss": 1.0}})
    assert raised.value.errno == 28 and "not finished" in str(raised.value) and "--resume" in str(raised.value)
    assert finished_steps(tmp_path) is None
    assert not (tmp_path / "metrics.json").exists() and not (tmp_path / "model" / "fingerprint.json").exists()
