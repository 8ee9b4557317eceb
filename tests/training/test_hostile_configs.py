"""Hostile run configs (issue 27, item 7): repeated keys, alias bombs, deep nesting, huge values, empty paths and
strategies this trainer cannot run are each refused on one line naming the key (and line), before any work or file.
"""

from __future__ import annotations

import pytest

from markovformer.cli.errors import MAX_ERROR_LINE, error_line
from markovformer.cli.main import main
from markovformer.training.build import build_data
from markovformer.training.run_config import (
    MAX_DEPTH,
    ConfigError,
    apply_overrides,
    load_yaml,
    parse_override,
    read_yaml,
    resolve_run_config,
)
from markovformer.training.trainer_config import STRATEGIES, TrainerConfig

BASE = {"task": "causal_lm", "data": {"source": "text"}}
# the "billion laughs": nine levels of nine aliases, 9**9 strings once expanded (gigabytes as a repr)
BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{before}'] * 9)}]\n" for before, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def file_refused(tmp_path, text: str, *fragments: str) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        load_yaml(path)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 400 and message.startswith(f"{path}: "), message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def one_line_refusal(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("markovformer: error:"), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("task: causal_lm\noutput_dir: a\ntask: translation\n", ("line 3", "duplicate key 'task'", "line 1")),
        ("task: causal_lm\ntrainer:\n  lr: 0.1\n  max_steps: 5\n  lr: 0.2\n", ("line 5", "'lr'", "line 3")),
        ("model:\n  layers: [{kind: a, kind: b}]\n", ("line 2", "duplicate key 'kind'")),
    ],
    ids=["top level", "in a section", "in a flow mapping in a list"],
)
def test_a_repeated_key_is_refused_naming_it_and_its_lines(tmp_path, text, fragments):
    file_refused(tmp_path, text, *fragments)


def test_a_repeated_key_in_an_override_value_is_refused():
    with pytest.raises(ConfigError, match=r"^override 'data=\{source: a, source: b\}': line 1: duplicate key 'source'"):
        parse_override("data={source: a, source: b}")


def test_an_alias_bomb_is_refused_at_its_first_alias(tmp_path):
    assert len(BOMB) < 800
    file_refused(tmp_path, BOMB, "line 2", "alias *a", "no anchors or aliases")
    with pytest.raises(ConfigError, match=r"alias \*a is refused"):
        parse_override("trainer.max_steps=[&a [1, 2], *a]")


@pytest.mark.parametrize(
    "text",
    ["x: " + "[" * 5000 + "]" * 5000, "x: " + "{a: " * 5000 + "1" + "}" * 5000,
     "".join("  " * i + "a:\n" for i in range(500)) + "  " * 500 + "1\n"],
    ids=["lists", "flow mappings", "block mappings"],
)  # fmt: skip
def test_nesting_past_the_limit_is_refused_naming_the_limit(tmp_path, text):
    file_refused(tmp_path, text, f"deeper than {MAX_DEPTH} levels")


def test_the_depth_limit_sits_exactly_at_max_depth():
    # the top-level mapping is one level: MAX_DEPTH - 1 lists inside it load, one more is refused
    node, depth = read_yaml("x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1))["x"], 2
    while node:
        node, depth = node[0], depth + 1
    assert depth == MAX_DEPTH
    with pytest.raises(ConfigError, match=f"deeper than {MAX_DEPTH}"):
        read_yaml("x: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)


def test_deep_override_values_and_keys_are_refused():
    with pytest.raises(ConfigError, match=f"^override 'model.x=.{{10}}.*deeper than {MAX_DEPTH} levels"):
        parse_override("model.x=" + "[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match=f"keys nested deeper than {MAX_DEPTH} levels"):
        parse_override("model." + "a." * 5000 + "b=1")
    assert parse_override("model." + "a." * (MAX_DEPTH - 2) + "b=1")[0][-1] == "b"


def test_huge_values_are_shown_cut_short_in_messages():
    for values, start in (({**BASE, "trainer": {"max_steps": list(range(100_000))}}, "trainer.max_steps=[0, 1, 2,"),
                          ({**BASE, "task": "causal_lm" * 100_000}, "task='causal_lmcausal_lm")):  # fmt: skip
        with pytest.raises(ConfigError) as refused:
            resolve_run_config(values)
        assert str(refused.value).startswith(start) and "..." in str(refused.value)
        assert len(str(refused.value)) < 1000
    line = error_line(ValueError("x" * 100_000))
    assert len(line) == MAX_ERROR_LINE + 4 and line.endswith("x ...")


@pytest.mark.parametrize("override", ["output_dir=", "output_dir='  '", "output_dir=null"])
def test_an_empty_output_dir_is_refused(override):
    with pytest.raises(ConfigError, match=r"^output_dir.* is empty"):
        resolve_run_config(apply_overrides(dict(BASE), [override]))


def test_a_value_cut_off_by_a_comment_is_refused_as_empty(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("task: causal_lm\noutput_dir: # the run directory\ndata: {source: text}\n")
    with pytest.raises(ConfigError, match=r"^output_dir is empty \(null: nothing or only a comment after it\)"):
        resolve_run_config(load_yaml(path))
    config = resolve_run_config({**BASE, "data": read_yaml("source: text\npath:  # the text file\n")})
    with pytest.raises(ConfigError, match=r"^data\.path is empty \(null"):
        build_data(config)


def test_train_with_an_empty_output_dir_writes_nothing_into_the_working_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    one_line_refusal(capsys, ["train", "output_dir=", "trainer.max_steps=2"], "output_dir='' is empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("strategy", ["ddp_spawn", "deepspeed", "deepspeed_stage_2", "fsdp", "ddp_fork", "xla", "dpp"])
def test_strategies_this_trainer_cannot_run_are_refused_listing_those_it_can(strategy):
    with pytest.raises(ConfigError) as refused:
        TrainerConfig(strategy=strategy, devices=2)
    assert str(refused.value) == (f"trainer.strategy={strategy!r} is not supported by this trainer; use one of "
                                  f"{STRATEGIES}")  # fmt: skip


def test_the_supported_strategies_are_accepted_and_single_device_only_on_one_device():
    assert {TrainerConfig(strategy=strategy).strategy for strategy in STRATEGIES} == set(STRATEGIES)
    assert TrainerConfig(strategy="ddp", devices=2).devices == 2  # CPU DDP over two processes works (test_runner)
    for options in ({"devices": 2}, {"num_nodes": 2}):
        with pytest.raises(ConfigError, match=r"^trainer\.strategy='single_device' runs one process"):
            TrainerConfig(strategy="single_device", **options)


def test_an_unsupported_strategy_is_refused_before_the_run_directory_is_written(tmp_path, capsys):
    run_dir = tmp_path / "run"
    one_line_refusal(capsys, ["train", f"output_dir={run_dir}", "trainer.strategy=ddp_spawn", "trainer.devices=2",
                              "trainer.max_steps=2"], "trainer.strategy='ddp_spawn'")  # fmt: skip
    assert not run_dir.exists()


@pytest.mark.parametrize("accelerator", ["tpu", "hpu", "CPU", "foo"])
def test_an_accelerator_this_trainer_does_not_take_is_refused_naming_the_key(tmp_path, capsys, accelerator):
    """Lightning's refusal named no key and offered tpu, which then failed as a missing "dependency of markovformer's
    command line" (torch_xla); the trainer takes cpu, gpu, cuda, mps and auto."""
    run_dir = tmp_path / "run"
    argv = ["train", f"output_dir={run_dir}", f"trainer.accelerator={accelerator}", "trainer.max_steps=2"]
    one_line_refusal(capsys, argv, f"trainer.accelerator={accelerator!r} must be one of")
    assert not run_dir.exists()
    assert {TrainerConfig(accelerator=name).accelerator for name in ("cpu", "gpu", "cuda", "mps", "auto")} == {
        "cpu", "gpu", "cuda", "mps", "auto"}  # fmt: skip


@pytest.mark.parametrize(
    ("override", "fragment"),
    [("model.d_model=30", "d_model=30: must be divisible by n_heads=4"),
     ("model.attention=bogus", "attention='bogus': must be one of"),
     ("model.atention=markov", "unknown key model.atention"),
     ("model.frobnicate=1", "unknown key model.frobnicate; the keys of model:")],  # no close key: all are listed
)  # fmt: skip
def test_a_model_no_data_could_make_valid_is_refused_before_the_data_is_built(tmp_path, capsys, monkeypatch, override,
                                                                              fragment):  # fmt: skip
    """A text run fits its tokenizer before the model is built (it needs the vocabulary): a typo in the model section
    was reported after the fit, which on a large corpus takes minutes."""
    import markovformer.training.runner as runner

    def built(*args, **kwargs):
        raise AssertionError("the data was built before the model section was checked")

    monkeypatch.setattr(runner, "build_data", built)
    text = tmp_path / "corpus.txt"
    text.write_text("some text to fit a tokenizer on\n" * 50)
    run_dir = tmp_path / "run"
    one_line_refusal(capsys, ["train", "text_char", f"data.path={text}", f"output_dir={run_dir}", override,
                              "trainer.max_steps=2"], fragment)  # fmt: skip
    assert not run_dir.exists()


def test_a_model_whose_fault_is_the_datas_size_is_left_to_the_built_data(tmp_path, capsys):
    """The stand-in vocabulary does not decide what the data will: a model.vocab_size that disagrees with the text is
    refused naming the data's, after it is built."""
    text = tmp_path / "corpus.txt"
    text.write_text("abcab\n" * 2000)
    one_line_refusal(capsys, ["train", "text_char", f"data.path={text}", f"output_dir={tmp_path / 'run'}",
                              "model.vocab_size=300", "trainer.max_steps=2"],
                     "model.vocab_size=300 disagrees with the data")  # fmt: skip
