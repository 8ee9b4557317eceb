"""Training curves and the position-biases figure tell the truth about awkward inputs: a row cut short by a kill is
not plotted, a nan or inf loss leaves a gap and a red mark rather than a line joined across it, and extrapolation
multiples out of order are refused before anything is trained or drawn. Saving releases a figure also when it fails,
a report folder a killed write left its temporary file in is still replaced whole, and a failed replacement leaves
the previous report as it was."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import threading
from pathlib import Path

import pytest
from matplotlib.colors import to_rgb

from markovformer.experiments import position_biases as experiment
from markovformer.plots import curves, saving
from markovformer.plots.position_biases import plot_extrapolation
from markovformer.plots.saving import new_figure, replace_folder, save_figure


@pytest.fixture
def drawn(kept_figures) -> dict:
    """The figures ``plot_training_curves`` saves, kept with their artists (saving clears a figure)."""
    return kept_figures(curves)


def _lines(axis) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): ([float(x) for x in line.get_xdata()], [float(y) for y in line.get_ydata()])
            for line in axis.get_lines()}  # fmt: skip


def test_a_last_row_cut_short_by_a_kill_is_not_plotted(tmp_path, drawn):
    path = tmp_path / "metrics.csv"
    # the kill tore "0.0,400,2.2187,\n" after its first digit: 2 would read as a real loss
    path.write_text("epoch,step,train/loss,val/loss\n0.0,100,2.50,\n0.0,200,2.40,\n0.0,300,2.30,2.35\n0.0,400,2")
    assert curves.read_metric_series(path)["train/loss"] == ([100, 200, 300], [2.5, 2.4, 2.3])
    curves.plot_training_curves(path, tmp_path / "curves.png")
    assert _lines(drawn["curves.png"].axes[0])["train/loss"] == ([100, 200, 300], [2.5, 2.4, 2.3])


def test_a_nan_or_inf_loss_leaves_a_gap_and_is_marked(tmp_path, drawn):
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train/loss\n0.0,100,2.5\n0.0,200,2.4\n0.0,300,nan\n0.0,400,inf\n0.0,500,nan\n"
                    "0.0,600,2.3\n")  # fmt: skip
    curves.plot_training_curves(path, tmp_path / "curves.png")
    axis = drawn["curves.png"].axes[0]
    steps, values = _lines(axis)["train/loss"]
    assert steps == [100, 200, 300, 400, 500, 600]  # no segment from 200 to 600: nan breaks the line
    assert values[:2] == [2.5, 2.4] and values[-1] == 2.3 and all(math.isnan(v) for v in values[2:5])
    marks = [line for line in axis.get_lines() if "nan/inf" in line.get_label()]
    assert len(marks) == 1 and list(marks[0].get_xdata()) == [300, 400, 500]
    assert marks[0].get_marker() == "x" and to_rgb(marks[0].get_color()) == to_rgb("tab:red")
    assert list(marks[0].get_ydata()) == [1.0] * 3  # the top edge, in axes coordinates: never read as a loss
    assert marks[0].get_label() in [text.get_text() for text in axis.get_legend().get_texts()]


@pytest.mark.parametrize("extrapolate", [(8, 2), (2, 2, 4)])
def test_extrapolation_multiples_out_of_order_or_repeated_are_refused(extrapolate):
    settings = dataclasses.replace(experiment.QUICK, kinds=("markov_local",), extrapolate=extrapolate)
    with pytest.raises(ValueError, match=rf"extrapolate: {re.escape(repr(extrapolate))}"):
        experiment.check_settings(settings)
    with pytest.raises(ValueError, match="strictly increasing"):
        plot_extrapolation({"lag-3": {"softmax": [0.1] * (len(extrapolate) + 1)}}, [1, *extrapolate], Path("x.png"))


# --------------------------------------------------------------------------- saving


def test_a_figure_is_released_after_saving_also_when_saving_fails(tmp_path):
    """``save_figure`` clears the figure whatever happens: a figure kept after a failed save would hold its artists
    (and their memory) for as long as the caller holds it. A file where the folder should be makes saving fail."""
    saved = new_figure(2, 2)
    saved.subplots().plot([1, 2], [3, 4])
    assert save_figure(saved, tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG" and saved.axes == []
    failing = new_figure(2, 2)
    failing.subplots()
    (tmp_path / "taken").write_text("a file where a folder should be")
    with pytest.raises(OSError):
        save_figure(failing, tmp_path / "taken" / "b.png")
    assert failing.axes == []


def test_a_report_folder_holding_a_killed_writes_temporary_file_is_still_replaced(tmp_path):
    """A SIGKILL during an atomic write leaves ``.NAME.*.tmp`` beside the figures: it is the report's own leftover,
    not a user's file, so the folder is replaced whole and the leftover goes with it."""
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("old")
    (out / ".curves.png.1234.tmp").write_bytes(b"half")
    replace_folder(out, lambda staging: (staging / "index.html").write_text("new"))
    assert [path.name for path in out.iterdir()] == ["index.html"] and (out / "index.html").read_text() == "new"


def test_two_writers_of_one_report_folder_take_turns(tmp_path):
    """Two `inspect` of one run at once: each began by deleting every ``.report.staging-*`` beside the folder, the
    other's half-built one too, and 2 of 3 concurrent inspects failed with 'runs/t1/report: No such file or
    directory'. A second writer now waits for the first (writer A's ``write`` lets B run for up to a second)."""
    out = tmp_path / "report"
    errors = []

    def replace(name: str, wait_for: threading.Thread | None = None) -> None:
        def write(staging: Path) -> None:
            (staging / "index.html").write_text(name)
            if wait_for is not None:
                wait_for.start()
                wait_for.join(timeout=1.0)  # without turns, B deletes A's staging folder and finishes meanwhile

        try:
            replace_folder(out, write)
        except OSError as error:
            errors.append(f"{name}: {error}")

    second = threading.Thread(target=replace, args=("B",))
    first = threading.Thread(target=replace, args=("A", second))
    first.start()
    first.join()
    second.join()
    assert errors == []
    assert (out / "index.html").read_text() == "B"  # A's report, then B's over it
    assert [path.name for path in tmp_path.iterdir()] == ["report"]


def test_a_report_that_cannot_be_renamed_into_place_leaves_the_previous_report_whole(tmp_path, monkeypatch):
    """The old folder is moved aside before the new one is renamed in: when that rename fails, the old report is
    put back as it was, and neither the new one's staging folder nor the moved-aside copy is left beside it."""
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("old")
    rename = os.rename

    def failing_for_the_new_report(source, target):
        if Path(source).name.startswith(".report.staging-"):
            raise OSError(5, "Input/output error", str(target))
        rename(source, target)

    monkeypatch.setattr(saving.os, "rename", failing_for_the_new_report)
    with pytest.raises(OSError, match="Input/output error"):
        replace_folder(out, lambda staging: (staging / "index.html").write_text("new"))
    assert [path.name for path in out.iterdir()] == ["index.html"] and (out / "index.html").read_text() == "old"
    assert [path.name for path in tmp_path.iterdir()] == ["report"]
