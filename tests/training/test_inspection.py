"""`markovformer inspect`: the attention-by-lag profile reads bounded prefixes of the validation sequences (the full
computation when they are short, the first rows of the full maps when they are cut)."""

from __future__ import annotations

import pytest
import torch
import yaml

from markovformer.cli.main import main
from markovformer.data.collate import collate
from markovformer.training import inspection
from markovformer.training.build import build_data
from markovformer.training.inspection import attention_by_lag, lag_profiles
from markovformer.training.run_dir import load_run


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny causal LM (1 layer, 2 heads, window 2) trained for 2 steps on sequences of 24 tokens."""
    from conftest import TINY_RUN

    folder = tmp_path_factory.mktemp("inspect")
    trainer = {**TINY_RUN["trainer"], "max_steps": 2, "eval_every": 2, "checkpoint_every": 2, "log_every": 1}
    config = folder / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY_RUN, "trainer": trainer, "output_dir": str(folder / "run")}))
    assert main(["train", str(config)]) == 0
    return folder / "run"


def _model_and_validation(run_dir):
    config, model, _ = load_run(run_dir)
    return model.eval(), build_data(config).val


def _full_maps(model, validation) -> torch.Tensor:
    """Layer 0's (32, H, T, T) attention maps of the first 32 whole sequences: what inspect used to compute."""
    with torch.no_grad():
        return model(input_ids=collate(validation[:32])["input_ids"], return_weights=True).attentions[0]


def test_the_profile_of_short_sequences_is_the_full_computation(trained):
    model, validation = _model_and_validation(trained)
    profile = lag_profiles(model, validation, [0])
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 24, 32, False)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(_full_maps(model, validation), 3))


def test_long_sequences_are_read_in_bounded_prefixes_whose_maps_are_the_full_maps_first_rows(trained, monkeypatch):
    """With 10 positions read, 4 sequences per pass, no map the model hands out is larger than (4, H, 10, 10), and
    the causal model's profile over queries 3..9 is that of the whole sequences' maps."""
    monkeypatch.setattr(inspection, "PROFILE_LENGTH", 10)
    monkeypatch.setattr(inspection, "PROFILE_BATCH", 4)
    model, validation = _model_and_validation(trained)
    full = _full_maps(model, validation)
    shapes = []
    forward = model.forward

    def recording_forward(*args, **kwargs):
        output = forward(*args, **kwargs)
        shapes.extend(tuple(weights.shape) for weights in output.attentions)
        return output

    monkeypatch.setattr(model, "forward", recording_forward)
    profile = lag_profiles(model, validation, [0])
    assert shapes == [(4, 2, 10, 10)] * 8
    assert (profile.max_lag, profile.length, profile.sequences, profile.cut) == (3, 10, 32, True)
    torch.testing.assert_close(profile.profiles[0], attention_by_lag(full[:, :, :10, :10], 3))
    assert not torch.allclose(profile.profiles[0], attention_by_lag(full, 3))  # the cut is seen
