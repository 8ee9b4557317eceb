"""Reading run configs: exponent numbers are floats in overrides and in files (PyYAML alone reads ``2e-3`` as a
string, and a config with ``lr: 2e-3`` was refused with a type error); keys renamed since (``trainer.context_lengths``
now ``trainer.orders``, scan Markov's ``model.context_length`` now ``model.order``) still load from old files."""

from __future__ import annotations

import pytest

from markovformer.training.run_config import (
    ConfigError,
    apply_overrides,
    load_yaml,
    parse_override,
    read_yaml,
    resolve_run_config,
)
from markovformer.training.runner import build_model

OLD_SCAN_RUN = """task: causal_lm
model_type: scan_markov
model:
  d_model: 8
  max_positions: 5
  context_length: 4
data:
  source: text
trainer:
  max_steps: 10
  context_lengths: [2, 4]
"""


@pytest.mark.parametrize(
    ("text", "value"),
    [("2e-3", 2e-3), ("1E5", 1e5), ("-3.5e+2", -350.0), (".5e1", 5.0), ("1_000e2", 1e5), ("[1e-3, 2]", [1e-3, 2])],
)
def test_exponent_numbers_are_floats(text, value):
    assert read_yaml(text) == value and type(read_yaml(text)) is type(value)


@pytest.mark.parametrize("text", ["e5", "2e", "1e-", "run2e3", "v1.0"])
def test_words_that_only_look_numeric_stay_strings(text):
    assert read_yaml(text) == text


def test_overrides_and_files_read_exponents_alike(tmp_path):
    assert parse_override("trainer.lr=2e-3") == (["trainer", "lr"], 2e-3)
    path = tmp_path / "run.yaml"
    path.write_text("task: causal_lm\ntrainer:\n  lr: 3e-4\n  max_steps: 10\n")
    values = apply_overrides(load_yaml(path), ["trainer.weight_decay=1e-2"])
    assert values["trainer"] == {"lr": 3e-4, "max_steps": 10, "weight_decay": 1e-2}


def test_a_run_config_written_with_the_old_names_loads_under_the_new_ones(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(OLD_SCAN_RUN)
    config = resolve_run_config(load_yaml(path))
    assert config.trainer.orders == (2, 4) and config.trainer.max_steps == 10
    written = config.to_dict()["trainer"]  # what the run writes back: the new name only
    assert written["orders"] == (2, 4) and "context_lengths" not in written
    new = resolve_run_config(load_yaml(path) | {"trainer": {"max_steps": 10, "orders": [2, 4]}})
    assert new.trainer == config.trainer
    model = build_model(config, {"vocab_size": 7})
    assert model.config.order == 4 and model.config.vocab_size == 7


def test_old_and_new_names_together_are_refused_naming_both(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(OLD_SCAN_RUN)
    values = apply_overrides(load_yaml(path), ["trainer.orders=[2, 4]"])
    with pytest.raises(ConfigError, match=r"^trainer\.context_lengths is the old name of trainer\.orders; give only "
                                          r"trainer\.orders$"):  # fmt: skip
        resolve_run_config(values)
    config = resolve_run_config(load_yaml(path))
    both = dict(config.model, order=4)
    with pytest.raises(ConfigError, match="model: .*'context_length' is the old name of 'order'; give only 'order'"):
        build_model(resolve_run_config({**load_yaml(path), "model": both}), {"vocab_size": 7})
