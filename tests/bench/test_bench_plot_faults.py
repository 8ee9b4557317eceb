"""The bench figures stay honest at the edges: a measured value <= 0 is drawn (a met "<=" target, a CPU peak of
0 MiB on a log axis), not shown as unmeasured or dropped, and a rerun with fewer parts leaves no stale figure."""

from __future__ import annotations

import io
import math

import pytest

matplotlib = pytest.importorskip("matplotlib")

from markovformer.bench.plots import (  # noqa: E402
    TARGET_COLOURS,
    _against_length,
    targets_figure,
    write_plots,
)
from markovformer.bench.report import _target, summarise  # noqa: E402
from markovformer.plots.saving import new_figure  # noqa: E402


def test_a_measured_target_at_or_below_zero_is_drawn_met_or_not_with_its_value():
    targets = {
        "growth_exponent": _target(-0.05, 1.2, True, ""),  # peak memory did not grow: met
        "speedup": _target(0.0, 2.0, False, ""),  # missed
        "ratio": _target(8.1, 9.0, True, ""),
        "unmeasured": _target(None, 1.0, True, "ops on CUDA"),
    }
    axis = targets_figure(targets).axes[0]
    bars = {round(bar.get_y() + bar.get_height() / 2): bar for bar in axis.patches}
    assert sorted(bars) == [0, 1, 2]
    for row, target in enumerate(list(targets.values())[:3]):
        assert (bars[row].get_width() >= 1) == target["met"]
        assert 0 < bars[row].get_width() < math.inf  # drawable on the log axis
        assert bars[row].get_facecolor()[:3] == matplotlib.colors.to_rgb(TARGET_COLOURS[target["met"]])
    labels = {round(text.get_position()[1]): text.get_text() for text in axis.texts}
    assert labels[0].strip().startswith("-0.05 (<= 1.2") and labels[1].strip().startswith("0 (>= 2")
    assert "not measured" in labels[3] and not any("not measured" in labels[row] for row in range(3))
    assert "2 of 3 measured are met (1 not measured)" in axis.get_title()


def test_a_peak_of_zero_or_below_on_the_log_memory_axis_is_marked_not_dropped():
    table = {"markov_local": {1024: 0.0, 2048: 3.0, 4096: 6.0}, "softmax": {1024: 2.0, 2048: -1.5, 4096: 8.0}}
    axis = new_figure(4, 3).subplots()
    _against_length(axis, table, "peak memory (MiB)")
    lines = {line.get_label(): line for line in axis.get_lines()}
    local_values = list(lines["markov_local"].get_ydata())
    assert math.isnan(local_values[0]) and local_values[1:] == [3.0, 6.0]  # the line breaks at the point
    for kind, at in (("markov_local", [1024]), ("softmax", [2048])):
        marks = [line for label, line in lines.items() if label.startswith(f"_{kind}") and "≤ 0" in label]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == at, kind
        assert marks[0].get_color() == lines[kind].get_color() and marks[0].get_marker() == lines[kind].get_marker()
        assert list(marks[0].get_ydata()) == [0.0] and not marks[0].get_clip_on()  # on the bottom edge, in view
    assert "≤ 0" in axis.get_title()  # the note says what the edge markers are
    nothing_positive = new_figure(4, 3).subplots()
    _against_length(nothing_positive, {"markov_local": {1024: 0.0, 2048: -1.0}}, "peak memory (MiB)")
    nothing_positive.figure.savefig(io.BytesIO(), format="png")  # a log axis with no positive value still draws


def test_a_rerun_with_fewer_parts_removes_the_figures_of_the_parts_it_did_not_run(tmp_path):
    def record(parts: dict) -> dict:
        return {"machine": {"device": "cpu"}, "settings": {"longest_max": 8192}, "parts": parts,
                "summary": summarise(parts)}  # fmt: skip

    ops = {"rows": [{"kind": "markov_local", "T": t, "seconds": 0.01 * t / 1024, "peak_mib": t / 100}
                    for t in (1024, 2048)]}  # fmt: skip
    longest = {"longest": {"softmax": {"T": 4096, "stopped_by": "T=8192 over the time cap"}}}
    (tmp_path / "notes.png").write_bytes(b"the user's own")
    assert {path.name for path in write_plots(record({"ops": ops}), tmp_path)} == {"ops.png", "targets.png"}
    assert {path.name for path in write_plots(record({"longest": longest}), tmp_path)} == {"longest.png", "targets.png"}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["longest.png", "notes.png", "targets.png"]
    without_targets = record({"longest": longest})
    del without_targets["summary"]["targets"]
    write_plots(without_targets, tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["longest.png", "notes.png"]
