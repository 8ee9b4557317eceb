"""The engine's vmt task in training: windows walked along documents as a function of (seed, step), the carry handed
from one training step to the next (and through a checkpoint, to each process its own lanes), KL warm-up, and
validation as the ELBO of whole documents walked window by window."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
import yaml
from conftest import run_in_process  # beside this folder
from vmt_run_values import tiny_vmt

import markovformer.training.tasks.vmt as vmt_task
from markovformer.data.collate import collate
from markovformer.data.synthetic.state_space import StickyHMMSource
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig
from markovformer.training.batches import DocumentWindows, window_stride, windows_in_document
from markovformer.training.checkpoint import load_checkpoint_file
from markovformer.training.metrics import DocumentMetrics
from markovformer.training.run_config import resolve_run_config
from markovformer.training.runner import build_data, evaluate, train
from markovformer.training.tasks import build_task
from markovformer.training.tasks.vmt import DocumentWalk, kl_weight

# --------------------------------------------------------------------------------------------- the stream


def _numbered_documents(lengths: list[int]) -> list[dict]:
    """Document d holds ids 100·d + position, so a window says where it was cut from."""
    return [{"input_ids": 100 * d + torch.arange(length)} for d, length in enumerate(lengths)]


@pytest.mark.parametrize("overlap", [False, True])
def test_document_windows_walk_each_document_in_order_and_resume_exactly(overlap):
    lengths, window, lanes = [37, 8, 50, 3, 64, 21], 8, 3
    stride = window_stride(window, overlap)
    documents = _numbered_documents(lengths)

    def stream(start: int, count: int, seed: int = 1) -> list[dict]:
        iterator = iter(DocumentWindows(documents, lanes, seed, collate, window, stride, start=lambda: start))
        return [next(iterator) for _ in range(count)]

    steps = stream(0, 200)
    previous: list[tuple[int, int] | None] = [None] * lanes
    taken = [0] * lanes  # windows taken in the lane's current document (None: it joined that document midway)
    walked = torch.zeros(len(lengths), dtype=torch.long)  # documents walked to their end from their first window
    for batch in steps:
        assert set(batch) == {"input_ids", "attention_mask", "carry_mask"}
        for lane in range(lanes):
            ids = batch["input_ids"][lane][batch["attention_mask"][lane].bool()]
            document, start = int(ids[0]) // 100, int(ids[0]) % 100
            expected = torch.arange(start, min(start + window, lengths[document])) + 100 * document
            assert torch.equal(ids, expected)  # one contiguous window, cut short only by the document's end
            continues = bool(batch["carry_mask"][lane])
            if previous[lane] is None:  # step 0: a random window, nothing to carry
                assert not continues and start % stride == 0
                taken[lane] = None
            else:
                last_document, last_start = previous[lane]
                ended = last_start + window >= lengths[last_document]
                assert continues == (not ended)
                if continues:
                    assert (document, start) == (last_document, last_start + stride)
                else:  # a new document, from its beginning
                    assert start == 0
                    if taken[lane] is not None:
                        assert taken[lane] == windows_in_document(lengths[last_document], window, stride)
                        walked[last_document] += 1
                    taken[lane] = 0
            if taken[lane] is not None:
                taken[lane] += 1
            previous[lane] = (document, start)
    assert bool((walked > 0).all())  # every document was drawn and walked through
    assert windows_in_document(37, window, stride) == (5 if not overlap else 9)  # the last one short: 32..36
    for start in (1, 57, 199):  # a resumed stream continues the same sequence
        count = min(5, len(steps) - start)
        for later, batch in zip(stream(start, count), steps[start : start + count], strict=True):
            for key in batch:
                assert torch.equal(later[key], batch[key]), (start, key)
    other_seed = stream(0, 20, seed=2)
    assert any(not torch.equal(a["input_ids"], b["input_ids"]) for a, b in zip(other_seed, steps[:20], strict=True))


# ------------------------------------------------------------------------------------- training steps


@pytest.fixture
def recorded_forwards(monkeypatch):
    """Every VMT forward call during a run: its keyword arguments and output."""
    calls = []
    original = VariationalMarkovTransformer.forward

    @functools.wraps(original)
    def recording(self, **kwargs):
        output = original(self, **kwargs)
        calls.append((kwargs, output))
        return output

    monkeypatch.setattr(VariationalMarkovTransformer, "forward", recording)
    return calls


@pytest.mark.parametrize("changes", [{}, {"task_options__window_overlap": True}, {"task_options__carry": False}],
                         ids=["carry", "overlap", "no_carry"])  # fmt: skip
def test_each_step_gets_the_previous_steps_carry_and_the_warming_kl_weight(changes, recorded_forwards, tmp_path,
                                                                           capsys):  # fmt: skip
    values = tiny_vmt(**changes)
    values["output_dir"] = str(tmp_path / "run")
    config = resolve_run_config(values)
    train(config)
    printed = capsys.readouterr().out  # training's objective and validation's -ELBO are named apart
    assert "train objective/token" in printed and "validation: -ELBO/token" in printed
    assert "final validation: -ELBO/token" in printed and "train loss" not in printed
    tc, options = config.trainer, config.task_options
    stride = window_stride(config.model["window"], options.window_overlap)
    bundle = build_data(config)
    stream = iter(DocumentWindows(bundle.train, tc.batch_size, tc.seed, collate, config.model["window"], stride))
    assert len(recorded_forwards) == tc.max_steps  # training only: validation walks with elbo / iw_bound
    continued = 0
    for step, (kwargs, _) in enumerate(recorded_forwards):
        batch = next(stream)
        assert torch.equal(kwargs["input_ids"], batch["input_ids"])
        assert kwargs["kl_weight"] == pytest.approx(min(1.0, (step + 1) / options.kl_warmup_steps))
        assert kwargs["carry_index"] == stride - 1
        if not options.carry or step == 0 or not bool(batch["carry_mask"].any()):
            assert kwargs.get("carry") is None and kwargs.get("carry_mask") is None
            continue
        continued += 1
        assert torch.equal(kwargs["carry_mask"], batch["carry_mask"])  # rows starting a document use no carry
        assert torch.equal(kwargs["carry"], recorded_forwards[step - 1][1].carry)
    assert continued > 0 if options.carry else continued == 0
    assert (kl_weight(1, 0), kl_weight(2, 4), kl_weight(9, 4)) == (1.0, 0.5, 1.0)


# --------------------------------------------------------------------------------------------- validation


def _walk_by_hand(model, documents: torch.Tensor, window: int, carry: bool, generator) -> dict:
    totals = {"elbo": 0.0, "reconstruction": 0.0, "kl": 0.0}
    state = None
    for start in range(0, documents.shape[1], window):
        result = model.elbo(documents[:, start : start + window], carry=state, generator=generator)
        for name in totals:
            totals[name] += float(getattr(result, name)) * result.num_tokens
        state = result.carry if carry else None
    return totals


@pytest.mark.parametrize("carry", [True, False])
def test_validation_is_the_elbo_of_the_documents_walked_window_by_window(carry):
    """-ELBO per token of the whole documents: consecutive windows (the last one short), the carry chained, batches
    of documents scored in turn with one noise stream."""
    torch.manual_seed(0)
    # residual_posterior off: Q differs from P from the start, so there is a KL to count
    config = VMTConfig(vocab_size=6, latent_dim=4, d_model=16, n_layers=1, n_heads=2, hidden_dim=16, window=8,
                       skip_length=3, residual_posterior=False)  # fmt: skip
    model = VariationalMarkovTransformer(config).eval()
    documents = StickyHMMSource(num_states=3, num_symbols=6, doc_len=21, val_documents=5).build(seed=0).val
    metrics = DocumentMetrics()
    walk = DocumentWalk(carry=carry)
    with torch.no_grad():
        for first in (0, 3):  # two batches: 3 documents, then 2
            walk(model, collate(documents[first : first + 3]), metrics)
        measured = metrics.compute()
        generator = torch.Generator().manual_seed(0)
        stacked = torch.stack([document["input_ids"] for document in documents])
        totals = [_walk_by_hand(model, stacked[rows], 8, carry, generator) for rows in (slice(0, 3), slice(3, 5))]
    tokens = stacked.numel()
    for name in ("elbo", "reconstruction", "kl"):
        assert measured[name] == pytest.approx(sum(t[name] for t in totals) / tokens, rel=1e-5)
    assert measured["loss"] == pytest.approx(-measured["elbo"])
    assert measured["bits_per_token"] == pytest.approx(-measured["elbo"] / torch.log(torch.tensor(2.0)).item())
    assert measured["iw_bound"] > measured["elbo"] - 0.05  # K = 10 paths: tighter, up to Monte-Carlo noise
    assert measured["kl"] > 0


def test_a_killed_vmt_run_resumes_with_its_carry_to_the_same_final_metrics(tmp_path):
    values = tiny_vmt(
        model__d_model=32, model__hidden_dim=32, model__window=6, data__doc_len=30, data__train_documents=32,
        trainer__max_steps=40, trainer__batch_size=8, trainer__eval_every=20, trainer__checkpoint_every=10,
    )  # fmt: skip
    config_path = tmp_path / "vmt.yaml"
    config_path.write_text(yaml.safe_dump(values))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}

    def command(*args: str) -> list[str]:
        return [sys.executable, "-m", "markovformer", *args]

    whole, killed = tmp_path / "whole", tmp_path / "killed"
    done = run_in_process("train", str(config_path), f"output_dir={whole}", cwd=tmp_path)  # the killed one: a process
    assert done.returncode == 0, done.stderr
    assert "exact log-likelihood" in done.stdout  # the data's reference, printed beside the bounds

    process = subprocess.Popen(command("train", str(config_path), f"output_dir={killed}"), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.time() + 240
    while not (killed / "checkpoints" / "step-000020.ckpt").exists():
        assert process.poll() is None, process.stderr.read().decode()
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (killed / "metrics.json").exists()  # it really died before the end
    saved = load_checkpoint_file(killed / "checkpoints" / "last.ckpt")
    assert saved["vmt_carry"].shape == (8, 4)  # the lanes' carry travels with the checkpoint

    resumed = run_in_process("train", "--resume", str(killed), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stdout
    final = {name: json.loads((run / "metrics.json").read_text())["val"] for name, run in
             (("whole", whole), ("killed", killed))}  # fmt: skip
    assert set(final["whole"]) == {"loss", "bits_per_token", "elbo", "reconstruction", "kl", "iw_bound"}
    for name, value in final["whole"].items():
        assert final["killed"][name] == pytest.approx(value, rel=1e-6), name
    # eval walks the documents as validation did, and gives the exact reference beside them
    measured = evaluate(whole)
    for name, value in final["whole"].items():
        assert measured["metrics"][name] == pytest.approx(value, rel=1e-6), name
    reference = json.loads((whole / "metrics.json").read_text())["reference"]
    assert measured["exact_log_likelihood_per_token"] == reference["val_log_likelihood_per_token"]
    assert evaluate(whole, split="test")["exact_log_likelihood_per_token"] == reference["test_log_likelihood_per_token"]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_resumed_process_takes_its_own_lanes_of_the_saved_carry(monkeypatch, rank):
    """The checkpoint holds every process's lanes in rank order (here 2 processes of 3 lanes each)."""
    monkeypatch.setattr(vmt_task, "world", lambda: (rank, 2))
    task = build_task("vmt")
    saved = torch.arange(6.0)[:, None].expand(6, 4)
    task.load_state({"vmt_carry": saved})
    assert torch.equal(task.carry, saved[3 * rank : 3 * rank + 3])
