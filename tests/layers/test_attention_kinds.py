"""What the registry declares about each attention kind, held to the kinds themselves: every option has its help
line (`markovformer kind show`), and the causality a kind declares is the one its layer accepts, refused by the
model config before any layer is built."""

from __future__ import annotations

import dataclasses

import pytest

from markovformer import MarkovianTransformerConfig
from markovformer.layers.options import interval, option, option_help
from markovformer.layers.registry import ATTENTION_KINDS, build_attention

NEEDED = {"linformer": {"max_positions": 8}}  # options a kind cannot be built without


def test_every_option_of_every_kind_has_one_help_line():
    for kind, entry in ATTENTION_KINDS.items():
        for field in dataclasses.fields(entry.options):
            text = option_help(entry.options, field.name)
            assert len(text) > 10 and "\n" not in text and "``" not in text, (kind, field.name, text)


def test_an_undescribed_option_is_named_with_where_to_describe_it():
    @dataclasses.dataclass(frozen=True)
    class NewOptions:
        described: int = option(1, interval(1), help="an option a contributor described")
        width: int = option(2, interval(1))

    assert option_help(NewOptions, "described") == "an option a contributor described"
    with pytest.raises(KeyError, match=r"option 'width' of NewOptions has no help line: declare it as "
                                       r"option\(default, rule, help=\.\.\.\) in " + __name__):  # fmt: skip
        option_help(NewOptions, "width")


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_a_kinds_declared_causality_is_what_its_layer_accepts(kind):
    """Built both ways from the registry, a kind's layer raises exactly for the value of causal it declares it
    refuses (stick-breaking, CoPE and selective refuse causal=False; Linformer causal=True)."""
    entry = ATTENTION_KINDS[kind]
    for causal in (True, False):
        try:
            build_attention(kind, d_model=8, n_heads=2, causal=causal, rotary=False, **NEEDED.get(kind, {}))
            built = True
        except ValueError:
            built = False
        assert built == entry.accepts_causal(causal), (kind, causal, entry.causality)


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_the_model_config_refuses_the_causality_a_kind_declares_it_cannot_take(kind):
    """`MarkovianTransformerConfig(attention='stick_breaking', causal=False)` was accepted; only building the model
    failed. Now the config refuses it, naming the kind, as a single kind and as one layer of a list."""
    entry = ATTENTION_KINDS[kind]
    options = dict(vocab_size=8, d_model=8, n_heads=2, n_layers=2, **NEEDED.get(kind, {}))
    for causal in (True, False):
        for attention in (kind, ["softmax", kind] if kind != "linformer" else [kind, kind]):
            if entry.accepts_causal(causal):
                MarkovianTransformerConfig(attention=attention, causal=causal, **options)
                continue
            refusal = "Linformer is non-causal" if kind == "linformer" else f"{kind}.* is {entry.causality}"
            with pytest.raises(ValueError, match=refusal) as error:
                MarkovianTransformerConfig(attention=attention, causal=causal, **options)
            assert "\n" not in str(error.value)
            if kind != "linformer":  # Linformer's own message explains the projections
                layer = "attention=" if isinstance(attention, str) else "layer 1's kind "
                assert str(error.value).startswith(f"MarkovianTransformerConfig.causal={causal}: {layer}{kind!r} is "
                                                   f"causal only: its layer refuses causal=False"), error.value



@pytest.mark.parametrize("kind, name, value", [("retnet", "chunk_size", 0), ("s4d", "ssm_state_size", 3),
                                               ("linformer", "linformer_k", 0), ("linformer", "dropout", 1.5)])
def test_a_bad_per_layer_option_of_a_baseline_is_refused_by_the_config(kind, name, value):
    """`attention: [{kind: retnet, chunk_size: 0}]` was accepted (the flat `chunk_size` is checked, these options'
    dataclasses had no rules) and failed only when the model was built."""
    causal = ATTENTION_KINDS[kind].accepts_causal(True)
    with pytest.raises(ValueError, match=rf"^MarkovianTransformerConfig\.attention\[0\]\.{name}={value}: must be"):
        MarkovianTransformerConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, causal=causal,
                                   attention=[{"kind": kind, name: value}], **NEEDED.get(kind, {}))  # fmt: skip
