"""``mat-order``: the decoder state it reports is the closed form of each decoder; a small MAT learns the synthetic
task; order below the task's true order fails (slow); run() writes a report and reuses finished cells."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file

from markovformer.data.translation import SyntheticTranslationSource, collate_translation, corpus_bleu
from markovformer.experiments import mat_order
from markovformer.experiments import settings as settings_module
from markovformer.experiments.fitting import FitResult
from markovformer.experiments.mat_order import MatOrderSettings, decoder_state_floats, train_order_cell
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration


@pytest.mark.parametrize(
    ("order", "transparent", "expected"),
    [
        (3, True, 3 * 32),  # MAT: the last k layer-0 inputs
        (3, False, 2 * 2 * 3 * 32),  # n-gram masked: per layer keys and values of the last k positions
        (None, True, 2 * 2 * 20 * 32),  # transparent AT: a full cache
        (None, False, 2 * 2 * 20 * 32),  # AT: a full cache
    ],
)
def test_decoder_state_floats_is_the_closed_form(order, transparent, expected):
    config = MarkovTranslatorConfig(vocab_size=40, d_model=32, n_heads=4, n_encoder_layers=1, n_decoder_layers=2,
                                    order=order, transparent=transparent, dropout=0.0)  # fmt: skip
    model = MarkovTranslatorForConditionalGeneration(config).eval()
    sources = torch.randint(4, 40, (3, 7), generator=torch.Generator().manual_seed(0))
    assert decoder_state_floats(model, sources, tokens=20) == expected


# An easy variant (order 1, short sentences) that a small MAT learns in a few hundred steps: about 10 s on one core.
# Measured at 600 steps (torch 2.13 CPU, one thread): seeds 0, 2 and 3 reach BLEU 100 and validation loss < 0.005;
# seed 1 stalls at BLEU 82 (loss 0.37: it emits a repeated last token), so the test trains seed 0.
EASY = SyntheticTranslationSource(order=1, min_length=3, max_length=8, train_examples=1000, val_examples=50,
                                  test_examples=100)  # fmt: skip
FAST = replace(MatOrderSettings(), d_model=64, n_layers=2, batch_size=32, steps=600, eval_every=600)


def test_a_small_mat_learns_the_easy_synthetic_task():
    cell = train_order_cell(EASY.build(1), order=2, transparent=True, seed=0, settings=FAST)
    assert cell["bleu"] >= 90.0, cell["examples"]
    assert cell["final_val_loss"] < 0.1
    assert cell["state_floats_per_row"] == 2 * 64


@pytest.mark.slow
def test_order_below_the_true_order_loses_bleu():
    """The default task has true order 2: MAT k=2 learns it, k=1 cannot look the rule up and falls far behind."""
    bundle = SyntheticTranslationSource().build(0)
    settings = replace(MatOrderSettings(), steps=1200, eval_every=1200)
    second = train_order_cell(bundle, order=2, transparent=True, seed=0, settings=settings)
    first = train_order_cell(bundle, order=1, transparent=True, seed=0, settings=settings)
    assert second["bleu"] >= 85.0
    assert first["bleu"] <= second["bleu"] - 30.0


TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "steps": 3, "eval_every": 3, "train_examples": 64,
        "warmup_steps": 1}


def test_run_writes_the_report_and_reuses_cells(tmp_path, monkeypatch, kept_figures):
    lines = []
    overrides = {**TINY, "orders": [2, None], "transparent": [True, False]}  # as --set gives them (null: k = ∞)
    report = mat_order.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lines.append)
    results = json.loads((tmp_path / "results.json").read_text())
    cells = results["cells"]
    assert [(c["order"], c["transparent"]) for c in cells] == [(2, True), (None, True), (2, False), (None, False)]
    assert all(0.0 <= c["bleu"] <= 100.0 and c["steps"] == [0, 3] for c in cells)
    assert cells[0]["state_floats_per_row"] == 2 * 16  # MAT k=2, D=16
    assert results["settings"]["source_symbols"] == mat_order.QUICK.source_symbols  # quick's smaller task
    text = report.read_text()
    assert all(len(table) > 1 for table in markdown_tables(text))  # every table well formed, none empty
    assert "| 2 | on | MAT |" in text and "| inf | off | AT |" in text
    assert "Quick mode is a smoke test" in text and "the speed axis starts at 0" in text  # says what it shows
    for figure in ("bleu_vs_order.png", "speed_vs_order.png", "state_vs_order.png", "val_loss.png"):
        assert (tmp_path / figure).is_file()

    def no_training(*args, **kwargs):
        raise AssertionError("a finished cell was trained again")

    from markovformer.plots import experiments as plots

    kept_figures(plots)  # the second run's figures are the first's, checked above: not rendered again
    monkeypatch.setattr(mat_order, "train_order_cell", no_training)
    mat_order.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lines.append)
    assert sum("done earlier" in line for line in lines) == 4
    # the device is no part of a cell's key: cells trained on a GPU are reported from a CPU machine, and back
    monkeypatch.setattr(settings_module, "check_device", lambda device, name: None)  # "cuda" passes without a GPU
    mat_order.run(tmp_path, quick=True, seeds=(0,), overrides={**overrides, "device": "cuda"}, log=lines.append)
    assert sum("done earlier" in line for line in lines) == 8


def test_run_on_a_user_tsv(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"eins {i} zwei\tone {i} two\n" for i in range(60)), encoding="utf-8")
    overrides = {**TINY, "steps": 2, "eval_every": 2, "orders": [1], "transparent": [True], "tsv_path": str(path),
                 "tsv_vocab_size": 300}  # fmt: skip
    mat_order.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["data"] == str(path) and len(results["cells"]) == 1 and results["synthetic_task"] is None
    assert [p.stem for p in (tmp_path / "out" / "cells").iterdir()][0].startswith("tsv-")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"orders": [0, 2]}, "orders=.*must be positive"), ({"tsv_path": "/no/such.tsv"}, "no such file"),
     ({"order": [2]}, "unknown key mat-order.order"), ({"decay": "step"}, "decay='step' must be one of"),
     ({"dropout": 1.0}, "dropout=1.0 must lie"), ({"label_smoothing": -0.1}, "label_smoothing=-0.1 must lie"),
     ({"device": "gpu0"}, "device='gpu0' is no torch device"), ({"device": "meta"}, "device='meta': the cells run on"),
     *([] if torch.cuda.is_available() else [({"device": "cuda"}, "device='cuda': this torch sees no GPU")])],
)  # fmt: skip
def test_bad_settings_are_named(tmp_path, overrides, message):
    from markovformer.training.run_config import ConfigError

    with pytest.raises(ConfigError, match=message):
        mat_order.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)


def test_a_gpu_the_machine_does_not_have_is_refused_naming_those_it_has(monkeypatch):
    """device='cuda:3' on a one-GPU machine passed the check, then failed inside the first cell without the setting."""
    from markovformer.training.run_config import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    settings_module.check_device("cuda:0", "mat-order")
    with pytest.raises(ConfigError, match=r"mat-order.device='cuda:3': this machine has 1 GPU\(s\), cuda:0 to cud"):
        settings_module.check_device("cuda:3", "mat-order")


def test_an_order_the_translator_cannot_take_is_refused_before_any_cell_trains(tmp_path, monkeypatch):
    """orders=[1, 1000] trained k=1 (a minute in quick mode) and then failed at k=1000, above max_positions."""
    trained = []
    monkeypatch.setattr(mat_order, "train_order_cell", lambda *args, **kwargs: trained.append(args))
    overrides = {**TINY, "orders": [1, 1000]}
    with pytest.raises(ValueError, match=r"orders: k=1000 cannot be built: .*order=1000: must be at most max_posit"):
        mat_order.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    assert trained == []


def test_de_en_corpus_absent_is_a_clear_error(tmp_path):
    from markovformer.experiments import mat_order_corpus

    overrides = {**TINY, "corpus": "de-en", "de_en_path": str(tmp_path / "missing.tsv")}
    with pytest.raises(ValueError, match="de_en_path=.*missing.tsv"):
        mat_order.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    assert not (tmp_path / "out" / "cells").exists()  # nothing half-written
    with pytest.raises(ValueError, match="markovformer data prepare de-en"):  # the default names its recipe
        mat_order_corpus.de_en_path(MatOrderSettings(de_en_path=str(tmp_path / "data" / "de_en.tsv")))


def test_de_en_run_trains_every_decoder_in_both_directions(tmp_path):
    """corpus=de-en on a small TSV: the eight decoders of MAT's comparison in each direction, the en-de direction
    being the same pairs read backwards, and each decoder's state at batch 64 is 64 times its state at batch 1."""
    from markovformer.experiments import mat_order_corpus

    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"eins {i} zwei\tone {i} two\n" for i in range(80)), encoding="utf-8")
    overrides = {**TINY, "steps": 2, "eval_every": 2, "corpus": "de-en", "de_en_path": str(path),
                 "tsv_vocab_size": 300}  # fmt: skip
    report = mat_order.run(tmp_path / "out", quick=False, seeds=(0,), overrides=overrides, log=lambda line: None)
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
    expected = [(d, o, t) for d in ("de-en", "en-de") for o, t in mat_order_corpus.CELLS]
    assert [(c["direction"], c["order"], c["transparent"]) for c in cells] == expected
    for cell in cells:
        assert cell["state_bytes"]["64"] == 64 * cell["state_bytes"]["1"]
        assert 0.0 <= cell["bleu"] <= 100.0 and 0.0 <= cell["chrf"] <= 100.0
    mat1 = next(c for c in cells if c["order"] == 1 and c["transparent"])
    assert mat1["state_bytes"]["1"] == 4 * TINY["d_model"]  # MAT k = 1: one layer-0 input of float32
    assert "k=1 is" in report.read_text() and (tmp_path / "out" / "bleu_vs_order_de_en.png").is_file()
    assert "both directions of the same split" in report.read_text()
    for cell in cells:  # every test hypothesis is kept: its BLEU is recomputable, and bootstrapped in the report
        assert len(cell["hypotheses"]) == len(cell["references"]) == cell["test_pairs"]
        assert corpus_bleu(cell["hypotheses"], cell["references"]) == pytest.approx(cell["bleu"])
    significance = [t for t in markdown_tables(report.read_text()) if t[0][:2] == ["decoder", "seed 0"]]
    assert len(significance) == 2  # one per direction, a row per decoder, a p-value against the AT but for the AT
    for table in significance:
        assert [row[0] for row in table[1:]] == [mat_order_corpus.decoder_name(o, t) for o, t in mat_order_corpus.CELLS]
        assert [" (p " in row[1] for row in table[1:]] == [False] + [True] * 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (device=cuda)")
def test_de_en_cells_train_and_decode_on_the_gpu_as_on_the_cpu(tmp_path):
    """device=cuda: the same decoders train and decode on the GPU (every tensor of a cell there), with the CPU's
    validation losses to float tolerance after a few steps, and the cells name the GPU they ran on."""
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"eins {i} zwei\tone {i} two\n" for i in range(80)), encoding="utf-8")
    base = {**TINY, "steps": 4, "eval_every": 2, "corpus": "de-en", "de_en_path": str(path), "tsv_vocab_size": 300,
            "directions": ["de-en"], "orders": [2, None], "transparent": [True, False]}  # fmt: skip
    cells = {}
    for device in ("cpu", "cuda"):
        mat_order.run(tmp_path / device, quick=False, seeds=(0,), overrides={**base, "device": device},
                      log=lambda line: None)  # fmt: skip
        cells[device] = json.loads((tmp_path / device / "results.json").read_text())["cells"]
    assert [c["device"] for c in cells["cpu"]] == ["cpu"] * 3
    assert all(c["device"] == torch.cuda.get_device_name() for c in cells["cuda"])
    for cpu, gpu in zip(cells["cpu"], cells["cuda"], strict=True):
        assert gpu["val_losses"] == pytest.approx(cpu["val_losses"], rel=1e-3)
        assert gpu["state_bytes"] == cpu["state_bytes"]


def test_bootstrap_rows_mark_cells_without_hypotheses_and_need_the_at():
    from markovformer.experiments.mat_order_corpus import bootstrap_rows

    references = ["the cat sat on the mat", "a dog ran in the park", "we eat bread every day"] * 10
    hypotheses = ["the cat sat on a mat", "a dog ran in a park", "we eat bread each day"] * 10

    def cell(order, transparent, seed, kept=True):
        return {"direction": "de-en", "order": order, "transparent": transparent, "seed": seed,
                **({"hypotheses": hypotheses, "references": references} if kept else {})}  # fmt: skip

    kinds = ((None, False), (1, True))
    cells = [cell(None, False, 0), cell(1, True, 0, kept=False), cell(None, False, 1), cell(1, True, 1)]
    rows = bootstrap_rows(cells, "de-en", kinds, (0, 1))
    bleu = corpus_bleu(hypotheses, references)
    assert rows[0][0] == "AT (Transformer)" and rows[0][1].startswith(f"{bleu:.2f} ± ") and "(p" not in rows[0][1]
    assert rows[1][1] == "-"  # seed 0's MAT k=1 trained before hypotheses were kept
    assert rows[1][2].startswith(f"{bleu:.2f} ± ") and rows[1][2].endswith("(p 1.000)")  # a copy of the AT
    assert bootstrap_rows([cell(1, True, 0)], "de-en", kinds, (0,)) == []  # no AT: nothing to compare with


def test_de_en_orders_and_transparent_choose_the_decoders():
    from markovformer.experiments.mat_order_corpus import CELLS, chosen_cells

    assert chosen_cells(MatOrderSettings()) == CELLS  # the defaults: all eight
    assert chosen_cells(MatOrderSettings(orders=(1, 3), transparent=(True,))) == ((1, True), (3, True))
    assert chosen_cells(MatOrderSettings(orders=(3, None), transparent=(False,))) == ((None, False), (3, False))
    with pytest.raises(ValueError, match=r"orders=\[2\] x transparent=\[False\] choose none"):
        chosen_cells(MatOrderSettings(orders=(2,), transparent=(False,)))


def test_a_de_en_run_of_some_decoders_trains_only_those_and_says_what_it_lacks(tmp_path):
    """A process may run a share of the cells into a shared folder: without the AT, its report has no BLEU - AT
    and says the comparison needs the AT."""
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"eins {i} zwei\tone {i} two\n" for i in range(80)), encoding="utf-8")
    overrides = {**TINY, "steps": 2, "eval_every": 2, "corpus": "de-en", "de_en_path": str(path), "tsv_vocab_size": 300,
                 "orders": [1], "transparent": [True], "directions": ["de-en"]}  # fmt: skip
    report = mat_order.run(tmp_path / "out", quick=False, seeds=(0,), overrides=overrides, log=lambda line: None)
    cells = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
    assert [(c["direction"], c["order"], c["transparent"]) for c in cells] == [("de-en", 1, True)]
    text = report.read_text()
    assert "the AT (orders null, transparent false) is needed" in text
    assert "| MAT k=1 |" in text and all(len(table) > 1 for table in markdown_tables(text))


def test_the_translator_trains_with_the_settings_dropout_and_label_smoothing(monkeypatch):
    """fit_translator builds its model with ``dropout`` and smooths the training loss (never the validation loss)
    by ``label_smoothing``."""
    seen = []
    forward = MarkovTranslatorForConditionalGeneration.forward

    def recording(self, *args, **kwargs):
        seen.append((self.training, kwargs.get("label_smoothing", 0.0)))
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(MarkovTranslatorForConditionalGeneration, "forward", recording)
    settings = replace(MatOrderSettings(), **{**TINY, "steps": 2, "eval_every": 2}, dropout=0.25,
                       label_smoothing=0.1)  # fmt: skip
    model, *_ = mat_order.fit_translator(EASY.build(0), 2, True, 0, settings)
    assert model.config.dropout == 0.25
    assert [s for training, s in seen if training] == [0.1, 0.1]
    assert {s for training, s in seen if not training} == {0.0}


def test_reversed_bundle_swaps_every_pair():
    from markovformer.data.bundle import DataBundle
    from markovformer.experiments.mat_order_corpus import reversed_bundle

    pair = {"src_ids": torch.tensor([5, 6]), "tgt_ids": torch.tensor([7])}
    bundle = DataBundle(train=[pair], val=[pair], test=[pair], info={"vocab_size": 8})
    flipped = reversed_bundle(bundle)
    for split in (flipped.train, flipped.val, flipped.test):
        assert split[0]["src_ids"].tolist() == [7] and split[0]["tgt_ids"].tolist() == [5, 6]
    assert bundle.train[0]["src_ids"].tolist() == [5, 6]  # the original is untouched


@pytest.mark.slow
def test_de_en_quick_learns_and_order_one_trails(tmp_path):
    """``mat-order --quick --set corpus=de-en`` on the prepared de-en pairs (skipped without them): the AT and MAT
    k = 1, 3 each take the validation loss at least 2.5 nats below its start (log of the 2,000-token vocabulary,
    7.6), and MAT k = 1, which sees one previous target token, ends with a higher validation loss than k = 3."""
    from markovformer.data.recipes.locations import prepared_candidates

    if not any(path.is_file() for path in prepared_candidates("data/de_en.tsv")):
        pytest.skip("no data/de_en.tsv (`markovformer data prepare de-en`, or $MARKOVFORMER_DATA)")
    mat_order.run(tmp_path, quick=True, seeds=(0,), overrides={"corpus": "de-en"}, log=lambda line: None)
    cells = {(c["order"], c["transparent"]): c for c in json.loads((tmp_path / "results.json").read_text())["cells"]}
    assert set(cells) == {(None, False), (1, True), (3, True)}
    for cell in cells.values():
        assert cell["final_val_loss"] <= cell["val_losses"][0] - 2.5, cell["val_losses"]
    assert cells[(1, True)]["final_val_loss"] > cells[(3, True)]["final_val_loss"]


def test_decode_speed_counts_the_generated_tokens_not_the_padding(monkeypatch):
    """train_order_cell's tokens/s over a decode that returns every test target and its eos, padded on the right to
    the longest (as generate pads rows that ended): the count is the targets' lengths plus one eos each, over the
    decode's seconds (stubbed: 2.5); counting the batch's every entry would add the padding to the speed."""
    bundle = EASY.build(0)
    model = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=bundle.info["vocab_size"], d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, order=2,
        transparent=True, max_positions=80)).eval()  # fmt: skip
    every = {name: [split[i] for i in range(len(split))] for name, split in
             (("train", bundle.train), ("val", bundle.val), ("test", bundle.test))}  # fmt: skip
    labels = collate_translation(every["test"])["labels"]  # y <eos>, -100 after it
    perfect = labels.masked_fill(labels == -100, model.config.pad_token_id)
    model.generate = lambda *args, **kwargs: perfect
    fit = FitResult(steps=[0, 3], evaluations=[2.0, 1.0], seconds=7.0)
    monkeypatch.setattr(mat_order, "fit_translator", lambda *args: (model, fit, every, 16))
    clock = iter([100.0, 102.5])
    monkeypatch.setattr(mat_order, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    cell = train_order_cell(bundle, order=2, transparent=True, seed=0, settings=FAST)
    generated = sum(len(example["tgt_ids"]) + 1 for example in every["test"])
    assert generated < perfect.numel()  # rows of 3 to 8 targets: some are padded
    assert cell["decode_seconds"] == 2.5 and cell["decode_tokens_per_s"] == pytest.approx(generated / 2.5)
    assert cell["bleu"] == pytest.approx(100.0) and cell["exact_match"] == 1.0  # each row scored against its own


@pytest.mark.parametrize(
    ("order", "transparent", "n_layers", "name"),
    [(3, False, 2, "n-gram masked (sees 5)"), (2, False, 4, "n-gram masked (sees 5)"),
     (1, False, 3, "n-gram masked (sees 1)"), (3, True, 2, "MAT"), (None, True, 2, "transparent AT"),
     (None, False, 2, "AT")],
)  # fmt: skip
def test_the_row_name_of_an_ngram_mask_counts_the_tokens_it_leaks(order, transparent, n_layers, name):
    """Without transparency each of L layers widens an order-k mask's reach by k - 1 inputs: the decoder sees
    L(k - 1) + 1 previous tokens (k = 1 sees one at any depth; L·k would say 3 for it, and 6 for k = 3 at L = 2)."""
    assert mat_order._row_name({"order": order, "transparent": transparent, "n_layers": n_layers}) == name


def test_the_de_en_verdict_states_the_papers_three_numbers_with_their_signs():
    """AT 30, MAT k = 1, 3, 5 at 26.5, 28, 29.5: k = 1 loses 3.5, k = 3 -> 5 gains 1.5 (a gain, +), k = 5 is 0.5
    short of the AT; a sign turned round would read as BLEU falling from k = 3 to 5."""
    from markovformer.experiments.mat_order_corpus import verdict

    means = {(None, False): {"bleu": 30.0}, (None, True): {"bleu": 31.0}, (1, True): {"bleu": 26.5},
             (2, True): {"bleu": 27.0}, (3, True): {"bleu": 28.0}, (5, True): {"bleu": 29.5}}  # fmt: skip
    assert verdict(means) == ("k=1 is 3.5 BLEU below the AT (paper: about 3.4 below); k=3 -> k=5 changes BLEU by "
                              "+1.5 (paper: flat beyond 3-4); k=5 is 0.5 BLEU below the AT (paper: within 0.3). Per k: "
                              "1: 26.5, 2: 27.0, 3: 28.0, 5: 29.5.")  # fmt: skip
    falling = {**means, (5, True): {"bleu": 27.3}}
    assert "k=3 -> k=5 changes BLEU by -0.7 " in verdict(falling) and "k=5 is 2.7 BLEU below" in verdict(falling)
    above = {**means, (1, True): {"bleu": 31.0}}  # a decoder above the AT is said to be above, not -1.0 below
    assert verdict(above).startswith("k=1 is 1.0 BLEU above the AT")


def test_the_de_en_table_and_figure_measure_every_decoder_against_the_at(tmp_path, monkeypatch):
    """run_de_en with its cells fabricated (two seeds each): the "BLEU - AT" column is each decoder's mean BLEU minus
    the AT's (the Transformer, not the transparent AT beside it), and the figure's AT line stands at the AT's mean."""
    from markovformer.experiments import mat_order_corpus
    from markovformer.plots import experiments as plots

    bleu = {(None, False): 30.0, (None, True): 31.5, (1, True): 26.0, (3, True): 29.0, (3, False): 27.5}

    def fake_cell(bundle, direction, order, transparent, seed, settings, log=None):
        return {"direction": direction, "order": order, "transparent": transparent, "seed": seed,
                "bleu": bleu[(order, transparent)] + (1.0 if seed else -1.0), "chrf": 50.0, "final_val_loss": 1.0,
                "decode_tokens_per_s": {"1": 10.0, "64": 100.0}, "state_bytes": {"1": 1024, "64": 65536},
                "train_seconds": 1.0}  # fmt: skip

    panels = []

    def record(drawn, path, *labels):
        panels.extend(drawn)
        return path

    monkeypatch.setattr(mat_order_corpus, "train_corpus_cell", fake_cell)
    monkeypatch.setattr(mat_order_corpus, "load_translation", lambda *args, **kwargs: None)  # the cells take no data
    monkeypatch.setattr(mat_order_corpus, "check_cell_configs", lambda *args: None)  # nor do their configs
    monkeypatch.setattr(plots, "plot_panels", record)
    path = tmp_path / "pairs.tsv"
    path.write_text("eins\tone\n", encoding="utf-8")
    settings = MatOrderSettings(corpus="de-en", de_en_path=str(path), directions=("de-en",), orders=(None, 1, 3),
                                transparent=(True, False))  # fmt: skip
    report = mat_order_corpus.run_de_en(tmp_path / "out", settings, (0, 1), lambda line: None)
    (table,) = [t for t in markdown_tables(report.read_text()) if t[0][:4] == ["decoder", "BLEU", "chrF", "BLEU - AT"]]
    names = {mat_order_corpus.decoder_name(*kind): kind for kind in bleu}
    assert {row[0]: float(row[3]) for row in table[1:]} == {name: bleu[kind] - 30.0 for name, kind in names.items()}
    assert {row[0]: float(row[1]) for row in table[1:]} == {name: bleu[kind] for name, kind in names.items()}
    (panel,) = panels
    assert panel.references == {"AT (Transformer)": 30.0, "transparent AT": 31.5}


def _cell(order, transparent, seed, bleu, floats):
    return {"order": order, "transparent": transparent, "seed": seed, "n_layers": 2, "bleu": bleu,
            "exact_match": 0.5, "final_val_loss": 0.1, "decode_tokens_per_s": 1000.0, "state_floats_per_row": floats,
            "train_seconds": 1.0, "steps": [0, 3], "val_losses": [1.0, 0.5]}  # fmt: skip


def test_cells_are_read_back_when_an_order_or_a_decoder_kind_is_added(tmp_path, monkeypatch, kept_figures):
    """A cell depends on its training and its data, not on the lists of orders and decoder kinds (every cell was
    keyed on them and trained again when one was added) nor on the de-en corpus's settings."""
    from markovformer.plots import experiments as plots

    kept_figures(plots)  # the figures are another test's: not rendered here
    trained = []

    def cell(bundle, order, transparent, seed, settings, log):
        trained.append((order, transparent))
        return _cell(order, transparent, seed, 50.0, 64)

    monkeypatch.setattr(mat_order, "train_order_cell", cell)

    def run(**overrides):
        mat_order.run(tmp_path, quick=True, seeds=(0,), overrides={**TINY, "orders": [1], "transparent": [True],
                                                                   **overrides}, log=lambda line: None)  # fmt: skip

    run()
    run(orders=[1, 2], transparent=[True, False], beam_size=2, tsv_max_length=64)
    assert trained == [(1, True), (2, True), (1, False), (2, False)]
    run(steps=4)  # a setting the cell reads: trained again
    assert trained[4:] == [(1, True)]


def test_the_state_axis_is_logarithmic_and_the_legend_names_and_hides_no_point(tmp_path, monkeypatch, kept_figures):
    """The state spans 64 floats (k = 1) to 16,384 (k = ∞): on a linear axis k = 1 and 2 read as 0. The BLEU
    legend covered the ∞ star at the top right, which it did not name."""
    from markovformer.plots import experiments as plots

    figures = kept_figures(plots)
    measured = {1: (48.3, 64), 2: (97.8, 128), None: (95.8, 16_384)}  # the quick run's BLEU and state floats
    monkeypatch.setattr(mat_order, "train_order_cell", lambda bundle, order, transparent, seed, settings, log:
                        _cell(order, transparent, seed, *measured[order]))  # fmt: skip
    mat_order.run(tmp_path, quick=True, seeds=(0,), overrides={"orders": [1, 2, None], "transparent": [True]},
                  log=lambda line: None)  # fmt: skip
    bleu, _speed, state = (figure.axes[0] for figure in list(figures.values())[:3])
    assert state.get_yscale() == "log" and bleu.get_yscale() == "linear"
    bleu.figure.canvas.draw()
    box = bleu.get_legend().get_window_extent()
    assert "transparent at ∞" in [text.get_text() for text in bleu.get_legend().get_texts()]
    for line in bleu.get_lines():
        if line.get_transform() != bleu.transData:
            continue  # the divider, drawn across the axes
        radius = line.get_markersize() * bleu.figure.dpi / 72 / 2
        for x, y in bleu.transData.transform(line.get_xydata()):
            assert not (box.x0 - radius <= x <= box.x1 + radius and box.y0 - radius <= y <= box.y1 + radius)
