"""mat-order's de-en cells: ``keep_best`` ends each fit at its lowest validation loss and is part of a cell's key
only when on; "source use" is the validation loss with other pairs' sources minus the loss with their own."""

from __future__ import annotations

import json

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file

from markovformer.data.translation import collate_translation
from markovformer.experiments import mat_order, mat_order_corpus
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

TINY = {"d_model": 16, "n_heads": 2, "n_layers": 1, "warmup_steps": 1, "corpus": "de-en", "tsv_vocab_size": 300,
        "directions": ["de-en"], "orders": [None], "transparent": [False]}  # fmt: skip


def _pairs(seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    return [{"src_ids": torch.randint(3, 40, (int(n),), generator=generator),
             "tgt_ids": torch.randint(3, 40, (int(m),), generator=generator)}
            for n, m in torch.randint(2, 9, (12, 2), generator=generator)]  # fmt: skip


def test_source_use_is_zero_for_a_model_that_cannot_read_the_source_and_not_for_one_that_can():
    torch.manual_seed(0)
    config = MarkovTranslatorConfig(vocab_size=40, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                    d_ff=32, max_positions=32)  # fmt: skip
    model = MarkovTranslatorForConditionalGeneration(config).eval().requires_grad_(False)
    for layer in model.decoder_layers:  # an untrained model reads its source faintly: make it read it loudly
        layer.cross_attention.out.weight.mul_(30.0)
    pairs = _pairs(1)
    own = float(model(**collate_translation(pairs)).loss)
    other = mat_order_corpus.other_sources_loss(model, pairs, torch.device("cpu"))
    assert abs(other - own) > 1e-4  # a model that reads its source scores another source differently (100x the
    # tolerance of the comparisons below)
    rolled = [{"src_ids": pairs[(i + 1) % 12]["src_ids"], "tgt_ids": pair["tgt_ids"]} for i, pair in enumerate(pairs)]
    assert other == pytest.approx(float(model(**collate_translation(rolled)).loss), rel=1e-6)  # the next pair's
    for layer in model.decoder_layers:  # no cross-attention output: the decoder cannot see the source at all
        layer.cross_attention.out.weight.zero_()
        layer.cross_attention.out.bias.zero_()
    own = float(model(**collate_translation(pairs)).loss)
    assert mat_order_corpus.other_sources_loss(model, pairs, torch.device("cpu")) == pytest.approx(own, rel=1e-6)


def test_keep_best_cells_end_at_their_lowest_validation_loss_and_only_they_are_keyed_by_it(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"eins {i} zwei\tone {i} two\n" for i in range(80)), encoding="utf-8")
    base = {**TINY, "steps": 6, "eval_every": 2, "lr": 0.3, "de_en_path": str(path)}  # a rate that overshoots

    def run(**changes) -> dict:
        lines = []
        mat_order.run(tmp_path / "out", quick=False, seeds=(0,), overrides={**base, **changes}, log=lines.append)
        (cell,) = json.loads((tmp_path / "out" / "results.json").read_text())["cells"]
        return cell | {"read_back": not any("step" in line and "held-out" in line for line in lines)}

    plain = run()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "read de-en only" in report and "both directions" not in report  # it said both of a one-direction run
    assert "best_step" not in plain and plain["final_val_loss"] == plain["val_losses"][-1]
    kept = run(keep_best=True)
    assert not kept["read_back"]  # another fit: not the plain cell read back
    lowest = min(kept["val_losses"])
    assert lowest < kept["val_losses"][-1]  # the rate overshoots: the kept weights are not the last ones
    assert kept["final_val_loss"] == lowest and kept["val_losses"][kept["steps"].index(kept["best_step"])] == lowest
    assert kept["val_losses"] == plain["val_losses"]  # the same fit, only the weights it ends with differ
    assert run()["read_back"] and run(keep_best=True)["read_back"]  # each keeps its cell; the old keys are unchanged
    assert "val_loss_other_sources" in kept and isinstance(kept["val_loss_other_sources"], float)


def test_the_de_en_table_reports_source_use_as_the_mean_loss_gap_and_a_dash_for_cells_without_it(tmp_path,
                                                                                                 monkeypatch):
    def fake_cell(bundle, direction, order, transparent, seed, settings, log=None):
        other = {"val_loss_other_sources": 2.0 + 0.5 * seed} if order is None else {}  # the MAT: an older cell
        return {"direction": direction, "order": order, "transparent": transparent, "seed": seed, "bleu": 1.0,
                "chrf": 10.0, "final_val_loss": 1.5, "decode_tokens_per_s": {"1": 1.0, "64": 9.0},
                "state_bytes": {"1": 4, "64": 256}, "train_seconds": 1.0, **other}  # fmt: skip

    monkeypatch.setattr(mat_order_corpus, "train_corpus_cell", fake_cell)
    monkeypatch.setattr(mat_order_corpus, "load_translation", lambda *args, **kwargs: None)  # the cells take no data
    monkeypatch.setattr(mat_order_corpus, "check_cell_configs", lambda *args: None)
    path = tmp_path / "pairs.tsv"
    path.write_text("eins\tone\n", encoding="utf-8")
    settings = mat_order.MatOrderSettings(corpus="de-en", de_en_path=str(path), directions=("de-en",),
                                          orders=(None, 2), transparent=(False, True))  # fmt: skip
    report = mat_order_corpus.run_de_en(tmp_path / "out", settings, (0, 1), lambda line: None)
    (table,) = [t for t in markdown_tables(report.read_text()) if "source use" in t[0]]
    column = table[0].index("source use")
    use = {row[0]: row[column] for row in table[1:]}
    assert float(use["AT (Transformer)"]) == pytest.approx(0.75) and use["MAT k=2"] == "-"  # mean of 0.5 and 1.0
