"""What the smaller commands do: `experiment` (list, run, reuse of cells, one experiment per folder), what --force
changes, bench's flags and --set values reaching the suite's settings, help without torch, eval's strict JSON and
its most-frequent-label bar, inspect's --layers help."""

import json

import pytest
from conftest import one_line_error


def test_experiment_list_and_unknown_name(main_cli):
    listed = main_cli("experiment", "list")
    assert listed.returncode == 0 and "weight-tying" in listed.stdout and "landscape" in listed.stdout
    one_line_error(main_cli("experiment", "wieght-tying"), "did you mean 'weight-tying'")
    one_line_error(main_cli("experiment", "landscape", "--set", "stps=5"), "landscape.stps",
                          "did you mean 'steps'")
    one_line_error(main_cli("experiment", "landscape", "--set", "steps=many"), "landscape.steps")


def test_experiment_list_and_a_mistyped_name_import_no_training_machinery():
    """`experiment list` imported every experiment, Lightning and torchmetrics (about 8 s on a quiet 2-core CPU,
    three times the time of torch alone) to print eleven lines."""
    import subprocess
    import sys

    # both in one fresh interpreter, in turn: what the first imports is still there when the second's is printed
    code = ("import sys\n"
            "from markovformer.cli.main import main\n"
            "for name, status in (('list', 0), ('wieght-tying', 2)):\n"
            "    assert main(['experiment', name]) == status\n"
            "    print('imported:', name, sorted(module for module in ('lightning', 'torchmetrics', "
            "'markovformer.training.tasks') if module in sys.modules))\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    imported = [line for line in done.stdout.splitlines() if line.startswith("imported: ")]
    assert imported == ["imported: list []", "imported: wieght-tying []"], done.stdout


def test_help_and_a_mistyped_command_answer_without_loading_torch():
    """`markovformer --help` took 3.7 s: the package imported every model, hence torch, before argparse ran. The
    package's names are imported on first use; the command line's parsers need none of them."""
    import subprocess
    import sys

    # every command line in one fresh interpreter, in turn: torch, once imported by one, stays in sys.modules
    code = ("import json, sys\n"
            "from markovformer.cli.main import main\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "    print('torch imported:', argv, 'torch' in sys.modules, file=sys.stderr)\n")  # fmt: skip
    commands = [["--help"], ["generate", "--help"], ["trian"], ["kind", "--help"], ["kind", "show", "--help"],
                ["kind", "lst"]]  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code, json.dumps(commands)], capture_output=True, text=True)
    answers = [line for line in done.stderr.splitlines() if line.startswith("torch imported: ")]
    assert answers == [f"torch imported: {argv} False" for argv in commands], done.stderr
    code = "import sys, markovformer; print(markovformer.MarkovianTransformerConfig.__module__, 'torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["markovformer.models.markovian_transformer.config", "True"], done.stderr


def test_experiment_runs_with_settings_and_reuses_cells(tmp_path, main_cli):
    out = tmp_path / "landscape"
    args = ("experiment", "landscape", "--out", str(out), "--set", "steps=300", "starts=2", "chains=[[0.2, 0.3]]")
    first = main_cli(*args)
    assert first.returncode == 0, first.stderr
    report = (out / "report.md").read_text()
    assert "lr 0.1, 300 steps" in report and (out / "landscape.png").is_file()
    results = json.loads((out / "results.json").read_text())
    assert results["settings"]["steps"] == 300 and len(results["cells"]) == 1
    again = main_cli(*args)
    assert "done earlier" in again.stdout
    changed = main_cli(*args[:5], "steps=200", *args[6:])  # steps set once: twice, to other values, is refused
    assert "stored under other settings" in changed.stdout
    one_line_error(main_cli(*args, "--recompute", "nope*"), "'nope*' matches no cell")
    redone = main_cli(*args, "--recompute", "*")
    assert redone.returncode == 0 and "removed, to be recomputed" in redone.stdout
    assert "done earlier" not in redone.stdout


def test_an_experiment_folder_holds_one_experiment_and_quick_runs_have_their_own(tmp_path, main_cli):
    """--quick wrote into the full run's default folder, replacing its cells (the quick settings differ); another
    experiment's run into a folder replaced its report, results and figures and mixed both experiments' cells."""
    tiny = ("--set", "steps=200", "starts=2", "chains=[[0.2, 0.3]]")
    assert main_cli("experiment", "landscape", "--quick", *tiny).returncode == 0
    quick = tmp_path / "runs" / "experiments" / "landscape-quick"
    assert (quick / "report.md").is_file() and not (tmp_path / "runs" / "experiments" / "landscape").exists()
    assert json.loads((quick / "experiment.json").read_text()) == {"experiment": "landscape"}
    report = (quick / "report.md").read_text()
    done = main_cli("experiment", "weight-tying", "--quick", "--out", str(quick), "--set", "steps=2")
    one_line_error(done, f"{quick} holds the experiment 'landscape' (experiment.json); give weight-tying "
                                "another --out")  # fmt: skip
    assert (quick / "report.md").read_text() == report and not list((quick / "cells").glob("*p=0.5*"))


def _bench_settings(monkeypatch, *argv: str):
    """The BenchSettings ``markovformer bench ARGV`` hands to the suite (the suite itself is not run)."""
    import argparse

    import markovformer.bench
    from markovformer.cli import bench as bench_cli

    seen = []
    monkeypatch.setattr(markovformer.bench, "run_suite", lambda out, settings, log: seen.append(settings))
    parser = argparse.ArgumentParser()
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    bench_cli.run_bench(parser.parse_args(["bench", *argv]))
    assert len(seen) == 1
    return seen[0]


def test_bench_flags_reach_the_suites_settings(monkeypatch):
    """Each flag lands in its setting: the allocator switch (default: keep freed memory, as train does), the op
    kinds and the per-part sizes."""
    assert _bench_settings(monkeypatch).keep_freed_memory is True
    assert _bench_settings(monkeypatch, "--default-allocator").keep_freed_memory is False
    settings = _bench_settings(monkeypatch, "--op-kinds", "markov_local", "softmax_sdpa", "--decode-batches", "2", "3",
                               "--scan-lengths", "256", "--parts", "ops", "decode", "scan")  # fmt: skip
    assert settings.op_kinds == ("markov_local", "softmax_sdpa")
    assert (settings.decode_batches, settings.scan_lengths) == ((2, 3), (256,))


def test_bench_set_reads_yaml_values_into_the_fields_types(monkeypatch):
    """--set KEY=VALUE: an int where a float belongs is that float; one value for a tuple field is a 1-tuple; a list
    is a tuple."""
    settings = _bench_settings(monkeypatch, "--set", "data_mb=2", "data_tokenizers=char", "memory_lengths=[64, 128]")
    assert settings.data_mb == 2.0 and isinstance(settings.data_mb, float)
    assert settings.data_tokenizers == ("char",)
    assert settings.memory_lengths == (64, 128)


@pytest.mark.parametrize("pair", ["time_cap", "repeats", "data_mb"])
def test_bench_set_without_an_equals_sign_is_refused(monkeypatch, pair):
    """``--set KEY`` (no ``=VALUE``) is refused naming the expected form, never read as KEY=null."""
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        _bench_settings(monkeypatch, "--set", pair)


@pytest.mark.parametrize("pair", ["data_mb=yes", "data_timeout=on", "data_small_mb=true"])
def test_bench_set_refuses_a_yaml_boolean_for_a_number(monkeypatch, pair):
    """"A value of the wrong type is refused, naming it": YAML reads yes/on/true as True, and bool is an int
    subclass, so a float setting took it as 1.0 (data_mb=yes benchmarked 1 MB) where an int setting refuses it."""
    key = pair.split("=")[0]
    with pytest.raises(ValueError, match=f"{key} takes a float, got True"):
        _bench_settings(monkeypatch, "--set", pair)


def test_strict_json_replaces_every_non_finite_float_in_nested_lists_tuples_and_dicts():
    """eval --json prints allow_nan=False JSON: every NaN/inf, at any depth and in a tuple too, becomes null."""
    import math

    from markovformer.strict_json import strict_json

    value = {"a": (math.inf, 1.0, [-math.inf, {"b": math.nan}]), "c": 2, "d": "x"}
    assert json.loads(json.dumps(strict_json(value), allow_nan=False)) == {"a": [None, 1.0, [None, {"b": None}]],
                                                                              "c": 2, "d": "x"}  # fmt: skip


def test_data_prepare_rebuilds_an_existing_file_only_with_force(tmp_path, monkeypatch, main_cli):
    """A recipe's file already there is kept (nothing fetched) unless --force, which rebuilds it in place."""
    from types import SimpleNamespace

    from markovformer.data.recipes.registry import DATA_RECIPES

    calls = []

    def prepare(out):
        calls.append(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(f"built {len(calls)}\n")

    recipe = SimpleNamespace(summary="a fake", file_name="fake.txt", prepare=prepare, usage="use {path}")
    monkeypatch.setitem(DATA_RECIPES, "fake-recipe", recipe)
    target = tmp_path / "fake.txt"
    prepare_fake = ("data", "prepare", "fake-recipe", "--dir", str(tmp_path))
    assert main_cli(*prepare_fake).returncode == 0 and target.read_text() == "built 1\n"
    target.write_text("edited\n")
    kept = main_cli(*prepare_fake)
    assert kept.returncode == 0 and "already there" in kept.stdout
    assert target.read_text() == "edited\n" and len(calls) == 1
    assert main_cli(*prepare_fake, "--force").returncode == 0
    assert target.read_text() == "built 2\n" and calls == [target, target]


def test_config_copy_overwrites_an_existing_file_only_with_force(tmp_path, main_cli):
    from markovformer.training.config_files import shipped_config

    (tmp_path / "mine.yaml").write_text("edited: true\n")
    one_line_error(main_cli("config", "copy", "text_char", "mine.yaml"), "--force")
    assert (tmp_path / "mine.yaml").read_text() == "edited: true\n"
    assert main_cli("config", "copy", "text_char", "mine.yaml", "--force").returncode == 0
    assert (tmp_path / "mine.yaml").read_text() == shipped_config("text_char").read_text()


@pytest.mark.parametrize(("per_token", "counts"), [(False, (139, 401, 181)), (True, (139, 401, 181)),
                                                   (False, (0, 9, 0))])  # fmt: skip
def test_eval_prints_what_always_guessing_the_most_frequent_label_would_score(capsys, per_token, counts):
    """0.56 accuracy on a split whose most frequent label is 55.6 % of it is nothing: eval prints that bar, checked
    here against ClassificationMetrics scoring the constant guess itself, with the metrics the task reports and no
    other: token classification reports no AUROC (the line said "auroc 0.5" for it), nor does a split of one class
    (nan: no class has both positives and negatives)."""
    import math
    import re

    import torch

    from markovformer.cli.main import print_per_class
    from markovformer.training.metrics import ClassificationMetrics

    labels = torch.tensor([label for label, count in enumerate(counts) for _ in range(count)])
    logits = torch.tensor([0.0, 1.0, 0.0]).repeat(len(labels), 1)
    if per_token:  # one row of positions, two of them unlabelled
        labels, logits = torch.cat([labels, torch.tensor([-100, -100])])[None], torch.cat([logits, logits[:2]])[None]
    constant = ClassificationMetrics(3, auroc=not per_token, label_names=["down", "flat", "up"], per_token=per_token)
    constant.update(type("Output", (), {"logits": logits, "loss": torch.tensor(1.0)})(), {"labels": labels})
    expected = {key: value for key, value in constant.compute().items() if key != "loss" and not math.isnan(value)}
    print_per_class(constant.breakdown()["per_class"], auroc="auroc" in constant.compute())
    line = capsys.readouterr().out.splitlines()[-1]
    shown = re.fullmatch(r"  always 'flat' \(the split's most frequent label\) would score (.*)", line)
    assert shown, line
    numbers = dict(item.split(" ") for item in shown.group(1).split(", "))
    assert numbers.keys() == expected.keys(), line
    for key, value in numbers.items():
        assert float(value) == pytest.approx(expected[key], abs=5e-5), key


def test_inspects_layers_help_names_every_figure_it_chooses_and_its_default():
    """--layers chooses the layers of the attention maps and of the attention-by-lag profile, by default the first
    two layers that have a map (``inspection._gate_and_attention_figures``; a scan layer 0 is passed by): its help
    spoke of the maps only, 'default: the first two'."""
    import argparse

    from markovformer.cli.main import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    layers = next(a for a in commands.choices["inspect"]._actions if "--layers" in a.option_strings)
    text = " ".join(layers.help.split())
    assert "attention maps and attention by lag" in text and "the first two layers that have attention maps" in text
