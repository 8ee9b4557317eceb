"""Float32 at the widths real models use: every attention kind of the registry, at head dimensions 64 and 128 and at
small to large input scales, computes in float32 what it computes in float64, forward and backward, and no output row
is silently empty; and decoding token by token in float32 gives the float64 forward's logits (zeroing the attention
layers at this init moves every position's logits by 35-76 % of their norm in the five kinds tried, so a wrong
decoding state cannot hide under 1e-4). The guard against the class of bug that zeroed random-feature attention at
head dimension 64 while every small-width test passed (a data-free constant that underflows with the head dimension,
a threshold in absolute units): most layer tests run at head dims of 4-16."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers.registry import ATTENTION_KINDS, attention_option_names
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForTokenClassification,
)

VOCAB, LENGTH, BATCH = 50, 64, 2
WIDTHS = {64: 128, 128: 256}  # head dimension -> d_model at two heads
SCALES = (0.3, 3.0)  # the attention input's scale per coordinate (the pre-attention norm's weight)
BIDIRECTIONAL_ONLY = {kind for kind, entry in ATTENTION_KINDS.items() if not entry.accepts_causal(True)}


def _model(kind: str, head_dim: int, scale: float) -> torch.nn.Module:
    """One layer of ``kind`` in a model built at seed 0 in float64, its attention input scaled by ``scale``."""
    values = dict(vocab_size=VOCAB, d_model=WIDTHS[head_dim], n_layers=1, n_heads=2, attention=kind,
                  causal=kind not in BIDIRECTIONAL_ONLY, dropout=0.0, num_labels=5)  # fmt: skip
    if "max_positions" in attention_option_names(kind):
        values["max_positions"] = LENGTH
    torch.manual_seed(0)
    head = MarkovianTransformerForTokenClassification if kind in BIDIRECTIONAL_ONLY else MarkovianTransformerForCausalLM
    model = head(MarkovianTransformerConfig(**values)).double()
    with torch.no_grad():
        model.model.blocks[0].attention_norm.weight.fill_(scale)
    return model


def _mixer_output_and_gradients(model: torch.nn.Module):
    """The first block's attention output (B, T, D) and the gradients of a fixed projection of it with respect to
    the attention layer's parameters, in the model's dtype."""
    layer = model.model.blocks[0].attention
    captured = {}
    handle = layer.register_forward_hook(
        lambda module, args, output: captured.setdefault("out", output[0] if isinstance(output, tuple) else output)
    )
    model(torch.randint(0, VOCAB, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1)))
    handle.remove()
    out = captured["out"]
    probe = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(out.dtype)
    names, params = zip(*[(n, p) for n, p in layer.named_parameters() if p.requires_grad], strict=True)
    grads = torch.autograd.grad((out * probe).sum(), params, allow_unused=True)
    return out.detach().double(), {n: g.double() for n, g in zip(names, grads, strict=True) if g is not None}


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).norm() / want.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("head_dim", sorted(WIDTHS))
@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_float32_is_float64_at_model_head_dims(kind, head_dim, scale):
    model = _model(kind, head_dim, scale)
    want, want_grads = _mixer_output_and_gradients(model)
    got, got_grads = _mixer_output_and_gradients(model.float())
    assert torch.isfinite(got).all()
    rows = want.norm(dim=-1)  # (B, T): no row of the layer's output is empty in exact arithmetic
    assert (rows[:, 1:] > 1e-6 * rows.median()).all(), f"{kind}: empty output rows at head dim {head_dim}"
    assert _relative_error(got, want) < 1e-4
    row_errors = (got - want).norm(dim=-1) / rows.clamp_min(1e-300)
    assert row_errors[:, 1:].max() < 1e-3, f"{kind}: worst row {row_errors.max():.2e}"
    assert got_grads.keys() == want_grads.keys()
    # a gradient that is zero in exact arithmetic (a per-head constant under a softmax) is float32's rounding
    floor = 1e-5 * torch.stack([grad.norm() for grad in want_grads.values()]).norm()
    for name, grad in want_grads.items():
        assert torch.isfinite(got_grads[name]).all(), name
        error = (got_grads[name] - grad).norm()
        assert error < 1e-3 * grad.norm() + floor, f"{name}: {error:.2e} against {grad.norm():.2e}"


@pytest.mark.parametrize("kind", sorted(set(ATTENTION_KINDS) - BIDIRECTIONAL_ONLY))
def test_float32_decoding_is_the_float64_forward_at_head_dim_64(kind):
    """A prefill, then one token at a time through the layers' decoding states (key/value caches, running sums of
    features, recurrent states), in float32 at head dimension 64 and the kind's default options: the logits of the
    float64 full forward at every position."""
    torch.manual_seed(0)
    values = dict(vocab_size=VOCAB, d_model=WIDTHS[64], n_layers=2, n_heads=2, attention=kind, dropout=0.0)
    if "max_positions" in attention_option_names(kind):
        values["max_positions"] = LENGTH
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**values)).double().eval()
    ids = torch.randint(0, VOCAB, (BATCH, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        model = model.float()
        state: dict = {}
        steps = [model(ids[:, :8], state=state).logits]
        steps += [model(ids[:, t : t + 1], state=state).logits for t in range(8, ids.shape[1])]
    got = torch.cat(steps, dim=1).double()
    errors = (got - want).norm(dim=-1) / want.norm(dim=-1)
    assert errors.max() < 1e-4, f"{kind}: worst position {errors.argmax(-1).tolist()} at {errors.max():.2e}"
