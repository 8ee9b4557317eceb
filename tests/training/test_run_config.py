"""Reading run configs: exponent numbers are floats in overrides and in files (PyYAML alone reads ``2e-3`` as a
string, and a config with ``lr: 2e-3`` was refused with a type error)."""

from __future__ import annotations

import pytest

from markovformer.training.run_config import apply_overrides, load_yaml, parse_override, read_yaml


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
