"""MarkovBias: transition strengths, order gates and the per-lag bias they make (slot k-1 = alpha_{t,k} * T_k)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from markovformer.layers import MarkovBias
from markovformer.layers.markov_bias import SOFTPLUS_EPS

D_MODEL, HEADS, ORDER = 16, 2, 3
HEAD_DIM = D_MODEL // HEADS


def _bias(seed: int = 0, **options) -> MarkovBias:
    torch.manual_seed(seed)
    module = MarkovBias(d_model=D_MODEL, n_heads=HEADS, max_order=ORDER, **options).double().eval()
    with torch.no_grad():
        for theta in module.theta.values():
            theta.normal_(0.0, 1.0)  # away from 0 so that lags and heads differ visibly
        for logits in module.static_gate_logits.values():
            logits.normal_(0.0, 1.0)
    return module


def _activations(batch: int = 2, length: int = 7, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, D_MODEL, generator=g, dtype=torch.float64)
    q = torch.randn(batch, HEADS, length, HEAD_DIM, generator=g, dtype=torch.float64)
    return x, q


@pytest.mark.parametrize("bidirectional", [False, True])
def test_transitions_softplus_and_signed(bidirectional):
    softplus = _bias(transition="softplus", bidirectional=bidirectional)
    signed = _bias(transition="signed", bidirectional=bidirectional)
    directions = ("past", "future") if bidirectional else ("past",)
    for module, expected in ((softplus, lambda t: F.softplus(t) + SOFTPLUS_EPS), (signed, lambda t: t)):
        strengths = module.transitions()
        assert set(strengths) == {"past", "future"}
        if not bidirectional:
            assert strengths["future"] is None
        for direction in directions:
            assert strengths[direction].shape == (HEADS, ORDER)
            assert torch.equal(strengths[direction], expected(module.theta[direction]))
    for direction in directions:
        assert (softplus.transitions()[direction] > 0).all()
        assert (signed.theta[direction] < 0).any()  # signed strengths can suppress a lag


def test_head_specific_false_shares_one_row():
    module = _bias(head_specific=False, bidirectional=True, gate="none")
    x, q = _activations()
    for direction in ("past", "future"):
        assert module.theta[direction].shape == (1, ORDER)
        strengths = module.transitions()[direction]
        assert strengths.shape == (HEADS, ORDER)
        assert torch.equal(strengths[0], strengths[1])
    past, future, _ = module(x, q)
    assert torch.equal(past[:, 0], past[:, 1]) and torch.equal(future[:, 0], future[:, 1])
    assert not torch.equal(past[..., 0], past[..., 1])  # lags still differ


@pytest.mark.parametrize("gate_input", ["token", "query", "static", "sequence"])
@pytest.mark.parametrize("gate", ["linear", "mlp", "deep_mlp"])
@pytest.mark.parametrize("gate_null", [True, False])
def test_gates_are_distributions_and_scale_the_strengths(gate, gate_input, gate_null):
    module = _bias(gate=gate, gate_input=gate_input, gate_null=gate_null, bidirectional=True)
    x, q = _activations()
    past, future, gates = module(x, q)
    strengths = module.transitions()
    slots = ORDER + int(gate_null)
    assert set(gates) == {"past", "future"}
    for direction, bias in (("past", past), ("future", future)):
        alpha = gates[direction]
        assert alpha.shape == (2, HEADS, 7, slots)
        assert (alpha >= 0).all()
        torch.testing.assert_close(alpha.sum(-1), torch.ones(2, HEADS, 7, dtype=torch.float64))
        # the slot for lag k is alpha_{t,k} * T_k; the null slot multiplies nothing.
        expected = alpha[..., :ORDER] * strengths[direction][None, :, None, :]
        torch.testing.assert_close(bias, expected, rtol=0, atol=0)
        if gate_input == "static":
            expected_alpha = torch.softmax(module.static_gate_logits[direction], -1)[None, :, None].expand_as(alpha)
            torch.testing.assert_close(alpha, expected_alpha)
        else:
            assert not torch.allclose(alpha[:, :, 0], alpha[:, :, 1]) or gate_input == "sequence"


def test_gate_none_bias_equals_strengths():
    module = _bias(gate="none", bidirectional=True)
    x, q = _activations()
    past, future, gates = module(x, q)
    assert gates == {}
    assert module.last_gate_entropy is None
    strengths = module.transitions()
    assert torch.equal(past, strengths["past"][None, :, None, :].expand(2, HEADS, 7, ORDER))
    assert torch.equal(future, strengths["future"][None, :, None, :].expand(2, HEADS, 7, ORDER))


def test_causal_bias_has_no_future():
    module = _bias(bidirectional=False)
    x, q = _activations()
    past, future, gates = module(x, q)
    assert future is None and set(gates) == {"past"} and past.shape == (2, HEADS, 7, ORDER)


def test_sequence_gate_is_constant_over_time_and_ignores_padding():
    module = _bias(gate_input="sequence", bidirectional=True, gate="mlp")
    x, q = _activations(batch=2, length=7)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 4:] = 0
    gates = module(x, q, mask).gates
    for alpha in gates.values():
        torch.testing.assert_close(alpha, alpha[:, :, :1].expand_as(alpha), rtol=1e-14, atol=1e-14)
    # Padded positions hold anything: the gates do not move.
    garbage = x.clone()
    garbage[1, 4:] = 100.0 * torch.randn(3, D_MODEL, dtype=torch.float64)
    moved = module(garbage, q, mask).gates
    for direction in gates:
        torch.testing.assert_close(moved[direction], gates[direction], rtol=0, atol=0)
    # ... and equal those of the unpadded sequence alone.
    alone = module(x[1:, :4], q[1:, :, :4]).gates
    for direction in gates:
        torch.testing.assert_close(gates[direction][1:, :, :4], alone[direction], rtol=1e-12, atol=1e-12)
    # By hand: each direction's network applied to the masked mean of x.
    for direction, alpha in gates.items():
        mean = (x * mask[..., None]).sum(1) / mask.sum(1)[:, None]
        logits = module.gate_networks[direction](mean[:, None, :]).view(2, HEADS, -1)
        expected = torch.softmax(logits, -1)[:, :, None].expand_as(alpha)
        torch.testing.assert_close(alpha, expected, rtol=1e-12, atol=1e-12)
    # Without the mask the padded frames would count: the mask is what made the difference.
    unmasked = module(garbage, q).gates
    assert not torch.allclose(unmasked["past"][1], gates["past"][1])


def test_query_gate_reads_q_not_x():
    module = _bias(gate_input="query", gate="mlp", bidirectional=True)
    x, q = _activations()
    other_x, other_q = _activations(seed=9)
    gates = module(x, q).gates
    same_q = module(other_x, q).gates
    new_q = module(x, other_q).gates
    for direction in gates:
        assert torch.equal(same_q[direction], gates[direction])
        assert not torch.allclose(new_q[direction], gates[direction])
    # Each head's gate reads its own query only.
    head_one_changed = q.clone()
    head_one_changed[:, 1] = other_q[:, 1]
    partial = module(x, head_one_changed).gates
    for direction in gates:
        assert torch.equal(partial[direction][:, 0], gates[direction][:, 0])
        assert not torch.allclose(partial[direction][:, 1], gates[direction][:, 1])


def test_token_gate_reads_x_position_by_position():
    module = _bias(gate_input="token", gate="linear")
    x, q = _activations()
    other_x, other_q = _activations(seed=9)
    gates = module(x, q).gates["past"]
    assert torch.equal(module(x, other_q).gates["past"], gates)
    changed = x.clone()
    changed[:, 3] = other_x[:, 3]
    moved = module(changed, q).gates["past"]
    assert torch.equal(moved[:, :, [0, 1, 2, 4, 5, 6]], gates[:, :, [0, 1, 2, 4, 5, 6]])
    assert not torch.allclose(moved[:, :, 3], gates[:, :, 3])


def test_static_gate_ignores_inputs():
    module = _bias(gate_input="static")
    x, q = _activations()
    other_x, other_q = _activations(seed=9)
    assert torch.equal(module(x, q).gates["past"], module(other_x, other_q).gates["past"])


def test_gumbel_gates_are_one_hot_in_training_and_soft_at_eval():
    module = _bias(gate_gumbel_tau=0.5)
    x, q = _activations()
    module.train()
    torch.manual_seed(0)
    hard = module(x, q).gates["past"]
    assert torch.equal(hard.sum(-1), torch.ones_like(hard.sum(-1)))
    assert torch.equal((hard == 1).sum(-1), torch.ones_like(hard.sum(-1), dtype=torch.long))
    module.eval()
    soft = module(x, q).gates["past"]
    assert ((soft > 0) & (soft < 1)).all()


def test_a_copy_or_pickle_after_a_training_forward_holds_no_activations():
    """The gate logits kept for ``last_gate_entropy`` are not graph leaves while training: deepcopy (EMA models,
    ``AveragedModel``) raised on them after any training step, and ``torch.save`` wrote them into the file."""
    import copy
    import io

    module = _bias(bidirectional=True).train()
    x, q = _activations()
    module(x, q)
    assert module.last_gate_entropy is not None and module.last_gate_entropy.requires_grad
    twin = copy.deepcopy(module)
    assert twin.last_gate_entropy is None and module.last_gate_entropy is not None
    for name, value in module.state_dict().items():
        assert torch.equal(twin.state_dict()[name], value)
    buffer = io.BytesIO()
    torch.save(module, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=False).last_gate_entropy is None
    past, _, _ = module(x, q)
    torch.testing.assert_close(twin(x, q)[0], past, rtol=0, atol=0)


@pytest.mark.parametrize("gate, hidden_layers", [("linear", 0), ("mlp", 1), ("deep_mlp", 2)])
def test_gate_networks_have_the_spec_depth_of_gelu_hidden_layers(gate, hidden_layers):
    """SPEC 2.2: "linear" maps the input to the logits, "mlp" has one GELU hidden layer, "deep_mlp" two; recomputed
    here from the raw weights (token gate: one network over d_model, an output per head and slot)."""
    module = _bias(gate=gate, gate_input="token")
    x, q = _activations()
    network = module.gate_networks["past"]
    hidden = x
    for index in range(hidden_layers):
        layer = network[2 * index]
        hidden = F.gelu(hidden @ layer.weight[0] + layer.bias[0])
    final = network[-1]
    logits = (hidden @ final.weight[0] + final.bias[0]).view(2, 7, HEADS, -1).transpose(1, 2)
    assert len(network) == 2 * hidden_layers + 1
    torch.testing.assert_close(module(x, q).gates["past"], torch.softmax(logits, -1), rtol=1e-12, atol=1e-12)


def test_gumbel_gates_pass_the_soft_samples_gradient_straight_through():
    """SPEC 2.2: a straight-through hard sample: the forward is one-hot, the backward is the gradient of the soft
    Gumbel-softmax drawn with the same noise (a plain argmax would pass no gradient to the gate at all)."""
    module = _bias(gate_gumbel_tau=0.5, gate_input="static").train()
    x, q = _activations()
    weights = torch.randn(2, HEADS, 7, ORDER + 1, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    torch.manual_seed(0)
    hard = module(x, q).gates["past"]
    (hard_grad,) = torch.autograd.grad((hard * weights).sum(), module.static_gate_logits["past"])
    torch.manual_seed(0)
    logits = module.static_gate_logits["past"][None, :, None, :].expand(2, -1, 7, -1)
    soft = F.gumbel_softmax(logits, tau=0.5, hard=False, dim=-1)
    (soft_grad,) = torch.autograd.grad((soft * weights).sum(), module.static_gate_logits["past"])
    assert torch.equal(hard, F.one_hot(soft.argmax(-1), ORDER + 1).to(hard.dtype))  # the same noise drawn
    assert hard_grad.abs().max() > 1e-3
    torch.testing.assert_close(hard_grad, soft_grad, rtol=1e-12, atol=1e-12)


def test_transition_parameters_start_as_n_0_002_draws():
    """SPEC 2.1: theta ~ N(0, 0.02) by default (4096 draws: the sample std is within 5 % of 0.02)."""
    torch.manual_seed(0)
    theta = MarkovBias(d_model=8, n_heads=64, max_order=64).theta["past"].detach()
    assert abs(theta.std().item() / 0.02 - 1) < 0.05 and abs(theta.mean().item()) < 0.02 * 4 / 64
