"""Early stopping says when it ends a run, in its output and in metrics.json; the latest validation is reported for
its step only."""

import json
from types import SimpleNamespace

import pytest
import torch
import yaml
from conftest import TINY_RUN, run_in_process

from markovformer.training.log_rows import read_log_rows
from markovformer.training.step_checkpoints import LastValidation, ResumableEarlyStopping


def test_a_run_early_stopping_ends_says_so_at_the_step_the_patience_rule_gives(tmp_path):
    """A run that early stopping ended at step 9 of 60 printed its validation and final lines and nothing about the
    stop (Lightning's own message is silenced with its logs). The stop step is checked against the patience rule
    applied by hand to the logged validation losses (mode max on a falling loss: it stops at once)."""
    patience = 2
    trainer = {**TINY_RUN["trainer"], "max_steps": 100, "eval_every": 10, "checkpoint_every": 10,
               "early_stopping": {"monitor": "val/loss", "mode": "max", "patience": patience}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    done = run_in_process("train", "run.yaml", "output_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _, rows = read_log_rows(tmp_path / "run" / "logs" / "metrics.csv")
    losses = [(int(row["step"]), float(row["val/loss"])) for row in rows if row.get("val/loss")]
    best, waited, expected = -float("inf"), 0, None
    for step, loss in losses:
        best, waited = (loss, 0) if loss > best else (best, waited + 1)
        if waited >= patience:
            expected = step
            break
    assert expected is not None and expected < 100 and losses[-1][0] == expected
    results = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert results["steps"] == expected
    lines = [line for line in done.stdout.splitlines() if line.startswith("early stopping:")]
    assert len(lines) == 1 and "val/loss" in lines[0] and f"stopped at step {expected} of 100" in lines[0], done.stdout
    assert f"{best:.4f}" in lines[0]
    # metrics.json says so too (it said steps: 30 and nothing else, as a run of max_steps 30 would)
    best_step = next(step for step, loss in losses if loss == best)
    assert results["early_stopping"].pop("best") == pytest.approx(best, rel=1e-12)
    assert results["early_stopping"] == {
        "monitor": "val/loss", "best_step": best_step, "stopped_at_step": expected, "max_steps": 100,
        "best_checkpoint": f"checkpoints/step-{best_step:06d}.ckpt", "validations_without_improvement": patience}
    assert (tmp_path / "run" / results["early_stopping"]["best_checkpoint"]).is_file()


def test_keep_checkpoints_keeps_the_checkpoint_of_early_stoppings_best(tmp_path):
    """keep_checkpoints=1 deleted the checkpoint of the best validation (step 4 of a run early stopping ended at 12,
    best loss 2.5511 under mode max), while the stop line cited that best: its weights were gone. The best's
    checkpoint now stays; the stop line names its step and file, and `eval` of that file gives the best loss."""
    trainer = {**TINY_RUN["trainer"], "max_steps": 100, "eval_every": 5, "checkpoint_every": 5, "keep_checkpoints": 1,
               "early_stopping": {"monitor": "val/loss", "mode": "max", "patience": 2}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    done = run_in_process("train", "run.yaml", "output_dir=run", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    _, rows = read_log_rows(tmp_path / "run" / "logs" / "metrics.csv")
    losses = {int(row["step"]): float(row["val/loss"]) for row in rows if row.get("val/loss")}
    best = max(losses, key=losses.get)  # mode max on a falling loss: the first validation
    assert best < max(losses)
    kept = tmp_path / "run" / "checkpoints" / f"step-{best:06d}.ckpt"
    assert kept.is_file()
    line = next(line for line in done.stdout.splitlines() if line.startswith("early stopping:"))
    assert f"(step {best})" in line and str(kept.relative_to(tmp_path)) in line, line
    scored = run_in_process("eval", str(kept), "--json", cwd=tmp_path)
    assert abs(json.loads(scored.stdout)["metrics"]["loss"] - losses[best]) < 1e-6


def test_patience_running_out_at_max_steps_is_not_an_early_stop():
    """A run whose patience runs out at its last validation, step max_steps, ran its whole length: metrics.json
    has no early_stopping and no stop line is printed (it would say "stopped at step 60 of 60"). One validation
    sooner, or patience out before max_steps, it is one."""
    stopper = ResumableEarlyStopping(monitor="val/loss", patience=2)
    stopper.wait_count, stopper.best_score, stopper.best_step = 2, torch.tensor(2.5), 20

    def at_step(step: int) -> SimpleNamespace:  # the trainer, as far as early stopping reads it
        return SimpleNamespace(global_step=step, max_steps=60, callbacks=[stopper])

    assert stopper.stopped(at_step(60)) is None and stopper.stop_line(at_step(60)) is None
    assert stopper.stopped(at_step(40))["stopped_at_step"] == 40
    assert "stopped at step 40 of 60" in stopper.stop_line(at_step(40))
    stopper.wait_count = 1  # patience not out: the run was not stopped
    assert stopper.stopped(at_step(40)) is None


def test_the_last_validation_stands_for_its_step_only():
    """The run reports the latest validation's metrics for the step it validated; at a later step (a last step that
    is no multiple of eval_every) there are none, so the run validates that step instead of reporting stale ones."""
    validation = LastValidation()
    assert validation.metrics_at(0) is None
    metrics = {"val/loss": torch.tensor(2.0), "train/loss": torch.tensor(3.0)}
    validation.on_validation_end(SimpleNamespace(global_step=5, callback_metrics=metrics), None)
    assert validation.metrics_at(5) == {"loss": 2.0}
    assert validation.metrics_at(7) is None
