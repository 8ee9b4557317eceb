"""The tiny VMTs the VMT tests build (test_vmt_*.py, test_vmt_losses_by_hand.py): a token model, one whose posterior
reads the window, and a float64 one whose generative part is a given linear-Gaussian state-space model."""

from __future__ import annotations

import torch

from markovformer.data.synthetic.state_space import LinearGaussianParameters
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig

TINY = dict(latent_dim=3, d_model=16, n_layers=1, n_heads=2, hidden_dim=32, window=8, skip_length=3)


def tiny_vmt(seed: int = 0, **changes) -> VariationalMarkovTransformer:
    torch.manual_seed(seed)
    values = {"vocab_size": 7, **TINY, **changes}
    return VariationalMarkovTransformer(VMTConfig(**values))


def reading_vmt(seed: int = 0, **changes) -> VariationalMarkovTransformer:
    """A tiny VMT whose posterior reads the window: a fresh residual posterior equals the prior and ignores h."""
    model = tiny_vmt(seed, **changes)
    with torch.no_grad():
        for posterior in (model.posterior_init, model.posterior_step):
            torch.nn.init.normal_(posterior.base.from_context.weight, std=0.3)
    return model


def linear_gaussian_vmt(parameters: LinearGaussianParameters, seed: int = 0, **changes) -> VariationalMarkovTransformer:
    """A float64 VMT whose generative part P is exactly ``parameters``; its posterior is untrained."""
    model = tiny_vmt(seed, vocab_size=None, input_dim=parameters.obs_dim, latent_dim=parameters.state_dim,
                     **changes).double()  # fmt: skip
    model.set_linear_gaussian(**parameters.to_dict())
    return model

