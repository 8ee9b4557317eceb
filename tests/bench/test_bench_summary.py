"""The summary bench.json keeps and the tables ``markovformer bench`` prints carry the rows' numbers: ratios the
right way up, values in the units the headers say, targets met at their bound, decode batches kept apart, also after
the record went through its JSON file (integer T keys become strings); a line for every length tried, also one where
nothing was measured; the decode part's table and issue 28's targets with their values."""

from __future__ import annotations

import json

import pytest

from markovformer.bench.decode import decode_targets
from markovformer.bench.report import _target, format_summary, summarise


def _row(kind, length, **values):
    return {"kind": kind, "T": length, **values}


def _table_line(text: str, header: str, length: int) -> list[str]:
    """The cells of the row for ``length`` in the table under the line starting with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        first, *cells = [cell.strip() for cell in line.split("|")]
        if first == str(length):
            return cells
    raise AssertionError(f"no row T={length} under {header!r}")


def test_a_target_keeps_its_value_to_four_decimals():
    """1/3 is kept as 0.3333 (within 5e-5), not 0.33."""
    assert _target(1 / 3, 1.0, True, "")["value"] == pytest.approx(1 / 3, abs=5e-5)


def test_a_value_exactly_at_the_bound_meets_the_target_either_way():
    """"<= 9" is met at 9 and ">= 2" at 2; just past either bound is not."""
    assert _target(9.0, 9.0, True, "")["met"] is True and _target(2.0, 2.0, False, "")["met"] is True
    assert _target(9.0 + 1e-9, 9.0, True, "")["met"] is False and _target(2.0 - 1e-9, 2.0, False, "")["met"] is False


def test_scan_ratios_are_the_slow_kinds_time_over_the_fast_ones():
    """Each ``slow_over_fast`` ratio is the slow kind's seconds over the fast kind's (> 1 when the fast one is
    faster), and the library's training rate over the seed-style one's is 3000 / 1000 = 3."""
    seconds = {"naive": 0.8, "naive_unbind": 0.3, "sequential": 0.1, "chunked": 0.05}
    parts = {"scan": {"rows": [_row(kind, 256, seconds=s) for kind, s in seconds.items()],
                      "training": [{"kind": "library", "chars_per_second": 3000.0},
                                   {"kind": "seed_style", "chars_per_second": 1000.0}]}}  # fmt: skip
    ratios = summarise(parts)["scan"]["ratios"]
    for slow in ("naive", "naive_unbind"):
        for fast in ("sequential", "chunked"):
            assert ratios[f"{slow}_over_{fast}_at_256"] == pytest.approx(seconds[slow] / seconds[fast])
    assert ratios["library_over_seed_style_chars_per_second"] == pytest.approx(3.0)


def test_the_scan_table_prints_milliseconds_and_its_training_rates_and_ratios_after_the_json_round_trip():
    """The scan part's printed section: seconds as ms per kind and T (naive skipped at 4096: a dash), each training
    kind's rate (a failed one a dash), and each ratio of the summary, read back from bench.json."""
    rows = [_row("naive", 256, seconds=0.8), _row("chunked", 256, seconds=0.05), _row("chunked", 4096, seconds=0.5),
            _row("naive", 4096, skipped="beyond NAIVE_MAX_T")]
    parts = {"scan": {"rows": rows, "training": [{"kind": "library", "chars_per_second": 30000.0},
                                                 {"kind": "seed_style", "chars_per_second": 12000.0},
                                                 {"kind": "other", "error": "exit 1"}]}}  # fmt: skip
    record = json.loads(json.dumps({"parts": parts, "summary": summarise(parts)}))
    text = format_summary(record)
    assert _table_line(text, "linear scan, forward+backward: ms", 256) == ["800.0", "50.0"]
    assert _table_line(text, "linear scan, forward+backward: ms", 4096) == ["—", "500.0"]
    assert "Scan Markov training, library: 30,000 characters/s" in text
    assert "Scan Markov training, other: —" in text
    assert "  naive_over_chunked_at_256: 16.0x" in text  # 0.8 / 0.05
    assert "  library_over_seed_style_chars_per_second: 2.5x" in text


def test_the_printed_tables_show_each_rows_numbers_in_the_stated_units():
    """Read back from JSON (T keys as strings): ops in ms (seconds x 1e3) / MiB, a skipped size a dash; windows in
    ms / ns per (query, visible key) pair; models in tokens/s / MiB, as their headers say."""
    parts = {
        "ops": {"rows": [_row("markov_local", 1024, seconds=0.0123, peak_mib=45.4),
                         _row("softmax_sdpa", 1024, seconds=0.5, peak_mib=900.0),
                         _row("markov_local", 2048, seconds=0.03, peak_mib=90.0),
                         _row("softmax_sdpa", 2048, skipped="predicted peak memory over the cap")]},
        "windows": {"rows": [_row("banded_w16", 4096, seconds=0.002)]},
        "models": {"rows": [_row("softmax", 512, tokens_per_second=1234.0, peak_mib=56.0)]},
    }  # fmt: skip
    text = format_summary(json.loads(json.dumps({"summary": summarise(parts)})))
    assert _table_line(text, "attention ops", 1024) == ["12.3 / 45", "500.0 / 900"]
    assert _table_line(text, "attention ops", 2048) == ["30.0 / 90", "—"]
    pairs = sum(min(t + 1, 17) for t in range(4096))  # query t sees keys max(0, t - 16)..t
    assert _table_line(text, "local attention by window", 4096) == [f"2.0 / {0.002 / pairs * 1e9:.2f}"]
    assert _table_line(text, "models", 512) == ["1234 / 56"]


def test_the_printed_targets_say_met_exactly_when_the_target_is_met():
    """Each target's line ends in what its ``met`` says: met, NOT met or not measured."""
    parts = {"ops": {"rows": [_row("markov_local", 8192, seconds=1.0, peak_mib=10.0),
                              _row("markov_local", 65536, seconds=8.5, peak_mib=95.0)]}}  # fmt: skip
    summary = summarise(parts)
    assert {target["met"] for target in summary["targets"].values()} >= {True, False}
    text = format_summary({"summary": summary})
    for name, target in summary["targets"].items():
        line = next(line for line in text.splitlines() if line.strip().startswith(name + " "))
        assert line.rsplit(":", 1)[1].strip() == {True: "met", False: "NOT met", None: "not measured"}[target["met"]]


def test_decode_tables_keep_each_batch_apart():
    """Rows at batch 1 and 16 of one kind and length are two entries, each with its own tokens/s."""
    rows = [dict(kind="markov_local", T=256, batch=batch, end_over_start=1.0, tokens_per_second=10.0 * batch,
                 peak_mib=1.0) for batch in (1, 16)]  # fmt: skip
    table = summarise({"decode": {"rows": rows}})["decode"]
    assert table["markov_local B=1"][256]["tokens_per_second"] == 10.0
    assert table["markov_local B=16"][256]["tokens_per_second"] == 160.0


def test_a_length_at_which_every_kind_was_skipped_is_a_line_of_dashes():
    """Before, the table's lengths were those with a measurement: T = 2048, where both kinds were skipped or failed,
    vanished from the printed table while bench.json had its reasons."""
    rows = [_row("a", 1024, seconds=0.002, peak_mib=3.0), _row("b", 1024, error="oom"),
            _row("a", 2048, skipped="predicted peak memory 9 MiB > cap 8 MiB"),
            _row("b", 2048, skipped="a smaller size stopped")]  # fmt: skip
    text = format_summary({"summary": summarise({"ops": {"rows": rows}})})
    assert _table_line(text, "attention ops", 1024) == ["2.0 / 3", "—"]
    assert _table_line(text, "attention ops", 2048) == ["—", "—"]


def _decode_row(kind: str, length: int, tokens_per_second: float, start: float, end: float) -> dict:
    return _row(kind, length, batch=1, tokens_per_second=tokens_per_second, step_ms_start=start,
                end_over_start=end / start, floor_ms=1.0, peak_mib=10.0)  # fmt: skip


def test_the_decode_table_and_targets_are_printed_with_each_rows_numbers():
    """summarise() built the decode table, but it was not printed. Columns: markov_local, gpt2 (the rows' order)."""
    rows = [_decode_row("markov_local", 256, 812.0, 1.25, 1.5), _decode_row("gpt2", 256, 640.0, 1.5625, 2.5),
            _decode_row("markov_local", 1024, 790.0, 1.25, 1.25), _row("gpt2", 1024, batch=1, skipped="memory cap")]
    parts = {"decode": {"rows": rows, "targets": decode_targets(rows)}}
    text = format_summary({"parts": parts, "summary": summarise(parts)})
    assert _table_line(text, "decoding one token per step", 256) == ["812 / 1.20", "640 / 1.60"]  # 1.5/1.25, 2.5/1.5625
    assert _table_line(text, "decoding one token per step", 1024) == ["790 / 1.00", "—"]
    # local vs GPT-2 at L = 256: 1.25 / 1.5625 = 0.80 <= 1, met; over its floor 1.25, met; flat 1.20 <= 1.2, met
    assert "at L = 256, local: step <= GPT-2 step (batch 1): 0.80, met" in text
    assert "at L = 1024, local: flat, last / first step <= 1.2: 1.00, met" in text
    assert "at L = 1024, local: step <= GPT-2" not in text  # GPT-2 skipped there: no comparison


def test_a_time_of_the_cold_warm_up_alone_is_marked_in_the_tables():
    """A case whose warm-up exceeded the time cap keeps the warm-up's time (``runs`` 0): the table printed it like a
    median of warm runs (fox_pro_layer at T=1024: 10,055 ms beside forgetting_layer's 224 ms, where a warm step
    takes about 400 ms). Its cell is now marked, with a footnote, also after the JSON round trip; warm cells are not."""
    parts = {
        "ops": {"rows": [_row("forgetting_layer", 1024, seconds=0.2237, peak_mib=65.0, runs=2),
                         _row("fox_pro_layer", 1024, seconds=10.055, peak_mib=152.0, runs=0)]},
        "models": {"rows": [_row("gru", 512, seconds=11.6, peak_mib=236.0, runs=0, tokens_per_second=512 / 11.6),
                            _row("softmax", 512, seconds=0.8, peak_mib=127.0, runs=2, tokens_per_second=640.0)]},
    }  # fmt: skip
    record = json.loads(json.dumps({"parts": parts, "summary": summarise(parts)}))
    text = format_summary(record)
    assert _table_line(text, "attention ops", 1024) == ["223.7 / 65", "10055.0 / 152*"]
    assert _table_line(text, "models, training step", 512) == ["44 / 236*", "640 / 127"]
    assert "* the warm-up step alone, cold" in text
    warm = {"ops": {"rows": parts["ops"]["rows"][:1]}}
    assert "*" not in format_summary({"parts": warm, "summary": summarise(warm)})


def test_the_models_table_prints_each_models_parameter_count_which_the_kinds_do_not_share():
    """The README called the models part's models "equal-size": they share d_model, layers and heads, but not the
    count (the paper's hybrid with its GRU injection has 1.57x the softmax model's parameters), and the printed
    table never said so. Each count printed is the model's own, every parameter once."""
    from markovformer.bench.models import MODELS, build_model, describe_models

    def counts_line(ran: list[str]) -> str:
        rows = [_row(name, 512, tokens_per_second=1.0, peak_mib=1.0) for name in ran]
        text = format_summary(json.loads(json.dumps({"summary": summarise({"models": {"models": describe_models(),
                                                                                     "rows": rows}})})))  # fmt: skip
        return next(line for line in text.splitlines() if line.lstrip().startswith("parameters"))

    line = counts_line(list(MODELS))
    counts = {name: sum(p.numel() for p in build_model(name).parameters()) for name in MODELS}
    for name, count in counts.items():
        assert f"{name} {count:,}" in line
    assert max(counts.values()) / min(counts.values()) > 1.5  # why the line is needed
    # --set models=[softmax]: the counts of the models that ran (every model's were printed)
    assert counts_line(["softmax"]).split(":", 1)[1].strip() == f"softmax {counts['softmax']:,}"


def test_a_peak_of_zero_is_a_reading_shown_as_0_and_no_ratio_divides_by_it():
    """On CPU a step that fits in memory already resident reads a peak of 0.0 MiB: the table shows it as 0 (not as
    unmeasured, nor a crash formatting a missing number), and the target whose ratio would divide by it is not
    measured rather than a ZeroDivisionError that lost the whole summary."""
    parts = {"ops": {"rows": [_row("markov_local", 1024, seconds=0.002, peak_mib=0.0)]},
             "models": {"rows": [_row("markov_local", 4096, tokens_per_second=900.0, peak_mib=50.0),
                                 _row("softmax", 4096, tokens_per_second=800.0, peak_mib=0.0)]}}  # fmt: skip
    summary = summarise(parts)
    assert summary["ops"]["peak_mib"] == {"markov_local": {1024: 0.0}}
    assert summary["targets"]["markov_local_over_softmax_peak_memory_4096"]["met"] is None
    text = format_summary({"summary": summary})
    assert _table_line(text, "attention ops", 1024) == ["2.0 / 0"]
    assert _table_line(text, "models, training step", 4096) == ["900 / 50", "800 / 0"]


def test_the_memory_growth_exponent_is_the_least_squares_slope_over_every_size():
    """Peaks 10, 40 and 80 MiB at T = 1024, 2048 and 8192: in log2 units the points (0, 0), (1, 2), (3, 3), whose
    least-squares slope is 39/42 = 13/14 (the slope from the first size to the last would be 1.0)."""
    rows = [_row("markov_global", length, peak_mib=peak) for length, peak in ((1024, 10.0), (2048, 40.0), (8192, 80.0))]
    found = summarise({"ops": {"rows": rows}})["targets"]["markov_global_memory_growth_exponent"]
    assert found["value"] == pytest.approx(13 / 14, abs=5e-5) and found["met"] is True
