"""The benchmark suite's cases and what is read from their rows: a layer timed against its projections, a model's
tokens per second, cached decoding's cache sizes, peak-memory readings, the bench models, the window kinds, the
targets and the figures of every part."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer.bench import BenchSettings
from markovformer.bench.cases import run_case
from markovformer.bench.measure import PeakMemory
from markovformer.bench.models import MODELS, build_model, loss_of
from markovformer.bench.plots import write_plots
from markovformer.bench.report import summarise, targets, time_per_key
from markovformer.bench.windows import local_attention_available, parse_kind, window_forward
from markovformer.layers.baselines.recurrent import GRUMixer

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


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
                            row("markov_local", 8192, tokens_per_second=500.0),
                            row("softmax", 8192, tokens_per_second=100.0),
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
    assert found["markov_local_over_softmax_tokens_per_second_8192"] == {"value": 5.0, "target": ">= 8", "met": False}
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
