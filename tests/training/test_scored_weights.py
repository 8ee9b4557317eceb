"""``eval`` and ``inspect`` of a run that is still training report the step of the weights they scored: the one read
that loaded them, never a second read of last.ckpt or finished.json, which the run replaces meanwhile."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import TINY_RUN  # beside this folder


def test_eval_and_inspect_name_the_step_they_scored_though_the_run_writes_its_next_checkpoint(tmp_path, monkeypatch):
    """A run at step 10 writes step 20's last.ckpt, then finishes, after the weights were read: eval printed step
    660 (or the final model) for the numbers of step 600's weights, with exit 0."""
    from markovformer.training import run_dir as run_files
    from markovformer.training.inspection import write_inspection_report
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import evaluate, train

    run_dir = tmp_path / "run"
    trainer = {**TINY_RUN["trainer"], "max_steps": 20, "eval_every": 10, "checkpoint_every": 10, "logger": "csv"}
    train(resolve_run_config({**TINY_RUN, "output_dir": str(run_dir), "trainer": trainer}))
    checkpoints = run_dir / "checkpoints"
    by_name = {step: evaluate(checkpoints / f"step-{step:06d}.ckpt") for step in (10, 20)}
    assert by_name[10]["metrics"]["loss"] != by_name[20]["metrics"]["loss"]  # the numbers tell the steps apart
    shutil.copy(checkpoints / "step-000020.ckpt", tmp_path / "step-20.ckpt")

    def at_step_10() -> None:  # the run as it stood while training: step 10 saved, not finished
        shutil.copy(checkpoints / "step-000010.ckpt", checkpoints / "last.ckpt")
        (checkpoints / "step-000020.ckpt").unlink(missing_ok=True)
        (run_dir / "finished.json").unlink(missing_ok=True)

    loaded = run_files.check_finite  # load_run's last call: the weights are in memory

    def then_the_run_moves_on(model, source):
        for name in ("step-000020.ckpt", "last.ckpt"):
            shutil.copy(tmp_path / "step-20.ckpt", checkpoints / name)
        (run_dir / "finished.json").write_text(json.dumps({"steps": 20}))
        return loaded(model, source)

    monkeypatch.setattr(run_files, "check_finite", then_the_run_moves_on)
    at_step_10()
    scored = evaluate(run_dir)
    assert scored["weights"] == {"source": "checkpoints/last.ckpt", "step": 10, "finished": False,
                                 "run_finished": False}  # fmt: skip
    assert scored["metrics"] == pytest.approx(by_name[10]["metrics"], rel=1e-6)

    at_step_10()
    page = write_inspection_report(run_dir).read_text()
    assert "checkpoints/last.ckpt at step 10 " in page and "the final model" not in page
