"""Benchmark readings a case could get wrong without an error: the peak of a case that timed nothing, the step
after the allocator handed memory back, the growth a quick run predicts with."""

from __future__ import annotations

from markovformer.bench import cases
from markovformer.bench.cases import measure_cases, run_case


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
