"""`markovformer inspect`'s attention figures draw the numbers the model hands out, as they are: a signed weight
(RetNet's retention) is not clipped to a 0..1 probability scale, a bidirectional model's keys after the query are
drawn beside those before it, a global layer's panel says how much of its attention the lags drawn hold, and the
caption names the lags each layer was read to when the tokens read cut its window short.

The figures are read as matplotlib draws them (images' colour scales, axis limits, lines' x values, titles), not as
pixels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_inspect_labels import _report, drawn  # noqa: F401  (drawn: a fixture)

from markovformer.data.collate import collate
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForTokenClassification,
)
from markovformer.plots import curves, markov, plot_training_curves
from markovformer.training import inspection
from markovformer.training.inspection import write_inspection_report
from markovformer.training.lag_profiles import lag_profiles


def _maps(low: float, high: float) -> list[torch.Tensor]:
    """One layer's (1, 2, 5, 5) causal maps whose entries run from ``low`` to ``high``."""
    weights = torch.linspace(low, high, 50).reshape(1, 2, 5, 5)
    return [weights * torch.ones(5, 5).tril()]


# --------------------------------------------------------------------------- signed weights


def test_signed_attention_weights_are_drawn_on_a_scale_that_holds_them(tmp_path, kept_figures):
    """RetNet's retention runs from about -1.1 to 1.0 in a trained run: the maps were drawn on the probability
    scale (0..1), so every negative weight had the colour of 0 and the colour bar said 'attention probability'."""
    figures = kept_figures(markov)
    maps = _maps(-0.8, 1.3)
    markov.plot_attention_maps(maps, [0], tmp_path / "attention.png")
    figure = figures["attention.png"]
    images = [image for ax in figure.axes for image in ax.images]
    assert len(images) == 2
    for image in images:
        # no weight clipped to an end of the scale
        assert image.norm.vmin <= maps[0].min() < 0 and image.norm.vmax >= maps[0].max() > 1
        assert image.norm(0.0) == pytest.approx(0.5)  # 0 in the middle: the sign reads off the colour
    assert "probabilit" not in figure._suptitle.get_text()
    colour_bar = figure.axes[-1].get_ylabel()
    assert "signed" in colour_bar and "probability (" not in colour_bar


def test_probabilities_keep_their_fixed_zero_to_one_scale(tmp_path, kept_figures):
    figures = kept_figures(markov)
    markov.plot_attention_maps(_maps(0.0, 0.9), [0], tmp_path / "attention.png")
    image = figures["attention.png"].axes[0].images[0]
    assert (image.norm.vmin, image.norm.vmax) == (0.0, 1.0)
    assert "probabilities" in figures["attention.png"]._suptitle.get_text()


def test_a_negative_mean_weight_by_lag_lies_inside_the_axis():
    """The profile's axis started at 0 whatever the data: a head's mean retention of -0.17 at lag 0 lay off it."""
    profile = np.array([[-0.17, 0.02, 0.01, 0.0], [0.09, 0.01, -0.02, 0.005]])
    ax = markov.attention_lag_figure({0: profile}).axes[0]
    low, high = ax.get_ylim()
    assert low <= profile.min() and high >= profile.max()
    assert "probability" not in ax.get_ylabel().replace("not a probability", "")


def test_a_retnet_runs_maps_caption_says_weights_not_probabilities(tmp_path, drawn):  # noqa: F811
    torch.manual_seed(0)
    page, model = _report(tmp_path, {"attention": "retnet", "max_order": None})
    tokens = torch.randint(0, 4, (1, 24))
    with torch.no_grad():
        weights = model(input_ids=tokens, return_weights=True).attentions[0]
    assert weights.min() < 0  # retention is signed: the premise
    assert "Attention weights of layers [0]" in page and "retnet weights: signed, not probabilities" in page
    assert "mean attention weight (signed: not a probability)" in page


# --------------------------------------------------------------------------- a bidirectional model's future keys


def _bidirectional() -> tuple[MarkovianTransformerForTokenClassification, list[dict]]:
    config = MarkovianTransformerConfig(vocab_size=6, d_model=16, n_layers=1, n_heads=2, max_order=2, causal=False,
                                        num_labels=3, dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    model = MarkovianTransformerForTokenClassification(config).eval()
    generator = torch.Generator().manual_seed(1)
    examples = [{"input_ids": torch.randint(0, 6, (length,), generator=generator),
                 "labels": torch.randint(0, 3, (length,), generator=generator)} for length in (12, 9, 12, 10, 11)]
    return model, examples


def test_a_bidirectional_models_profile_reads_the_keys_after_the_query_too():
    """A non-causal model attends to keys on both sides (a CTC run's Markov heads: about a third of their attention
    after the query); the profile read only the keys before it, and the figure drew lags 0..L alone."""
    model, examples = _bidirectional()
    profile = lag_profiles(model, examples, [0])
    reach = 3  # local window 2 (max_order) + 1
    assert profile.profiles[0].shape == profile.future[0].shape == (2, reach + 1)
    with torch.no_grad():
        batch = collate(examples)
        maps = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     return_weights=True).attentions[0]  # fmt: skip
    past, future, count = torch.zeros(2, reach + 1), torch.zeros(2, reach + 1), 0
    for row, example in enumerate(examples):  # queries with every lag 0..reach on both sides, by hand
        for t in range(reach, len(example["input_ids"]) - reach):
            past += torch.stack([maps[row, :, t, t - k] for k in range(reach + 1)], dim=1)
            future += torch.stack([maps[row, :, t, t + k] for k in range(reach + 1)], dim=1)
            count += 1
    torch.testing.assert_close(profile.profiles[0], past / count)
    torch.testing.assert_close(profile.future[0], future / count)
    assert future[:, 1:].sum() > 0.1 * count  # the premise: a real share of the attention lies after the query


def test_the_figure_draws_future_keys_at_negative_lags():
    past = np.array([[0.4, 0.2, 0.1, 0.0]])
    future = np.array([[0.4, 0.15, 0.05, 0.0]])
    rows = markov.lag_rows({0: past}, {0: future})
    lags, values = rows[0]
    assert lags.tolist() == [-2, -1, 0, 1, 2]  # lag 3 on either side is never attended: left out
    assert values.tolist() == [[0.05, 0.15, 0.4, 0.2, 0.1]]
    ax = markov.attention_lag_figure({0: past}, future={0: future}).axes[0]
    assert [list(line.get_xdata()) for line in ax.get_lines()] == [[-2, -1, 0, 1, 2]]
    assert "after the query" in ax.get_xlabel()


# --------------------------------------------------------------------------- what the lags drawn hold


def test_a_panel_whose_lags_hold_part_of_the_attention_says_how_much():
    """A global Markov layer's profile reads lags 0..max_order + 1: in a trained run those held 29-33% of layer
    0's attention, and the figure showed them as if they were all of it."""
    part = np.full((2, 6), 0.05)  # six lags of 0.05: 30% of each query's attention
    whole = np.array([[0.1, 0.2, 0.7, 0.0], [0.0, 0.0, 1.0, 0.0]])
    figure = markov.attention_lag_figure({0: part, 1: whole})
    assert "lags drawn: 30% of the attention" in figure.axes[0].get_title()
    assert "lags drawn" not in figure.axes[1].get_title()


def test_a_window_longer_than_the_tokens_read_is_captioned_with_the_lags_read(tmp_path, drawn):  # noqa: F811
    """Window 40 on sequences of 24 tokens: the caption said 'for k up to the layer's window + 1' while the
    profile stopped at lag 23."""
    page, _ = _report(tmp_path, {"max_order": None, "attention": [{"kind": "markov", "max_order": 2, "window": 40}]})
    assert ": lags 0..23, over queries 23..23 of the first" in page
    assert "layer 0 read to fewer: the 24 tokens read hold no more" in page


def test_the_caption_names_the_lags_the_figure_draws(tmp_path, drawn):  # noqa: F811
    """A local layer of window 2 is read to lag 3 (window + 1, so that the window's edge shows), where it attends
    nothing: the figure leaves lag 3 out and draws 0..2, while the caption said "lags 0..3"."""
    page, _ = _report(tmp_path, {"max_order": 2, "scope": "local", "window": 2, "attention": "markov"})
    xs = {x for panel in drawn["attention_by_lag.png"].panels for line in panel.lines_x for x in line}
    assert (min(xs), max(xs)) == (0, 2)
    assert ": lags 0..2 (read to 3; no head attends past 2: not drawn), over queries 3..23 of the first" in page


# --------------------------------------------------------------------------- the command's inputs


def test_layers_given_without_a_value_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    """`--layers` with no index left out the attention-by-lag and attention figures, silently."""
    monkeypatch.setattr(inspection, "load_trained_run", lambda target: pytest.fail("read before the check"))
    with pytest.raises(ValueError, match=r"layers=\[\]: no layer given"):
        write_inspection_report(tmp_path / "run", layers=[], out_dir=tmp_path / "report")
    assert not (tmp_path / "report").exists()


def test_the_loss_by_order_panel_names_its_unit(tmp_path, monkeypatch):
    """A scan run's validation loss at each order n (val/loss_n2, ...) is in nats, like the loss panel; its axis
    was labelled 'loss by order n' with no unit."""
    csv = tmp_path / "metrics.csv"
    csv.write_text("step,train/loss,val/loss,val/loss_n2,val/loss_n3\n10,2.5,,,\n10,,2.4,2.45,2.35\n")
    captured = {}
    monkeypatch.setattr(curves, "save_figure", lambda figure, out: captured.setdefault("figure", figure) and out)
    plot_training_curves(csv, tmp_path / "curves.png")
    labels = {ax.get_title(): ax.get_ylabel() for ax in captured["figure"].axes}
    assert labels["loss by order n"] == labels["loss"] == "loss (nats)"
