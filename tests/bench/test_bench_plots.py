"""The bench figures show every series and never present a search cap as a measured maximum (issue 22, item 9);
they plot the record's numbers on the axes their docstrings promise, also from a record read back from bench.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")

from markovformer.bench import plots as bench_plots  # noqa: E402
from markovformer.bench.measure import CAP_REACHED  # noqa: E402
from markovformer.bench.plots import (  # noqa: E402
    CAPPED_HATCH,
    TARGET_COLOURS,
    _against_length,
    longest_figure,
    targets_figure,
)
from markovformer.bench.report import _target, summarise  # noqa: E402
from markovformer.plots.saving import new_figure  # noqa: E402


def test_series_with_identical_values_are_all_drawn_distinguishably():
    same = {1024: 10.0, 2048: 20.0, 4096: 40.0}
    table = {"markov_local": dict(same), "hybrid": dict(same), "softmax": dict(same)}
    axis = new_figure(4, 3).subplots()
    _against_length(axis, table, "peak memory (MiB)")
    lines = axis.get_lines()
    assert [line.get_label() for line in lines] == list(table)
    styles = {(line.get_marker(), str(line.get_linestyle())) for line in lines}
    assert len(styles) == len(lines), "two series share marker and line style, so one can hide the other"
    # drawn first = larger and hollow, so the later (smaller, on top) ones sit inside it rather than cover it
    sizes = [line.get_markersize() for line in lines]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)
    assert all(line.get_markerfacecolor() == "none" for line in lines)
    assert [line.get_zorder() for line in lines] == sorted(line.get_zorder() for line in lines)


def _longest_record(entries: dict, cap: int) -> dict:
    return {
        "summary": {"longest": {model: entry["T"] for model, entry in entries.items()}},
        "parts": {"longest": {"longest": entries}},
        "settings": {"longest_max": cap},
    }


def test_a_longest_bar_that_reached_the_search_cap_is_marked_as_a_lower_bound():
    entries = {
        "gru": {"T": 4096, "stopped_by": CAP_REACHED},
        "softmax": {"T": 2048, "stopped_by": "T=4096 over the time cap"},
        "hybrid": {"T": None, "stopped_by": "out of memory"},
    }
    axis = longest_figure(_longest_record(entries, cap=4096)).axes[0]
    bars = {label.get_text(): patch for label, patch in zip(axis.get_xticklabels(), axis.patches, strict=True)}
    assert bars["gru"].get_hatch() == CAPPED_HATCH
    assert bars["softmax"].get_hatch() is None  # measured: the next T went over the time cap
    texts = [text.get_text() for text in axis.texts]
    assert any(text.startswith("≥ 4096") and "cap" in text for text in texts)
    assert "2048" in texts and not any(text.startswith("≥ 2048") for text in texts)
    assert "n/a" in texts
    cap_lines = [line for line in axis.get_lines() if list(line.get_ydata()) == [4096, 4096]]
    assert len(cap_lines) == 1 and "cap" in cap_lines[0].get_label()
    assert "1 of 3 reached the search cap" in axis.get_title()


def test_no_bar_is_marked_capped_when_every_model_stopped_below_the_cap():
    entries = {"gru": {"T": 2048, "stopped_by": "T=4096 over the time cap"}}
    axis = longest_figure(_longest_record(entries, cap=8192)).axes[0]
    assert all(patch.get_hatch() is None for patch in axis.patches)
    assert not any("≥" in text.get_text() for text in axis.texts)
    assert "reached the search cap" not in axis.get_title()


def test_targets_figure_draws_every_target_right_of_one_exactly_when_met():
    targets = {
        "at_most_met": _target(1.2, 1.5, True, ""),
        "at_most_missed": _target(1.8, 1.5, True, ""),
        "at_least_met": _target(2.5, 2.0, False, ""),
        "at_least_missed": _target(0.7, 0.85, False, ""),
        "unmeasured": _target(None, 1.0, True, "ops on CUDA"),
    }
    axis = targets_figure(targets).axes[0]
    assert [label.get_text() for label in axis.get_yticklabels()] == list(targets)
    bars = {round(bar.get_y() + bar.get_height() / 2): bar for bar in axis.patches}
    for row, (name, target) in enumerate(targets.items()):
        if target["met"] is None:
            assert row not in bars
            assert any("n/a" in text.get_text() and round(text.get_position()[1]) == row for text in axis.texts)
            continue
        assert (bars[row].get_width() >= 1) == target["met"], name
        assert bars[row].get_facecolor()[:3] == matplotlib.colors.to_rgb(TARGET_COLOURS[target["met"]])
    assert "2 of 4 measured are met (1 not measured)" in axis.get_title()


def test_time_and_memory_against_length_are_log_log_with_powers_of_two_lengths():
    """Lengths double and times grow by powers: both axes are logarithmic, the length axis in base 2."""
    axis = new_figure(4, 3).subplots()
    _against_length(axis, {"markov_local": {1024: 0.5, 2048: 1.0}}, "time (s)")
    assert axis.get_xscale() == "log" and axis.get_yscale() == "log" and axis.xaxis.get_transform().base == 2


def test_models_figure_draws_tokens_per_second_on_top_and_peak_memory_below_from_the_json_record(monkeypatch):
    """Each bar is its row's number: tokens/s in the top row of panels, peak MiB in the bottom one, per length."""
    rows = [{"kind": "softmax", "T": 512, "tokens_per_second": 1500.0, "peak_mib": 80.0},
            {"kind": "gru", "T": 512, "tokens_per_second": 900.0, "peak_mib": 30.0},
            {"kind": "softmax", "T": 1024, "tokens_per_second": 700.0, "peak_mib": 160.0}]  # fmt: skip
    record = json.loads(json.dumps({"machine": {"device": "cpu"}, "summary": summarise({"models": {"rows": rows}})}))
    figures = {}
    monkeypatch.setattr(bench_plots, "save_figure", lambda figure, out: figures.setdefault(Path(out).name, figure)
                        and Path(out))  # fmt: skip
    bench_plots.write_plots(record, Path("unused"))
    drawn = 0
    for axis in figures["models.png"].axes:
        length, key = int(axis.get_title().removeprefix("T=")), ("tokens_per_second", "peak_mib")[
            axis.get_subplotspec().rowspan.start]
        heights = {label.get_text(): patch.get_height()
                   for label, patch in zip(axis.get_xticklabels(), axis.patches, strict=True)}  # fmt: skip
        expected = {row["kind"]: row[key] for row in rows if row["T"] == length}
        assert {name: h for name, h in heights.items() if name in expected} == expected, (key, length)
        drawn += len(expected)
    assert drawn == 2 * len(rows)
