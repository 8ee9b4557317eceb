"""`markovformer inspect` names what it draws by the layer it belongs to: each layer's own max_order, window and
null slot (a layer's entry overrides the flat fields), the model's layer index, a hybrid_parallel layer's Markov
and random-feature maps, and the chain's lags beyond a layer's reach (named, not an error).

The report is written from an untrained model built directly (no training); the figures are read as matplotlib
draws them (titles, tick labels, legends, lines) instead of as pixels, and not rendered."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest
import torch
from matplotlib.text import Text

from markovformer.models.markovian_transformer import MarkovianTransformerConfig
from markovformer.plots import markov
from markovformer.training import inspection
from markovformer.training.build import build_data, build_model
from markovformer.training.data_record import data_record
from markovformer.training.run_config import resolve_run_config
from markovformer.training.run_dir import write_json
from markovformer.training.run_report import markov_layers


@dataclass
class Panel:
    """What one axes of a figure says: its title, tick labels, legend entries and each line's x values."""

    title: str
    xticks: list[str]
    yticks: list[str]
    legend: list[str]
    lines_x: list[list[float]] = field(default_factory=list)


@dataclass
class Drawn:
    """A figure as drawn: its suptitle, its panels, and every text on it."""

    suptitle: str
    panels: list[Panel]
    texts: list[str]


def _drawn(figure) -> Drawn:
    panels = []
    for ax in figure.axes:
        legend = ax.get_legend()
        panels.append(Panel(ax.get_title(), [t.get_text() for t in ax.get_xticklabels()],
                            [t.get_text() for t in ax.get_yticklabels()],
                            [t.get_text() for t in legend.get_texts()] if legend else [],
                            [list(np.asarray(line.get_xdata(), dtype=float)) for line in ax.get_lines()]))  # fmt: skip
    suptitle = figure._suptitle.get_text() if figure._suptitle is not None else ""
    return Drawn(suptitle, panels, [text.get_text() for text in figure.findobj(Text)])


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Drawn]:
    """{file name: Drawn} of every figure plots.markov saves from now on; the PNG is left empty (not rendered)."""
    figures: dict[str, Drawn] = {}

    def record(figure, out):
        figures[out.name] = _drawn(figure)
        figure.clear()
        out.write_bytes(b"")
        return out

    monkeypatch.setattr(markov, "save_figure", record)
    return figures


def _report(tmp_path, model: dict, lags=(1, 2), chain: bool = True) -> tuple[str, object]:
    """Inspect an untrained model of the tiny run with ``model`` options (None: the option left unset) on a lagged
    chain with ``lags``: the report's HTML and the model. ``chain=False``: the run's data record says no chain's
    lags, as a run on text does."""
    from conftest import TINY_RUN

    data = {**TINY_RUN["data"], "lags": list(lags), "train_sequences": 8, "val_sequences": 8, "test_sequences": 8}
    options = {key: value for key, value in {**TINY_RUN["model"], "dropout": 0.0, **model}.items() if value is not None}
    config = resolve_run_config({**TINY_RUN, "model": options, "data": data})
    bundle = build_data(config)
    torch.manual_seed(0)
    built = build_model(config, bundle.info).eval()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = data_record(bundle)
    if not chain:
        record["info"].pop("true_lags")
    write_json(run_dir / "data.json", record)
    out = tmp_path / "report"
    out.mkdir()
    weights = {"finished": False, "source": "an untrained model", "step": 0}
    index = inspection._write_report(config, built, run_dir, out, None, weights)
    return index.read_text(), built


# --------------------------------------------------------------------------- 2: each layer's own settings


def test_the_summary_and_the_lag_profile_read_the_layers_own_window_and_max_order(tmp_path, drawn):
    """A layer entry with max_order 6 and window 8 under the flat defaults: the table said 'max_order 4' (the
    flat field) and the profile stopped at lag 5 (flat max_order + 1)."""
    page, _ = _report(tmp_path, {"max_order": None, "attention": [{"kind": "markov", "max_order": 6, "window": 8}]})
    assert "scope local, window 8, max_order 6" in page
    profile = drawn["attention_by_lag.png"]
    assert max(max(x) for panel in profile.panels for x in panel.lines_x) == 8  # lag 9 (window + 1) never attended


def test_layers_that_differ_are_summarised_and_profiled_each_with_its_own(tmp_path, drawn):
    page, _ = _report(tmp_path, {"n_layers": 2, "max_order": None,
                                 "attention": [{"kind": "markov", "max_order": 6, "window": 8},
                                               {"kind": "markov", "max_order": 2}]})  # fmt: skip
    expected = "layer 0: scope local, window 8, max_order 6, gate linear; layer 1: scope local, window 2, max_order 2"
    assert expected in page
    reach = {panel.title: max(max(x) for x in panel.lines_x) for panel in drawn["attention_by_lag.png"].panels}
    assert reach == {"layer 0": 8, "layer 1": 3}  # layer 1's window + 1: its profile shows the window's edge


def test_agreeing_layers_are_summarised_once():
    config = MarkovianTransformerConfig(vocab_size=4, n_layers=2, attention=[{"kind": "markov", "max_order": 3}] * 2)
    assert inspection.markov_structure(config) == "scope local, window 3, max_order 3, gate linear"


# --------------------------------------------------------------------------- 3: the null slot per layer


def test_the_order_gates_null_slot_is_each_layers_own(tmp_path, drawn):
    """Layer 0 without a null slot, layer 1 with one (max_order 3): layer 0's third slot read 'null'."""
    _report(tmp_path, {"n_layers": 2, "max_order": 3, "attention": [{"kind": "markov", "gate_null": False}, "markov"]})
    slots = {panel.title: panel.yticks for panel in drawn["order_gates.png"].panels if panel.title}
    assert slots["layer 0, past gates"] == ["lag 1*", "lag 2", "lag 3"] * 2
    assert slots["layer 1, past gates"] == ["lag 1*", "lag 2", "lag 3", "null"] * 2


# --------------------------------------------------------------------------- 5: the model's layer index


def test_transition_strengths_are_titled_by_the_models_layer_index(tmp_path, drawn):
    """A softmax layer, then a Markov one: the strengths were titled 'Markov layer 0', the gates 'layer 1'."""
    _, model = _report(tmp_path, {"n_layers": 2, "window": 2, "attention": ["softmax", "markov"]})
    assert markov_layers(model) == [1]
    titles = [panel.title for panel in drawn["transition_strengths.png"].panels if panel.title]
    assert titles == ["layer 1, past"]
    assert [panel.title for panel in drawn["order_gates.png"].panels if panel.title] == ["layer 1, past gates"]


def test_without_indices_strength_rows_say_they_count_markov_layers(tmp_path, drawn):
    strengths = [{"past": torch.ones(2, 3), "future": None}]
    markov.plot_transition_strengths(strengths, tmp_path / "a.png")
    markov.plot_transition_strengths(strengths, tmp_path / "b.png", layer_indices=[3])
    assert [p.title for p in drawn["a.png"].panels if p.title] == ["Markov layer 0, past"]
    assert [p.title for p in drawn["b.png"].panels if p.title] == ["layer 3, past"]


# --------------------------------------------------------------------------- 6: hybrid_parallel's maps


PARALLEL_LABELS = ["head 0 (Markov)", "head 1 (Markov)", "head 0 (random features)", "head 1 (random features)"]


def test_hybrid_parallel_maps_are_labelled_markov_and_random_features_not_four_heads(tmp_path, drawn):
    """2 heads give 4 maps (B, 2H, T, T): each head's Markov part, then its random-feature part; they were drawn as
    'head 0..3'."""
    _report(tmp_path, {"attention": "hybrid_parallel"})
    titles = [panel.title for panel in drawn["attention.png"].panels if panel.title]
    assert titles == [f"layer 0, {label}" for label in PARALLEL_LABELS]
    assert [panel.legend for panel in drawn["attention_by_lag.png"].panels] == [PARALLEL_LABELS]
    assert not any(text.startswith(("head 2", "head 3")) for figure in drawn.values() for text in figure.texts)


def test_layers_with_different_map_counts_each_draw_all_of_theirs(tmp_path, drawn):
    """A Markov layer (2 maps) beside a hybrid_parallel one (4): the grid is as wide as the widest row."""
    causal = torch.ones(5, 5).tril()
    two, four = (causal / causal.sum(-1, keepdim=True)).expand(1, 2, 5, 5), (causal / 5).expand(1, 4, 5, 5)
    markov.plot_attention_maps([two, four], [0, 1], tmp_path / "maps.png", head_labels={1: PARALLEL_LABELS})
    titles = [panel.title for panel in drawn["maps.png"].panels if panel.title]
    assert titles == ["layer 0, head 0", "layer 0, head 1", *[f"layer 1, {label}" for label in PARALLEL_LABELS]]


# --------------------------------------------------------------------------- 7: a chain reaching past max_order


def test_a_chain_lag_beyond_max_order_is_named_not_an_error(tmp_path, drawn):
    """Chain lags 1 and 5 (attention lags 0 and 4) under max_order 2: inspect failed with 'true_lags (4,) must lie
    in 1..2 (max_order)'."""
    _report(tmp_path, {"max_order": 2}, lags=(1, 5))
    strengths = drawn["transition_strengths.png"]
    assert "lag 4 lies beyond max_order 2" in strengths.suptitle and "outlined" not in strengths.suptitle
    assert [panel.xticks for panel in strengths.panels if panel.title] == [["1", "2"]]  # nothing marked
    assert "lag 4 lies beyond the lags drawn" in drawn["attention_by_lag.png"].suptitle


def test_a_lag_within_one_layers_max_order_is_marked_there_and_named_in_the_other(tmp_path, drawn):
    strengths = [{"past": torch.ones(2, 4), "future": None}, {"past": torch.ones(2, 2), "future": None}]
    markov.plot_transition_strengths(strengths, tmp_path / "s.png", true_lags=(1, 3), layer_indices=[0, 1])
    figure = drawn["s.png"]
    assert "the chain's lags 1, 3" in figure.suptitle and "beyond" not in figure.suptitle
    panels = {panel.title.split("\n")[0]: panel for panel in figure.panels if panel.title}
    assert panels["layer 0, past"].xticks == ["1*", "2", "3*", "4"]
    assert panels["layer 1, past"].xticks == ["1*", "2"]
    assert "lag 3 lies beyond its max_order 2" in panels["layer 1, past"].title


def test_a_run_without_a_chain_has_captions_that_name_no_chain_lags(tmp_path, drawn):
    """A text run's captions spoke of the chain's lags (outlined, *, shaded) that its figures do not have."""
    page, _ = _report(tmp_path, {}, chain=False)
    assert "Order gates" in page and "Attention by lag" in page and "transition strengths" in page
    assert "chain&#x27;s lags" not in page and "chain's lags" not in page
    (tmp_path / "chain").mkdir()
    with_chain, _ = _report(tmp_path / "chain", {})
    for marker in ("outlined", "*", "shaded"):  # each figure that marks the chain's lags says how, as before
        assert f"{marker}: the chain&#x27;s lags" in with_chain
