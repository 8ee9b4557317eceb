"""Long-memory sources with an exact likelihood: a linear-Gaussian state-space model (Kalman filter) and a sticky
hidden Markov model (forward algorithm).

Their hidden state persists across any window a model reads, so a model that carries a state from window to
window (the VMT's truncated BPTT) can reach the exact per-step log-likelihood, while a model restarted at every
window cannot. Each has a parameter set with ``sample`` and an exact ``log_likelihood`` (per step, conditional on
everything before), and a data-source dataclass whose ``build(seed)`` returns long documents as a DataBundle with
the exact validation and test likelihood in ``info["reference"]``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from markovformer.data.bundle import DataBundle, Split, stacked
from markovformer.data.splits import generated_splits

LOG_2PI = math.log(2 * math.pi)


@dataclasses.dataclass
class LinearGaussianParameters:
    """x_1 ~ N(initial_mean, diag initial_std²); x_{k+1} = A x_k + b + N(0, diag transition_std²);
    y_k = C x_k + d + N(0, diag emission_std²). Shapes: A (dx, dx), b and both state stds (dx,), C (dy, dx),
    d and emission_std (dy,). Diagonal noise matches the VMT's diagonal Gaussians, so a VMT can hold these exactly."""

    transition: Tensor
    transition_bias: Tensor
    transition_std: Tensor
    emission: Tensor
    emission_bias: Tensor
    emission_std: Tensor
    initial_mean: Tensor
    initial_std: Tensor

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, torch.as_tensor(getattr(self, field.name), dtype=torch.float64))
        dx, dy = self.state_dim, self.obs_dim
        expected = {"transition": (dx, dx), "transition_bias": (dx,), "transition_std": (dx,),
                    "emission": (dy, dx), "emission_bias": (dy,), "emission_std": (dy,), "initial_mean": (dx,),
                    "initial_std": (dx,)}  # fmt: skip
        for name, shape in expected.items():
            if tuple(getattr(self, name).shape) != shape:
                raise ValueError(f"LinearGaussianParameters.{name} has shape {tuple(getattr(self, name).shape)}; "
                                 f"expected {shape}")  # fmt: skip
        for name in ("transition_std", "emission_std", "initial_std"):
            if not bool((getattr(self, name) > 0).all()):
                raise ValueError(f"LinearGaussianParameters.{name}={getattr(self, name).tolist()}: must be positive")

    @property
    def state_dim(self) -> int:
        return self.transition.shape[0]

    @property
    def obs_dim(self) -> int:
        return self.emission.shape[0]

    def to_dict(self) -> dict[str, list]:
        """JSON-able values (nested lists); ``LinearGaussianParameters(**d)`` reads them back."""
        return {field.name: getattr(self, field.name).tolist() for field in dataclasses.fields(self)}

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """States (B, T, dx) and observations (B, T, dy), float64."""
        dx, dy = self.state_dim, self.obs_dim
        state_noise = torch.randn(batch, length, dx, generator=generator, dtype=torch.float64)
        obs_noise = torch.randn(batch, length, dy, generator=generator, dtype=torch.float64)
        states = [self.initial_mean + self.initial_std * state_noise[:, 0]]
        for k in range(1, length):
            states.append(
                states[-1] @ self.transition.T + self.transition_bias + self.transition_std * state_noise[:, k]
            )
        x = torch.stack(states, dim=1)
        return x, x @ self.emission.T + self.emission_bias + self.emission_std * obs_noise

    def log_likelihood(self, observations: Tensor) -> Tensor:
        """Exact log p(y_k | y_{<k}) per step by the Kalman filter: observations (B, T, dy) -> (B, T) nats, float64.
        Their sum over T is log p(y_{1:T})."""
        return kalman_log_likelihood(self, observations)

    def entropy_rate(self, tolerance: float = 1e-12, max_steps: int = 100_000) -> float:
        """The limit of the per-step negative log-likelihood, ½ log det(2πe S∞), with S∞ the steady-state innovation
        covariance of the Kalman filter (iterated to convergence); the long-document floor in nats per step."""
        A, C = self.transition, self.emission
        Q, R = torch.diag(self.transition_std**2), torch.diag(self.emission_std**2)
        P = torch.diag(self.initial_std**2)
        for _ in range(max_steps):
            S = C @ P @ C.T + R
            gain = P @ C.T @ torch.linalg.inv(S)
            new = A @ (P - gain @ C @ P) @ A.T + Q
            if float((new - P).abs().max()) < tolerance:
                P = new
                break
            P = new
        S = C @ P @ C.T + R
        return 0.5 * (self.obs_dim * (LOG_2PI + 1.0) + float(torch.logdet(S)))


def kalman_log_likelihood(parameters: LinearGaussianParameters, observations: Tensor) -> Tensor:
    """log p(y_k | y_{<k}) for every step of every row: observations (B, T, dy) -> (B, T), float64 nats.

    The predictive mean m and covariance P of x_k given y_{<k}; y_k | y_{<k} ~ N(C m + d, S = C P Cᵀ + R). The
    update uses the Joseph form, which keeps P symmetric positive definite over thousands of steps.
    """
    y = torch.as_tensor(observations, dtype=torch.float64)
    if y.dim() != 3 or y.shape[-1] != parameters.obs_dim:
        raise ValueError(f"observations must be (B, T, {parameters.obs_dim}); got shape {tuple(y.shape)}")
    A, C, d = parameters.transition, parameters.emission, parameters.emission_bias
    Q, R = torch.diag(parameters.transition_std**2), torch.diag(parameters.emission_std**2)
    identity = torch.eye(parameters.state_dim, dtype=torch.float64)
    mean = parameters.initial_mean.expand(y.shape[0], -1)
    cov = torch.diag(parameters.initial_std**2)
    steps = []
    for k in range(y.shape[1]):
        S = C @ cov @ C.T + R
        chol = torch.linalg.cholesky(S)
        residual = y[:, k] - (mean @ C.T + d)  # (B, dy)
        whitened = torch.linalg.solve_triangular(chol, residual.T, upper=False).T
        log_det = 2 * torch.log(torch.diagonal(chol)).sum()
        steps.append(-0.5 * ((whitened**2).sum(-1) + log_det + parameters.obs_dim * LOG_2PI))
        gain = torch.cholesky_solve(C @ cov, chol).T  # P Cᵀ S⁻¹, (dx, dy)
        mean = mean + residual @ gain.T
        keep = identity - gain @ C
        cov = keep @ cov @ keep.T + gain @ R @ gain.T
        mean = mean @ A.T + parameters.transition_bias
        cov = A @ cov @ A.T + Q
    return torch.stack(steps, dim=1)


@dataclasses.dataclass
class HiddenMarkovParameters:
    """A discrete HMM: z_1 ~ initial (K,), z_{k+1} ~ transition[z_k] (K, K), y_k ~ emission[z_k] (K, V)."""

    initial: Tensor
    transition: Tensor
    emission: Tensor

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            setattr(self, field.name, torch.as_tensor(getattr(self, field.name), dtype=torch.float64))
        K = self.initial.shape[0]
        if self.initial.dim() != 1 or tuple(self.transition.shape) != (K, K) or self.emission.dim() != 2 or (
                self.emission.shape[0] != K):  # fmt: skip
            raise ValueError(f"HiddenMarkovParameters: initial (K,), transition (K, K), emission (K, V); got shapes "
                             f"{tuple(self.initial.shape)}, {tuple(self.transition.shape)}, "
                             f"{tuple(self.emission.shape)}")  # fmt: skip
        for name in ("initial", "transition", "emission"):
            rows = getattr(self, name)
            if bool((rows < 0).any()) or not torch.allclose(rows.sum(-1), torch.ones((), dtype=rows.dtype), atol=1e-9):
                raise ValueError(f"HiddenMarkovParameters.{name}: every row must be a probability vector")

    @property
    def num_states(self) -> int:
        return self.initial.shape[0]

    @property
    def num_symbols(self) -> int:
        return self.emission.shape[1]

    def to_dict(self) -> dict[str, list]:
        return {field.name: getattr(self, field.name).tolist() for field in dataclasses.fields(self)}

    def sample(self, batch: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """Hidden states and symbols, both (B, T) long, by inverse-CDF draws (one uniform per draw)."""
        uniforms = torch.rand(batch, length, 2, generator=generator, dtype=torch.float64)

        def draw(probabilities: Tensor, u: Tensor) -> Tensor:
            cdf = probabilities.cumsum(-1)
            return torch.searchsorted(cdf, u[..., None].contiguous()).squeeze(-1).clamp_max(probabilities.shape[-1] - 1)

        states = [draw(self.initial.expand(batch, -1), uniforms[:, 0, 0])]
        for k in range(1, length):
            states.append(draw(self.transition[states[-1]], uniforms[:, k, 0]))
        z = torch.stack(states, dim=1)
        return z, draw(self.emission[z], uniforms[..., 1])

    def log_likelihood(self, tokens: Tensor) -> Tensor:
        """Exact log p(y_k | y_{<k}) per step by the forward algorithm: tokens (B, T) -> (B, T) nats, float64."""
        return forward_log_likelihood(self, tokens)


def forward_log_likelihood(parameters: HiddenMarkovParameters, tokens: Tensor) -> Tensor:
    """log p(y_k | y_{<k}) for every step: tokens (B, T) long -> (B, T) float64 nats (scaled forward recursion:
    the filtered state distribution is renormalised every step, its normaliser is the step's likelihood)."""
    tokens = torch.as_tensor(tokens)
    if tokens.dim() != 2 or tokens.is_floating_point():
        raise ValueError(f"tokens must be (B, T) integer ids; got {tokens.dtype} {tuple(tokens.shape)}")
    if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= parameters.num_symbols):
        raise ValueError(f"tokens hold ids outside [0, {parameters.num_symbols})")
    predicted = parameters.initial.expand(tokens.shape[0], -1)  # P(z_k | y_{<k}), (B, K)
    steps = []
    for k in range(tokens.shape[1]):
        joint = predicted * parameters.emission[:, tokens[:, k]].T  # P(z_k, y_k | y_{<k})
        evidence = joint.sum(-1)
        steps.append(torch.log(evidence))
        predicted = (joint / evidence[:, None]) @ parameters.transition
    return torch.stack(steps, dim=1)


def sticky_hmm(
    num_states: int, num_symbols: int, stay: float, concentration: float, seed: int
) -> HiddenMarkovParameters:
    """K states that stay put with probability ``stay`` (else jump uniformly to another): mean dwell 1/(1 - stay)
    steps, uniform stationary distribution (the start). Emission rows ~ Dirichlet(``concentration``), drawn once."""
    if num_states < 2:
        raise ValueError(f"num_states={num_states!r}: a sticky HMM needs at least 2 states")
    if not 0.0 <= stay < 1.0:
        raise ValueError(f"stay={stay!r}: must lie in [0, 1)")
    # numpy's Dirichlet takes an explicit seeded generator; torch.distributions would read the global RNG
    rows = np.random.default_rng(seed).dirichlet(np.full(num_symbols, float(concentration)), size=num_states)
    weights = torch.as_tensor(rows, dtype=torch.float64).clamp_min(1e-12)
    emission = weights / weights.sum(-1, keepdim=True)
    transition = torch.full((num_states, num_states), (1 - stay) / (num_states - 1), dtype=torch.float64)
    transition.fill_diagonal_(stay)
    initial = torch.full((num_states,), 1.0 / num_states, dtype=torch.float64)
    return HiddenMarkovParameters(initial, transition, emission)


def random_linear_gaussian(seed: int, state_dim: int = 2, obs_dim: int = 2) -> LinearGaussianParameters:
    """Random parameters drawn from ``seed``: a stable transition (spectral norm 0.9), non-zero biases, standard
    deviations bounded away from 0 (for testing likelihoods and bounds on models that are not special cases)."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator, dtype=torch.float64)

    A = normal(state_dim, state_dim)
    return LinearGaussianParameters(
        transition=0.9 * A / torch.linalg.matrix_norm(A, ord=2), transition_bias=0.3 * normal(state_dim),
        transition_std=0.2 + 0.6 * uniform(state_dim), emission=normal(obs_dim, state_dim),
        emission_bias=0.3 * normal(obs_dim), emission_std=0.3 + 0.5 * uniform(obs_dim),
        initial_mean=normal(state_dim), initial_std=0.5 + uniform(state_dim),
    )  # fmt: skip


def rotating_linear_gaussian(
    state_dim: int, obs_dim: int, decay: float, rotation: float, process_std: float, obs_std: float, seed: int
) -> LinearGaussianParameters:
    """A = decay · (block-diagonal rotations by ``rotation``·(1, 2, ...) radians; a lone last coordinate only decays),
    Q = process_std² I, C ~ N(0, 1/dx) drawn once from ``seed``, R = obs_std² I, zero biases. Because the rotation is
    orthogonal the stationary covariance is process_std² / (1 - decay²) · I, and x_1 starts in it: every window of a
    document looks alike, and the state remembers about 1 / (1 - decay) steps."""
    if not 0.0 <= decay < 1.0:
        raise ValueError(f"decay={decay!r}: must lie in [0, 1) for a stationary process")
    A = torch.zeros(state_dim, state_dim, dtype=torch.float64)
    for block in range(state_dim // 2):
        angle = rotation * (block + 1)
        c, s = math.cos(angle), math.sin(angle)
        A[2 * block : 2 * block + 2, 2 * block : 2 * block + 2] = torch.tensor([[c, -s], [s, c]])
    if state_dim % 2:
        A[-1, -1] = 1.0
    generator = torch.Generator().manual_seed(seed)
    C = torch.randn(obs_dim, state_dim, generator=generator, dtype=torch.float64) / math.sqrt(state_dim)
    stationary = process_std / math.sqrt(1 - decay**2)
    return LinearGaussianParameters(
        transition=decay * A, transition_bias=torch.zeros(state_dim),
        transition_std=torch.full((state_dim,), process_std), emission=C, emission_bias=torch.zeros(obs_dim),
        emission_std=torch.full((obs_dim,), obs_std),
        initial_mean=torch.zeros(state_dim), initial_std=torch.full((state_dim,), stationary),
    )  # fmt: skip


def _check_counts(source: object, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(source, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"data.{name}={value!r} must be a positive integer")


_DOCUMENT_COUNTS = ("doc_len", "train_documents", "val_documents", "test_documents")


@dataclasses.dataclass
class LinearGaussianSource:
    """Long documents of a stationary linear-Gaussian state-space model, each step an observation vector of obs_dim
    numbers. The data carries the exact log-likelihood per step of the validation and test documents (Kalman filter
    over each whole document, on the float32 values the model sees) and the entropy rate, as references for the
    model's bounds."""

    feeds: ClassVar[tuple[str, ...]] = ("vmt",)

    # Built by ``rotating_linear_gaussian``; info["reference"] holds the references, info["parameters"] the true
    # parameters (``LinearGaussianParameters(**...)``). The docstring above is `markovformer data show`'s text.

    state_dim: int = 2
    obs_dim: int = 1
    decay: float = 0.97
    rotation: float = 0.2
    process_std: float = 0.3
    obs_std: float = 0.5
    model_seed: int = 0
    doc_len: int = 512
    train_documents: int = 64
    val_documents: int = 8
    test_documents: int = 8

    def __post_init__(self) -> None:
        _check_counts(self, ("state_dim", "obs_dim", *_DOCUMENT_COUNTS))
        for name in ("process_std", "obs_std"):
            if not getattr(self, name) > 0:
                raise ValueError(f"data.{name}={getattr(self, name)!r} must be positive")
        if not 0.0 <= self.decay < 1.0:
            raise ValueError(f"data.decay={self.decay!r} must lie in [0, 1)")

    def parameters(self) -> LinearGaussianParameters:
        return rotating_linear_gaussian(self.state_dim, self.obs_dim, self.decay, self.rotation, self.process_std,
                                        self.obs_std, self.model_seed)  # fmt: skip

    def build(self, seed: int) -> DataBundle:
        parameters = self.parameters()

        def make_split(count: int, generator: torch.Generator) -> list[dict[str, Tensor]]:
            observations = parameters.sample(count, self.doc_len, generator)[1].float()
            return [{"input_features": document} for document in observations]

        counts = {"train": self.train_documents, "val": self.val_documents, "test": self.test_documents}
        splits, seeds = generated_splits(counts, seed, make_split)

        def exact_log_likelihood(name: str, split: Split) -> dict:
            documents = stacked(split, "input_features").double()
            return {f"{name}_log_likelihood_per_step": float(parameters.log_likelihood(documents).mean())}

        reference = {"entropy_rate": parameters.entropy_rate(), **exact_log_likelihood("val", splits["val"]),
                     **exact_log_likelihood("test", splits["test"])}  # fmt: skip
        return DataBundle(
            train=splits["train"], val=splits["val"], test=splits["test"],
            info={"input_dim": self.obs_dim, "reference": reference, "parameters": parameters.to_dict()},
            splits={"generator_seeds": seeds}, reference_of=exact_log_likelihood,
        )  # fmt: skip


@dataclasses.dataclass
class StickyHMMSource:
    """Long documents of a sticky hidden Markov model over the symbols 0..num_symbols-1.

    The hidden state lasts 1 / (1 - stay) steps on average, longer than a short window, so reading the state from
    the window alone costs likelihood. The data carries the exact log-likelihood per token of the validation and
    test documents (forward algorithm over each whole document) and the marginal symbol entropy (a model that
    ignores all context), as references for the model's bounds."""

    feeds: ClassVar[tuple[str, ...]] = ("vmt",)

    # Built by ``sticky_hmm`` as input_ids (T,); info["reference"] holds the references, info["parameters"] the true
    # parameters. The docstring above is `markovformer data show`'s text.

    num_states: int = 4
    num_symbols: int = 16
    stay: float = 0.98
    concentration: float = 0.3
    model_seed: int = 0
    doc_len: int = 1024
    train_documents: int = 64
    val_documents: int = 8
    test_documents: int = 8

    def __post_init__(self) -> None:
        _check_counts(self, ("num_states", "num_symbols", *_DOCUMENT_COUNTS))
        if self.num_states < 2:
            raise ValueError(f"data.num_states={self.num_states!r} must be >= 2")
        if not 0.0 <= self.stay < 1.0:
            raise ValueError(f"data.stay={self.stay!r} must lie in [0, 1)")
        if not self.concentration > 0:
            raise ValueError(f"data.concentration={self.concentration!r} must be positive")

    def parameters(self) -> HiddenMarkovParameters:
        return sticky_hmm(self.num_states, self.num_symbols, self.stay, self.concentration, self.model_seed)

    def build(self, seed: int) -> DataBundle:
        parameters = self.parameters()

        def make_split(count: int, generator: torch.Generator) -> list[dict[str, Tensor]]:
            return [{"input_ids": document} for document in parameters.sample(count, self.doc_len, generator)[1]]

        counts = {"train": self.train_documents, "val": self.val_documents, "test": self.test_documents}
        splits, seeds = generated_splits(counts, seed, make_split)
        marginal = parameters.initial @ parameters.emission

        def exact_log_likelihood(name: str, split: Split) -> dict:
            documents = stacked(split, "input_ids")
            return {f"{name}_log_likelihood_per_token": float(parameters.log_likelihood(documents).mean())}

        reference = {"marginal_entropy": float(-(marginal * marginal.log()).sum()),
                     **exact_log_likelihood("val", splits["val"]), **exact_log_likelihood("test", splits["test"])}
        return DataBundle(
            train=splits["train"], val=splits["val"], test=splits["test"],
            info={"vocab_size": self.num_symbols, "reference": reference, "parameters": parameters.to_dict()},
            splits={"generator_seeds": seeds}, reference_of=exact_log_likelihood,
        )  # fmt: skip


__all__ = ["HiddenMarkovParameters", "LinearGaussianParameters", "LinearGaussianSource", "StickyHMMSource",
           "forward_log_likelihood", "kalman_log_likelihood", "random_linear_gaussian", "rotating_linear_gaussian",
           "sticky_hmm"]  # fmt: skip
