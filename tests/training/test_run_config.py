"""Reading run configs: exponent numbers are floats in overrides and in files (PyYAML alone reads ``2e-3`` as a
string, and a config with ``lr: 2e-3`` was refused with a type error); keys renamed or moved since
(``trainer.context_lengths`` now ``task_options.orders``, the VMT's ``trainer.carry`` now ``task_options.carry``,
scan Markov's ``model.context_length`` now ``model.order``) still load from old files."""

from __future__ import annotations

import pytest

from markovformer.training.run_config import (
    ConfigError,
    TrainerConfig,
    apply_overrides,
    load_yaml,
    parse_override,
    plain_values,
    read_yaml,
    resolve_run_config,
    write_yaml,
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


@pytest.mark.parametrize(("text", "value"), [("010", 10), ("-007", -7), ("0_10", 10), ("0x1F", 31), ("0b101", 5),
                                             ("0o17", 15), ("1_000", 1000), ("1:30", "1:30"), ("[008, 010]", [8, 10])])
def test_integers_are_yaml_1_2s_a_zero_padded_one_decimal(text, value):
    """YAML 1.1 (PyYAML) read ``trainer.seed=010`` as octal 8 (a sweep's ``seed=$(printf %03d $i)``: 008 was refused,
    010 trained seed 8 again) and ``1:30`` as 90 (base 60)."""
    assert read_yaml(text) == value and type(read_yaml(text)) is type(value)
    overrides = ["data.source=markov_chain", "trainer.seed=010", "trainer.max_steps=0100"]
    config = resolve_run_config(apply_overrides({"task": "causal_lm"}, overrides))
    assert (config.trainer.seed, config.trainer.max_steps) == (10, 100)


def test_overrides_and_files_read_exponents_alike(tmp_path):
    assert parse_override("trainer.lr=2e-3") == (["trainer", "lr"], 2e-3)
    path = tmp_path / "run.yaml"
    path.write_text("task: causal_lm\ntrainer:\n  lr: 3e-4\n  max_steps: 10\n")
    values = apply_overrides(load_yaml(path), ["trainer.weight_decay=1e-2"])
    assert values["trainer"] == {"lr": 3e-4, "max_steps": 10, "weight_decay": 1e-2}


def test_a_run_config_keeps_its_non_ascii_text_readable():
    """config.yaml read `path: "korpus-Gr\\xFC\\xDFe-\\u4E2D\\u6587.txt"` for korpus-Grüße-中文.txt (and the report,
    which shows it, the same): PyYAML escapes every non-ASCII character unless told otherwise."""
    values = {"data": {"path": "runs/Überprüfung-π/korpus-Grüße-中文😀.txt"}, "output_dir": "runs/αβ"}
    text = write_yaml(values)
    assert "korpus-Grüße-中文😀.txt" in text and "runs/αβ" in text
    assert read_yaml(text) == values


@pytest.mark.parametrize("text", ["nan", ".nan", "inf", "-inf", "Infinity", ".inf"])
def test_a_non_finite_number_is_refused_as_such_whether_yaml_reads_it_as_text_or_a_float(text):
    """YAML reads `nan` and `inf` as text (only `.nan` and `.inf` as floats): `trainer.lr=nan` was 'the wrong type'."""
    values = apply_overrides({"task": "causal_lm"}, [f"trainer.lr={text}"])
    with pytest.raises(ConfigError, match=r"^trainer.lr=.* must be a finite number$"):
        resolve_run_config(values)


@pytest.mark.parametrize(("options", "refusal"), [
    ({"max_steps": 1.5}, r"^trainer.max_steps=1.5 has the wrong type: expected int$"),
    ({"seed": 1.5}, r"^trainer.seed=1.5 has the wrong type: expected int$"),
    ({"batch_size": True}, r"^trainer.batch_size=True has the wrong type: expected int$"),
    ({"deterministic": "no"}, r"^trainer.deterministic='no' has the wrong type: expected bool$"),
    ({"lr": float("inf")}, r"^trainer.lr=inf must be a finite number$"),
    ({"gradient_clip": float("inf")}, r"^trainer.gradient_clip=inf must be a finite number$"),
    ({"weight_decay": float("inf")}, r"^trainer.weight_decay=inf must be a finite number$"),
])  # fmt: skip
def test_trainer_options_given_from_python_are_checked_as_a_config_file_s_are(options, refusal):
    """TrainerConfig(...) from Python took any value: max_steps=1.5 trained 2 steps, deterministic='no' was taken
    and seed=1.5 failed inside the run with torch's 'manual_seed expected a long'."""
    with pytest.raises(ConfigError, match=refusal):
        TrainerConfig(**options)


def test_trainer_options_from_python_are_converted_as_a_config_file_s_are():
    trainer = TrainerConfig(lr=1, betas=[0.8, 0.9])
    assert trainer == resolve_run_config({"task": "causal_lm", "data": {"source": "text"},
                                          "trainer": {"lr": 1, "betas": [0.8, 0.9]}}).trainer  # fmt: skip
    assert type(trainer.lr) is float and trainer.betas == (0.8, 0.9)


def test_a_run_config_built_from_python_takes_a_trainer_mapping_as_task_options_does_and_checks_its_paths():
    """RunConfig(trainer={"max_steps": 2}) was kept as a dict (train then failed with AttributeError: 'dict' object
    has no attribute 'accelerator'), and output_dir=3 failed with 'int' object has no attribute 'strip'."""
    from markovformer.training.run_config import RunConfig

    run = {"task": "causal_lm", "model": {}, "data": {"source": "text"}}
    assert RunConfig(**run, trainer={"max_steps": 2}).trainer == TrainerConfig(max_steps=2)
    with pytest.raises(ConfigError, match=r"^trainer.max_steps=0 must be >= 1$"):
        RunConfig(**run, trainer={"max_steps": 0})
    with pytest.raises(ConfigError, match=r"^trainer: expected a TrainerConfig or a mapping of its options, not list$"):
        RunConfig(**run, trainer=[2])
    with pytest.raises(ConfigError, match=r"^output_dir=3 has the wrong type: expected str$"):
        RunConfig(**run, trainer=TrainerConfig(), output_dir=3)


def test_a_word_is_still_the_wrong_type_for_a_number():
    with pytest.raises(ConfigError, match="wrong type: expected float"):
        resolve_run_config(apply_overrides({"task": "causal_lm"}, ["trainer.lr=fast"]))


def test_a_run_config_written_with_the_old_names_loads_under_the_new_ones(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(OLD_SCAN_RUN)
    config = resolve_run_config(load_yaml(path))
    assert config.task_options.orders == (2, 4) and config.trainer.max_steps == 10
    written = config.to_dict()  # what the run writes back: the new name in its new home only
    assert written["task_options"]["orders"] == (2, 4)
    assert "context_lengths" not in written["trainer"] and "orders" not in written["trainer"]
    new = resolve_run_config(load_yaml(path) | {"trainer": {"max_steps": 10}, "task_options": {"orders": [2, 4]}})
    assert new.trainer == config.trainer and new.task_options == config.task_options
    model = build_model(config, {"vocab_size": 7})
    assert model.config.order == 4 and model.config.vocab_size == 7


def test_an_old_resolved_causal_lm_config_with_every_old_trainer_option_still_loads(tmp_path):
    # config.yaml of a run written before the task options moved: every trainer field, the VMT's at their defaults
    old = {"task": "causal_lm", "data": {"source": "text"}, "model": {},
           "trainer": {**plain_values(TrainerConfig().__dict__), "orders": [3], "kl_warmup_steps": 0,
                       "carry": True, "window_overlap": False}}  # fmt: skip
    config = resolve_run_config(old)
    assert config.task_options.orders == (3,) and config.trainer == TrainerConfig()
    with pytest.raises(ConfigError, match=r"trainer.carry=False is set but task causal_lm does not use it"):
        resolve_run_config({**old, "trainer": {**old["trainer"], "carry": False}})


def test_old_and_new_names_together_are_refused_naming_both(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(OLD_SCAN_RUN)
    values = apply_overrides(load_yaml(path), ["task_options.orders=[2, 4]"])
    with pytest.raises(ConfigError, match=r"^trainer\.context_lengths is the old place of task_options\.orders; give "
                                          r"only task_options\.orders$"):  # fmt: skip
        resolve_run_config(values)  # the key as the file spells it: it said trainer.orders, a key the file lacks
    with pytest.raises(ConfigError, match=r"^trainer\.context_lengths and trainer\.orders are both old places of "
                                          r"task_options\.orders"):  # fmt: skip
        resolve_run_config(apply_overrides(load_yaml(path), ["trainer.orders=[2, 4]"]))
    with pytest.raises(ConfigError, match=r"^trainer\.context_lengths=\[2, 4\] is set but task vmt does not use it"):
        resolve_run_config(apply_overrides(load_yaml(path), ["task=vmt"]))
    config = resolve_run_config(load_yaml(path))
    both = dict(config.model, order=4)
    with pytest.raises(ConfigError, match="model: .*'context_length' is the old name of 'order'; give only 'order'"):
        build_model(resolve_run_config({**load_yaml(path), "model": both}), {"vocab_size": 7})


def test_an_unknown_key_with_no_close_spelling_lists_the_keys_it_could_be():
    """`trainer.zzz=1` named the bad key only: a user without a close spelling had no way to learn the keys."""
    import dataclasses

    from markovformer.training.run_config import SECTIONS

    with pytest.raises(ConfigError) as trainer_error:
        resolve_run_config({"task": "causal_lm", "trainer": {"zzzq": 1}})
    keys = [field.name for field in dataclasses.fields(TrainerConfig) if field.init]
    assert str(trainer_error.value).endswith(f"; the keys of trainer: {', '.join(keys)}")
    with pytest.raises(ConfigError) as top_error:
        resolve_run_config({"task": "causal_lm", "zzzq": 1})
    assert str(top_error.value).endswith(f"; the top-level keys: {', '.join(SECTIONS)}")
    with pytest.raises(ConfigError, match=r"\(did you mean 'max_steps'\?\)$"):  # a close one is still the hint
        resolve_run_config({"task": "causal_lm", "trainer": {"max_step": 1}})


@pytest.mark.parametrize(
    ("section", "key", "home"),
    [("model", "batch_size", "trainer"), ("data", "max_order", "model"), ("trainer", "seq_len", "data"),
     ("data", "dropout", "model"), ("task_options", "lr", "trainer"), ("", "max_steps", "trainer")],
)  # fmt: skip
def test_a_key_given_in_the_wrong_section_names_the_section_that_takes_it(section, key, home):
    """A key typed under another section was taken for a misspelling of its own section's keys: model.batch_size
    suggested 'chunk_size', data.max_order the chain's 'order' (another meaning), and the top-level max_steps only
    listed the sections. The hint names the section of the run that takes the key, for every section."""
    import dataclasses

    from markovformer.data.sources import DATA_SOURCES
    from markovformer.models.registry import MODEL_FAMILIES
    from markovformer.training.build import build_data
    from markovformer.training.tasks import TASKS

    values = {"task": "causal_lm", "data": {"source": "markov_chain", "seq_len": 8}, "trainer": {"max_steps": 2}}
    takes = {"trainer": TrainerConfig, "task_options": TASKS["causal_lm"].Options, "data": DATA_SOURCES["markov_chain"],
             "model": MODEL_FAMILIES["markovian_transformer"].config_class}  # fmt: skip
    owners = [name for name, cls in takes.items() if key in {field.name for field in dataclasses.fields(cls)}]
    assert owners == [home]  # the key belongs to the one section the hint names
    wrong = {**values, section: {**values.get(section, {}), key: 1}} if section else {**values, key: 1}
    expected = rf"\(did you mean '{home}\.{key}'\?" + (rf" '{key}' is not a {section} key\)" if section else r"\)")
    with pytest.raises(ConfigError, match=expected):
        config = resolve_run_config(wrong)
        build_model(config, build_data(config).info)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"kind": "random", "beta": 0.0}, r"^data\.beta must be a finite number > 0, got 0\.0$"),
        ({"kind": "random", "num_symbols": 1}, r"^data\.num_symbols must be an integer >= 2, got 1$"),
        ({"kind": "switching", "p": 1.5}, r"^data\.p must lie in \[0, 1\], got 1\.5$"),
        ({"kind": "switching", "p": 0.0, "q": 0.0}, r"^data\.p \+ data\.q must be > 0 .*got p=0\.0, q=0\.0$"),
        ({"kind": "lagged", "lags": [2, 2]}, r"^data\.lags must not repeat, got \[2, 2\]$"),
    ],
)
def test_a_markov_chain_option_out_of_range_is_refused_as_the_data_option_it_is(data, expected):
    """The chain's checks ran only when the data was built, so the message named a bare `beta`, `p`, `lags`: not the
    option (data.beta) the run config sets. Refused when the source is built, as data.<option> with its value."""
    from markovformer.data.sources import DATA_SOURCES
    from markovformer.training.run_config import build_dataclass

    with pytest.raises(ConfigError, match=expected):
        build_dataclass(DATA_SOURCES["markov_chain"], {"seq_len": 8, **data}, "data")


def test_a_run_directory_under_home_holds_the_whole_run(tmp_path, monkeypatch):
    """output_dir=~/runs/t: Lightning expanded ~ for checkpoints/ and tensorboard/ only, so the run was split between
    $HOME/runs/t (its checkpoints) and a folder named ~ in the working folder (config.yaml, model/, finished.json),
    neither of them a run ``--resume`` or ``eval`` could read whole."""
    import yaml
    from conftest import TINY_RUN

    from markovformer.cli.main import main

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer}))
    assert main(["train", "tiny.yaml", "output_dir=~/runs/t", "trainer.logger=csv"]) == 0
    run_dir = tmp_path / "home" / "runs" / "t"
    assert not (tmp_path / "~").exists()
    assert {"config.yaml", "finished.json", "checkpoints", "model"} <= {path.name for path in run_dir.iterdir()}
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["output_dir"] == str(run_dir)


def test_a_data_file_or_init_from_given_from_the_home_folder_is_found_there(tmp_path, monkeypatch, tiny_run):
    """`data.path: ~/corpus.txt` was refused as 'no such file' (no shell expands a YAML value), while output_dir's ~
    was the home folder's: every file option (a list's items too) and init_from now read ~ as the home folder."""
    from markovformer.training.build import build_data
    from markovformer.training.run_config import resolve_run_config

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "corpus.txt").write_text("to be or not to be\n" * 40, encoding="utf-8")
    config = resolve_run_config({**tiny_run, "output_dir": "unused", "init_from": "~/runs/base",
                                 "data": {"source": "text", "path": "~/corpus.txt", "seq_len": 8}})  # fmt: skip
    assert config.data["path"] == str(tmp_path / "corpus.txt") and config.init_from == str(tmp_path / "runs" / "base")
    assert build_data(config).splits["num_characters"] == len("to be or not to be\n" * 40)
    listed = resolve_run_config({**tiny_run, "output_dir": "unused",
                                 "data": {"source": "hf_dataset", "data_files": ["~/a.jsonl", "b.jsonl"]}})
    assert listed.data["data_files"] == [str(tmp_path / "a.jsonl"), "b.jsonl"]


def test_the_written_config_reads_back_as_the_run_was_configured(tmp_path):
    """config.yaml held a string that reads as a number unquoted: a run with output_dir '1e-3' (a sweep named by its
    learning rate) wrote `output_dir: 1e-3`, and eval and --resume then refused it (output_dir=0.001 has the wrong
    type: expected str); so did a data option '2e5' or '010'."""
    from markovformer.training.run_dir import RESOLVED_CONFIG, write_resolved_config

    data = {"source": "text", "path": "2e5", "text_column": "010"}
    values = {"task": "causal_lm", "output_dir": "1e-3", "data": data, "trainer": {"lr": 1e-3, "seed": 10}}
    config = resolve_run_config(values)
    write_resolved_config(tmp_path, config)
    assert resolve_run_config(load_yaml(tmp_path / RESOLVED_CONFIG)) == config
    assert load_yaml(tmp_path / RESOLVED_CONFIG)["data"] == data


def test_a_nested_override_fills_a_section_the_saved_config_holds_as_null(tmp_path):
    """A run's config.yaml writes an unset mapping as null (`early_stopping: null`): the override
    trainer.early_stopping.monitor=val/loss, taken on the shipped config, was refused on a run's own config.yaml
    ('early_stopping' is not a section), so a sweep could not vary a saved run's config as it varied the original."""
    from markovformer.training.run_dir import RESOLVED_CONFIG, write_resolved_config

    override = ["trainer.early_stopping.monitor=val/loss", "trainer.early_stopping.patience=2"]
    original = {"task": "causal_lm", "data": {"source": "markov_chain"}}
    write_resolved_config(tmp_path, resolve_run_config(original))
    saved = load_yaml(tmp_path / RESOLVED_CONFIG)
    assert saved["trainer"]["early_stopping"] is None
    from_saved = resolve_run_config(apply_overrides(saved, override))
    assert from_saved.trainer.early_stopping == {"monitor": "val/loss", "patience": 2, "mode": "min"}
    assert from_saved == resolve_run_config(apply_overrides(original, override))
