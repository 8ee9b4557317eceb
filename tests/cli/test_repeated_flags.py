"""A list option given twice keeps both lists (argparse's default kept the last: `experiment NAME --set steps=200
--set eval_every=50` trained the default steps, `eval RUN --data path=other.txt --data fractions=[0,0,1]` scored the
run's own file)."""

import argparse

import pytest

from markovformer.cli import bench as bench_cli
from markovformer.cli.main import build_parser


@pytest.mark.parametrize(("argv", "dest", "expected"), [
    (["eval", "run", "--data", "path=other.txt", "--data", "fractions=[0, 0, 1]"], "data",
     ["path=other.txt", "fractions=[0, 0, 1]"]),
    (["experiment", "weight-tying", "--set", "steps=200", "--set", "eval_every=50", "lr=2"], "overrides",
     ["steps=200", "eval_every=50", "lr=2"]),
    (["experiment", "weight-tying", "--seeds", "0", "1", "--seeds", "2"], "seeds", [0, 1, 2]),
    (["experiment", "weight-tying", "--recompute", "*tied*", "--recompute", "*sgd*"], "recompute", ["*tied*", "*sgd*"]),
    (["inspect", "run", "--layers", "0", "--layers", "1"], "layers", [0, 1]),
])  # fmt: skip
def test_a_list_option_given_twice_keeps_both(argv, dest, expected):
    assert getattr(build_parser().parse_args(argv), dest) == expected


def test_the_defaults_of_list_options_stand_when_they_are_not_given():
    args = build_parser().parse_args(["experiment", "weight-tying"])
    assert (args.seeds, args.overrides, args.recompute) == (None, [], [])
    assert build_parser().parse_args(["inspect", "run"]).layers is None
    assert build_parser().parse_args(["eval", "run"]).data == []


def test_bench_list_options_given_twice_keep_both(monkeypatch):
    import markovformer.bench

    seen = []
    monkeypatch.setattr(markovformer.bench, "run_suite", lambda out, settings, log: seen.append(settings))
    parser = argparse.ArgumentParser()
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    bench_cli.run_bench(parser.parse_args(["bench", "--parts", "ops", "--parts", "decode", "--decode-batches", "2",
                                           "--decode-batches", "3", "--set", "data_mb=2", "--set", "repeats=4"]))
    bench_cli.run_bench(parser.parse_args(["bench"]))
    given, default = seen
    assert given.parts == ("ops", "decode") and given.decode_batches == (2, 3)
    assert (given.data_mb, given.repeats) == (2.0, 4)
    assert default.parts == tuple(bench_cli.PART_NAMES)


def test_bench_set_values_are_read_as_run_config_values():
    """bench --set reads its values as train's overrides and the experiment's --set do (YAML 1.2 numbers): PyYAML's
    own loader made repeats=010 octal 8 and time_cap=1e-3 the text '1e-3'."""
    from markovformer.bench import BenchSettings
    from markovformer.training.run_config import read_yaml

    settings = bench_cli._with_settings(BenchSettings(), ["repeats=010", "time_cap=1e-3"])
    assert (settings.repeats, settings.time_cap) == (read_yaml("010"), read_yaml("1e-3")) == (10, 0.001)


def test_a_bench_set_value_that_is_not_yaml_is_refused_naming_it():
    from markovformer.bench import BenchSettings

    with pytest.raises(ValueError, match=r"^--set 'repeats=\[1': the value is not valid YAML \("):
        bench_cli._with_settings(BenchSettings(), ["repeats=[1"])


# ------------------------------------------------------------------------------ a key set twice by KEY=VALUE words

@pytest.mark.parametrize(("argv", "key", "first", "then"), [
    (["train", "model.d_model=32", "model.d_model=64", "trainer.max_steps=1"], "model.d_model", "model.d_model=32",
     "model.d_model=64"),
    # a section replaced whole drops the key set inside it before
    (["train", "data.path=a.txt", "data={source: text}", "trainer.max_steps=1"], "data.path", "data.path=a.txt",
     "data={source: text}"),
    (["train", "--resume", "run", "trainer.lr=1e-3", "trainer.lr=2e-3"], "trainer.lr", "trainer.lr=1e-3",
     "trainer.lr=2e-3"),
    (["eval", "run", "--data", "path=a.txt", "--data", "path=b.txt"], "path", "path=a.txt", "path=b.txt"),
    (["experiment", "weight-tying", "--from-cells", "--out", "none", "--set", "steps=200", "steps=300"], "steps",
     "steps=200", "steps=300"),
])  # fmt: skip
def test_a_key_set_twice_to_different_values_is_refused_naming_both(main_cli, argv, key, first, then):
    """`train CONFIG model.d_model=32 model.d_model=64` trained d_model 64 without a word (the last won); so did
    eval's --data, experiment's and bench's --set."""
    done = main_cli(*argv)
    assert done.returncode == 2, (done.stdout[-500:], done.stderr[-2000:])
    assert f"{key} is set twice, to different values: {first!r}, then {then!r}" in done.stderr, done.stderr


def test_a_bench_setting_given_twice_to_different_values_is_refused_naming_both():
    from markovformer.bench import BenchSettings

    with pytest.raises(ValueError, match=r"^repeats is set twice, to different values: 'repeats=3', then 'repeats=4'"):
        bench_cli._with_settings(BenchSettings(), ["repeats=3", "repeats=4"])
    assert bench_cli._with_settings(BenchSettings(), ["repeats=4", "repeats=4"]).repeats == 4


def test_a_key_set_twice_to_one_value_or_a_section_refined_after_is_taken():
    """Nothing said is lost: the same value twice, or a section given whole and then one key of it changed."""
    from markovformer.training.run_config import check_each_key_once

    check_each_key_once(["model.d_model=64", "model.d_model=64", "model.n_layers=2"])
    check_each_key_once(["model={d_model: 32}", "model.n_layers=2", "data.path=a.txt", "data={path: a.txt}"])
    with pytest.raises(ValueError, match=r"^model\.d_model is set twice, to different values: 'model=\{d_model: 32\}"):
        check_each_key_once(["model={d_model: 32}", "model.d_model=64"])
    with pytest.raises(ValueError, match=r"^trainer\.seed is set twice, .*'trainer\.seed=1', then 'trainer\.seed=on'"):
        check_each_key_once(["trainer.seed=1", "trainer.seed=on"])  # True == 1 in Python, not in a config
