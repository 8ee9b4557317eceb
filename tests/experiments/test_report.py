"""The experiment report: cells are cached so a killed experiment resumes; files are complete or absent."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
from pathlib import Path

import pytest

import markovformer
from markovformer.experiments import EXPERIMENTS, run_experiment
from markovformer.experiments.fitting import FitResult, steps_to_reach
from markovformer.experiments.report import (
    ExperimentReport,
    cell_settings,
    forget_cells,
    markdown_table,
    mean_std,
    replaced_cell,
    revisions_of,
    seed_summary,
)
from markovformer.experiments.settings import single_seed
from markovformer.training.trainer_config import ConfigError


def test_cached_cells_are_computed_once_and_reread(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return {"loss": 0.5, "curve": [1.0, 0.5]}

    settings = {"steps": 10, "grid": (1, 2)}
    first = ExperimentReport(tmp_path, "t", log=lambda line: None, settings=settings).cached("cell_a", compute)
    again = ExperimentReport(tmp_path, "t", log=lambda line: None, settings=settings).cached("cell_a", compute)
    assert first == again == {"loss": 0.5, "curve": [1.0, 0.5]}
    assert len(calls) == 1
    stored = json.loads((tmp_path / "cells" / "cell_a.json").read_text())
    assert stored["settings"] == {"steps": 10, "grid": [1, 2]} and stored["result"] == first
    # other settings: the stored cell does not answer for them; it is recomputed, the stored one kept aside
    lines = []
    ExperimentReport(tmp_path, "t", log=lines.append, settings={"steps": 20}).cached("cell_a", compute)
    assert len(calls) == 2
    kept = replaced_cell(tmp_path / "cells" / "cell_a.json", stored["settings"])
    assert json.loads(kept.read_text()) == stored  # a --quick run into a full run's folder replaced its cells
    assert lines[0] == f"  cell_a: stored under other settings, recomputing (grid: [1, 2] -> null; steps: 10 -> 20); " \
                       f"the stored cell is kept as {kept}, which a run under its settings takes back"
    # a third run under the first settings takes its cell back, computing nothing; the second's is kept in turn
    lines.clear()
    again = ExperimentReport(tmp_path, "t", log=lines.append, settings=settings).cached("cell_a", compute)
    assert again == first and len(calls) == 2 and not kept.exists() and "taken back from" in lines[-1]
    assert len(list((tmp_path / "cells" / "replaced").glob("cell_a.*.json"))) == 1  # the steps=20 cell
    # --recompute forgets the kept copies too: a run under their settings computes again, takes nothing back
    forget_cells(tmp_path, ["cell_*"], log=lambda line: None)
    assert not list((tmp_path / "cells").rglob("*.json"))


def test_a_cell_with_its_own_dependencies_is_reused_across_experiment_settings(tmp_path):
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    def report(seeds):
        return ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"seeds": seeds, "steps": 10})

    assert report([0]).cached("cell", compute, depends_on={"steps": 10, "seed": 0}) == 1
    assert report([0, 1, 2]).cached("cell", compute, depends_on={"steps": 10, "seed": 0}) == 1  # reused
    assert report([0]).cached("cell", compute, depends_on={"steps": 20, "seed": 0}) == 2  # what it depends on changed
    stored = json.loads((tmp_path / "cells" / "cell.json").read_text())
    assert stored["settings"] == {"steps": 20, "seed": 0}


def test_cell_settings_are_the_settings_less_the_grids_axes_and_refuse_a_name_that_is_no_setting():
    @dataclasses.dataclass(frozen=True)
    class Grid:
        orders: tuple[int, ...] = (1, 2)
        steps: int = 10
        lr: float = 0.1

    assert cell_settings(Grid(), ("orders",)) == {"steps": 10, "lr": 0.1}
    # one more order on the axis: the same settings, so its cells are read back
    assert cell_settings(Grid(orders=(1, 2, 3)), ("orders",)) == cell_settings(Grid(), ("orders",))
    assert cell_settings(Grid(steps=20), ("orders",)) != cell_settings(Grid(), ("orders",))
    with pytest.raises(KeyError, match="'order'"):
        cell_settings(Grid(), ("order",))


def test_a_cell_records_the_code_that_computed_it(tmp_path):
    ExperimentReport(tmp_path, "t", log=lambda line: None).cached("cell", lambda: 1)
    code = json.loads((tmp_path / "cells" / "cell.json").read_text())["code"]
    assert code["markovformer"] == markovformer.__version__
    source = Path(markovformer.__file__).resolve().parent
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True)
    if head.returncode != 0:
        assert code["git_commit"] is None  # an installed copy, not a checkout
    else:
        assert code["git_commit"].removesuffix("+dirty") == head.stdout.strip()


def test_forget_cells_removes_the_matching_cells_and_refuses_a_pattern_matching_none(tmp_path):
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    for key in ("mqar_fox_seed=0", "mqar_fox_seed=1", "mqar_softmax_seed=0"):
        report.cached(key, lambda: 1)
    with pytest.raises(ValueError, match=r"'\*alibi\*' matches no cell .*mqar_fox_seed=0"):
        forget_cells(tmp_path, ["*fox*", "*alibi*"], log=lambda line: None)
    assert len(list((tmp_path / "cells").glob("*.json"))) == 3  # nothing deleted on a bad pattern
    removed = forget_cells(tmp_path, ["*fox*", "*seed=1"], log=lambda line: None)
    assert sorted(path.stem for path in removed) == ["mqar_fox_seed=0", "mqar_fox_seed=1"]
    assert [path.stem for path in (tmp_path / "cells").glob("*.json")] == ["mqar_softmax_seed=0"]
    assert report.cached("mqar_fox_seed=0", lambda: 2) == 2  # recomputed


def test_forget_cells_removes_the_runs_the_cells_trained(tmp_path):
    """An experiment that trains engine runs (table1, shakespeare-char, scan-shakespeare, vmt) reads a finished run
    back: --recompute forgot the cell but kept its run, so the "recomputed" cell scored the old weights again."""
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    runs = tmp_path / "runs"
    for name in ("a_run", "b_run", "c_run"):
        (runs / name).mkdir(parents=True)
    report.cached("a_seed=0", lambda: {"run_dir": str(runs / "a_run"), "loss": 1.0})
    report.cached("b_seed=0", lambda: {"models": {"x": {"run_dir": str(runs / "b_run")}, "y": {"run_dir": None}}})
    report.cached("c_seed=0", lambda: {"run_dir": str(runs / "c_run")})
    report.cached("old_seed=0", lambda: {"loss": 2.0})  # stored before cells named their runs
    with pytest.raises(ValueError, match="cell old_seed=0 does not name the run it trained"):
        forget_cells(tmp_path, ["a*", "old*"], log=lambda line: None)
    assert len(list((tmp_path / "cells").glob("*.json"))) == 4  # nothing deleted
    forget_cells(tmp_path, ["a*", "b*"], log=lambda line: None)
    assert sorted(path.name for path in runs.iterdir()) == ["c_run"]
    assert sorted(path.stem for path in (tmp_path / "cells").glob("*.json")) == ["c_seed=0", "old_seed=0"]


def test_a_kinds_revision_names_a_new_run_directory(monkeypatch):
    """A fix that raises a kind's revision recomputes the cells that train it; their engine runs must be new runs
    (the run directory's name was the same, and the finished run from before the fix was read back)."""
    import dataclasses

    from markovformer.experiments import scan_shakespeare, table1_models
    from markovformer.layers import registry

    values = {"model": {"attention": ["markov", "hybrid_split"]}, "data": {"path": "x"}, "trainer": {"seed": 0}}

    def names() -> tuple[str, str]:
        return scan_shakespeare.run_name("row", values, "digest"), table1_models.run_name("d", "v", values, {})

    before = names()
    kind = registry.ATTENTION_KINDS["hybrid_split"]
    monkeypatch.setitem(registry.ATTENTION_KINDS, "hybrid_split", dataclasses.replace(kind, revision=kind.revision + 1))
    after = names()
    assert before[0] != after[0] and before[1] != after[1]


def test_revisions_name_only_the_revised_kinds_of_a_section():
    from markovformer.layers.registry import ATTENTION_KINDS

    assert revisions_of({"attention": "softmax"}) == {} and revisions_of({"d_model": 8}) == {}
    fox, stick = ATTENTION_KINDS["forgetting"].revision, ATTENTION_KINDS["stick_breaking"].revision
    assert fox >= 2 and stick >= 2
    layers = ["softmax", {"kind": "stick_breaking"}, "forgetting", "forgetting"]
    assert revisions_of({"attention": layers}) == {"revisions": {"forgetting": fox, "stick_breaking": stick}}
    # the random-feature fix (2205702) voids the cells of every kind with FAVOR+ heads
    assert all(ATTENTION_KINDS[kind].revision >= 2 for kind in ("rff", "hybrid_split", "hybrid_parallel"))


def test_a_failing_cell_leaves_no_file_and_reruns(tmp_path):
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)

    def crash():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        report.cached("cell_b", crash)
    assert not (tmp_path / "cells" / "cell_b.json").exists()
    assert report.cached("cell_b", lambda: 3) == 3


def test_cell_keys_must_be_plain_file_names(tmp_path):
    with pytest.raises(ValueError, match="'../escape'"):
        ExperimentReport(tmp_path, "t").cached("../escape", lambda: 1)


def test_report_and_results_are_written(tmp_path):
    report = ExperimentReport(tmp_path, "Title", log=lambda line: None)
    report.table(["a", "b"], [[1, 0.123456], ["x", 2.0]], caption="numbers")
    report.results = {"a": 1}
    path = report.write()
    text = path.read_text()
    assert text.startswith("# Title\n") and "| 1 | 0.1235 |" in text and "| x | 2.0000 |" in text and "numbers" in text
    assert json.loads((tmp_path / "results.json").read_text()) == {"a": 1}
    assert markdown_table(["c"], [[1]]).splitlines()[1] == "|---|"


def strict_loads(text: str):
    """json.loads that refuses NaN / Infinity, as strict parsers (JavaScript, jq) do."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_cells_and_results_are_strict_json_with_null_for_a_non_finite_number(tmp_path):
    # json.dumps wrote NaN and Infinity, which strict parsers refuse: the cell and results.json were unreadable there
    def compute():
        return {"loss": math.nan, "curve": [1.0, math.inf, -math.inf], "steps": (1, 2)}

    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    first = report.cached("cell_nan", compute)
    again = ExperimentReport(tmp_path, "t", log=lambda line: None).cached("cell_nan", compute)
    expected = {"loss": None, "curve": [1.0, None, None], "steps": [1, 2]}
    assert strict_loads((tmp_path / "cells" / "cell_nan.json").read_text())["result"] == expected
    assert first == again == expected  # the run that computed the cell sees what a rerun reads back
    report.results = {"ratio": math.inf, "values": [0.5, math.nan]}
    report.write()
    assert strict_loads((tmp_path / "results.json").read_text()) == {"ratio": None, "values": [0.5, None]}


def test_a_seed_whose_cell_stored_a_non_finite_number_makes_the_summary_nan(tmp_path):
    # a classification cell's auroc is NaN where no class is scorable; cached() hands it back as None (null), and
    # seed_summary raised TypeError ("must be real number, not NoneType") at report time, after every cell had run
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    scores = [report.cached(f"seed{seed}", lambda auroc=auroc: {"auroc": auroc})["auroc"]
              for seed, auroc in enumerate([0.75, math.nan, 0.85])]  # fmt: skip
    summary = seed_summary(scores)
    assert math.isnan(summary["mean"]) and math.isnan(summary["std"]) and summary["n"] == 3
    assert mean_std(summary) == "nan ± nan"
    assert seed_summary([0.75, 0.85])["mean"] == pytest.approx(0.8)  # finite seeds as before

def test_the_first_table_and_its_caption_are_logged_when_the_report_is_written(tmp_path):
    lines = []
    report = ExperimentReport(tmp_path, "Title", log=lines.append)
    report.text("An introduction.")
    report.table(["kind", "accuracy"], [["markov", 0.99]], caption="**headline**: accuracy")
    report.table(["other"], [[1]])
    assert lines == []  # nothing before the report is written
    path = report.write()
    assert lines == ["\n**headline**: accuracy\n\n| kind | accuracy |\n|---|---|\n| markov | 0.99 |\n"]
    assert lines[0].strip() in path.read_text()


def test_the_spread_over_seeds_is_the_sample_standard_deviation():
    """Every experiment's "mean ± std" over seeds: the spread of 1 and 3 is sqrt(2) with n - 1 in the denominator
    (the population formula would report 1, a spread too small by sqrt(n / (n - 1))); one seed has no spread, and
    is shown as its mean alone."""
    two = seed_summary([1.0, 3.0])
    assert two == {"mean": 2.0, "std": pytest.approx(math.sqrt(2.0), rel=1e-12), "n": 2, "values": [1.0, 3.0]}
    assert mean_std(two) == "2.000 ± 1.414"
    assert seed_summary([0.5]) == {"mean": 0.5, "std": None, "n": 1, "values": [0.5]}
    assert mean_std(seed_summary([0.5]), digits=2) == "0.50"


def test_steps_to_reach_is_the_first_evaluation_within_tolerance():
    result = FitResult(steps=[0, 10, 20, 30], evaluations=[1.0, 0.62, 0.55, 0.505])
    assert steps_to_reach(result, 0.5, 0.06) == 20
    assert steps_to_reach(result, 0.5, 0.001) is None
    # a value below the target has reached it (a held-out loss may undershoot a floor computed on a sample)
    assert steps_to_reach(FitResult(steps=[0, 10, 20], evaluations=[1.0, 0.3, 0.5]), 0.5, 0.06) == 10


def test_unknown_experiment_gets_a_suggestion(tmp_path):
    with pytest.raises(ValueError, match="did you mean 'landscape'"):
        run_experiment("landscap", tmp_path)
    assert {"weight-tying", "landscape"} <= set(EXPERIMENTS)


def test_the_registry_read_from_the_sources_is_what_the_modules_declare():
    """``experiment list`` reads each module's NAME and SUMMARY from its source, so as not to import it: what it
    reads is what the imported module says, and ``run`` is the module's own."""
    import importlib

    for experiment in EXPERIMENTS.values():
        module = importlib.import_module(f"markovformer.experiments.{experiment.module}")
        assert (experiment.name, experiment.summary, experiment.run) == (module.NAME, module.SUMMARY, module.run)


def test_the_report_says_which_code_computed_its_cells(tmp_path):
    def run(keys, code):
        report = ExperimentReport(tmp_path, "t", log=lambda line: None)
        report.code = code
        for key in keys:
            report.cached(key, lambda: 1)
        return report.write().read_text()

    old, new = {"markovformer": "0.1.0", "git_commit": "a" * 40}, {"markovformer": "0.1.0", "git_commit": "b" * 40}
    assert run(["x"], old).rstrip().endswith("*1 cell, computed by markovformer 0.1.0, commit aaaaaaaaaa.*")
    assert run(["x", "y"], old).rstrip().endswith("*2 cells, all computed by markovformer 0.1.0, commit aaaaaaaaaa.*")
    (tmp_path / "cells" / "y.json").write_text(json.dumps({"settings": {}, "result": 1}))  # stored before codes
    text = run(["x", "y", "z"], new)  # x and y reused, z computed by the new code
    assert "3 cells, computed by 3 versions of the code" in text
    assert "commit aaaaaaaaaa: 1" in text and "commit bbbbbbbbbb: 1" in text
    assert "code not recorded (stored before cells kept it): 1" in text
    assert "`--recompute PATTERN`" in text


def test_a_report_from_the_stored_cells_computes_nothing_and_names_a_missing_cell(tmp_path):
    from markovformer.experiments.report import MissingCell, stored_cells_only

    ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 10}).cached("cell_a", lambda: 1)
    with stored_cells_only():
        report = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 10})
        assert report.stored_only and report.cached("cell_a", lambda: 2) == 1  # read, not recomputed
        with pytest.raises(MissingCell, match="cell cell_b is not stored in"):
            report.cached("cell_b", lambda: 3)
        with pytest.raises(MissingCell, match="cell cell_a is stored in .* under other settings"):
            ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 20}).cached("cell_a", lambda: 4)
    assert not (tmp_path / "cells" / "cell_b.json").exists()
    assert not ExperimentReport(tmp_path, "t", log=lambda line: None).stored_only  # only within the context


def test_from_cells_on_the_command_line_stops_at_the_first_missing_cell_of_an_experiment_without_partial_grids(
    tmp_path, capsys
):
    from markovformer.cli.main import main

    (tmp_path / "cells").mkdir()
    assert main(["experiment", "weight-tying", "--quick", "--out", str(tmp_path), "--from-cells"]) == 2
    error = capsys.readouterr().err
    assert "is not stored in" in error and "without --from-cells the experiment computes it" in error
    assert list((tmp_path / "cells").iterdir()) == [] and not (tmp_path / "report.md").exists()
    assert main(["experiment", "weight-tying", "--out", str(tmp_path / "none"), "--from-cells"]) == 2
    assert "has no cells/ folder" in capsys.readouterr().err
    assert main(["experiment", "weight-tying", "--out", str(tmp_path), "--from-cells", "--recompute", "*"]) == 2
    assert "use one or the other" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["vmt", "landscape"])
def test_an_experiment_of_one_seed_refuses_several_instead_of_running_the_first(name, tmp_path):
    with pytest.raises(ValueError, match=rf"{name} runs one seed, got seeds=\(0, 1, 2\): run it once per seed"):
        run_experiment(name, tmp_path, quick=True, seeds=(0, 1, 2))
    assert not (tmp_path / "cells").exists() and not (tmp_path / "report.md").exists()


def test_a_one_seed_experiment_refuses_two_seeds_and_runs_the_one_it_is_given():
    with pytest.raises(ValueError, match=r"landscape runs one seed, got seeds=\(0, 1\)"):
        single_seed((0, 1), "landscape")
    assert single_seed((7,), "landscape") == 7
    assert single_seed(None, "landscape") == 0


@pytest.mark.parametrize(
    ("name", "overrides", "seeds", "message"),
    [
        ("mixers", {"kinds": []}, None, r"mixers.kinds=\[\]: give at least one value"),
        ("icl-depth", {"depths": []}, None, r"icl-depth.depths=\[\]"),
        ("position-biases", {"hidden_sources": [], "icl_orders": [], "mixer_tasks": []}, None, "no task to run"),
        ("mixers", {}, (-1,), r"seeds=\(-1,\): -1 must lie in \[0, 2\*\*32\)"),
        ("mixers", {}, (0, 1, 0), r"seeds=\(0, 1, 0\) repeats a seed"),
        ("table1", {"domains": ["genomics", "genomics"]}, None, "table1.domains=.* repeats a value"),
        ("shakespeare-char", {"rows": ["hybrid_w32", "hybrid_w32"]}, None, "rows=.* repeats a value"),
        ("weight-tying", {"plateau_patience": -3}, None, "weight-tying.plateau_patience=-3: must be >= 0"),
        ("landscape", {"starts": -3}, None, r"^landscape.starts=-3: must be > 0$"),  # not ">= 0": 0 is refused too
        ("landscape", {"starts": 0}, None, r"^landscape.starts=0: must be > 0$"),
        ("landscape", {"steps": 0}, None, r"^landscape.steps=0: must be > 0$"),
        ("mat-order", {"lr": 0}, None, r"^mat-order.lr=0: must be > 0$"),
        ("mixers", {"num_features": -4}, None, r"^mixers.num_features=-4: must be > 0$"),
    ],
    ids=["an emptied grid", "another", "every part emptied", "a negative seed", "a repeated seed", "a repeated domain",
         "a repeated row", "a negative patience (early stopping off, the report saying on)",
         "negative starts (torch's negative dimension)", "no start (a reduction over nothing)",
         "no step (every start 'not converged')", "a zero learning rate", "a negative optional number"],
)
def test_an_experiment_with_nothing_to_run_or_a_bad_seed_is_refused_before_it_writes(name, overrides, seeds,
                                                                                      message, tmp_path):  # fmt: skip
    """mixers kinds=[] ran nothing and wrote an empty report with exit status 0 (other experiments failed later on an
    index); a repeated seed, domain or row counted one run twice in a mean and its spread."""
    with pytest.raises(ValueError, match=message):
        run_experiment(name, tmp_path / "out", quick=True, seeds=seeds, overrides=overrides)
    assert not (tmp_path / "out").exists()


def test_the_settings_that_may_be_zero_are_settings_and_are_taken_at_zero():
    """MAY_BE_ZERO names fields of its class (a misspelt name would refuse the setting's 0 with no word of why)."""
    import dataclasses
    import importlib

    from markovformer.experiments.settings import configure

    for experiment in EXPERIMENTS.values():
        module = importlib.import_module(f"markovformer.experiments.{experiment.module}")
        settings = type(module.QUICK)
        for key in getattr(settings, "MAY_BE_ZERO", ()):
            assert key in {field.name for field in dataclasses.fields(settings)}, (module.NAME, key)
            assert getattr(configure(module.QUICK, {key: 0}, module.NAME), key) == 0


def test_a_quick_experiment_takes_plateau_patience_0_which_turns_its_early_stopping_off():
    """`experiment weight-tying --quick --set plateau_patience=0` (the documented way to turn the quick mode's early
    stopping off: 0 turns it off) was refused as `must be > 0`, the quick settings' patience of 4 being taken for a
    count that may not be 0."""
    import dataclasses
    import importlib

    from markovformer.experiments.settings import configure

    with_patience = 0
    for experiment in EXPERIMENTS.values():
        module = importlib.import_module(f"markovformer.experiments.{experiment.module}")
        if "plateau_patience" in {field.name for field in dataclasses.fields(module.QUICK)}:
            with_patience += 1
            assert configure(module.QUICK, {"plateau_patience": 0}, module.NAME).plateau_patience == 0, module.NAME
    assert with_patience >= 3  # weight-tying, icl-depth, order-recovery


def test_a_warm_up_longer_than_the_steps_is_refused_naming_the_experiments_settings():
    """`experiment mixers --set steps=30` (warm-up 50) trained every cell at a rate that never reached the rate the
    report names, with exit 0; shakespeare-char's failed in its first run naming trainer.warmup_steps, which the
    experiment does not take. Every experiment with steps and a warm-up refuses it up front, naming its settings."""
    import dataclasses
    import importlib

    from markovformer.experiments.settings import configure

    checked = 0
    for experiment in EXPERIMENTS.values():
        module = importlib.import_module(f"markovformer.experiments.{experiment.module}")
        names = {field.name for field in dataclasses.fields(module.QUICK)}
        if {"steps", "warmup_steps"} <= names:
            checked += 1
            steps = module.QUICK.warmup_steps + 1
            assert configure(module.QUICK, {"steps": steps}, module.NAME).steps == steps  # as long: taken
            with pytest.raises(ConfigError, match=rf"{module.NAME}\.warmup_steps={steps} is larger than "
                                                  rf"{module.NAME}\.steps={steps - 1}: .* N <= {steps - 1}"):
                configure(module.QUICK, {"warmup_steps": steps, "steps": steps - 1}, module.NAME)
    assert checked >= 6  # shakespeare-char, mixers, mat-order, icl-depth, order-recovery, position-biases


def test_an_optional_part_may_be_emptied():
    """Lists an experiment reads as optional parts (table1's ablation rows) may be empty; the grid's may not."""
    from markovformer.experiments.settings import configure
    from markovformer.experiments.table1 import Table1Settings

    assert configure(Table1Settings(), {"ablations": [], "ratios": []}, "table1").ablations == ()


def test_a_tables_column_writes_its_floats_with_one_number_of_decimals():
    """A measurement that happened to have two decimals was written as a setting: mat-order's exact-match column
    read 0.0550 beside 0.76, its seconds 33 beside 36.4."""
    from markovformer.experiments.report import markdown_table

    table = markdown_table(["p", "match", "seconds", "n", "big"],
                           [[0.2, 0.055, 33.0, 3, 12345.6], [0.25, 0.76, 36.4, 4, float("nan")]])  # fmt: skip
    assert table.splitlines()[2:] == ["| 0.20 | 0.0550 | 33.0 | 3 | 1.235e+04 |", "| 0.25 | 0.7600 | 36.4 | 4 | nan |"]


def test_a_kept_copy_is_read_by_from_cells_and_forgotten_by_recompute_when_its_recompute_was_killed(tmp_path):
    """A cell kept in cells/replaced/ whose recompute under other settings was killed: --from-cells under its
    settings reads it (it raised MissingCell), and --recompute finds it (it said the pattern matched no cell, and
    the next run took the stale copy back)."""
    from markovformer.experiments.report import stored_cells_only

    def killed():
        raise KeyboardInterrupt

    first = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 10})
    assert first.cached("cell_b", lambda: {"loss": 0.5}) == {"loss": 0.5}
    with pytest.raises(KeyboardInterrupt):
        ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 20}).cached("cell_b", killed)
    assert not (tmp_path / "cells" / "cell_b.json").exists()
    with stored_cells_only():
        read = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 10}).cached("cell_b", killed)
    assert read == {"loss": 0.5} and not (tmp_path / "cells" / "cell_b.json").exists()  # read, not moved
    removed = forget_cells(tmp_path, ["cell_b"], log=lambda line: None)
    assert [path.parent.name for path in removed] == ["replaced"] and not list((tmp_path / "cells").rglob("*.json"))


def test_recompute_deletes_nothing_when_the_run_is_refused_and_forgets_only_once_the_folder_is_opened(tmp_path):
    """--recompute deleted the matching cells before the experiment checked its settings or its folder: a misspelt
    --set, or another experiment's folder, was refused with exit status 2 after the cells (and runs) were gone."""
    from markovformer.training.run_config import ConfigError

    def cells():
        return sorted(path.name for path in (tmp_path / "cells").glob("*.json"))

    settings = {"chains": [[0.2, 0.3]], "optimizers": ["sgd"], "steps": 20, "eval_every": 10}
    run_experiment("weight-tying", tmp_path, quick=True, overrides=settings, log=lambda line: None)
    stored = cells()
    assert len(stored) == 2
    with pytest.raises(ValueError, match="holds the experiment 'weight-tying'"):
        run_experiment("icl-depth", tmp_path, quick=True, recompute=["*"], log=lambda line: None)
    assert cells() == stored
    with pytest.raises(ConfigError, match="d_modle"):
        run_experiment("weight-tying", tmp_path, quick=True, overrides={**settings, "d_modle": 8}, recompute=["*"],
                       log=lambda line: None)  # fmt: skip
    assert cells() == stored
    lines = []
    run_experiment("weight-tying", tmp_path, quick=True, overrides=settings, recompute=["*untied*"], log=lines.append)
    assert cells() == stored
    assert [line.strip() for line in lines if "removed, to be recomputed" in line] == [
        "p=0.2_q=0.3_untied_sgd_seed=0.json: removed, to be recomputed"]
    assert [line.split(" ")[2] for line in lines if "done earlier" in line] == ["p=0.2_q=0.3_tied_sgd_seed=0:"]
