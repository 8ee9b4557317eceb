"""Mixed precision: every causal kind trains under autocast (what ``trainer.precision=bf16-mixed`` runs), its loss
close to the float32 loss and its gradients finite; the scan model's recurrence included. On the CPU's bfloat16
autocast here; CUDA's follows the same dispatch (``test_cuda``)."""

from __future__ import annotations

import pytest
import torch
from test_generate import INCREMENTAL, VOCAB, _left_padded, _markovian

from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

# bfloat16 keeps 8 mantissa bits: logits of these perturbed (far from init) models move by ~1e-2, the mean loss less
LOSS_TOLERANCE = 0.05


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
