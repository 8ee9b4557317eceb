"""The training streams' refusals of inputs they cannot walk: each names the bad value."""

from __future__ import annotations

import pytest
import torch

from markovformer.data.collate import collate
from markovformer.training.batches import DocumentWindows, EpochBatches

_EXAMPLES = [{"input_ids": torch.arange(5), "labels": torch.arange(5)} for _ in range(4)]


@pytest.mark.parametrize("options, message", [
    ({"lengths": [5, 5, 5]}, r"^lengths has 3 entries for 4 examples$"),
    ({"sampling": "shuffled"}, r"^sampling='shuffled' must be 'epochs', or 'uniform' without lengths$"),
    ({"sampling": "uniform", "lengths": [5] * 4}, r"^sampling='uniform' must be 'epochs', or 'uniform' without "),
])  # fmt: skip
def test_epoch_batches_refuse_lengths_of_other_examples_and_an_unknown_sampling(options, message):
    with pytest.raises(ValueError, match=message):
        EpochBatches(_EXAMPLES, 2, 0, collate, **options)


@pytest.mark.parametrize("documents, window, stride, message", [
    ([], 4, 2, r"^the training split has no documents$"),
    (_EXAMPLES, 4, 5, r"^stride=5 must lie in \[1, window=4\]$"),
    (_EXAMPLES, 4, 0, r"^stride=0 must lie in \[1, window=4\]$"),
    ([*_EXAMPLES[:2], {"input_ids": torch.arange(0), "labels": torch.arange(0)}], 4, 2,
     r"^training document 2 is empty$"),
])  # fmt: skip
def test_document_windows_refuse_no_documents_a_stride_outside_the_window_and_an_empty_document(
    documents, window, stride, message
):
    with pytest.raises(ValueError, match=message):
        DocumentWindows(documents, 2, 0, collate, window=window, stride=stride)
