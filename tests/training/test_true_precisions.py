"""Runs trained under ``trainer.precision=64-true`` or ``bf16-true`` hold every weight in that dtype (Lightning's
precision plugin casts the module): they resume exactly and ``eval`` scores their final model as validation did."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import TINY_RUN, same_weights
from safetensors.torch import load_file

from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import evaluate, resume, train


@pytest.mark.parametrize(("precision", "dtype"), [("64-true", torch.float64), ("bf16-true", torch.bfloat16)])
def test_a_true_precision_run_resumes_exactly_and_evaluates_as_it_validated(tmp_path, precision, dtype):
    """4 steps, and 2 then a resume to 4: the same weights bit for bit, stored in the precision's dtype; eval of the
    final model reads the logged validation loss (before, resume and eval refused the run's own weights: "stored as
    torch.float64, the model's is torch.float32")."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=4, decay_steps=4, warmup_steps=1, eval_every=2, checkpoint_every=2, log_every=2,
                             logger="csv", precision=precision)  # fmt: skip
    whole = train(resolve_run_config({**values, "output_dir": str(tmp_path / "whole")}))
    half = {**values, "trainer": {**values["trainer"], "max_steps": 2}, "output_dir": str(tmp_path / "half")}
    train(resolve_run_config(half))
    resumed = resume(tmp_path / "half", ["trainer.max_steps=4"])

    stored = load_file(tmp_path / "whole" / "model" / "model.safetensors")
    assert {tensor.dtype for tensor in stored.values() if tensor.is_floating_point()} == {dtype}
    assert same_weights(tmp_path / "half", tmp_path / "whole")
    assert resumed["val"] == whole["val"]
    assert evaluate(tmp_path / "whole")["metrics"]["loss"] == pytest.approx(whole["val"]["loss"], rel=1e-6)
