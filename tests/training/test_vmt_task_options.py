"""The engine's vmt task's options: trainer and task options refused by tasks and models that cannot take them (an old
config's trainer.carry still loads), generative_from_data, window overlap and KL warm-up checked before a run."""

from __future__ import annotations

import lightning
import pytest
import torch
from vmt_run_values import tiny_vmt

from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.training.batches import window_stride
from markovformer.training.build import build_run_task
from markovformer.training.module import TrainingModule
from markovformer.training.run_config import ConfigError, TrainerConfig, resolve_run_config
from markovformer.training.runner import build_data, build_model, load_run, train
from markovformer.training.tasks import build_task
from markovformer.training.tasks.vmt import VMTOptions

# ------------------------------------------------------------------------------------------------ options


def test_task_options_are_refused_by_tasks_and_models_that_cannot_take_them(tmp_path):
    causal = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, d_model=16, n_layers=1,
                                                                        n_heads=2))  # fmt: skip
    vmt = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2))
    for option, value in (("kl_warmup_steps", 10), ("carry", False), ("window_overlap", True)):
        with pytest.raises(ConfigError, match=f"task_options.{option} is not an option of task causal_lm"):
            resolve_run_config({**tiny_vmt(), "task": "causal_lm", "task_options": {option: value}})
        with pytest.raises(ConfigError, match=f"task_options.{option} is set but MarkovianTransformerForCausalLM"):
            build_task("vmt", options=VMTOptions(**{option: value})).check_model(causal)
        build_task("vmt", options=VMTOptions(**{option: value})).check_model(vmt)
    with pytest.raises(ConfigError, match="trainer.label_smoothing is set but task vmt does not use it"):
        TrainingModule(vmt, build_task("vmt", TrainerConfig(label_smoothing=0.1)))
    with pytest.raises(ConfigError, match=r"task_options.orders is not an option of task vmt \(its options: "
                                          r"\('kl_warmup_steps', 'carry', 'window_overlap', 'iw_samples'\)\)"):
        resolve_run_config(tiny_vmt(task_options__orders=[2]))
    with pytest.raises(ConfigError, match="task_options.kl_warmup_steps=-1"):
        VMTOptions(kl_warmup_steps=-1)
    with pytest.raises(ConfigError, match="task_options.carry"):
        resolve_run_config(tiny_vmt(task_options__carry="yes"))
    with pytest.raises(ConfigError, match="feeds"):  # the state-space sources feed the vmt task only
        build_data(resolve_run_config({**tiny_vmt(), "task": "causal_lm", "task_options": {}}))
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    values = {**tiny_vmt(), "data": {"source": "text", "path": str(text), "seq_len": 31, "overlap": 4}}
    config = resolve_run_config(values)
    with pytest.raises(ConfigError, match="data.overlap=4"):  # overlapping windows would score tokens twice
        build_run_task(config, build_data(config))
    values["data"]["overlap"] = 0
    values["output_dir"] = str(tmp_path / "text_run")
    results = train(resolve_run_config(values))  # text feeds the VMT too: each window a document
    assert results["val"]["loss"] > 0 and results["reference"] == {}


def test_an_old_vmt_config_with_trainer_carry_loads_with_the_option_in_its_new_home():
    old = tiny_vmt()
    old["trainer"].update(old.pop("task_options"), carry=False, window_overlap=True)
    config = resolve_run_config(old)
    assert config.task_options == VMTOptions(kl_warmup_steps=4, carry=False, window_overlap=True)
    assert "carry" not in config.to_dict()["trainer"] and config.to_dict()["task_options"]["carry"] is False
    assert build_task("vmt", config.trainer, options=config.task_options).walk.carry is False
    with pytest.raises(ConfigError, match="trainer.carry is the old place of task_options.carry; give only"):
        resolve_run_config({**old, "task_options": {"carry": True}})


def test_generative_from_data_trains_the_posterior_alone(tmp_path):
    """P is the data's own linear-Gaussian model and stays so through training; only Q moves."""
    values = tiny_vmt(model__latent_dim=2)
    values["data"] = {"source": "linear_gaussian", "doc_len": 16, "train_documents": 6, "val_documents": 2,
                      "test_documents": 2}  # fmt: skip
    values["model"]["generative_from_data"] = True
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)
    train(config)
    trained = load_run(tmp_path / "run")[1]
    lightning.seed_everything(config.trainer.seed, workers=True, verbose=False)  # the run's start, rebuilt as _fit does
    bundle = build_data(config)
    start = build_model(config, bundle.info)
    build_run_task(config, bundle).prepare_model(start)
    generative = {id(p) for p in start.generative_parameters()}
    assert all(not p.requires_grad for p in start.generative_parameters())
    moved = 0
    for (name, initial), (_, measured) in zip(start.named_parameters(), trained.named_parameters(), strict=True):
        if id(initial) in generative:
            torch.testing.assert_close(measured, initial, rtol=0, atol=0, msg=name)
        else:
            moved += int(not torch.equal(measured, initial))
    assert moved > 0  # the posterior did train
    tokens = tiny_vmt(**{"model__generative_from_data": True})
    tokens["output_dir"] = str(tmp_path / "tokens")
    with pytest.raises(ConfigError, match="generative_from_data"):
        train(resolve_run_config(tokens))


def test_window_overlap_on_a_one_token_window_is_refused_naming_both_values():
    """Half of a one-token window rounds up to the whole window (stride 1 either way): the option would change
    nothing, without a word, so the run is refused instead."""
    assert window_stride(1, True) == window_stride(1, False) == 1
    one = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, window=1))
    with pytest.raises(ConfigError, match=r"task_options.window_overlap=true needs model.window >= 2.*"
                                          r"model.window=1"):  # fmt: skip
        build_task("vmt", options=VMTOptions(window_overlap=True)).check_model(one)
    build_task("vmt", options=VMTOptions(window_overlap=False)).check_model(one)
    two = VariationalMarkovTransformer(VMTConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, window=2))
    build_task("vmt", options=VMTOptions(window_overlap=True)).check_model(two)


def test_generative_from_data_with_another_latent_size_names_model_latent_dim():
    """The error was set_linear_gaussian's "emission has shape (1, 2); this VMT needs (input_dim, latent_dim) =
    (1, 4)", naming no option of the run."""
    values = tiny_vmt(model__latent_dim=4)  # the data's state has 2 dimensions
    values["data"] = {"source": "linear_gaussian", "state_dim": 2, "doc_len": 16, "train_documents": 2,
                      "val_documents": 1, "test_documents": 1}  # fmt: skip
    values["model"]["generative_from_data"] = True
    config = resolve_run_config(values)
    bundle = build_data(config)
    with pytest.raises(ConfigError, match=r"model.latent_dim=4: .* 2 dimensions \(data.state_dim\); set "
                                          r"model.latent_dim=2"):  # fmt: skip
        build_run_task(config, bundle).prepare_model(build_model(config, bundle.info))


def test_a_kl_warm_up_longer_than_the_run_is_refused_before_anything_is_written(tmp_path):
    """Past max_steps the KL weight never reaches 1: the run ended on a down-weighted KL, not its ELBO, unsaid. The
    refusal is for new runs only (as the learning rate's warm-up)."""
    values = tiny_vmt()
    steps = values["trainer"]["max_steps"]
    values["task_options"] = {"kl_warmup_steps": steps + 1}
    values["output_dir"] = str(tmp_path / "run")
    refusal = rf"task_options.kl_warmup_steps={steps + 1} is larger than trainer.max_steps={steps}: the KL weight"
    with pytest.raises(ConfigError, match=refusal + " would never reach 1"):
        train(resolve_run_config(values))
    assert not (tmp_path / "run").exists()
