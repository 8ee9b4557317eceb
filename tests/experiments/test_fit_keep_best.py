"""``fit_on_stream(keep_best=True)``: the model ends with the weights of its lowest held-out value (translation's
checkpoint selection), also when the fit was killed and resumed between that evaluation and the end."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from markovformer.experiments.fitting import FitCheckpoint, fit_on_stream


def _fit(held_out: list[float], checkpoint: FitCheckpoint | None = None, kill_at_step: int | None = None,
         keep_best: bool = True):  # fmt: skip
    """A regression fit of 12 steps evaluated at steps 0, 4, 8, 12, whose held-out values are ``held_out`` in turn;
    the weights at each evaluation are kept beside (the naive reference)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    snapshots, drawn = [], []
    resumed = checkpoint is not None and checkpoint.path.is_file()
    done = len(torch.load(checkpoint.path, weights_only=True)["evaluations"]) if resumed else 0  # before the kill

    def sample(generator):
        drawn.append(1)
        if len(drawn) == kill_at_step:
            raise KeyboardInterrupt  # as a kill between two steps
        return torch.randn(16, 4, generator=generator)

    def evaluate():
        snapshots.append({name: tensor.clone() for name, tensor in model.state_dict().items()})
        return held_out[done + len(snapshots) - 1]

    result = fit_on_stream(model, lambda batch: (model(batch).squeeze(-1) - batch.sum(-1)).pow(2).mean(), sample,
                           evaluate, steps=12, lr=0.05, seed=3, eval_every=4, checkpoint=checkpoint,
                           keep_best=keep_best)  # fmt: skip
    return model, result, snapshots


def _weights(model: nn.Module) -> list[torch.Tensor]:
    return list(model.state_dict().values())


@pytest.mark.parametrize(("held_out", "best"), [([5.0, 2.0, 3.0, 4.0], 1), ([5.0, 4.0, 3.0, 1.0], 3),
                                                ([1.0, 2.0, 2.0, 1.0], 0),
                                                ([float("nan"), 3.0, 2.0, 4.0], 2)])  # fmt: skip
def test_a_fit_that_keeps_its_best_ends_with_the_weights_of_its_lowest_held_out_value(held_out, best):
    model, result, snapshots = _fit(held_out)
    assert result.steps == [0, 4, 8, 12] and result.best_step == result.steps[best]
    assert all(torch.equal(a, b) for a, b in zip(_weights(model), snapshots[best].values(), strict=True))
    plain, plain_result, plain_snapshots = _fit(held_out, keep_best=False)
    assert plain_result.best_step is None
    assert all(torch.equal(a, b) for a, b in zip(_weights(plain), _weights(_fit([9.0] * 4, keep_best=False)[0]),
                                                 strict=True))  # fmt: skip
    if best != 3:  # the comparison can tell the steps' weights apart
        assert not all(torch.equal(a, b) for a, b in zip(_weights(plain), snapshots[best].values(), strict=True))


def test_a_killed_fit_that_keeps_its_best_resumes_to_the_same_best_weights(tmp_path):
    held_out = [5.0, 2.0, 3.0, 4.0]  # the best at step 4, the kill at step 10: the best lives in the save
    straight, expected, _ = _fit(held_out)
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", {"cell": "a"}, every_seconds=0.0)
    with pytest.raises(KeyboardInterrupt):
        _fit(held_out, checkpoint, kill_at_step=10)
    resumed, result, _ = _fit(held_out, checkpoint)
    assert result.best_step == expected.best_step == 4 and result.evaluations == expected.evaluations
    assert all(torch.equal(a, b) for a, b in zip(_weights(resumed), _weights(straight), strict=True))
