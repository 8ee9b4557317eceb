"""What init_from reads: a saved model directory's weights, refused in one line when they cannot be read."""

import pytest

from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.init_from import initialise_from
from markovformer.training.trainer_config import ConfigError


def tiny_model() -> MarkovianTransformerForCausalLM:
    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2)
    return MarkovianTransformerForCausalLM(config)


def test_a_saved_model_directory_with_a_cut_weights_file_is_refused_in_one_line(tmp_path):
    """A save_pretrained folder whose model.safetensors was cut short (a copy or a save killed midway) printed
    safetensors' traceback ("incomplete metadata, file not fully covered") instead of the one error line, and the
    model it was to initialise is left as it was."""
    saved = tmp_path / "saved"
    tiny_model().save_pretrained(saved)
    weights = saved / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:3000])
    model = tiny_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ConfigError, match=f"init_from={str(saved)!r}: cannot read {weights.name}"):
        initialise_from(model, saved, [])
    assert all(tensor.equal(before[name]) for name, tensor in model.state_dict().items())
