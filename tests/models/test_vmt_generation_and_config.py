"""The Variational Markov Transformer's generation (from a prompt or the prior, greedy), save/load, its default
config, and bad config values and inputs refused by name."""

from __future__ import annotations

import math

import pytest
import torch
from tiny_vmts import linear_gaussian_vmt, reading_vmt, tiny_vmt

from markovformer.data.synthetic.state_space import LinearGaussianParameters
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig

# ---------------------------------------------------------------------------------------- generation, save/load


def test_generate_reads_the_prompt_then_writes_with_transition_and_emission():
    A = 0.9 * torch.eye(2, dtype=torch.float64)
    parameters = LinearGaussianParameters(A, torch.zeros(2), torch.full((2,), 0.002), torch.eye(2), torch.zeros(2),
                                          torch.full((2,), 0.002), torch.zeros(2), torch.ones(2))  # fmt: skip
    model = linear_gaussian_vmt(parameters)
    prompt = torch.randn(3, 5, 2, dtype=torch.float64)
    out = model.generate(prompt, max_new_tokens=6, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert out.shape == (3, 11, 2) and torch.equal(out[:, :5], prompt)
    written = out[:, 5:]
    torch.testing.assert_close(written[:, 1:], 0.9 * written[:, :-1], atol=0.02, rtol=0)  # y_{k+1} ≈ C A C⁻¹ y_k
    again = model.generate(prompt, max_new_tokens=6, do_sample=True, generator=torch.Generator().manual_seed(0))
    assert torch.equal(out, again)


def test_sampled_vectors_spread_from_the_emission_mean_in_proportion_to_the_temperature():
    """A real-vector VMT writes y = mean + temperature * std * noise: with one seed (the same latent path and noise)
    the vectors written at temperatures 0.5, 1 and 1.5 lie on one line, evenly spaced. Sampling at temperature 1
    whatever the config said passed every other generation test."""
    A = 0.9 * torch.eye(2, dtype=torch.float64)
    parameters = LinearGaussianParameters(A, torch.zeros(2), torch.full((2,), 0.002), torch.eye(2), torch.zeros(2),
                                          torch.full((2,), 0.3), torch.zeros(2), torch.ones(2))  # fmt: skip
    model = linear_gaussian_vmt(parameters)
    prompt = torch.randn(2, 4, 2, dtype=torch.float64)
    written = [model.generate(prompt, max_new_tokens=5, do_sample=True, temperature=temperature,
                              generator=torch.Generator().manual_seed(0))[:, 4:] for temperature in (0.5, 1.0, 1.5)]
    step = written[1] - written[0]
    assert step.abs().min() > 1e-3  # the temperature moves every vector
    torch.testing.assert_close(written[2] - written[1], step, rtol=1e-9, atol=1e-12)


def test_generate_tokens_from_a_prompt_or_from_the_prior():
    model = tiny_vmt(window=4)
    prompt = torch.randint(0, 7, (2, 9), generator=torch.Generator().manual_seed(0))
    options = dict(max_new_tokens=5, do_sample=True)
    out = model.generate(prompt, **options, generator=torch.Generator().manual_seed(1))
    assert out.shape == (2, 14) and torch.equal(out[:, :9], prompt) and int(out.max()) < 7
    assert torch.equal(out, model.generate(prompt, **options, generator=torch.Generator().manual_seed(1)))
    assert model.generate(prompt[:, :0], max_new_tokens=4, generator=torch.Generator().manual_seed(1)).shape == (2, 4)
    assert model.training  # generate restores the mode it found


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_greedy_generation_reads_the_prompt_by_its_zero_noise_path(posterior):
    """Greedy decoding is the same with any seed, and a row's output does not depend on its batch-mates: the prompt
    is read along the posterior's zero-noise path (drawn paths gave other tokens at each call)."""
    model = reading_vmt(posterior=posterior, window=4)
    with torch.no_grad():  # a sharp emission, so that a different latent writes other tokens
        model.emission.linear.weight.mul_(30.0)
    prompt = torch.randint(0, 7, (3, 10), generator=torch.Generator().manual_seed(5))
    out = model.generate(prompt, max_new_tokens=12, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, model.generate(prompt, max_new_tokens=12, generator=torch.Generator().manual_seed(2)))
    for row in range(3):
        alone = model.generate(prompt[row : row + 1], max_new_tokens=12, generator=torch.Generator().manual_seed(3))
        assert torch.equal(alone, out[row : row + 1])
    sampled = [model.generate(prompt, max_new_tokens=12, do_sample=True, generator=torch.Generator().manual_seed(seed))
               for seed in (1, 2)]  # fmt: skip
    assert not torch.equal(*sampled)  # sampling still draws


@pytest.mark.parametrize("posterior", ["gaussian", "flow"])
def test_save_and_from_pretrained_round_trip(tmp_path, posterior):
    model = tiny_vmt(posterior=posterior)
    model.save_pretrained(tmp_path)
    loaded = VariationalMarkovTransformer.from_pretrained(tmp_path)
    assert loaded.config == model.config
    y = torch.randint(0, 7, (2, 6), generator=torch.Generator().manual_seed(0))
    original = model.elbo(y, generator=torch.Generator().manual_seed(1))
    restored = loaded.elbo(y, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(restored.elbo, original.elbo)
    torch.testing.assert_close(restored.carry, original.carry)


# -------------------------------------------------------------------------------------------------- config


def test_default_config_is_a_small_token_model():
    config = VMTConfig(vocab_size=65)
    model = VariationalMarkovTransformer(config)
    assert config.posterior == "gaussian" and 0 < config.loss_init_weight < 1
    assert 50_000 < model.num_parameters() < 500_000
    assert VMTConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize(
    "values, match",
    [
        ({}, "give exactly one of vocab_size"),
        ({"vocab_size": 5, "input_dim": 3}, "input_dim=3"),
        ({"vocab_size": 0}, "vocab_size=0"),
        ({"vocab_size": 5, "latent_dim": 0}, "latent_dim=0"),
        ({"vocab_size": 5, "d_model": 30, "n_heads": 4}, "d_model=30"),
        ({"vocab_size": 5, "d_model": 12, "n_heads": 4}, "n_heads=4"),
        ({"vocab_size": 5, "loss_skip_weight": 1.0}, "loss_skip_weight=1.0"),
        ({"vocab_size": 5, "loss_init_weight": -0.1}, "loss_init_weight=-0.1"),
        ({"vocab_size": 5, "skip_length": 1}, "skip_length=1"),
        ({"vocab_size": 5, "posterior": "maf"}, "posterior='maf'"),
        ({"vocab_size": 5, "posterior": "flow", "latent_dim": 1}, "latent_dim=1"),
        ({"vocab_size": 5, "free_bits": -1.0}, "free_bits=-1.0"),
        ({"vocab_size": 5, "free_bits": float("inf")}, "free_bits=inf: must be a finite number"),  # the loss was inf
        ({"vocab_size": 5, "dropout": 1.0}, "dropout=1.0"),
        ({"vocab_size": 5, "dropout": "0.1"}, "dropout='0.1'"),  # a TypeError from comparing a str with 0.0
        ({"vocab_size": 5, "dropout": None}, "dropout=None"),
        ({"vocab_size": 5, "window": 0}, "window=0"),
        ({"vocab_size": 5, "residual_posterior": 1}, "residual_posterior=1: must be true or false"),
        ({"vocab_size": 5, "generative_from_data": "yes"}, "generative_from_data='yes': must be true or false"),
        ({"vocab_size": 5, "generative_from_data": True}, "generative_from_data=True: .* needs input_dim"),
    ],
)
def test_bad_config_values_are_named(values, match):
    with pytest.raises(ValueError, match=match):
        VMTConfig(**values)


def test_bad_inputs_are_named():
    model = tiny_vmt()
    with pytest.raises(ValueError, match="token id 9"):
        model(input_ids=torch.tensor([[1, 9]]))
    with pytest.raises(ValueError, match="pass input_ids"):
        model(input_features=torch.zeros(1, 2, 3))
    with pytest.raises(ValueError, match="carry must be"):
        model(input_ids=torch.tensor([[1, 2]]), carry=torch.zeros(1, 5))
    with pytest.raises(ValueError, match="right-padded"):
        model(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match="all padding"):
        model(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.tensor([[0, 0]]))
    with pytest.raises(ValueError, match="num_samples=0"):
        model.elbo(torch.tensor([[1, 2]]), num_samples=0)
    ids = torch.tensor([[1, 2], [3, 4]])
    with pytest.raises(ValueError, match=r"num_samples=0: must be a positive integer"):
        model.iw_bound(ids, num_samples=0)
    with pytest.raises(ValueError, match=r"chunk_size=0: must be a positive integer"):
        model.iw_bound(ids, num_samples=2, chunk_size=0)
    with pytest.raises(ValueError, match=r"carry_mask must be \(B,\) = \(2,\); got \(3,\)"):
        model(input_ids=ids, carry=torch.zeros(2, 3), carry_mask=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="carry holds NaN or infinite values in a carried row"):
        model(input_ids=ids, carry=torch.tensor([[0.0, 0.0, 0.0], [0.0, math.nan, 0.0]]))
    # a row not carried may hold anything: its carry is never read
    model(input_ids=ids, carry=torch.tensor([[0.0, 0.0, 0.0], [0.0, math.nan, 0.0]]),
          carry_mask=torch.tensor([True, False]))  # fmt: skip
    with pytest.raises(ValueError, match="the VMT generates from unpadded prompts"):
        model.generate(torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[1, 1, 0]]), max_new_tokens=1)
    vectors = tiny_vmt(vocab_size=None, input_dim=2)
    with pytest.raises(ValueError, match=r"this VMT reads real vectors: pass input_features"):
        vectors(input_ids=ids)
    with pytest.raises(ValueError, match=r"input_features must be float \(B, T, 2\); got torch.float32"):
        vectors(input_features=torch.zeros(2, 3, 5))
    with pytest.raises(ValueError, match=r"emission has shape \(3, 3\); this VMT needs \(input_dim, latent_dim\)"):
        vectors.set_linear_gaussian(
            transition=torch.eye(3), transition_bias=torch.zeros(3), transition_std=torch.ones(3),
            emission=torch.zeros(3, 3), emission_bias=torch.zeros(2), emission_std=torch.ones(2),
            initial_mean=torch.zeros(3), initial_std=torch.ones(3),
        )  # fmt: skip


@pytest.mark.parametrize("value", [2, 0.5])
def test_a_mask_value_other_than_0_and_1_is_refused_naming_it(value):
    """It was read as a real token (a row masked 1, 1, 2 scored as one masked 1, 1, 1), and the document walk's
    lengths summed the values (2 counted as two tokens)."""
    from markovformer.models.vmt.documents import walk_documents

    model, ids = tiny_vmt(), torch.tensor([[1, 2, 3]])
    mask = torch.tensor([[1, 1, value]])
    named = f"attention_mask must hold only 0 \\(padding\\) and 1 \\(real token\\); got {value}"
    with pytest.raises(ValueError, match=named):
        model(input_ids=ids, attention_mask=mask)
    with pytest.raises(ValueError, match=named):
        next(walk_documents(model, ids, mask, window=2))  # a generator: checked at its first window
    with pytest.raises(ValueError, match=named):
        model.generate(ids, attention_mask=mask, max_new_tokens=1)
