"""``eval --split test`` scores the test split: its loss is the token-weighted cross-entropy of the trained model
over the test examples, computed here by hand, and differs from the validation split's."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_RUN

from markovformer.training.build import build_data
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import evaluate, load_run, train


def hand_loss(model: torch.nn.Module, examples) -> float:
    """The mean next-token cross-entropy over every scored label of ``examples``, one example at a time: each
    position's logits predict the label one position on; a label of -100 is not scored."""
    total, count = 0.0, 0
    with torch.no_grad():
        for index in range(len(examples)):
            example = examples[index]
            logits = model(input_ids=example["input_ids"][None]).logits[0].double()
            targets = example["labels"][1:]
            scored = targets != -100
            total += float(F.cross_entropy(logits[:-1][scored], targets[scored], reduction="sum"))
            count += int(scored.sum())
    return total / count


def test_eval_of_the_test_split_is_the_hand_computed_loss_of_the_test_examples(tmp_path):
    """The splits come from different random streams and have different sizes (64 and 32 sequences), so a scoring
    pass over the wrong split gives another loss: ``eval`` read ``bundle.val`` whatever the split asked would fail."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=10, eval_every=10, checkpoint_every=10, log_every=10)
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))

    val, test = (evaluate(tmp_path / "run", split)["metrics"] for split in ("val", "test"))
    assert val["loss"] != pytest.approx(test["loss"], rel=1e-4)  # the check below can tell the splits apart

    config, model, run_dir = load_run(tmp_path / "run")
    model.eval()
    bundle = build_data(config, run_dir)
    assert len(bundle.test) == TINY_RUN["data"]["test_sequences"] != len(bundle.val)
    expected = hand_loss(model, bundle.test)
    assert test["loss"] == pytest.approx(expected, rel=1e-6)
    assert val["loss"] == pytest.approx(hand_loss(model, bundle.val), rel=1e-6)
