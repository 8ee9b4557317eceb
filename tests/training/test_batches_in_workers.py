"""The training streams as a DataLoader worker receives them: forked (Linux's default start method before Python
3.14), or pickled when the worker starts (spawn, macOS's default; forkserver, Linux's from Python 3.14)."""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
from dataclasses import replace

import pytest
import torch
import yaml
from conftest import TINY_RUN
from torch.utils.data import DataLoader

from markovformer.data.collate import collate
from markovformer.training.batches import DocumentWindows, EpochBatches
from markovformer.training.evaluation import scoring_loader
from markovformer.training.trainer_config import TrainerConfig
from markovformer.training.worker_copy import Packed


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
    # a second worker started now (its examples packed once, for both) begins at the step the trainer is at now
    packed = stream.packed
    second_worker = pickle.loads(pickle.dumps(stream))
    assert stream.packed is packed
    assert _equal_batches(list(itertools.islice(iter(second_worker), 6)), list(itertools.islice(iter(stream), 6)))


def _examples(count: int) -> list[dict]:
    """``count`` examples of 6 to 10 tokens, each tensor its own storage (as a translation bundle's are)."""
    examples = [{"input_ids": torch.arange(index, index + 6 + index % 5) % 7} for index in range(count)]
    return [{**example, "labels": example["input_ids"].clone()} for example in examples]


def _equal_batches(received: list[dict], expected: list[dict]) -> bool:
    return len(received) == len(expected) and all(
        ours.keys() == theirs.keys() and all(torch.equal(ours[key], theirs[key]) for key in ours)
        for ours, theirs in zip(received, expected, strict=True))  # fmt: skip


def test_a_forkserver_worker_of_a_stream_of_hundreds_of_tensors_yields_the_in_process_batches():
    """torch shares each tensor it pickles for a worker through a file descriptor of its own, and forkserver passes
    at most 256 to a process: the mat_synthetic recipe (400 examples) failed at step 0 with 'ValueError: too many
    fds'. Its 800 tensors now travel in one buffer, and the worker yields the batches the stream does in process."""
    stream = EpochBatches(_examples(400), 4, 3, collate, start=lambda: 5)
    loader = DataLoader(stream, batch_size=None, num_workers=1, multiprocessing_context="forkserver")
    assert _equal_batches(list(itertools.islice(loader, 3)), list(itertools.islice(iter(stream), 3)))


def test_a_forkserver_worker_of_a_scoring_pass_over_hundreds_of_tensors_yields_the_in_process_batches():
    """The validation split and eval's, as the scoring loaders' workers receive them (the start method a notebook
    sets with set_start_method)."""
    examples = _examples(300)
    tc = TrainerConfig(eval_batch_size=50, num_workers=1)
    expected = list(scoring_loader(examples, collate, replace(tc, num_workers=0)))
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("forkserver", force=True)
    try:
        assert _equal_batches(list(scoring_loader(examples, collate, tc)), expected)
    finally:
        multiprocessing.set_start_method(previous, force=True)


def test_a_packed_value_unpickles_bit_for_bit_with_its_views_and_tied_parameters():
    """What a worker receives: every tensor equal in dtype, shape, strides and bits (a NaN's payload too), views
    of one storage still views of one storage, one parameter met twice still one parameter; a storage of an odd
    number of bytes leaves the next one aligned (unaligned, the float32 weight after it was read from 3 bytes early)."""
    base = torch.randn(6, 4, dtype=torch.float64)
    base[0, 0] = float("nan")
    weight = torch.nn.Parameter(torch.randn(3, 2))
    value = {"rows": [base[1], base[2:4].t()], "base": base, "ids": torch.arange(5, dtype=torch.int16)[::2],
             "mask": torch.tensor([True, False]), "odd": torch.arange(3, dtype=torch.uint8),  # 3 bytes, then floats
             "tied": (weight, weight), "empty": torch.zeros(0, 3), "note": "x"}
    copy = pickle.loads(pickle.dumps(Packed(value)))
    originals, copies = torch.utils._pytree.tree_leaves(value), torch.utils._pytree.tree_leaves(copy)
    for original, received in zip(originals, copies, strict=True):
        if isinstance(original, torch.Tensor):
            assert (received.dtype, received.shape, received.stride()) == (original.dtype, original.shape,
                                                                          original.stride())  # fmt: skip
            assert torch.equal(received.contiguous().view(-1).view(torch.uint8),
                               original.contiguous().view(-1).view(torch.uint8))  # fmt: skip
        else:
            assert received == original
    copy["base"][1, 0] = 42.0  # a row is a view of the base, as it was
    assert copy["rows"][0][0] == 42.0
    assert copy["tied"][0] is copy["tied"][1] and isinstance(copy["tied"][0], torch.nn.Parameter)
    assert copy["tied"][0].requires_grad


def test_a_run_with_a_spawned_worker_prints_no_lightning_advice_on_persistent_workers(tmp_path, main_cli):
    """Under spawn Lightning advised persistent_workers=True on stderr for each loader (two lines of a tiny run's
    stderr): the endless training stream starts its workers once, and a validation pass's fresh workers are the
    run's choice; the run prints its own lines only, and ends at the forked run's validation loss."""
    values = {**TINY_RUN, "trainer": {**TINY_RUN["trainer"], "max_steps": 4, "warmup_steps": 1, "eval_every": 4,
                                      "checkpoint_every": 4, "num_workers": 1}}  # fmt: skip
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(values))
    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        done = main_cli("train", "run.yaml", "output_dir=run")
    finally:
        multiprocessing.set_start_method(previous, force=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "persistent_workers" not in done.stderr, done.stderr[-3000:]
    assert "validation: loss 1.3008 " in done.stdout
