"""Pieces of the icl-depth and order-recovery experiments that can be checked without training."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from markovformer.experiments.icl_depth import model_loss
from markovformer.experiments.order_recovery import MIN_BIAS, effective_lag_bias, recovered_order
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    gpt2_style_config,
)


def test_recovered_order_reads_the_largest_used_lag():
    bias = torch.zeros(2, 4, 6)  # (layers, heads, attention lags 1..6)
    assert recovered_order(bias) == 1  # nothing used: the token itself suffices (order 1)
    bias[0, 1, 0] = 2.0  # attention lag 1 -> source lag 2
    bias[1, 3, 2] = 0.6  # attention lag 3, above a quarter of the largest -> order 4
    bias[1, 0, 5] = 0.4  # attention lag 6, below a quarter: ignored
    assert recovered_order(bias) == 4
    assert recovered_order(torch.full((1, 1, 6), MIN_BIAS / 2)) == 1  # all weak


def test_effective_lag_bias_is_mean_gate_times_strength():
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=5, d_model=16, n_layers=2, n_heads=2, max_order=3)
    model = MarkovianTransformerForCausalLM(config).eval()
    x = torch.randint(0, 5, (3, 10))
    bias = effective_lag_bias(model, x)
    gates = model(x, return_gates=True).gates
    for layer in range(2):
        strength = model.model.transition_strengths()[layer]["past"]
        expected = gates[layer]["past"][..., :3].mean(dim=(0, 2)) * strength
        torch.testing.assert_close(bias[layer], expected)
    assert bias.shape == (2, 2, 3) and (bias >= 0).all()


def test_gpt2_style_config_is_softmax_with_learned_positions_and_tied_embeddings():
    config = gpt2_style_config(2, d_model=16, n_layers=2, n_heads=2, max_position=32)
    assert (config.attention, config.scope, config.position, config.ffn) == ("softmax", "global", "learned", "gelu")
    model = MarkovianTransformerForCausalLM(config)
    assert model.lm_head.weight.data_ptr() == model.model.embed.weight.data_ptr()
    assert gpt2_style_config(2, 16, 1, 2, 32, dropout=0.1).dropout == 0.1


def test_icl_model_loss_scores_targets_from_position_k():
    torch.manual_seed(1)
    model = MarkovianTransformerForCausalLM(gpt2_style_config(2, 16, 1, 2, 32)).eval()
    x = torch.randint(0, 2, (4, 20))
    order = 3
    logits = model(x).logits
    manual = torch.stack([F.cross_entropy(logits[b, t - 1], x[b, t]) for b in range(4) for t in range(order, 20)])
    torch.testing.assert_close(model_loss(model, x, order), manual.mean())
