import math
import re

import pytest
import torch

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.training.optim import (
    DECAYED_MODULES,
    UNDECAYED_BEFORE,
    build_optimizer,
    lr_multiplier,
    parameter_groups,
    regroup_optimizer_state,
)


def test_weight_decay_only_on_weight_matrices():
    config = MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, gru=True)
    model = MarkovianTransformerForCausalLM(config)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, plain = build_optimizer(model, lr=1e-3, weight_decay=0.1).param_groups
    decayed_names = {names[id(p)] for p in decayed["params"]}
    plain_names = {names[id(p)] for p in plain["params"]}
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert "model.embed.weight" in decayed_names and "lm_head.weight" in decayed_names
    assert any(".qkv.weight" in n for n in decayed_names)
    assert any("gate_networks" in n and n.endswith(".weight") for n in decayed_names)  # headwise linear maps
    # strengths, norms and biases are never decayed; every trainable parameter is in exactly one group
    assert any("theta" in n for n in plain_names) and not any("theta" in n for n in decayed_names)
    assert not any("norm" in n or n.endswith(".bias") for n in decayed_names)
    assert decayed_names.isdisjoint(plain_names)
    assert decayed_names | plain_names == {n for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("decay", ["cosine", "linear"])
def test_schedule_warms_up_then_decays_to_the_floor(decay):
    warmup, total = 10, 110
    values = [lr_multiplier(s, warmup, total, decay) for s in range(total + 5)]
    assert values[0] == pytest.approx(0.1) and values[warmup - 1] == pytest.approx(1.0)
    assert values[warmup] == pytest.approx(1.0)
    assert values[total] == pytest.approx(0.1) and values[-1] == pytest.approx(0.1)
    assert all(a >= b - 1e-12 for a, b in zip(values[warmup:], values[warmup + 1 :], strict=False))
    middle = warmup + (total - warmup) // 2
    expected = 0.1 + 0.9 * (0.5 if decay == "cosine" else 0.5)
    assert values[middle] == pytest.approx(expected)
    quarter = warmup + (total - warmup) // 4
    expected = 0.1 + 0.9 * (0.5 * (1 + math.cos(math.pi / 4)) if decay == "cosine" else 0.75)
    assert values[quarter] == pytest.approx(expected)


def test_the_constant_schedule_holds_the_peak_rate_after_its_warm_up():
    warmup, total = 4, 20
    values = [lr_multiplier(step, warmup, total, "constant", floor=0.1) for step in range(total + 3)]
    assert values[:warmup] == pytest.approx([(step + 1) / warmup for step in range(warmup)])
    assert values[warmup:] == [1.0] * (total + 3 - warmup)  # to the end and past it, never the floor


def test_unknown_decay_is_rejected():
    with pytest.raises(ValueError, match="decay"):
        lr_multiplier(50, 10, 100, "step")


def test_optimizer_uses_the_papers_betas():
    model = torch.nn.Linear(2, 2)
    assert build_optimizer(model, lr=1e-3).defaults["betas"] == (0.9, 0.95)


@pytest.mark.parametrize("options", [{"gru": True}, {"gru": True, "gru_kind": "min_gru"}, {"attention": "forgetting"},
                                     {"attention": "gru"}])  # fmt: skip
def test_recurrent_and_forget_gate_weight_matrices_decay(options):
    """nn.GRU's weight_ih/weight_hh, the minGRU's and FoX's forget gate's weights are linear maps held as plain
    parameters: they escaped the decay of nn.Linear's weights (speech_digits trained its GRUs undecayed)."""
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                                                       **options))  # fmt: skip
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, plain = build_optimizer(model, lr=1e-3, weight_decay=0.1).param_groups
    decayed_names = {names[id(p)] for p in decayed["params"]}
    matrices = {n for n, p in model.named_parameters()
                if p.dim() == 2 and n.rsplit(".", 1)[-1].startswith("weight") and ("gru" in n or "forget" in n)}
    assert matrices and matrices <= decayed_names
    assert not any(n.endswith("bias") or "bias_" in n for n in decayed_names)


def test_a_state_saved_before_the_recurrent_weights_decayed_is_regrouped_keeping_each_moment():
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                                                       gru=True))  # fmt: skip
    old_rule = tuple(t for t in DECAYED_MODULES if t not in UNDECAYED_BEFORE)
    old = torch.optim.AdamW(parameter_groups(model, 0.1, old_rule), lr=1e-3)
    model(input_ids=torch.randint(0, 8, (2, 6)), labels=torch.randint(0, 8, (2, 6))).loss.backward()
    old.step()
    moments = {id(p): old.state[p]["exp_avg"].clone() for group in old.param_groups for p in group["params"]}
    state = old.state_dict()
    new = build_optimizer(model, lr=1e-3, weight_decay=0.1)
    with pytest.raises(ValueError):  # torch refuses the old grouping as saved
        new.load_state_dict(old.state_dict())
    assert regroup_optimizer_state(model, state)
    new.load_state_dict(state)
    for group in new.param_groups:
        for p in group["params"]:
            assert torch.equal(new.state[p]["exp_avg"], moments[id(p)])
    assert not regroup_optimizer_state(model, new.state_dict())  # already this version's groups


def test_a_state_of_a_model_without_recurrent_weights_is_left_as_it_is():
    """A model with no GRU, minGRU or forget gate groups its weights alike under both rules: its saved state is
    not regrouped (a resume would print that the checkpoint was trained without their decay)."""
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1))
    state = build_optimizer(model, lr=1e-3).state_dict()
    assert not regroup_optimizer_state(model, state)


def adamw_step(lr: float, betas: tuple[float, float]) -> None:
    """One AdamW step of this trainer's optimiser on a float32 weight with a gradient."""
    weight = torch.nn.Linear(2, 2)
    weight(torch.ones(1, 2)).sum().backward()
    build_optimizer(weight, lr=lr, betas=betas).step()


@pytest.mark.parametrize("beta1", [0.0, 0.9, 0.99])
def test_every_learning_rate_accepted_steps_adamw_and_one_that_would_overflow_float32_is_refused(beta1):
    """trainer.lr=1e39 (1e38 at betas[0]=0.9) ended in a traceback from inside torch's AdamW ('value cannot be
    converted to type float without overflow': its first step scales by lr / (1 - betas[0])); a run with an lr just
    below that diverges instead, on its one line. The bound is the one where torch's step fails."""
    from markovformer.training.trainer_config import FLOAT32_MAX, ConfigError, TrainerConfig

    assert torch.finfo(torch.float32).max == FLOAT32_MAX
    betas = (beta1, 0.95)
    largest = FLOAT32_MAX * (1 - beta1) * 0.999
    adamw_step(TrainerConfig(lr=largest, betas=betas).lr, betas)
    too_large = largest * 2
    with pytest.raises(RuntimeError, match="overflow"):
        adamw_step(too_large, betas)
    shown = re.escape(f"{too_large:g}")
    with pytest.raises(ConfigError, match=rf"^trainer\.lr={shown} is too large: .*trainer\.betas\[0\]"):
        TrainerConfig(lr=too_large, betas=betas)


def test_a_weight_decay_that_would_zero_or_flip_the_weights_each_step_is_refused_naming_it(main_cli, tmp_path):
    """trainer.weight_decay=1e45 trained, diverged at step 2 and was told to lower trainer.lr. AdamW's decoupled
    decay multiplies each decayed weight by 1 - lr * weight_decay every step (at the peak rate, lr): from 1 on it
    zeroes the weights or flips their sign, so a new run refuses lr * weight_decay >= 1, naming both."""
    from markovformer.training.trainer_config import ConfigError, TrainerConfig, check_weight_decay

    weight = torch.nn.Linear(2, 2, bias=False)
    before = weight.weight.detach().clone()
    weight.weight.grad = torch.zeros_like(before)  # no gradient: the step is the decay alone
    build_optimizer(weight, lr=0.5, weight_decay=3.0).step()
    torch.testing.assert_close(weight.weight.detach(), before * (1 - 0.5 * 3.0))  # sign flipped
    check_weight_decay(TrainerConfig(lr=0.5, weight_decay=1.99))
    with pytest.raises(ConfigError, match=r"^trainer\.weight_decay=2 with trainer\.lr=0\.5: AdamW's decoupled decay "
                                          r"multiplies each decayed weight by 1 - lr \* weight_decay = 0 every step"):
        check_weight_decay(TrainerConfig(lr=0.5, weight_decay=2.0))
    done = main_cli("train", "trainer.weight_decay=1e45", "trainer.max_steps=20", "output_dir=wd")
    assert done.returncode == 2 and "trainer.weight_decay=1e+45 with trainer.lr=0.003" in done.stderr, done.stderr
    assert "give trainer.weight_decay < 1 / trainer.lr = 333" in done.stderr
    assert not (tmp_path / "wd").exists()  # refused before anything is written
