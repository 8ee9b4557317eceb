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
from markovformer.ops import losses
from markovformer.ops.losses import token_cross_entropy
from markovformer.ops.padding import check_attention_mask
from markovformer.ops.precision import compute_dtype


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




@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_values_and_gradients_equal_torchs_cross_entropy_across_row_slices(monkeypatch, dtype, smoothing):
    """The loss reads the logits in slices of rows (here of 3 rows of 7 classes, and a last one of 2): its value and
    its gradient are torch's F.cross_entropy on the logits upcast to at least float32, ignored rows and logits far
    from 0 included."""
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 3 * 7)
    g = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(2, 4, 7, generator=g, dtype=torch.float64)
    logits[1] += 300  # far from 0: the softmax is read relative to each row's largest logit, as torch's
    logits = logits.to(dtype)
    labels = torch.randint(0, 7, (2, 4), generator=g)
    labels[0, 1] = labels[1, 3] = -100
    ours, theirs = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    loss = token_cross_entropy(ours, labels, smoothing)
    expected = F.cross_entropy(theirs.flatten(0, 1).to(compute_dtype(theirs)), labels.flatten(), ignore_index=-100,
                               label_smoothing=smoothing)  # fmt: skip
    (3 * loss).backward()
    (3 * expected).backward()
    assert loss.dtype == expected.dtype and ours.grad.dtype == dtype
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(ours.grad, theirs.grad)
    assert not ours.grad[0, 1].any() and not ours.grad[1, 3].any()


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_the_next_token_loss_allocates_nothing_of_the_logits_size_but_their_gradient(monkeypatch, family):
    """At a large V the logits (B, T, V) and their kin are a step's largest tensors. The loss allocates none in
    scoring and only the logits' gradient in training: torch's cross-entropy keeps the log-probabilities and makes
    two gradients (three such tensors alive at once), and shifting the logits, logits[:, :-1], made a copy to
    flatten and a zero-filled gradient of it."""
    batch, length, vocab = 2, 9, 2048  # V far above B x T and d_model: only the logits and their kin are this large
    at_least = batch * (length - 1) * vocab
    model = (MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=vocab, d_model=8, n_layers=1,
                                                                        n_heads=2))
             if family == "markovian_transformer" else
             ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=vocab, d_model=8, order=3)))  # fmt: skip
    ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 4 * vocab)  # slices of 4 rows: their temporaries are smaller
    with torch.no_grad():
        assert len(large_allocations(lambda: model(ids, labels=ids), at_least)) == 1  # the logits
    found = large_allocations(lambda: model(ids, labels=ids).loss.backward(), at_least)
    assert len(found) == 2, found  # the logits and their gradient


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_a_gradient_penalty_through_the_sliced_loss_is_torchs(monkeypatch, smoothing):
    """A penalty on the loss's gradient (create_graph=True) is differentiated through the loss as through torch's
    F.cross_entropy: the sliced backward, which writes in place, had no derivative and its share of the penalty's
    gradient was dropped without a word (7% of it here)."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(24, 5, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 7, (24,), generator=g)
    labels[3] = -100
    start = torch.randn(5, 7, generator=g, dtype=torch.float64)

    def penalty_gradient(chunk: int) -> torch.Tensor:
        monkeypatch.setattr(losses, "CHUNK_ELEMENTS", chunk)
        weight = start.clone().requires_grad_()
        loss = token_cross_entropy(hidden @ weight, labels, smoothing) + 0.01 * weight.pow(3).sum()
        (gradient,) = torch.autograd.grad(loss, weight, create_graph=True)
        gradient.pow(2).sum().backward()
        return weight.grad

    torch.testing.assert_close(penalty_gradient(3 * 7), penalty_gradient(24 * 7))  # sliced, then torch's


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [3 * 7, 100 * 7])
def test_scoring_through_the_head_in_slices_is_torchs_summed_cross_entropy(monkeypatch, dtype, chunk):
    """The scoring loss applies the head to slices of rows of the states (here 3 rows of 7 classes and a last one
    of 2, or all 8 at once): its sum is torch's F.cross_entropy over the whole logits, upcast to at least float32,
    ignored rows and logits far from 0 included, and its most likely classes are the logits' argmax."""
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    states = torch.randn(2, 4, 5, generator=g, dtype=torch.float64).to(dtype)
    weight = 3 * torch.randn(7, 5, generator=g, dtype=torch.float64).to(dtype)
    states[1, 2] *= 100  # far from 0: the softmax is read relative to each row's largest logit, as torch's
    labels = torch.randint(0, 7, (2, 4), generator=g)
    labels[0, 1] = labels[1, 3] = -100
    read = []

    def head(rows: torch.Tensor) -> torch.Tensor:
        read.append(len(rows))
        return rows @ weight.T

    total, most_likely = losses.sliced_cross_entropy(states, head, labels, 7, most_likely=True)
    logits = states @ weight.T
    expected = F.cross_entropy(logits.flatten(0, 1).to(compute_dtype(logits)), labels.flatten(), ignore_index=-100,
                               reduction="sum")  # fmt: skip
    assert read == ([3, 3, 2] if chunk == 3 * 7 else [8])
    assert total.dtype == expected.dtype
    torch.testing.assert_close(total, expected)
    assert torch.equal(most_likely, logits.argmax(-1))


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_scoring_a_causal_lm_allocates_nothing_of_the_logits_size(monkeypatch, family):
    """Validation and ``eval`` score a batch through the task's ``score``: it held the whole logits (B, T, V),
    1.7 GB at eval_batch_size 64 x 129 x 50,257, where the loss needs one slice of rows at a time."""
    from markovformer.training.tasks import build_task

    batch, length, vocab = 2, 9, 2048
    model = (MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=vocab, d_model=8, n_layers=1,
                                                                        n_heads=2))
             if family == "markovian_transformer" else
             ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=vocab, d_model=8, order=3)))  # fmt: skip
    ids = torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 4 * vocab)  # slices of 4 rows
    task = build_task("causal_lm")
    metrics = task.new_metrics()
    with torch.no_grad():
        found = large_allocations(lambda: task.score(model.eval(), {"input_ids": ids, "labels": ids}, metrics),
                                  4 * vocab + 1)  # fmt: skip
    assert found == []
    assert metrics.compute()["loss"] > 0


def test_scoring_a_translation_allocates_nothing_of_the_logits_size(monkeypatch):
    """Validation and ``eval`` of a translator: its teacher-forced loss held the whole logits (B, T, V) where it
    needs one slice of rows at a time (the greedy translations after it read (B, V) per step)."""
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
    from markovformer.training.metrics import LossMetric
    from markovformer.training.tasks import build_task

    batch, length, vocab = 2, 9, 2048
    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=vocab, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=8, max_positions=32))
    ids = torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(0))
    inputs = {"src_ids": ids, "tgt_ids": ids, "labels": ids}
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 4 * vocab)  # slices of 4 rows
    metrics = LossMetric()
    monkeypatch.setattr(metrics, "update_translations", lambda *translations: None, raising=False)
    with torch.no_grad():
        found = large_allocations(lambda: build_task("translation").score(model.eval(), inputs, metrics),
                                  4 * vocab + 1)  # fmt: skip
        expected = model(**inputs).loss
    assert found == []
    assert torch.equal(metrics.loss.total, expected * (batch * length))
