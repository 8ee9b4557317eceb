import json

import pytest
import torch

from markovformer import MarkovianTransformerForCausalLM
from markovformer.data import chain_batch, chain_eval_batches
from markovformer.training.chain_lm import ChainLMJob, oracle_loss_of, run_chain_lm


def test_chain_batches_ignore_targets_without_full_context():
    chain = ChainLMJob().chain()
    batch = chain_batch(chain, 4, 20, torch.Generator().manual_seed(0))
    assert (batch["labels"][:, : chain.order] == -100).all()
    assert torch.equal(batch["labels"][:, chain.order :], batch["input_ids"][:, chain.order :])


def test_eval_set_is_fixed_by_its_seed_and_differs_across_seeds():
    chain = ChainLMJob().chain()
    a = chain_eval_batches(chain, 70, 16, seed=3, batch_size=32)
    b = chain_eval_batches(chain, 70, 16, seed=3, batch_size=32)
    c = chain_eval_batches(chain, 70, 16, seed=4, batch_size=32)
    assert [x["input_ids"].shape[0] for x in a] == [32, 32, 6]
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b, strict=True))
    assert not torch.equal(a[0]["input_ids"], c[0]["input_ids"])


def test_bad_job_values_name_the_field():
    for field, value in (("steps", 0), ("lags", ()), ("seq_len", 3), ("lr", -1.0)):
        with pytest.raises(ValueError, match=field):
            ChainLMJob(**{field: value})


def test_short_training_run_approaches_the_entropy_rate_and_saves_a_loadable_model(tmp_path):
    """A cut-down demo: the loss must fall from log(16) to near the oracle, and the saved model must reproduce it."""
    job = ChainLMJob(steps=300, warmup_steps=30, eval_every=150, val_sequences=64, output_dir=str(tmp_path))
    results = run_chain_lm(job)
    assert results["val_loss"] < 1.05 * results["oracle_val_loss"]  # log(16) = 2.77 at the start
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["val_loss"] == pytest.approx(results["val_loss"])
    model = MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "model").eval()
    batches = chain_eval_batches(job.chain(), job.val_sequences, job.seq_len, seed=job.seed + 10_000)
    with torch.no_grad():
        losses = [(float(model(b["input_ids"], labels=b["labels"]).loss), b["input_ids"].shape[0]) for b in batches]
    reloaded = sum(loss * n for loss, n in losses) / sum(n for _, n in losses)
    assert reloaded == pytest.approx(results["val_loss"], rel=1e-5)
    assert oracle_loss_of(job.chain(), batches) == pytest.approx(results["oracle_val_loss"])
