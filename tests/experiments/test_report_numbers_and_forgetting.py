"""What a report's numbers and lines say (the mean over seeds, a figure's floor, a table cell holding a pipe, the
code that computed the cells), and what ``--recompute`` deletes: each pinned where a wrong version passed the rest."""

from __future__ import annotations

import math

import pytest
from markdown_tables import markdown_tables  # beside this file: pytest puts the folder on the path

from markovformer.experiments.report import (
    ExperimentReport,
    code_provenance,
    forget_cells,
    markdown_table,
    seed_reference,
    seed_summary,
)


def test_the_summary_over_three_seeds_is_their_mean_not_their_median():
    """With two seeds the mean and the median agree; with 1, 2 and 6 the mean is 3 (the median would say 2) and the
    sample spread sqrt((4 + 1 + 9) / 2) = sqrt(7)."""
    summary = seed_summary([1.0, 2.0, 6.0])
    assert summary["mean"] == pytest.approx(3.0, rel=1e-12)
    assert summary["std"] == pytest.approx(math.sqrt(7.0), rel=1e-12)


def test_a_figures_floor_is_the_mean_over_seeds_each_seed_counted_once():
    """Two kinds trained on seed 0 (floor 0.5) and one on seed 1 (floor 0.4): the line is at 0.45, the mean of the
    two seeds' floors (not seed 0's alone, nor 0.4667 with seed 0 counted twice); seeds that agree keep the label."""
    cells = [{"seed": 0, "floor": 0.5}, {"seed": 0, "floor": 0.5}, {"seed": 1, "floor": 0.4}]
    assert seed_reference(cells, "floor", "entropy rate") == {"entropy rate, mean of 2 seeds": pytest.approx(0.45)}
    assert seed_reference(cells[:2], "floor", "entropy rate") == {"entropy rate": 0.5}


def test_a_pipe_in_a_cell_or_a_header_stays_in_its_cell():
    text = markdown_table(["P(1|0)", "kind"], [["a|b", "softmax"]])
    (table,) = markdown_tables(text)  # the reader splits at unescaped pipes only: two cells per row
    assert table == [["P(1\\|0)", "kind"], ["a\\|b", "softmax"]]


def test_the_closing_line_says_when_the_code_had_uncommitted_changes():
    dirty = {"markovformer": "0.1.0", "git_commit": "c" * 40 + "+dirty"}
    assert code_provenance({"x": dirty}) == "*1 cell, computed by markovformer 0.1.0, commit cccccccccc+dirty.*"


def test_recompute_forgets_a_cell_that_trained_no_run(tmp_path):
    """A cell that names its run as None (vmt's exact-likelihood cells train none) is forgotten like any other, even
    in a folder whose runs/ holds the other cells' runs; it was not refused as a cell stored before cells named them."""
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    (tmp_path / "runs" / "a_run").mkdir(parents=True)
    report.cached("a_seed=0", lambda: {"run_dir": str(tmp_path / "runs" / "a_run")})
    report.cached("exact_seed=0", lambda: {"run_dir": None, "loss": 1.0})
    assert [path.name for path in forget_cells(tmp_path, ["exact*"], log=lambda line: None)] == ["exact_seed=0.json"]
    assert (tmp_path / "runs" / "a_run").is_dir()


def test_recompute_deletes_no_run_outside_the_experiments_runs_folder(tmp_path):
    """A cell may name a run elsewhere (a folder moved, a run trained into another --out): forgetting the cell
    leaves that folder alone; only runs under OUT/runs are the experiment's to delete."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere" / "a_run"
    elsewhere.mkdir(parents=True)
    (out / "runs" / "b_run").mkdir(parents=True)
    report = ExperimentReport(out, "t", log=lambda line: None)
    report.cached("a_seed=0", lambda: {"run_dir": str(elsewhere)})
    report.cached("b_seed=0", lambda: {"run_dir": str(out / "runs" / "b_run")})
    forget_cells(out, ["*_seed=0"], log=lambda line: None)
    assert elsewhere.is_dir() and not (out / "runs" / "b_run").exists()
    assert list((out / "cells").glob("*.json")) == []


def test_recompute_deletes_every_run_a_list_of_results_names_and_skips_one_already_gone(tmp_path):
    """A cell whose result is a list (one entry per seed or per rate), runs nested in it: each named run under
    OUT/runs goes with the cell; a run deleted by hand before is no error; another cell's run stays."""
    runs = tmp_path / "runs"
    for name in ("seed0", "seed1", "kept"):
        (runs / name).mkdir(parents=True)
    report = ExperimentReport(tmp_path, "t", log=lambda line: None)
    listed = [{"run_dir": str(runs / "seed0")}, {"fits": [{"run_dir": str(runs / "seed1")}, {"run_dir": None}]},
              {"run_dir": str(runs / "gone")}, 0.5]  # fmt: skip
    report.cached("grid_seed=0", lambda: listed)
    report.cached("other_seed=0", lambda: {"run_dir": str(runs / "kept")})
    removed = forget_cells(tmp_path, ["grid*"], log=lambda line: None)
    assert sorted(path.name for path in runs.iterdir()) == ["kept"]
    assert [path.name for path in removed] == ["grid_seed=0.json", "seed0", "seed1"]  # what it deleted: not 'gone'


def test_the_closing_line_says_when_a_cell_was_computed_outside_a_git_checkout():
    installed = {"markovformer": "0.1.0", "git_commit": None}
    assert code_provenance({"x": installed}) == "*1 cell, computed by markovformer 0.1.0, no git commit.*"
