"""Invariants the other tests hold for some kinds or families only, here for every attention kind inside a model,
each built with every option of its kind off its default, and for the other families: a save_pretrained /
from_pretrained round trip keeps the config and the logits; no gradient of position t's logits reaches an input
after t; a bidirectional model gives each row's real tokens, padded on either side, what the row gives alone; a
single row decodes from its state as its full forward. Where these are held already: causality of every kind's
layer (test_attention_kinds), decoding of every causal kind in a model, left-padded batches of 3
(test_generate) and of one row per layer (test_edge_shapes), round trips of some kinds at their defaults
(test_pretrained)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from markovformer import (
    BinaryTransformer,
    BinaryTransformerConfig,
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForTokenClassification,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)
from markovformer.layers.registry import ATTENTION_KINDS
from markovformer.models.markov_translator.generation import decode_step, start_decoding

VOCAB, LENGTH = 11, 9
MARKOV = dict(max_order=3, bidirectional=False, window=4, gate="mlp", gate_input="query", gate_null=False,
              gate_gumbel_tau=0.5, transition="signed", head_specific=False, dropout=0.1, backend="naive")  # fmt: skip
FEATURES = dict(feature_map="trig", num_features=8, redraw_interval=3, chunk_size=4)
LOCAL = dict(scope="local", window=3)
NON_DEFAULT = {  # every option of every kind off its default, but SCOPE_AT_DEFAULT
    "markov": MARKOV,
    "softmax": dict(LOCAL, dropout=0.1, backend="naive"),
    "rff": FEATURES,
    "hybrid_split": dict(FEATURES, **MARKOV, markov_head_ratio=0.25),
    "hybrid_parallel": dict(FEATURES, **dict(MARKOV, window=None), scope="global"),
    "alibi": dict(LOCAL, dropout=0.1),
    "forgetting": dict(LOCAL, dropout=0.1, output_gate=True, output_norm=True, qk_norm=True, kv_shift=True),
    "t5_bias": dict(LOCAL, dropout=0.1, num_buckets=8, max_distance=6),
    "dynamic_bias": dict(LOCAL, dropout=0.1, bias_hidden=8, bias_depth=1, log_distance=False),
    "stick_breaking": dict(LOCAL, attend_current=True),
    "cope": dict(LOCAL, npos_max=4),
    "selective": dict(LOCAL, protect_first=False),
    "linformer": dict(max_positions=16, linformer_k=5, dropout=0.1),
    "retnet": dict(chunk_size=4),
    "s4d": dict(ssm_state_size=4),
    "h3": dict(head_dim=2, ssm_state_size=4, shift_taps=3),
    "hyena": {}, "rwkv": {}, "gru": {}, "scan": {},
}  # fmt: skip
# a window needs the local scope and the global scope takes none: one of the two stays at its default
SCOPE_AT_DEFAULT = {("markov", "scope"), ("hybrid_split", "scope"), ("hybrid_parallel", "window")}
BIDIRECTIONAL_OFF = {"bidirectional", "kv_shift"}  # options only a causal model takes off their default
FFT_ROUNDED = {"s4d", "h3", "hyena"}  # their long convolutions round every position (test_attention_kinds)
CAUSAL_KINDS = sorted(kind for kind, entry in ATTENTION_KINDS.items() if entry.accepts_causal(True))
BIDIRECTIONAL_KINDS = sorted(kind for kind, entry in ATTENTION_KINDS.items() if entry.accepts_causal(False))


def test_every_option_of_every_kind_is_off_its_default_in_non_default():
    for kind, entry in ATTENTION_KINDS.items():
        for field in dataclasses.fields(entry.options):
            if (kind, field.name) not in SCOPE_AT_DEFAULT:
                assert NON_DEFAULT[kind].get(field.name, field.default) != field.default, (kind, field.name)


def _randomised(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """float64, eval mode, weights far from the 0.02 init, so that every path matters."""
    model = model.double()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.25 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    return model.eval()


def _markovian(kind: str, causal: bool) -> torch.nn.Module:
    options = dict(NON_DEFAULT[kind])
    if not causal:
        options = {name: value for name, value in options.items() if name not in BIDIRECTIONAL_OFF}
    flat = {"max_positions": options["max_positions"]} if kind == "linformer" else {}  # the model's own too
    layer = {"kind": kind, **options}
    config = MarkovianTransformerConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=4, causal=causal,
                                        attention=[layer, dict(layer)], num_labels=3, **flat)  # fmt: skip
    torch.manual_seed(0)
    model_class = MarkovianTransformerForCausalLM if causal else MarkovianTransformerForTokenClassification
    return _randomised(model_class(config))


def _ids(batch: int, length: int = LENGTH, seed: int = 1, low: int = 0) -> torch.Tensor:
    return torch.randint(low, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_a_round_trip_keeps_every_non_default_option_and_the_logits(kind, tmp_path):
    model = _markovian(kind, causal=ATTENTION_KINDS[kind].accepts_causal(True))
    model.save_pretrained(tmp_path)
    loaded = type(model).from_pretrained(tmp_path)
    assert loaded.config == model.config
    for spec in loaded.config.layer_specs():  # the options each layer is built with are the non-default ones
        settings = dataclasses.asdict(spec.settings)
        assert spec.kind == kind and {name: settings[name] for name in NON_DEFAULT[kind]} == NON_DEFAULT[kind]
    ids = _ids(2)
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


def _gradients_after(logits: torch.Tensor, inputs: torch.Tensor) -> tuple[float, float]:
    """The largest |d logits[:, t] / d inputs[:, t + 1:]| over t < T - 1, and the largest gradient of any input."""
    leaked, scale = 0.0, 0.0
    weights = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3), dtype=logits.dtype)
    for t in range(logits.shape[1] - 1):
        (gradient,) = torch.autograd.grad((logits[:, t] * weights[:, t]).sum(), inputs, retain_graph=True)
        assert torch.isfinite(gradient).all(), t
        leaked, scale = max(leaked, gradient[:, t + 1 :].abs().max().item()), max(scale, gradient.abs().max().item())
    return leaked, scale


def _logits_and_inputs(model: torch.nn.Module, module: torch.nn.Module, run, length: int = LENGTH):
    """Run ``run()`` capturing ``module``'s output of ``length`` positions (the inputs the gradients are taken of)."""
    captured = []
    hook = module.register_forward_hook(lambda _, __, output: captured.append(output))
    try:
        logits = run()
    finally:
        hook.remove()
    (inputs,) = [output for output in captured if output.shape[1] == length]
    return logits, inputs


@pytest.mark.parametrize("kind", CAUSAL_KINDS)
def test_no_gradient_of_position_ts_logits_reaches_a_later_input_in_any_kind(kind):
    """Exactly zero (a masked score's backward could still carry 0 * inf = nan, or a leak its forward hides)."""
    model = _markovian(kind, causal=True)
    ids = _ids(2)
    leaked, scale = _gradients_after(*_logits_and_inputs(model, model.model.embed, lambda: model(ids).logits))
    assert scale > 0 and leaked <= (1e-13 * scale if kind in FFT_ROUNDED else 0.0), (kind, leaked, scale)


FAMILIES = {
    "scan_markov": lambda: ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=8, max_positions=24,
                                                                  order=4)),  # fmt: skip
    "scan_recurrent": lambda: ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=8, max_positions=24,
                                                                     context_mode="recurrent")),  # fmt: skip
    "mat": lambda: MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=VOCAB, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=24, dropout=0.0,
        max_positions=32, order=3, transparent=True)),  # fmt: skip
    "translator": lambda: MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=VOCAB, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=24, dropout=0.0,
        max_positions=32)),  # fmt: skip
    "binary": lambda: BinaryTransformer(BinaryTransformerConfig(d_model=4, n_layers=2, max_positions=16)),
}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_no_gradient_of_position_ts_logits_reaches_a_later_input_in_any_family(family):
    """The Scan Markov model (its windows' embeddings, one window per position, in markov mode), the translators'
    decoder (its target's embeddings) and the binary model (its first layer's input)."""
    torch.manual_seed(0)
    model = _randomised(FAMILIES[family]())
    if family == "binary":
        ids = _ids(2, low=VOCAB - 2)  # 0s and 1s
        captured = []
        hook = model.layers[0].register_forward_pre_hook(lambda _, args: captured.append(args[0]))
        logits = model(ids - (VOCAB - 2)).logits[..., None]
        hook.remove()
        inputs = captured[0]
    elif family.startswith("scan"):
        ids = _ids(1)  # a small batch embeds every window's tokens (a large one looks up a table of them)
        logits, inputs = _logits_and_inputs(model, model.embed, lambda: model(ids).logits)
    else:
        source, target = _ids(2, length=5, seed=2, low=3), _ids(2, low=3)
        logits, inputs = _logits_and_inputs(model, model.embed, lambda: model(source, target).logits)
    leaked, scale = _gradients_after(logits, inputs)
    assert scale > 0 and leaked == 0.0, (family, leaked, scale)


def _padded_on_both_sides(batch: int = 3) -> tuple[torch.Tensor, list[torch.Tensor]]:
    left, right = torch.ones(batch, LENGTH, dtype=torch.long), torch.ones(batch, LENGTH, dtype=torch.long)
    left[1, :3], left[2, :6], right[1, 6:], right[2, 3:] = 0, 0, 0, 0
    return _ids(batch), [left, right]


@pytest.mark.parametrize("kind", sorted(set(BIDIRECTIONAL_KINDS) - {"markov", "softmax", "rff", "hybrid_split",
                                                                     "hybrid_parallel"}))  # fmt: skip
def test_a_bidirectional_models_padded_row_gives_its_real_tokens_what_it_gives_alone(kind):
    """Per token, left and right padding, rows of other lengths and contents beside it (test_markovian_transformer
    pools the kinds left out; test_baselines pads the baselines' layers)."""
    model = _markovian(kind, causal=False)
    ids, masks = _padded_on_both_sides()
    with torch.no_grad():
        for mask in masks:
            padded = model(ids, attention_mask=mask).logits
            for row in range(ids.shape[0]):
                real = mask[row].bool()
                torch.testing.assert_close(padded[row, real], model(ids[row : row + 1, real]).logits[0], rtol=0,
                                           atol=1e-12)  # fmt: skip
        padded_row = model(ids[2:3, :3]).logits[0]
        assert not torch.allclose(model(ids[2:3]).logits[0, :3], padded_row, atol=1e-6)  # padding would be read


@pytest.mark.parametrize("family", ["scan_markov", "scan_recurrent", "mat", "translator"])
def test_a_single_row_decodes_from_its_state_as_its_full_forward(family):
    torch.manual_seed(0)
    model = _randomised(FAMILIES[family]())
    ids = _ids(1, low=3)
    with torch.no_grad():
        if family.startswith("scan"):
            full = model(ids).logits
            state: dict = {}
            steps = [model(ids[:, :3], state=state).logits]
            steps += [model(ids[:, t : t + 1], state=state).logits for t in range(3, LENGTH)]
            decoded = torch.cat(steps, dim=1)
        else:
            source = _ids(1, length=5, seed=2, low=3)
            full = model(source, ids).logits
            state = start_decoding(model, source)
            decoded = torch.stack([decode_step(model, ids[:, t], state) for t in range(LENGTH)], dim=1)
    torch.testing.assert_close(decoded, full, rtol=0, atol=1e-12)
