"""The divergence guard's check of one step, and what a run's fingerprint covers (the whole runs are in
test_run_guards.py)."""

import copy
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_RUN  # beside this folder

from markovformer.training.divergence import DivergenceGuard, TrainingDiverged, gradient_norm
from markovformer.training.fingerprint import run_fingerprint
from markovformer.training.run_config import resolve_run_config


def _with_gradient(value: float) -> torch.nn.Module:
    """A module whose gradients are finite except possibly one entry, ``value``."""
    module = torch.nn.Linear(2, 1)
    for parameter in module.parameters():
        parameter.grad = torch.full_like(parameter, 0.5)
    module.weight.grad[0, 0] = value
    return module


def test_an_infinite_gradient_with_a_finite_loss_stops_the_run_naming_its_newest_checkpoint(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    for step in (5, 20, 100):
        (tmp_path / "checkpoints" / f"step-{step:06d}.ckpt").write_bytes(b"")
    guard = DivergenceGuard(tmp_path, lr=0.01)
    guard.on_before_backward(None, None, torch.tensor(2.5))
    trainer = SimpleNamespace(global_step=41)
    guard.on_before_optimizer_step(trainer, _with_gradient(3.0), None)  # finite: training goes on
    with pytest.raises(TrainingDiverged) as raised:
        guard.on_before_optimizer_step(trainer, _with_gradient(float("inf")), None)
    message = str(raised.value)
    assert "at step 42:" in message and "gradient norm is inf" in message and "loss 2.5" in message
    assert "its last checkpoint, step-000100.ckpt, is whole" in message


def test_under_16_mixed_only_the_loss_is_checked_and_an_infinite_loss_is_named_as_the_loss(tmp_path):
    """With check_gradients off (16-mixed: the loss scaler skips a step of non-finite gradients) an infinite gradient
    goes on to the scaler; an infinite loss stops the run, the message naming the loss (not the gradient norm)."""
    guard = DivergenceGuard(tmp_path, lr=0.01, check_gradients=False)
    guard.on_before_backward(None, None, torch.tensor(2.5))
    guard.on_before_optimizer_step(SimpleNamespace(global_step=3), _with_gradient(float("inf")), None)
    guard.on_before_backward(None, None, torch.tensor(float("inf")))
    with pytest.raises(TrainingDiverged, match="at step 4: the training loss is inf; .* has no checkpoint yet"):
        guard.on_before_optimizer_step(SimpleNamespace(global_step=3), _with_gradient(0.5), None)


@pytest.mark.parametrize("check_gradients", [True, False], ids=["32-bit", "16-mixed"])
def test_a_non_finite_loss_before_the_last_micro_batch_of_a_step_is_named_as_the_loss(tmp_path, check_gradients):
    """A step of two micro-batches whose first loss is infinite and second finite (the gradient they sum is
    non-finite) stops the run naming the loss, as when the last one is: the guard kept the last micro-batch's loss,
    so it blamed the gradient norm ("loss 2.5") and, under 16-mixed, let the step go on."""
    guard = DivergenceGuard(tmp_path, lr=0.01, check_gradients=check_gradients)
    guard.on_before_backward(None, None, torch.tensor(float("inf")))
    guard.on_before_backward(None, None, torch.tensor(2.5))
    with pytest.raises(TrainingDiverged, match="at step 4: the training loss is inf; "):
        guard.on_before_optimizer_step(SimpleNamespace(global_step=3), _with_gradient(float("nan")), None)
    guard.on_before_backward(None, None, torch.tensor(1.5))  # the next step's losses start anew
    guard.on_before_backward(None, None, torch.tensor(2.5))
    guard.on_before_optimizer_step(SimpleNamespace(global_step=4), _with_gradient(0.5), None)


def _fingerprint(tmp_path, name: str, tokenizer: str, model: dict | None = None, data: dict | None = None,
                 **trainer) -> str:  # fmt: skip
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(trainer)
    values["model"].update(model or {})
    values["data"].update(data or {})
    run_dir = tmp_path / name
    (run_dir / "tokenizer").mkdir(parents=True)
    (run_dir / "tokenizer" / "tokenizer.json").write_text(tokenizer)
    return run_fingerprint(resolve_run_config(values), run_dir)


def test_the_fingerprint_follows_the_seed_and_the_tokenizer_but_not_the_schedule(tmp_path):
    """The seed draws the data and the tokenizer fixes what ids mean: either makes other weights' inputs. The
    schedule (steps, learning rate) does not, so an extended run keeps its fingerprint."""
    base = _fingerprint(tmp_path, "base", '{"a": 1}')
    assert _fingerprint(tmp_path, "extended", '{"a": 1}', max_steps=80, lr=1e-4) == base
    assert _fingerprint(tmp_path, "reseeded", '{"a": 1}', seed=4) != base
    assert _fingerprint(tmp_path, "retokenized", '{"a": 2}') != base


def test_the_fingerprint_follows_the_model_and_the_data_options(tmp_path):
    """Weights of a model with another dropout or order, or trained on another chain, are another run's, even where
    every tensor has the same shape."""
    base = _fingerprint(tmp_path, "base", "{}")
    assert _fingerprint(tmp_path, "dropout", "{}", model={"dropout": 0.0}) != base
    assert _fingerprint(tmp_path, "order", "{}", model={"max_order": 1}) != base
    assert _fingerprint(tmp_path, "chain", "{}", data={"lags": [1, 3]}) != base


def test_the_gradient_norm_is_the_2_norm_of_every_gradient_together():
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1, bias=False))
    assert gradient_norm(module) == 0  # nothing has a gradient yet
    module(torch.randn(4, 3)).square().sum().backward()
    together = torch.cat([parameter.grad.flatten() for parameter in module.parameters()])
    assert gradient_norm(module) == pytest.approx(torch.linalg.vector_norm(together).item(), rel=1e-6)
