"""The training streams as a DataLoader worker receives them: forked (Linux's default start method before Python
3.14), or pickled when the worker starts (spawn, macOS's default; forkserver, Linux's from Python 3.14)."""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch

from markovformer.data.collate import collate
from markovformer.training.batches import DocumentWindows, EpochBatches


@pytest.mark.parametrize("kind", ["epochs", "documents"])
def test_a_stream_pickled_for_a_worker_yields_the_batches_from_the_step_it_was_started_at(kind):
    """With trainer.num_workers > 0 under spawn or forkserver, every run failed before its first step (torch's
    'Got pickle error when attempting to start a worker Process', then Lightning's 'Please call
    `iter(combined_loader)` first.'): the stream's start, a lambda reading the trainer's step, does not pickle. It
    pickles now as the step it gives when the worker starts, as a forked worker reads it from its copy of the
    trainer; a tiny run with one spawned worker then ends at the forked run's validation loss (1.300827 at step 4)."""
    trainer_step = {"now": 5}
    examples = [{"input_ids": torch.arange(index, index + 6 + index % 5)} for index in range(40)]
    examples = [{**example, "labels": example["input_ids"]} for example in examples]
    if kind == "epochs":
        stream = EpochBatches(examples, 4, 3, collate, start=lambda: trainer_step["now"])
    else:
        stream = DocumentWindows(examples, 2, 3, collate, window=4, stride=2, start=lambda: trainer_step["now"])
    expected = list(itertools.islice(iter(stream), 6))
    in_worker = pickle.loads(pickle.dumps(stream))
    trainer_step["now"] = 0  # the trainer's step moves on after the workers started: theirs stays
    received = list(itertools.islice(iter(in_worker), 6))
    assert [batch.keys() for batch in received] == [batch.keys() for batch in expected]
    assert all(torch.equal(ours[key], theirs[key]) for ours, theirs in zip(received, expected, strict=True)
               for key in ours)  # fmt: skip
    assert not torch.equal(next(iter(stream))["input_ids"], expected[0]["input_ids"])  # step 0 differs from step 5
