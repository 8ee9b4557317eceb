"""The weight-tying behaviour (tied, d = 4, p + q > 1 ends at the unigram minimum), trained for real (a short
version of ``markovformer experiment weight-tying``); and, with the training stubbed, the verdict, the held-out
floor and sequences, and the report's tables against the switching chain's closed forms."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file: pytest puts the folder on the path

from markovformer.experiments import weight_tying
from markovformer.experiments.fitting import FitResult
from markovformer.experiments.weight_tying import WeightTyingSettings, train_switching_cell
from markovformer.markov import switching_chain
from markovformer.plots import experiments as plots

# 300 steps: both cells are as close to their references as after 600 (final loss 0.0006 and 0.0012 nats off,
# P(1 | .) within 0.003), and the untied cell is at the entropy rate by then, so a tied model that were not tied
# would fail the first test
FAST = replace(WeightTyingSettings(), steps=300, eval_every=300)


def test_tied_model_with_p_plus_q_above_one_ends_at_the_unigram_minimum():
    cell = train_switching_cell(0.7, 0.9, tied=True, seed=0, settings=FAST)
    assert cell["final_loss"] == pytest.approx(cell["unigram_entropy"], abs=0.01)
    # a near-constant prediction, close to π₁ = p / (p + q), whatever the last symbol
    assert abs(cell["p1_given_0"] - cell["p1_given_1"]) < 0.02
    assert cell["p1_given_0"] == pytest.approx(0.7 / 1.6, abs=0.02)


def test_untied_model_reaches_the_entropy_rate():
    cell = train_switching_cell(0.7, 0.9, tied=False, seed=0, settings=FAST)
    assert cell["final_loss"] == pytest.approx(cell["entropy_rate"], abs=0.01)
    assert cell["p1_given_0"] == pytest.approx(0.7, abs=0.03)  # P(1 | 0) = p
    assert cell["p1_given_1"] == pytest.approx(0.1, abs=0.03)  # P(1 | 1) = 1 - q


def test_tied_model_with_p_plus_q_below_one_reaches_the_entropy_rate():
    """SPEC 6: tying traps the model at the unigram solution only when p + q > 1; at (0.2, 0.3) it learns the chain
    (measured at 300 steps: 0.54461 against the entropy rate 0.54459, P(1 | 0) = 0.201, P(1 | 1) = 0.704)."""
    cell = train_switching_cell(0.2, 0.3, tied=True, seed=0, settings=FAST)
    assert cell["final_loss"] == pytest.approx(cell["entropy_rate"], abs=0.01)
    assert cell["p1_given_0"] == pytest.approx(0.2, abs=0.03)  # P(1 | 0) = p
    assert cell["p1_given_1"] == pytest.approx(0.7, abs=0.03)  # P(1 | 1) = 1 - q


def _entropy(p: float) -> float:
    return -sum(x * math.log(x) for x in (p, 1 - p) if x > 0)


def _closed_forms(p: float, q: float) -> tuple[float, float, float]:
    """P(p, q) flips 0 -> 1 with probability p and 1 -> 0 with q: π₁ = p / (p + q), the entropy rate
    π₀ H(p) + π₁ H(q) and the unigram entropy H(π₁)."""
    pi1 = p / (p + q)
    return pi1, (1 - pi1) * _entropy(p) + pi1 * _entropy(q), _entropy(pi1)


def test_the_verdict_names_the_reference_the_final_loss_reached():
    _, rate, unigram = _closed_forms(0.7, 0.9)
    cell = {"entropy_rate": rate, "unigram_entropy": unigram}
    assert weight_tying.verdict({**cell, "final_loss": rate + 0.005}) == "entropy rate"
    assert weight_tying.verdict({**cell, "final_loss": unigram - 0.005}) == "unigram H(π)"
    assert weight_tying.verdict({**cell, "final_loss": unigram + 0.1}) == "neither"


def test_the_held_out_floor_is_the_mean_conditional_entropy_of_the_held_out_contexts():
    """The true kernel's expected loss on the held-out sequences: at every position t < T - 1, the entropy of
    P(· | x_t), H(p) after a 0 and H(q) after a 1."""
    p, q, settings = 0.2, 0.3, replace(WeightTyingSettings(), eval_batch=8, seq_len=32)
    contexts = weight_tying.held_out_sequences(switching_chain(p, q), 0, settings)[:, :-1]
    expected = float(torch.where(contexts == 0, _entropy(p), _entropy(q)).double().mean())
    assert weight_tying.held_out_floor(p, q, 0, settings) == pytest.approx(expected, rel=1e-6)


def test_a_cell_is_scored_on_sequences_it_never_trained_on(monkeypatch):
    batches = []

    def fit(model, loss_on_batch, sample_batch, evaluate, *, seed, **options):
        batches.append(sample_batch(torch.Generator().manual_seed(seed)))  # the stream fit_on_stream draws first
        return FitResult(steps=[0], evaluations=[float(evaluate())])

    monkeypatch.setattr(weight_tying, "fit_on_stream", fit)
    settings = replace(WeightTyingSettings(), eval_batch=64, batch_size=64)
    train_switching_cell(0.2, 0.3, True, 0, settings)
    assert not torch.equal(batches[0], weight_tying.held_out_sequences(switching_chain(0.2, 0.3), 0, settings))


def test_the_report_tables_hold_the_chains_closed_forms(monkeypatch, tmp_path, kept_figures):
    kept_figures(plots)  # drawn, not rendered
    p, q = 0.2, 0.3
    pi1, rate, unigram = _closed_forms(p, q)

    def cell(p, q, tied, seed, settings, optimizer="sgd", log=None, n_layers=1):
        return {"p": p, "q": q, "tied": tied, "seed": seed, "optimizer": optimizer, "steps": [0, 50],
                "losses": [0.7, 0.6], "final_loss": 0.6, "p1_given_0": 0.25, "p1_given_1": 0.65,
                "entropy_rate": rate, "unigram_entropy": unigram, "seconds": 1.0, "stopped_early": False}  # fmt: skip

    monkeypatch.setattr(weight_tying, "train_switching_cell", cell)
    report = weight_tying.run(tmp_path, quick=True, seeds=(0,), overrides={"chains": [[p, q]]}, log=lambda l: None)
    results, references = markdown_tables(report.read_text())
    header, floor = results[0], weight_tying.held_out_floor(p, q, 0, weight_tying.QUICK)
    for row in results[1:]:
        value = dict(zip(header, row, strict=True))  # the later of the two "true" columns wins: read them by place
        assert float(value["− true kernel"]) == pytest.approx(0.6 - floor, abs=1e-4)
        assert float(value["− entropy rate"]) == pytest.approx(0.6 - rate, abs=1e-4)
        assert float(value["− H(π)"]) == pytest.approx(0.6 - unigram, abs=1e-4)
        true_after_0, true_after_1 = (float(row[header.index(rf"P(1\|{x})") + 1]) for x in (0, 1))
        assert (true_after_0, true_after_1) == pytest.approx((p, 1 - q))
        assert value["reached"] == "neither"
    (row,) = references[1:]
    assert [float(v) for v in row[2:]] == pytest.approx([rate, unigram, pi1], abs=1e-4)
    # the "− true kernel" column can be checked from results.json (it was recomputed when the report was written)
    stored = json.loads((tmp_path / "results.json").read_text())["true_kernel_losses"]
    assert stored == [{"p": p, "q": q, "seed": 0, "loss": pytest.approx(floor, rel=1e-12)}]


def test_cells_are_read_back_when_a_chain_or_an_optimizer_is_added(monkeypatch, tmp_path, kept_figures):
    """A cell depends on the settings it trains under, not on the lists of chains and optimizers (every cell was
    keyed on them and trained again when one was added); an AdamW cell trains at ADAMW_LR, so lr is not one of them."""
    kept_figures(plots)
    trained = []

    def cell(p, q, tied, seed, settings, optimizer="sgd", log=None, n_layers=1):
        trained.append((p, q, tied, optimizer, n_layers))
        return {"p": p, "q": q, "tied": tied, "seed": seed, "optimizer": optimizer, "steps": [0, 50],
                "losses": [0.7, 0.6], "final_loss": 0.6, "p1_given_0": 0.25, "p1_given_1": 0.65,
                "entropy_rate": 0.5, "unigram_entropy": 0.6, "seconds": 1.0, "stopped_early": False}  # fmt: skip

    monkeypatch.setattr(weight_tying, "train_switching_cell", cell)

    def run(**overrides):
        weight_tying.run(tmp_path, quick=True, seeds=(0,), overrides={"chains": [[0.2, 0.3]], **overrides},
                         log=lambda line: None)  # fmt: skip

    run()
    run(chains=[[0.2, 0.3], [0.7, 0.9]], optimizers=["sgd", "adamw"])
    assert trained == [(0.2, 0.3, True, "sgd", 1), (0.2, 0.3, False, "sgd", 1), (0.2, 0.3, True, "adamw", 1),
                       (0.2, 0.3, False, "adamw", 1), (0.7, 0.9, True, "sgd", 1), (0.7, 0.9, False, "sgd", 1),
                       (0.7, 0.9, True, "adamw", 1), (0.7, 0.9, False, "adamw", 1)]  # fmt: skip
    del trained[:]
    run(chains=[[0.2, 0.3]], optimizers=["sgd", "adamw"], lr=0.5)  # SGD's rate: its cells alone train again
    assert trained == [(0.2, 0.3, True, "sgd", 1), (0.2, 0.3, False, "sgd", 1)]
    del trained[:]
    run(chains=[[0.2, 0.3]], optimizers=["sgd"], lr=0.5, depths=[1, 2])  # the one-layer cells are read back
    assert trained == [(0.2, 0.3, True, "sgd", 2), (0.2, 0.3, False, "sgd", 2)]


def test_a_cell_trains_a_model_of_its_depth(monkeypatch):
    """depths=[2] trains two attention + MLP layers per cell: the talk's model, stacked (SPEC 6's depth claim)."""
    models = []

    def fit(model, loss_on_batch, sample_batch, evaluate, **options):
        models.append(model)
        return FitResult(steps=[0], evaluations=[float(evaluate())])

    monkeypatch.setattr(weight_tying, "fit_on_stream", fit)
    settings = replace(WeightTyingSettings(), eval_batch=4)
    cells = [train_switching_cell(0.7, 0.9, True, 0, settings, n_layers=n) for n in (1, 3)]
    assert [len(model.layers) for model in models] == [1, 3]
    assert [cell["n_layers"] for cell in cells] == [1, 3]


def test_a_depth_below_one_is_refused_naming_the_setting_before_the_folder_is_opened(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"{weight_tying.NAME}.depths: 0 must be >= 1")):
        weight_tying.run(tmp_path / "out", quick=True, seeds=None, overrides={"depths": [1, 0]}, log=lambda line: None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module", ["weight_tying", "landscape"])
@pytest.mark.parametrize(("chain", "why"), [([0.2, 1.5], "q must lie in [0, 1]"), ([0.0, 0.0], "p + q must be > 0")])
def test_a_chain_out_of_range_is_refused_naming_the_setting_before_the_folder_is_opened(module, chain, why, tmp_path):
    """chains=[[0.2, 1.5]] failed in the first cell as a bare 'q must lie in [0, 1], got 1.5', the folder claimed."""
    import importlib

    experiment = importlib.import_module(f"markovformer.experiments.{module}")
    with pytest.raises(ValueError, match=re.escape(f"{experiment.NAME}.chains: {chain}: {why}")):
        experiment.run(tmp_path / "out", quick=True, seeds=None, overrides={"chains": [chain]}, log=lambda line: None)
    assert not (tmp_path / "out").exists()


def test_an_experiment_run_from_python_leaves_the_callers_random_states_as_it_found_them(tmp_path):
    """Each cell seeds torch's global generator for itself (torch.manual_seed(seed)): after run_experiment returned,
    a notebook's next torch.rand drew from the last cell's seed, not from the caller's. They are put back."""
    import random

    import numpy as np

    from markovformer.experiments import run_experiment

    def draws():
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()

    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    expected = draws()
    torch.manual_seed(123), np.random.seed(123), random.seed(123)
    settings = {"chains": [[0.2, 0.3]], "optimizers": ["sgd"], "steps": 2, "eval_every": 2}
    run_experiment("weight-tying", tmp_path, quick=True, overrides=settings, log=lambda line: None)
    assert draws() == expected


def test_an_experiment_run_from_python_builds_on_the_cpu_whatever_default_device_the_caller_set(tmp_path):
    """A notebook's torch.set_default_device (here 'meta', as 'cuda' on a GPU machine) built the cells' chains and
    models there, as it built a run's before built_on_the_cpu: the experiment failed ('Tensor.item() cannot be called
    on meta tensors'). Its cells compute what they do in a fresh process, and the caller's default is back after."""
    from markovformer.experiments import run_experiment

    def losses(out):
        cells = json.loads((out / "results.json").read_text())["cells"]
        return [(cell["tied"], cell["losses"]) for cell in cells]

    settings = {"chains": [[0.2, 0.3]], "optimizers": ["sgd"], "steps": 2, "eval_every": 2}
    run_experiment("weight-tying", tmp_path / "fresh", quick=True, overrides=settings, log=lambda line: None)
    torch.set_default_device("meta")
    try:
        run_experiment("weight-tying", tmp_path / "meta", quick=True, overrides=settings, log=lambda line: None)
        assert torch.get_default_device() == torch.device("meta")
    finally:
        torch.set_default_device(None)
    assert losses(tmp_path / "meta") == losses(tmp_path / "fresh")


def test_an_experiment_run_from_python_computes_in_float32_whatever_default_dtype_the_caller_set(tmp_path):
    """A notebook's torch.set_default_dtype(torch.float64) reached the cells' models, where a run trains from a
    float32 default (training.isolation.process_settings_kept): the experiment's numbers depended on the caller's
    session. They are a fresh process's now, and the caller's default is back after."""
    from markovformer.experiments import run_experiment

    def losses(out):
        cells = json.loads((out / "results.json").read_text())["cells"]
        return [(cell["tied"], cell["losses"]) for cell in cells]

    settings = {"chains": [[0.2, 0.3]], "optimizers": ["sgd"], "steps": 2, "eval_every": 2}
    run_experiment("weight-tying", tmp_path / "fresh", quick=True, overrides=settings, log=lambda line: None)
    torch.set_default_dtype(torch.float64)
    try:
        run_experiment("weight-tying", tmp_path / "float64", quick=True, overrides=settings, log=lambda line: None)
        assert torch.get_default_dtype() == torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert losses(tmp_path / "float64") == losses(tmp_path / "fresh")
