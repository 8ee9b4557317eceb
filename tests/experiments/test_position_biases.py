"""``position-biases``: every kind is built at the reference's parameter count (within the tolerance), the distance
profile reads a known attention pattern exactly, bad settings are named; slow: ``--quick`` orders the kinds on the
hidden-order chain, and on a chain that reads lag 3 only the T5 bucket bias and stick-breaking beat softmax with no
position by a margin."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from markovformer.experiments import EXPERIMENTS, run_experiment
from markovformer.experiments import position_biases as pb


def test_the_heaviest_kinds_match_the_reference_parameter_count():
    """FoX Pro (an output gate per layer) and CoPE (its position table) at quick's width, where
    the width grid is coarsest (every kind: the slow quick run)."""
    settings = dataclasses.replace(pb.QUICK, kinds=("fox_pro", "cope"))
    matched = pb.matched_sections(settings.num_symbols, settings)
    assert "position-biases" in EXPERIMENTS
    for kind, entry in matched.items():
        assert abs(entry["ratio"] - 1) <= settings.tolerance, (kind, entry["ratio"])
    layers = matched["fox_pro"]["section"]["attention"]
    assert len(layers) == settings.n_layers and all(layer[part] for layer in layers for part in pb.FOX_PRO)


def test_distance_profile_reads_attention_by_lag():
    """A model whose every head attends to the previous token only: mass 1 at lag 1, 0 elsewhere."""

    class PreviousToken(torch.nn.Module):
        def forward(self, x, return_weights=False):
            length = x.shape[1]
            weights = torch.zeros(x.shape[0], 2, length, length)
            weights[:, :, torch.arange(1, length), torch.arange(length - 1)] = 1.0
            weights[:, 1, 5, :] = 0.0  # one head of one query looks nowhere: max over heads keeps 1
            return type("Out", (), {"attentions": [weights, weights * 0.5]})()

    profile = pb.distance_profile(PreviousToken(), torch.zeros(3, 12, dtype=torch.long), max_lag=4)
    assert profile == [[0.0, 1.0, 0.0, 0.0, 0.0], [0.0, 0.5, 0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    ("change", "message"),
    [({"kinds": ("markov_local", "nope")}, r"kinds: 'nope'"), ({"hidden_sources": ("order-3",)}, "fixed-K"),
     ({"icl_orders": (4,)}, "icl_orders: 4"), ({"mixer_tasks": ("induction",)}, "mixer_tasks: 'induction'"),
     ({"extrapolate": (1,)}, "extrapolate"), ({"profile_lags": 40}, "profile_lags=40")],  # fmt: skip
)
def test_bad_settings_are_named(change, message):
    settings = dataclasses.replace(pb.QUICK, **({"kinds": ("markov_local",)} | change))
    with pytest.raises(ValueError, match=message):
        pb.check_settings(settings)


def test_the_default_and_quick_settings_are_valid():
    """The defaults asked MQAR for a vocabulary of 64 at seq_len 64: `experiment position-biases` failed at once."""
    pb.check_settings(pb.PositionBiasSettings())
    pb.check_settings(pb.QUICK)


@pytest.mark.slow
def test_quick_run_orders_the_kinds_on_the_hidden_order_chain(tmp_path):
    """The sanity condition of ``--quick``: Markov (local) and the T5 bucket bias beat softmax with no position on
    the chain of lags 1..3, and every table and figure is written."""
    report = run_experiment("position-biases", tmp_path, quick=True, log=lambda message: None)
    results = json.loads((tmp_path / "results.json").read_text())
    ranking = pb.hidden_order_ranking(results, "hidden_fixed-3")
    assert ranking["markov_local"] < ranking["softmax_nope"] - 0.03
    assert ranking["t5_bias"] < ranking["softmax_nope"] - 0.03
    text = report.read_text()
    assert "distance_profiles.png" in text and (tmp_path / "distance_profiles.png").is_file()
    assert text.count("| Markov, local |") == 6  # parameters, hidden, two extrapolation tables, icl, mixer tasks
    assert results["cpu_seconds"] < 600
    assert all(abs(entry["ratio"] - 1) <= 0.1 for task in results["parameters"].values() for entry in task.values())


@pytest.mark.slow
def test_t5_buckets_and_stick_breaking_beat_no_position_on_a_lag_3_chain():
    """The next symbol depends on the symbol 3 back only: a model must find that lag. Softmax with no position
    cannot tell lag 3 from its neighbours; T5's buckets and stick-breaking's order can."""
    settings = dataclasses.replace(pb.QUICK, steps=200, kinds=("t5_bias", "stick_breaking", "softmax_nope"))
    matched = pb.matched_sections(settings.num_symbols, settings)
    excess = {}
    for kind in settings.kinds:
        cell = pb.hidden_cell("lag-3", matched[kind]["section"], 3e-3, 0, settings)
        excess[kind] = cell["test_loss"] - cell["floor"]
    assert excess["t5_bias"] < excess["softmax_nope"] - 0.1, excess
    assert excess["stick_breaking"] < excess["softmax_nope"] - 0.1, excess


def test_the_expected_loss_weighs_every_sequence_alike_whatever_the_chunks():
    """Scored 64 sequences at a time, the chunks' means were averaged unweighted: 100 sequences gave the last 36 the
    weight of the first 64."""
    from markovformer.markov.chains import lagged_chain

    chain = lagged_chain(4, [1, 2], strength=2.0, generator=torch.Generator().manual_seed(0))
    sequences = chain.sample(100, 16, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(2)
    settings = pb.PositionBiasSettings(num_symbols=4)
    model = pb._model(pb.kind_section("softmax_rotary", settings.d_model, settings), 4, 0).eval()
    with torch.no_grad():
        whole = pb.expected_loss_of(chain, model, sequences, chunk=100)
        chunked = pb.expected_loss_of(chain, model, sequences, chunk=64)
    assert chunked == pytest.approx(whole, rel=1e-12)
