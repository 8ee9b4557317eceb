"""A run that accumulates gradients over micro-batches resumes exactly: the training stream, counted in batches,
goes on from ``global_step * accumulate_grad_batches``, not from ``global_step`` (which would train again on the
second half of the batches already seen)."""

from __future__ import annotations

import copy

from conftest import TINY_RUN, same_weights

from markovformer.training.checkpoint import load_checkpoint_file
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import resume, train


def test_a_run_with_accumulation_resumed_halfway_has_the_uninterrupted_runs_weights(tmp_path):
    """20 steps of 2 micro-batches each, and 10 of them then a resume to 20: the same weights, bit for bit (the
    reviewer's mutation, starting the resumed stream at batch 10 instead of 20, moved the final loss by 6e-4)."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=20, decay_steps=20, accumulate_grad_batches=2, eval_every=10,
                             checkpoint_every=10, log_every=10, logger="csv")  # fmt: skip
    whole = train(resolve_run_config({**values, "output_dir": str(tmp_path / "whole")}))
    half = {**values, "trainer": {**values["trainer"], "max_steps": 10}, "output_dir": str(tmp_path / "half")}
    assert train(resolve_run_config(half))["steps"] == 10
    assert load_checkpoint_file(tmp_path / "half" / "checkpoints" / "last.ckpt")["global_step"] == 10
    resumed = resume(tmp_path / "half", ["trainer.max_steps=20"])
    assert resumed["steps"] == whole["steps"] == 20

    assert same_weights(tmp_path / "half", tmp_path / "whole")
    assert resumed["val"] == whole["val"]
