"""The Hugging Face behaviours of issue 30, through transformers' public API: problem types, backbone <-> head
loading, hidden states and attentions, embeddings, initialisation, config names, checkpointing, the cache of
``generate``, seq2seq ``generate`` and the tokenizer. Skipped when the ``hf`` extra is absent."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
import markovformer.hf  # noqa: E402,F401 - registers the Auto classes
from markovformer.hf import HF_CLASSES, HF_CONFIGS  # noqa: E402

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=2)


def _hf(task: str, **options):
    torch.manual_seed(0)
    return HF_CLASSES["markovian_transformer", task][1](HF_CONFIGS["markovian_transformer"](**{**SMALL, **options}))


def _ids(batch: int = 3, length: int = 7, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, 11, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("num_labels, problem, labels, loss_class", [
    (1, None, torch.tensor([0.5, -1.0, 2.0]), torch.nn.MSELoss),
    (3, "regression", torch.randn(3, 3), torch.nn.MSELoss),
    (3, None, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]), torch.nn.BCEWithLogitsLoss),
    (3, "multi_label_classification", torch.tensor([[1, 0, 1], [0, 0, 0], [0, 1, 1]]), torch.nn.BCEWithLogitsLoss),
    (3, None, torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
    (3, "single_label_classification", torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
], ids=["one_label_regression", "regression", "multi_label_inferred", "multi_label", "single_label_inferred",
        "single_label"])  # fmt: skip
def test_sequence_classification_losses_follow_problem_type(num_labels, problem, labels, loss_class):
    model = _hf("sequence_classification", num_labels=num_labels, problem_type=problem).eval()
    output = model(input_ids=_ids(), labels=labels)
    logits = output.logits.squeeze(-1) if num_labels == 1 else output.logits
    target = labels.float() if loss_class is not torch.nn.CrossEntropyLoss else labels
    torch.testing.assert_close(output.loss, loss_class()(logits, target))
