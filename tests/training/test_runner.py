"""The engine end to end: kill and resume, DDP, eval reproducing training's numbers, and run-directory contents."""

import contextlib
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from conftest import TINY_RUN

from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import evaluate


def final_val(run_dir) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())["val"]


def test_killed_run_resumes_to_the_same_final_metrics(tiny_config, tmp_path, main_cli):
    run_cli = main_cli  # the killed run below is a process of its own
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = run_cli("train", str(tiny_config), f"output_dir={whole}")
    assert done.returncode == 0, done.stderr

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    # two DataLoader workers here, none in the uninterrupted run: the batches must not depend on it
    command = [sys.executable, "-m", "markovformer", "train", str(tiny_config), f"output_dir={killed}",
               "trainer.num_workers=2"]  # fmt: skip
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    while not (killed / "checkpoints" / "step-000020.ckpt").exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "metrics.json").exists()  # it really died before the end
    for checkpoint in (killed / "checkpoints").glob("*.ckpt"):  # every checkpoint left behind is whole
        assert load_checkpoint_file(checkpoint)["global_step"] >= 10

    # the run's clock is saved with the checkpoint and goes on from it: set it far beyond this test's own time, in
    # every checkpoint, since a kill between step-000020.ckpt and last.ckpt resumes from the step checkpoint
    for path in (killed / "checkpoints").glob("*.ckpt"):
        checkpoint = load_checkpoint_file(path)
        assert checkpoint["callbacks"]["PrintProgress"]["train_seconds"] > 0
        checkpoint["callbacks"]["PrintProgress"]["train_seconds"] = 10_000.0
        save_checkpoint_file(checkpoint, path)
    resumed = run_cli("train", "--resume", str(killed))
    assert resumed.returncode == 0, resumed.stderr
    assert 10_000 < json.loads((killed / "metrics.json").read_text())["train_seconds"] < 10_000 + 240
    assert "resuming from" in resumed.stdout
    assert final_val(killed)["loss"] == pytest.approx(final_val(whole)["loss"], rel=1e-6)
    tokens = [json.loads((run / "metrics.json").read_text())["train_tokens"] for run in (whole, killed)]
    assert tokens[0] == tokens[1] > 0  # the killed process's steps counted once, from its checkpoint
    assert not list((killed / "checkpoints").glob(".*.tmp"))

    # the log keeps the killed process's rows and holds each row of the uninterrupted run exactly once
    def cells(run_dir):
        rows = csv.DictReader((run_dir / "logs" / "metrics.csv").open())
        return sorted((int(row["step"]), key) for row in rows for key, value in row.items() if value and key != "step")

    assert cells(killed) == cells(whole) and min(step for step, _ in cells(killed)) < 20


def test_eval_reproduces_the_logged_validation_metrics_and_the_run_directory_is_complete(
    tiny_config, tmp_path, main_cli, tiny_run
):
    run_cli = main_cli
    run_dir = tmp_path / "run"
    assert run_cli("train", str(tiny_config), f"output_dir={run_dir}").returncode == 0
    for name in ("config.yaml", "environment.json", "data.json", "metrics.json", "model/model.safetensors",
                 "checkpoints/last.ckpt", "logs/metrics.csv"):  # fmt: skip
        assert (run_dir / name).exists(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    logged = final_val(run_dir)
    for target in (run_dir, run_dir / "checkpoints" / "last.ckpt"):  # the final model and the last checkpoint
        measured = evaluate(target)["metrics"]
        assert measured["loss"] == pytest.approx(logged["loss"], rel=1e-6)
    # the resolved config is complete: it rebuilds the same run
    resolved = resolve_run_config(yaml.safe_load((run_dir / "config.yaml").read_text()))
    assert resolved.trainer.max_steps == TINY_RUN["trainer"]["max_steps"] and resolved.data["lags"] == [1, 2]
    environment = json.loads((run_dir / "environment.json").read_text())
    assert environment["torch"] == torch.__version__
    data = json.loads((run_dir / "data.json").read_text())
    assert data["sizes"] == {"train": 512, "val": 64, "test": 32}
    assert len(set(data["splits"]["generator_seeds"].values())) == 3  # the splits come from different streams



def test_a_run_leaves_torch_deterministic_algorithms_setting_as_it_found_it(tmp_path, tiny_run, monkeypatch):
    """Lightning sets torch.use_deterministic_algorithms to trainer.deterministic for the run, process-wide: a
    deterministic run left it on for the rest of the session, and a default one turned off what the caller had on.
    A deterministic run also turned off the caller's cudnn.benchmark and left CUBLAS_WORKSPACE_CONFIG=:4096:8 set."""
    from markovformer.training.runner import train

    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    for deterministic, before in ((True, False), (False, True)):
        values = yaml.safe_load(yaml.safe_dump(tiny_run))
        values["trainer"].update({"deterministic": deterministic, "max_steps": 2, "warmup_steps": 1, "eval_every": 2,
                                  "logger": "csv"})
        values["output_dir"] = str(tmp_path / f"deterministic-{deterministic}")
        torch.use_deterministic_algorithms(before)
        try:
            train(resolve_run_config(values))
            assert torch.are_deterministic_algorithms_enabled() is before, deterministic
            assert torch.backends.cudnn.benchmark and "CUBLAS_WORKSPACE_CONFIG" not in os.environ, deterministic
        finally:
            torch.use_deterministic_algorithms(False)


def test_a_run_leaves_the_callers_random_states_and_seed_variables_as_it_found_them(tmp_path, tiny_run, monkeypatch):
    """seed_everything reseeded torch, numpy and Python's random for the run and set PL_GLOBAL_SEED and
    PL_SEED_WORKERS: after train() returned, a caller's next draws came from the run's seed (trainer.seed) and its
    own seed_everything() took that seed. The draws after a run are those the caller's seed gives without it."""
    import random

    import numpy as np

    from markovformer.training.isolation import RUN_VARIABLES
    from markovformer.training.runner import train

    for name in RUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    values = yaml.safe_load(yaml.safe_dump(tiny_run))
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "logger": "csv"})
    values["output_dir"] = str(tmp_path / "run")

    def draws() -> tuple:
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), [random.random() for _ in range(3)]

    def seed(value: int) -> None:
        torch.manual_seed(value), np.random.seed(value), random.seed(value)

    seed(1234)
    expected = draws()
    seed(1234)
    train(resolve_run_config(values))
    assert draws() == expected
    assert not {name for name in RUN_VARIABLES if name in os.environ}


def test_a_run_in_a_process_whose_default_dtype_is_float64_trains_and_loads_as_in_a_fresh_one(tmp_path, tiny_run):
    """Under a caller's torch.set_default_dtype(torch.float64), a 32-true run built its data and float64 weights: it
    trained other numbers (validation loss 1.3384 for 1.3008 at step 4) and saved float64 weights, and evaluating a
    float32 run there was refused ('stored as torch.float32, the model's is torch.float64')."""
    from safetensors import safe_open

    from markovformer.training.runner import train

    values = yaml.safe_load(yaml.safe_dump(tiny_run))
    values["trainer"].update({"max_steps": 4, "warmup_steps": 1, "eval_every": 2, "logger": "csv",
                              "deterministic": False})  # fmt: skip
    fresh = train(resolve_run_config({**values, "output_dir": str(tmp_path / "fresh")}))["val"]
    torch.set_default_dtype(torch.float64)
    try:
        in_float64 = train(resolve_run_config({**values, "output_dir": str(tmp_path / "float64")}))["val"]
        assert torch.get_default_dtype() == torch.float64  # the caller's, back
        scored = evaluate(tmp_path / "fresh")["metrics"]
    finally:
        torch.set_default_dtype(torch.float32)
    assert in_float64 == fresh
    assert scored["loss"] == pytest.approx(fresh["loss"], rel=1e-6)
    with safe_open(tmp_path / "float64" / "model" / "model.safetensors", "pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.float32}


@pytest.mark.filterwarnings("ignore:Checkpoint directory .* exists and is not empty")
def test_each_resume_adds_its_environment_and_command_to_environment_json(tmp_path, tiny_run, monkeypatch):
    """environment.json was written when the run started and never again: a run extended (or resumed) with another
    command line, markovformer or torch said nothing of it. Each resume that goes ahead adds its record; the
    start's stays as it was, and a refused resume adds nothing."""
    from markovformer.training.run_config import ConfigError
    from markovformer.training.runner import resume, train

    values = yaml.safe_load(yaml.safe_dump(tiny_run))
    values["trainer"].update({"max_steps": 4, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    values["output_dir"] = str(tmp_path / "run")
    monkeypatch.setattr(sys, "argv", ["markovformer", "train", "tiny.yaml"])
    train(resolve_run_config(values))
    path = tmp_path / "run" / "environment.json"
    start = json.loads(path.read_text())
    monkeypatch.setattr(sys, "argv", ["markovformer", "train", "--resume", "run", "trainer.max_steps=6"])
    resume(tmp_path / "run", ["trainer.max_steps=6"])
    record = json.loads(path.read_text())
    assert {key: value for key, value in record.items() if key != "resumes"} == start
    assert [(entry["command"], entry["from_step"], entry["torch"]) for entry in record["resumes"]] == [
        (["markovformer", "train", "--resume", "run", "trainer.max_steps=6"], 4, torch.__version__)]
    with pytest.raises(ConfigError, match="finished"):  # nothing to continue: refused before it changes the run
        resume(tmp_path / "run")
    assert json.loads(path.read_text()) == record

def test_a_second_run_into_the_same_directory_is_refused(tiny_config, tmp_path, main_cli):
    run_cli = main_cli
    run_dir = tmp_path / "run"
    assert run_cli("train", str(tiny_config), f"output_dir={run_dir}", "trainer.max_steps=10").returncode == 0
    again = run_cli("train", str(tiny_config), f"output_dir={run_dir}")
    assert again.returncode == 2 and "--resume" in again.stderr


def test_two_process_ddp_matches_the_single_process_run(tiny_config, tmp_path, cli, main_cli):
    """Two gloo processes with batch B each see exactly the examples one process sees with batch 2B; and the
    validation loss they log is eval's of the whole split in one process. 33 sequences split unevenly: one process
    scores 17 in 2 batches, the other 16 in 1 (Lightning's padding sampler counted a repeated example twice; the
    3-process case of the report is test_ddp_runs_are_exact's, in the slow suite)."""
    run_cli = cli
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    common = ["trainer.max_steps=20", "trainer.eval_every=20", "model.dropout=0.0", "trainer.deterministic=false",
              "data.val_sequences=33"]  # fmt: skip
    one = main_cli("train", str(tiny_config), f"output_dir={single}", "trainer.batch_size=16", *common)
    assert one.returncode == 0, one.stderr
    two = run_cli("train", str(tiny_config), f"output_dir={ddp}", "trainer.batch_size=8", "trainer.devices=2",
                  "trainer.strategy=ddp", *common, cwd=tmp_path)  # fmt: skip
    assert two.returncode == 0, two.stderr
    # validation's metrics are synced across the processes: Lightning's advice to sync them again is not shown
    assert "sync_dist" not in two.stderr + two.stdout
    # Same data and same averaged gradients; only the order of floating-point reductions differs.
    assert final_val(ddp)["loss"] == pytest.approx(final_val(single)["loss"], rel=1e-4)
    assert final_val(ddp)["loss"] == pytest.approx(evaluate(ddp)["metrics"]["loss"], rel=1e-5)  # the same weights
    tokens = [json.loads((run / "metrics.json").read_text())["train_tokens"] for run in (single, ddp)]
    order = max(TINY_RUN["data"]["lags"])  # a chain's first `order` labels are -100: seq_len - order scored tokens
    assert tokens[0] == tokens[1] == 20 * 16 * (TINY_RUN["data"]["seq_len"] - order)  # both processes' own


LONG_VALIDATION = ("data.val_sequences=6000", "trainer.eval_batch_size=4")  # a validation of ~5 s on 2 processes


@pytest.mark.parametrize(("settings", "signalled_after", "target"), [
    pytest.param(("trainer.max_steps=100000",), "step ", 1, id="process 1 alone, in training"),
    pytest.param(("trainer.max_steps=10", "trainer.eval_every=20", *LONG_VALIDATION), "10/10", 1,
                 id="in the validation after the last step"),  # the run's one validation: none within fit
    pytest.param(("trainer.max_steps=40", "trainer.eval_every=20", *LONG_VALIDATION), "40/40", 0,
                 id="in the last step's own validation", marks=pytest.mark.slow),
])  # fmt: skip
def test_a_sigterm_to_one_process_of_a_ddp_run_stops_every_process_together(tiny_config, tmp_path, settings,
                                                                            signalled_after, target):  # fmt: skip
    """Lightning's handler broadcast inside the signal handler and stopped each process on its own flag: a SIGTERM
    that reached process 1 alone (or the processes a step apart) paired two different collectives, so the run hung
    for ever or failed with "Connection reset by peer", exit status 1, its last steps unsaved; one in the validation
    after the last step hung too, and one after the last step's all-reduce was dropped (exit 0). Every process now
    stops at the same point, with the run's one line and 143."""
    run_dir = tmp_path / "ddp"
    command = [sys.executable, "-m", "markovformer", "train", str(tiny_config), f"output_dir={run_dir}",
               "trainer.devices=2", "trainer.strategy=ddp", "trainer.checkpoint_every=10", *settings]  # fmt: skip
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    children: list[str] = []
    try:
        for line in process.stdout:  # process 0's progress lines
            if signalled_after in line:
                break
        children = subprocess.run(["pgrep", "-P", str(process.pid)], capture_output=True, text=True).stdout.split()
        assert len(children) == 1, children  # process 1, started by Lightning's launcher
        time.sleep(1.0)
        os.kill(int(children[0]) if target == 1 else process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:  # hung: no process may outlive the test
            for child in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(child), signal.SIGKILL)
            process.kill()
            process.communicate()
    assert process.returncode == 143, err[-3000:]
    lines = [line for line in err.splitlines() if line.startswith("markovformer:")]
    assert len(lines) == 1 and "terminated (SIGTERM)" in lines[0] and "Traceback" not in err, err[-3000:]


def test_inspect_writes_every_figure_and_links_them(tiny_config, tmp_path, main_cli):
    run_dir = tmp_path / "run"
    assert main_cli("train", str(tiny_config), f"output_dir={run_dir}", "trainer.max_steps=20").returncode == 0
    done = main_cli("inspect", str(run_dir), "--layers", "0")
    assert done.returncode == 0, done.stderr
    report = run_dir / "report"
    page = (report / "index.html").read_text()
    for name in ("curves.png", "transition_strengths.png", "order_gates.png", "attention.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and name in page
    assert "entropy rate" in page
    bad = main_cli("inspect", str(run_dir), "--layers", "5")
    assert bad.returncode == 2 and "--layers 5" in bad.stderr


def test_a_ctrl_c_while_the_final_files_are_written_says_the_run_is_unfinished(tiny_config, tmp_path, main_cli,
                                                                               monkeypatch):  # fmt: skip
    """A Ctrl-C landing in the final files' writes printed "train was interrupted (Ctrl-C)", the line of a command
    with nothing to keep: whether the run was finished and what to do went unsaid. Now the run's line: not
    finished, --resume finishes it (and does)."""
    from markovformer.training import runner

    write = runner.write_final_files

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "write_final_files", interrupted)
    done = main_cli("train", str(tiny_config), "output_dir=run")
    monkeypatch.setattr(runner, "write_final_files", write)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 130 and len(lines) == 1, done.stderr
    assert "while writing its final files after step 40: it is not finished" in lines[0]
    assert "markovformer train --resume run" in lines[0] and not (tmp_path / "run" / "finished.json").exists()
    resumed = main_cli("train", "--resume", "run")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "run" / "finished.json").read_text())["steps"] == 40


def test_a_run_inside_the_folder_of_its_documents_is_refused_before_it_writes(tmp_path, monkeypatch):
    """data.path=docs, output_dir=docs/sub/run: the run trained, then its eval, inspect and --resume read its own
    files as documents ('docs/sub/run/checkpoints/last.ckpt: byte 0xd0 at offset 0 is not valid UTF-8')."""
    from markovformer.training.runner import train
    from markovformer.training.trainer_config import ConfigError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs").mkdir()
    for index in range(20):
        (tmp_path / "docs" / f"{index:02d}.txt").write_text(f"document {index}: to be or not to be, " * 20)
    run = {**TINY_RUN, "data": {"source": "text", "path": "docs", "seq_len": 16, "cache_dir": str(tmp_path / "c")},
           "trainer": {**TINY_RUN["trainer"], "max_steps": 1, "warmup_steps": 1, "logger": "csv"},
           "output_dir": "docs/sub/run"}  # fmt: skip
    with pytest.raises(ConfigError, match=r"output_dir='docs/sub/run' is inside data.path='docs', a folder whose"):
        train(resolve_run_config(run))
    assert sorted(path.name for path in (tmp_path / "docs").iterdir()) == [f"{i:02d}.txt" for i in range(20)]


def test_a_refused_run_leaves_none_of_the_folders_it_made(tmp_path, monkeypatch):
    """output_dir=fresh/a/run refused (a seq_len longer than the data): the run's folder went, fresh/a stayed; a
    folder that was there before (keep/) stays."""
    from markovformer.training.runner import train

    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep").mkdir()
    (tmp_path / "notes.txt").write_text("to be or not to be, " * 50)
    for output_dir in ("fresh/a/run", "keep/b/run"):
        run = {**TINY_RUN, "output_dir": output_dir, "trainer": {**TINY_RUN["trainer"], "logger": "csv"},
               "data": {"source": "text", "path": "notes.txt", "seq_len": 5000, "cache_dir": str(tmp_path / "c")}}
        with pytest.raises(ValueError, match="fewer than seq_len"):
            train(resolve_run_config(run))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["c", "keep", "notes.txt"]
    assert list((tmp_path / "keep").iterdir()) == []
