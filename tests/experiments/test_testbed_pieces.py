"""Pieces of the icl-depth, order-recovery and landscape experiments that can be checked without training (or with
the training stubbed: what a cell scores, against which floor, and what its report's tables say)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from markdown_tables import markdown_tables  # beside this file: pytest puts the folder on the path

from markovformer.experiments import icl_depth, landscape, order_recovery
from markovformer.experiments.fitting import FitResult, next_token_loss
from markovformer.experiments.order_recovery import MIN_BIAS, effective_lag_bias, recovered_order
from markovformer.markov import add_beta_loss, energy, lagged_chain
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    gpt2_style_config,
)
from markovformer.plots import experiments as plots


def test_recovered_order_reads_the_largest_used_lag():
    bias = torch.zeros(2, 4, 6)  # (layers, heads, attention lags 1..6)
    assert recovered_order(bias) == 1  # nothing used: the token itself suffices (order 1)
    bias[0, 1, 0] = 2.0  # attention lag 1 -> source lag 2
    bias[1, 3, 2] = 0.6  # attention lag 3, above a quarter of the largest -> order 4
    bias[1, 0, 5] = 0.4  # attention lag 6, below a quarter: ignored
    assert recovered_order(bias) == 4
    assert recovered_order(torch.full((1, 1, 6), MIN_BIAS / 2)) == 1  # all weak


def test_effective_lag_bias_is_mean_gate_times_strength():
    # static gates and set strengths: the expected bias is known without running the model's gate code
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=5, d_model=16, n_layers=2, n_heads=2, max_order=3,
                                        gate_input="static", transition="signed")  # fmt: skip
    model = MarkovianTransformerForCausalLM(config).eval()
    gate_logits = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.1, 0.2, 0.3, 0.4]]))  # 3 lags + null slot
    strengths = torch.tensor([[2.0, -1.0, 4.0], [1.0, 3.0, 0.5]])
    with torch.no_grad():
        for bias in model.model.markov_biases():
            bias.static_gate_logits["past"].copy_(gate_logits)
            bias.theta["past"].copy_(strengths)
    expected = torch.tensor([[1.0, -0.25, 0.5], [0.1, 0.6, 0.15]])  # gate probability (first 3 slots) x strength
    bias = effective_lag_bias(model, torch.randint(0, 5, (3, 10)))
    torch.testing.assert_close(bias, expected.expand(2, 2, 3))


def test_gpt2_style_config_is_softmax_with_learned_positions_and_tied_embeddings():
    config = gpt2_style_config(2, d_model=16, n_layers=2, n_heads=2, max_positions=32)
    assert (config.attention, config.scope, config.position, config.ffn) == ("softmax", "global", "learned", "gelu")
    model = MarkovianTransformerForCausalLM(config)
    assert model.lm_head.weight.data_ptr() == model.model.embed.weight.data_ptr()
    assert gpt2_style_config(2, 16, 1, 2, 32, dropout=0.1).dropout == 0.1


def test_next_token_loss_scores_targets_from_position_k():
    torch.manual_seed(1)
    model = MarkovianTransformerForCausalLM(gpt2_style_config(2, 16, 1, 2, 32)).eval()
    x = torch.randint(0, 2, (4, 20))
    order = 3
    logits = model(x).logits
    manual = torch.stack([F.cross_entropy(logits[b, t - 1], x[b, t]) for b in range(4) for t in range(order, 20)])
    torch.testing.assert_close(next_token_loss(model, x, order), manual.mean())


def _column(table: list[list[str]], name: str) -> list[str]:
    index = table[0].index(name)
    return [row[index] for row in table[1:]]


def _untrained_icl_cell(monkeypatch, order: int, settings: icl_depth.ICLSettings, curve=lambda bayes: [0.7]):
    """``train_icl_cell`` with ``fit_on_stream`` stubbed: it draws the first training batch, evaluates once, and
    returns ``curve(Bayes add-1 of the held-out set)`` at steps 0, 10, ... Returns the cell and what the cell scored
    (held_out, first_target) and trained on first (batch)."""
    seen: dict = {}

    def recording_loss(model, x, first_target):
        seen.update(held_out=x, first_target=first_target)
        return torch.tensor(0.7)

    def fit(model, loss_on_batch, sample_batch, evaluate, *, seed, **options):
        seen["batch"] = sample_batch(torch.Generator().manual_seed(seed))  # the stream fit_on_stream draws first
        seen["config"] = model.config
        evaluate()
        evaluations = curve(add_beta_loss(seen["held_out"], order, 2, 1.0))
        return FitResult(steps=[10 * i for i in range(len(evaluations))], evaluations=evaluations)

    monkeypatch.setattr(icl_depth, "next_token_loss", recording_loss)
    monkeypatch.setattr(icl_depth, "fit_on_stream", fit)
    return icl_depth.train_icl_cell(order, 1, 0, settings), seen


def test_icl_cell_scores_targets_from_k_against_the_order_k_floors_on_unseen_sequences(monkeypatch):
    """The final (not the best) evaluation; steps to add-1 + 0.01 measured against add-1, not the oracle."""
    settings = dataclasses.replace(icl_depth.ICLSettings(), d_model=16, n_heads=2, seq_len=64, batch_size=32,
                                   eval_batch=32)  # fmt: skip
    cell, seen = _untrained_icl_cell(monkeypatch, 3, settings, lambda bayes: [bayes + 0.3, bayes + 0.005, bayes + 0.02])
    assert seen["first_target"] == 3  # targets t >= k, as the floors score
    assert cell["bayes_add1"] == pytest.approx(add_beta_loss(seen["held_out"], 3, 2, 1.0))
    assert cell["oracle"] < cell["bayes_add1"] - 0.01  # the sequence's own kernel beats estimating it
    assert cell["final_loss"] == pytest.approx(cell["bayes_add1"] + 0.02)
    assert cell["steps_to_add1_plus_0.01"] == 10
    assert not torch.equal(seen["batch"], seen["held_out"])  # never trained on (batch_size = eval_batch)
    # the model its stored cells were computed with (gpt2_style_config's before GPT-2's attention biases and init)
    assert (seen["config"].attention_bias, seen["config"].init_scheme) == (False, "normal")


def test_icl_cells_draw_a_new_kernel_for_every_sequence(monkeypatch):
    """The empirical P(1 | 0) varies across held-out sequences as U[0, 1] rows do (std ~0.29); one kernel shared by
    every sequence leaves only sampling noise."""
    settings = dataclasses.replace(icl_depth.ICLSettings(), d_model=16, n_heads=2, seq_len=128, eval_batch=64)
    _, seen = _untrained_icl_cell(monkeypatch, 1, settings)
    rates = []
    for row in seen["held_out"]:
        following = row[1:][row[:-1] == 0]
        if len(following) >= 10:
            rates.append(following.double().mean())
    rates = torch.stack(rates)
    assert len(rates) >= 30 and float(rates.std()) > 0.15, float(rates.std())


def test_icl_depth_table_reports_final_loss_minus_add1(monkeypatch, tmp_path, kept_figures):
    kept_figures(plots)  # drawn, not written
    def cell(order, n_layers, seed, settings, log=None):
        return {"order": order, "n_layers": n_layers, "seed": seed, "steps": [0, 10], "losses": [0.9, 0.6],
                "final_loss": 0.6, "oracle": 0.45, "bayes_add1": 0.5, "steps_to_add1_plus_0.01": None,
                "seconds": 3.0, "stopped_early": False, "parameters": 100}  # fmt: skip

    monkeypatch.setattr(icl_depth, "train_icl_cell", cell)
    report = icl_depth.run(tmp_path, quick=True, seeds=(0,), overrides={"orders": [2], "depths": [1]},
                           log=lambda line: None)  # fmt: skip
    table = markdown_tables(report.read_text())[0]
    assert float(_column(table, "− add-1")[0]) == pytest.approx(0.6 - 0.5)
    assert _column(table, "steps to add-1 + 0.01") == ["—"]


def test_icl_depth_reads_back_its_cells_when_the_grid_gains_an_order_or_a_depth(monkeypatch, tmp_path, kept_figures):
    """A cell depends on the settings it trains under, not on the lists of orders and depths: one more order or depth
    trains only its own cells (every cell was keyed on the whole lists and trained again)."""
    kept_figures(plots)
    trained = []

    def cell(order, n_layers, seed, settings, log=None):
        trained.append((order, n_layers))
        return {"order": order, "n_layers": n_layers, "seed": seed, "steps": [0, 10], "losses": [0.9, 0.6],
                "final_loss": 0.6, "oracle": 0.45, "bayes_add1": 0.5, "steps_to_add1_plus_0.01": None,
                "seconds": 3.0, "stopped_early": False, "parameters": 100}  # fmt: skip

    monkeypatch.setattr(icl_depth, "train_icl_cell", cell)

    def run(**overrides):
        icl_depth.run(tmp_path, quick=True, seeds=(0,), overrides={"orders": [1], "depths": [1], **overrides},
                      log=lambda line: None)  # fmt: skip

    run()
    run(orders=[1, 2], depths=[1, 2])
    assert trained == [(1, 1), (1, 2), (2, 1), (2, 2)]
    run(steps=200)  # a setting the cell reads: trained again
    assert trained[4:] == [(1, 1)]


TINY_RECOVERY = dataclasses.replace(order_recovery.RecoverySettings(), d_model=16, n_layers=1, n_heads=2, seq_len=32,
                                    batch_size=8, eval_batch=16, max_order=3)  # fmt: skip


def test_recovery_cells_train_on_every_lag_up_to_k_and_score_icl_against_add1_of_order_k(monkeypatch):
    lags_seen, seen = [], {}

    def recording_chain(num_symbols, lags, **options):
        lags_seen.append(tuple(lags))
        return lagged_chain(num_symbols, lags, **options)

    def recording_loss(model, x, first_target):
        seen.update(held_out=x, first_target=first_target)
        return torch.tensor(0.7)

    monkeypatch.setattr(order_recovery, "lagged_chain", recording_chain)
    monkeypatch.setattr(order_recovery, "next_token_loss", recording_loss)
    monkeypatch.setattr(order_recovery, "fit_on_stream", lambda model, loss, sample, evaluate, **options: FitResult(
        steps=[0], evaluations=[float(evaluate())]))  # fmt: skip
    order_recovery.train_recovery_cell("fixed-3", "softmax", 0, TINY_RECOVERY)
    assert lags_seen == [(1, 2, 3)]
    cell = order_recovery.train_recovery_cell("icl-2", "markov-global", 0, TINY_RECOVERY)
    assert seen["first_target"] == 2
    assert cell["floor"] == pytest.approx(add_beta_loss(seen["held_out"], 2, 2, 1.0))
    # the global-scope Markovian Transformer's lags are read like the local one's
    assert "recovered_order" in cell and len(cell["effective_bias"]) == TINY_RECOVERY.n_layers


def test_order_recovery_refuses_an_order_below_one_naming_it(tmp_path):
    with pytest.raises(ValueError, match="'fixed-0'"):
        order_recovery.run(tmp_path, quick=True, seeds=(0,), overrides={"sources": ["fixed-0"]}, log=lambda l: None)


@pytest.mark.parametrize("sources", [["fixed-1", "fixed-3"], ["icl-3"]])
def test_order_recovery_refuses_a_sequence_no_longer_than_an_order_before_any_cell_trains(monkeypatch, tmp_path,
                                                                                          sources):  # fmt: skip
    """seq_len=3 with a source of order 3: the held-out loss (T > k) failed in that source's first cell, after the
    cells before it had trained, with "x must have length T > order=3, got T=3", naming no setting."""
    trained = []
    monkeypatch.setattr(order_recovery, "train_recovery_cell", lambda *args, **options: trained.append(args))
    with pytest.raises(ValueError, match=r"^order-recovery\.seq_len=3: must exceed the highest source order 3"):
        order_recovery.run(tmp_path, quick=True, seeds=(0,), overrides={"sources": sources, "seq_len": 3},
                           log=lambda line: None)  # fmt: skip
    assert trained == []


def test_order_recovery_trains_a_global_markovian_on_icl_sources_and_tabulates_loss_minus_floor_and_max_over_heads(
    monkeypatch, tmp_path, kept_figures
):
    kept_figures(plots)
    trained = []
    bias = [[[0.1, 0.9, 0.0], [0.7, 0.2, 0.3]]]  # 1 layer, 2 heads, attention lags 1..3

    def cell(source, kind, seed, settings, log=None):
        trained.append((source, kind))
        result = {"source": source, "kind": kind, "seed": seed, "true_order": 2, "floor": 0.4, "floor_name": "floor",
                  "steps": [0, 10], "losses": [1.0, 0.5], "final_loss": 0.5, "steps_to_converge": None,
                  "seconds": 1.0}  # fmt: skip
        if kind.startswith("markov"):
            result.update(effective_bias=bias, recovered_order=3)
        return result

    monkeypatch.setattr(order_recovery, "train_recovery_cell", cell)
    overrides = {"sources": ["fixed-2", "icl-2"], "max_order": 3}
    report = order_recovery.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    assert trained == [("fixed-2", "markov"), ("fixed-2", "softmax"), ("icl-2", "markov"),
                       ("icl-2", "markov-global"), ("icl-2", "softmax")]  # fmt: skip
    results, profile = markdown_tables(report.read_text())[:2]
    assert [float(v) for v in _column(results, "− floor")] == pytest.approx([0.5 - 0.4] * 5)
    assert [float(v) for v in profile[1][4:]] == pytest.approx([0.7, 0.9, 0.3])


def test_order_recovery_reads_back_its_cells_when_a_source_is_added_and_retrains_only_what_a_setting_changes(
    monkeypatch, tmp_path, kept_figures
):
    """A cell depends on what it trains on, not on the list of sources (every cell was keyed on it and trained again
    when one was added); a softmax model has no lags (max_order), an in-context source no alphabet or strength."""
    kept_figures(plots)
    trained = []

    def cell(source, kind, seed, settings, log=None):
        trained.append((source, kind))
        return {"source": source, "kind": kind, "seed": seed, "true_order": 1, "floor": 0.4, "floor_name": "floor",
                "steps": [0, 10], "losses": [1.0, 0.5], "final_loss": 0.5, "steps_to_converge": None,
                "seconds": 1.0}  # fmt: skip

    monkeypatch.setattr(order_recovery, "train_recovery_cell", cell)

    def run(**overrides):
        order_recovery.run(tmp_path, quick=True, seeds=(0,), overrides={"sources": ["fixed-1"], **overrides},
                           log=lambda line: None)  # fmt: skip

    run()
    run(sources=["fixed-1", "icl-2"])
    assert trained == [("fixed-1", "markov"), ("fixed-1", "softmax"), ("icl-2", "markov"), ("icl-2", "markov-global"),
                       ("icl-2", "softmax")]  # fmt: skip
    del trained[:]
    run(sources=["fixed-1", "icl-2"], max_order=4)
    assert trained == [("fixed-1", "markov"), ("icl-2", "markov"), ("icl-2", "markov-global")]
    del trained[:]
    run(sources=["fixed-1", "icl-2"], max_order=4, num_symbols=4)
    assert trained == [("fixed-1", "markov"), ("fixed-1", "softmax")]


# Euler steps 10x the experiment's: the small starts still reach their minimum (from about 80 steps on)
SHORT_FLOW = dataclasses.replace(landscape.LandscapeSettings(), starts=4, steps=120, lr=1.0)


@pytest.mark.parametrize(("p", "q", "expected"), [(0.2, 0.3, "global minimum"), (0.7, 0.9, "unigram (e = 0)")])
def test_small_starts_end_where_the_theory_says_and_the_energy_predicts_it(p, q, expected):
    """Small initialisations converge to the global minimum when p + q < 1, to the unigram one when > 1."""
    cell = landscape.flow_cell(p, q, 0, SHORT_FLOW)
    small, large = cell["starts"]["small"], cell["starts"]["large"]
    assert all(start["profiled_end"] == expected and start["predicted"] == expected for start in small)
    assert max(max(abs(s["e0"]), abs(s["w0"])) for s in small) < 0.5  # σ = 0.1
    assert max(max(abs(s["e0"]), abs(s["w0"])) for s in large) > 1.0  # σ = 0.8
    for start in small + large:  # the largest departure from the start's energy: at least any kept point's
        path = torch.tensor(start["path"], dtype=torch.float64)
        along = energy(path[:, 0], path[:, 1])
        assert start["energy_drift"] >= float((along - along[0]).abs().max()) - 1e-12
        assert start["energy"] == pytest.approx(float(along[0]))


def test_the_landscape_tables_count_where_each_flow_ended(monkeypatch, tmp_path, kept_figures):
    kept_figures(plots)
    def start(predicted, profiled, free):
        return {"e0": 0.1, "w0": 0.1, "energy": 0.0, "predicted": predicted, "profiled_end": profiled,
                "free_end": free, "free_loss": 0.5, "energy_drift": 0.01, "path": [[0.1, 0.1], [0.0, 0.2]]}

    g, u, n = "global minimum", "unigram (e = 0)", "not converged"
    starts = [start(g, g, n), start(u, g, g), start(g, u, u)]

    def cell(p, q, seed, settings):
        return {"p": p, "q": q, "seed": seed, "entropy_rate": 0.5, "unigram_entropy": 0.6,
                "starts": {"small": starts, "large": starts}}  # fmt: skip

    monkeypatch.setattr(landscape, "flow_cell", cell)
    report = landscape.run(tmp_path, quick=True, seeds=None, overrides={"chains": [[0.2, 0.3]]}, log=lambda l: None)
    ends, agreement = markdown_tables(report.read_text())[:2]
    counts = {(row[2].split()[0], row[3]): row[4:] for row in ends[1:]}
    assert counts[("small", "profiled")] == ["3", "2", "1", "0"]  # starts, → global, → unigram, not converged
    assert counts[("small", "free")] == ["3", "1", "1", "1"]
    assert _column(agreement, "energy prediction correct") == ["1", "1"]  # predicted = where the profiled flow ended


def test_landscape_reads_back_its_cells_when_a_chain_is_added(monkeypatch, tmp_path, kept_figures):
    """A chain's flows depend on the starts, lr and steps, not on the other chains: one more chain computes only
    its own cell (every cell was keyed on the whole list and computed again)."""
    kept_figures(plots)
    computed = []

    def cell(p, q, seed, settings):
        computed.append((p, q))
        start = {"e0": 0.1, "w0": 0.1, "energy": 0.0, "predicted": "global minimum", "profiled_end": "global minimum",
                 "free_end": "global minimum", "free_loss": 0.5, "energy_drift": 0.01, "path": [[0.1, 0.1]]}
        return {"p": p, "q": q, "seed": seed, "entropy_rate": 0.5, "unigram_entropy": 0.6,
                "starts": {"small": [start], "large": [start]}}  # fmt: skip

    monkeypatch.setattr(landscape, "flow_cell", cell)

    def run(**overrides):
        landscape.run(tmp_path, quick=True, seeds=None, overrides={"chains": [[0.2, 0.3]], **overrides},
                      log=lambda line: None)  # fmt: skip

    run()
    run(chains=[[0.2, 0.3], [0.7, 0.9]])
    assert computed == [(0.2, 0.3), (0.7, 0.9)]
    run(steps=50)  # a setting the flows read: computed again
    assert computed[2:] == [(0.2, 0.3)]


def test_the_landscape_window_holds_every_drawn_flow_and_the_legend_names_start_and_end(monkeypatch, tmp_path,
                                                                                         kept_figures):
    """A large start (σ = 0.8) can begin and end outside w in [-2, 1.5], e in [-1.8, 1.8]: the window (contour grid
    and axes) widens to hold every point of every path, so the figure draws as many flows as the table counts."""
    figures = kept_figures(plots)

    def start(path):  # path points are (e, w), as flow_cell keeps them
        return {"e0": path[0][0], "w0": path[0][1], "energy": 0.0, "predicted": "global minimum",
                "profiled_end": "global minimum", "free_end": "global minimum", "free_loss": 0.5,
                "energy_drift": 0.01, "path": path}  # fmt: skip

    outside = [[-2.3, -2.6], [-2.1, -2.4], [-1.9, -2.2]]  # below e = -1.8, left of w = -2 throughout
    beyond = [[0.2, 1.9], [0.1, 1.7]]  # starts right of w = 1.5

    def cell(p, q, seed, settings):
        return {"p": p, "q": q, "seed": seed, "entropy_rate": 0.5, "unigram_entropy": 0.6,
                "starts": {"small": [start([[0.05, 0.02], [0.0, 0.3]])], "large": [start(outside), start(beyond)]}}

    grids = []
    surface = landscape._surface
    monkeypatch.setattr(landscape, "_surface", lambda p, q, w, e: grids.append((w, e)) or surface(p, q, w, e))
    monkeypatch.setattr(landscape, "flow_cell", cell)
    landscape.run(tmp_path, quick=True, seeds=None, overrides={"chains": [[0.2, 0.3]]}, log=lambda line: None)
    axis = next(iter(figures.values())).axes[0]
    (x0, x1), (y0, y1) = axis.get_xlim(), axis.get_ylim()
    (w_grid, e_grid), = grids
    assert (w_grid[0], w_grid[-1], e_grid[0], e_grid[-1]) == (x0, x1, y0, y1)  # the contour covers the window
    for path in ([[0.05, 0.02], [0.0, 0.3]], outside, beyond):
        e, w = np.asarray(path).T
        assert (x0 < w).all() and (w < x1).all() and (y0 < e).all() and (e < y1).all()
    assert x0 < -2.6 and x1 > 1.9 and y0 < -2.3 and y1 >= 1.8  # a margin beyond the outermost points
    drawn = [line for line in axis.get_lines() if line.get_color() == "limegreen" and len(line.get_xdata()) > 1]
    assert len(drawn) == 3  # every start's flow, none cut at the window's edge
    texts = [text.get_text() for text in axis.get_legend().get_texts()]
    assert "start of a flow" in texts and "end of a flow" in texts


def _recovery_cell(source, kind, seed, settings, log=None):
    result = {"source": source, "kind": kind, "seed": seed, "true_order": 2, "floor": 0.4, "floor_name": "floor",
              "steps": [0, 10], "losses": [1.0, 0.5 + 0.1 * seed], "final_loss": 0.5, "steps_to_converge": None,
              "seconds": 1.0}  # fmt: skip
    if kind.startswith("markov"):
        result.update(effective_bias=[[[0.1, 0.12, 0.08]]], recovered_order=1)  # every lag below MIN_BIAS
    return result


def test_the_effective_bias_figure_draws_min_bias_and_its_caption_says_the_rule(monkeypatch, tmp_path, kept_figures):
    """Bars of 0.1 everywhere read as 'all lags used' unless the line below which every lag is unused is drawn."""
    figures = kept_figures(plots)
    monkeypatch.setattr(order_recovery, "train_recovery_cell", _recovery_cell)
    report = order_recovery.run(tmp_path, quick=True, seeds=(0,), overrides={"sources": ["fixed-1"], "max_order": 3},
                                log=lambda line: None)  # fmt: skip
    (bars,) = [figure.axes[0] for figure in figures.values() if figure.axes[0].get_xlabel().startswith("attention lag")]
    at_threshold = [line for line in bars.get_lines() if list(line.get_ydata()) == [MIN_BIAS, MIN_BIAS]]
    assert len(at_threshold) == 1
    assert f"MIN_BIAS = {MIN_BIAS:g}: all bars below → order 1" in [text.get_text() for text in
                                                                   bars.get_legend().get_texts()]  # fmt: skip
    text = report.read_text()
    assert f"MIN_BIAS = {MIN_BIAS:g}" in text and "every lag counts as unused and the recovered order is 1" in text


def test_loss_curves_of_two_seeds_differ_in_style_and_the_legend_names_the_seeds(monkeypatch, tmp_path,
                                                                                  kept_figures):
    """With --seeds 0 1 both seeds of a model were drawn in one colour, one style, under one legend entry."""
    figures = kept_figures(plots)
    monkeypatch.setattr(order_recovery, "train_recovery_cell", _recovery_cell)
    order_recovery.run(tmp_path, quick=True, seeds=(0, 1), overrides={"sources": ["fixed-1"], "max_order": 3},
                       log=lambda line: None)  # fmt: skip
    (losses,) = [figure.axes[0] for figure in figures.values() if figure.axes[0].get_xlabel() == "step"]
    curves = [line for line in losses.get_lines() if len(line.get_xdata()) == 2 and line.get_xdata()[1] == 10]
    styles = {(line.get_color(), line.get_linestyle()) for line in curves}
    assert len(curves) == 4 and len(styles) == 4  # markov and softmax, seeds 0 and 1: four distinct curves
    assert len({line.get_color() for line in curves}) == 2  # a colour per model
    texts = [text.get_text() for text in losses.get_legend().get_texts()]
    assert "seed 0" in texts and "seed 1" in texts


def _drawn_references(monkeypatch) -> list:
    """The reference lines ({label: value}) of every panel the experiments' figures draw from now on."""
    drawn = []

    def record(panels, path, *labels, **options):
        drawn.extend(panel.references for panel in panels)
        return path

    monkeypatch.setattr(plots, "plot_panels", record)
    return drawn


def test_icl_depth_floors_drawn_with_two_seeds_are_their_mean_not_seed_0s(monkeypatch, tmp_path):
    """Each seed scores its own held-out sequences, so each has its own oracle and add-1 floor; the figure drew
    seed 0's under every seed's curve (seed 1 read 0.005 above add-1 where it was 0.033 above its own)."""
    floors = {0: (0.48, 0.51), 1: (0.45, 0.47)}  # seed -> (oracle, Bayes add-1)

    def cell(order, n_layers, seed, settings, log=None):
        return {"order": order, "n_layers": n_layers, "seed": seed, "steps": [0, 10], "losses": [0.9, 0.6],
                "final_loss": 0.6, "oracle": floors[seed][0], "bayes_add1": floors[seed][1],
                "steps_to_add1_plus_0.01": None, "seconds": 3.0, "stopped_early": False, "parameters": 100}  # fmt: skip

    monkeypatch.setattr(icl_depth, "train_icl_cell", cell)
    drawn = _drawn_references(monkeypatch)
    report = icl_depth.run(tmp_path, quick=True, seeds=(0, 1), overrides={"orders": [1], "depths": [1, 2]},
                           log=lambda line: None)  # fmt: skip
    (references,) = drawn
    assert sorted(references.values()) == pytest.approx(sorted([(0.48 + 0.45) / 2, (0.51 + 0.47) / 2]))
    assert all("mean of 2 seeds" in label for label in references)
    assert "mean over the 2 seeds" in report.read_text()
    icl_depth.run(tmp_path / "one", quick=True, seeds=(1,), overrides={"orders": [1], "depths": [1]},
                  log=lambda line: None)  # fmt: skip
    assert drawn[-1] == {"oracle": 0.45, "Bayes add-1": 0.47}  # one seed: its own floors, labelled plainly


def test_order_recovery_icl_floor_drawn_with_two_seeds_is_their_mean(monkeypatch, tmp_path):
    def cell(source, kind, seed, settings, log=None):
        return {**_recovery_cell(source, kind, seed, settings), "floor": 0.5 + 0.02 * seed, "floor_name": "Bayes add-1"}

    monkeypatch.setattr(order_recovery, "train_recovery_cell", cell)
    drawn = _drawn_references(monkeypatch)
    monkeypatch.setattr(plots, "plot_lag_bars", lambda panels, path, *args, **options: path)
    order_recovery.run(tmp_path, quick=True, seeds=(0, 1), overrides={"sources": ["icl-2"], "max_order": 3},
                       log=lambda line: None)  # fmt: skip
    assert drawn == [{"Bayes add-1, mean of 2 seeds": pytest.approx(0.51)}]


@pytest.mark.parametrize(("overrides", "named"), [
    ({"seq_len": 1}, "icl-depth.seq_len=1"), ({"orders": [2, 4], "seq_len": 4}, "icl-depth.seq_len=4"),
    ({"orders": [0]}, "icl-depth.orders: 0"), ({"depths": [2, 0]}, "icl-depth.depths: 0"),
    ({"n_heads": 3}, "icl-depth.d_model=64"),
])  # fmt: skip
def test_icl_depth_refuses_settings_its_cells_fail_on_before_training_naming_them(overrides, named, tmp_path):
    """seq_len=1 trained every step (held-out loss NaN) before the floors refused T <= k; orders=[0] and depths=[0]
    were refused by the sampler and the model config once a cell started, not as the experiment's settings."""
    with pytest.raises(ValueError, match=re.escape(named)):
        icl_depth.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None)
    assert not (tmp_path / "cells").exists()
