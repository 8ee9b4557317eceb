"""Benchmark readings a case could get wrong without an error: the peak of a case that timed nothing, the step
after the allocator handed memory back, the growth a quick run predicts with; the median and run count of timed
steps (a fake clock), memory read from /proc in MiB, the skip rules' extrapolation, and a layer timed in turns with
its projections."""

from __future__ import annotations

import math
import statistics

import pytest

from markovformer.bench import cases, measure
from markovformer.bench.cases import _paired_times, measure_cases, run_case
from markovformer.bench.measure import SizeSeries, growth_exponent, predicted_over_caps, status_mib, time_steps


def _counted_step(calls: list[str]):
    def build(kind, length, device, backend="auto"):
        def step() -> None:
            calls.append("step")

        return step

    return build


def test_on_cpu_the_step_after_the_memory_reading_starts_is_untimed(monkeypatch):
    """Starting the memory reading hands the warm-up's freed memory back to the OS, so the next step faults it all
    in again (a review measured 130k page faults and 23 % more time): with two timed runs the median was half a cold
    step. That step is now run untimed: warm-up, the untimed step, then the timed runs."""
    calls: list[str] = []
    monkeypatch.setattr(cases, "_op_step", _counted_step(calls))
    starts = []
    original = cases.PeakMemory.start
    monkeypatch.setattr(cases.PeakMemory, "start", lambda self: (starts.append(len(calls)), original(self))[1])
    row = run_case({"part": "ops", "kind": "markov_local", "T": 8, "repeats": 2}, "cpu", time_cap=60.0)
    assert row["runs"] == 2 and len(calls) == 1 + 1 + 2
    assert starts[-1] == 1  # the reading starts after the warm-up; one step, then the two timed ones


def test_a_case_whose_warm_up_exceeds_the_time_cap_reports_the_warm_ups_peak_with_a_note():
    """Its peak was read over no step at all (0.004 MiB where the step needs 25), counted as measured by the
    tables, plots and memory targets. It is now the warm-up step's peak, said to include one-time costs."""
    row = run_case({"part": "ops", "kind": "softmax_sdpa", "T": 2048, "repeats": 3}, "cpu", time_cap=1e-9)
    assert row["runs"] == 0 and "warm-up alone exceeded the time cap" in row["peak_note"]
    assert row["peak_mib"] > 5  # its inputs and output alone: 3 x 2,048 x 256 float32 (OP_SHAPE's heads x width)


def test_a_quick_run_predicts_each_kind_with_its_own_growth(monkeypatch):
    """--quick runs a kind's sizes in one child, which predicted every kind as quadratic: a fixed window kind
    (linear) at 8x the length was skipped as over the memory cap where the full run measured it."""
    monkeypatch.setattr(cases, "run_case", lambda case, device, time_cap: {**case, "seconds": 0.01, "peak_mib": 10.0})
    job = {
        "device": "cpu",
        "time_cap": 60.0,
        "memory_cap_mib": 100.0,
        "keep_freed_memory": False,
        "cases": [{"part": "windows", "kind": "banded_w16", "T": t, "repeats": 1} for t in (1024, 8192)],
    }
    monkeypatch.setattr(cases, "_limit_address_space", lambda cap: None)
    quadratic = list(measure_cases(job))
    assert "predicted peak memory 640 MiB" in quadratic[1]["skipped"]
    linear = list(measure_cases({**job, "default_growth": 1.0}))
    assert "skipped" not in linear[1] and linear[1]["peak_mib"] == 10.0


def test_the_untimed_step_is_not_run_when_the_warm_up_used_the_time_cap(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(cases, "_op_step", _counted_step(calls))
    row = run_case({"part": "ops", "kind": "markov_local", "T": 8, "repeats": 2}, "cpu", time_cap=1e-12)
    assert row["runs"] == 0 and calls == ["step"]


def test_time_steps_reports_the_median_of_the_runs(fake_clock):
    """Runs of 5, 1, 2 and 1.5 s: the row's time is their median, 1.75 s (the mean, 2.375 s, lets one slow run
    move the row)."""
    durations = [5.0, 1.0, 2.0, 1.5]
    step = fake_clock.patch(measure).steps(durations)
    assert time_steps(step, repeats=4, time_cap=100.0, sync=lambda: None) == {"seconds": 1.75, "runs": 4}


def test_time_steps_runs_while_the_total_stays_within_the_cap(fake_clock):
    """Another run starts while the total is <= the cap: 2 + 3 s is exactly the 5 s cap, so a third run (4 s)
    follows, then 9 s is over it. A first run over the cap alone is still one run."""
    fake_clock.patch(measure)
    assert time_steps(fake_clock.steps([2.0, 3.0, 4.0, 100.0]), 10, 5.0, sync=lambda: None)["runs"] == 3
    assert time_steps(fake_clock.steps([7.0]), 10, 5.0, sync=lambda: None) == {"seconds": 7.0, "runs": 1}


def test_status_mib_reads_kilobytes_as_mebibytes(tmp_path):
    """/proc/self/status gives kB (KiB): 3072 kB is 3 MiB, 10240 kB 10 MiB; an absent field or file is None."""
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nVmRSS:\t  3072 kB\nVmHWM:\t 10240 kB\n")
    assert status_mib("VmRSS", status) == 3.0 and status_mib("VmHWM", status) == 10.0
    assert status_mib("VmSwap", status) is None and status_mib("VmRSS", tmp_path / "absent") is None


def test_a_cpu_peak_is_the_high_water_mark_above_the_resident_size_at_the_start(monkeypatch):
    """Resident 300 MiB when the case starts, a high-water mark of 364 MiB after it: the case's peak is 64 MiB, not
    the process's 364 (the interpreter and torch are resident in every case)."""
    readings = {"VmRSS": 300.0, "VmHWM": 364.0}
    monkeypatch.setattr(measure, "status_mib", lambda field, path=measure.STATUS: readings[field])
    monkeypatch.setattr(measure, "reset_resident_peak", lambda: True)
    monkeypatch.setattr(measure, "release_free_memory", lambda: None)
    memory = measure.PeakMemory("cpu")
    memory.start()
    assert memory.peak_mib() == 64.0


def test_growth_exponent_uses_the_last_two_points_and_clamps_to_one_and_two_and_a_half():
    """log(v2 / v1) / log(t2 / t1) through the last two points: 4 -> 8 over T 2 -> 4 is 1 (first and last would
    give 1.5); 1 -> 8 over 1 -> 2 is 3, clamped to 2.5; shrinking is clamped to 1; a zero reading is left out."""
    assert growth_exponent([(1, 1.0), (2, 4.0), (4, 8.0)]) == pytest.approx(1.0)
    assert growth_exponent([(1, 1.0), (2, 8.0)]) == 2.5
    assert growth_exponent([(1, 4.0), (2, 2.0)]) == 1.0
    assert growth_exponent([(1, 0.0), (2, 4.0), (4, 16.0)]) == pytest.approx(2.0)


def test_a_prediction_exactly_at_the_cap_is_tried():
    """Skipped only when the prediction is over the cap: 100 MiB at T=1, quadratic, is 400 MiB at T=2, exactly a
    400 MiB cap (tried) and over a 399 MiB one."""
    done = [{"T": 1, "seconds": 0.1, "peak_mib": 100.0}]
    assert predicted_over_caps(done, 2, memory_cap_mib=400.0, time_cap=10.0) is None
    assert "peak memory 400 MiB > cap 399 MiB" in predicted_over_caps(done, 2, memory_cap_mib=399.0, time_cap=10.0)


def test_a_cubic_series_is_extrapolated_with_the_clamped_exponent():
    """1 s at T=1, 8 s at T=2 is cubic, clamped to 2.5: 8 x 2**2.5 = 45.25 s at T=4 (not 64 s), so a 45 s cap skips
    it and a 46 s cap tries it."""
    done = [{"T": 1, "seconds": 1.0, "peak_mib": 1.0}, {"T": 2, "seconds": 8.0, "peak_mib": 1.0}]
    predicted = 8.0 * 2**2.5
    assert predicted_over_caps(done, 4, memory_cap_mib=1e9, time_cap=math.floor(predicted)) is not None
    assert predicted_over_caps(done, 4, memory_cap_mib=1e9, time_cap=math.ceil(predicted)) is None


def test_once_stopped_every_larger_size_names_the_first_failure():
    """The suite adds skipped rows to the series too; the reason stays the failure at T=1024, not the skip after it."""
    series = SizeSeries(memory_cap_mib=1e6, time_cap=10.0)
    series.add({"T": 1024, "error": "out of memory"})
    reason = series.skip_reason(2048)
    assert "T=1024" in reason and "out of memory" in reason
    for length in (2048, 4096):
        series.add({"T": length, "skipped": series.skip_reason(length)})
    assert series.skip_reason(8192) == reason


def _timed_by(values):
    """A ``time_steps`` stand-in for one-run calls: each call reads the next time from ``values``."""
    pending = iter(values)
    return lambda step, repeats, time_cap, sync: {"seconds": next(pending), "runs": 1}


def test_paired_times_are_medians_and_the_median_of_per_turn_ratios(monkeypatch):
    """Turns (layer, projections) of (2, 1), (3, 6), (10, 2) s: medians 3 and 2 s (means 5 and 3), and the median of
    the ratios 2, 0.5, 5 is 2 (not the ratio of the medians, 1.5; nor the inverted 0.5)."""
    layer, projections = [2.0, 3.0, 10.0], [1.0, 6.0, 2.0]
    turns = [value for pair in zip(layer, projections, strict=True) for value in pair]
    monkeypatch.setattr(cases, "time_steps", _timed_by(turns))
    row = _paired_times(lambda: None, lambda: None, repeats=3, time_cap=100.0, sync=lambda: None)
    assert row == {"seconds": 3.0, "runs": 3, "projections_seconds": 2.0,
                   "over_projections": statistics.median([2.0, 0.5, 5.0])}  # fmt: skip


def test_paired_times_count_both_steps_against_the_time_cap(monkeypatch):
    """Turns of 1 + 1 s under a 3.5 s cap: 4 s after two turns, so no third (the layer alone would be 2 s)."""
    monkeypatch.setattr(cases, "time_steps", _timed_by([1.0] * 20))
    assert _paired_times(lambda: None, lambda: None, repeats=5, time_cap=3.5, sync=lambda: None)["runs"] == 2


def test_the_timed_runs_get_what_the_warm_up_and_the_untimed_step_left_of_the_cap(monkeypatch):
    """A 10 s cap, a 2 s warm-up and a 1.5 s untimed step (CPU): the timed runs get 10 - 2 - 1.5 = 6.5 s."""
    monkeypatch.setattr(cases, "_op_step", _counted_step([]))
    calls = []
    first = iter([2.0, 1.5])

    def fake(step, repeats, time_cap, sync):
        calls.append((repeats, time_cap))
        return {"seconds": next(first), "runs": 1} if len(calls) <= 2 else {"seconds": 0.25, "runs": repeats}

    monkeypatch.setattr(cases, "time_steps", fake)
    row = run_case({"part": "ops", "kind": "markov_local", "T": 8, "repeats": 3}, "cpu", time_cap=10.0)
    assert calls[-1] == (3, pytest.approx(6.5)) and row["warmup_seconds"] == 2.0 and row["seconds"] == 0.25


def test_a_case_whose_warm_up_and_untimed_step_spend_the_cap_still_times_one_run(fake_clock, monkeypatch):
    """A 5 s cap, a 2 s warm-up and a 4 s untimed step leave -1 s for the timed runs: time_steps ran none and took
    the median of nothing, so the child died (StatisticsError) and the case and the kind's later sizes were lost
    (`bench --quick --parts models --rounds 3` lost softmax at T=1024 in one round, and with it the case's median
    over the rounds). The timed runs now get one run whatever is left: that run's 1 s."""
    step = fake_clock.patch(measure).steps([2.0, 4.0, 1.0, 1.0, 1.0])
    monkeypatch.setattr(cases, "_op_step", lambda kind, length, device, backend="auto": step)
    row = run_case({"part": "ops", "kind": "markov_local", "T": 8, "repeats": 3}, "cpu", time_cap=5.0)
    assert row["warmup_seconds"] == 2.0 and row["runs"] == 1 and row["seconds"] == 1.0
    assert time_steps(fake_clock.steps([3.0]), 2, -1.5, sync=lambda: None) == {"seconds": 3.0, "runs": 1}


def test_paired_times_take_one_turn_when_the_cap_is_already_spent(monkeypatch):
    """The same for the markov_layer case's turns: a negative budget gave medians of nothing; now one turn, 2 s
    over 1 s."""
    monkeypatch.setattr(cases, "time_steps", _timed_by([2.0, 1.0, 2.0, 1.0]))
    row = _paired_times(lambda: None, lambda: None, repeats=3, time_cap=-0.5, sync=lambda: None)
    assert row == {"seconds": 2.0, "runs": 1, "projections_seconds": 1.0, "over_projections": 2.0}
