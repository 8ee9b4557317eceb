"""Pieces of the icl-depth and order-recovery experiments that can be checked without training."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from markovformer.experiments.fitting import next_token_loss
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
    # static gates and set strengths: the expected bias is known without running the model's gate code
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=5, d_model=16, n_layers=2, n_heads=2, max_order=3,
                                        gate_input="static", transition="signed")  # fmt: skip
    model = MarkovianTransformerForCausalLM(config).eval()
    gate_logits = torch.log(torch.tensor([[0.5, 0.25, 0.125, 0.125], [0.1, 0.2, 0.3, 0.4]]))  # 3 lags + null slot
    strengths = torch.tensor([[2.0, -1.0, 4.0], [1.0, 3.0, 0.5]])
    with torch.no_grad():
        for bias in model.model.markov_biases():
            bias.static_gate_logits["past"].copy_(gate_logits)
            bias.theta["past"].copy_(strengths)
    expected = torch.tensor([[1.0, -0.25, 0.5], [0.1, 0.6, 0.15]])  # gate probability (first 3 slots) x strength
    bias = effective_lag_bias(model, torch.randint(0, 5, (3, 10)))
    torch.testing.assert_close(bias, expected.expand(2, 2, 3))


def test_gpt2_style_config_is_softmax_with_learned_positions_and_tied_embeddings():
    config = gpt2_style_config(2, d_model=16, n_layers=2, n_heads=2, max_positions=32)
    assert (config.attention, config.scope, config.position, config.ffn) == ("softmax", "global", "learned", "gelu")
    model = MarkovianTransformerForCausalLM(config)
    assert model.lm_head.weight.data_ptr() == model.model.embed.weight.data_ptr()
    assert gpt2_style_config(2, 16, 1, 2, 32, dropout=0.1).dropout == 0.1


def test_next_token_loss_scores_targets_from_position_k():
    torch.manual_seed(1)
    model = MarkovianTransformerForCausalLM(gpt2_style_config(2, 16, 1, 2, 32)).eval()
    x = torch.randint(0, 2, (4, 20))
    order = 3
    logits = model(x).logits
    manual = torch.stack([F.cross_entropy(logits[b, t - 1], x[b, t]) for b in range(4) for t in range(order, 20)])
    torch.testing.assert_close(next_token_loss(model, x, order), manual.mean())
