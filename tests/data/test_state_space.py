"""The long-memory sources: the Kalman filter and the forward algorithm against brute force, the samplers against
their parameters, and the data sources' documents and references."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.distributions import MultivariateNormal

from markovformer.data.synthetic.state_space import (
    HiddenMarkovParameters,
    LinearGaussianParameters,
    LinearGaussianSource,
    StickyHMMSource,
    forward_log_likelihood,
    kalman_log_likelihood,
    random_linear_gaussian,
    rotating_linear_gaussian,
    sticky_hmm,
)


def joint_observation_gaussian(parameters: LinearGaussianParameters, length: int) -> MultivariateNormal:
    """The exact joint law of y_1..y_n (flattened, n·dy) built without any filtering: every state and observation
    is an affine function μ + M z of the standard-normal noises z = (x_1 noise, w_1..w_{n-1}, v_1..v_n)."""
    dx, dy = parameters.state_dim, parameters.obs_dim
    noises = length * dx + length * dy
    state_mean = parameters.initial_mean.clone()
    state_map = torch.zeros(dx, noises, dtype=torch.float64)
    state_map[:, :dx] = torch.diag(parameters.initial_std)
    means, maps = [], []
    for k in range(length):
        if k > 0:
            state_mean = parameters.transition @ state_mean + parameters.transition_bias
            state_map = parameters.transition @ state_map
            state_map[:, k * dx : (k + 1) * dx] += torch.diag(parameters.transition_std)
        obs_map = parameters.emission @ state_map
        obs_map[:, length * dx + k * dy : length * dx + (k + 1) * dy] += torch.diag(parameters.emission_std)
        means.append(parameters.emission @ state_mean + parameters.emission_bias)
        maps.append(obs_map)
    mean, linear = torch.cat(means), torch.cat(maps)
    return MultivariateNormal(mean, covariance_matrix=linear @ linear.T)


@pytest.mark.parametrize("seed, state_dim, obs_dim", [(0, 2, 2), (1, 3, 1), (2, 1, 2)])
def test_kalman_log_likelihood_equals_brute_force_gaussian_integration(seed, state_dim, obs_dim):
    parameters = random_linear_gaussian(seed, state_dim, obs_dim)
    length = 5
    observations = parameters.sample(3, length, torch.Generator().manual_seed(seed))[1]
    per_step = kalman_log_likelihood(parameters, observations)
    assert per_step.shape == (3, length)
    # every prefix: Σ_{k<=m} log p(y_k | y_<k) = log p(y_1..y_m), the joint Gaussian's marginal density
    for m in range(1, length + 1):
        joint = joint_observation_gaussian(parameters, m)
        exact = joint.log_prob(observations[:, :m].reshape(3, -1))
        torch.testing.assert_close(per_step[:, :m].sum(-1), exact, rtol=1e-9, atol=1e-9)


def test_kalman_rejects_observations_of_the_wrong_size():
    with pytest.raises(ValueError, match=r"\(B, T, 2\)"):
        kalman_log_likelihood(random_linear_gaussian(0), torch.zeros(1, 4, 3))


def test_linear_gaussian_sampler_follows_its_parameters():
    parameters = random_linear_gaussian(3)
    states, observations = parameters.sample(4000, 3, torch.Generator().manual_seed(0))
    torch.testing.assert_close(states[:, 0].mean(0), parameters.initial_mean, atol=0.06, rtol=0)
    torch.testing.assert_close(states[:, 0].std(0), parameters.initial_std, atol=0.05, rtol=0)
    step = states[:, 1:] - (states[:, :-1] @ parameters.transition.T + parameters.transition_bias)
    torch.testing.assert_close(step.mean((0, 1)), torch.zeros(2, dtype=torch.float64), atol=0.03, rtol=0)
    torch.testing.assert_close(step.std((0, 1)), parameters.transition_std, atol=0.03, rtol=0)
    noise = observations - (states @ parameters.emission.T + parameters.emission_bias)
    torch.testing.assert_close(noise.std((0, 1)), parameters.emission_std, atol=0.03, rtol=0)


def test_entropy_rate_is_the_long_run_negative_log_likelihood_per_step():
    parameters = rotating_linear_gaussian(2, 1, decay=0.9, rotation=0.3, process_std=0.3, obs_std=0.5, seed=1)
    observations = parameters.sample(4000, 60, torch.Generator().manual_seed(0))[1]
    late = -parameters.log_likelihood(observations)[:, -1]  # the filter has converged by step 60
    assert float(late.mean()) == pytest.approx(parameters.entropy_rate(), abs=4 * float(late.std()) / math.sqrt(4000))


def test_rotating_model_starts_in_its_stationary_covariance():
    parameters = rotating_linear_gaussian(3, 2, decay=0.95, rotation=0.2, process_std=0.4, obs_std=0.5, seed=0)
    P = torch.diag(parameters.initial_std**2)
    A, Q = parameters.transition, torch.diag(parameters.transition_std**2)
    torch.testing.assert_close(A @ P @ A.T + Q, P)


def test_forward_algorithm_equals_brute_force_enumeration():
    generator = torch.Generator().manual_seed(0)

    def rows(*shape: int) -> torch.Tensor:
        weights = torch.rand(*shape, generator=generator, dtype=torch.float64) + 0.05
        return weights / weights.sum(-1, keepdim=True)

    parameters = HiddenMarkovParameters(rows(3), rows(3, 3), rows(3, 4))
    tokens = torch.randint(0, 4, (5, 4), generator=generator)
    per_step = forward_log_likelihood(parameters, tokens)
    for row in range(tokens.shape[0]):
        for m in range(1, tokens.shape[1] + 1):
            total = 0.0
            for path in itertools.product(range(3), repeat=m):
                probability = parameters.initial[path[0]] * parameters.emission[path[0], tokens[row, 0]]
                for k in range(1, m):
                    probability = probability * parameters.transition[path[k - 1], path[k]]
                    probability = probability * parameters.emission[path[k], tokens[row, k]]
                total += float(probability)
            assert float(per_step[row, :m].sum()) == pytest.approx(math.log(total), rel=1e-10)


def test_sticky_hmm_and_its_sampler():
    parameters = sticky_hmm(num_states=3, num_symbols=5, stay=0.9, concentration=0.5, seed=0)
    torch.testing.assert_close(torch.diagonal(parameters.transition), torch.full((3,), 0.9, dtype=torch.float64))
    torch.testing.assert_close(parameters.initial @ parameters.transition, parameters.initial)  # stationary start
    states, tokens = parameters.sample(200, 200, torch.Generator().manual_seed(1))
    stayed = (states[:, 1:] == states[:, :-1]).double().mean()
    assert float(stayed) == pytest.approx(0.9, abs=0.005)
    for state in range(3):
        counts = torch.bincount(tokens[states == state], minlength=5).double()
        torch.testing.assert_close(counts / counts.sum(), parameters.emission[state], atol=0.01, rtol=0)
    assert torch.equal(sticky_hmm(3, 5, 0.9, 0.5, seed=0).emission, parameters.emission)
    assert not torch.equal(sticky_hmm(3, 5, 0.9, 0.5, seed=1).emission, parameters.emission)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: sticky_hmm(1, 4, 0.9, 0.5, 0), "num_states=1"),
        (lambda: sticky_hmm(3, 4, 1.5, 0.5, 0), "stay=1.5"),
        (lambda: HiddenMarkovParameters([0.5, 0.6], [[1, 0], [0, 1]], [[1.0], [1.0]]), "initial"),
        (lambda: LinearGaussianSource(process_std=-1.0), "process_std=-1.0"),
        (lambda: LinearGaussianSource(decay=1.0), "decay=1.0"),
        (lambda: LinearGaussianSource(doc_len=0), "doc_len=0"),
        (lambda: StickyHMMSource(stay=1.0), "stay=1.0"),
        (lambda: StickyHMMSource(num_states=1), "num_states=1"),
        (lambda: StickyHMMSource(concentration=0.0), "concentration=0.0"),
    ],
)
def test_bad_options_are_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_linear_gaussian_source_builds_documents_with_their_exact_likelihood():
    source = LinearGaussianSource(doc_len=40, train_documents=5, val_documents=3, test_documents=2)
    bundle = source.build(seed=4)
    assert [len(bundle.train), len(bundle.val), len(bundle.test)] == [5, 3, 2]
    assert (
        bundle.train[0]["input_features"].shape == (40, 1) and bundle.train[0]["input_features"].dtype == torch.float32
    )
    assert bundle.info["input_dim"] == 1
    parameters = LinearGaussianParameters(**bundle.info["parameters"])
    for name in ("val", "test"):
        documents = torch.stack([example["input_features"] for example in getattr(bundle, name)]).double()
        expected = float(parameters.log_likelihood(documents).mean())
        assert bundle.info["reference"][f"{name}_log_likelihood_per_step"] == pytest.approx(expected, rel=1e-12)
    assert bundle.info["reference"]["entropy_rate"] == pytest.approx(parameters.entropy_rate())
    again = source.build(seed=4)
    assert torch.equal(again.val[0]["input_features"], bundle.val[0]["input_features"])
    assert not torch.equal(source.build(seed=5).val[0]["input_features"], bundle.val[0]["input_features"])
    assert not torch.equal(bundle.train[0]["input_features"], bundle.val[0]["input_features"])


def test_sticky_hmm_source_builds_documents_with_their_exact_likelihood():
    source = StickyHMMSource(num_states=3, num_symbols=6, doc_len=50, train_documents=4, val_documents=3,
                             test_documents=2)  # fmt: skip
    bundle = source.build(seed=0)
    assert bundle.info["vocab_size"] == 6 and bundle.val[0]["input_ids"].shape == (50,)
    assert bundle.val[0]["input_ids"].dtype == torch.long
    parameters = HiddenMarkovParameters(**bundle.info["parameters"])
    documents = torch.stack([example["input_ids"] for example in bundle.val])
    expected = float(parameters.log_likelihood(documents).mean())
    assert bundle.info["reference"]["val_log_likelihood_per_token"] == pytest.approx(expected, rel=1e-12)
    marginal = parameters.initial @ parameters.emission
    assert bundle.info["reference"]["marginal_entropy"] == pytest.approx(float(-(marginal * marginal.log()).sum()))
    # the state persists: the exact likelihood beats the context-free marginal by a clear margin
    assert -expected < bundle.info["reference"]["marginal_entropy"] - 0.1
