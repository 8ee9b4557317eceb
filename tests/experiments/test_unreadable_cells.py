"""Cells that cannot be read (cut short by a disk's fault; cells are written whole) are named, never a bare
'Expecting value: line 1 column 1 (char 0)'."""

from __future__ import annotations

import json
import re

import pytest

from markovformer.experiments.report import ExperimentReport, forget_cells, replaced_cell


def test_a_cell_file_that_cannot_be_read_is_said_and_computed_again(tmp_path):
    """A cells/KEY.json cut short (a disk's fault; cells are written whole) ended the experiment with 'error:
    Expecting value: line 1 column 1 (char 0)', naming no file, at every rerun."""
    settings, lines = {"steps": 10}, []
    ExperimentReport(tmp_path, "t", log=lambda line: None, settings=settings).cached("cell_a", lambda: {"loss": 0.5})
    path = tmp_path / "cells" / "cell_a.json"
    path.write_text(path.read_text()[:20])
    again = ExperimentReport(tmp_path, "t", log=lines.append, settings=settings).cached("cell_a", lambda: {"loss": 0.7})
    assert again == {"loss": 0.7} and json.loads(path.read_text())["result"] == again
    assert any(f"{path} cannot be read" in line and "computing it again" in line for line in lines), lines


def test_a_kept_or_recomputed_cell_that_cannot_be_read_is_named(tmp_path):
    """The other readers of cells/: a kept copy (replaced/) cut short ended a run under its settings, and --recompute
    of a cut-short cell ended the command, with 'Expecting value: line 1 column 1 (char 0)', naming no file."""
    lines = []
    ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 1}).cached("cell_a", lambda: 1)
    ExperimentReport(tmp_path, "t", log=lambda line: None, settings={"steps": 2}).cached("cell_a", lambda: 2)
    kept = replaced_cell(tmp_path / "cells" / "cell_a.json", {"steps": 1})
    kept.write_text(kept.read_text()[:10])
    again = ExperimentReport(tmp_path, "t", log=lines.append, settings={"steps": 1}).cached("cell_a", lambda: 3)
    assert again == 3 and any(f"{kept} cannot be read" in line for line in lines), lines
    (tmp_path / "runs").mkdir()
    cell = tmp_path / "cells" / "cell_a.json"
    cell.write_text("")
    with pytest.raises(ValueError, match=f"^{re.escape(str(cell))} cannot be read .*delete that run under"):
        forget_cells(tmp_path, ["cell_a"], log=lambda line: None)
    assert cell.exists()  # nothing deleted


def test_a_cell_nested_too_deeply_is_said_and_computed_again(tmp_path):
    """A cells/KEY.json nested 100,000 deep (an experiment folder crafted so) ended the experiment in a
    RecursionError traceback; it is a cell that cannot be read, said and computed again, as one cut short is."""
    settings, lines = {"steps": 10}, []
    ExperimentReport(tmp_path, "t", log=lambda line: None, settings=settings).cached("cell_a", lambda: {"loss": 0.5})
    path = tmp_path / "cells" / "cell_a.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    again = ExperimentReport(tmp_path, "t", log=lines.append, settings=settings).cached("cell_a", lambda: {"loss": 0.7})
    assert again == {"loss": 0.7} and json.loads(path.read_text())["result"] == again
    assert any(f"{path} cannot be read" in line and "nested too deeply" in line for line in lines), lines
