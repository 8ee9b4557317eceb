"""The benchmark suite: every requested size ends up in the record, measured or with the reason it was not; the
skip rules; the targets read from the rows; peak-memory readings; the bench models; the command-line options."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
import torch

from markovformer.bench import PARTS, RESULTS_NAME, BenchSettings, run_suite
from markovformer.bench.cases import CUDA_OP_KINDS, OP_KINDS, run_case
from markovformer.bench.measure import PeakMemory, SizeSeries, growth_exponent, predicted_over_caps
from markovformer.bench.models import MODELS, build_model, loss_of
from markovformer.bench.plots import write_plots
from markovformer.bench.report import format_summary, summarise, targets, time_per_key
from markovformer.bench.suite import (
    ALL_PARTS,
    _decode,
    _longest,
    _models,
    _Runner,
    _scan,
    _translation_decode,
    median_row,
)
from markovformer.bench.translation_decode import MAX_CACHE_TOKENS
from markovformer.bench.windows import expected_growth, local_attention_available, parse_kind, window_forward
from markovformer.cli import bench as bench_cli
from markovformer.layers.baselines.recurrent import GRUMixer

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


def test_layer_case_is_timed_against_its_projections_and_model_case_counts_tokens():
    """In-process cases: the layer row carries its paired projections-only time and their ratio; a model row its
    tokens per second and its parameters and optimizer state."""
    layer = run_case({"part": "ops", "kind": "markov_layer", "T": 32, "repeats": 3}, "cpu", time_cap=60.0)
    assert layer["runs"] == 3 and layer["seconds"] > 0 and layer["projections_seconds"] > 0
    assert layer["over_projections"] > 0
    model = run_case({"part": "models", "kind": "gru", "T": 16, "batch": 2, "repeats": 1}, "cpu", time_cap=60.0)
    assert model["tokens_per_second"] == pytest.approx(2 * 16 / model["seconds"])
    # parameters, AdamW's two moments (and its step counters)
    assert model["parameters"] > 0 and model["state_mib"] == pytest.approx(3 * model["parameters"] * 4 / 2**20, 1e-3)
    assert model["peak_mib"] >= model["state_mib"]


def test_plots_of_every_part(tmp_path):
    def row(kind, length, **values):
        return {"kind": kind, "T": length, **values}

    parts = {
        "ops": {"rows": [row("markov_local", 1024, seconds=0.01, peak_mib=5.0), row("hybrid", 2048, skipped="x")]},
        "models": {"rows": [row("gru", 512, tokens_per_second=100.0, peak_mib=50.0)]},
        "longest": {"longest": {"gru": {"T": 1024, "stopped_by": "cap"}, "softmax": {"T": None, "stopped_by": "x"}}},
    }  # fmt: skip
    record = {"machine": {"device": "cpu"}, "summary": summarise(parts)}
    written = write_plots(record, tmp_path)
    assert [path.name for path in written] == ["ops.png", "models.png", "longest.png", "targets.png"]
    assert all(path.read_bytes()[:8] == PNG_SIGNATURE for path in written)


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


def test_targets_read_from_rows():
    def row(kind, length, **values):
        return {"kind": kind, "T": length, **values}

    parts = {
        "ops": {"rows": [row("markov_local", 8192, seconds=1.0, peak_mib=10.0),
                         row("markov_local", 65536, seconds=8.5, peak_mib=95.0),
                         row("markov_layer", 4096, seconds=1.2, over_projections=1.2),
                         row("markov_global", 1024, peak_mib=10.0), row("markov_global", 4096, peak_mib=40.0)]},
        "models": {"rows": [row("markov_local", 2048, tokens_per_second=300.0),
                            row("softmax", 2048, tokens_per_second=100.0),
                            row("markov_local", 4096, peak_mib=90.0), row("softmax", 4096, peak_mib=100.0)]},
    }  # fmt: skip
    found = targets(parts)
    assert found["markov_local_time_64k_over_8k"] == {"value": 8.5, "target": "<= 9", "met": True}
    assert found["markov_local_memory_64k_over_8k"]["met"] is False  # 9.5
    assert found["markov_layer_over_projections_4096"]["value"] == pytest.approx(1.2)
    assert found["markov_layer_over_projections_16384"]["met"] is None
    assert "T=16384" in found["markov_layer_over_projections_16384"]["missing"]
    assert found["markov_global_memory_growth_exponent"]["value"] == pytest.approx(1.0)
    assert found["markov_local_over_softmax_tokens_per_second_2048"]["value"] == pytest.approx(3.0)
    assert found["markov_local_over_softmax_tokens_per_second_8192"]["met"] is None
    assert found["markov_local_over_softmax_peak_memory_4096"]["met"] is True


def test_peak_memory_sees_an_allocation():
    memory = PeakMemory("cpu")
    memory.start()
    if not memory.isolated:
        pytest.skip("this kernel refuses to reset the resident high-water mark")
    block = torch.ones(16 * 2**20)  # 64 MiB, touched
    del block
    assert 60 <= memory.peak_mib() < 200


@pytest.mark.parametrize("name", MODELS)
def test_bench_models_train_on_next_token_loss(name):
    torch.manual_seed(0)
    model = build_model(name)
    ids = torch.randint(0, 256, (2, 12))
    loss = loss_of(model, ids)
    assert loss.ndim == 0 and abs(loss.item() - torch.log(torch.tensor(256.0)).item()) < 0.5  # near uniform at init
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_gru_model_is_the_library_gru_kind_and_its_loss_is_shifted_cross_entropy():
    torch.manual_seed(0)
    model = build_model("gru")
    assert all(isinstance(block.attention, GRUMixer) for block in model.model.blocks)
    ids = torch.randint(0, 256, (3, 5))
    logits = model(ids).logits
    expected = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(loss_of(model, ids), expected)


def test_command_line_options(tmp_path, monkeypatch):
    assert bench_cli.PART_NAMES == PARTS and bench_cli.ALL_PART_NAMES == ALL_PARTS
    assert bench_cli.OP_KIND_NAMES == OP_KINDS + CUDA_OP_KINDS
    parser = argparse.ArgumentParser()
    bench_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bench", "--quick", "--parts", "ops", "--out", "somewhere", "--lengths", "64"])
    assert (args.command, args.quick, args.parts, args.out, args.lengths) == ("bench", True, ["ops"], "somewhere", [64])
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--parts", "everything"])
    with pytest.raises(ValueError, match="--threads=0"):
        bench_cli.run_bench(parser.parse_args(["bench", "--threads", "0"]))
    with pytest.raises(ValueError, match="--rounds=0"):
        bench_cli.run_bench(parser.parse_args(["bench", "--rounds", "0"]))
    with pytest.raises(ValueError, match="--repeats=0"):  # a cold run's time, up to 150 times a warm one's
        bench_cli.run_bench(parser.parse_args(["bench", "--repeats", "0"]))
    with pytest.raises(ValueError, match="rounds=1.5"):
        BenchSettings(rounds=1.5).resolved()
    with pytest.raises(ValueError, match="repeats=0"):  # the library's own entry point too, not only the CLI
        BenchSettings(repeats=0).resolved()
    with pytest.raises(ValueError, match="--scan-lengths"):
        bench_cli.run_bench(parser.parse_args(["bench", "--parts", "scan", "--scan-lengths", "256", "0"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "--op-kinds", "flash"])
    # a part's flag without its part was ignored without a word (--parts ops --rounds 3 timed each op once)
    with monkeypatch.context() as patched:
        patched.setattr("markovformer.bench.run_suite", lambda *args, **kwargs: pytest.fail("the suite ran"))
        for flag, value, part in (("--rounds", "3", "models"), ("--lengths", "64", "ops"), ("--op-kinds",
                                  "cope_layer", "ops"), ("--decode-lengths", "8", "decode"), ("--decode-batches", "2",
                                  "decode"), ("--translation-lengths", "8", "translation_decode"),
                                  ("--translation-batches", "2", "translation_decode"), ("--scan-lengths", "8",
                                  "scan")):  # fmt: skip
            others = [name for name in ALL_PARTS if name != part]
            refused = f"^{flag} applies to the {part} part, which --parts {' '.join(others)} leaves out"
            with pytest.raises(ValueError, match=refused):
                bench_cli.run_bench(parser.parse_args(["bench", "--parts", *others, flag, value]))
    # caps and sizes the flags do not check ran into rows of errors, reported complete with exit status 0
    for flags, named in ((["--time-cap", "-1"], "time_cap=-1.0"), (["--max-memory-mib", "nan"], "memory_cap_mib=nan"),
                         (["--set", "data_mb=0"], "data_mb=0"), (["--set", "long_lengths=[4096, 0.5]"],
                                                                  "long_lengths=(4096, 0.5)"),
                         # a word where a number belongs: past the CLI's type check (the default is None), it
                         # failed as "Unknown format code 'f' for object of type 'str'" once the suite ran
                         (["--set", "time_cap=fast"], "time_cap='fast'"), (["--set", "repeats=two"], "repeats='two'"),
                         (["--set", "lengths=[1k]"], "lengths=('1k',)")):  # fmt: skip
        with pytest.raises(ValueError, match=re.escape(named)):
            bench_cli.run_bench(parser.parse_args(["bench", "--out", str(tmp_path / "out"), *flags]))
    assert not (tmp_path / "out").exists()
    # numbers as a run config reads them: 1e3 was the text '1e3' to PyYAML's own loader, refused as no float
    parsed = bench_cli._with_settings(BenchSettings(), ["data_mb=1e3", "data_small_mb=5e-1"])
    assert (parsed.data_mb, parsed.data_small_mb) == (1000.0, 0.5)
    with pytest.raises(ValueError, match="unknown op kind"):
        BenchSettings(op_kinds=("flash",)).resolved()


def test_decode_part_measures_cached_generation_with_the_cache_sizes_of_each_kind():
    from markovformer.bench.decode import PROMPT_LENGTH, decode_case

    size = dict(vocab_size=16, d_model=16, n_layers=2, n_heads=2)
    local = decode_case("markov_local", 100, 2, size=size)
    global_ = decode_case("softmax_global", 100, 2, size=size)
    # layers x (keys, values) x 2 copies (the visible slots in order) x (W + 1) x d_model, whatever the length
    assert local["cache_floats_per_row"] == 2 * 2 * 2 * 65 * 16
    # the whole sequence (116 positions) in storage that doubles when full: 128 slots
    assert global_["cache_floats_per_row"] == 2 * 2 * 2 ** math.ceil(math.log2(PROMPT_LENGTH + 100)) * 16
    for row in (local, global_):
        assert row["tokens_per_second"] == pytest.approx(2 * 100 / row["seconds"])
        assert row["end_over_start"] == pytest.approx(row["step_ms_end"] / row["step_ms_start"])
    with pytest.raises(ValueError, match="decode"):
        BenchSettings(parts=("decoding",)).resolved()
    assert BenchSettings(parts=("decode",), quick=True).resolved().decode_lengths == (256, 1024)
    with pytest.raises(ValueError, match="decode_kinds: 'markov_locl' is not one of"):
        BenchSettings(parts=("decode",), decode_kinds=("markov_local", "markov_locl")).resolved()


def test_issue_21_targets_read_from_rows():
    """The paper configuration against softmax, the local model's rate by T, banded against local-attention."""

    def row(kind, length, **values):
        return {"kind": kind, "T": length, **values}

    parts = {
        "models": {"rows": [row("softmax", 2048, tokens_per_second=100.0), row("softmax", 8192, tokens_per_second=20.0),
                            row("paper_hybrid_gru", 2048, tokens_per_second=150.0),
                            row("paper_hybrid_min_gru", 8192, tokens_per_second=100.0),
                            row("markov_local", 2048, tokens_per_second=1000.0),
                            row("markov_local", 8192, tokens_per_second=900.0),
                            row("markov_local", 32768, tokens_per_second=800.0)]},
        "windows": {"windows": [16, 64], "rows": [row("banded_w16", 4096, seconds=1.0),
                                                  row("local_attention_w16", 4096, seconds=2.0),
                                                  row("banded_w64", 4096, seconds=3.0),
                                                  row("local_attention_w64", 4096, skipped="not installed")]},
    }  # fmt: skip
    found = targets(parts)
    assert found["paper_hybrid_gru_over_softmax_tokens_per_second_2048"] == {"value": 1.5, "target": ">= 2",
                                                                             "met": False}  # fmt: skip
    assert found["paper_hybrid_gru_over_softmax_tokens_per_second_8192"]["met"] is None
    assert found["paper_hybrid_min_gru_over_softmax_tokens_per_second_8192"]["value"] == pytest.approx(5.0)
    assert found["paper_hybrid_min_gru_over_softmax_tokens_per_second_8192"]["met"] is True
    assert found["markov_local_tokens_per_second_8192_over_2048"]["met"] is True  # 0.9
    assert found["markov_local_tokens_per_second_32768_over_2048"]["met"] is False  # 0.8
    assert found["banded_over_local_attention_w16_4096"]["value"] == pytest.approx(0.5)
    assert found["banded_over_local_attention_w64_4096"]["met"] is None
    assert set(name for name in found if name.startswith("banded_over")) == {
        "banded_over_local_attention_w16_4096", "banded_over_local_attention_w64_4096"}  # fmt: skip


@pytest.mark.parametrize(("window", "length"), [(16, 1000), (1024, 4096), (1024, 1024), (1024, 1025), (4, 5)])
def test_time_per_key_divides_by_the_visible_pairs(window, length):
    """Query t of a causal window W sees keys max(0, t - W)..t (fewer than W + 1 for the first W queries: counting
    T (W + 1) was 12.5 % too many at W = 1024, T = 4096, twice too many at W >= T); SDPA's query t sees t + 1."""
    rows = [{"kind": f"banded_w{window}", "T": length, "seconds": 1.7e-3},
            {"kind": "softmax_sdpa", "T": length, "seconds": 1.0}]  # fmt: skip
    table = time_per_key({"rows": rows})
    visible = sum(min(t + 1, window + 1) for t in range(length))  # counted query by query
    assert table[f"banded_w{window}"][length] == pytest.approx(1.7e-3 / visible * 1e9, rel=1e-12)
    assert table["softmax_sdpa"][length] == pytest.approx(1.0 / (length * (length + 1) / 2) * 1e9, rel=1e-12)


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


@pytest.mark.skipif(not local_attention_available(), reason="local-attention not installed (the bench extra)")
@pytest.mark.parametrize("window", [3, 16])
def test_window_kinds_compare_the_same_attention(window):
    """The side-by-side is fair: banded (zero bias) and local-attention give the same output on the same inputs,
    both equal to the naive reference at that window (every query sees keys t-W..t)."""
    from markovformer.ops.lag_bias_attention import lag_bias_attention_naive

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 37, 8, generator=g, dtype=torch.float64) for _ in range(3))
    zero_bias = torch.zeros(1, 2, 37, 4, dtype=torch.float64)
    expected = lag_bias_attention_naive(q, k, v, window=window, causal=True)[0]
    for kind in (f"banded_w{window}", f"local_attention_w{window}"):
        torch.testing.assert_close(window_forward(kind, q, k, v, zero_bias), expected, rtol=1e-10, atol=1e-10,
                                   msg=lambda m, kind=kind: f"{kind}: {m}")  # fmt: skip


def test_window_kind_names():
    assert parse_kind("banded_w64") == ("banded", 64) and parse_kind("local_attention_w1024") == ("local_attention",
                                                                                                  1024)  # fmt: skip
    assert parse_kind("softmax_sdpa") == ("softmax_sdpa", None)
    with pytest.raises(ValueError, match="unknown windows kind 'flash_w8'"):
        parse_kind("flash_w8")


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


def test_decode_rows_report_marks_floor_and_issue_28_targets():
    from markovformer.bench.decode import decode_case, decode_targets

    size = dict(vocab_size=16, d_model=16, n_layers=2, n_heads=2)
    for kind in ("retnet", "markov_local_gru", "gpt2"):
        row = decode_case(kind, 20, 1, size=size)
        if "skipped" in row:
            continue
        assert set(row["step_ms_at"]) == {"1"} and row["floor_ms"] > 0 and row["peak_mib"] >= 0
    rows = [dict(kind="markov_local", T=8, batch=1, step_ms_start=3.0, floor_ms=2.5, end_over_start=1.1),
            dict(kind="gpt2", T=8, batch=1, step_ms_start=2.0),
            dict(kind="markov_local_compiled", T=8, batch=1, step_ms_start=1.0, floor_ms=0.5, end_over_start=1.3),
            dict(kind="markov_local", T=8, batch=16, step_ms_start=1.0, floor_ms=9.0, end_over_start=9.0)]
    targets = {target["target"]: (target["value"], target["met"]) for target in decode_targets(rows)}
    assert targets == {"local: step <= GPT-2 step (batch 1)": (1.5, False),
                       "local: step <= 1.5 x matrix-vector floor": (1.2, True),
                       "local: flat, last / first step <= 1.2": (1.1, True),
                       "local, compiled step: step <= GPT-2 step (batch 1)": (0.5, True),
                       "local, compiled step: step <= 1.5 x matrix-vector floor": (2.0, False),
                       "local, compiled step: flat, last / first step <= 1.2": (1.3, False)}  # batch 16: no target


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


def test_the_default_memory_cap_is_a_quarter_of_the_available_memory_at_most_16_gib(monkeypatch):
    """8000 MiB available: 2000; 200000: 50000, held at 16384; a cap given is kept."""
    from markovformer.bench import suite

    for available, cap in ((8000.0, 2000.0), (200_000.0, 16384.0)):
        monkeypatch.setattr(suite, "status_mib", lambda field, path=None, available=available: available)
        assert BenchSettings(device="cpu").resolved().memory_cap_mib == cap
    assert BenchSettings(device="cpu", memory_cap_mib=123.0).resolved().memory_cap_mib == 123.0


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


def test_a_longest_max_below_longest_start_is_refused_naming_both():
    """--quick starts the longest part at T=1024: --set longest_max=512 tried no length and reported every model's
    longest context as None, stopped by "longest_max reached", with exit status 0. Now refused; a run without the
    longest part is not."""
    with pytest.raises(ValueError, match="longest_max=512 is below longest_start=1024"):
        BenchSettings(parts=("longest",), quick=True, longest_max=512).resolved()
    with pytest.raises(ValueError, match="longest_max=2048 is below longest_start=4096"):
        BenchSettings(parts=("longest",), longest_start=4096, longest_max=2048).resolved()
    assert BenchSettings(parts=("ops",), quick=True, longest_max=512).resolved().longest_max == 512
    assert BenchSettings(parts=("longest",), quick=True, longest_max=1024).resolved().longest_start == 1024


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


def test_an_out_that_is_a_file_is_refused_naming_it_and_left_as_it_was(tmp_path):
    out = tmp_path / "results.txt"
    out.write_text("kept\n")
    with pytest.raises(ValueError, match=r"results\.txt: is a file, not a folder"):
        run_suite(out, BenchSettings(parts=("ops",), quick=True, device="cpu", op_kinds=("markov_local",),
                                     lengths=(64,)), log=lambda line: None)  # fmt: skip
    assert out.read_text() == "kept\n" and [path.name for path in tmp_path.iterdir()] == ["results.txt"]
    with pytest.raises(ValueError, match=r"results\.txt is a file, so no folder can be made under it"):
        run_suite(out / "deeper" / "bench", BenchSettings(parts=("ops",), quick=True, device="cpu",
                                                          op_kinds=("markov_local",), lengths=(64,)),
                  log=lambda line: None)  # fmt: skip
    assert out.read_text() == "kept\n" and [path.name for path in tmp_path.iterdir()] == ["results.txt"]
