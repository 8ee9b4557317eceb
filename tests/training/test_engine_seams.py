"""Where the engine joins a model to the rest of a run: the sizes the data fixes, the dtypes of stored weights, and
the model's own loss terms in what the optimiser minimises."""

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import TINY_RUN  # beside this folder

from markovformer.training.build import build_data, build_model, build_run_task
from markovformer.training.run_checks import check_tensors_match
from markovformer.training.run_config import ConfigError, resolve_run_config
from markovformer.training.tasks.base import model_inputs


def _config(**model):
    values = copy.deepcopy(TINY_RUN)
    values["model"].update(model)
    return resolve_run_config({**values, "output_dir": "unused"})


def test_a_model_size_the_data_fixes_is_refused_when_typed_otherwise_and_kept_when_it_agrees():
    bundle = build_data(_config())
    vocabulary = bundle.info["vocab_size"]
    with pytest.raises(ConfigError, match=f"model.vocab_size={vocabulary + 3} disagrees with the data, which has "
                                          f"vocab_size={vocabulary}"):  # fmt: skip
        build_model(_config(vocab_size=vocabulary + 3), bundle.info)
    assert build_model(_config(vocab_size=vocabulary), bundle.info).config.vocab_size == vocabulary


def test_stored_weights_of_another_dtype_are_refused_naming_the_tensor_and_both_dtypes():
    """Loading would cast them silently: a float64 checkpoint is not this float32 run's."""
    model = torch.nn.Linear(3, 2)
    stored = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    check_tensors_match(model, stored, Path("step-000010.ckpt"))  # the same tensors pass
    stored["weight"] = stored["weight"].double()
    with pytest.raises(ConfigError, match=r"step-000010.ckpt does not match the run's model: weight is stored as "
                                          r"torch.float64, the model's is torch.float32"):  # fmt: skip
        check_tensors_match(model, stored, Path("step-000010.ckpt"))


def test_the_training_loss_adds_the_models_own_regularization():
    """A Markovian Transformer with a transition penalty: the step minimises the token loss plus λ_T · Σ θ²."""
    config = _config(dropout=0.0, transition_penalty=0.5)
    bundle = build_data(config)
    task, model = build_run_task(config, bundle), build_model(config, bundle.info)
    with torch.no_grad():
        for bias in model.markov_biases():
            for theta in bias.theta.values():
                theta.fill_(1.0)  # a penalty far from zero (θ starts small)
    batch = bundle.collate([bundle.val[index] for index in range(4)])
    module = SimpleNamespace(model=model, log_step_mean=lambda *args, **options: None)
    loss = task.training_step(module, batch)
    token_loss = model(**model_inputs(batch)).loss
    penalty = 0.5 * sum(theta.numel() for bias in model.markov_biases() for theta in bias.theta.values())
    assert penalty > 1 and loss.item() == pytest.approx(token_loss.item() + penalty, rel=1e-5)
