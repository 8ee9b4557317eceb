"""What ``markovformer bench`` prints at the end: a line for every length tried, also one where nothing was measured,
and for the decode part each model's tokens/s and last-over-first step time per generated length with issue 28's
targets and their values (they were in bench.json only)."""

from __future__ import annotations

from markovformer.bench.decode import decode_targets
from markovformer.bench.report import format_summary, summarise


def _cells(text: str, title: str) -> tuple[list[str], dict[int, list[str]]]:
    """The printed table under ``title``: its column names and {length: cells}."""
    lines = text.splitlines()
    lines = lines[next(i for i, line in enumerate(lines) if line.startswith(title)) + 1 :]
    lines = lines[: next((i for i, line in enumerate(lines) if "|" not in line), len(lines))]
    columns = [name.strip() for name in lines[0].split("|")[1:]]
    return columns, {int(line.split("|")[0]): [cell.strip() for cell in line.split("|")[1:]] for line in lines[1:]}


def test_a_length_at_which_every_kind_was_skipped_is_a_line_of_dashes():
    """Before, the table's lengths were those with a measurement: T = 2048, where both kinds were skipped or failed,
    vanished from the printed table while bench.json had its reasons."""
    rows = [{"kind": "a", "T": 1024, "seconds": 0.002, "peak_mib": 3.0}, {"kind": "b", "T": 1024, "error": "oom"},
            {"kind": "a", "T": 2048, "skipped": "predicted peak memory 9 MiB > cap 8 MiB"},
            {"kind": "b", "T": 2048, "skipped": "a smaller size stopped"}]  # fmt: skip
    parts = {"ops": {"rows": rows}}
    columns, table = _cells(format_summary({"parts": parts, "summary": summarise(parts)}), "attention ops")
    assert columns == ["a", "b"]
    assert table == {1024: ["2.0 / 3", "—"], 2048: ["—", "—"]}


def _row(kind: str, length: int, tokens_per_second: float, start: float, end: float, floor: float) -> dict:
    return {"part": "decode", "kind": kind, "T": length, "batch": 1, "tokens_per_second": tokens_per_second,
            "step_ms_start": start, "end_over_start": end / start, "floor_ms": floor, "peak_mib": 10.0}  # fmt: skip


def test_the_decode_table_and_targets_are_printed_with_each_rows_numbers():
    rows = [_row("markov_local", 256, 812.0, 1.25, 1.5, 1.0), _row("gpt2", 256, 640.0, 1.5625, 2.5, 1.0),
            _row("markov_local", 1024, 790.0, 1.25, 1.25, 1.0),
            {"part": "decode", "kind": "gpt2", "T": 1024, "batch": 1, "skipped": "over the memory cap"}]  # fmt: skip
    parts = {"decode": {"rows": rows, "targets": decode_targets(rows)}}
    text = format_summary({"parts": parts, "summary": summarise(parts)})
    columns, table = _cells(text, "decoding one token per step")
    local, gpt2 = columns.index("markov_local B=1"), columns.index("gpt2 B=1")
    assert table[256][local] == "812 / 1.20" and table[256][gpt2] == "640 / 1.60"  # 1.5 / 1.25, 2.5 / 1.5625
    assert table[1024][local] == "790 / 1.00" and table[1024][gpt2] == "—"
    # local vs GPT-2 at L = 256: 1.25 / 1.5625 = 0.80 <= 1, met; over its floor 1.25, met; flat 1.20 <= 1.2, met
    assert "at L = 256, local: step <= GPT-2 step (batch 1): 0.80, met" in text
    assert "at L = 1024, local: flat, last / first step <= 1.2: 1.00, met" in text
    assert "at L = 1024, local: step <= GPT-2" not in text  # GPT-2 skipped there: no comparison
