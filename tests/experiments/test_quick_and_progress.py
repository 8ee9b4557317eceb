"""Quick modes that stop when the curve is flat, progress that says which cell of how many and the time left, and
report tables that stay tables (a ``|`` inside a cell is escaped)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file: pytest puts the folder on the path

from markovformer.experiments import weight_tying
from markovformer.experiments.fitting import Plateau, fit_on_stream, plateau_from
from markovformer.experiments.report import ExperimentReport, markdown_table
from markovformer.training.durations import format_duration


def test_a_pipe_in_a_header_or_cell_stays_inside_its_cell():
    text = markdown_table(["p", "P(1|0)", "P(1|1)"], [[0.2, 0.5, "a|b"], [0.7, 0.25, "c"]])
    tables = markdown_tables(text)
    assert tables == [[["p", r"P(1\|0)", r"P(1\|1)"], ["0.2", "0.50", r"a\|b"], ["0.7", "0.25", "c"]]]
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [[1, 2]])


def test_the_markdown_reader_rejects_a_broken_table():
    with pytest.raises(AssertionError, match="rows of"):
        markdown_tables("| a | P(1|0) |\n|---|---|\n| 1 | 2 |\n")


def test_plateau_fires_only_when_the_last_evaluations_stopped_improving():
    plateau = Plateau(patience=3, min_delta=0.01)
    assert not plateau.reached([1.0, 0.9, 0.8])  # not enough evaluations yet
    assert not plateau.reached([1.0, 0.9, 0.8, 0.7, 0.6])
    assert plateau.reached([1.0, 0.5, 0.499, 0.498, 0.4995])  # best 0.498 vs 0.5 before: 0.002 < 0.01
    assert not plateau.reached([1.0, 0.5, 0.5, 0.5, 0.48])  # a late drop of 0.02 still counts
    with pytest.raises(ValueError, match="patience"):
        Plateau(patience=0)
    assert plateau_from(1, 0.01) == Plateau(1, 0.01) and plateau_from(0, 0.01) is None  # 0 alone turns it off


def test_fit_stops_at_a_plateau_and_runs_to_the_end_without_one():
    model = torch.nn.Linear(1, 1)
    calls = []

    def loss_on_batch(x: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return (model(x) ** 2).mean() * 0.0  # no gradient signal: the held-out value never moves

    flat = fit_on_stream(model, loss_on_batch, lambda g: torch.ones(2, 1), lambda: 1.0, steps=100, lr=0.1, seed=0,
                         eval_every=10, plateau=Plateau(patience=2))  # fmt: skip
    assert flat.stopped_early and flat.steps == [0, 10, 20] and len(calls) == 20
    # a plateau first reached at the last evaluation stops nothing: the fit ran all its steps
    full = fit_on_stream(model, loss_on_batch, lambda g: torch.ones(2, 1), lambda: 1.0, steps=30, lr=0.1, seed=0,
                         eval_every=10, plateau=Plateau(patience=3))  # fmt: skip
    assert not full.stopped_early and full.steps == [0, 10, 20, 30]


def test_a_fit_evaluates_its_final_model_when_the_steps_are_not_a_multiple_of_eval_every():
    """Plain SGD on the loss w (gradient 1) at lr 1: w = -n after n steps. Experiments report ``evaluations[-1]``
    as the final loss, so the last step is evaluated too."""
    weight = torch.nn.Parameter(torch.zeros(()))
    model = torch.nn.Module()
    model.weight = weight
    result = fit_on_stream(model, lambda batch: weight * 1.0, lambda g: torch.ones(1), lambda: float(weight), steps=25,
                           lr=1.0, seed=0, eval_every=10, optimizer="sgd")  # fmt: skip
    assert result.steps == [0, 10, 20, 25]
    assert result.evaluations == [0.0, -10.0, -20.0, -25.0]


@pytest.mark.parametrize("decay", ["constant", "cosine", "linear"])
def test_fit_steps_at_the_rates_of_its_schedule(decay):
    """Plain SGD on the loss w (gradient 1) moves w by minus the sum of the step sizes: with a decay, the sum of
    ``lr_multiplier``'s warm-up and decay to a tenth; constant, the warm-up then the full rate."""
    from markovformer.training.optim import lr_multiplier

    weight = torch.nn.Parameter(torch.zeros(()))
    model = torch.nn.Module()
    model.weight = weight
    fit_on_stream(model, lambda batch: weight * 1.0, lambda g: torch.ones(1), lambda: 0.0, steps=40, lr=0.5, seed=0,
                  eval_every=40, optimizer="sgd", warmup_steps=5, decay=decay)  # fmt: skip
    if decay == "constant":
        multipliers = [min(1.0, (step + 1) / 5) for step in range(40)]
    else:
        multipliers = [lr_multiplier(step, 5, 40, decay) for step in range(40)]
        assert multipliers[-1] < 0.15  # it does decay: the last step runs near a tenth of the rate
    assert float(weight) == pytest.approx(-0.5 * sum(multipliers), rel=1e-5)
    with pytest.raises(ValueError, match="decay='step'"):
        fit_on_stream(model, lambda batch: weight * 1.0, lambda g: torch.ones(1), lambda: 0.0, steps=1, lr=0.5,
                      seed=0, eval_every=1, decay="step")  # fmt: skip


def test_progress_names_the_cell_of_how_many_and_the_time_left(tmp_path, monkeypatch):
    lines = []
    report = ExperimentReport(tmp_path, "t", lines.append, settings={})
    clock = iter([0.0, 10.0, 10.0, 30.0, 30.0, 45.0])
    monkeypatch.setattr("markovformer.experiments.report.time.perf_counter", lambda: next(clock))
    report.expect_cells(3)
    for key in ("a", "b", "c"):
        report.cached(key, lambda: 1)
    assert lines == ["cell 1/3 a", "cell 2/3 b  (about 20 s left)", "cell 3/3 c  (about 15 s left)"]
    lines.clear()
    report.expect_cells(3)
    report.cached("a", lambda: 1)
    assert lines[0].startswith("cell 1/3 a") and "done earlier" in lines[0]
    assert [format_duration(s) for s in (42, 210, 7200)] == ["42 s", "3.5 min", "2.0 h"]
    # a short run's seconds keep the digits that tell them apart (the report read "8 steps in 0 s ... its 0 s")
    assert [format_duration(s) for s in (0.3066, 4.21, math.nan)] == ["0.31 s", "4.2 s", "nan s"]


def test_a_fits_progress_says_the_time_left_at_its_pace_so_far(tmp_path, monkeypatch):
    """Each batch advances a fake clock (evaluations take none): at 2 s a step, after step 10 of 30, 40 s are left.
    A fit killed after its save at step 10 (5 s a step) and resumed (2 s a step) counts the time of both attempts
    but estimates from its own pace: at step 20, 50 + 20 s elapsed and 20 s left (not 35 s at the mean pace)."""
    from markovformer.experiments.fitting import FitCheckpoint

    clock = {"now": 0.0, "step_seconds": 2.0, "kill_at": None, "batches": 0}
    monkeypatch.setattr("markovformer.experiments.fitting.time.perf_counter", lambda: clock["now"])

    def batch(generator):
        clock["batches"] += 1
        if clock["batches"] == clock["kill_at"]:
            raise KeyboardInterrupt
        clock["now"] += clock["step_seconds"]
        return torch.ones(1)

    def fit(checkpoint=None) -> list[str]:
        lines: list[str] = []
        model = torch.nn.Linear(1, 1)
        fit_on_stream(model, lambda x: model(x).sum(), batch, lambda: 0.0, steps=30, lr=0.1, seed=0, eval_every=10,
                      log=lines.append, label="m", checkpoint=checkpoint)  # fmt: skip
        return [line.split("(", 1)[1] for line in lines if "held-out" in line]

    assert fit() == ["0s)", "20s, about 40 s left)", "40s, about 20 s left)", "60s)"]
    checkpoint = FitCheckpoint(tmp_path / "fit.partial.pt", identity={}, every_seconds=1e9)  # saves at evaluations
    clock.update(now=0.0, step_seconds=5.0, kill_at=15, batches=0)
    with pytest.raises(KeyboardInterrupt):
        fit(checkpoint)
    clock.update(now=1000.0, step_seconds=2.0, kill_at=None)
    assert fit(checkpoint) == ["70s, about 20 s left)", "90s)"]


def test_weight_tying_run_logs_progress_and_writes_well_formed_tables(tmp_path):
    lines = []
    overrides = {"chains": [[0.7, 0.9]], "steps": 60, "eval_every": 20}
    report = weight_tying.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lines.append)
    progress = [line for line in lines if line.startswith("cell ")]
    assert [line.split()[1] for line in progress] == ["1/2", "2/2"]
    assert re.search(r"about \d+(\.\d+)? s left", progress[1])
    tables = markdown_tables(report.read_text())
    assert len(tables) == 2 and tables[0][0][12] == r"P(1\|0)" and len(tables[0]) == 3


TINY_RUNS = {
    "landscape": {"chains": [[0.7, 0.9]], "starts": 2, "steps": 200},
    "icl-depth": {"orders": [1], "depths": [1], "steps": 4, "eval_every": 2, "seq_len": 16, "eval_batch": 8,
                  "d_model": 16, "batch_size": 4, "warmup_steps": 1},
    "order-recovery": {"sources": ["fixed-2"], "steps": 4, "eval_every": 2, "seq_len": 16, "eval_batch": 8,
                       "d_model": 16, "batch_size": 4, "max_order": 3, "warmup_steps": 1},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(TINY_RUNS))
def test_testbed_reports_are_well_formed_tables_with_progress(name, tmp_path):
    from markovformer.experiments import run_experiment

    lines = []
    report = run_experiment(name, tmp_path, quick=True, seeds=(0,), overrides=TINY_RUNS[name], log=lines.append)
    tables = markdown_tables(report.read_text())
    assert tables and all(len(table) > 1 for table in tables)
    progress = [line.split()[1] for line in lines if line.startswith("cell ")]
    assert progress and progress[-1] == f"{len(progress)}/{len(progress)}"


@pytest.mark.parametrize(("name", "revised", "kept"), [("order-recovery", "markov", "softmax"),
                                                      ("icl-depth", "softmax", None)])  # fmt: skip
def test_a_raised_revision_recomputes_the_cells_that_train_the_kind_and_only_those(
    name, revised, kept, tmp_path, monkeypatch, kept_figures
):
    """As docs/experiments.md says of every experiment that trains attention kinds: a fix that raises a kind's revision
    recomputes that kind's cells (order-recovery and icl-depth reused them under any revision)."""
    import dataclasses

    from markovformer.experiments import run_experiment
    from markovformer.layers import registry
    from markovformer.plots import experiments as plots

    kept_figures(plots)  # the three reports' figures are the testbed tests': not rendered here

    def rerun() -> list[str]:
        lines = []
        overrides = {**TINY_RUNS[name], **({"sources": ["fixed-2", "icl-1"]} if name == "order-recovery" else {})}
        run_experiment(name, tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lines.append)
        return [line for line in lines if "stored under other settings" in line or "done earlier" in line]

    rerun()
    assert all("done earlier" in line for line in rerun())
    kind = registry.ATTENTION_KINDS[revised]
    monkeypatch.setitem(registry.ATTENTION_KINDS, revised, dataclasses.replace(kind, revision=kind.revision + 1))
    lines = rerun()
    assert lines and all(("stored under other settings" in line) == (kept is None or kept not in line)
                         for line in lines), lines  # fmt: skip


def test_the_experiment_command_prints_the_reports_headline_table_before_its_path(main_cli, tmp_path):
    overrides = [f"{key}={value}" for key, value in TINY_RUNS["landscape"].items()]
    done = main_cli("experiment", "landscape", "--quick", "--seeds", "0", "--out", str(tmp_path / "out"),
                    *[arg for override in overrides for arg in ("--set", override)])  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    report = (tmp_path / "out" / "report.md").read_text()
    first = report.split("\n|", 1)[1].split("\n\n", 1)[0]  # the first table, from its header's second character
    shown, last = done.stdout.rstrip().rsplit("\n", 1)
    assert shown.rstrip().endswith(first) and last.startswith("report: ")


@pytest.mark.slow
def test_weight_tying_quick_still_shows_the_effect(tmp_path):
    """Quick mode stops flat cells early and still separates tied p+q > 1 (unigram H(π)) from the rest."""
    weight_tying.run(tmp_path, quick=True, seeds=None, overrides={}, log=lambda line: None)
    cells = __import__("json").loads((tmp_path / "results.json").read_text())["cells"]
    for cell in cells:
        expected = "unigram H(π)" if cell["tied"] and cell["p"] + cell["q"] > 1 else "entropy rate"
        assert weight_tying.verdict(cell) == expected, cell["p"]
        assert cell["stopped_early"] and cell["steps"][-1] < weight_tying.QUICK.steps


@pytest.mark.slow
def test_order_recovery_quick_recovers_both_orders(tmp_path):
    from markovformer.experiments import order_recovery

    order_recovery.run(tmp_path, quick=True, seeds=None, overrides={}, log=lambda line: None)
    cells = __import__("json").loads((tmp_path / "results.json").read_text())["cells"]
    markov = [cell for cell in cells if cell["kind"] == "markov"]
    assert [(c["true_order"], c["recovered_order"]) for c in markov] == [(1, 1), (3, 3)]
    assert (tmp_path / "effective_bias.png").is_file()


@pytest.mark.slow
def test_icl_depth_quick_shows_two_layers_beating_one(tmp_path):
    from markovformer.experiments import icl_depth

    icl_depth.run(tmp_path, quick=True, seeds=None, overrides={}, log=lambda line: None)
    cells = {c["n_layers"]: c for c in __import__("json").loads((tmp_path / "results.json").read_text())["cells"]}
    assert cells[2]["final_loss"] < cells[1]["final_loss"] - 0.02


def test_a_loss_that_turns_non_finite_stops_the_fit_with_no_result():
    """A diverged model would otherwise be scored as one that learned nothing (the stick-breaking MQAR cell read
    accuracy 0.000 with a NaN test loss): the fit raises at the step, naming it and the rate."""
    weight = torch.nn.Parameter(torch.zeros(()))
    model = torch.nn.Module()
    model.weight = weight
    losses = iter([weight * 1.0, weight * 1.0, weight * float("nan")])
    from markovformer.training.trainer_config import TrainingDiverged  # the command's one-line error, not a traceback

    with pytest.raises(TrainingDiverged, match=r"cell A: the training loss is nan at step 3 \(lr 0.5\)"):
        fit_on_stream(model, lambda batch: next(losses), lambda g: torch.ones(1), lambda: 0.0, steps=10, lr=0.5,
                      seed=0, eval_every=5, label="cell A")  # fmt: skip
    assert float(weight) != 0.0 and torch.isfinite(weight)  # two steps taken, the third's NaN never applied


def test_a_cells_interrupted_training_run_says_the_experiment_resumes_it_too(tmp_path, monkeypatch, capsys):
    """A Ctrl-C inside a cell's training run printed only the run's own advice (train --resume RUN), which finishes
    that run but not the experiment; the line now also says that rerunning the experiment continues both."""
    import signal

    import markovformer.experiments as experiments
    from markovformer.cli.main import main
    from markovformer.training.trainer_config import RunTerminated

    def interrupted(*args, **kwargs):
        raise RunTerminated("the run was interrupted (SIGINT, Ctrl-C) at step 7 of 20: its last checkpoint is "
                            "step-000005.ckpt; continue with markovformer train --resume cell", signal.SIGINT)

    monkeypatch.setattr(experiments, "run_experiment", interrupted)
    assert main(["experiment", "weight-tying", "--quick", "--out", str(tmp_path / "out")]) == 128 + signal.SIGINT
    line = capsys.readouterr().err.strip()
    assert "train --resume cell" in line and "rerun this experiment" in line and len(line.splitlines()) == 1
