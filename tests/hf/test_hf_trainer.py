"""transformers' Trainer on the wrappers beyond one process and one batch: gradient accumulation and two gloo
processes give the step of the whole batch when rows score unequal numbers of tokens (labels -100). Skipped when
the ``hf`` extra or accelerate is absent."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
# registers the Auto classes; skipped with its one-line reason where transformers cannot run this torch
pytest.importorskip("markovformer.hf", exc_type=ImportError)
pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (the hf extra installs it)")
from hf_trainer_run import collate, rows, small_model, train  # noqa: E402

HERE = Path(__file__).parent
# TrainingArguments' switch of activation (gradient) checkpointing: renamed in transformers 5.24
CHECKPOINTING = next(name for name in ("activation_checkpointing", "gradient_checkpointing")
                     if name in transformers.TrainingArguments.__dataclass_fields__)  # fmt: skip


# transformers' Trainer counted a causal LM's first label column in num_items_in_batch until it learnt that such
# losses shift their labels (``Trainer._loss_shifts_labels``, after 5.0): the loss it steps on was then the mean
# scaled by the ratio of the scored labels to the counted ones, for transformers' own causal LMs as for these
COUNTS_SHIFTED_LABELS = "_loss_shifts_labels" in inspect.getsource(transformers.Trainer.__init__)


def assert_same_step(trained: dict, reference: dict) -> None:
    for name, tensor in reference.items():
        torch.testing.assert_close(trained[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def test_the_rows_score_unequal_token_counts_per_half_batch():
    """(what makes the tests below able to fail: equal counts give the same step whatever the weighting)"""
    for task in ("causal_lm", "token_classification"):
        shift = 1 if task == "causal_lm" else 0
        counts = [int((collate(rows(task)[start : start + 4])["labels"][:, shift:] != -100).sum())
                  for start in range(0, 24, 4)]  # fmt: skip
        assert len(set(counts)) > 1, (task, counts)


@pytest.mark.parametrize("task", ["causal_lm", "token_classification"])
def test_gradient_accumulation_gives_the_whole_batchs_step_with_ignored_labels(task, tmp_path):
    """3 SGD steps of 2 x 4 accumulated rows equal 3 steps of 8 rows. The token classifier returned the mean over
    its micro-batch's labelled tokens, which the Trainer averaged over the accumulation steps: its logged losses
    were 1.0816, 0.6562, 0.0896 for 1.0822, 0.6630, 0.0903, and a parameter 0.025 away after the 3 steps."""
    whole, whole_losses = train(task, 8, 1, str(tmp_path / "whole"))
    accumulated, accumulated_losses = train(task, 4, 2, str(tmp_path / "accumulated"))
    assert_same_step(accumulated, whole)
    assert accumulated_losses == pytest.approx(whole_losses, rel=1e-5)


@pytest.fixture(scope="module")
def two_gloo_processes(tmp_path_factory) -> Path:
    """Both tasks' 3 steps of 4 rows per process under one torchrun of 2 gloo processes (one launch, not one per
    task): ``TASK.pt`` in the returned folder."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    out = tmp_path_factory.mktemp("two")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(HERE / "hf_trainer_run.py"), "causal_lm,token_classification", "4", "1", str(out)]  # fmt: skip
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.parametrize("task", ["causal_lm", "token_classification"])
def test_two_gloo_processes_of_4_rows_give_the_step_of_one_process_of_8(task, two_gloo_processes, tmp_path):
    """The Trainer shards each batch of 8 between the processes (rows 0-3 and 4-7) and counts the labelled tokens
    of both; the causal LM and the token classifier divide their summed losses by that count, so the averaged
    gradients are the whole batch's, and the logged loss its mean."""
    two, two_losses = torch.load(two_gloo_processes / f"{task}.pt")
    one, one_losses = train(task, 8, 1, str(tmp_path / "one"))
    assert_same_step(two, one)
    assert two_losses == pytest.approx(one_losses, rel=1e-5)


def naive_objective(model, batch: dict, entropy_weight: float, penalty: float) -> torch.Tensor:
    """The model's loss plus entropy_weight times the mean entropy of each layer's order gates (over heads and
    real tokens, summed over layers) plus penalty times every lag strength parameter squared: the objective
    markovformer's own training minimises (SPEC: Eq. 25 and §3.11), computed here from the returned gates."""
    output = model.markovformer(batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"],
                                return_gates=True)  # fmt: skip
    real = batch["attention_mask"].bool()[:, None, :]  # (B, 1, T)
    entropy = sum((-(gates * gates.log()).sum(-1))[real.expand_as(gates[..., 0])].mean()
                  for layer in output.gates for gates in layer.values())  # fmt: skip
    strengths = sum((parameter**2).sum() for name, parameter in model.named_parameters() if ".theta." in name)
    return output.loss + entropy_weight * entropy + penalty * strengths


@pytest.mark.parametrize("task", ["causal_lm", "token_classification"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["stored", "checkpointed"])
def test_the_trainer_minimises_the_configs_gate_entropy_and_transition_penalty(task, checkpointing, tmp_path):
    """With gate_entropy_weight and transition_penalty set, a Trainer step is the SGD step of the regularised
    objective, as in markovformer's own training (it adds ``regularization_loss()``), blocks recomputed in the
    backward pass or not; the wrappers' loss left them out, so the Trainer's step was the plain loss's (the same
    parameters as with both weights 0). Evaluation scores the plain loss, as markovformer's validation does."""
    weights = dict(gate_entropy_weight=0.5, transition_penalty=0.3)
    data = rows(task)[:8]  # one batch of them all, in any order: the loss and the mean entropy are the same
    trained, _ = train(task, 8, 1, str(tmp_path), steps=1, data=data,
                       training={CHECKPOINTING: checkpointing}, **weights)  # fmt: skip
    model = small_model(task, **weights)
    batch = collate(data)
    labels, scale = batch["labels"], 1.0
    if task == "causal_lm" and not COUNTS_SHIFTED_LABELS:
        scale = float((labels[:, 1:] != -100).sum() / (labels != -100).sum())
    (scale * naive_objective(model, batch, entropy_weight=0.5, penalty=0.3)).backward()
    stepped = {name: (parameter - 0.5 * parameter.grad).detach() for name, parameter in model.named_parameters()}
    assert_same_step(trained, stepped)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).loss, model.markovformer(**batch).loss)


def test_label_smoothing_scores_each_position_against_the_next_token(tmp_path):
    """transformers' label smoother shifts the labels only of models it lists as causal LMs: the causal LMs are
    listed by ``register``, so a Trainer step with label_smoothing_factor=0.1 is the SGD step of the smoothed
    next-token loss computed here (it scored each position against its own token: logged 2.6552 for 2.1835)."""
    data = rows("causal_lm")[:8]  # one batch of them all, in any order
    trained, losses = train("causal_lm", 8, 1, str(tmp_path), steps=1, data=data,
                            training=dict(label_smoothing_factor=0.1))  # fmt: skip
    model = small_model("causal_lm")
    batch = collate(data)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1]
    labels = batch["labels"][:, 1:]
    scored = labels != -100
    log_probs = logits.log_softmax(-1)[scored]  # (N, V)
    nll = -log_probs.gather(-1, labels[scored][:, None]).mean()
    smoothed = 0.9 * nll - 0.1 * log_probs.mean()
    smoothed.backward()
    stepped = {name: (parameter - 0.5 * parameter.grad).detach() for name, parameter in model.named_parameters()}
    assert losses == pytest.approx([smoothed.item()], rel=1e-5)
    assert_same_step(trained, stepped)
