"""The Markovian Transformer's ``attention_bias``: GPT-2's biases on the query/key/value and output projections,
taken by every kind whose layer projects in the shared attention frame (``layers.attention``) and refused by name
for the mixers, whose projections are their papers' own; off by default, so that configs and saves written before
the field build the model they built. (The whole model against transformers' GPT-2 with its attention biases:
tests/models/test_reference_models.py; decoding from a state: tests/models/test_generate.py; the Hugging Face
config: tests/hf/test_hf_native_models.py.)"""

from __future__ import annotations

import json

import pytest
import torch

from markovformer import MarkovianTransformerConfig, MarkovianTransformerModel
from markovformer.layers.attention import SelfAttention
from markovformer.layers.registry import ATTENTION_KINDS, build_attention

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2)
NEEDED = {"linformer": {"max_positions": 8}}  # options a kind's model cannot be built without
FRAMED = sorted(kind for kind, entry in ATTENTION_KINDS.items() if entry.projection_biases)
IDS = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(1))


def _config(kind: str, **options) -> MarkovianTransformerConfig:
    causal = ATTENTION_KINDS[kind].accepts_causal(True)
    return MarkovianTransformerConfig(**SMALL, attention=kind, causal=causal, **NEEDED.get(kind, {}), **options)


def _model(config: MarkovianTransformerConfig) -> MarkovianTransformerModel:
    torch.manual_seed(0)
    return MarkovianTransformerModel(config).double().eval()


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_a_kind_takes_attention_bias_exactly_when_its_layer_projects_in_the_shared_frame(kind):
    """The registry's ``projection_biases`` held to the layers: a kind declaring it projects in ``SelfAttention``
    frames, and ``attention_bias`` adds a bias to each frame's qkv and out_proj and nothing else; a kind without
    it has no frame and is refused, naming the kind and its layer."""
    frames = [name for name, module in _model(_config(kind)).named_modules() if isinstance(module, SelfAttention)]
    if not ATTENTION_KINDS[kind].projection_biases:
        assert not frames
        with pytest.raises(ValueError, match=rf"^MarkovianTransformerConfig\.attention_bias=True: layer 0's "
                                             rf"attention kind '{kind}' has no "):  # fmt: skip
            _config(kind, attention_bias=True)
        return
    plain, biased = _model(_config(kind)), _model(_config(kind, attention_bias=True))
    assert len(frames) >= 2 and all(module.bias is None for name, module in plain.named_modules()
                                    if name.endswith((".qkv", ".out_proj")))  # fmt: skip
    added = set(biased.state_dict()) - set(plain.state_dict())
    assert added == {f"{frame}.{projection}.bias" for frame in frames for projection in ("qkv", "out_proj")}
    assert set(plain.state_dict()) <= set(biased.state_dict())


@pytest.mark.parametrize("kind", FRAMED)
def test_zero_attention_biases_compute_the_bias_free_model_and_nonzero_ones_are_read(kind):
    """Biases of zero leave every logit of the bias-free model with the same weights (the biases are added, nothing
    else moves); a query/key/value bias and an output bias each change the output."""
    plain, biased = _model(_config(kind)), _model(_config(kind, attention_bias=True))
    biased.load_state_dict(plain.state_dict(), strict=False)  # the same weights; the biases start at zero
    with torch.no_grad():
        expected = plain(IDS).last_hidden_state
        torch.testing.assert_close(biased(IDS).last_hidden_state, expected, rtol=0, atol=1e-12)
        biases = [(name, bias) for name, bias in biased.named_parameters()
                  if name.startswith("blocks.0.") and name.endswith((".qkv.bias", ".out_proj.bias"))]  # fmt: skip
        assert biases
        for name, bias in biases:
            bias.copy_(0.5 * torch.randn_like(bias))
            assert (biased(IDS).last_hidden_state - expected).abs().max() > 1e-3, name
            bias.zero_()


def test_a_mixed_list_names_the_layer_whose_kind_cannot_take_attention_bias():
    with pytest.raises(ValueError, match=r"attention_bias=True: layer 1's attention kind 'rwkv' has no query/key/"
                                         r"value and output projections of the shared attention frame"):  # fmt: skip
        MarkovianTransformerConfig(**SMALL, attention=["softmax", "rwkv"], attention_bias=True)
    with pytest.raises(ValueError, match=r"attention_bias=True: attention kind 's4d' has no query/key/value"):
        build_attention("s4d", d_model=8, n_heads=2, causal=True, rotary=False, attention_bias=True)


def test_a_config_or_save_written_before_the_field_builds_the_bias_free_model(tmp_path):
    from markovformer import MarkovianTransformerForCausalLM

    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, attention="softmax")).eval()
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved.pop("attention_bias") is False
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = MarkovianTransformerForCausalLM.from_pretrained(tmp_path)  # strict: no bias is missing or unexpected
    assert loaded.config.attention_bias is False
    assert not any(name.endswith(("qkv.bias", "out_proj.bias")) for name in loaded.state_dict())
    assert torch.equal(loaded(IDS).logits, model(IDS).logits)
