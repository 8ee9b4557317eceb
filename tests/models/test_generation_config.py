"""The one generation contract: every family's ``generate`` takes a ``GenerationConfig`` (or the same options as
keyword arguments, or both, the keywords winning) and gives the same ids; a bad option is refused once, by the
config's own field rule, with the same message whichever family or spelling received it."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
    VariationalMarkovTransformer,
    VMTConfig,
)
from markovformer.models.generation import GenerationConfig, GenerationMixin

VOCAB = 11


def _perturbed(model: torch.nn.Module) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


@pytest.fixture(scope="module")
def families() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    return {
        "markovian": _perturbed(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
            vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2, max_order=2, window=3))),
        "scan_markov": _perturbed(ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=16, order=3,
                                                                         max_positions=64))),
        "translator": _perturbed(MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
            vocab_size=VOCAB, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, order=2,
            transparent=True, dropout=0.0, max_positions=32))),
        "vmt": _perturbed(VariationalMarkovTransformer(VMTConfig(vocab_size=VOCAB, latent_dim=3, d_model=8,
                                                                 n_layers=1, n_heads=2, hidden_dim=16, window=4))),
    }  # fmt: skip


PROMPT = torch.randint(3, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))
OPTIONS = {
    "greedy": dict(max_new_tokens=6),
    "sampled": dict(max_new_tokens=6, do_sample=True, temperature=0.7, top_k=5, top_p=0.9),
    "suppressed": dict(max_new_tokens=6, suppress_tokens=[4, 5]),
    "beams": dict(max_new_tokens=6, num_beams=3, length_penalty=0.5),
}


def test_every_family_generates_through_the_one_mixin():
    for family in (MarkovianTransformerForCausalLM, ScanMarkovForCausalLM, MarkovTranslatorForConditionalGeneration,
                   VariationalMarkovTransformer):  # fmt: skip
        assert issubclass(family, GenerationMixin) and family.generate is GenerationMixin.generate


@pytest.mark.parametrize("options", list(OPTIONS))
@pytest.mark.parametrize("family", ["markovian", "scan_markov", "translator", "vmt"])
def test_a_generation_config_gives_the_ids_of_its_keyword_arguments(families, family, options):
    model, values = families[family], OPTIONS[options]
    if options == "beams" and not model.supports_beam_search:
        with pytest.raises(ValueError, match=r"^num_beams=3: .* has no beam search"):
            model.generate(PROMPT, generation_config=GenerationConfig(**values))
        return

    def run(*args, **kwargs):
        return model.generate(PROMPT, *args, generator=torch.Generator().manual_seed(5), **kwargs)

    by_keywords = run(**values)
    assert torch.equal(run(generation_config=GenerationConfig(**values)), by_keywords)
    assert torch.equal(run(None, GenerationConfig(**values)), by_keywords)  # positional, as transformers allows
    # keyword arguments update the given config, as in transformers
    other = GenerationConfig(max_new_tokens=2, do_sample=True, top_k=1)
    changes = {**values, "do_sample": values.get("do_sample", False), "top_k": values.get("top_k")}
    assert torch.equal(run(generation_config=other, **changes), by_keywords)
    if family != "translator":
        assert torch.equal(by_keywords[:, : PROMPT.shape[1]], PROMPT)


BAD = [
    ("max_new_tokens", -1, r"^max_new_tokens=-1: must be an integer in \[0, inf\]$"),
    ("max_new_tokens", 2.5, r"^max_new_tokens=2.5: must be an integer"),
    ("do_sample", "yes", r"^do_sample='yes': must be True or False$"),
    ("temperature", math.nan, r"^temperature=nan: must be a finite number >= 0$"),
    ("temperature", -0.5, r"^temperature=-0.5: must be a finite number >= 0$"),
    ("top_k", 0, r"^top_k=0: must be an integer in \[1, inf\]$"),
    ("top_p", 0.0, r"^top_p=0.0: must lie in \(0, 1\] or be None$"),
    ("top_p", 1.5, r"^top_p=1.5: must lie in \(0, 1\] or be None$"),
    ("eos_token_id", -1, r"^eos_token_id=-1: must be an integer in \[0, inf\]$"),
    ("pad_token_id", True, r"^pad_token_id=True: must be an integer"),
    ("suppress_tokens", [1, "a"], r"^suppress_tokens=\[1, 'a'\]: must hold integer token ids$"),
    ("suppress_tokens", 3, r"^suppress_tokens=3: must be a list of token ids or None$"),
    ("suppress_tokens", "ab", r"^suppress_tokens='ab': must be a list of token ids or None$"),  # not ('a', 'b')
    ("num_beams", 0, r"^num_beams=0: must be an integer in \[1, 1024\]$"),
    ("length_penalty", math.inf, r"^length_penalty=inf: must be a finite number$"),
    ("compile_step", 1, r"^compile_step=1: must be True or False$"),
]


@pytest.mark.parametrize(("name", "value", "message"), BAD, ids=[f"{name}={value!r}" for name, value, _ in BAD])
def test_a_bad_option_is_refused_once_by_its_field_naming_it(families, name, value, message):
    with pytest.raises(ValueError, match=message):
        GenerationConfig(**{name: value})
    with pytest.raises(ValueError, match=message):
        GenerationConfig().replace(**{name: value})
    for model in families.values():  # the same message, from the same rule, whichever family receives it
        with pytest.raises(ValueError, match=message):
            model.generate(PROMPT, **{name: value})


@pytest.mark.parametrize(("name", "value"), [("top_k", 3), ("top_p", 0.9), ("temperature", 0.5)])
def test_a_sampling_option_without_sampling_is_refused_naming_both(families, name, value):
    """``generate(prompt, top_k=3)`` decoded greedily (do_sample=False, the default) and ignored top_k without a
    word; so did ``GenerationConfig(num_beams=4, temperature=0.5)``."""
    message = rf"^{name}={value}: decoding without sampling \(do_sample=False"
    for options in ({}, {"num_beams": 4}):
        with pytest.raises(ValueError, match=message):
            GenerationConfig(**options, **{name: value})
    for model in families.values():
        with pytest.raises(ValueError, match=message):
            model.generate(PROMPT, **{name: value})
    # their neutral values change no draw (temperature 0 is greedy's own), and sampling reads them
    GenerationConfig(temperature=0.0, top_p=1.0)
    GenerationConfig(do_sample=True, **{name: value})


def test_the_rules_between_options_and_the_vocabulary_are_the_configs_too(families):
    with pytest.raises(ValueError, match=r"^temperature=0 cannot sample"):
        GenerationConfig(do_sample=True, temperature=0)
    with pytest.raises(ValueError, match=r"^num_beams=2: do_sample=True samples one hypothesis"):
        GenerationConfig(do_sample=True, num_beams=2)
    config = GenerationConfig(eos_token_id=VOCAB)  # a fine config, for another vocabulary
    for model in families.values():
        with pytest.raises(ValueError, match=rf"^eos_token_id={VOCAB}: not a token id of the vocabulary"):
            model.generate(PROMPT, generation_config=config)
    with pytest.raises(TypeError, match="'max_tokens' is not a generation option"):
        families["markovian"].generate(PROMPT, max_tokens=3)
    with pytest.raises(TypeError, match=r"^generation_config must be a markovformer.models.generation."
                                        r"GenerationConfig; got builtins.dict: give its options"):  # fmt: skip
        families["markovian"].generate(PROMPT, generation_config={"max_new_tokens": 3})
    # transformers' of the same name: the message read 'must be a GenerationConfig; got GenerationConfig'
    theirs = type("GenerationConfig", (), {"__module__": "transformers.generation.configuration_utils"})()
    with pytest.raises(TypeError, match=r"; got transformers.generation.configuration_utils.GenerationConfig: "):
        families["markovian"].generate(PROMPT, generation_config=theirs)
    assert dataclasses.is_dataclass(config) and GenerationConfig().max_new_tokens == 20  # transformers' default


def test_a_generation_config_given_where_the_mask_goes_is_refused_naming_both(families):
    """transformers' ``generate(inputs, generation_config)`` takes the config second; here the mask comes second,
    and the config went on to be read as a tensor (AttributeError: no attribute 'shape')."""
    for model in families.values():
        with pytest.raises(TypeError, match=r"^attention_mask must be a \(B, T\) tensor or None; got "
                                            r"GenerationConfig \(give the GenerationConfig as generation_config="):
            model.generate(PROMPT, GenerationConfig(max_new_tokens=3))
        with pytest.raises(TypeError, match=r"^attention_mask must be a \(B, T\) tensor or None; got list$"):
            model.generate(PROMPT, [[1] * PROMPT.shape[1]] * PROMPT.shape[0])


def test_pad_token_id_fills_rows_that_have_ended(families):
    model = families["markovian"]
    free = model.generate(PROMPT, max_new_tokens=8)
    eos = int(free[0, PROMPT.shape[1]])  # row 0 ends at once
    padded = model.generate(PROMPT, max_new_tokens=8, eos_token_id=eos, pad_token_id=0)
    assert int(padded[0, PROMPT.shape[1]]) == eos and (padded[0, PROMPT.shape[1] + 1 :] == 0).all()


def test_a_length_penalty_without_beam_search_is_refused_where_it_was_ignored(families):
    """Only beam search ranks hypotheses by length: with one beam every family returned the same ids whatever the
    penalty (the translator's greedy ids at 0.5 and 3.0 were its ids at 1.0), silently."""
    message = r"^length_penalty=0.5: only beam search \(num_beams > 1\) ranks hypotheses by their length"
    with pytest.raises(ValueError, match=message):
        GenerationConfig(length_penalty=0.5)
    for model in families.values():
        with pytest.raises(ValueError, match=message):
            model.generate(PROMPT, max_new_tokens=4, length_penalty=0.5)
    beams = families["translator"].generate(PROMPT, max_new_tokens=6, num_beams=3, length_penalty=0.5)
    assert torch.equal(beams, families["translator"].generate(PROMPT, generation_config=GenerationConfig(
        max_new_tokens=6, num_beams=3, length_penalty=0.5)))  # fmt: skip


@pytest.mark.parametrize("family", ["translator", "vmt"])
def test_compile_step_is_refused_by_a_family_without_a_decoding_step_to_compile(families, family):
    """The translator's searches and the VMT's latent chain decode in their own loops: compile_step=True changed
    nothing there, silently (its ids were the eager ones, no compile ran)."""
    model = families[family]
    with pytest.raises(ValueError, match=rf"^compile_step=True: {type(model).__name__} decodes without a one-token "
                                         r"step to compile; leave compile_step off$"):  # fmt: skip
        model.generate(PROMPT, max_new_tokens=4, compile_step=True)
    assert model.compiles_step is False
    assert families["markovian"].compiles_step and families["scan_markov"].compiles_step


@pytest.mark.parametrize(("name", "value"), [("top_k", 2), ("top_p", 0.5), ("eos_token_id", 3), ("pad_token_id", 0),
                                             ("suppress_tokens", [1])])  # fmt: skip
def test_a_real_vector_vmt_refuses_the_token_options_it_would_ignore(name, value):
    """A VMT over real vectors writes each vector whole from its Gaussian emission: top_k, top_p, eos, padding and
    suppressed tokens have no token to act on, and its ids were the same with and without them."""
    torch.manual_seed(0)
    model = _perturbed(VariationalMarkovTransformer(VMTConfig(input_dim=3, latent_dim=2, d_model=8, n_layers=1,
                                                              n_heads=2, hidden_dim=16, window=4)))  # fmt: skip
    prompt = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(1))
    options = dict(max_new_tokens=4, do_sample=True, temperature=0.5)
    shown = getattr(GenerationConfig(**options, **{name: value}), name)  # suppress_tokens are kept as a tuple
    expected = re.escape(f"{name}={shown!r}: this VMT writes real vectors (input_dim=3)")
    with pytest.raises(ValueError, match=f"^{expected}"):
        model.generate(prompt, **options, **{name: value}, generator=torch.Generator().manual_seed(2))
