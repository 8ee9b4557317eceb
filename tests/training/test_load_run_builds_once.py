"""Loading a trained run's final model/ builds its model once: the model its tensor names are checked against is the
one the weights load into."""

from __future__ import annotations

import copy

import torch
from conftest import TINY_RUN

from markovformer import MarkovianTransformerForCausalLM
from markovformer.training.run_config import resolve_run_config
from markovformer.training.run_dir import load_trained_run
from markovformer.training.runner import train


def test_loading_a_runs_final_model_builds_it_once_with_the_saved_weights(tmp_path, monkeypatch):
    """It built two (one to check the tensors against, one from_pretrained loaded into)."""
    values = copy.deepcopy(TINY_RUN)
    values["trainer"].update(max_steps=2, warmup_steps=0, eval_every=2, checkpoint_every=2, log_every=2)
    train(resolve_run_config({**values, "output_dir": str(tmp_path)}))
    built = []
    original = MarkovianTransformerForCausalLM.__init__

    def counted(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(MarkovianTransformerForCausalLM, "__init__", counted)
    loaded = load_trained_run(tmp_path)
    assert loaded.weights["source"] == "model"
    assert len(built) == 1 and built[0] is loaded.model
    monkeypatch.undo()
    saved = MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "model")
    assert not loaded.model.training
    ids = torch.randint(0, 4, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(ids).logits, saved(ids).logits)
