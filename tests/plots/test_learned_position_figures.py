"""`markovformer inspect` draws what the positional attention kinds learned about position: T5's bucketed bias at
every lag, the dynamic-bias MLP's bias, ALiBi's slopes and bias, FoX's forget gates and their decay by lag, CoPE's
position term by contextual position. Before, their runs' reports held attention maps and attention by lag only.

The numbers are checked against naive reimplementations (T5's buckets by a hand loop, the MLP by hand, ALiBi's
closed form, FoX's decays and CoPE's terms summed by hand over the tokens read); the figures are read as matplotlib
draws them (each line's data, the boxes' medians), not as pixels."""

from __future__ import annotations

import html
import json
import math
import re

import numpy as np
import pytest
import torch
from conftest import keep_saved_figures
from test_inspect_labels import _report

from markovformer.data.collate import collate
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForTokenClassification,
)
from markovformer.plots import learned_positions as figures_module
from markovformer.plots.learned_positions import BiasPanel, plot_forget_gates, plot_t5_bias
from markovformer.training.learned_positions import (
    BAND,
    QUANTILES,
    ReadPositions,
    decay_lags,
    lag_bias,
    position_cores,
    position_figures,
    trained_lag,
)


def _model(attention, causal: bool = True, n_heads: int = 4, **options) -> MarkovianTransformerForTokenClassification:
    config = MarkovianTransformerConfig(vocab_size=7, d_model=16, n_layers=len(attention), n_heads=n_heads,
                                        position="none", dropout=0.0, attention=attention, causal=causal,
                                        **options)  # fmt: skip
    torch.manual_seed(0)
    model = MarkovianTransformerForTokenClassification(config).eval()
    with torch.no_grad():  # away from the init's small values, so a wrong lag or bucket shows
        for name, parameter in model.named_parameters():
            if name.endswith(("lag_bias.table", "position_embeddings")):
                parameter.normal_()
    return model


@pytest.fixture
def drawn(kept_figures) -> dict[str, object]:
    """{file name: the matplotlib Figure} of every figure plots.learned_positions saves from now on (not rendered)."""
    return kept_figures(figures_module)


# --------------------------------------------------------------------------- T5's buckets


def _t5_bucket(lag: int, num_buckets: int, max_distance: int, bidirectional: bool) -> int:
    """T5's bucket of one lag t - j, written out from the paper's description (mesh-tensorflow's function)."""
    offset = 0
    if bidirectional:
        num_buckets //= 2
        offset = num_buckets if lag < 0 else 0
        distance = abs(lag)
    else:
        distance = max(lag, 0)
    exact = num_buckets // 2
    if distance < exact:
        return offset + distance
    log_spaced = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return offset + min(log_spaced, num_buckets - 1)


@pytest.mark.parametrize("causal", [True, False])
def test_t5_bias_is_the_table_read_through_its_buckets_at_every_lag(causal):
    model = _model([{"kind": "t5_bias", "num_buckets": 16, "max_distance": 40}], causal=causal)
    core = position_cores(model)[0]
    table = core.lag_bias.table.detach().numpy()
    bias = lag_bias(0, core, trained_lag=23)
    last = 50  # 1.25 x max_distance: past max_distance (and the training length 23), the last bucket shows flat
    assert bias.lags.tolist() == list(range(0 if causal else -last, last + 1))
    buckets = [_t5_bucket(int(lag), 16, 40, bidirectional=not causal) for lag in bias.lags]
    assert bias.buckets.tolist() == buckets
    np.testing.assert_allclose(bias.bias, table[:, buckets], rtol=0, atol=0)
    # every bucket is drawn, none lies beyond the lags drawn (bidirectional: bucket 8, the future's lag 0, is no lag)
    assert set(buckets) == set(range(16)) - ({8} if not causal else set())
    numbers = bias.numbers()
    assert numbers["bias_per_head"] == np.round(table[:, buckets].astype(float), 6).tolist()
    assert "nats" in numbers["unit"]


@pytest.mark.parametrize("causal", [True, False])
def test_the_t5_caption_says_which_lags_have_a_bucket_of_their_own(tmp_path, drawn, causal):
    """The caption said "its own below num_buckets / 2" of a bidirectional layer too, whose buckets are split by
    sign: there only lags 0..num_buckets / 4 - 1 have a bucket of their own."""
    model = _model([{"kind": "t5_bias", "num_buckets": 16, "max_distance": 40}], causal=causal)
    with ReadPositions(model) as read:
        pass  # no pass: t5_bias reads no tokens

    class Config:
        data = {"seq_len": 24}

    [(caption, _, numbers)] = position_figures(Config(), model, read, tmp_path, 0, 24)
    said = re.search(r"its own below num_buckets / (\d)", caption)
    buckets = numbers["layers"][0]["bucket_per_lag"]
    own = [lag for lag, bucket in zip(numbers["layers"][0]["lags"], buckets, strict=True)
           if lag >= 0 and buckets.count(bucket) == 1]  # fmt: skip
    assert said and own == list(range(16 // int(said.group(1)))), caption


def test_a_local_t5_layer_is_drawn_to_its_window():
    core = position_cores(_model([{"kind": "t5_bias", "scope": "local", "window": 6}]))[0]
    assert lag_bias(0, core, trained_lag=6).lags.tolist() == list(range(7))  # no key lies further


# --------------------------------------------------------------------------- the dynamic bias MLP


def test_dynamic_bias_is_the_mlp_of_the_log_distance_at_lags_up_to_the_training_length():
    model = _model([{"kind": "dynamic_bias", "bias_hidden": 8, "bias_depth": 2}])
    core = position_cores(model)[0]
    bias = lag_bias(0, core, trained_lag=23)
    assert bias.lags.tolist() == list(range(24))
    first, _, second, _, last = core.lag_bias.mlp
    silu = lambda a: a / (1 + np.exp(-a))  # noqa: E731
    weights = [(layer.weight.detach().double().numpy(), layer.bias.detach().double().numpy())
               for layer in (first, second, last)]  # fmt: skip
    for lag in range(24):  # the MLP by hand: log(1 + lag), two SiLU layers, one output per head
        hidden = np.array([math.log1p(lag)])
        for index, (weight, offset) in enumerate(weights):
            hidden = weight @ hidden + offset
            hidden = silu(hidden) if index < 2 else hidden
        np.testing.assert_allclose(bias.bias[:, lag], hidden, rtol=1e-5, atol=1e-6)


def test_the_longest_lag_met_in_training_is_the_window_else_the_training_length():
    class Config:
        data = {"seq_len": 24}

    local = position_cores(_model([{"kind": "dynamic_bias", "scope": "local", "window": 5}]))[0]
    wide = position_cores(_model(["dynamic_bias"]))[0]
    assert trained_lag(Config(), local, 100)[0] == 5
    assert trained_lag(Config(), wide, 100)[0] == 23
    Config.data = {}
    assert trained_lag(Config(), wide, 100)[0] == 99  # no seq_len: the longest sequence read


# --------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_slopes_and_bias_are_the_closed_form_and_the_ops_own_bias(causal):
    from markovformer.ops.forgetting_attention.naive import dense_decay_bias

    model = _model(["alibi"], causal=causal)
    core = position_cores(model)[0]
    bias = lag_bias(0, core, trained_lag=12)
    slopes = np.array([2.0 ** (-8.0 * h / 4) for h in range(1, 5)])
    np.testing.assert_allclose(bias.slopes, slopes, rtol=1e-6)
    lags = np.arange(0 if causal else -12, 13)
    assert bias.lags.tolist() == lags.tolist()
    np.testing.assert_allclose(bias.bias, -slopes[:, None] * np.abs(lags)[None, :], rtol=1e-5, atol=1e-6)
    # the op's dense bias of the layer's own log gates, read at the last query of 13 tokens
    dense = dense_decay_bias(core.log_forget(torch.zeros(1, 25, 16), 4))[0, :, 12]  # (H, keys)
    np.testing.assert_allclose(bias.bias, dense[:, 12 - lags].numpy(), rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------- FoX and CoPE: read from the data


def _examples(lengths=(14, 9, 12, 5, 11)) -> list[dict]:
    generator = torch.Generator().manual_seed(3)
    return [{"input_ids": torch.randint(0, 7, (length,), generator=generator)} for length in lengths]


def _layer_inputs(model, batch, layer: int) -> torch.Tensor:
    """The input (B, T, D) the attention of ``layer`` reads (after its block's norm), read from a hook of its own."""
    seen = []
    block = model.model.blocks[layer]
    handle = block.attention_norm.register_forward_hook(lambda module, args, output: seen.append(output))
    with torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    handle.remove()
    return seen[0].detach()


def test_fox_gates_and_decays_are_those_of_the_real_tokens_read():
    model = _model(["softmax", "forgetting"])
    examples = _examples()
    batch = collate(examples)
    with ReadPositions(model) as read, torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_weights=True)
    gates = read.forget_gates({1: 13})[1]
    assert not position_cores(model)[1]._forward_pre_hooks  # the hooks are gone after the passes

    x = _layer_inputs(model, batch, 1).double()
    gate = model.model.blocks[1].attention.cores[0].forget_gate
    f = torch.sigmoid(x @ gate.weight.detach().double().T + gate.bias.detach().double())  # (B, T, H)
    rows = [f[row, :len(example["input_ids"])] for row, example in enumerate(examples)]  # padding left out
    every = torch.cat(rows).numpy()
    assert gates.tokens == sum(len(e["input_ids"]) for e in examples) == len(every)
    np.testing.assert_allclose(gates.gate_quantiles, np.quantile(every, QUANTILES, axis=0).T, rtol=1e-5)
    np.testing.assert_allclose(gates.gate_mean, every.mean(0), rtol=1e-5)
    assert gates.lags.tolist() == list(range(14))
    for index, lag in enumerate(gates.lags):  # the decay of key t - lag: log f summed over t - lag + 1..t, by hand
        values = [[sum(math.log(row[l, head]) for l in range(t - lag + 1, t + 1)) for row in rows
                   for t in range(lag, len(row))] for head in range(4)]  # fmt: skip
        np.testing.assert_allclose(gates.decay[:, index], np.quantile(values, BAND, axis=1).T, rtol=1e-4,
                                   atol=1e-6)  # fmt: skip
    numbers = gates.numbers()
    assert numbers["kind"] == "forgetting" and len(numbers["decay_per_head"][0]) == 14


def test_fox_decays_past_lag_16_are_read_at_log_spaced_lags():
    lags = decay_lags(511)
    assert lags[:17].tolist() == list(range(17)) and lags[-1] == 511
    assert len(lags) <= 50 and np.all(np.diff(lags) > 0)


def test_cope_terms_are_each_real_querys_q_dot_the_embeddings():
    model = _model([{"kind": "cope", "npos_max": 10}])
    examples = _examples()
    batch = collate(examples)
    with ReadPositions(model) as read, torch.no_grad():
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], return_weights=True)
    terms = read.cope_terms()[0]

    attention = model.model.blocks[0].attention
    x = _layer_inputs(model, batch, 0)
    with torch.no_grad():
        q, k, _ = attention.qkv(x).view(*x.shape[:2], 3, 4, 4).unbind(2)  # (B, T, H, Dh) each
    table = attention.cores[0].position_embeddings.detach()
    queries, reach = [], []
    for row, example in enumerate(examples):
        for t in range(len(example["input_ids"])):
            queries.append(q[row, t])
            # the position of the first key: every gate sigmoid(q·k / sqrt(Dh)) of the keys 0..t, summed
            gates = [torch.sigmoid(q[row, t] @ k[row, j].T / 2.0).diagonal() for j in range(t + 1)]
            reach.append(torch.stack(gates).sum(0).clamp(max=9))
    assert terms.queries == len(queries) == sum(len(e["input_ids"]) for e in examples)
    values = (torch.stack(queries) @ table.T).permute(1, 2, 0).double().numpy()  # (H, npos, N)
    np.testing.assert_allclose(terms.quantiles, np.moveaxis(np.quantile(values, BAND, axis=-1), 0, -1),
                               rtol=1e-4, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(terms.mean, values.mean(-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(terms.positions, np.quantile(torch.stack(reach).numpy(), BAND, axis=0).T, rtol=1e-4)


# --------------------------------------------------------------------------- the figures draw their numbers


def test_the_t5_figure_draws_each_heads_bias_at_each_lag(tmp_path, drawn):
    values = np.array([[0.5, 0.5, -0.2, 0.1], [0.0, 1.0, 1.0, -1.5]])
    panel = BiasPanel(3, np.arange(4), values, marks={"max_distance 2": 2})
    plot_t5_bias([panel], tmp_path / "t5_bias.png")
    ax = drawn["t5_bias.png"].axes[0]
    curves = [line for line in ax.get_lines() if line.get_label().startswith("head")]
    assert [list(line.get_ydata()) for line in curves] == values.tolist()
    assert [list(line.get_xdata()) for line in curves] == [[0, 1, 2, 3]] * 2
    assert "nats" in ax.get_ylabel() and "tokens" in ax.get_xlabel() and ax.get_title() == "layer 3"
    assert [line.get_xdata()[0] for line in ax.get_lines() if line.get_label() == "max_distance 2"] == [2]
    both = BiasPanel(0, np.arange(-1, 2), values[:, :3])  # a bidirectional layer: the key after the query at -1
    plot_t5_bias([both], tmp_path / "t5_bias.png")
    assert "after" in drawn["t5_bias.png"].axes[0].get_xlabel()


def test_the_forget_gate_figure_draws_the_quantiles_and_the_decay(tmp_path, drawn):
    quantiles = np.array([[0.1, 0.3, 0.5, 0.6, 0.9], [0.8, 0.85, 0.9, 0.95, 0.99]])
    decay = np.array([[0.0, -0.7, -1.4], [0.0, -0.1, -0.2]])
    panel = BiasPanel(1, np.arange(3), decay, band=(decay - 0.1, decay + 0.1))
    plot_forget_gates({1: quantiles}, [panel], tmp_path / "forget_gates.png")
    boxes, lines = drawn["forget_gates.png"].axes
    medians = [line.get_ydata().tolist() for line in boxes.get_lines() if line.get_gid() == "medians"]
    assert medians == [[0.5, 0.5], [0.9, 0.9]]
    caps = [line.get_ydata()[0] for line in boxes.get_lines() if line.get_gid() == "caps"]
    assert caps == [0.1, 0.9, 0.8, 0.99]  # each head's whiskers: its 5% and 95% quantiles
    curves = [line for line in lines.get_lines() if line.get_label().startswith("head")]
    assert [list(line.get_ydata()) for line in curves] == decay.tolist()
    assert "nats" in lines.get_ylabel()



def _noisy_panels(rng, lags: int = 64) -> list[BiasPanel]:
    """Two layers of four heads whose curves wander over every lag, as a short run's CoPE terms or T5 biases do."""
    x = np.arange(lags)
    return [BiasPanel(layer, x, rng.normal(0.0, 0.01, (4, lags)), band=None, marks={"max_distance 40": 40})
            for layer in (0, 1)]  # fmt: skip


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory) -> dict:
    """Each of the five figures drawn from curves that fill their panels; {file name: figure}, rendered once for
    the tests that only read them."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _draw_every_kind(tmp_path_factory.mktemp("every_kind"), keep_saved_figures(monkeypatch, figures_module))


def _draw_every_kind(tmp_path, drawn) -> dict:
    panels = _noisy_panels(np.random.default_rng(0))
    figures_module.plot_t5_bias(panels, tmp_path / "t5_bias.png")
    figures_module.plot_dynamic_bias(panels, tmp_path / "dynamic_bias.png")
    figures_module.plot_cope_terms(panels, tmp_path / "cope_positions.png")
    figures_module.plot_alibi_bias({0: np.array([0.25, 0.0625]), 1: np.array([0.25, 0.0625])},
                                   [BiasPanel(layer, np.arange(32), -np.outer([0.25, 0.0625], np.arange(32)))
                                    for layer in (0, 1)], tmp_path / "alibi.png")  # fmt: skip
    quantiles = np.tile([0.1, 0.3, 0.5, 0.7, 0.9], (4, 1))
    figures_module.plot_forget_gates({0: quantiles, 1: quantiles}, panels, tmp_path / "forget_gates.png")
    assert sorted(drawn) == ["alibi.png", "cope_positions.png", "dynamic_bias.png", "forget_gates.png",
                             "t5_bias.png"]  # fmt: skip
    for figure in drawn.values():
        figure.canvas.draw()
    return drawn


def test_each_figure_keeps_its_title_inside_the_figure(every_kind):
    """The T5 figure's title ran past both edges of its 6.4-inch figure (its first letter cut: '5_bias: learned')."""
    for name, figure in every_kind.items():
        title = figure._suptitle.get_window_extent(figure.canvas.get_renderer())
        assert 0 <= title.x0 and title.x1 <= figure.bbox.width, name


def test_no_legend_stands_over_a_curve(every_kind):
    """A legend at matplotlib's "best" stood over the curves where they fill the panel (a short run's CoPE terms):
    each stands where it covers no point, outside on the right when every place inside would."""
    from test_axes_and_ticks import _covered_points

    for name, figure in every_kind.items():
        for ax in figure.axes:
            if ax.get_legend() is not None:
                assert _covered_points(ax) == [], (name, ax.get_title())

def _numbers(page: str, name: str) -> dict:
    """The JSON block that follows the figure ``name`` on the report's page."""
    block = re.search(re.escape(name) + r'".*?<pre>(.*?)</pre>', page, re.S)
    return json.loads(html.unescape(block.group(1)))


def _captions(page: str) -> list[str]:
    return [html.unescape(caption) for caption in re.findall(r"<figcaption>(.*?)</figcaption>", page)]


def test_a_model_mixing_kinds_draws_each_layers_own_figure_with_its_numbers(tmp_path, drawn):
    """Layers t5_bias, dynamic_bias, alibi, forgetting, cope: each kind's figure, titled by its layer, drawing the
    numbers the page prints under it, those of the layer's own bias code."""
    attention = ["t5_bias", {"kind": "dynamic_bias", "scope": "local", "window": 5}, "alibi", "forgetting",
                 {"kind": "cope", "npos_max": 12}]  # fmt: skip
    page, model = _report(tmp_path, {"n_layers": 5, "max_order": None, "position": "none", "attention": attention})
    assert set(drawn) == {"t5_bias.png", "dynamic_bias.png", "alibi.png", "forget_gates.png", "cope_positions.png"}
    cores = position_cores(model)
    for name, layer, kind in (("t5_bias.png", 0, "t5_bias"), ("dynamic_bias.png", 1, "dynamic_bias"),
                              ("alibi.png", 2, "alibi")):  # fmt: skip
        numbers = _numbers(page, name)["layers"]
        assert [entry["layer"] for entry in numbers] == [layer] and numbers[0]["kind"] == kind
        ax = drawn[name].axes[-1]
        assert ax.get_title().startswith(f"layer {layer}")
        curves = [line for line in ax.get_lines() if line.get_label().startswith("head")]
        own = lag_bias(layer, cores[layer], trained_lag=23)  # the run's seq_len is 24
        np.testing.assert_allclose([line.get_ydata() for line in curves], own.bias, rtol=1e-6)
        np.testing.assert_allclose(numbers[0]["bias_per_head"], own.bias, atol=1e-6)
        assert numbers[0]["lags"] == [int(x) for x in curves[0].get_xdata()] == own.lags.tolist()
    assert _numbers(page, "dynamic_bias.png")["layers"][0]["lags"] == list(range(6))  # its window 5
    fox = _numbers(page, "forget_gates.png")["layers"]
    assert [entry["layer"] for entry in fox] == [3]
    decay = [line for line in drawn["forget_gates.png"].axes[1].get_lines() if line.get_label().startswith("head")]
    np.testing.assert_allclose([line.get_ydata() for line in decay], np.array(fox[0]["decay_per_head"])[..., 1],
                               atol=1e-6)  # fmt: skip
    cope = _numbers(page, "cope_positions.png")["layers"]
    assert [entry["layer"] for entry in cope] == [4] and cope[0]["contextual_positions"] == list(range(12))
    captions = {caption.split(",")[0]: caption for caption in _captions(page)}
    for kind in ("t5_bias", "dynamic_bias", "alibi", "forgetting (FoX)", "cope"):
        assert "(nats)" in captions[kind] and "layer" in captions[kind]
    for kind in ("t5_bias", "dynamic_bias", "alibi", "forgetting (FoX)"):
        assert "in tokens" in captions[kind]


def test_a_model_without_positional_kinds_draws_none_of_these(tmp_path, drawn):
    page, _ = _report(tmp_path, {"n_layers": 1, "max_order": 2})
    assert drawn == {} and "the numbers drawn above" not in page


def test_the_page_prints_a_figures_numbers_as_json_under_it(tmp_path):
    from markovformer.plots import write_html_report

    (tmp_path / "a.png").write_bytes(b"")
    numbers = {"layers": [{"kind": "t5_bias", "note": "<b>", "bias_per_head": [[0.25, -1.5]]}]}
    page = write_html_report(tmp_path, "run", [("first", tmp_path / "a.png", numbers),
                                               ("second", tmp_path / "a.png")]).read_text()  # fmt: skip
    assert _numbers(page, "a.png") == numbers  # escaped on the page ("<b>"), read back whole
    assert page.count("the numbers drawn above") == 1  # the figure without numbers has no block
    # a band with nothing in it (nan) is strict JSON's null, which any parser reads (NaN is Python's alone)
    numbers["layers"][0]["bias_per_head"][0][1] = float("nan")
    page = write_html_report(tmp_path, "run", [("first", tmp_path / "a.png", numbers)]).read_text()
    block = re.search(r'a\.png".*?<pre>(.*?)</pre>', page, re.S).group(1)
    assert json.loads(html.unescape(block), parse_constant=pytest.fail)["layers"][0]["bias_per_head"] == [[0.25, None]]
