"""Hostile inputs to the Python API (issue 27, item 8): empty batches and sequences, non-integer ids, labels outside
the classes, sampling options that are not finite, ids outside the vocabulary, empty sources and a KL weight of inf
are each refused with a ValueError naming the argument and the value (on main: torch internals, or accepted)."""

from __future__ import annotations

import math

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
    VariationalMarkovTransformer,
    VMTConfig,
)
from markovformer.models.generation import sample_next_token

VOCAB, LABELS = 7, 3
IDS = torch.tensor([[1, 2, 3, 4, 5], [6, 0, 1, 2, 3]])
LONG = torch.long


@pytest.fixture(scope="module")
def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    small = dict(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1)
    return {
        "causal_lm": MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**small)),
        "sequence_classification": MarkovianTransformerForSequenceClassification(
            MarkovianTransformerConfig(**small, num_labels=LABELS)),
        "token_classification": MarkovianTransformerForTokenClassification(
            MarkovianTransformerConfig(**small, num_labels=LABELS)),
        "ctc": MarkovianTransformerForCTC(MarkovianTransformerConfig(**small, num_labels=LABELS)),
        "scan_markov": ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=16, max_positions=32, order=3)),
        "translator": MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
            vocab_size=VOCAB, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1)),
        "vmt": VariationalMarkovTransformer(VMTConfig(vocab_size=VOCAB, latent_dim=3, d_model=8, n_layers=1,
                                                      n_heads=2, hidden_dim=16, window=4)),
    }  # fmt: skip


def call(model: torch.nn.Module, ids: torch.Tensor, **options):
    """The model's forward on ids as its first token input (the translator's source, with ids as its target)."""
    if isinstance(model, MarkovTranslatorForConditionalGeneration):
        return model(ids, IDS, **options)
    return model(ids, **options)


HEADS = ["causal_lm", "sequence_classification", "token_classification", "ctc", "scan_markov", "translator", "vmt"]
BAD_IDS = [
    (torch.zeros(0, 5, dtype=LONG), r"has no rows \(shape \(0, 5\)\): give at least one sequence"),
    (torch.zeros(2, 0, dtype=LONG), r"has no positions \(shape \(2, 0\)\): give at least one token"),
    (IDS.float(), r"must be integer token ids \(B, T\) \(int64 or int32\); got torch.float32 \(2, 5\)"),
    (IDS.bool(), r"must be integer token ids \(B, T\) \(int64 or int32\); got torch.bool \(2, 5\)"),
]


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize(("ids", "problem"), BAD_IDS, ids=["batch 0", "length 0", "float", "bool"])
def test_empty_and_non_integer_token_ids_are_refused_naming_the_argument(models, head, ids, problem):
    name = "src_ids" if head == "translator" else "input_ids"
    with pytest.raises(ValueError, match=f"^{name} {problem}$"):
        call(models[head], ids)


def test_int32_ids_are_read_as_the_int64_ones(models):
    with torch.no_grad():
        for head in ("causal_lm", "scan_markov", "translator"):
            model = models[head].eval()
            torch.testing.assert_close(call(model, IDS.int()).logits, call(model, IDS).logits, rtol=0, atol=0)


CLASSES = {"causal_lm": VOCAB, "token_classification": LABELS, "ctc": LABELS, "scan_markov": VOCAB,
           "translator": VOCAB}  # fmt: skip


@pytest.mark.parametrize("head", [*CLASSES, "sequence_classification"])
@pytest.mark.parametrize("offset", ["above", "negative"])
def test_labels_outside_the_classes_and_not_ignored_are_refused(models, head, offset):
    classes = CLASSES.get(head, LABELS)
    labels = torch.ones(2, dtype=LONG) if head == "sequence_classification" else torch.ones_like(IDS)
    if head == "ctc":  # "1 2 1 2 1" fits its 5 frames; "1 1 1 1 1" needs 9 (a blank between repeats): infinite loss
        labels[:, 1::2] = 2
    bad = classes + 2 if offset == "above" else -5
    labels[-1] = bad
    with pytest.raises(ValueError, match=rf"^labels holds {bad}, outside the classes \[0, {classes}\) \(and not the "
                                         rf"ignored -100\)$"):  # fmt: skip
        call(models[head], IDS, labels=labels)
    labels[-1] = -100  # the ignored label is accepted
    with torch.no_grad():
        loss = call(models[head].eval(), IDS, labels=labels).loss
    assert torch.isfinite(loss)


def test_float_labels_are_refused(models):
    with pytest.raises(ValueError, match=r"^labels must be integer class ids; got torch.float32$"):
        models["token_classification"](IDS, labels=torch.ones(2, 5))



@pytest.mark.parametrize("head", ["causal_lm", "scan_markov"])
@pytest.mark.parametrize("shape", [(2, 4), (5, 2)], ids=["shorter", "transposed"])
def test_causal_labels_of_another_shape_than_the_inputs_are_refused_naming_both(models, head, shape):
    """The causal LMs shift the labels inside: the loss's own error named the flattened, shifted sizes
    ("Expected input batch_size (8) to match target batch_size (6)")."""
    with pytest.raises(ValueError, match=rf"^labels must be \(B, T\) = \(2, 5\), got \({shape[0]}, {shape[1]}\)$"):
        models[head](IDS, labels=torch.ones(shape, dtype=LONG))


HEAD_LABELS = [
    ("token_classification", (2, 5, 1), r"^labels must have shape \(2, 5\); got \(2, 5, 1\)$"),  # was flattened
    ("token_classification", (10,), r"^labels must have shape \(2, 5\); got \(10,\)$"),  # was read as (2, 5)
    ("token_classification", (2, 4), r"^labels must have shape \(2, 5\); got \(2, 4\)$"),
    ("sequence_classification", (2, 5), r"^labels must have shape \(2,\); got \(2, 5\)$"),
    ("sequence_classification", (3,), r"^labels must have shape \(2,\); got \(3,\)$"),
    ("ctc", (5,), r"^labels must be \(B, L\) = \(2, L\), padded with -100; got \(5,\)$"),
    ("ctc", (3, 2), r"^labels must be \(B, L\) = \(2, L\), padded with -100; got \(3, 2\)$"),
]


@pytest.mark.parametrize(("head", "shape", "message"), HEAD_LABELS, ids=[f"{h}-{s}" for h, s, _ in HEAD_LABELS])
def test_head_labels_of_another_shape_are_refused_naming_both(models, head, shape, message):
    """Labels of ids inside the classes, of a shape the head does not read: the token classifier flattened (B, T, 1)
    and (B·T,) labels without a word, and every other case failed inside torch ("Expected input batch_size (10) to
    match target batch_size (8)", "0D or 1D target tensor expected", "target_lengths must be of size batch_size")."""
    with pytest.raises(ValueError, match=message):
        models[head](IDS, labels=torch.ones(shape, dtype=LONG))


@pytest.mark.parametrize("head", ["causal_lm", "sequence_classification", "token_classification", "scan_markov"])
def test_a_list_of_ids_is_refused_naming_the_argument(models, head):
    """A Python list (what a tokenizer returns without return_tensors): an AttributeError ('list' object has no
    attribute 'shape') from inside the Markovian Transformer's forward."""
    with pytest.raises(TypeError, match=r"^input_ids must be a tensor of token ids; got list$"):
        models[head](IDS.tolist())


SAMPLING = [
    ({"do_sample": True, "temperature": math.inf}, r"^temperature=inf: must be a finite number >= 0"),
    ({"do_sample": True, "temperature": math.nan}, r"^temperature=nan: must be a finite number >= 0"),
    ({"do_sample": True, "temperature": 0.0}, r"^temperature=0 cannot sample"),
    ({"do_sample": True, "temperature": -1.0}, r"^temperature=-1.0: must be a finite number >= 0"),
    ({"eos_token_id": VOCAB}, rf"^eos_token_id={VOCAB}: not a token id of the vocabulary \[0, {VOCAB}\)$"),
    ({"eos_token_id": -1}, r"^eos_token_id=-1: must be an integer in \[0, inf\]$"),
    ({"suppress_tokens": [0, VOCAB + 3]}, rf"^suppress_tokens holds {VOCAB + 3}, not a token id of the vocabulary"),
    ({"suppress_tokens": list(range(VOCAB))}, rf"^suppress_tokens covers all {VOCAB} tokens of the vocabulary"),
]


@pytest.mark.parametrize("head", ["causal_lm", "scan_markov", "vmt"])
@pytest.mark.parametrize(("options", "message"), SAMPLING, ids=[str(options) for options, _ in SAMPLING])
def test_generation_options_outside_their_range_are_refused(models, head, options, message):
    with pytest.raises(ValueError, match=message):
        models[head].generate(IDS, max_new_tokens=2, **options)


@pytest.mark.parametrize("head", ["causal_lm", "scan_markov", "vmt"])
def test_an_empty_batch_is_refused_by_generate(models, head):
    with pytest.raises(ValueError, match=r"^input_ids has no rows \(shape \(0, 5\)\)"):
        models[head].generate(torch.zeros(0, 5, dtype=LONG), max_new_tokens=2)


@pytest.mark.parametrize("head", ["causal_lm", "scan_markov", "vmt"])
def test_suppressing_all_tokens_but_one_always_generates_that_one(models, head):
    generated = models[head].generate(IDS, max_new_tokens=4, suppress_tokens=[t for t in range(VOCAB) if t != 4])
    assert generated[:, IDS.shape[1]:].eq(4).all()


def test_sample_next_token_refuses_an_infinite_temperature():
    with pytest.raises(ValueError, match=r"^temperature=inf: must be a finite number >= 0"):
        sample_next_token(torch.zeros(1, 3), temperature=math.inf)


TRANSLATION = [
    ({"input_ids": IDS, "do_sample": True, "temperature": math.inf}, r"^temperature=inf: must be a finite number"),
    ({"input_ids": IDS, "num_beams": 2, "length_penalty": math.nan}, r"^length_penalty=nan: must be a finite number"),
    ({"input_ids": IDS, "length_penalty": -math.inf}, r"^length_penalty=-inf: must be a finite number"),
    ({"input_ids": torch.zeros(2, 0, dtype=LONG)}, r"^input_ids has no positions \(shape \(2, 0\)\)"),
    ({"input_ids": torch.zeros(0, 5, dtype=LONG)}, r"^input_ids has no rows \(shape \(0, 5\)\)"),
    ({"input_ids": IDS, "attention_mask": torch.tensor([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])},
     r"^attention_mask row 1 is all padding; every row needs a real token$"),
]  # fmt: skip


@pytest.mark.parametrize(("options", "message"), TRANSLATION,
                         ids=["temperature inf", "length_penalty nan", "length_penalty -inf", "empty source",
                              "no source", "source all padding"])  # fmt: skip
def test_translation_options_and_empty_sources_are_refused(models, options, message):
    with pytest.raises(ValueError, match=message):
        models["translator"].generate(**options, max_new_tokens=3)


def test_a_source_of_padding_alone_is_refused_in_training_too(models):
    with pytest.raises(ValueError, match=r"^src_mask row 0 is all padding"):
        models["translator"](IDS, IDS, src_mask=torch.tensor([[0, 0, 0, 0, 0], [1, 1, 1, 1, 1]]))


@pytest.mark.parametrize("kl_weight", [math.inf, math.nan, -1.0])
def test_vmt_refuses_a_kl_weight_that_is_not_finite_and_non_negative(models, kl_weight):
    with pytest.raises(ValueError, match=rf"^kl_weight={kl_weight!r}: must be a finite number >= 0$"):
        models["vmt"](IDS, kl_weight=kl_weight)


def count_hostile_inputs() -> int:
    """How many hostile inputs this file feeds the models (reported in the issue's note)."""
    return (len(HEADS) * len(BAD_IDS) + 2 * (len(CLASSES) + 1) + 1 + 4 + 3 * len(SAMPLING) + 3 + 1
            + len(TRANSLATION) + 1 + 3)  # fmt: skip


def _small(**options) -> MarkovianTransformerConfig:
    return MarkovianTransformerConfig(**{"vocab_size": VOCAB, "d_model": 8, "n_layers": 1, "n_heads": 2,
                                         "max_order": 2, **options})  # fmt: skip


@pytest.mark.parametrize("position", ["rotary", "sinusoidal"])
def test_markovian_inputs_of_the_wrong_kind_or_shape_are_refused_naming_them(position):
    model = MarkovianTransformerForCausalLM(_small(position=position))
    with pytest.raises(ValueError, match=r"this model reads token ids: pass input_ids \(B, T\), not input_features"):
        model.model(input_features=torch.zeros(2, 5, 8))
    with pytest.raises(ValueError, match=r"position_ids must be \(B, T\) = \(2, 5\); got \(2, 4\)"):
        model(IDS, position_ids=torch.zeros(2, 4, dtype=LONG))
    with pytest.raises(ValueError, match=r"position_ids \(packed documents\) cannot be combined with a decoding state"):
        model(IDS, position_ids=torch.zeros(2, 5, dtype=LONG), state={})
    frames = MarkovianTransformerForCTC(_small(vocab_size=None, input_dim=4, causal=False, num_labels=LABELS))
    with pytest.raises(ValueError, match=r"this model reads feature frames: pass input_features \(B, T, input_dim\)"):
        frames.model(input_ids=IDS)


def test_heads_that_cannot_work_with_their_config_are_refused():
    with pytest.raises(ValueError, match="pooling='cls' needs causal=False"):
        MarkovianTransformerForSequenceClassification(_small(pooling="cls", num_labels=LABELS))
    with pytest.raises(ValueError, match="num_labels must count the blank and at least one symbol"):
        MarkovianTransformerForCTC(_small(vocab_size=None, input_dim=4, causal=False, num_labels=1))
