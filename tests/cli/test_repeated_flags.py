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
