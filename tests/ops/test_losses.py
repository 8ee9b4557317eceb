"""The token loss every family trains with, against torch's mean cross-entropy, and its empty-batch rule."""

import pytest
import torch
import torch.nn.functional as F
from saved_memory import large_allocations

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)
from markovformer.ops.losses import token_cross_entropy
from markovformer.ops.padding import check_attention_mask


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_equals_the_mean_over_labelled_positions(smoothing):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 7, 5, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 5, (3, 7), generator=g)
    labels[0, :4] = -100
    expected = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=smoothing)
    torch.testing.assert_close(token_cross_entropy(logits, labels, smoothing), expected)


def test_no_labelled_position_is_zero_loss_with_zero_gradients_not_nan():
    logits = torch.randn(2, 4, 5, requires_grad=True)
    labels = torch.full((2, 4), -100)
    assert torch.isnan(F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100))  # the old rule
    loss = token_cross_entropy(logits, labels)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


def test_models_give_a_finite_loss_on_a_batch_without_labels():
    ids = torch.randint(0, 6, (2, 9))
    unlabelled = torch.full_like(ids, -100)
    models = [MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1,
                                                                         n_heads=2)),
              ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=6, d_model=8, order=3))]  # fmt: skip
    for model in models:
        assert model(ids, labels=unlabelled).loss.item() == 0.0
        assert torch.isfinite(model(ids, labels=ids).loss)


@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0])
def test_attention_mask_values_other_than_zero_and_one_are_refused(bad):
    mask = torch.ones(2, 5)
    mask[1, 3] = bad
    with pytest.raises(ValueError, match=f"only 0 .padding. and 1 .real token.; got {bad}"):
        check_attention_mask(mask, (2, 5))
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match="only 0"):
        model(torch.zeros(2, 5, dtype=torch.long), attention_mask=mask)


def test_valid_masks_pass_in_every_dtype():
    for mask in (torch.tensor([[1, 1, 0]]), torch.tensor([[1.0, 0.0, 0.0]]), torch.tensor([[True, False, True]])):
        check_attention_mask(mask, (1, 3))
    with pytest.raises(ValueError, match=r"must be \(B, T\) = \(1, 4\)"):
        check_attention_mask(torch.ones(1, 3), (1, 4))


@pytest.mark.parametrize(("bad", "shown"), [(5, 5), (-1, -1), (-101, -101)])
def test_a_label_just_outside_the_classes_is_refused_by_name(bad, shown):
    """The class range is [0, V): V itself (one past the last class) and -1 are refused with the value named, not
    left to an IndexError inside cross_entropy (CPU) or a device assert (CUDA); -100 alone is ignored."""
    logits = torch.randn(2, 3, 5)
    labels = torch.tensor([[0, 4, -100], [1, 2, 3]])
    labels[1, 2] = bad
    with pytest.raises(ValueError) as caught:
        token_cross_entropy(logits, labels)
    assert str(caught.value) == f"labels holds {shown}, outside the classes [0, 5) (and not the ignored -100)"


def test_labels_that_are_not_a_tensor_are_refused_naming_them():
    with pytest.raises(TypeError, match="labels must be a tensor of class ids; got list"):
        token_cross_entropy(torch.randn(1, 3, 5), [[0, 1, 2]])



@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_the_next_token_loss_allocates_no_logits_beyond_torchs_cross_entropy(family):
    """A causal LM's loss adds nothing of size (B, T, V) to torch's own cross-entropy of flat logits (the
    log-probabilities; in training their gradient and the logits'): shifting the logits, logits[:, :-1], made a copy
    to flatten, and its backward a zero-filled one more."""
    batch, length, vocab = 2, 9, 2048  # V far above B x T and d_model: only the logits and their kin are this large
    at_least = batch * (length - 1) * vocab
    model = (MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=vocab, d_model=8, n_layers=1,
                                                                        n_heads=2))
             if family == "markovian_transformer" else
             ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=vocab, d_model=8, order=3)))  # fmt: skip
    ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    flat = torch.randn(batch * length, vocab, requires_grad=True)
    head = 1  # the logits themselves
    with torch.no_grad():
        reference = large_allocations(lambda: F.cross_entropy(flat, ids.flatten()), at_least)
        assert len(large_allocations(lambda: model(ids, labels=ids), at_least)) == head + len(reference)
    reference = large_allocations(lambda: F.cross_entropy(flat, ids.flatten()).backward(), at_least)
    found = large_allocations(lambda: model(ids, labels=ids).loss.backward(), at_least)
    assert len(found) == head + len(reference), (found, reference)
