"""``position-biases``: every kind is built at the reference's parameter count (within the tolerance), the distance
profile reads a known attention pattern exactly, bad settings are named; slow: ``--quick`` orders the kinds on the
hidden-order chain, and on a chain that reads lag 3 only the T5 bucket bias and stick-breaking beat softmax with no
position by a margin."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from markdown_tables import markdown_tables  # beside this file: pytest puts the folder on the path

from markovformer.experiments import EXPERIMENTS, mixers, run_experiment
from markovformer.experiments import position_biases as pb
from markovformer.experiments.fitting import FitResult
from markovformer.experiments.report import ExperimentReport
from markovformer.plots import position_biases as position_biases_plots


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
     ({"extrapolate": (1,)}, "extrapolate"), ({"profile_lags": 40}, "profile_lags=40"),
     ({"profile_lags": pb.QUICK.seq_len}, f"profile_lags={pb.QUICK.seq_len}"),  # no query t >= seq_len
     # refused before the folder is claimed: they failed in the first cell (lrs=[-1]: torch's 'Invalid learning
     # rate: -1.0'; num_symbols=1: 'num_symbols must be an integer >= 2, got 1') or in the model config naming its
     # own fields, and lrs=[0] trained and reported untrained models
     ({"lrs": (0.0,)}, r"^position-biases\.lrs=\[0\.0\]: every learning rate must be a positive number"),
     ({"lrs": (3e-3, -1.0)}, r"^position-biases\.lrs=\[0\.003, -1\.0\]"),
     ({"num_symbols": 1}, r"^position-biases\.num_symbols=1 must be at least 2"),
     ({"icl_symbols": 1}, r"^position-biases\.icl_symbols=1 must be at least 2"),
     ({"n_heads": 3}, r"^position-biases\.d_model=32 must be a multiple of 2 \* n_heads = 6"),
     ({"d_model": 30}, r"^position-biases\.d_model=30 must be a multiple of 2 \* n_heads = 4"),  # head dim 15
     ({"window": 4, "max_order": 8}, r"^position-biases\.window=4 must be at least max_order=8"),
     # lag-40: an OverflowError traceback building 8^40 contexts; lag-12: an out-of-memory error in the first cell
     ({"hidden_sources": ("lag-12",)}, r"^position-biases\.hidden_sources: 'lag-12' with num_symbols=8: .* 8\^12"),
     ({"hidden_sources": ("lag-40",)}, r"^position-biases\.hidden_sources: 'lag-40' with num_symbols=8"),
     # no position after the first k to score: "x must have length T > order=5" in the first cell
     ({"hidden_sources": ("fixed-5",), "seq_len": 5, "profile_lags": 4, "mixer_tasks": ()},
      r"^position-biases\.seq_len=5 must exceed the order 5"),
     # the figure framed attention lag 5 beside a panel of lags 0..4
     ({"hidden_sources": ("lag-6",), "profile_lags": 4}, r"^position-biases\.profile_lags=4 must reach attention "
                                                         r"lag 5")],
)  # fmt: skip
def test_bad_settings_are_named(change, message):
    settings = dataclasses.replace(pb.QUICK, **({"kinds": ("markov_local",)} | change))
    with pytest.raises(ValueError, match=message):
        pb.check_settings(settings)


def test_the_default_and_quick_settings_are_valid():
    """The defaults asked MQAR for a vocabulary of 64 at seq_len 64: `experiment position-biases` failed at once."""
    pb.check_settings(pb.PositionBiasSettings())
    pb.check_settings(pb.QUICK)
    pb.check_settings(dataclasses.replace(pb.QUICK, mixer_tasks=()))  # parts emptied: the others still run
    pb.check_settings(dataclasses.replace(pb.QUICK, icl_orders=(), hidden_sources=()))


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


# run_point and the report with the training stubbed: on the first seed, validation prefers lr 3e-3 while the test
# split would prefer 1e-3, so a choice made on test shows; seed s adds s / 100 so each seed's run is told apart.
MATCHED = {"section": {"d_model": 32, "attention": "softmax"}, "parameters": 1000, "ratio": 1.0}
SEEDS = (0, 1, 2)


@pytest.fixture
def stubbed_cells(monkeypatch) -> list[tuple[float, int]]:
    """The (lr, seed) of every cell trained, hidden-order and mixer/icl alike."""
    trained = []

    def hidden(source, section, lr, seed, settings, log=None):
        trained.append((lr, seed))
        val, test = {1e-3: (0.9, 0.4), 3e-3: (0.5, 0.8)}[lr]  # losses
        return {"val_loss": val + seed / 100, "test_loss": test + seed / 100, "floor": 0.3, "seconds": 1.0,
                "loss_by_length": {"1": test + seed / 100, "2": test + 0.2}, "profile": [[0.1, 0.8, 0.1]]}  # fmt: skip

    def mixer(task, length, section, lr, seed, settings, log=None, kind=None):
        trained.append((lr, seed))
        val, test = {1e-3: (0.3, 0.95), 3e-3: (0.9, 0.2)}[lr]  # accuracies; losses move the other way
        return {"val": {"accuracy": val, "loss": 1 - val}, "test": {"accuracy": test + seed / 100, "loss": 1 - test},
                "bayes_add1": {"loss": 0.25 + seed / 1000}, "seconds": 1.0}  # fmt: skip

    monkeypatch.setattr(pb, "hidden_cell", hidden)
    monkeypatch.setattr(mixers, "train_cell", mixer)
    return trained


def _point(tmp_path, task: str, family: str, order: int) -> dict:
    report = ExperimentReport(tmp_path, "t", log=lambda line: None, settings={})
    settings = dataclasses.replace(pb.QUICK, lrs=(1e-3, 3e-3))
    return pb.run_point(report, task, family, order, "softmax_rotary", MATCHED, settings, SEEDS, lambda line: None)


def test_the_lr_is_picked_on_the_first_seeds_validation_and_every_seed_is_reported_once(stubbed_cells, tmp_path):
    point = _point(tmp_path, "hidden_fixed-3", "hidden", 0)
    assert point["lr"] == 3e-3  # the lower validation loss
    assert sorted(stubbed_cells) == [(1e-3, 0), (3e-3, 0), (3e-3, 1), (3e-3, 2)]
    assert point["excess"]["values"] == pytest.approx([0.8 + s / 100 - 0.3 for s in SEEDS])  # test loss - floor
    assert point["floor"] == 0.3


@pytest.mark.parametrize(("task", "family", "order"), [("mqar", "mixer", 0), ("icl_order2", "icl", 2)])
def test_mixer_and_icl_points_pick_the_lr_on_validation_and_report_test(stubbed_cells, tmp_path, task, family, order):
    point = _point(tmp_path, task, family, order)
    assert point["lr"] == 3e-3  # best validation (accuracy for the mixers, loss for icl), the worse test score
    assert point["test_accuracy"]["values"] == pytest.approx([0.2 + s / 100 for s in SEEDS])
    assert point["test_loss"]["values"] == pytest.approx([0.8] * 3)  # test, not validation (0.1)
    if family == "icl":  # test loss - the Bayes add-1 loss on the same seed's test set
        assert point["excess"]["values"] == pytest.approx([0.8 - 0.25 - s / 1000 for s in SEEDS])


def test_a_hidden_cell_reports_the_test_set_which_is_not_the_validation_set(monkeypatch):
    scored = []
    expected_loss = pb.expected_loss_of

    def recording(chain, model, sequences, chunk=64):
        scored.append((sequences, expected_loss(chain, model, sequences, chunk)))
        return scored[-1][1]

    monkeypatch.setattr(pb, "expected_loss_of", recording)
    monkeypatch.setattr(pb, "fit_on_stream", lambda model, loss, sample, evaluate, **options: FitResult(
        steps=[0], evaluations=[float(evaluate())]))  # fmt: skip
    settings = dataclasses.replace(pb.QUICK, extrapolate=(2,), val_examples=32, test_examples=32)
    result = pb.hidden_cell("fixed-3", pb.kind_section("softmax_rotary", settings.d_model, settings), 3e-3, 0,
                            settings)  # fmt: skip
    (val, val_loss), (test, test_loss) = scored[:2]  # the fit's evaluation, then the test set at T
    assert test.shape == val.shape and not torch.equal(test, val)
    assert result["val_loss"] == val_loss and result["test_loss"] == test_loss != val_loss


def test_the_report_tables_show_what_they_name(stubbed_cells, monkeypatch, tmp_path, kept_figures):
    kept_figures(position_biases_plots)  # drawn, not rendered
    def matched(vocab_size, settings):
        return {kind: {**MATCHED, "ratio": {"markov_local": 1.2}.get(kind, 1.0)} for kind in settings.kinds}

    monkeypatch.setattr(pb, "matched_sections", matched)
    overrides = {"kinds": ["markov_local", "softmax_rotary"], "hidden_sources": ["fixed-2"], "icl_orders": [2],
                 "mixer_tasks": ["mqar"], "lrs": [1e-3], "extrapolate": [2], "profile_lags": 2}  # fmt: skip
    text = pb.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None).read_text()
    tables = {tuple(table[0]): table[1:] for table in markdown_tables(text)}
    (parameters,) = [rows for header, rows in tables.items() if header[1] == "hidden_fixed-2"]
    flagged = {row[0]: "(outside ±10%)" in row[1] for row in parameters}
    assert flagged == {"Markov, local": True, "softmax + rotary": False}  # ratio 1.2 only
    (mixer,) = [rows for header, rows in tables.items() if header[1:] == ("mqar",)]
    assert all(row[1] == "0.950 (lr 0.001)" for row in mixer)  # test accuracy, not loss
    (extrapolation,) = [rows for header, rows in tables.items() if header[-1].startswith("2T")]
    assert all(row[1:] == ["0.1000", "0.3000"] for row in extrapolation)  # loss - floor at T and at 2T
    assert "its loss: 0.2500" in text  # the Bayes add-1 predictor's, not a model's
    # a rerun reads every cell: its own wall time is next to nothing, the cells' training time is still told (it
    # said "Wall time 0 s, CPU time 0 s." of a run whose cells had taken minutes, as of the whole experiment)
    again = pb.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None).read_text()
    assert "the runs reported took 6.0 s of training, cells read from earlier runs included" in again  # 6 cells x 1 s
    assert "(this run's: the cells it read from earlier runs took none of it)" in again


def test_a_quick_run_says_how_many_seeds_it_reports(stubbed_cells, tmp_path, kept_figures):
    """--quick --seeds 0 1 reported mean ± std over two seeds under "Quick run: short training, one seed"."""
    from markovformer.plots import experiments as plots

    kept_figures(plots)
    overrides = {"kinds": ["softmax_rotary"], "hidden_sources": ["fixed-3"], "icl_orders": [], "mixer_tasks": [],
                 "extrapolate": [2], "profile_lags": 2}  # fmt: skip
    for seeds, said in (((0, 1), "2 seeds"), ((0,), "one seed")):
        report = pb.run(tmp_path / str(len(seeds)), quick=True, seeds=seeds, overrides=overrides, log=lambda line: None)
        assert f"Quick run (`--quick`): short training, {said} —" in report.read_text()


def test_the_report_states_the_local_window_as_the_keys_it_shows(stubbed_cells, tmp_path, kept_figures):
    """A causal window W shows keys t-W..t, W + 1 of them (SPEC section 1): the report said 'Local kinds see 5 keys'
    of window 5, one fewer than the local kinds attend to."""
    from markovformer.plots import experiments as plots

    kept_figures(plots)
    overrides = {"kinds": ["softmax_rotary"], "hidden_sources": ["fixed-3"], "icl_orders": [], "mixer_tasks": [],
                 "extrapolate": [2], "profile_lags": 2, "window": 5}  # fmt: skip
    text = pb.run(tmp_path, quick=True, seeds=(0,), overrides=overrides, log=lambda line: None).read_text()
    assert "Local kinds see a window W = 5 (keys t − 5..t: 6, the query's own included)" in text
