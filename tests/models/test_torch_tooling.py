"""PyTorch's tooling on whole models: torch.export returns the model's own output type, torch.compile gives eager's
results."""

from __future__ import annotations

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
)
from markovformer.models.markov_translator.modeling import MarkovTranslatorOutput
from markovformer.models.markovian_transformer.modeling import MarkovianTransformerOutput


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(3, 11, (2, 12), generator=torch.Generator().manual_seed(seed))

def _one_graph_like_eager(model, **inputs):
    """``model`` compiled whole (``fullgraph``: a graph break raises), its loss and every gradient on ``inputs``
    checked against eager's; returns the compiled model."""
    loss = model(**inputs).loss
    expected = torch.autograd.grad(loss, list(model.parameters()))
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    got = compiled(**inputs).loss
    torch.testing.assert_close(got, loss)
    for a, b in zip(torch.autograd.grad(got, list(model.parameters())), expected, strict=True):
        torch.testing.assert_close(a, b)
    return compiled


def _positioned_model(position: str):
    """A two-layer Markov model with ``position`` encodings (learned: 16 of them)."""
    torch.manual_seed(0)
    learned = {"max_positions": 16} if position == "learned" else {}
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=3,
                                        position=position, **learned)  # fmt: skip
    return MarkovianTransformerForCausalLM(config)



def test_export_returns_the_output_dataclass():
    """The outputs are pytree nodes, as transformers' ModelOutput: torch.export refused every model ("Found <class
    MarkovianTransformerOutput> in output, which is not a known type")."""
    torch.manual_seed(0)
    lm = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2,
                                                                    attention="softmax")).eval()  # fmt: skip
    exported = torch.export.export(lm, (_ids(1),), strict=False).module()
    out = exported(_ids(2))
    assert isinstance(out, MarkovianTransformerOutput) and out.loss is None
    torch.testing.assert_close(out.logits, lm(_ids(2)).logits)
    mat = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, order=3)).eval()  # fmt: skip
    exported = torch.export.export(mat, (_ids(1), _ids(3)), strict=False).module()
    out = exported(_ids(2), _ids(4))
    assert isinstance(out, MarkovTranslatorOutput)
    torch.testing.assert_close(out.logits, mat(_ids(2), _ids(4)).logits)


def test_compiled_global_attention_stays_one_graph_at_any_length():
    """The causal global-scope chunk loop (query_chunks) traces with a symbolic length: math.isqrt broke the graph
    there, and each new sequence length recompiled another frame that then ran eagerly."""
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, attention="alibi")
    model = MarkovianTransformerForCausalLM(config).eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="eager", fullgraph=True, dynamic=True)
    for length in (12, 20, 33):
        ids = torch.randint(0, 11, (2, length), generator=torch.Generator().manual_seed(length))
        torch.testing.assert_close(compiled(ids).logits, model(ids).logits)


@pytest.mark.parametrize("attention, scope", [("softmax", "global"), ("softmax", "local"), ("markov", "local"),
                                               ("markov", "global")])  # fmt: skip
def test_compiled_training_forward_is_one_graph_with_eager_loss_and_gradients(attention, scope):
    """With labels, a compiled forward is one graph (fullgraph=True fails on any break; the label values are checked
    eagerly only: that check broke every compiled forward's graph at its loss, as the lean SwiGLU did around every
    FFN), with eager's loss and gradients, through AOT autograd's trace of the backward. Local scope runs the banded
    lag-bias path: its storage offset and its nonzero() over the edge blocks broke the graph 15-18 times."""
    torch.manual_seed(0)
    window = {"max_order": 3} if attention == "markov" else {"window": 3} if scope == "local" else {}
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2, attention=attention,
                                        scope=scope, **window)  # fmt: skip
    _one_graph_like_eager(MarkovianTransformerForCausalLM(config), input_ids=_ids(1), labels=_ids(1))


@pytest.mark.parametrize("position", ["rotary", "sinusoidal", "learned"])
def test_compiled_padded_training_forward_is_one_graph_with_eager_loss_and_gradients(position):
    """A padded batch: the mask's value check and the choice of positions (whether any row has padding before a
    real token, which moves its positions) read the mask back to the host, 4 graph breaks per forward; compiled,
    the check is a device-side assertion and the choice a torch.where. The loss scores the padding's labels too,
    so the padding's positions must be eager's as well: right-padded rows (positions in order) and a left-padded
    one (positions counting real tokens)."""
    model = _positioned_model(position)
    right = torch.ones(2, 12, dtype=torch.long)
    right[1, 9:] = 0
    for mask in (right, right.flip(-1)):
        _one_graph_like_eager(model, input_ids=_ids(1), attention_mask=mask, labels=_ids(1))


def test_a_compiled_forward_still_refuses_a_mask_of_other_values():
    """Compiled, the mask's values are asserted on the device (no host read): a 0.5 raises, not a silent weight."""
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2, attention="softmax")
    model = MarkovianTransformerForCausalLM(config)
    mask = torch.ones(2, 12)
    mask[0, 3] = 0.5
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    with pytest.raises(RuntimeError, match="attention_mask must hold only 0"):
        compiled(_ids(1), attention_mask=mask)


@pytest.mark.parametrize("position", ["rotary", "learned"])
def test_compiled_packed_training_forward_is_one_graph_with_eager_loss_and_gradients(position):
    """Packed documents: the position_ids' value checks (>= 0, and below max_positions for learned positions) read
    them back, 6 graph breaks (4 with learned positions) per forward; compiled, they are device-side assertions:
    a bad position still raises."""
    ids = _ids(1)
    position_ids = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 0, 1, 2, 3, 4, 5, 6, 7, 8]])
    compiled = _one_graph_like_eager(_positioned_model(position), input_ids=ids, labels=ids, position_ids=position_ids)
    learned = position == "learned"
    bad, rule = (position_ids + 10, "lie below max_positions=16") if learned else (position_ids - 1, "be >= 0")
    with pytest.raises(RuntimeError, match=f"position_ids must {rule}"):
        compiled(ids, labels=ids, position_ids=bad)
