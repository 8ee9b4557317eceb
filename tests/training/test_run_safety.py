"""Runs that never lose or mix data (issue 17): worker-safe batches, exact resume with workers, logs that survive
kills, validation never skipped by a kill, the run-directory lock, extension and retention of checkpoints."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import one_line_error, same_weights  # beside this folder
from torch.utils.data import DataLoader

from markovformer.training.batches import DocumentWindows, EpochBatches
from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
from markovformer.training.log_rows import read_log_rows

ENV = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def _collate(examples: list[dict]) -> dict:
    """Rows right-padded with -1 (a document's last window may be short)."""
    rows = [example["input_ids"] for example in examples]
    return {"input_ids": torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=-1)}


def _stream(dataset, workers: int, count: int) -> list[torch.Tensor]:
    loader = DataLoader(dataset, batch_size=None, num_workers=workers)
    batches = []
    for batch in loader:
        batches.append(batch["input_ids"])
        if len(batches) == count:
            return batches
    return batches


@pytest.mark.parametrize("workers", [2, 3])
def test_workers_yield_each_step_once_and_in_order(workers):
    """With W workers the loader gives exactly the batches of W = 0, from any start step (on main every worker
    replayed the whole stream, so each batch came W times)."""
    examples = [{"input_ids": torch.tensor([i, i])} for i in range(40)]
    epochs = EpochBatches(examples, batch_size=4, seed=5, collate=_collate, start=lambda: 3)
    expected = _stream(epochs, 0, 12)
    assert len({tuple(b[:, 0].tolist()) for b in expected}) == 12  # the reference itself never repeats a batch
    assert all(torch.equal(a, b) for a, b in zip(_stream(epochs, workers, 12), expected, strict=True))
    documents = [{"input_ids": torch.arange(n) + 100 * n} for n in (5, 9, 14, 3, 7)]
    walk = DocumentWindows(documents, batch_size=2, seed=1, collate=_collate, window=4, stride=4, start=lambda: 2)
    expected = _stream(walk, 0, 10)
    assert all(torch.equal(a, b) for a, b in zip(_stream(walk, workers, 10), expected, strict=True))


def test_lanes_start_at_random_windows_of_their_documents_so_they_do_not_all_end_together():
    documents = [{"input_ids": torch.arange(40)}]
    first = next(iter(DocumentWindows(documents, batch_size=16, seed=0, collate=_collate, window=4, stride=4)))
    starts = first["input_ids"][:, 0].tolist()
    assert all(start % 4 == 0 for start in starts) and len(set(starts)) > 1


def test_a_stride_longer_than_the_window_is_refused():
    """It would skip the tokens between windows: never trained on, and skipped by the carry."""
    documents = [{"input_ids": torch.arange(20)}]
    with pytest.raises(ValueError, match="stride=5"):
        DocumentWindows(documents, batch_size=1, seed=0, collate=_collate, window=4, stride=5)


STEPS = 60  # checkpoints and validations every 10 steps


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    """The tiny run's config with a validation at every checkpoint step, and one uninterrupted run of it (0 workers)."""
    import yaml
    from conftest import TINY_RUN, run_in_process

    folder = tmp_path_factory.mktemp("safety")
    values = {**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": STEPS, "eval_every": 10,
                                      "checkpoint_every": 10, "log_every": 5}}  # fmt: skip
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump(values))
    done = run_in_process("train", str(config), f"output_dir={folder / 'whole'}", cwd=folder)
    assert done.returncode == 0, done.stderr
    return config, folder / "whole"


def start(*args: str, cwd: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "markovformer", *args]
    return subprocess.Popen(command, env=ENV, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def kill_when(process: subprocess.Popen, path: Path, timeout: float = 240) -> None:
    """SIGKILL ``process`` as soon as ``path`` exists (it must still be running then)."""
    deadline = time.time() + timeout
    while not path.exists():
        assert process.poll() is None, process.stderr.read().decode()[-2000:]
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()


def logged(run_dir: Path) -> list[tuple]:
    """Every non-empty cell of the metrics log as (step, column, value), sorted."""
    _, rows = read_log_rows(run_dir / "logs" / "metrics.csv")
    return sorted((int(row["step"]), key, float(value)) for row in rows for key, value in row.items()
                  if key != "step" and value != "")  # fmt: skip


@pytest.mark.slow  # three processes; the default suite's single kill with two workers is in test_runner.py
def test_killed_twice_with_two_workers_the_run_matches_an_uninterrupted_one(run_files, tmp_path, main_cli):
    """Exact resume with num_workers=2 through kill -> resume -> kill -> resume: same weights, same final metrics,
    and the log holds every row of the uninterrupted run exactly once (on main workers duplicated the batches and
    each resume dropped the killed process's rows)."""
    config, whole = run_files
    killed = tmp_path / "killed"
    kill_when(start("train", str(config), f"output_dir={killed}", "trainer.num_workers=2", cwd=tmp_path),
              killed / "checkpoints" / "step-000020.ckpt")  # fmt: skip
    kill_when(start("train", "--resume", str(killed), cwd=tmp_path), killed / "checkpoints" / "step-000040.ckpt")
    assert not (killed / "metrics.json").exists()  # both really died before the end
    done = main_cli("train", "--resume", str(killed))
    assert done.returncode == 0, done.stderr
    assert "Previous log files" not in done.stderr
    final = [json.loads((run / "metrics.json").read_text())["val"] for run in (killed, whole)]
    assert final[0] == final[1]
    assert same_weights(killed, whole)
    rows, expected = logged(killed), logged(whole)
    assert [(s, k) for s, k, _ in rows] == [(s, k) for s, k, _ in expected]
    assert [v for *_, v in rows] == pytest.approx([v for *_, v in expected], rel=1e-6)
    assert sum(key == "val/loss" for _, key, _ in rows) == STEPS // 10  # one validation per 10 steps, none lost


def test_a_checkpoint_at_a_validation_step_is_written_after_that_validation(run_files):
    """So a kill between the two cannot skip the validation (on main the checkpoint came first)."""
    _, whole = run_files
    validation_batches = 64 // 16
    for step in range(10, STEPS + 1, 10):
        loops = load_checkpoint_file(whole / "checkpoints" / f"step-{step:06d}.ckpt")["loops"]["fit_loop"]
        done = loops["epoch_loop.val_loop.batch_progress"]["total"]["completed"]
        assert done == step // 10 * validation_batches, step


def test_a_second_writer_is_refused_naming_the_holder_and_the_first_run_finishes_untouched(run_files, tmp_path,
                                                                                          main_cli):  # fmt: skip
    """Two `train` into one folder, and `--resume` of a running run: the second exits 2 naming the first's pid; the
    first ends as if alone (on main both ran and mixed config, checkpoints and log)."""
    config, whole = run_files
    shared = tmp_path / "shared"
    long = ["trainer.max_steps=600", "trainer.eval_every=200", "trainer.checkpoint_every=200"]
    first = start("train", str(config), f"output_dir={shared}", *long, cwd=tmp_path)
    try:
        deadline = time.time() + 240
        while not (shared / "config.yaml").exists():  # past its lock and its checks: training
            assert first.poll() is None and time.time() < deadline, first.stderr.read().decode()[-2000:]
            time.sleep(0.05)
        second = main_cli("train", str(config), f"output_dir={shared}", "trainer.seed=1")
        third = main_cli("train", "--resume", str(shared))
        for other in (second, third):
            one_line_error(other, f"pid {first.pid}", "in use")
        assert first.poll() is None  # the refusals came while the first run was still training
        assert first.wait(timeout=400) == 0, first.stderr.read().decode()[-2000:]
    finally:
        first.kill()
    assert "seed: 3" in (shared / "config.yaml").read_text()
    steps = [int(row["step"]) for row in read_log_rows(shared / "logs" / "metrics.csv")[1] if row.get("train/loss")]
    assert steps == sorted(set(steps)) and json.loads((shared / "metrics.json").read_text())["steps"] == 600
    # and once the holder is gone, the lock is free again: a killed holder would have released it too
    one_line_error(main_cli("train", str(config), f"output_dir={shared}"), "already holds a run")


def test_resume_refuses_a_finished_run_and_extends_it_with_a_larger_max_steps(run_files, tmp_path, main_cli):
    """A finished run is refused in one line unless extended; extending continues from its last checkpoint with the
    learning rate held at the floor its schedule reached (no jump), keeps every earlier log row and honours
    trainer.keep_checkpoints; keys that would change what the run computes cannot change on resume."""
    import shutil

    config, whole = run_files
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    before = (run / "logs" / "metrics.csv").read_bytes()
    one_line_error(main_cli("train", "--resume", str(run)), "finished", "trainer.max_steps=N")
    one_line_error(main_cli("train", "--resume", str(run), "trainer.weight_decay=0.5"),
                   "trainer.weight_decay cannot change")  # fmt: skip
    one_line_error(main_cli("train", "--resume", str(run), "trainer.max_steps=30"), "below the 60 steps")
    assert (run / "logs" / "metrics.csv").read_bytes() == before  # refusals touch nothing
    done = main_cli("train", "--resume", str(run), "trainer.max_steps=80", "trainer.keep_checkpoints=2")
    assert done.returncode == 0, done.stderr
    assert f"resuming from {run / 'checkpoints' / 'last.ckpt'} (step 60)" in done.stdout
    assert json.loads((run / "metrics.json").read_text())["steps"] == 80
    assert sorted(p.name for p in (run / "checkpoints").glob("*.ckpt")) == [
        "last.ckpt", "step-000070.ckpt", "step-000080.ckpt"]  # fmt: skip
    rows = read_log_rows(run / "logs" / "metrics.csv")[1]
    assert logged(whole) == [cell for cell in logged(run) if cell[0] <= STEPS]  # the first 60 steps, untouched
    floor = 3e-3 * 0.1  # TrainerConfig's lr and lr_floor: the schedule had reached its floor at step 60
    extension = [float(r["lr-AdamW/pg1"]) for r in rows if r.get("lr-AdamW/pg1") and int(r["step"]) > STEPS]
    assert extension and all(lr == pytest.approx(floor) for lr in extension)
    resolved = (run / "config.yaml").read_text()
    assert "max_steps: 80" in resolved and "decay_steps: 60" in resolved and "keep_checkpoints: 2" in resolved


def test_a_failed_resume_keeps_every_log_row(run_files, tmp_path, main_cli):
    """A resume that fails (a damaged last checkpoint, the checkpoint of another model) says so in one line and
    leaves the log as it was (on main the CSV logger had already deleted metrics.csv)."""
    import shutil

    config, whole = run_files
    run = tmp_path / "run"
    shutil.copytree(whole, run)
    (run / "finished.json").unlink()  # as if killed after its last checkpoint
    (run / "metrics.json").unlink()
    before = (run / "logs" / "metrics.csv").read_bytes()
    last = run / "checkpoints" / "last.ckpt"
    good = last.read_bytes()
    last.write_bytes(good[: len(good) // 2])
    one_line_error(main_cli("train", "--resume", str(run)), "last.ckpt")
    other = tmp_path / "other"
    done = main_cli("train", str(config), f"output_dir={other}", "model.d_model=32", "trainer.max_steps=10")
    assert done.returncode == 0, done.stderr[-2000:]
    shutil.copy(other / "checkpoints" / "last.ckpt", last)
    one_line_error(main_cli("train", "--resume", str(run)), "last.ckpt", "does not match", "another run")
    foreign = load_checkpoint_file(last)
    del foreign["run_fingerprint"], foreign["run_settings"]  # as written before both: the tensors are compared, by name
    save_checkpoint_file(foreign, last)
    one_line_error(main_cli("train", "--resume", str(run)), "last.ckpt", "does not match", "model.", "has shape")
    assert (run / "logs" / "metrics.csv").read_bytes() == before


@pytest.mark.parametrize(
    ("setting", "fragments"),
    [
        (["trainer.early_stopping={monitor: val/accuracy}"], ("monitor='val/accuracy'", "val/loss")),
        (["trainer.early_stopping={monitor: val/losss}"], ("monitor='val/losss'", "did you mean 'val/loss'?")),
        (["model.position=learned", "model.max_positions=8"], ("model.max_positions=8 is shorter than the data's "
                                                               "longest inputs (tokens: train 24, val 24, test 24)",)),
    ],
    ids=["a monitor validation does not log", "a misspelt loss monitor", "max_positions below the data's length"],
)
def test_a_model_that_cannot_score_its_data_fails_before_the_run_folder_exists(run_files, tmp_path, main_cli,
                                                                                setting, fragments):  # fmt: skip
    """Settings only the first validation shows wrong failed in training with a traceback, after config.yaml and
    data.json were written: the folder could then be neither resumed (the same failure) nor trained into again
    ("already holds a run"). They fail in one line before anything is written."""
    config, _ = run_files
    one_line_error(main_cli("train", str(config), "output_dir=bad", *setting), *fragments)
    assert not (tmp_path / "bad").exists()  # not even the run lock's file (an empty folder was left behind)
    (tmp_path / "mine").mkdir()  # a folder the user made is the user's: kept, with the lock's file
    one_line_error(main_cli("train", str(config), "output_dir=mine", *setting), *fragments)
    assert [path.name for path in (tmp_path / "mine").iterdir()] == [".lock"]
    assert main_cli("train", str(config), "output_dir=mine").returncode == 0  # no "already holds a run"


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_inputs_longer_than_learned_positions_are_refused_whichever_split_holds_them(pooling):
    """The first validation batch was the only check: a training example longer than max_positions (validation's
    short) failed midway through training as the model's bare 'sequence length 12 exceeds max_positions=10'. Every
    split's longest input is now held to what the model reads, the [CLS] vector's position counted, and so is the
    split eval scores."""
    from markovformer import MarkovianTransformerConfig, MarkovianTransformerForSequenceClassification
    from markovformer.data.bundle import DataBundle
    from markovformer.training.tasks import TASKS
    from markovformer.training.trainer_config import ConfigError

    def example(length: int) -> dict:
        return {"input_ids": torch.ones(length, dtype=torch.long), "labels": torch.tensor(0)}

    bundle = DataBundle(train=[example(4), example(12)], val=[example(6)], test=[example(10)], info={})  # 10 fits
    config = MarkovianTransformerConfig(vocab_size=4, d_model=8, n_layers=1, n_heads=2, num_labels=2, causal=False,
                                        position="learned", max_positions=11, pooling=pooling)  # fmt: skip
    model = MarkovianTransformerForSequenceClassification(config)
    reads = 11 - (pooling == "cls")
    assert model.longest_input == reads
    task = TASKS["sequence_classification"]()
    task.check_data(bundle)
    with pytest.raises(ConfigError, match=r"model\.max_positions=11.* longest inputs \(tokens: train 12\): set model"
                                          rf"\.max_positions >= {12 + 11 - reads}"):  # fmt: skip
        task.check_model(model)
    task.check_scored(model, bundle.val, "val")  # 6 tokens fit
    with pytest.raises(ConfigError, match=r"tokens: val 12\)"):
        task.check_scored(model, bundle.train, "val")
    with pytest.raises(ValueError, match="sequence length 12 exceeds max_positions=11"):  # what it would meet
        model(input_ids=torch.ones(1, 12, dtype=torch.long))


def test_scoring_the_first_batch_leaves_the_random_state_and_the_mode(tiny_run):
    """The check above scores a batch before training: it must not shift the run's random stream or its mode, even
    where scoring draws from it (sampling; the model here draws nothing in eval mode, so its task is made to)."""
    from markovformer.training.build import build_data, build_model, build_run_task
    from markovformer.training.evaluation import first_batch_metrics
    from markovformer.training.run_config import resolve_run_config

    config = resolve_run_config({**tiny_run, "output_dir": "unused"})
    bundle = build_data(config)
    task, model = build_run_task(config, bundle), build_model(config, bundle.info)
    score = task.score

    def drawing_score(*args):
        torch.rand(3)
        return score(*args)

    task.score = drawing_score
    torch.manual_seed(11)
    state = torch.get_rng_state()
    metrics = first_batch_metrics(task, model, bundle)
    assert torch.equal(torch.get_rng_state(), state) and model.training
    assert {"loss", "perplexity"} <= metrics.keys() and math.isfinite(metrics["loss"])


def test_a_log_row_cut_short_by_a_kill_is_left_out(tmp_path):
    """A kill inside a row's write leaves it without its newline, a number possibly cut (0.41 as 0.4): not a row."""
    log = tmp_path / "metrics.csv"
    log.write_text("step,train/loss\n1,0.52\n2,0.4")
    assert read_log_rows(log) == (["step", "train/loss"], [{"step": "1", "train/loss": "0.52"}])


def test_a_run_killed_in_its_final_files_logs_its_last_validation_once_at_its_step(tmp_path, main_cli, tiny_run):
    """A run whose last step is not a validation step validates after fit. Killed while writing its final files and
    resumed, it validates again: the row was labelled one step early (Lightning's count of stepped batches, which
    the checkpoint holds one behind) beside the first process's row. Now one validation row, at the last step."""
    import shutil

    import yaml

    from markovformer.training.run_dir import mark_unfinished

    values = {**tiny_run, "trainer": {**tiny_run["trainer"], "max_steps": 12, "eval_every": 5, "checkpoint_every": 4,
                                      "log_every": 2, "logger": "csv"}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(values))
    assert main_cli("train", "run.yaml", "output_dir=whole").returncode == 0
    shutil.copytree(tmp_path / "whole", tmp_path / "killed")
    mark_unfinished(tmp_path / "killed")  # what a kill while the final files are written leaves
    assert main_cli("train", "--resume", "killed").returncode == 0

    def validation_rows(run: str) -> list[tuple[int, str]]:
        rows = read_log_rows(tmp_path / run / "logs" / "metrics.csv")[1]
        return [(int(row["step"]), row["val/loss"]) for row in rows if row.get("val/loss")]

    assert validation_rows("whole") == validation_rows("killed")
    logs = [read_log_rows(tmp_path / run / "logs" / "metrics.csv")[1] for run in ("whole", "killed")]
    trained = [[(row["step"], row["train/loss"]) for row in rows if row.get("train/loss")] for rows in logs]
    assert trained[0] == trained[1] and trained[0][-1][0] == "12"  # the last step's train row stays
    assert [step for step, _ in validation_rows("whole")] == [5, 10, 12]


def test_a_sigterm_in_a_checkpoint_step_writes_that_steps_checkpoint_and_names_it(tmp_path, tiny_run, monkeypatch):
    """Step checkpoints are taken at a step's end and written at the next hook; a SIGTERM raised between the two
    (Lightning raises it once the step's rows are logged) writes the taken one before the run stops, so the line
    names it and the resume starts there, not a checkpoint_every earlier."""
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train
    from markovformer.training.step_checkpoints import StepCheckpoints
    from markovformer.training.trainer_config import RunTerminated

    take = StepCheckpoints.on_train_batch_end

    def stopped_after_step_10(self, trainer, *args):
        take(self, trainer, *args)
        if trainer.global_step == 10:
            trainer._signal_connector.received_sigterm = True  # what Lightning's SIGTERM handler sets

    monkeypatch.setattr(StepCheckpoints, "on_train_batch_end", stopped_after_step_10)
    trainer = {**tiny_run["trainer"], "max_steps": 20, "eval_every": 100, "checkpoint_every": 5}
    values = {**tiny_run, "output_dir": str(tmp_path / "run"), "trainer": trainer}
    with pytest.raises(RunTerminated, match="at step 10 of 20: its last checkpoint is step-000010.ckpt"):
        train(resolve_run_config(values))
    saved = load_checkpoint_file(tmp_path / "run" / "checkpoints" / "step-000010.ckpt")
    assert saved["global_step"] == 10


def test_step_checkpoints_are_ordered_by_step_number_past_six_digits(tmp_path):
    """Names are step-{step:06d}: at step 1,000,000 they grow a digit, and a name order would put that file before
    step-999999 (pruning with `keep` would then delete the newest, and a diverged run would restart from the older)."""
    from markovformer.training.checkpoint import step_checkpoints

    for name in ("step-1000000.ckpt", "step-999999.ckpt", "step-000100.ckpt", "step-010000.ckpt", "last.ckpt"):
        (tmp_path / name).write_bytes(b"")
    assert [path.name for path in step_checkpoints(tmp_path)] == [
        "step-000100.ckpt", "step-010000.ckpt", "step-999999.ckpt", "step-1000000.ckpt"]  # fmt: skip
