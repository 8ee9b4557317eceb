"""`markovformer kind list` and `kind show NAME`: the attention kinds, marked as the models built from them
behave, and each kind's options as its options dataclass and the model config take them."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.cli.main import main
from markovformer.layers.markov_attention import MarkovOptions
from markovformer.layers.options import option_help
from markovformer.layers.registry import ATTENTION_KINDS

NEEDED = {"linformer": {"max_positions": 8}}  # options a kind's model cannot be built without
CONFIG_FIELDS = {field.name for field in dataclasses.fields(MarkovianTransformerConfig)}


def _config(kind: str, causal: bool = True, **options) -> MarkovianTransformerConfig:
    return MarkovianTransformerConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, attention=kind, causal=causal,
                                      **{**NEEDED.get(kind, {}), **options})  # fmt: skip


def _show(name: str, capsys) -> tuple[str, dict[str, str]]:
    """`kind show NAME`'s output and its option lines, joined, by option."""
    assert main(["kind", "show", name]) == 0
    out = capsys.readouterr().out
    section = out.split("entry):\n")[1].split("in a run config's model section")[0] if "entry):\n" in out else ""
    options: dict[str, str] = {}
    for line in section.splitlines():
        match = re.match(r"^  (\w+) +(\S.*)$", line)
        if match:
            options[match.group(1)] = match.group(2)
        else:
            last = list(options)[-1]
            options[last] += " " + line.strip()
    return out, options


def test_kind_list_names_every_kind_once_with_the_marks_its_models_show(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["kind", "list"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[:4] for line in out.splitlines() if line.split() and line.split()[0] in ATTENTION_KINDS]
    assert [row[0] for row in rows] == list(ATTENTION_KINDS)  # each kind once, in the registry's order
    assert max(map(len, out.splitlines())) <= 100
    for kind, decodes, causal, window in rows:
        refused = {flag for flag in (True, False) if not ATTENTION_KINDS[kind].accepts_causal(flag)}
        for flag in (True, False):  # the mark says which causal the model config refuses; it accepts the other
            if flag in refused:
                with pytest.raises(ValueError):
                    _config(kind, causal=flag)
            else:
                _config(kind, causal=flag)
        assert causal == {frozenset(): "either", frozenset({False}): "only", frozenset({True}): "never"}[
            frozenset(refused)], kind
        model_decodes = (True not in refused
                         and MarkovianTransformerForCausalLM(_config(kind)).model.decodes_incrementally)  # fmt: skip
        assert decodes == ("yes" if model_decodes else "no"), kind
        options = _config(kind, causal=True not in refused).layer_specs()[0].options
        if "scope" not in options:
            assert window == "none", kind
        else:  # the scope a one-kind model takes by default, and whether the other one is allowed
            assert window == {"local": "local", "global": "optional"}[options["scope"]], kind
            _config(kind, causal=True not in refused, scope="local", window=max(4, options.get("max_order", 0)))


def test_kind_show_markov_lists_exactly_markov_options_with_their_defaults_and_help(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    out, options = _show("markov", capsys)
    fields = dataclasses.fields(MarkovOptions)
    assert list(options) == [field.name for field in fields]
    for field in fields:
        text = options[field.name]
        shown = re.search(r"\(default (.*?); (flat or per layer|per layer only)", text)
        assert shown, text
        assert yaml.safe_load(shown.group(1)) == field.default, (field.name, shown.group(1))
        assert text.startswith(" ".join(option_help(MarkovOptions, field.name).split())), text
    assert out.startswith(f"markov: {' '.join(ATTENTION_KINDS['markov'].summary.split()[:3])}")


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_where_kind_show_says_an_option_is_set_is_where_the_model_config_takes_it(kind, capsys, monkeypatch):
    """"flat or per layer": `model.OPTION` and the layer's entry both set it; "per layer only": the entry alone (the
    config has no such field)."""
    monkeypatch.setenv("COLUMNS", "200")
    _, options = _show(kind, capsys)
    entry = ATTENTION_KINDS[kind]
    assert list(options) == [field.name for field in dataclasses.fields(entry.options)]
    causal = entry.accepts_causal(True)
    for field in dataclasses.fields(entry.options):
        value = {"scope": "global", "window": 4, "bidirectional": False}.get(field.name, field.default)
        value = NEEDED.get(kind, {}).get(field.name, value)
        given = {field.name: value, **({"scope": "local"} if field.name == "window" else {})}
        layer = MarkovianTransformerConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, causal=causal,
                                           attention=[{"kind": kind, **given}], **NEEDED.get(kind, {}))  # fmt: skip
        assert layer.layer_specs()[0].options[field.name] == value, (kind, field.name)
        if "flat or per layer" in options[field.name]:
            flat = _config(kind, causal=causal, **given)
            assert flat.layer_specs()[0].options[field.name] == value, (kind, field.name)
        else:
            assert "per layer only" in options[field.name] and field.name not in CONFIG_FIELDS, (kind, field.name)


def test_kind_show_of_a_misspelt_kind_is_one_line_with_the_closest(main_cli):
    done = main_cli("kind", "show", "stik_breaking")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == ["markovformer: error: no attention kind 'stik_breaking' (did you mean "
                                                "'stick_breaking'?); see `markovformer kind list`"]  # fmt: skip


def test_a_kind_compared_without_position_says_the_default_rotary_stacks_on_it():
    """The experiments run ALiBi, FoX, T5 buckets, dynamic bias, stick-breaking and CoPE with position: none, as their
    papers; a model built from the kind alone gets the default rotary on top, and `kind list` says so for each (it
    said so for ALiBi and FoX only: T5 bias and the rest read as their papers' form)."""
    from markovformer.experiments.mixers_models import KINDS

    own_position = {fields["attention"] for _, fields in KINDS.values() if fields.get("position") == "none"}
    assert {"alibi", "forgetting", "t5_bias", "dynamic_bias", "stick_breaking", "cope"} <= own_position
    assert MarkovianTransformerConfig(vocab_size=8, attention="t5_bias").position == "rotary"
    for kind in sorted(own_position):
        summary = " ".join(ATTENTION_KINDS[kind].summary.split())  # the line `kind list` and `kind show` print
        assert "model.position: none" in summary and "default rotary" in summary, kind
