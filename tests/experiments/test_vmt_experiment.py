"""``vmt``: the training loop walks documents window by window with the carry (Algorithm 1), the held-out bounds
chain windows, both models score the same tokens, and a tiny run's report obeys the bounds' invariants."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file

from markovformer.data.synthetic.state_space import HiddenMarkovParameters, StickyHMMSource
from markovformer.experiments import EXPERIMENTS, vmt, vmt_report
from markovformer.experiments.report import ExperimentReport
from markovformer.experiments.vmt import VMTSettings, text_data, transformer_model, vmt_model
from markovformer.experiments.vmt_runs import EngineRun, _checkpoints, _tail_kl, stacked_documents, vmt_run_values
from markovformer.experiments.vmt_training import add_one_frequencies, evaluate_transformer, evaluate_vmt
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.plots import experiments as plots

ROOT = Path(__file__).resolve().parents[2]
TINY = dict(latent_dim=4, d_model=16, n_layers=1, n_heads=2, hidden_dim=32, batch_size=4, kl_warmup_steps=5,
            lg_window=8, lg_steps=10, lg_eval_every=5, lg_latent_dim=3, lg_doc_len=32, lg_train_documents=8,
            lg_val_documents=4, hmm_windows=(4,), hmm_steps=10, hmm_doc_len=64, hmm_train_documents=8,
            hmm_val_documents=2, text_windows=(8,), text_steps=10, text_doc_len=64, text_val_chars=256,
            iw_samples=5)  # fmt: skip


def reading_vmt(**changes) -> VariationalMarkovTransformer:
    """A tiny VMT whose posterior reads its window (a fresh residual posterior equals the prior)."""
    torch.manual_seed(0)
    values = dict(vocab_size=64, latent_dim=3, d_model=16, n_layers=1, n_heads=2, hidden_dim=16, skip_length=2)
    model = VariationalMarkovTransformer(VMTConfig(**{**values, **changes}))
    with torch.no_grad():
        for posterior in (model.posterior_init, model.posterior_step):
            torch.nn.init.normal_(posterior.base.from_context.weight, std=0.3)
    return model


def test_held_out_bounds_chain_windows_only_with_the_carry():
    model = reading_vmt().eval()
    documents = torch.randint(0, 64, (3, 24), generator=torch.Generator().manual_seed(0))
    changed = documents.clone()
    changed[:, :8] = (changed[:, :8] + 5) % 64  # only the first window differs
    for carry in (True, False):
        first = evaluate_vmt(model, documents, window=8, carry=carry, seed=1)["window_elbo"]
        second = evaluate_vmt(model, changed, window=8, carry=carry, seed=1)["window_elbo"]
        assert first[0] != second[0]
        if carry:
            assert abs(first[1] - second[1]) > 1e-4  # window 2's bound depends on window 1 through the carry
        else:
            assert first[1:] == second[1:]
    result = evaluate_vmt(model, documents, window=8, carry=True, iw_samples=(1, 50), seed=2)
    assert result["elbo"] == pytest.approx(result["reconstruction"] - result["kl"])
    assert result["elbo"] == pytest.approx(sum(result["window_elbo"]) / 3)  # equal windows: the mean of windows
    assert result["iw_50"] > result["elbo"] and result["iw_50"] > result["iw_1"]


def test_transformer_scores_every_token_each_window_with_the_token_before_it_and_the_first_by_frequency():
    class Uniform(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lengths = []

        def forward(self, ids):
            self.lengths.append(ids.shape[1])
            return SimpleNamespace(logits=torch.zeros(*ids.shape, 7))

    model = Uniform()
    documents = torch.randint(0, 7, (2, 20), generator=torch.Generator().manual_seed(0))
    documents[:, :2] = torch.tensor([0, 1])  # the first tokens more frequent in training than the second ones
    loss = evaluate_transformer(model, documents, window=8, first_token_probs=torch.full((7,), 1 / 7))
    assert loss == pytest.approx(math.log(7))
    assert model.lengths == [8, 9, 5]  # the first window alone, then one token of context before each
    # every token is scored, as the VMT's bounds: each document's first by the training tokens' frequencies
    train = torch.tensor([[0, 0, 0, 1, 2, 3, 4, 5, 6]])
    probs = add_one_frequencies(train, 7)
    assert torch.allclose(probs, torch.tensor([4, 2, 2, 2, 2, 2, 2], dtype=torch.float64) / 16)
    expected = (-float(probs[documents[:, 0]].log().sum()) + 2 * 19 * math.log(7)) / 40
    assert evaluate_transformer(model, documents, window=8, first_token_probs=probs) == pytest.approx(expected)


@pytest.mark.parametrize("window, longest", [(4, 3), (8, 7), (16, 8)])
def test_the_skip_posterior_trains_on_skips_that_fit_a_window_up_to_8(window, longest):
    """A skip as long as the window pairs no two latents of it (a draw with no term): the longest is window - 1."""
    settings = VMTSettings()
    values = vmt_run_values(settings, {"source": "sticky_hmm"}, window=window, steps=10, carry=True, seed=0)
    assert values["model"]["skip_length"] == longest
    assert vmt_model(settings, window, 0, vocab_size=7).config.skip_length == longest


def test_the_transformer_baseline_has_about_the_vmts_size():
    settings = VMTSettings()
    vmt_size = vmt_model(settings, 16, 0, vocab_size=65).num_parameters()
    transformer = transformer_model(settings, 65, 16, vmt_size, 0)
    assert abs(transformer.num_parameters() / vmt_size - 1) < 0.05
    assert transformer.config.attention == "softmax" and transformer.config.n_layers == settings.transformer_layers
    # the model its stored cells were computed with (gpt2_style_config's before GPT-2's attention biases and init)
    assert (transformer.config.attention_bias, transformer.config.init_scheme) == (False, "normal")


def test_text_data_cuts_the_file_into_documents_of_doc_len_with_about_val_chars_held_out(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("abcdefghij" * 300)
    data = text_data(str(path), doc_len=20, val_chars=90)
    assert data["seq_len"] == 19  # the engine's windows of seq_len + 1 tokens are the VMT's documents
    train, val, test = data["fractions"]
    assert train == 0.9 and val * 3000 == pytest.approx(90) and train + val + test == pytest.approx(1.0)


def test_the_engine_run_config_holds_the_experiments_model_and_optimiser():
    settings = VMTSettings(lr=1e-3, batch_size=5, kl_warmup_steps=7, overlap=True)
    values = vmt_run_values(settings, {"source": "sticky_hmm"}, window=16, steps=40, carry=False, seed=3,
                            eval_every=10, latent_dim=2)  # fmt: skip
    model, trainer = values["model"], values["trainer"]
    assert values["task"] == "vmt" and values["model_type"] == "vmt"
    assert model["window"] == 16 and model["latent_dim"] == 2 and model["skip_length"] == 8
    # AdamW without weight decay at a constant rate (no warm-up, decay floor 1), clipping at 1, as the old loop did
    assert trainer["weight_decay"] == 0 and trainer["warmup_steps"] == 0 and trainer["lr_floor"] == 1.0
    assert tuple(trainer["betas"]) == (0.9, 0.999) and trainer["gradient_clip"] == 1.0 and trainer["lr"] == 1e-3
    options = values["task_options"]  # the VMT task's own options, not the trainer's
    assert options == {"carry": False, "window_overlap": True, "kl_warmup_steps": 7} and "carry" not in trainer
    assert trainer["checkpoint_every"] == 10 and trainer["max_steps"] == 40 and trainer["seed"] == 3


def test_a_tiny_run_obeys_the_bounds_invariants(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 60)
    lines = []
    # the bounds hold for any weights: a few steps per run, two step checkpoints in part 1
    overrides = {**TINY, "text_path": str(text), "lg_steps": 4, "lg_eval_every": 2, "hmm_steps": 2, "text_steps": 2,
                 "kl_warmup_steps": 2}  # fmt: skip
    report = vmt.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lines.append)
    body = report.read_text()
    assert "Part 1" in body and "Part 2" in body and "Part 3" in body
    assert all(len(table) > 1 for table in markdown_tables(body))  # every table well formed, none empty
    assert (tmp_path / "out" / "linear_gaussian.png").is_file() and (tmp_path / "out" / "hmm.png").is_file()
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    lg = results["linear_gaussian"]
    assert lg["models"]["learned"]["steps"] == [2, 4]  # the engine's step checkpoints, then the final model
    assert lg["models"]["true_p"]["steps"] == [2, 4]
    assert any((tmp_path / "out" / "runs").glob("linear_gaussian_learned_seed=0-*/model"))
    for kind, record in lg["models"].items():
        for values in record["evaluations"]:
            assert values["kl"] >= 0 and values["elbo"] == pytest.approx(values["reconstruction"] - values["kl"])
            assert values["iw_100"] > values["elbo"]  # many paths beat one
            assert values["iw_100"] > values["iw_1"] - 0.05
        if kind == "true_p":  # the true generative model: every bound lies below the exact likelihood
            assert all(values["iw_100"] < lg["exact"] + 0.05 for values in record["evaluations"])
    for cell in results["hmm"]:
        assert cell["restart"] >= cell["exact"] - 1e-9 and cell["loss"] > cell["exact"] - 0.05
        if cell["model"] != "transformer":
            assert cell["loss"] > cell["iw_loss"] - 0.02 and cell["kl"] >= 0  # −ELBO ≥ −IW
    assert {cell["model"] for cell in results["text"]} == set(vmt.MODELS)
    for cell in results["text"]:
        assert cell["bits_per_char"] == pytest.approx(cell["loss"] / math.log(2))
    lines.clear()
    vmt.run(tmp_path / "out", quick=True, seeds=(0,), overrides=overrides, log=lines.append)
    assert sum("done earlier" in line for line in lines) == 1 + 2 * len(vmt.MODELS)


def test_the_text_part_is_skipped_without_a_file(tmp_path):
    lines = []
    overrides = {**TINY, "text_path": str(tmp_path / "missing.txt"), "lg_steps": 2, "lg_eval_every": 2,
                 "hmm_steps": 2, "kl_warmup_steps": 2}  # fmt: skip
    report = vmt.run(tmp_path, quick=True, seeds=None, overrides=overrides, log=lines.append)
    assert any("part 3 skipped" in line for line in lines) and "Part 3 skipped" in report.read_text()
    assert "vmt" in EXPERIMENTS


@pytest.mark.slow
def test_the_quick_run(tmp_path):
    report = vmt.run(tmp_path, quick=True, seeds=None, overrides={}, log=lambda line: None)
    assert "Part 1" in report.read_text()


def test_an_edited_text_trains_a_new_vmt_run(tmp_path):
    """Part 3 named its runs by the text's path: a text edited in place was read back from the old run."""
    from markovformer.experiments.vmt_runs import vmt_run_dir, vmt_run_values

    text, settings = tmp_path / "text.txt", VMTSettings()
    names = []
    for content in ("abc def\n" * 3000, "xyz uvw\n" * 3000, "abc def\n" * 3000):
        text.write_text(content)
        data = text_data(str(text), settings.text_doc_len, settings.text_val_chars)
        values = vmt_run_values(settings, data, window=16, steps=10, carry=True, seed=0)
        names.append(vmt_run_dir(values, tmp_path / "runs", "text").name)
    assert names[0] != names[1] and names[0] == names[2]


HMM = {"doc_len": 64, "train_documents": 2, "val_documents": 3, "test_documents": 1}


def _hmm_val_and_parameters() -> tuple[torch.Tensor, HiddenMarkovParameters]:
    bundle = StickyHMMSource(**HMM).build(0)
    return stacked_documents(bundle.val, "input_ids"), HiddenMarkovParameters(**bundle.info["parameters"])


def test_the_restart_floor_restarts_the_forward_algorithm_at_every_window():
    val, parameters = _hmm_val_and_parameters()
    whole = -float(parameters.log_likelihood(val).mean())
    assert vmt._restart_reference(parameters, val, 64) == pytest.approx(whole)  # one window: no restart
    halves = -float(torch.cat([parameters.log_likelihood(val[:, :32]), parameters.log_likelihood(val[:, 32:])],
                              dim=1).mean())  # fmt: skip
    assert vmt._restart_reference(parameters, val, 32) == pytest.approx(halves)
    assert halves > whole  # forgetting the state costs likelihood on a sticky HMM


def test_a_part_2_cell_holds_the_exact_references_for_its_window(monkeypatch, tmp_path):
    monkeypatch.setattr(vmt, "_sequence_cell", lambda kind, window, *args, **kwargs: {"model": kind, "window": window})
    settings = VMTSettings(hmm_doc_len=64, hmm_train_documents=2, hmm_val_documents=3)
    cell = vmt.memory_cell("vmt_carry", 32, settings, 0, tmp_path, lambda line: None)
    val, parameters = _hmm_val_and_parameters()
    assert cell["exact"] == pytest.approx(-float(parameters.log_likelihood(val).mean()), rel=1e-6)  # nats per token
    assert cell["restart"] == pytest.approx(vmt._restart_reference(parameters, val, 32))
    assert cell["exact"] < cell["restart"] < cell["marginal"] + 0.2


def test_a_vmt_cells_importance_weighted_loss_lies_between_zero_and_its_elbo_loss(monkeypatch, tmp_path):
    """−log P(tokens) >= 0, and −IW bounds it from above, below −ELBO (up to Monte-Carlo noise)."""
    torch.manual_seed(0)
    model = VariationalMarkovTransformer(VMTConfig(vocab_size=16, latent_dim=3, d_model=16, n_layers=1, n_heads=2,
                                                   hidden_dim=16, window=4, skip_length=2)).eval()  # fmt: skip
    monkeypatch.setattr(vmt, "train_vmt_run", lambda values, runs, name, log: EngineRun(tmp_path, model, 1.0, 0.1, []))
    documents = torch.randint(0, 16, (3, 16), generator=torch.Generator().manual_seed(0))
    cell = vmt._sequence_cell("vmt_carry", 4, {"source": "sticky_hmm"}, documents, documents, 16, 10,
                              VMTSettings(iw_samples=20), 0, tmp_path, lambda line: None, "t")  # fmt: skip
    assert 0 < cell["iw_loss"] < cell["loss"] + 0.05


def _window_4_cells() -> list[dict]:
    common = {"window": 4, "kl": 0.1, "train_kl": 0.1, "seconds": 1.0, "parameters": 100, "restart": 1.5, "exact": 0.9}
    return [{**common, "model": "vmt_carry", "loss": 1.0, "iw_loss": math.log(2)},
            {**common, "model": "vmt_no_carry", "loss": 1.3, "iw_loss": 1.2},
            {**common, "model": "transformer", "loss": 0.8, "iw_loss": None}]


def test_the_comparison_line_says_what_the_carry_gains_and_where_the_vmt_stands():
    """Both differences are positive when the first-named model is worse (no carry 1.3 > carry 1.0 > 0.8)."""
    line = vmt_report.comparison(_window_4_cells(), "nats/token")
    assert "W=4: carry gains +0.3000, VMT with carry − Transformer +0.2000" in line
    scaled = vmt_report.comparison(_window_4_cells(), "bits/char", scale=1 / math.log(2))
    assert f"carry gains +{0.3 / math.log(2):.4f}" in scaled


def test_the_sequence_table_gives_every_loss_in_its_unit():
    columns, rows = vmt_report.sequence_table(_window_4_cells(), "bits/char", 5, scale=1 / math.log(2))
    carry = dict(zip(columns, rows[0], strict=True))
    assert carry["loss (bits/char)"] == pytest.approx(1 / math.log(2))
    assert carry["IW K=5 (bits/char)"] == pytest.approx(1.0)  # ln 2 nats = 1 bit


def test_part_1_states_each_bounds_gap_to_the_exact_likelihood(monkeypatch, tmp_path, kept_figures):
    kept_figures(plots)  # drawn, not rendered
    evaluations = [{"elbo": -1.5, "iw_1": -1.5, "iw_10": -1.3, "kl": 0.2, "reconstruction": -1.3},
                   {"elbo": -1.2, "iw_1": -1.2, "iw_10": -1.1, "kl": 0.1, "reconstruction": -1.1}]
    record = {"steps": [5, 10], "evaluations": evaluations, "seconds": 1.0, "train_kl": 0.1, "parameters": 10}
    lg = {"exact": -1.0, "entropy_rate": 1.0, "models": {"learned": record}}
    monkeypatch.setattr(vmt, "linear_gaussian_cell", lambda settings, seed, runs, log: lg)
    report = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={})
    vmt.linear_gaussian_part(report, VMTSettings(lg_iw_samples=(1, 10)), 0, lambda line: None)
    text = report.write().read_text()
    assert "learned: ELBO 0.2000, IW K=1 0.2000, IW K=10 0.1000" in text  # exact − final bound, >= 0
    (table,) = markdown_tables(text)
    assert table[0][2:5] == ["ELBO", "IW K=1", "IW K=10"] and table[2][2:5] == ["-1.2", "-1.2", "-1.1"]


def test_the_training_kl_is_the_mean_over_the_last_tenth_of_the_steps(tmp_path):
    (tmp_path / "logs").mkdir()
    rows = ["step,train/kl,train/loss"] + [f"{step},{step / 10},1.0" for step in range(10, 101, 10)]
    (tmp_path / "logs" / "metrics.csv").write_text("\n".join(rows) + "\n")
    assert _tail_kl(tmp_path, 100) == pytest.approx((9.0 + 10.0) / 2)  # the rows of steps 90 and 100


def test_step_checkpoints_come_oldest_first_by_step_number(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in (100, 20, 5):
        (folder / f"step-{step}.ckpt").mkdir()
    assert _checkpoints(tmp_path) == [(step, folder / f"step-{step}.ckpt") for step in (5, 20, 100)]


def test_the_transformer_cells_key_on_softmax_s_revision_and_the_vmt_cells_do_not(tmp_path, monkeypatch):
    """A fix raising softmax's revision recomputes the Transformer's cells (they reused them under any revision);
    at revision 1 the identity is what was stored before (settings and the scoring flag), so no cell is lost."""
    import dataclasses

    from markovformer.layers import registry

    settings = VMTSettings()
    vmt_cell = vmt._cell_identity(settings, "hmm", "vmt_carry")
    assert "revisions" not in vmt_cell and "scores_first_tokens" not in vmt_cell
    transformer = vmt._cell_identity(settings, "hmm", "transformer")
    assert transformer["scores_first_tokens"] is True and "revisions" not in transformer
    kind = registry.ATTENTION_KINDS["softmax"]
    monkeypatch.setitem(registry.ATTENTION_KINDS, "softmax", dataclasses.replace(kind, revision=kind.revision + 1))
    assert vmt._cell_identity(settings, "hmm", "transformer")["revisions"] == {"softmax": kind.revision + 1}
    assert vmt._cell_identity(settings, "hmm", "vmt_carry") == vmt_cell


def test_a_part_with_one_more_window_reads_back_its_cells_and_a_parts_settings_retrain_that_part_alone(
    monkeypatch, tmp_path, kept_figures
):
    """Every cell depended on all the settings: one more window, or another part's steps, trained every cell of
    every part again (part 1's two VMTs included). A cell depends on the settings of its own part and the shared
    ones; the text cells on the file's bytes, not its path."""
    kept_figures(plots)
    text = tmp_path / "input.txt"
    text.write_text("To be, or not to be.\n" * 40, encoding="utf-8")
    computed = []
    record = {"steps": [10], "evaluations": [{"elbo": -1.2, "kl": 0.1}], "seconds": 1.0, "train_kl": 0.1,
              "parameters": 10}  # fmt: skip

    def part_1(settings, seed, runs, log):
        computed.append(("lg",))
        return {"exact": -1.0, "entropy_rate": 1.0, "models": {"learned": record}}

    def sequence(part, model, window, settings, seed, runs, log):
        computed.append((part, window, model))
        cell = {"model": model, "window": window, "loss": 1.0, "iw_loss": 1.0, "kl": 0.1, "train_kl": 0.1,
                "seconds": 1.0, "parameters": 10}  # fmt: skip
        extra = {"restart": 1.5, "exact": 0.9, "marginal": 2.0} if part == "hmm" else {"val_chars": 9, "vocab_size": 9}
        return {**cell, **extra}

    monkeypatch.setattr(vmt, "linear_gaussian_cell", part_1)
    monkeypatch.setattr(vmt, "memory_cell", lambda *args: sequence("hmm", *args))
    monkeypatch.setattr(vmt, "text_cell", lambda *args: sequence("text", *args))

    def run(**overrides):
        settings = {"lg_iw_samples": [], "hmm_windows": [4], "text_windows": [8], "text_path": str(text), **overrides}
        vmt.run(tmp_path / "out", quick=True, seeds=None, overrides=settings, log=lambda line: None)

    run()
    assert len(computed) == 1 + 3 + 3
    del computed[:]
    run(hmm_windows=[4, 16], text_windows=[8, 32])
    assert computed == [("hmm", 16, m) for m in vmt.MODELS] + [("text", 32, m) for m in vmt.MODELS]
    del computed[:]
    run(hmm_windows=[4, 16], text_windows=[8, 32], hmm_steps=200, lg_steps=200)
    assert computed == [("lg",)] + [("hmm", w, m) for w in (4, 16) for m in vmt.MODELS]
    del computed[:]
    moved = tmp_path / "moved.txt"
    text.rename(moved)
    run(hmm_windows=[4, 16], text_windows=[8, 32], hmm_steps=200, lg_steps=200, text_path=str(moved))
    assert computed == []


def test_an_importance_weighted_k_below_one_is_refused_naming_the_setting_before_training(tmp_path):
    """lg_iw_samples=[0] trained part 1's two VMTs, then failed scoring them as 'num_samples=0: must be a positive
    integer'."""
    with pytest.raises(ValueError, match=r"vmt\.lg_iw_samples=\[1, 0\]: each K must be >= 1"):
        vmt.run(tmp_path / "out", quick=True, seeds=None, overrides={"lg_iw_samples": [1, 0]}, log=lambda line: None)
    assert not (tmp_path / "out").exists()


def test_a_kl_warm_up_longer_than_a_parts_training_is_refused_before_any_trains(tmp_path):
    """Each VMT run refuses a KL warm-up past its max_steps; the experiment trained the parts before the first run
    that did. Refused up front naming the experiment's settings, with nothing written."""
    overrides = {**TINY, "hmm_steps": 4, "kl_warmup_steps": 5}
    with pytest.raises(ValueError, match=r"vmt.kl_warmup_steps=5 is longer than vmt.hmm_steps=4"):
        vmt.run(tmp_path / "out", quick=True, seeds=None, overrides=overrides, log=lambda line: None)
    assert not (tmp_path / "out").exists()
