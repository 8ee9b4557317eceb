"""Mixed precision: every causal kind trains under autocast (what ``trainer.precision=bf16-mixed`` runs), its loss
close to the float32 loss and its gradients finite; the scan model's recurrence included. On the CPU's bfloat16
autocast here; CUDA's follows the same dispatch (``test_cuda``)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_generate import INCREMENTAL, VOCAB, _left_padded, _markovian, _perturbed

from markovformer import (
    MarkovianTransformerConfig,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
    VariationalMarkovTransformer,
    VMTConfig,
)
from markovformer.models.registry import MODEL_FAMILIES

# bfloat16 keeps 8 mantissa bits: logits of these perturbed (far from init) models move by ~1e-2, the mean loss less
LOSS_TOLERANCE = 0.05
# with every weight rounded to bfloat16 too (2^-9 relative each) the loss moves by up to 0.7 % on these models
HALF_WEIGHTS_TOLERANCE = 0.02


def _loss_and_grads(model: torch.nn.Module, autocast: bool, right_padded: bool) -> tuple[float, dict]:
    ids, mask = _left_padded(length=19)
    if right_padded:  # the scan model takes its padding on the right
        mask = mask.flip(-1)
    labels = ids.masked_fill(mask == 0, -100)
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = model(ids, attention_mask=mask, labels=labels).loss
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


def _assert_mixed_follows_float32(model: torch.nn.Module, right_padded: bool = False) -> None:
    model.train(False)
    full, full_grads = _loss_and_grads(model, autocast=False, right_padded=right_padded)
    mixed, mixed_grads = _loss_and_grads(model, autocast=True, right_padded=right_padded)
    assert abs(mixed - full) < LOSS_TOLERANCE, (mixed, full)
    assert mixed_grads.keys() == full_grads.keys()
    for name, grad in mixed_grads.items():
        assert grad.dtype == torch.float32 and torch.isfinite(grad).all(), name
    # the gradients point the same way: a path that dropped or mangled a term under autocast would not
    flat = torch.cat([g.flatten() for g in mixed_grads.values()])
    reference = torch.cat([full_grads[name].flatten() for name in mixed_grads])
    assert torch.nn.functional.cosine_similarity(flat, reference, dim=0) > 0.98


@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_every_kind_trains_under_autocast_as_in_float32(name):
    _assert_mixed_follows_float32(_markovian(INCREMENTAL[name]))


@pytest.mark.parametrize("context_mode", ["recurrent", "markov"])
def test_the_scan_model_trains_under_autocast_as_in_float32(context_mode):
    torch.manual_seed(0)
    order = 3 if context_mode == "markov" else None
    config = ScanMarkovConfig(vocab_size=VOCAB, d_model=16, context_mode=context_mode, order=order, max_positions=32)
    _assert_mixed_follows_float32(ScanMarkovForCausalLM(config), right_padded=True)


def _ids(length: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(seed))


def _family_case(family: str, task: str) -> tuple[torch.nn.Module, dict]:
    """A perturbed (far from init) model of the family's head and inputs with labels, by (family, task)."""
    torch.manual_seed(0)
    ids, small = _ids(), dict(vocab_size=VOCAB, d_model=16, n_heads=2)
    if family == "scan_markov":
        order = None if task == "recurrent" else 3
        config = ScanMarkovConfig(vocab_size=VOCAB, d_model=16, context_mode=task, order=order, max_positions=32)
        return _perturbed(ScanMarkovForCausalLM(config)), dict(input_ids=ids, labels=ids)
    if family == "markov_translator":
        config = MarkovTranslatorConfig(**small, n_encoder_layers=1, n_decoder_layers=1, order=2, max_positions=32)
        target = _ids(6, seed=2)
        inputs = dict(src_ids=ids, tgt_ids=target, labels=target)
        return _perturbed(MarkovTranslatorForConditionalGeneration(config)), inputs
    if family == "vmt":
        config = VMTConfig(vocab_size=VOCAB, latent_dim=2, d_model=8, n_layers=1, n_heads=2, hidden_dim=8)
        return _perturbed(VariationalMarkovTransformer(config), scale=0.1), dict(input_ids=ids)
    head = MODEL_FAMILIES[family].heads[task]
    if task == "causal_lm":
        return _perturbed(head(MarkovianTransformerConfig(**small, n_layers=1))), dict(input_ids=ids, labels=ids)
    if task == "ctc":
        config = MarkovianTransformerConfig(**small | dict(vocab_size=None), n_layers=1, input_dim=5, num_labels=4)
        features = torch.randn(2, 12, 5, generator=torch.Generator().manual_seed(1))
        return _perturbed(head(config)), dict(input_features=features, labels=torch.tensor([[1, 2, 3], [2, 3, -100]]))
    config = MarkovianTransformerConfig(**small, n_layers=1, num_labels=3, causal=False)
    labels = torch.tensor([0, 2]) if task == "sequence_classification" else ids % 3
    return _perturbed(head(config)), dict(input_ids=ids, labels=labels)


# every head of every family (the scan model in both context modes): a family new in models/registry.py adds its own
FAMILY_HEADS = [("markovian_transformer", task) for task in MODEL_FAMILIES["markovian_transformer"].heads] + [
    ("scan_markov", "markov"), ("scan_markov", "recurrent"), ("markov_translator", "translation"), ("vmt", "vmt")]


def test_family_heads_covers_every_head():
    listed = {(family, "causal_lm" if family == "scan_markov" else task) for family, task in FAMILY_HEADS}
    assert listed == {(family, task) for family, entry in MODEL_FAMILIES.items() for task in entry.heads}


@pytest.mark.parametrize(("family", "task"), FAMILY_HEADS)
def test_every_head_in_bfloat16_runs_under_autocast_as_in_float32(family, task):
    """bfloat16 weights (a trainer.precision=bf16-true run's saved model loads in bfloat16) under CPU autocast: the
    loss is the float32 model's within bfloat16's rounding. The scan model failed ("mixed dtype (CPU)"): the
    recurrence runs in float32 under autocast and CPU autocast hands its LayerNorm those states beside a bf16 weight."""
    model, inputs = _family_case(family, task)
    with torch.no_grad():
        full = model(**inputs, **_vmt_noise(family)).loss
        half = copy.deepcopy(model).to(torch.bfloat16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = half(**inputs, **_vmt_noise(family)).loss
    assert abs(mixed.float().item() - full.item()) < HALF_WEIGHTS_TOLERANCE * full.item(), (mixed, full)


def _vmt_noise(family: str) -> dict:
    """The VMT samples its latents: the same draws for both runs."""
    return dict(generator=torch.Generator().manual_seed(3)) if family == "vmt" else {}
