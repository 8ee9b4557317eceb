"""A decode row's numbers come from its own step times: the median first and last steps over L / 8 steps each, the
step time at a marked token, tokens per second over every row of the batch, and the state held per row. The steps
are fakes that take known times on a fake clock (no timed test); the crossover is the shortest length where MAT
decodes faster."""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest
import torch

from markovformer.bench import decode, translation_decode
from markovformer.bench.translation_decode import crossovers

LENGTH = 32
STEPS_MS = [float(step) for step in range(1, LENGTH + 1)]  # step i takes i ms: every window of steps differs
EDGE = LENGTH // 8  # min(256, L // 8) steps at each end


def test_gpt2_without_transformers_is_a_skipped_row_naming_the_extra_that_installs_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "transformers", None)  # importing it now fails as if it were not installed
    row = decode.decode_case("gpt2", LENGTH, 1, size={"vocab_size": 8})
    assert row == {"part": "decode", "kind": "gpt2", "T": LENGTH, "batch": 1,
                   "skipped": "transformers is not installed (pip install 'markovformer[hf]')"}  # fmt: skip


def test_a_decode_row_reads_its_step_times(fake_clock, monkeypatch):
    """A 0.5 s prompt, then step i takes i ms: the first and last 4 steps' medians, the 16 steps from the first
    generated token, the total 0.5 s + sum of the steps, and 3 rows x 32 tokens over it."""
    step = fake_clock.patch(decode).steps([0.5] + [ms / 1000 for ms in STEPS_MS])

    def markovian(kind, size):
        def forward(ids):
            step()
            return torch.zeros(ids.shape[0], size["vocab_size"])

        return torch.nn.Linear(2, 2), forward, {"layers": []}

    monkeypatch.setattr(decode, "_markovian", markovian)
    row = decode.decode_case("markov_local", LENGTH, 3, size={"vocab_size": 8})
    assert row["step_ms_start"] == pytest.approx(statistics.median(STEPS_MS[:EDGE]))
    assert row["step_ms_end"] == pytest.approx(statistics.median(STEPS_MS[-EDGE:]))
    assert row["step_ms_at"] == {"1": pytest.approx(statistics.median(STEPS_MS[: decode.MARK_STEPS]))}
    assert row["seconds"] == pytest.approx(0.5 + sum(STEPS_MS) / 1000)
    assert row["tokens_per_second"] == pytest.approx(3 * LENGTH / row["seconds"])


def test_a_translation_row_reads_its_step_times_and_state_per_row(fake_clock, monkeypatch):
    """Step i takes i ms: the first and last 4 steps' medians, 3 rows x 32 tokens over the steps' total, and the 5
    decoder inputs of width 16 a row holds (5 x 16 floats, not the batch's)."""
    batch = 3
    step = fake_clock.patch(translation_decode).steps(ms / 1000 for ms in STEPS_MS)

    def decode_step(model, tokens, state):
        step()
        return torch.zeros(tokens.shape[0], model.config.vocab_size)

    monkeypatch.setattr(translation_decode, "start_decoding",
                        lambda model, source: SimpleNamespace(inputs=torch.zeros(source.shape[0], 5, 16), cache=None))
    monkeypatch.setattr(translation_decode, "decode_step", decode_step)
    row = translation_decode.translation_decode_case("mat", LENGTH, batch)
    assert row["step_ms_start"] == pytest.approx(statistics.median(STEPS_MS[:EDGE]))
    assert row["step_ms_end"] == pytest.approx(statistics.median(STEPS_MS[-EDGE:]))
    assert row["seconds"] == pytest.approx(sum(STEPS_MS) / 1000)
    assert row["tokens_per_second"] == pytest.approx(batch * LENGTH / row["seconds"])
    assert row["state_floats_per_row"] == 5 * 16


def test_the_crossover_is_the_shortest_length_where_mat_is_faster():
    """MAT is faster at 128 and 512: the crossover is 128, the first of them."""
    speeds = {64: (2.0, 1.0), 128: (1.0, 2.0), 256: (2.0, 1.0), 512: (1.0, 2.0)}  # length: (at, mat)
    rows = [{"kind": kind, "batch": 1, "T": length, "tokens_per_second": speed}
            for length, pair in speeds.items() for kind, speed in zip(("at", "mat"), pair, strict=True)]  # fmt: skip
    assert crossovers(rows) == {"B=1": 128}


def _fake_decoding(fake_clock, monkeypatch, durations, on_step=None):
    """``decode._markovian`` replaced by a model whose forward lasts the next of ``durations`` on the fake clock
    (and calls ``on_step``, if given)."""
    step = fake_clock.patch(decode).steps(durations)

    def markovian(kind, size):
        def forward(ids):
            step()
            if on_step is not None:
                on_step()
            return torch.zeros(ids.shape[0], size["vocab_size"])

        return torch.nn.Linear(2, 2), forward, {"layers": []}

    monkeypatch.setattr(decode, "_markovian", markovian)


def test_a_mark_at_the_last_generated_token_is_the_median_of_its_sixteen_steps(fake_clock, monkeypatch):
    """A length of exactly a mark (1,024 in --quick, 16,384 by default) timed that mark by its last step alone: one
    step reported as the median of 16. Now the 16 steps ending at the last one: step i takes i ms, so at L = 32
    the mark 32 reads the median of steps 17..32 (24.5 ms), not 32 ms."""
    _fake_decoding(fake_clock, monkeypatch, [0.5] + [ms / 1000 for ms in STEPS_MS])
    monkeypatch.setattr(decode, "MARKS", (1, 20, LENGTH))
    row = decode.decode_case("markov_local", LENGTH, 1, size={"vocab_size": 8})
    last_sixteen = statistics.median(STEPS_MS[LENGTH - decode.MARK_STEPS :])
    assert row["step_ms_at"] == {"1": pytest.approx(statistics.median(STEPS_MS[: decode.MARK_STEPS])),
                                 "20": pytest.approx(last_sixteen), str(LENGTH): pytest.approx(last_sixteen)}


@pytest.mark.parametrize(("mark", "length"),
                         [(1, 5), (1, 40), (1024, 1024), (1024, 1040), (1024, 2000), (16384, 16384)])  # fmt: skip
def test_every_mark_window_holds_the_mark_and_sixteen_steps_within_the_length(mark, length):
    window = range(length)[decode.mark_steps(mark, length)]
    assert mark - 1 in window and len(window) == min(decode.MARK_STEPS, length)
    if mark - 1 + decode.MARK_STEPS <= length:  # room for the 16 steps from the mark: exactly those
        assert window[0] == mark - 1


def test_the_peak_is_the_decoding_loops_not_the_weight_floors_measured_after_it(fake_clock, monkeypatch):
    """The floor's vectors and products were allocated before the peak was read (the row's dict called the floor
    first), so they counted as the loop's memory. A loop that holds 16 MiB and a floor that holds 96 MiB: the peak is
    the loop's."""
    held = []

    def hold_16_mib():  # the loop's cache: 16 MiB from its first step on (allocated once: no heap churn)
        held[:] = held or [torch.ones(4 * 2**20)]

    _fake_decoding(fake_clock, monkeypatch, [0.001] * (LENGTH + 1), on_step=hold_16_mib)

    def floor(model, batch, device):
        block = torch.ones(24 * 2**20)  # 96 MiB, touched
        return float(block[0])

    monkeypatch.setattr(decode, "matvec_floor_ms", floor)
    row = decode.decode_case("markov_local", LENGTH, 1, size={"vocab_size": 8})
    assert 16 <= row["peak_mib"] < 64, row["peak_mib"]
