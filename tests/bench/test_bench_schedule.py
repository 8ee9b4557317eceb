"""The benchmark suite's schedule: every requested size ends up in the record, measured or with the reason it was
not; the skip rules (a size series' predicted caps, the naive scan's and the translation cache's limits); the
longest-context search; rounds' medians; a failing child, and a stopped bench that stops its child."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from markovformer.bench import RESULTS_NAME, BenchSettings, run_suite
from markovformer.bench.measure import SizeSeries, growth_exponent, predicted_over_caps
from markovformer.bench.report import format_summary
from markovformer.bench.suite import (
    _decode,
    _longest,
    _models,
    _Runner,
    _scan,
    _translation_decode,
    median_row,
)
from markovformer.bench.translation_decode import MAX_CACHE_TOKENS
from markovformer.bench.windows import expected_growth

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_ops_record_has_every_size_measured_or_explained(tmp_path):
    """A tiny memory cap: each kind's first size runs, the larger ones are skipped with the predicted excess; the
    record is complete, machine and settings included, and the figure is a PNG."""
    kinds, lengths = ("markov_local", "markov_global"), (32, 64, 128)
    settings = BenchSettings(parts=("ops",), quick=True, op_kinds=kinds, lengths=lengths, repeats=1,
                             memory_cap_mib=1e-3, time_cap=30.0)  # fmt: skip
    path = run_suite(tmp_path, settings, log=lambda line: None)
    assert path == tmp_path / RESULTS_NAME
    record = json.loads(path.read_text())
    assert record["complete"] and record["machine"]["torch"] == torch.__version__
    assert record["settings"]["lengths"] == list(lengths)
    rows = record["parts"]["ops"]["rows"]
    for kind in kinds:
        series = [row for row in rows if row["kind"] == kind]
        assert [row["T"] for row in series] == list(lengths)
        first, *rest = series
        assert first["seconds"] > 0 and first["peak_mib"] >= 0 and "skipped" not in first
        for row in rest:
            assert "seconds" not in row and row["skipped"]
        assert "predicted peak memory" in rest[0]["skipped"] and "cap" in rest[0]["skipped"]
    summary = record["summary"]
    assert set(summary["ops"]["seconds"]) == set(kinds)
    assert set(summary["ops"]["not_measured"]["markov_local"]) == {"64", "128"}
    assert (tmp_path / "ops.png").read_bytes()[:8] == PNG_SIGNATURE
    assert not list(tmp_path.glob(".*.tmp"))  # atomic writes leave no temporary file behind
    text = format_summary(record)
    assert "markov_global" in text and "predicted" not in text and "targets:" in text


def test_a_failing_child_gives_an_error_row_and_explains_the_rest(tmp_path):
    runner = _Runner(BenchSettings(parts=("ops",), quick=True).resolved(), tmp_path, log=lambda line: None)
    cases = [{"part": "ops", "kind": "no_such_kind", "T": 8, "repeats": 1},
             {"part": "ops", "kind": "no_such_kind", "T": 16, "repeats": 1}]  # fmt: skip
    first, second = runner.series(cases, "ops")
    assert "no_such_kind" in first["error"]
    assert second["skipped"].startswith("the child stopped")


def test_size_series_stops_after_a_failure_and_predicts_the_caps():
    series = SizeSeries(memory_cap_mib=2000.0, time_cap=10.0)
    assert series.skip_reason(1024) is None
    series.add({"T": 1024, "seconds": 1.0, "peak_mib": 100.0})
    series.add({"T": 2048, "seconds": 2.0, "peak_mib": 200.0})  # linear growth
    assert series.skip_reason(8192) is None  # 8 s, 800 MiB predicted
    assert "predicted step time 16 s > cap 10 s" in series.skip_reason(16384)  # 1600 MiB would fit
    assert "predicted peak memory 3200 MiB > cap 2000 MiB" in series.skip_reason(32768)
    series.add({"T": 4096, "skipped": "out of memory"})
    assert "a smaller size stopped" in series.skip_reason(8192)
    slow = SizeSeries(memory_cap_mib=1000.0, time_cap=10.0)
    slow.add({"T": 1024, "seconds": 12.0, "warmup_seconds": 12.0, "peak_mib": 1.0})
    assert "time cap" in slow.skip_reason(2048)


def test_growth_exponent_and_prediction():
    assert growth_exponent([(1, 1.0), (2, 4.0)]) == pytest.approx(2.0)
    assert growth_exponent([(1, 1.0), (4, 4.0)]) == pytest.approx(1.0)
    assert growth_exponent([(1, 1.0)]) == 2.0  # one point: assume quadratic
    assert predicted_over_caps([], 10**6, 1.0, 1.0) is None  # nothing measured: try it
    assert "peak memory 400 MiB > cap 300 MiB" in predicted_over_caps([{"T": 1, "seconds": 0.1, "peak_mib": 100.0}],
                                                                       2, 300.0, 10.0)  # fmt: skip


def test_a_fixed_window_kind_is_predicted_linear_from_its_first_size():
    """One measured size: a windowed kind is extrapolated linearly (100 MiB at T=1 -> 200 at T=2, under a 300 cap),
    full softmax quadratically (400 > 300)."""
    first = {"T": 1, "seconds": 0.1, "peak_mib": 100.0}
    for kind, growth, skipped in (("local_attention_w256", 1.0, False), ("banded_w16", 1.0, False),
                                  ("softmax_sdpa", 2.0, True)):  # fmt: skip
        assert expected_growth(kind) == growth
        series = SizeSeries(300.0, 10.0, default_growth=expected_growth(kind))
        series.add({"kind": kind, **first})
        assert (series.skip_reason(2) is not None) == skipped, kind


def test_sizes_given_out_of_order_are_tried_smallest_first(tmp_path, monkeypatch):
    """A size series runs in ascending T (a failure skips the larger sizes), so every length setting is sorted, not
    only ``lengths``: with ``--scan-lengths 16384 256`` a failure at 16384 skipped 256 as "a smaller size stopped"."""
    given = dict(scan_lengths=(16384, 256), window_lengths=(4096, 1024), decode_lengths=(512, 128),
                 translation_lengths=(256, 64), memory_lengths=(2048, 1024))  # fmt: skip
    settings = BenchSettings(parts=("scan",), device="cpu", **given).resolved()
    assert all(getattr(settings, name) == tuple(sorted(value)) for name, value in given.items())

    def row_of(case):
        if case["part"] == "scan_training":
            return {**case, "chars_per_second": 1.0}
        return {**case, "error": "out of memory"} if case["T"] > 1024 else {**case, "seconds": 0.01, "peak_mib": 1.0}

    runner, _ = _faked_runner(tmp_path, monkeypatch, row_of, scan_lengths=settings.scan_lengths)
    rows = {(row["kind"], row["T"]): row for row in _scan(runner)["rows"]}
    assert "seconds" in rows["sequential", 256] and "error" in rows["sequential", 16384]


def test_a_case_over_rounds_reports_the_median_time_and_the_largest_peak():
    def row(seconds, peak, **extra):
        return {"part": "models", "kind": "softmax", "T": 1024, "batch": 2, "seconds": seconds, "peak_mib": peak,
                "tokens_per_second": 2 * 1024 / seconds, **extra}  # fmt: skip

    merged = median_row([row(4.0, 100.0), row(1.0, 300.0), row(2.0, 200.0)])
    assert merged["seconds"] == 2.0 and merged["tokens_per_second"] == 1024.0 and merged["peak_mib"] == 300.0
    assert merged["round_seconds"] == [4.0, 1.0, 2.0]
    assert median_row([row(1.0, 10.0)]) == row(1.0, 10.0)
    skipped = {"part": "models", "kind": "softmax", "T": 1024, "skipped": "predicted peak memory over the cap"}
    assert median_row([row(1.0, 10.0), skipped]) == skipped


def _faked_runner(tmp_path, monkeypatch, row_of, **settings):
    """A quick ``_Runner`` with ``settings`` whose child answers each case with ``row_of(case)`` (no process, no
    timing), and the lists of cases the child was given, call by call."""
    resolved = dataclasses.replace(BenchSettings(quick=True, device="cpu").resolved(), **settings)
    runner, asked = _Runner(resolved, tmp_path, log=lambda line: None), []

    def child(cases, default_growth=2.0):
        asked.append(cases)
        return [row_of(case) for case in cases]

    monkeypatch.setattr(runner, "_child", child)
    return runner, asked


def test_longest_tries_sizes_up_to_the_search_cap_and_keeps_the_last_within_the_time_cap(tmp_path, monkeypatch):
    """1 s per 1024 positions under a 10 s time cap: 1024 .. 16384 (the cap included) are tried, 8192 (8 s) is the
    longest trained and 16384 (16 s) is what stopped it."""
    def row_of(case):
        return {**case, "seconds": case["T"] / 1024, "peak_mib": 1.0}

    runner, asked = _faked_runner(tmp_path, monkeypatch, row_of, models=("softmax",), longest_start=1024,
                                  longest_max=16384, time_cap=10.0)  # fmt: skip
    part = _longest(runner)
    assert [case["T"] for case in asked[0]] == [1024, 2048, 4096, 8192, 16384]
    assert part["longest"]["softmax"] == {"T": 8192, "stopped_by": "T=16384 over the time cap"}


def test_longest_of_a_model_that_trains_at_every_size_is_the_search_cap(tmp_path, monkeypatch):
    """0.5 s at every size under a 10 s cap: the longest is the last size tried, 4096, stopped by the cap."""
    runner, _ = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, "seconds": 0.5, "peak_mib": 1.0},
                              models=("gru",), longest_start=1024, longest_max=4096, time_cap=10.0)  # fmt: skip
    assert _longest(runner)["longest"]["gru"] == {"T": 4096, "stopped_by": "longest_max reached"}


def test_models_time_the_throughput_length_with_every_repeat_and_the_long_lengths_for_long_models(
    tmp_path, monkeypatch
):
    """The throughput length gets all 5 repeats, the memory lengths min(2, 5); only a long model (markov_local)
    also runs the long lengths."""
    runner, asked = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, "seconds": 1.0, "peak_mib": 1.0,
                                                                       "tokens_per_second": 1.0},
                                  models=("softmax", "markov_local"), throughput_length=512, memory_lengths=(1024,),
                                  long_lengths=(4096,), repeats=5)  # fmt: skip
    _models(runner)
    by_kind = {cases[0]["kind"]: {case["T"]: case["repeats"] for case in cases} for cases in asked}
    assert by_kind == {"softmax": {512: 5, 1024: 2}, "markov_local": {512: 5, 1024: 2, 4096: 2}}


def test_models_over_rounds_record_each_cases_median_row(tmp_path, monkeypatch):
    """Rounds of 3, 1 and 2 s: the row is the median, 2 s, and 512 tokens / 2 s (not the last round's)."""
    times = iter([3.0, 1.0, 2.0])
    runner, _ = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, "seconds": next(times), "peak_mib": 10.0,
                                                                   "tokens_per_second": 1.0},
                              models=("softmax",), throughput_length=512, memory_lengths=(512,), rounds=3,
                              model_batch=1)  # fmt: skip
    (row,) = _models(runner)["rows"]
    assert row["seconds"] == 2.0 and row["tokens_per_second"] == 512 / 2.0 and row["round_seconds"] == [3.0, 1.0, 2.0]


def test_a_case_that_failed_in_two_rounds_keeps_the_first_failure():
    """The first round that went wrong explains the rest (a later one may only say it was skipped)."""
    first = {"kind": "softmax", "T": 1024, "error": "the first round's"}
    second = {"kind": "softmax", "T": 1024, "skipped": "the second round's"}
    measured = {"kind": "softmax", "T": 1024, "batch": 1, "seconds": 1.0, "peak_mib": 1.0}
    assert median_row([measured, first, second]) == first


def test_scan_runs_the_naive_loop_up_to_its_limit_and_skips_it_beyond(tmp_path, monkeypatch):
    """NAIVE_MAX_T is 4096: the naive loop runs at 256 and 4096 and is skipped at 8192 only."""
    runner, asked = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, "seconds": 1.0, "peak_mib": 1.0,
                                                                       "chars_per_second": 1.0},
                                  scan_lengths=(256, 4096, 8192))  # fmt: skip
    naive = {row["T"]: row for row in _scan(runner)["rows"] if row["kind"] == "naive"}
    assert [case["T"] for cases in asked for case in cases if case["kind"] == "naive"] == [256, 4096]
    assert "seconds" in naive[4096] and "O(T^2)" in naive[8192]["skipped"]


def test_translation_decode_skips_the_cache_model_only_above_the_token_limit(tmp_path, monkeypatch):
    """B x L at the limit exactly (16 x MAX_CACHE_TOKENS / 16) is run; 32 x the same L is over it and skipped for
    the cached model (at) only."""
    length = MAX_CACHE_TOKENS // 16
    runner, _ = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, "tokens_per_second": 1.0, "peak_mib": 1.0,
                                                                   "step_ms_start": 1.0, "step_ms_end": 1.0},
                              translation_batches=(16, 32), translation_lengths=(length,))  # fmt: skip
    rows = {(row["kind"], row["batch"]): row for row in _translation_decode(runner)["rows"]}
    assert "skipped" not in rows["at", 16] and "skipped" not in rows["mat", 32] and "skipped" in rows["at", 32]


@pytest.mark.parametrize(("stop", "status"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_stopped_bench_stops_its_child_and_says_where_the_rows_are(tmp_path, stop, status):
    """SIGTERM's default action ended `markovformer bench` at once and left the case's child measuring on, orphaned
    (parent 1), for up to its time-out; Ctrl-C printed a traceback. Now the child goes with it, one line names the
    record, and the record is this run's (complete: false), not an earlier run's left in the folder."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    out.mkdir()
    (out / RESULTS_NAME).write_text(json.dumps({"complete": True, "parts": {}}))  # an earlier run's
    code = (
        "import subprocess, sys\n"
        "import markovformer.bench.suite as suite\n"
        "from markovformer.cli.main import main\n"
        "def slow_child(module, job, cases, timeout, threads=None):\n"
        "    child = 'import os, time; open(sys.argv[1], \"w\").write(str(os.getpid())); time.sleep(30)'\n"
        "    subprocess.run([sys.executable, '-c', 'import sys\\n' + child, sys.argv[2]], timeout=timeout,\n"
        "                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
        "    return []\n"
        "suite.run_in_child = slow_child\n"
        "sys.exit(main(['bench', '--quick', '--parts', 'ops', '--op-kinds', 'markov_local', '--lengths', '8',\n"
        "               '--out', sys.argv[1]]))\n"
    )
    pid_file = tmp_path / "child.pid"
    process = subprocess.Popen([sys.executable, "-c", code, str(out), str(pid_file)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(pid_file.read_text())
    process.send_signal(getattr(signal, stop))
    _, err = process.communicate(timeout=60)
    orphaned = Path(f"/proc/{child}").exists()
    if orphaned:
        os.kill(child, signal.SIGKILL)
    assert process.returncode == status, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"bench was stopped: {out / RESULTS_NAME} holds the rows" in lines[0], err
    assert not orphaned
    assert json.loads((out / RESULTS_NAME).read_text())["complete"] is False


def test_decode_lines_give_a_steps_time_per_step_of_the_batch_not_per_token(tmp_path, monkeypatch):
    """A step generates one token for each row: at batch 16 its 12 ms are 16 tokens' (0.75 ms a token), which the
    log printed as "ms/token". Batch 1: per token; batch 16: per step of 16 tokens, in both decoding parts."""
    row = {"tokens_per_second": 1333.0, "step_ms_at": {"1": 12.0}, "floor_ms": 3.0, "peak_mib": 1.0,
           "step_ms_start": 12.0, "step_ms_end": 12.0, "end_over_start": 1.0}  # fmt: skip
    lines = []
    runner, _ = _faked_runner(tmp_path, monkeypatch, lambda case: {**case, **row}, decode_kinds=("markov_local",),
                              decode_batches=(1, 16), decode_lengths=(64,), translation_batches=(1, 16),
                              translation_lengths=(64,))  # fmt: skip
    runner.log = lines.append
    _decode(runner)
    _translation_decode(runner)
    rows = [line for line in lines if "tok/s" in line]
    assert len(rows) == 2 + 4  # decode: one kind at two batches; translation: two kinds at two batches
    for line in rows:
        batched = "B=16" in line
        assert ("ms/step of 16 tokens" in line) == batched and ("ms/token" in line) == (not batched), line
