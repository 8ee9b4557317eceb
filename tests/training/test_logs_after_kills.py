"""A run killed at a write and resumed logs what the uninterrupted run logs: every metrics.csv row (a kill just
after a checkpoint of a step without validation lost that step's training rows for good), and TensorBoard events at
the steps of metrics.csv (they were one step early, and a resumed run repeated the steps after its checkpoint)."""

import csv
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from conftest import TINY_RUN, run_in_process  # beside this folder
from run_commands import at_each_write_point

from markovformer import atomic

# checkpoints at steps 15 and 30 (neither validated in fit), validation at 20 and after fit at 30
MISALIGNED = {**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": 30, "eval_every": 20, "checkpoint_every": 15,
                                      "log_every": 5}}  # fmt: skip
KILLS = ["after the step-15 checkpoint", "at the step-30 last.ckpt", "at the last write"]  # see `uninterrupted`


def checkpoint_files_at_each_write(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The checkpoint files of ``run_dir`` at each write point (``markovformer.atomic``) of a run in this process, in
    order: what a kill at write k (``MARKOVFORMER_KILL_AT_WRITE=k``) leaves in checkpoints/."""
    checkpoints = run_dir / "checkpoints"
    return at_each_write_point(monkeypatch, lambda: sorted(path.name for path in checkpoints.glob("*.ckpt")))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The misaligned run without interruption, and the write points to kill it at: just after the checkpoint of
    step 15 lands; at the write of last.ckpt of step 30 (step-000030.ckpt is whole, last.ckpt still step 15's); the
    last write (the run resumes at step 30 and validates it again)."""
    folder = tmp_path_factory.mktemp("misaligned")
    (folder / "run.yaml").write_text(yaml.safe_dump(MISALIGNED))
    with pytest.MonkeyPatch.context() as monkeypatch:
        writes = checkpoint_files_at_each_write(folder / "whole", monkeypatch)
        done = run_in_process("train", "run.yaml", "output_dir=whole", cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    points = {"after the step-15 checkpoint": 1 + next(k for k, names in enumerate(writes) if "last.ckpt" in names),
              "at the step-30 last.ckpt": 1 + next(k for k, names in enumerate(writes) if "step-000030.ckpt" in names),
              "at the last write": len(writes)}  # fmt: skip
    return folder, points, len(writes)


_RESUMED: dict = {}


def killed_and_resumed(folder: Path, point: int) -> Path:
    """The misaligned run killed at write ``point`` (a process of its own), then resumed (or started again when it
    died before config.yaml) to its end; cached per point."""
    if point not in _RESUMED:
        target = folder / f"killed-{point}"
        env = {**os.environ, "OMP_NUM_THREADS": "1", atomic.KILL_AT_WRITE: str(point)}
        start = ["train", "run.yaml", f"output_dir={target.name}"]
        killed = subprocess.run([sys.executable, "-m", "markovformer", *start], cwd=folder, env=env,
                                capture_output=True, text=True, timeout=600)  # fmt: skip
        assert killed.returncode == -9, (point, killed.stderr[-2000:])
        started = (target / "config.yaml").is_file()
        time.sleep(1)  # TensorBoard reads event files in name order, whose time is in seconds: the killed one's first
        again = run_in_process(*(["train", "--resume", target.name] if started else start), cwd=folder)
        assert again.returncode == 0, (point, again.stderr[-2000:])
        _RESUMED[point] = target
    return _RESUMED[point]


def logged_cells(run_dir: Path) -> list[tuple[str, str, str]]:
    rows = csv.DictReader((run_dir / "logs" / "metrics.csv").open())
    return sorted((row["step"], key, value) for row in rows for key, value in row.items() if value and key != "step")


def validation(run_dir: Path) -> dict:
    return json.loads((run_dir / "metrics.json").read_text())["val"]


def check_events_match_the_log(run_dir: Path) -> None:
    """Every TensorBoard scalar has the steps (with their number of events: no step twice unless logged twice, as
    the epoch is with a step's training row and its validation) and the values of the metrics.csv column."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()  # purging what a resumed run marked as logged again, as TensorBoard itself does
    logged: dict[str, Counter] = {}
    for step, key, value in logged_cells(run_dir):
        logged.setdefault(key, Counter())[(int(step), round(float(value), 4))] += 1
    scalars = {tag: Counter((event.step, round(event.value, 4)) for event in events.Scalars(tag))
               for tag in events.Tags()["scalars"]}  # fmt: skip
    assert scalars == logged


@pytest.mark.parametrize("where", ["after the step-15 checkpoint", "at the last write"])
def test_a_run_killed_around_a_checkpoint_without_validation_logs_every_row(uninterrupted, where):
    """Killed just after the checkpoint of step 15 (no validation at 15) landed, the resumed run lacked the rows
    of step 15 (its epoch and train/loss): Lightning logs a step's rows after the checkpoint hook, and the resumed
    run starts after the step. The checkpoint is now written once the rows are in metrics.csv. Killed at the last
    write and resumed at step 30, the validation after fit was logged with epoch 0 where the whole run had 1
    (Lightning's count of epochs after a fit that trained): that row now has no epoch."""
    folder, points, _ = uninterrupted
    resumed = killed_and_resumed(folder, points[where])
    assert logged_cells(resumed) == logged_cells(folder / "whole")
    assert validation(resumed) == validation(folder / "whole")


@pytest.mark.parametrize("where", [None, *KILLS])
def test_tensorboard_events_have_the_steps_of_metrics_csv_also_after_a_resume(uninterrupted, where):
    """The events were labelled one step before metrics.csv's rows (train/loss at 4, 9, ...; val/loss at 19) and a
    resumed run added the steps after its checkpoint again (..., 24, 29, 24, 29, ...). Killed at the step-30
    checkpoint, the first process's events up to step 30 are on disk and purged by the resumed one; killed at the
    last write, the resumed run validates step 30 again, which metrics.csv replaces and TensorBoard has already."""
    folder, points, _ = uninterrupted
    check_events_match_the_log(folder / "whole" if where is None else killed_and_resumed(folder, points[where]))


@pytest.mark.slow  # ~30 kill points, a process each
def test_a_misaligned_run_killed_at_every_write_logs_what_the_uninterrupted_run_logs(uninterrupted):
    """Every write point of the misaligned run (the aligned one: test_run_completion_under_kills): killed there and
    resumed, the run logs the uninterrupted run's metrics.csv and validation, and TensorBoard events at the same
    steps."""
    folder, _, writes = uninterrupted
    for point in range(1, writes + 1):
        resumed = killed_and_resumed(folder, point)
        assert logged_cells(resumed) == logged_cells(folder / "whole"), point
        assert validation(resumed) == validation(folder / "whole"), point
        check_events_match_the_log(resumed)


@pytest.mark.parametrize("eval_every", [2, 3])  # its last step validated in fit, or only after it
def test_extending_a_run_that_wrote_no_step_checkpoint_logs_its_steps(tmp_path, eval_every):
    """A run shorter than trainer.checkpoint_every has one checkpoint, the last.ckpt Lightning writes when training
    ends, whose count of logged steps already holds the last step; extended with --resume, its rows were labelled
    one step late (steps 5 and 6 logged as 6 and 7, its last validation at step 7 of 6). Extended, it logs what the
    same run trained to the new length at once (with the extension's schedule) logs, TensorBoard too, and besides
    that the validation after fit of a last step that eval_every does not validate (4 of eval_every 3: the
    extension's rows were then labelled one step late, step 6's validation logged as a second one of step 5)."""
    short = {**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": 4, "warmup_steps": 1,
                                     "eval_every": eval_every, "checkpoint_every": 50, "log_every": 1}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(short))
    assert run_in_process("train", "run.yaml", "output_dir=short", cwd=tmp_path).returncode == 0
    extended = run_in_process("train", "--resume", "short", "trainer.max_steps=6", cwd=tmp_path)
    assert extended.returncode == 0, extended.stderr[-2000:]
    whole = run_in_process("train", "run.yaml", "output_dir=whole", "trainer.max_steps=6", "trainer.decay_steps=4",
                           cwd=tmp_path)  # fmt: skip
    assert whole.returncode == 0, whole.stderr[-2000:]
    after_fit = [] if 4 % eval_every == 0 else [cell for cell in logged_cells(tmp_path / "short")
                                                if cell[0] == "4" and cell[1].startswith("val/")]  # fmt: skip
    assert len(after_fit) == (0 if 4 % eval_every == 0 else 3)  # loss, bits per token, perplexity
    assert [cell for cell in logged_cells(tmp_path / "short") if cell not in after_fit] == logged_cells(
        tmp_path / "whole")
    check_events_match_the_log(tmp_path / "short")
