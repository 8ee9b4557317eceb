"""A model compiled by its own ``compile()`` (trainer.compile) refuses bad input values as eagerly: the same
ValueError, naming the bad value. Inside a graph these checks can only be device-side assertions (a RuntimeError
without the value) or none at all (an IndexError, or an Inductor kernel's "index out of bounds")."""

from __future__ import annotations

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)

V = 11


def _ids(seed: int, shape=(2, 12)) -> torch.Tensor:
    return torch.randint(3, V, shape, generator=torch.Generator().manual_seed(seed))


def _with(tensor: torch.Tensor, row: int, column: int, value) -> torch.Tensor:
    changed = tensor.clone()
    changed[row, column] = value
    return changed


def _markovian():
    config = MarkovianTransformerConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_order=3,
                                        position="learned", max_positions=16)  # fmt: skip
    return MarkovianTransformerForCausalLM(config)


def _scan():
    return ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=V, d_model=8, order=3))


def _translator():
    return MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, order=3))  # fmt: skip


IDS, MASK = _ids(1), torch.ones(2, 12)
PACKED = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8]])
CASES = {  # family, forward's inputs, what the message names
    "mask of 0.5": (_markovian, {"input_ids": IDS, "attention_mask": _with(MASK, 0, 3, 0.5)}, "got 0.5"),
    "position -1": (_markovian, {"input_ids": IDS, "position_ids": _with(PACKED, 1, 4, -1)}, "got -1"),
    "position 16": (_markovian, {"input_ids": IDS, "position_ids": PACKED + 8}, "reach 16"),
    "id 11": (_markovian, {"input_ids": _with(IDS, 1, 2, V)}, "token id 11"),
    "label 12": (_markovian, {"input_ids": IDS, "labels": _with(IDS, 1, 2, 12)}, "holds 12"),
    "label -5": (_markovian, {"input_ids": IDS, "labels": _with(IDS, 0, 7, -5)}, "holds -5"),
    "scan id 11": (_scan, {"input_ids": _with(IDS, 0, 0, V)}, "token id 11"),
    "scan mask of 2": (_scan, {"input_ids": IDS, "attention_mask": _with(MASK, 1, 0, 2.0)}, "got 2.0"),
    "scan position -1": (_scan, {"input_ids": IDS, "position_ids": _with(PACKED, 0, 9, -1)}, "got -1"),
    "scan label 11": (_scan, {"input_ids": IDS, "labels": _with(IDS, 1, 5, V)}, "holds 11"),
    # labels of another shape than the ids: forward's message names the shape, not a value
    "labels (2, 13)": (_markovian, {"input_ids": IDS, "labels": torch.full((2, 13), 99)}, "got (2, 13)"),
    "scan labels (2, 13)": (_scan, {"input_ids": IDS, "labels": torch.full((2, 13), 99)}, "got (2, 13)"),
    "source id 11": (_translator, {"src_ids": _with(IDS, 1, 1, V), "tgt_ids": _ids(2)}, "src_ids holds token id 11"),
    "target id 11": (_translator, {"src_ids": IDS, "tgt_ids": _with(_ids(2), 0, 3, V)}, "tgt_ids holds token id 11"),
    "translation label 13": (_translator, {"src_ids": IDS, "tgt_ids": _ids(2), "labels": _with(_ids(3), 1, 1, 13)},
                             "holds 13"),  # fmt: skip
}


def _message(model, inputs: dict) -> str:
    with pytest.raises(ValueError) as raised:
        model(**inputs)
    return str(raised.value)


@pytest.mark.parametrize("case", list(CASES))
def test_a_compiled_forward_refuses_a_bad_value_with_eagers_message(case):
    build, inputs, named = CASES[case]
    torch.manual_seed(0)
    eager = _message(build(), inputs)
    assert named in eager
    torch._dynamo.reset()
    compiled = build()
    compiled.compile(backend="aot_eager")
    assert _message(compiled, inputs) == eager


def test_compiled_scoring_refuses_a_bad_mask_with_eagers_message():
    """Scoring (validation, eval) runs its own compiled function, checked as forward is."""
    model, mask = _markovian(), _with(MASK, 1, 1, 0.5)
    with pytest.raises(ValueError) as eager:
        model.next_token_score(IDS, IDS, attention_mask=mask)
    torch._dynamo.reset()
    model.compile(backend="aot_eager")
    with pytest.raises(ValueError) as compiled:
        model.next_token_score(IDS, IDS, attention_mask=mask)
    assert str(compiled.value) == str(eager.value) and "got 0.5" in str(eager.value)


@pytest.mark.parametrize("build", [_markovian, _scan])
@pytest.mark.parametrize("unscored", ["first", "document start"])
def test_a_compiled_causal_lm_takes_a_label_it_never_scores_as_eager_does(build, unscored):
    """A causal LM scores each position against the next one's label: the first label, and with position_ids a
    packed document's first, are no position's target, and eager takes any value there. The compiled check refused
    them ("labels holds 99, outside the classes"), checking the labels unshifted."""
    labels, extra = (_with(IDS, 1, 0, 99), {}) if unscored == "first" else (_with(IDS, 0, 5, 99),
                                                                            {"position_ids": PACKED})  # fmt: skip
    torch.manual_seed(0)
    model = build()
    eager = model(input_ids=IDS, labels=labels, **extra).loss
    assert torch.equal(eager, model(input_ids=IDS, labels=_with(labels, *((1, 0) if unscored == "first" else (0, 5)),
                                                               -100), **extra).loss)  # fmt: skip
    torch._dynamo.reset()
    model.compile(backend="aot_eager")
    assert torch.allclose(model(input_ids=IDS, labels=labels, **extra).loss, eager)
    assert "holds 99" in _message(model, {"input_ids": IDS, "labels": _with(labels, 1, 4, 99), **extra})


def test_a_compiled_call_binds_its_arguments_without_reading_the_signature_again(monkeypatch):
    """The checks find the arguments by name: inspect.signature(forward), read at every compiled call, took 29 us of
    the 34 us of binding them (CPU), on every training step. It is read once, when the model is compiled."""
    import inspect

    model = _markovian()
    model.compile(backend="aot_eager")
    loss = model(input_ids=IDS, labels=IDS).loss  # compiled (the graphs of forward and of scoring) before the patch
    score = model.next_token_score(IDS, IDS).loss
    monkeypatch.setattr(inspect, "signature", lambda *args, **kwargs: pytest.fail("inspect.signature per call"))
    assert torch.equal(model(input_ids=IDS, labels=IDS).loss, loss)
    assert torch.equal(model.next_token_score(IDS, IDS).loss, score)
    assert "got 0.5" in _message(model, {"input_ids": IDS, "attention_mask": _with(MASK, 0, 3, 0.5)})


@pytest.mark.slow  # three compiles of the decoding step, ~60 s on a CPU
def test_generate_with_a_compiled_step_of_a_compiled_model_gives_the_eager_tokens(monkeypatch, tmp_path):
    """compile_step=True on a model compiled by its own compile(), after the step had been compiled without it:
    torch's AOTAutograd cache (on disk, across processes) handed the step the graph compiled for the other call,
    whose inputs alias otherwise, and Inductor asserted "wrong number of dimensions". The step compiles uncached."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))  # a cache of this test's own graphs only
    config = MarkovianTransformerConfig(vocab_size=V, d_model=16, n_layers=1, n_heads=2, max_order=2, window=3)
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(config).eval()
    eager = model.generate(IDS[:, :5], max_new_tokens=6)
    assert torch.equal(model.generate(IDS[:, :5], max_new_tokens=6, compile_step=True), eager)
    torch._dynamo.reset()
    model.compile(backend="aot_eager")
    assert torch.equal(model.generate(IDS[:, :5], max_new_tokens=6, compile_step=True), eager)
