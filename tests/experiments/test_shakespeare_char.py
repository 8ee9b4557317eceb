"""``shakespeare-char``: the nanoGPT row is nanoGPT's model (its parameter count in closed form, GPT-2's init, no
biases), the ladder moves one option at a time, the full-split score counts every target once, and (slow) the quick
run's softmax model beats the unigram entropy of the text."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from markovformer.experiments import shakespeare_char
from markovformer.experiments.shakespeare_char import (
    LADDER_ROWS,
    ShakespeareCharSettings,
    full_split_loss,
    random_batch_loss,
    run_config,
    settings_from,
    unigram_entropy,
    validation_curve,
)
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM


class _Bigram(nn.Module):
    """logits of token t depend on token t alone: any windowing gives each target the same loss."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, vocab, generator=torch.Generator().manual_seed(0)))

    def forward(self, ids):
        return type("Output", (), {"logits": self.table[ids]})()


@torch.no_grad()
def _naive_mean(model: _Bigram, tokens: torch.Tensor) -> float:
    return float(torch.nn.functional.cross_entropy(model.table[tokens[:-1]], tokens[1:]))


@pytest.mark.parametrize("length", [65, 66, 200, 257])  # a whole number of windows, one target over, in between
def test_full_split_loss_scores_every_target_once(length):
    tokens = torch.randint(0, 7, (length,), generator=torch.Generator().manual_seed(length))
    model = _Bigram(7)
    assert full_split_loss(model, tokens, block_size=64) == pytest.approx(_naive_mean(model, tokens), rel=1e-5)


def test_random_batches_sample_the_split_and_repeat_with_the_seed():
    tokens = torch.randint(0, 7, (3000,), generator=torch.Generator().manual_seed(1))
    model = _Bigram(7)
    first = random_batch_loss(model, tokens, 64, batches=4, batch_size=3, seed=5)
    assert first == random_batch_loss(model, tokens, 64, batches=4, batch_size=3, seed=5)
    assert first != random_batch_loss(model, tokens, 64, batches=4, batch_size=3, seed=6)
    many = random_batch_loss(model, tokens, 64, batches=200, batch_size=12, seed=0)  # ~4.7 passes over the split
    assert many == pytest.approx(_naive_mean(model, tokens), abs=0.03)
    with pytest.raises(ValueError, match="block_size"):
        random_batch_loss(model, tokens[:64], 64, batches=1, batch_size=1, seed=0)


def test_a_split_of_one_window_yields_that_window_and_the_last_start_is_drawn_too():
    """nanoGPT draws window starts in [0, len - block_size): block_size + 1 tokens hold one window, which every draw
    takes (one start fewer would leave none to draw), and block_size + 2 tokens hold two, the last one drawn too."""
    model = _Bigram(7)
    tokens = torch.randint(0, 7, (10,), generator=torch.Generator().manual_seed(2))
    one = random_batch_loss(model, tokens[:9], 8, batches=2, batch_size=3, seed=0)
    assert one == pytest.approx(_naive_mean(model, tokens[:9]), rel=1e-6)
    first, last = _naive_mean(model, tokens[:9]), _naive_mean(model, tokens[1:])
    assert first != pytest.approx(last)
    two = random_batch_loss(model, tokens, 8, batches=4, batch_size=5, seed=0)  # 20 draws of 2 starts
    assert min(first, last) + 1e-4 < two < max(first, last) - 1e-4


def test_unigram_entropy_is_the_cross_entropy_of_add_one_frequencies():
    train, val = [0, 0, 0, 1], [0, 1]
    # symbols {0, 1}; P(0) = 4/6, P(1) = 2/6
    assert unigram_entropy(train, val) == pytest.approx(-(math.log(4 / 6) + math.log(2 / 6)) / 2)


def _model(row: str, vocab: int = 65) -> MarkovianTransformerForCausalLM:
    section = run_config(row, "text.txt", "out", ShakespeareCharSettings())["model"]
    return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=vocab, **section))


@torch.no_grad()
def test_the_nanogpt_row_is_nanogpts_model():
    vocab, width, layers, positions = 65, 128, 4, 65
    model = _model("nanogpt", vocab)
    # nanoGPT with bias=False: per layer two LayerNorm weights, qkv, output projection, a 4x GELU MLP; then the tied
    # token embedding, the position table and the final LayerNorm weight
    per_layer = 2 * width + 3 * width * width + width * width + 2 * 4 * width * width
    assert model.num_parameters() == layers * per_layer + vocab * width + positions * width + width
    assert model.lm_head.weight is model.model.embed.weight
    residual = [p for n, p in model.named_parameters() if n.endswith(("out_proj.weight", "ffn.down.weight"))]
    others = [p for n, p in model.named_parameters() if n.endswith(("qkv.weight", "ffn.up.weight"))]
    assert len(residual) == len(others) == 2 * layers
    assert torch.cat([p.flatten() for p in residual]).std() == pytest.approx(0.02 / math.sqrt(2 * layers), rel=0.02)
    assert torch.cat([p.flatten() for p in others]).std() == pytest.approx(0.02, rel=0.02)
    # the library's defaults: biased LayerNorms, untied, every matrix at 0.02
    ours = _model("softmax_rotary", vocab)
    assert ours.model.final_norm.bias is not None and ours.lm_head.weight is not ours.model.embed.weight
    out_proj = torch.cat([b.attention.out_proj.weight.flatten() for b in ours.model.blocks])
    assert out_proj.std() == pytest.approx(0.02, rel=0.02)


def test_each_ladder_step_moves_one_option():
    settings = ShakespeareCharSettings()

    def options(row):
        values = run_config(row, "t", "o", settings)
        return {**values["model"], **values["data"]}

    for before, after in zip(LADDER_ROWS, LADDER_ROWS[1:], strict=False):
        a, b = options(before), options(after)
        changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)} - {"max_positions"}
        assert len(changed) == 1, (before, after, changed)
    assert options(LADDER_ROWS[-1])["position"] == "rotary" and options(LADDER_ROWS[-1])["ffn"] == "swiglu"


def test_a_warm_up_is_checked_against_the_steps_a_preset_sets():
    """A preset sets the steps after --set: shakespeare-char --set preset=gpu warmup_steps=3000 (5,000 steps) was
    refused against the CPU budget's 2,000; mixers --quick --set sizes=zoology-64 steps=30 took the panel's warm-up of
    50 unchecked and trained every cell at a rate that never peaked; --set sizes=zoology-64 warmup_steps=1000 (10,000
    steps) was refused against the small grid's 400."""
    from markovformer.experiments import mixers
    from markovformer.training.trainer_config import ConfigError

    assert settings_from({"preset": "gpu", "warmup_steps": 3000}).steps == 5000
    assert mixers.settings_from({"sizes": "zoology-64", "warmup_steps": 1000}).steps == 10_000
    with pytest.raises(ConfigError, match=r"mixers\.warmup_steps=50 is larger than mixers\.steps=30"):
        mixers.settings_from({"sizes": "zoology-64", "steps": 30}, quick=True)
    with pytest.raises(ConfigError, match=r"shakespeare-char\.warmup_steps=100 is larger than .*steps=30"):
        settings_from({"preset": "gpu", "steps": 30})


@torch.no_grad()
def test_the_gpu_preset_is_nanogpts_gpu_config():
    """config/train_shakespeare_char.py: 6 layers, 6 heads, 384 wide, block 256, batch 64, 5,000 iterations, dropout
    0.2, evaluated every 250 iterations on 200 batches; nanoGPT's model at that shape has 10.75 M parameters with its
    position table (10.65 M without, its printed count)."""
    settings = settings_from({"preset": "gpu"})
    values = run_config("nanogpt", "text.txt", "out", settings)
    trainer, data = values["trainer"], values["data"]
    assert (trainer["max_steps"], trainer["batch_size"], data["seq_len"], trainer["eval_every"]) == (5000, 64, 256, 250)
    assert (trainer["accelerator"], trainer["precision"], settings.eval_iters) == ("gpu", "bf16-mixed", 200)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=65, **values["model"]))
    width, layers, positions = 384, 6, 257
    assert (model.config.n_heads, model.config.dropout) == (6, 0.2)
    per_layer = 2 * width + 3 * width * width + width * width + 2 * 4 * width * width
    assert model.num_parameters() == layers * per_layer + 65 * width + positions * width + width == 10_745_472
    # a field named on the command line keeps its value; the rest of the preset still applies
    cut = settings_from({"preset": "gpu", "steps": 1000})
    assert (cut.steps, cut.d_model, cut.block_size) == (1000, 384, 256)
    with pytest.raises(ValueError, match="preset='tpu'"):
        settings_from({"preset": "tpu"})


def test_cpu_rows_name_no_device_options():
    """The CPU budget's configs name neither accelerator nor precision (the engine's defaults): the run names and
    cached cells of runs trained before the GPU preset existed stay valid."""
    for row in shakespeare_char.ROWS:
        trainer = run_config(row, "t", "o", ShakespeareCharSettings())["trainer"]
        assert "accelerator" not in trainer and "precision" not in trainer and trainer["eval_every"] == 2000


def test_the_validation_curve_is_read_from_the_engines_csv(tmp_path):
    """Lightning's CSV logger writes one row per logging call with the other columns empty."""
    log = tmp_path / "metrics.csv"
    log.write_text("epoch,step,train/loss,val/loss\n0,50,3.1,\n0,250,,2.25\n0,300,2.0,\n1,500,,1.75\n")
    assert validation_curve(log) == {250: 2.25, 500: 1.75}
    assert validation_curve(tmp_path / "absent.csv") == {}


def test_an_unknown_row_and_a_missing_text_are_refused(tmp_path):
    with pytest.raises(ValueError, match="row 'softmx'"):
        run_config("softmx", "t", "o", ShakespeareCharSettings())
    with pytest.raises(ValueError, match="rows="):
        shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides={"rows": ["softmx"]}, log=print)
    with pytest.raises(ValueError, match="data prepare tiny-shakespeare"):
        shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides={"data_path": str(tmp_path / "none.txt")},
                             log=print)  # fmt: skip
    assert not (tmp_path / "report.md").exists()


def _has_tiny_shakespeare() -> bool:
    try:
        return shakespeare_char.find_tiny_shakespeare().is_file()
    except ValueError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _has_tiny_shakespeare(), reason="Tiny Shakespeare absent: markovformer data prepare "
                    "tiny-shakespeare")  # fmt: skip
def test_quick_run_beats_the_unigram_entropy(tmp_path):
    report = shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides={}, log=lambda line: None)
    results = json.loads((tmp_path / "results.json").read_text())
    assert report.is_file() and (tmp_path / "val_loss.png").is_file()
    unigram = results["unigram_entropy"]
    assert 3.0 < unigram < 3.5  # ~3.3 nats: Tiny Shakespeare's character frequencies
    for cell in results["cells"]:
        # 200 steps: well below the unigram entropy, both ways of scoring; the two agree to sampling noise
        assert cell["full_split"] < unigram - 0.6 and cell["random_batches"] < unigram - 0.5, cell
        assert abs(cell["full_split"] - cell["random_batches"]) < 0.15
        assert Path(cell["run_dir"]).is_dir()


def test_the_new_model_options_are_checked():
    with pytest.raises(ValueError, match="init_scheme='gpt3'"):
        MarkovianTransformerConfig(vocab_size=5, init_scheme="gpt3")
    plain = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=16, n_heads=2, ffn="gelu"))
    bare = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=16, n_heads=2, ffn="gelu",
                                                                      bias=False))  # fmt: skip
    layers = plain.config.n_layers
    # bias=False drops two LayerNorm biases per block and the final one, and the GELU MLP's two (4 * 16 + 16)
    assert plain.num_parameters() - bare.num_parameters() == layers * (2 * 16 + 4 * 16 + 16) + 16


def _fake_cells(monkeypatch, losses: dict[str, float] | None = None) -> list[str]:
    """train_cell replaced by a record of the texts it was given, each row scoring ``losses[row]`` (else 2.1)."""
    trained = []

    def fake_cell(row, out_dir, settings, seed, log, data_path, data_digest):
        trained.append(data_path.read_text())
        loss = (losses or {}).get(row, 2.1)
        return {"row": row, "seed": seed, "run_dir": str(out_dir), "random_batches": loss, "full_split": loss,
                "engine_val": loss, "steps": 10, "train_seconds": 1.0, "tokens_per_second": 100.0, "cpu_seconds": None,
                "parameters": 1000, "val_targets": 99, "threads": 1, "val_curve": {}, "best_engine_val": loss,
                "device": "cpu"}  # fmt: skip

    monkeypatch.setattr(shakespeare_char, "train_cell", fake_cell)
    return trained


def test_cells_depend_on_the_texts_bytes_not_on_its_path(tmp_path, monkeypatch):
    """Moving the text reuses the finished cells; changing its contents (another text at the same path, or a
    re-prepared one) recomputes them instead of reporting the old text's losses beside the new text's name."""
    trained = _fake_cells(monkeypatch)
    first, moved, other = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "c.txt"
    first.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    moved.write_text(first.read_text())
    other.write_text("MENENIUS:\nWhy, masters, my good friends, mine honest neighbours,\n" * 40)

    def run(path):
        overrides = {"rows": ["nanogpt"], "data_path": str(path)}
        shakespeare_char.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)

    run(first)
    run(moved)
    assert trained == [first.read_text()]  # the same bytes elsewhere: reused
    run(other)
    assert trained == [first.read_text(), other.read_text()]  # other bytes: trained again


def test_a_ladder_step_missing_is_named_in_the_delta_and_single_changes_are_against_the_block(tmp_path, monkeypatch):
    _fake_cells(monkeypatch, {"nanogpt": 2.0, "ladder_contiguous": 1.9, "ladder_init": 1.7, "nanogpt_swiglu": 1.8})
    text = tmp_path / "t.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    rows = ["nanogpt", "ladder_contiguous", "ladder_init", "nanogpt_swiglu"]  # ladder_untied not run
    report = shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides={"rows": rows, "data_path": str(text)},
                                  log=lambda line: None).read_text()  # fmt: skip
    delta = {line.split(" | ")[0][2:]: line.split(" | ")[6] for line in report.splitlines()
             if line.startswith(("| nanogpt", "| ladder_"))}  # fmt: skip
    assert delta["ladder_contiguous"] == "-0.1000"  # one step: against the row above
    assert delta["ladder_init"] == "-0.2000 (vs ladder_contiguous)"  # two steps bundled, and said so
    assert delta["nanogpt_swiglu"] == "-0.2000"  # against the block, not the row above it


def test_rows_of_single_changes_take_their_delta_against_the_block_not_the_row_above():
    from markovformer.experiments.shakespeare_char import table_rows

    def cells(loss: float) -> list[dict]:
        return [{"seed": 0, "random_batches": loss, "full_split": loss, "parameters": 1, "cpu_seconds": None,
                 "tokens_per_second": 1.0}]  # fmt: skip

    by_row = {"block": cells(2.0), "a": cells(1.9), "b": cells(1.7)}
    labels = dict.fromkeys(by_row, "")
    alone = table_rows(by_row, ("block", "a", "b"), labels, curve_kept=False, base="block")
    assert [row[6] for row in alone] == ["", "-0.1000", "-0.3000"]  # b against the block, not against a
    ladder = table_rows(by_row, ("block", "a", "b"), labels, curve_kept=False)
    assert [row[6] for row in ladder] == ["", "-0.1000", "-0.2000"]
    assert [row[4] for row in alone] == ["2.0000 (n=1)", "1.9000 (n=1)", "1.7000 (n=1)"]  # one seed: no spread


def test_the_delta_between_rows_pairs_their_seeds():
    """A row of seed 0 alone against a row of seeds 0 and 1 (a report from the finished cells) took the difference of
    their means: seed 1's loss entered the row's step. Measured: -0.2263 where seed 0's own step was -0.2331."""
    from markovformer.experiments.shakespeare_char import table_rows

    def cells(losses: dict[int, float]) -> list[dict]:
        return [{"seed": seed, "random_batches": loss, "full_split": loss, "parameters": 1, "cpu_seconds": None,
                 "tokens_per_second": 1.0} for seed, loss in losses.items()]  # fmt: skip

    by_row = {"block": cells({0: 2.0, 1: 2.4, 2: 2.2}), "a": cells({0: 1.9}), "b": cells({1: 2.0, 2: 1.9}),
              "c": cells({0: 1.5})}  # fmt: skip
    labels = dict.fromkeys(by_row, "")
    steps = [row[6] for row in table_rows(by_row, tuple(by_row), labels, curve_kept=False)]
    assert steps == ["", "-0.1000 (seed 0)", "no common seed", "no common seed"]
    alone = [row[6] for row in table_rows(by_row, tuple(by_row), labels, curve_kept=False, base="block")]
    assert alone == ["", "-0.1000 (seed 0)", "-0.3500 (seeds 1, 2)", "-0.5000 (seed 0)"]
    same = {"block": cells({0: 2.0, 1: 2.4}), "a": cells({0: 1.9, 1: 2.1})}
    assert [row[6] for row in table_rows(same, ("block", "a"), labels, curve_kept=False)] == ["", "-0.2000"]


def test_only_finished_trains_nothing_and_lists_a_cell_stored_under_other_settings_as_not_run(tmp_path, monkeypatch):
    """only_finished=true checked that a cell's file existed: one stored under other settings (more steps, a kind's
    revision) was trained again instead of listed as not run."""
    trained = _fake_cells(monkeypatch)
    text = tmp_path / "t.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)

    def run(**overrides):
        overrides = {"rows": ["nanogpt", "ladder_contiguous"], "data_path": str(text), **overrides}
        return shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)

    run(rows=["nanogpt"])
    run(rows=["ladder_contiguous"], steps=7, warmup_steps=7)
    assert len(trained) == 2
    report = run(only_finished=True).read_text()  # ladder_contiguous is stored under steps=7 only
    assert len(trained) == 2 and "only_finished=true): ladder_contiguous_seed=0" in report.replace("\n", " ")


def _stubbed_cell(tmp_path, monkeypatch, results: dict):
    """train_cell with the engine stubbed to return ``results`` (a run of 10 steps of 3 windows of block_size 8; a
    bigram model over a 120-character text): (the cell, the network, the text's ids of the validation part)."""
    text = "".join("abcdefg"[(i * i + i // 3) % 7] for i in range(120))
    data = tmp_path / "t.txt"
    data.write_text(text)
    network = _Bigram(7)
    network.num_parameters = lambda: 49
    runner = types.ModuleType("markovformer.training.runner")  # the engine (and lightning) never imported
    runner.complete_run = lambda config: results
    runner.load_run = lambda run_dir: (None, network, None)
    runner.build_data = lambda config: SimpleNamespace(splits={"val": (90, 120)})
    monkeypatch.setitem(sys.modules, "markovformer.training.runner", runner)
    characters = SimpleNamespace(encode=lambda chars: ["abcdefg".index(c) for c in chars])
    monkeypatch.setattr(shakespeare_char, "load_tokenizer", lambda path: characters)
    settings = ShakespeareCharSettings(steps=10, batch_size=3, block_size=8, eval_iters=2)
    cell = shakespeare_char.train_cell("nanogpt", tmp_path, settings, 0, lambda line: None, data, "digest")
    return cell, network, torch.tensor(characters.encode(text[90:]))


def test_a_cells_tokens_per_second_counts_block_size_targets_per_window(tmp_path, monkeypatch):
    """tokens/s is the targets trained, steps x batch x block_size (a window of block_size + 1 tokens has block_size
    targets), over the training seconds, here 60 (67.5 counting each window's first token); the losses score the
    run's validation part."""
    cell, network, val = _stubbed_cell(tmp_path, monkeypatch, {"steps": 10, "train_seconds": 4.0, "val": {"loss": 1.5}})
    assert cell["tokens_per_second"] == 10 * 3 * 8 / 4.0 == 60.0
    assert (cell["steps"], cell["train_seconds"], cell["engine_val"], cell["parameters"]) == (10, 4.0, 1.5, 49)
    assert cell["val_targets"] == 29 and cell["full_split"] == pytest.approx(_naive_mean(network, val), rel=1e-6)


def test_a_cells_tokens_per_second_leave_the_start_up_and_the_validations_out(tmp_path, monkeypatch):
    """train_seconds holds the engine's start-up and its validations (the final one over the whole validation part,
    every eval_every steps under preset=gpu), which differ by model kind: the rate is over the steps' own seconds
    (here 2.5 of 4), 10 x 3 x 8 / 2.5 = 96 tokens a second, not 60."""
    results = {"steps": 10, "train_seconds": 4.0, "train_step_seconds": 2.5, "val": {"loss": 1.5}}
    cell = _stubbed_cell(tmp_path, monkeypatch, results)[0]
    assert cell["tokens_per_second"] == 10 * 3 * 8 / 2.5 == 96.0
    assert cell["train_seconds"] == 4.0


def test_a_report_from_the_cells_names_from_cells_as_why_a_cell_was_not_run(tmp_path, monkeypatch):
    """--from-cells left a cell out and the report said "only_finished=true", a setting the command never named."""
    from markovformer.experiments.report import stored_cells_only

    _fake_cells(monkeypatch)
    text = tmp_path / "t.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    overrides = {"rows": ["nanogpt", "ladder_contiguous"], "data_path": str(text)}
    shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides={**overrides, "rows": ["nanogpt"]},
                         log=lambda line: None)  # fmt: skip
    with stored_cells_only():
        report = shakespeare_char.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    text = report.read_text().replace("\n", " ")
    assert "(listed, not trained: --from-cells): ladder_contiguous_seed=0" in text
    assert "without --from-cells to train them" in text and "only_finished" not in text
