"""The Markovian Transformer's ``norm`` ("layernorm", the default, or "rmsnorm"): every block's two norms and the final
norm of every attention kind follow it, a bad value is named with the choices, and saves, run checkpoints and configs
written before the field keep what they computed. (RMSNorm against its formula: tests/layers/test_norm.py; the whole
model against transformers' Llama: tests/models/test_reference_models.py.)"""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from conftest import TINY_RUN
from torch import nn

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForTokenClassification,
)
from markovformer.layers.norm import NORM_EPS
from markovformer.layers.registry import ATTENTION_KINDS
from markovformer.training.optim import parameter_groups

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, attention="softmax", num_labels=3)
NEEDED = {"linformer": {"max_positions": 8}}  # options a kind's model cannot be built without


def _norms(model: nn.Module) -> dict[str, nn.Module]:
    return {name: module for name, module in model.named_modules() if isinstance(module, (nn.LayerNorm, nn.RMSNorm))}


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_every_block_norm_and_the_final_norm_of_every_kind_are_the_norm_asked(kind, norm):
    """Two norms per block and the final one, all of the kind asked (the GRU injection's block too), and no other."""
    causal = ATTENTION_KINDS[kind].accepts_causal(True)
    config = MarkovianTransformerConfig(**{**SMALL, "attention": kind, "causal": causal, "gru": True, "norm": norm,
                                           **NEEDED.get(kind, {})})  # fmt: skip
    head = MarkovianTransformerForCausalLM if causal else MarkovianTransformerForTokenClassification
    norms = _norms(head(config))
    expected = {f"model.blocks.{i}.{place}" for i in range(2) for place in ("attention_norm", "ffn_norm")}
    assert set(norms) == expected | {"model.final_norm"}
    wanted = nn.RMSNorm if norm == "rmsnorm" else nn.LayerNorm
    assert all(type(module) is wanted and module.eps == NORM_EPS for module in norms.values())


def test_a_bad_norm_is_named_with_the_choices():
    with pytest.raises(ValueError, match=r"MarkovianTransformerConfig\.norm='rms': must be one of \('layernorm', "
                                         r"'rmsnorm'\) \(did you mean 'rmsnorm'\?\)"):  # fmt: skip
        MarkovianTransformerConfig(**SMALL, norm="rms")


@pytest.mark.parametrize("init_scheme", ["normal", "gpt2"])
def test_rmsnorm_ignores_bias_and_starts_at_ones_under_either_init(init_scheme):
    """RMSNorm has no additive term: bias=True keeps the GELU MLP's biases and adds none to the norms; the norms'
    scales start at 1, as LayerNorm's do, under either init scheme."""
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, ffn="gelu", norm="rmsnorm",
                                                                       init_scheme=init_scheme))  # fmt: skip
    assert sorted(name for name, _ in model.named_parameters() if name.endswith("bias")) == [
        f"model.blocks.{i}.ffn.{linear}.bias" for i in range(2) for linear in ("down", "up")]  # fmt: skip
    for name, norm in _norms(model).items():
        assert torch.equal(norm.weight, torch.ones(16)), name


def test_the_rmsnorm_scales_do_not_decay():
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, norm="rmsnorm"))
    decayed, kept = parameter_groups(model, 0.1)
    scales = {id(norm.weight) for norm in _norms(model).values()}
    assert len(scales) == 5 and not scales & {id(p) for p in decayed["params"]}
    assert scales <= {id(p) for p in kept["params"]}


def _perturbed(model: nn.Module) -> nn.Module:
    torch.manual_seed(3)
    with torch.no_grad():  # norm scales off 1: a norm of the wrong kind or a scale left unloaded shows
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return model.eval()


IDS = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))


def test_save_pretrained_and_from_pretrained_keep_the_norm(tmp_path):
    torch.manual_seed(0)
    model = _perturbed(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, norm="rmsnorm")))
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["norm"] == "rmsnorm"
    loaded = MarkovianTransformerForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.norm == "rmsnorm" and type(loaded.model.final_norm) is nn.RMSNorm
    assert torch.equal(loaded(IDS).logits, model(IDS).logits)
    as_layernorm = MarkovianTransformerForCausalLM(loaded.config.replace(norm="layernorm")).eval()
    as_layernorm.load_state_dict(loaded.state_dict(), strict=False)  # the same scales, centred as well
    assert (as_layernorm(IDS).logits - model(IDS).logits).abs().max() > 1e-2  # the norm's kind shows in the logits


def test_a_config_written_before_the_field_builds_the_layernorm_model_it_built(tmp_path):
    torch.manual_seed(0)
    model = _perturbed(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL)))
    values = model.config.to_dict()
    assert values.pop("norm") == "layernorm"
    assert MarkovianTransformerConfig.from_dict(values).norm == "layernorm"
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["norm"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    loaded = MarkovianTransformerForCausalLM.from_pretrained(tmp_path)
    assert loaded.config.norm == "layernorm" and type(loaded.model.final_norm) is nn.LayerNorm
    assert torch.equal(loaded(IDS).logits, model(IDS).logits)


def test_a_run_checkpoint_keeps_the_norm(tmp_path):
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.run_dir import load_run
    from markovformer.training.runner import train

    values = yaml.safe_load(yaml.safe_dump(TINY_RUN))
    values["model"]["norm"] = "rmsnorm"
    values["trainer"].update({"max_steps": 2, "warmup_steps": 1, "eval_every": 2, "checkpoint_every": 2,
                              "logger": "csv"})  # fmt: skip
    values["output_dir"] = str(tmp_path / "run")
    train(resolve_run_config(values))
    config, model, _ = load_run(tmp_path / "run" / "checkpoints" / "last.ckpt")
    assert config.model["norm"] == "rmsnorm" and model.config.norm == "rmsnorm"
    assert all(type(norm) is nn.RMSNorm for norm in _norms(model).values())
    _, final, _ = load_run(tmp_path / "run")  # its model/, written at the same step
    assert final.config.norm == "rmsnorm"
    assert all(torch.equal(tensor, final.state_dict()[name]) for name, tensor in model.state_dict().items())
