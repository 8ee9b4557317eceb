"""Per-layer options: the config resolves one spec per layer; a layer sees exactly its own window; the flat form and
its per-layer spelling build the same model; an invalid option value is reported once, naming the layer."""

from __future__ import annotations

import pytest
import torch

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM, MarkovianTransformerModel

SIZE = dict(vocab_size=11, d_model=16, n_layers=3, n_heads=2)


def _model(**options) -> MarkovianTransformerForCausalLM:
    torch.manual_seed(0)
    return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SIZE, **options)).eval()


def test_each_layer_sees_exactly_its_own_window():
    windows = [2, 5, None]
    model = _model(max_order=2, attention=[{"kind": "markov", "window": 2}, {"kind": "markov", "window": 5},
                                           {"kind": "softmax", "scope": "global"}])  # fmt: skip
    assert [spec.options.get("window") for spec in model.config.layer_specs()] == windows
    ids = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        weights = model(ids, return_weights=True).attentions
    lag = torch.arange(12)[:, None] - torch.arange(12)[None, :]
    for layer, window in enumerate(windows):
        seen = (weights[layer] > 0).all(dim=(0, 1))  # (T, T): keys every head of every row attends to
        touched = (weights[layer] > 0).any(dim=(0, 1))  # keys any head of any row attends to
        expected = (lag >= 0) & (lag <= (12 if window is None else window))
        assert torch.equal(seen, expected) and torch.equal(touched, expected), layer


def test_a_bare_scoped_kind_beside_markov_layers_is_global_unless_the_flat_scope_is_set():
    """A bare "softmax" (or ALiBi) in a mixed list took the Markov layers' flat local scope and a window of
    max_order (4 keys) silently; the README's rule is per layer: Markov local, softmax global."""
    model = _model(max_order=2, position="none", attention=[{"kind": "markov", "window": 2}, "softmax", "alibi"])
    assert [(spec.options["scope"], spec.options.get("window")) for spec in model.config.layer_specs()] == [
        ("local", 2), ("global", None), ("global", None)]  # fmt: skip
    ids = torch.randint(0, 11, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        weights = model(ids, return_weights=True).attentions
    causal = torch.ones(12, 12).tril().bool()
    assert torch.equal((weights[1] > 0).all(dim=(0, 1)), causal)  # every earlier key
    again = MarkovianTransformerConfig.from_dict(model.config.to_dict())
    assert again.layer_specs() == model.config.layer_specs()
    local = MarkovianTransformerConfig(**SIZE, max_order=2, scope="local", window=3, attention=["markov", "softmax",
                                                                                               "softmax"])  # fmt: skip
    assert [spec.options["window"] for spec in local.layer_specs()] == [3, 3, 3]  # the flat scope, when given
    windowed = MarkovianTransformerConfig(**SIZE, max_order=2, window=3, attention=["markov", "softmax", "softmax"])
    assert windowed.layer_specs() == local.layer_specs()  # or a flat window (local for every layer)


def test_a_layer_entry_with_window_null_is_global_as_one_without_it():
    """``window: null`` is global scope (the option's help: "null in global scope"); the key's mere presence made the
    layer local, refused as "window=None: scope='local' t5_bias attention needs a window", a scope never asked for."""
    lists = ([{"kind": "t5_bias", "window": None}] * 3, ["markov", {"kind": "alibi", "window": None}, "alibi"])
    for attention in lists:
        config = MarkovianTransformerConfig(**SIZE, position="none", attention=attention)
        bare = MarkovianTransformerConfig(**SIZE, position="none", attention=[
            entry["kind"] if isinstance(entry, dict) else entry for entry in attention])  # fmt: skip
        assert config.layer_specs() == bare.layer_specs()
        assert config.layer_specs()[1].options["scope"] == "global"
        assert MarkovianTransformerConfig.from_dict(config.to_dict()).layer_specs() == config.layer_specs()


def test_a_flat_config_and_its_per_layer_spelling_build_the_same_model():
    flat = _model(attention="markov", max_order=2, window=3, gate="mlp")
    per_layer = _model(attention=[{"kind": "markov", "window": 3}] * 3, max_order=2, gate="mlp")
    assert flat.config.layer_specs() == per_layer.config.layer_specs()
    flat_state, per_layer_state = flat.state_dict(), per_layer.state_dict()
    assert flat_state.keys() == per_layer_state.keys()
    assert all(torch.equal(flat_state[name], per_layer_state[name]) for name in flat_state)
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(flat(ids).logits, per_layer(ids).logits)


def test_per_layer_options_round_trip_through_a_config_dict():
    config = MarkovianTransformerConfig(**SIZE, attention=[{"kind": "markov", "window": 6}, "softmax", "rff"])
    again = MarkovianTransformerConfig.from_dict(config.to_dict())
    assert again.layer_specs() == config.layer_specs()


@pytest.mark.parametrize(("entry", "message"), [
    ({"kind": "markov", "window": 0}, r"attention\[1\]\.window=0: must be an integer in \[1"),
    ({"kind": "markov", "max_order": 0}, r"attention\[1\]\.max_order=0: must be an integer in \[1"),
    ({"kind": "markov", "gate": "tanh"}, r"attention\[1\]\.gate='tanh': must be one of"),
    ({"kind": "rff", "num_features": -3}, r"attention\[1\]\.num_features=-3"),
    ({"kind": "markov", "window": 1, "max_order": 3}, r"attention\[1\]\.window=1: smaller than max_order=3"),
    ({"kind": "softmax", "num_features": 8}, r"layer 1: kind 'softmax' has no option 'num_features'"),
    # a misspelt option or kind: the options the kind reads and the near miss (none was named)
    ({"kind": "markov", "windw": 4}, r"layer 1: kind 'markov' has no option 'windw' \(its options: .*window\) "
                                     r"\(did you mean 'window'\?\)"),
    # a kind without options says so, not "(its options: )"
    ({"kind": "scan", "chunk_size": 4}, r"layer 1: kind 'scan' has no option 'chunk_size' \(its options: none\)"),
    ({"kind": "markv"}, r"layer 1: unknown kind 'markv'; .* \(did you mean 'markov'\?\)"),
    ("markv", r"layer 1: unknown kind 'markv'; .* \(did you mean 'markov'\?\)"),
    # a kind that is not a string (a YAML list or number, a missing "kind") is refused as such, not a TypeError
    # from the kinds' dict, nor with a near miss of its digits (3 was asked "did you mean 'h3'?")
    (["markov"], r"layer 1: kind \['markov'\] must be a string naming a kind, one of \('markov', "),
    ({"kind": ["markov"]}, r"layer 1: kind \['markov'\] must be a string naming a kind, one of"),
    ({"window": 4}, r"layer 1: kind None must be a string naming a kind, one of"),
    (3, r"layer 1: kind 3 must be a string naming a kind, one of \([^)]*'h3'[^)]*\)$"),
    ({"kind": 3}, r"layer 1: kind 3 must be a string naming a kind, one of \([^)]*\)$"),
    # a causal model's layer may not read the future: through a gate pooled over the sequence, or future biases
    ({"kind": "markov", "gate_input": "sequence"}, r"attention\[1\]\.gate_input='sequence': .* needs bidirectional"),
    ({"kind": "hybrid_split", "gate_input": "sequence"}, r"attention\[1\]\.gate_input='sequence'"),
    ({"kind": "hybrid_parallel", "gate_input": "sequence"}, r"attention\[1\]\.gate_input='sequence'"),
    ({"kind": "markov", "bidirectional": True}, r"attention\[1\]\.bidirectional=True: a causal model cannot attend"),
    # options the flat fields check and a layer's own entry did not: "false" is truthy (a null slot was built), a
    # string tau a TypeError, an unknown backend ignored in global scope, a ratio past 1 a shape error at forward
    ({"kind": "markov", "gate_null": "false"}, r"attention\[1\]\.gate_null='false': must be one of"),
    ({"kind": "markov", "bidirectional": "yes"}, r"attention\[1\]\.bidirectional='yes': must be one of"),
    ({"kind": "markov", "head_specific": "false"}, r"attention\[1\]\.head_specific='false': must be one of"),
    ({"kind": "hybrid_split", "gate_null": "no"}, r"attention\[1\]\.gate_null='no': must be one of"),
    ({"kind": "markov", "gate_gumbel_tau": "0.5"}, r"attention\[1\]\.gate_gumbel_tau='0.5': must be positive"),
    ({"kind": "softmax", "backend": "bogus"}, r"attention\[1\]\.backend='bogus': must be one of"),
    ({"kind": "rff", "feature_map": "relu"}, r"attention\[1\]\.feature_map='relu': must be one of"),
    ({"kind": "hybrid_split", "markov_head_ratio": 2.0}, r"attention\[1\]\.markov_head_ratio=2.0: must be a number in"),
    # a backend that cannot run the layer's own scope (the flat fields refuse it; a layer's entry failed at the first
    # forward, in the op, naming neither the layer nor the option)
    ({"kind": "markov", "backend": "chunked"}, r"attention\[1\]\.backend='chunked': the chunked backend is the glob"),
    ({"kind": "hybrid_split", "backend": "chunked"}, r"attention\[1\]\.backend='chunked'"),
    ({"kind": "markov", "scope": "global", "backend": "banded"}, r"attention\[1\]\.backend='banded': .*scope='local'"),
    ({"kind": "hybrid_parallel", "scope": "global", "backend": "banded"}, r"attention\[1\]\.backend='banded'"),
    # H3 sizes its heads by channels: the config took any head_dim and the model's constructor refused it unnamed
    ({"kind": "h3", "head_dim": 3}, r"attention\[1\]\.head_dim=3: must divide d_model=16"),
    # a split whose ratio rounds to no Markov head built random-feature heads alone, its Markov options unread
    ({"kind": "hybrid_split", "markov_head_ratio": 0.4}, r"attention\[1\]\.markov_head_ratio=0.4: with n_heads=2 it "
                                                        r"gives floor\(0.8\) = 0 Markov heads"),
])  # fmt: skip
def test_an_invalid_per_layer_option_raises_once_naming_the_layer_option_and_value(entry, message):
    with pytest.raises(ValueError, match=message) as raised:
        MarkovianTransformerConfig(**SIZE, attention=["markov", entry, "markov"])
    assert str(raised.value).count("attention") <= 2  # one report, not one per place that checks


@pytest.mark.parametrize(("entry", "field", "value"), [
    ({"kind": "markov", "bidirectional": 1}, "bidirectional", 1),
    ({"kind": "markov", "bidirectional": 0}, "bidirectional", 0),
    ({"kind": "markov", "bidirectional": 1.0}, "bidirectional", 1.0),
    ({"kind": "markov", "gate_null": 0}, "gate_null", 0),
    ({"kind": "hybrid_split", "head_specific": 1}, "head_specific", 1),
    ({"kind": "forgetting", "qk_norm": 1}, "qk_norm", 1),
])  # fmt: skip
def test_a_per_layer_switch_given_as_a_number_is_refused_naming_it(entry, field, value):
    """True == 1 in Python: the rule one_of((True, False, None)) took bidirectional=1 (0, 1.0) for a bool and built
    the layer, where the flat field refuses it."""
    with pytest.raises(ValueError, match=rf"attention\[1\]\.{field}={value!r}: must be one of \(True, False"):
        MarkovianTransformerConfig(**SIZE, causal=False, attention=["markov", entry, "markov"])


def test_a_per_layer_sequence_gate_is_built_in_a_bidirectional_model():
    """A causal model refuses it (above): the gate pools the whole sequence, and a causal model's layer built with
    it (accepted before) changed earlier outputs when the last token changed, and decoded otherwise than it scored."""
    from markovformer import MarkovianTransformerModel

    entry = {"kind": "markov", "gate_input": "sequence"}
    model = MarkovianTransformerModel(MarkovianTransformerConfig(**SIZE, causal=False, attention=["markov", entry,
                                                                                                  "markov"]))
    assert [block.attention.cores[0].markov_bias.gate_input for block in model.blocks] == ["token", "sequence", "token"]


@pytest.mark.parametrize(("options", "message"), [
    (dict(gate="conv"), r"^MarkovianTransformerConfig\.gate='conv': must be one of"),
    (dict(gate_input="position"), r"^MarkovianTransformerConfig\.gate_input='position': must be one of"),
    (dict(transition="exp"), r"^MarkovianTransformerConfig\.transition='exp': must be one of"),
    (dict(max_order=0), r"^MarkovianTransformerConfig\.max_order=0: must be an integer in \[1"),
    (dict(scope="nearby"), r"^MarkovianTransformerConfig\.scope='nearby'"),
    (dict(gate_input="sequence"), r"^MarkovianTransformerConfig\.gate_input='sequence'.*needs bidirectional"),
    (dict(attention="softmax", scope="global", window=3), r"^MarkovianTransformerConfig\.window=3"),
])  # fmt: skip
def test_an_invalid_option_is_refused_by_the_config_and_the_layers_hold_no_second_check(options, message):
    """One home per rule: the config (through the options' field rules) refuses the value, naming it; the layers
    it would reach take what they are given (a second check there would be a second home)."""
    with pytest.raises(ValueError, match=message):
        MarkovianTransformerConfig(**SIZE, **options)
    from markovformer.layers.markov_bias import MarkovBias
    from markovformer.layers.softmax_attention import SoftmaxCore

    MarkovBias(d_model=8, n_heads=2, max_order=2, gate_input="sequence", bidirectional=False)
    MarkovBias(d_model=8, n_heads=2, max_order=2, transition="exp")
    assert SoftmaxCore(causal=True, scope="global", window=3).window is None  # global scope has no window
    assert SoftmaxCore(causal=True, scope="local", window=3).window == 3


def test_the_hybrid_reads_the_options_its_parts_declare():
    import dataclasses

    from markovformer.layers.hybrid_attention import MARKOV_OPTIONS, RANDOM_FEATURE_OPTIONS
    from markovformer.layers.markov_attention import MarkovOptions
    from markovformer.layers.random_feature_attention import RandomFeatureOptions

    assert MARKOV_OPTIONS == tuple(field.name for field in dataclasses.fields(MarkovOptions))
    assert RANDOM_FEATURE_OPTIONS == tuple(field.name for field in dataclasses.fields(RandomFeatureOptions))


def test_a_model_is_built_from_its_resolved_specs_without_running_an_option_rule_again(monkeypatch):
    """The options' rules and defaults run once, when the config resolves its specs; the layers take them as is."""
    from markovformer.layers.markov_attention import MarkovOptions
    from markovformer.layers.random_feature_attention import RandomFeatureOptions
    from markovformer.layers.softmax_attention import SoftmaxOptions

    layers = ["markov", {"kind": "softmax", "scope": "local", "window": 4}, {"kind": "markov", "scope": "local"}]
    config = MarkovianTransformerConfig(**SIZE, max_order=3, attention=layers)
    assert [spec.options.get("window") for spec in config.layer_specs()] == [3, 4, 3]  # MarkovOptions' default

    def refuse(self):
        raise AssertionError(f"{type(self).__name__}'s rules ran again while building the model")

    for options in (MarkovOptions, SoftmaxOptions, RandomFeatureOptions):
        monkeypatch.setattr(options, "__post_init__", refuse)
    model = MarkovianTransformerForCausalLM(config)
    assert [block.attention.cores[0].window for block in model.model.blocks] == [3, 4, 3]


@pytest.mark.parametrize(("field", "value", "close"), [("attention", "markv", "markov"), ("ffn", "swiglue", "swiglu"),
                                                       ("position", "rotry", "rotary")])  # fmt: skip
def test_a_misspelt_flat_choice_names_the_near_miss(field, value, close):
    with pytest.raises(ValueError, match=rf"{field}='{value}': must be one of .* \(did you mean '{close}'\?\)"):
        MarkovianTransformerConfig(**SIZE, **{field: value})


@pytest.mark.parametrize("model_wide", [None, 64])
def test_a_linformer_layer_whose_max_positions_is_below_the_model_wide_one_is_refused(model_wide):
    """max_positions is the longest sequence the model reads (its ``positions_end``): a Linformer layer's own 32
    under a model-wide 64 was built with 32 columns while the model accepted 64 tokens (40 failed inside the layer),
    and one given per layer alone was refused as missing. A layer's value equal to the model-wide one is accepted, and
    a larger one, which earlier versions built and saved, still builds (review42)."""
    base = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, causal=False, position="none")
    with pytest.raises(ValueError, match=r"attention\[0\]\.max_positions=32: .*model-wide.*"
                                         rf"MarkovianTransformerConfig\.max_positions \(it is {model_wide}\)"):
        MarkovianTransformerConfig(**base, max_positions=model_wide,
                                   attention=[{"kind": "linformer", "max_positions": 32}, "softmax"])  # fmt: skip
    config = MarkovianTransformerConfig(**base, max_positions=32,
                                        attention=[{"kind": "linformer", "max_positions": 32}, "softmax"])  # fmt: skip
    assert config.layer_specs()[0].settings.max_positions == config.positions_end == 32
    # a larger one (columns never read) was accepted before: a model saved with one still builds, and loads
    wider = MarkovianTransformerConfig(**base, max_positions=32,
                                       attention=[{"kind": "linformer", "max_positions": 64}, "softmax"])  # fmt: skip
    assert wider.layer_specs()[0].settings.max_positions == 64 and wider.positions_end == 32


@pytest.mark.parametrize("attention", [3, {"kind": "markov"}])
def test_an_attention_that_is_neither_a_name_nor_a_list_is_refused_naming_it(attention):
    """attention=3 raised "TypeError: 'int' object is not iterable", and a dict was read as the list of its keys
    ("unknown kind 'kind'")."""
    with pytest.raises(ValueError, match=rf"attention={attention!r}: must be a kind's name \(a string, one of "
                                         r"\('markov', .*\) or a list with one entry per layer$"):  # fmt: skip
        MarkovianTransformerConfig(**SIZE, attention=attention)


@pytest.mark.parametrize(("options", "refusal"), [
    # every layer a split with no Markov head: the flat Markov option reaches no part that reads it
    (dict(attention="hybrid_split", markov_head_ratio=0.0, max_order=3),
     "MarkovianTransformerConfig.max_order=3: never read: markov_head_ratio=0.0 builds no Markov head"),
    (dict(attention="hybrid_split", markov_head_ratio=0.0, window=8),
     "MarkovianTransformerConfig.window=8: never read: markov_head_ratio=0.0 builds no Markov head"),
    (dict(attention="hybrid_split", markov_head_ratio=1.0, num_features=16),
     "MarkovianTransformerConfig.num_features=16: never read: markov_head_ratio=1.0 builds no random-feature head"),
    (dict(attention=["softmax", {"kind": "hybrid_split", "markov_head_ratio": 0.0}, "softmax"], gate="mlp"),
     "MarkovianTransformerConfig.gate='mlp': never read: markov_head_ratio=0.0 builds no Markov head"),
    # a layer's own entry
    (dict(attention=["markov", {"kind": "hybrid_split", "markov_head_ratio": 0.0, "max_order": 3}, "markov"]),
     "MarkovianTransformerConfig.attention[1].max_order=3: never read: markov_head_ratio=0.0 builds no Markov head"),
    (dict(attention=["markov", {"kind": "hybrid_split", "feature_map": "trig"}, "markov"], markov_head_ratio=1.0),
     "MarkovianTransformerConfig.attention[1].feature_map='trig': never read: markov_head_ratio=1.0 builds no "
     "random-feature head"),
])  # fmt: skip
def test_a_split_without_one_part_refuses_that_parts_options_set_naming_them_and_the_ratio(options, refusal):
    with pytest.raises(ValueError) as error:
        MarkovianTransformerConfig(**SIZE, **options)
    assert str(error.value).startswith(refusal), error.value


@pytest.mark.parametrize("ratio", [0.0, 1.0])
@pytest.mark.parametrize("causal", [True, False])
def test_a_split_without_one_part_builds_with_the_defaults_and_the_model_wide_options(ratio, causal):
    """The ablations themselves are accepted: the resolved scope, window and bidirectional, and the model-wide
    dropout, are no option set for the missing part; a flat option another layer reads is that layer's; the config
    round-trips through its dict (config.json)."""
    flat = MarkovianTransformerConfig(**SIZE, attention="hybrid_split", markov_head_ratio=ratio, causal=causal,
                                      dropout=0.1)  # fmt: skip
    assert MarkovianTransformerConfig.from_dict(flat.to_dict()) == flat
    layers = ["markov", {"kind": "hybrid_split", "markov_head_ratio": ratio}, "rff"]
    mixed = MarkovianTransformerConfig(**SIZE, attention=layers, max_order=3, num_features=16)
    assert MarkovianTransformerConfig.from_dict(mixed.to_dict()) == mixed
    assert MarkovianTransformerModel(flat).blocks[0].attention.heads_per_core == [2 * ratio, 2 - 2 * ratio]
