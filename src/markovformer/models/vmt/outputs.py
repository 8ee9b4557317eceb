"""What the VMT's methods return: the ELBO of a batch of windows, the importance-weighted bound, the training
output, and the sampled paths they are computed from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from torch import Tensor

from markovformer.models.pretrained import model_output


@dataclass
class VMTElbo:
    """The ELBO of a batch of windows. Scalars are nats per real token (sums over real tokens of the batch, divided
    by their number, averaged over posterior samples); ``*_terms`` are per position (B, T), 0 at padding."""

    elbo: Tensor  # reconstruction − kl
    reconstruction: Tensor  # E_Q log P(y_k | x_k)
    kl: Tensor  # E_Q KL(Q(x_k | x_{k-1}, h_k) || P(x_k | x_{k-1})); closed form for "gaussian", sampled for "flow"
    loss_init: Tensor  # −log Q(x_1 | h_1) of the carried x_1, per window (0 without a carry)
    loss_prior: Tensor  # −log P(x_k) per real token
    loss_skip: Tensor  # −log Q_skip(x_{k+t} | x_k, h_{k+1}, t) per scored pair (0 when none)
    carry: Tensor  # (B, latent_dim): the carried latent of sample 0, detached
    latents: Tensor  # (S, B, T, latent_dim): the drawn paths (values past a row's length are unused)
    elbo_terms: Tensor
    reconstruction_terms: Tensor
    kl_terms: Tensor
    num_tokens: int


@dataclass
class VMTBound:
    """The importance-weighted bound log (1/K) Σ_s P(y, x^s) / Q(x^s | y) of a batch of windows."""

    per_token: Tensor  # nats per real token over the batch
    per_sequence: Tensor  # (B,) nats: the bound of each row's window
    carry: Tensor  # (K, B, latent_dim): each path's final latent resampled in proportion to the weights, detached
    num_tokens: int


@model_output
class VMTOutput:
    """What ``VariationalMarkovTransformer.forward`` returns: ``loss``, the training objective per token in nats, to
    minimise (its formula is ``forward``'s docstring); ``elbo``, ``reconstruction``, ``kl`` and the auxiliary terms
    ``loss_*`` as ``VMTElbo`` gives them; ``carry`` (B, latent_dim), detached: the next window's ``carry``."""

    loss: Tensor  # the training objective per token, to minimise (see ``forward``)
    elbo: Tensor
    reconstruction: Tensor
    kl: Tensor
    loss_init: Tensor
    loss_prior: Tensor
    loss_skip: Tensor
    carry: Tensor  # (B, latent_dim), detached


class SampledPaths(NamedTuple):
    """Sampled latent paths and their per-position log densities, (S, B, T) each, 0 at padding."""

    latents: Tensor  # (S, B, T, dx)
    log_q: Tensor
    log_p_x: Tensor  # log P(x_k | x_{k-1}) (P(x_1) without a carry)
    kl: Tensor
    reconstruction: Tensor  # log P(y_k | x_k)
