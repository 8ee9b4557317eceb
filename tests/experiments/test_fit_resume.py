"""A fit killed midway resumes from its saved progress and ends exactly as an uninterrupted fit; inside an
experiment cell the progress is kept beside the cell, and goes when the cell is whole."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from markovformer.experiments.fitting import FitCheckpoint, fit_on_stream
from markovformer.experiments.report import ExperimentReport, forget_cells


def _fit(checkpoint: FitCheckpoint | None = None, kill_at_step: int | None = None, lr: float = 0.05,
         log=None) -> tuple[nn.Module, object]:  # fmt: skip
    """A small regression fit (with dropout, so the global RNG's state matters too) under a cosine schedule."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Dropout(0.2), nn.Linear(16, 1))
    probe = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    drawn = []

    def sample(generator):
        drawn.append(1)
        if len(drawn) == kill_at_step:
            raise KeyboardInterrupt  # as a kill between two steps
        return torch.randn(16, 4, generator=generator)

    def loss(batch):
        return ((model(batch).squeeze(-1) - batch.sum(-1)) ** 2).mean()

    def evaluate():
        return float(((model(probe).squeeze(-1) - probe.sum(-1)) ** 2).mean())

    result = fit_on_stream(model, loss, sample, evaluate, steps=12, lr=lr, seed=3, eval_every=5, warmup_steps=2,
                           decay="cosine", checkpoint=checkpoint, log=log)  # fmt: skip
    return model, result


def _same_weights(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_killed_fit_resumes_to_the_uninterrupted_fits_weights_and_curve(tmp_path):
    straight, expected = _fit()
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", {"cell": "a"}, every_seconds=0.0)  # a save every step
    with pytest.raises(KeyboardInterrupt):
        _fit(checkpoint, kill_at_step=9)
    assert torch.load(checkpoint.path, weights_only=True)["step"] == 8
    messages = []
    resumed, result = _fit(checkpoint, log=messages.append)
    assert any("resuming at step 8" in m for m in messages)
    assert _same_weights(resumed, straight)
    assert (result.steps, result.evaluations) == (expected.steps, expected.evaluations) and result.steps[0] == 0
    assert not _same_weights(_fit(lr=0.01)[0], straight)  # the comparison can tell fits apart


def test_saved_progress_of_other_settings_is_not_resumed(tmp_path):
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", {"cell": "a"}, every_seconds=0.0)
    with pytest.raises(KeyboardInterrupt):
        _fit(checkpoint, kill_at_step=9)
    messages = []
    other, result = _fit(checkpoint, lr=0.01, log=messages.append)  # another rate: start over
    assert any("of other settings; starting over" in m for m in messages)
    straight, expected = _fit(lr=0.01)
    assert _same_weights(other, straight) and result.evaluations == expected.evaluations
    with pytest.raises(KeyboardInterrupt):
        _fit(checkpoint, kill_at_step=9)
    elsewhere = FitCheckpoint(checkpoint.path, {"cell": "b"}, every_seconds=0.0)  # another cell's settings
    assert _same_weights(_fit(elsewhere)[0], _fit()[0])


@pytest.mark.parametrize("damage", ["cut", "empty", "not_a_dict"])
def test_a_damaged_save_is_started_over_not_a_traceback(tmp_path, damage):
    """A save cut short (a disk's or a copy's fault: saves are written whole) raised torch's RuntimeError from
    torch.load, a traceback with exit status 1 at every rerun of the experiment until the file was found and
    deleted; it is now said and the fit starts over, as for progress of other settings."""
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", {"cell": "a"}, every_seconds=0.0)
    with pytest.raises(KeyboardInterrupt):
        _fit(checkpoint, kill_at_step=9)
    whole = checkpoint.path.read_bytes()
    if damage == "not_a_dict":
        torch.save([1, 2], checkpoint.path)
    else:
        checkpoint.path.write_bytes(whole[: len(whole) // 2] if damage == "cut" else b"")
    messages = []
    again, result = _fit(checkpoint, log=messages.append)
    assert any(f"{checkpoint.path} cannot be read" in m and "starting over" in m for m in messages), messages
    straight, expected = _fit()
    assert _same_weights(again, straight) and result.evaluations == expected.evaluations


def test_a_killed_cell_resumes_from_its_fits_progress_which_goes_once_the_cell_is_whole(tmp_path):
    def cell(kill_at_step=None):
        model, result = _fit(kill_at_step=kill_at_step)  # the cell's fit finds its checkpoint itself
        return {"weights": [round(float(v), 6) for v in model.state_dict()["0.weight"].flatten()[:4]],
                "curve": result.evaluations}

    expected = ExperimentReport(tmp_path / "straight", "t", log=lambda line: None).cached("c", cell)
    report = ExperimentReport(tmp_path / "killed", "t", log=lambda line: None)
    with pytest.raises(KeyboardInterrupt):
        report.cached("c", lambda: cell(kill_at_step=9))
    partial = tmp_path / "killed" / "cells" / "c.fit0.partial.pt"
    assert torch.load(partial, weights_only=True)["step"] == 5  # saved at its evaluation (every 5 steps)
    assert not (tmp_path / "killed" / "cells" / "c.json").exists()
    assert report.cached("c", cell) == expected
    assert not partial.exists()
    assert json.loads((tmp_path / "killed" / "cells" / "c.json").read_text())["result"] == expected
    _fit()  # a fit outside any cell keeps no progress (the cell's context is gone)
    assert sorted(p.name for p in (tmp_path / "killed" / "cells").iterdir()) == ["c.json"]


def test_recomputing_a_killed_cell_removes_its_saved_progress(tmp_path):
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    with pytest.raises(KeyboardInterrupt):
        report.cached("c", lambda: _fit(kill_at_step=9))
    removed = forget_cells(tmp_path, ["c"], log=lambda line: None)
    assert [path.name for path in removed] == ["c.fit0.partial.pt"] and not any((tmp_path / "cells").iterdir())


@pytest.mark.slow  # three processes (~25 s each); the kill logic is tested in process above
def test_a_mixers_cell_killed_by_sigkill_resumes_to_the_uninterrupted_result(tmp_path):
    import os
    import subprocess
    import sys

    from markovformer.atomic import KILL_AT_WRITE

    settings = ["--quick", "--set", "tasks=[mqar]", "kinds=[softmax]", "widths=[32]", "steps=30", "eval_every=10",
                "val_examples=16", "test_examples=32"]  # fmt: skip

    def run(out, kill_at=None):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        if kill_at is not None:
            env[KILL_AT_WRITE] = str(kill_at)
        return subprocess.run([sys.executable, "-m", "markovformer", "experiment", "mixers", "--out", str(out),
                               *settings], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip

    assert run(tmp_path / "straight").returncode == 0
    killed = run(tmp_path / "killed", kill_at=2)  # its second save (step 20) never lands: step 10's is kept
    assert killed.returncode == -9, killed.stderr[-2000:]
    (partial,) = (tmp_path / "killed" / "cells").glob("*.partial.pt")
    resumed = run(tmp_path / "killed")
    assert resumed.returncode == 0 and "resuming at step 10" in resumed.stdout, resumed.stderr[-2000:]
    assert not partial.exists()

    def result(out):
        (cell,) = (out / "cells").glob("*.json")
        return {k: v for k, v in json.loads(cell.read_text())["result"].items() if k != "seconds"}

    assert result(tmp_path / "killed") == result(tmp_path / "straight")


def test_a_killed_fit_on_a_samplers_epochs_resumes_the_same_batch_stream(tmp_path):
    """A stream with a position of its own (a length-bucketed sampler's epochs, as mat-order trains on) continues
    where the killed fit stopped, across an epoch's end: the batches and the weights are the uninterrupted fit's."""
    from markovformer.data.translation.batching import LengthBucketSampler
    from markovformer.experiments.fitting import SamplerStream

    inputs = torch.randn(20, 4, generator=torch.Generator().manual_seed(2))
    lengths = [int(n) for n in torch.randint(1, 30, (20,), generator=torch.Generator().manual_seed(4))]

    class Recorded(SamplerStream):
        def __call__(self, generator):
            if len(self.drawn) + 1 == self.kill_at_step:
                raise KeyboardInterrupt  # as a kill between two steps
            self.drawn.append(super().__call__(generator).tolist())
            return torch.tensor(self.drawn[-1])

    def fit(checkpoint=None, kill_at_step=None):
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        stream = Recorded(LengthBucketSampler(lengths, 3, seed=5, pool_batches=2))
        stream.drawn, stream.kill_at_step = [], kill_at_step
        fit_on_stream(model, lambda batch: (model(inputs[batch]).squeeze(-1) - inputs[batch].sum(-1)).pow(2).mean(),
                      stream, lambda: 0.0, steps=12, lr=0.05, seed=3, eval_every=5,
                      checkpoint=checkpoint)  # fmt: skip
        return model, stream.drawn

    straight, batches = fit()
    assert len(batches) == 12 and len({i for batch in batches[:7] for i in batch}) == 20  # 7 batches an epoch
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", {"cell": "a"}, every_seconds=0.0)
    with pytest.raises(KeyboardInterrupt):
        fit(checkpoint, kill_at_step=10)  # in the second epoch
    resumed, after = fit(checkpoint)
    assert after == batches[9:]  # the stream goes on from batch 10, not from the first epoch's start
    assert _same_weights(resumed, straight)
