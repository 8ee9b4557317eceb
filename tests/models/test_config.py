"""MarkovianTransformerConfig refuses bad values and bad combinations with a message naming the field."""

from __future__ import annotations

import math

import pytest

from markovformer import (
    BinaryTransformerConfig,
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovTranslatorConfig,
    ScanMarkovConfig,
)
from markovformer.layers.markov_attention import MarkovOptions

BASE = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=2)


@pytest.mark.parametrize(
    "changes, field",
    [
        (dict(d_model=18, n_heads=4), "d_model"),
        (dict(attention="linformer"), "attention"),
        (dict(attention=["markov", "flash"]), "attention"),
        (dict(attention=["markov", "softmax", "rff"]), "attention"),
        (dict(window=1, max_order=3), "window"),
        (dict(causal=True, bidirectional=True), "bidirectional"),
        (dict(causal=True, gate_input="sequence"), "gate_input"),
        (dict(input_dim=8), "vocab_size"),
        (dict(vocab_size=None), "vocab_size"),
        (dict(vocab_size=None, input_dim=8, tie_word_embeddings=True), "tie_word_embeddings"),
        (dict(dropout=-0.1), "dropout"),
        (dict(markov_head_ratio=1.5), "markov_head_ratio"),
        (dict(n_heads=0), "n_heads"),
        (dict(scope="everywhere"), "scope"),
        (dict(scope="global", window=3), "window"),
        (dict(gate_entropy_weight=-1.0), "gate_entropy_weight"),
        (dict(position="learned"), "max_positions"),
        (dict(scope="global", backend="banded"), "backend"),
        (dict(scope="local", backend="chunked"), "backend"),
        (dict(gate="nope"), "gate"),
        (dict(gate_input="nope"), "gate_input"),
        (dict(transition="nope"), "transition"),
        (dict(backend="nope"), "backend"),
        (dict(gate_gumbel_tau=0.0), "gate_gumbel_tau"),
        (dict(max_order=0), "max_order"),
        (dict(max_order=True), "max_order"),
        (dict(attention="hybrid_split", markov_head_ratio=-0.5), "markov_head_ratio"),
        (dict(attention=["markov", "hybrid_split"], markov_head_ratio=1.5), "markov_head_ratio"),
        (dict(attention="hybrid_parallel", redraw_interval=-1), "redraw_interval"),
        (dict(d_model=18), "position"),  # rotary needs an even head dimension: 18 / 2 = 9
        (dict(attention=["markov", {"kind": "markov", "scope": "global", "window": 3}]), r"attention\[1\]\.window"),
    ],
)
def test_bad_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=rf"MarkovianTransformerConfig\.{field}="):
        MarkovianTransformerConfig(**{**BASE, **changes})


NON_FINITE = [
    (MarkovianTransformerConfig, BASE, "dropout", math.nan),  # nn.Dropout refused it at the first training step
    (MarkovianTransformerConfig, dict(BASE, attention="softmax"), "dropout", math.nan),
    (MarkovianTransformerConfig, BASE, "gate_entropy_weight", math.nan),  # a nan loss, silently
    (MarkovianTransformerConfig, BASE, "transition_penalty", math.inf),
    (MarkovianTransformerConfig, BASE, "initializer_range", math.inf),  # inf weights
    (ScanMarkovConfig, dict(vocab_size=11, order=2), "initializer_range", math.inf),
    (MarkovTranslatorConfig, dict(vocab_size=11), "initializer_range", math.inf),
    (BinaryTransformerConfig, {}, "initializer_range", math.inf),
]


@pytest.mark.parametrize(("config_class", "base", "field", "value"), NON_FINITE,
                         ids=[f"{c.__name__}.{f}={v}-{i}" for i, (c, _, f, v) in enumerate(NON_FINITE)])  # fmt: skip
def test_a_number_that_is_not_finite_is_refused_naming_the_field(config_class, base, field, value):
    """nan compares False with every bound, so a rule written as "refuse below the bound" let it through."""
    with pytest.raises(ValueError, match=rf"^{config_class.__name__}(\.attention\[0\])?\.{field}={value}: must be"):
        config_class(**{**base, field: value})


@pytest.mark.parametrize(("field", "value"), [("causal", "false"), ("gru", "no"), ("gate_null", 0),
                                              ("head_specific", "False"), ("tie_word_embeddings", 1), ("bias", None),
                                              ("attention_bias", "true"), ("bidirectional", "yes")])  # fmt: skip
def test_a_switch_that_is_not_a_boolean_is_refused_naming_it(field, value):
    """A string is truthy: causal="false" built a causal model, gru="no" a GRU injection, with no word."""
    with pytest.raises(ValueError, match=rf"^MarkovianTransformerConfig\.{field}={value!r}: must be True(,| or) False"):
        MarkovianTransformerConfig(**{**BASE, "causal": False, field: value})


def test_markov_options_own_the_defaults_and_per_value_rules():
    config, options = MarkovianTransformerConfig(vocab_size=11), MarkovOptions()
    shared = ("max_order", "gate", "gate_input", "gate_null", "gate_gumbel_tau", "transition", "head_specific",
              "dropout", "backend")  # fmt: skip
    assert {name: getattr(config, name) for name in shared} == {name: getattr(options, name) for name in shared}
    # the layer's options refuse the same value with the same reason; the config only prefixes its name
    with pytest.raises(ValueError) as from_options:
        MarkovOptions(gate="nope")
    with pytest.raises(ValueError) as from_config:
        MarkovianTransformerConfig(**BASE, gate="nope")
    assert str(from_options.value).startswith("gate='nope': must be one of")
    assert str(from_config.value) == f"MarkovianTransformerConfig.{from_options.value}"


def test_sequence_gate_is_allowed_when_bidirectional():
    config = MarkovianTransformerConfig(**BASE, causal=False, gate_input="sequence")
    assert config.bidirectional is True and config.window == config.max_order


def test_both_inputs_message_names_both_fields():
    with pytest.raises(ValueError, match="input_dim"):
        MarkovianTransformerConfig(**BASE, input_dim=8)


def test_unknown_field_suggests_the_close_one():
    with pytest.raises(ValueError, match="'max_ordr'.*did you mean 'max_order'"):
        MarkovianTransformerConfig.from_dict({**BASE, "max_ordr": 3})


def test_a_value_that_is_not_a_string_gets_no_near_miss():
    """suggest() compared str(value): the number 3 was asked "did you mean 'h3'?", True "did you mean 'true'?"; a
    value of another type is no misspelling of a name."""
    from markovformer.advice import suggest

    assert suggest("h4x", ["h3", "h4"]) == " (did you mean 'h4'?)"
    assert [suggest(value, ["h3", "true", "[1]"]) for value in (3, True, [1])] == ["", "", ""]


def test_an_option_only_some_kinds_read_is_shown_set_per_layer():
    base = {"vocab_size": 5, "d_model": 8, "n_heads": 2}
    with pytest.raises(ValueError, match=r"no field 'attend_current': 'attend_current' is an option of attention "
                                         r"kind 'stick_breaking', set per layer: attention: \[\{kind: stick_breaking, "
                                         r"attend_current: \.\.\.\}"):  # fmt: skip
        MarkovianTransformerConfig.from_dict({**base, "attend_current": True})
    with pytest.raises(ValueError, match=r"no field 'num_bucket' \(did you mean 'num_buckets'\? 'num_buckets' is an "
                                         r"option of attention kind 't5_bias'"):  # fmt: skip
        MarkovianTransformerConfig.from_dict({**base, "num_bucket": 8})
    written = {**base, "n_layers": 2, "attention": [{"kind": "stick_breaking", "attend_current": True}] * 2}
    assert MarkovianTransformerConfig.from_dict(written).layer_specs()[0].settings.attend_current is True


def test_model_type_mismatch():
    with pytest.raises(ValueError, match="model_type 'mat'"):
        MarkovianTransformerConfig.from_dict({**BASE, "model_type": "mat"})


def test_dict_round_trip_keeps_every_field():
    config = MarkovianTransformerConfig(**BASE, attention=["markov", "rff"], causal=False, gate="deep_mlp")
    values = config.to_dict()
    assert values["model_type"] == "markovian_transformer"
    assert MarkovianTransformerConfig.from_dict(values) == config


def test_causal_lm_needs_a_causal_config():
    with pytest.raises(ValueError, match="causal"):
        MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**BASE, causal=False))


@pytest.mark.parametrize(
    "options, named",
    [
        (dict(attention="softmax", max_order=8), ("max_order", "'softmax'")),
        (dict(attention="rff", window=64), ("window", "'rff'")),
        (dict(attention="markov", num_features=32), ("num_features", "'markov'")),
        (dict(attention="retnet", gate="mlp"), ("gate", "'retnet'")),
        (dict(attention=["markov", "rff"], linformer_k=8), ("linformer_k", "'markov' / 'rff'")),
        (dict(attention="hyena", scope="local"), ("scope", "'hyena'")),
    ],
)
def test_an_option_the_kind_does_not_read_is_an_error_naming_it_and_the_kind(options, named):
    values = {**BASE, **options}
    if options["attention"] != "markov" and "max_order" not in options:
        values.pop("max_order")  # BASE sets it for Markov layers
    with pytest.raises(ValueError, match="MarkovianTransformerConfig") as error:
        MarkovianTransformerConfig(**values)
    option, kind = named
    assert f"{option}=" in str(error.value) and f"has no option {option!r}" in str(error.value)
    assert kind in str(error.value)


@pytest.mark.parametrize(
    "options, field",
    [
        # options of a part the model does not build: each was accepted and silently changed nothing
        (dict(gate="none", gate_input="query"), "gate_input"),
        (dict(gate="none", gate_gumbel_tau=0.5), "gate_gumbel_tau"),
        (dict(gate="none", gate_null=False), "gate_null"),
        (dict(attention="hybrid_parallel", gate="none", gate_null=False), "gate_null"),
        (dict(attention=["markov", {"kind": "markov", "gate": "none", "gate_null": False}]),
         r"attention\[1\]\.gate_null"),
        (dict(gate="none", gate_entropy_weight=0.1), "gate_entropy_weight"),
        (dict(attention="softmax", gate_entropy_weight=0.1), "gate_entropy_weight"),
        (dict(attention="rff", transition_penalty=0.1), "transition_penalty"),
        (dict(attention="hybrid_split", markov_head_ratio=0.33, n_heads=3, d_model=24), "markov_head_ratio"),
        (dict(attention="hybrid_split", markov_head_ratio=0.0, gate_entropy_weight=0.1), "gate_entropy_weight"),
        (dict(attention="hybrid_split", markov_head_ratio=0.0, transition_penalty=0.1), "transition_penalty"),
        (dict(attention=["markov", {"kind": "markov", "gate": "none", "gate_input": "static"}]),
         r"attention\[1\]\.gate_input"),
    ],
)
def test_an_option_of_a_part_that_is_not_built_is_refused_naming_it(options, field):
    values = {**BASE, **options}
    if options.get("attention", "markov") != "markov" and not isinstance(options["attention"], list):
        values.pop("max_order")
    with pytest.raises(ValueError, match=rf"MarkovianTransformerConfig\.{field}="):
        MarkovianTransformerConfig(**values)


@pytest.mark.parametrize(
    "options, refusal",
    [
        (dict(max_order=5, attention=["softmax", {"kind": "markov", "max_order": 3}]),
         "max_order=5: no layer takes it (the layers whose kind reads it set their own: attention[1].max_order=3)"),
        (dict(chunk_size=8, attention=[{"kind": "retnet", "chunk_size": 3}, "markov"]),
         "chunk_size=8: no layer takes it (the layers whose kind reads it set their own: attention[0].chunk_size=3)"),
        (dict(gate_input="query", attention=[{"kind": "markov", "gate": "none"}, "softmax"]),
         "gate_input='query': no layer takes it (the layers whose kind reads it set their own: "
         "attention[0].gate='none')"),
        (dict(num_features=8, attention=[{"kind": "rff", "num_features": 4}, {"kind": "hybrid_split",
                                                                             "num_features": 16}]),
         "num_features=8: no layer takes it (the layers whose kind reads it set their own: "
         "attention[0].num_features=4, attention[1].num_features=16)"),
    ],
)
def test_a_flat_option_that_every_layer_reading_it_overrides_is_refused_naming_them(options, refusal):
    """`attention: [softmax, {kind: markov, max_order: 3}]` with `max_order: 5` built a model of order 3 without a
    word: the one layer that reads max_order set its own, so the flat 5 changed nothing."""
    with pytest.raises(ValueError) as error:
        MarkovianTransformerConfig(**{**BASE, **options})
    assert str(error.value).startswith(f"MarkovianTransformerConfig.{refusal}; set it in "), error.value


def test_a_flat_option_taken_by_one_layer_is_kept():
    config = MarkovianTransformerConfig(**{**BASE, "max_order": 5,
                                           "attention": [{"kind": "markov", "max_order": 3}, "markov"]})  # fmt: skip
    assert [spec.settings.max_order for spec in config.layer_specs()] == [3, 5]


@pytest.mark.parametrize("attention", ["softmax", "rwkv", ["softmax", "alibi"]])
def test_bidirectional_false_that_no_part_reads_is_refused(attention):
    """A non-causal softmax (or RWKV, ...) model with bidirectional=False read both sides as before: only the Markov
    lag biases and the GRU injection read the switch. Refused, naming it; taken where one of them is built."""
    values = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, causal=False, attention=attention)
    with pytest.raises(ValueError, match=r"^MarkovianTransformerConfig\.bidirectional=False: no part of this model "
                                         r"reads it \(the future lag biases of .*markov.*, the GRU injection: "
                                         r"gru=True\)"):
        MarkovianTransformerConfig(**values, bidirectional=False)
    assert MarkovianTransformerConfig(**values, bidirectional=False, gru=True).bidirectional is False
    assert MarkovianTransformerConfig(**values).bidirectional is True


def test_the_regularisers_are_taken_where_their_part_is_built():
    """The counterpart of the refusals above: a gate-less Markov layer still has a transition penalty, a hybrid
    layer has gates, and a layer whose entry turns its gate off does not inherit the flat gate's input."""
    assert MarkovianTransformerConfig(**BASE, gate="none", transition_penalty=0.1).transition_penalty == 0.1
    assert MarkovianTransformerConfig(**BASE, attention="hybrid_split", gate_entropy_weight=0.1).gate_entropy_weight
    assert MarkovianTransformerConfig(**BASE, attention="hybrid_split", markov_head_ratio=0.5,
                                      transition_penalty=0.1).transition_penalty  # 1 of 2 heads is Markov
    config = MarkovianTransformerConfig(**BASE, gate_input="query", gate_null=False,
                                        attention=["markov", {"kind": "markov", "gate": "none"}])
    assert [(spec.settings.gate, spec.settings.gate_input, spec.settings.gate_null)
            for spec in config.layer_specs()] == [("linear", "query", False), ("none", "token", True)]


def test_softmax_with_a_window_is_sliding_window_softmax_and_needs_scope_local():
    values = {key: value for key, value in BASE.items() if key != "max_order"}
    with pytest.raises(ValueError, match="window"):  # softmax is global unless asked: a window alone is an error
        MarkovianTransformerConfig(**values, attention="softmax", window=64)
    with pytest.raises(ValueError, match="needs a window"):
        MarkovianTransformerConfig(**values, attention="softmax", scope="local")
    config = MarkovianTransformerConfig(**values, attention="softmax", scope="local", window=64)
    core = MarkovianTransformerForCausalLM(config).model.blocks[0].attention.cores[0]
    assert core.window == 64
    assert MarkovianTransformerConfig(**values, attention="softmax").scope == "global"
    assert MarkovianTransformerConfig(**BASE).scope == "local"
    assert MarkovianTransformerConfig(**values, attention="rff").scope is None  # rff has no scope
    # the same config with attention="markov" instead: "what does the Markov bias add" is one flag
    markov = config.replace(attention="markov")
    assert markov.scope == "local" and markov.window == 64
