"""VMTConfig: every option of the Variational Markov Transformer, validated on construction."""

from __future__ import annotations

import dataclasses
import math
from typing import NoReturn

from markovformer.models.config_base import ModelConfig

POSTERIORS = ("gaussian", "flow")


@dataclasses.dataclass
class VMTConfig(ModelConfig):
    """Configuration of ``VariationalMarkovTransformer``.

    Observations: ``vocab_size`` (token ids, categorical emission) or ``input_dim`` (real vectors, diagonal Gaussian
    emission), exactly one. ``latent_dim``: size of the continuous state x_k. ``d_model``, ``n_layers``,
    ``n_heads``, ``ffn_mult``: the reversed causal Transformer whose output h_k summarises y_{k..n}.
    ``hidden_dim``: width of the one-hidden-layer networks of the prior, transition, emission and posteriors.
    ``window``: the window n a trainer walks documents with and ``generate`` reads prompts with (the model itself
    takes windows of any length).

    Training terms (the text's Algorithm 1), each in nats and weighted by a constant c < 1:
    ``loss_init_weight`` (−log Q(x_1 | h_1) of the x_1 drawn from the carried posterior),
    ``loss_prior_weight`` (−log P(x_k) of every drawn state), ``loss_skip_weight`` (−log Q_skip(x_{k+t} | x_k,
    h_{k+1}, t) with t drawn from 2..``skip_length``; ``skip_length`` 1 turns the skip posterior off).
    ``posterior``: "gaussian" (diagonal) or "flow" (a diagonal Gaussian pushed through ``flow_layers`` conditional
    affine couplings; needs latent_dim >= 2). ``residual_posterior``: Q's Gaussian is an offset from the prior of
    its step (mean_p + Δ, std_p · s; for the flow, its base), starting equal to it (zero KL at initialisation, and
    "nothing new here" costs nothing); False: Q is parameterised on its own. ``free_bits``: nats per token under
    which the KL term of the loss is not pushed down (guards against posterior collapse, with the trainer's KL
    warm-up). ``dropout``: in the encoder. ``generative_from_data``: P is set to the data's own linear-Gaussian
    parameters and frozen, so that training fits the posterior alone (the trainer sets it; needs input_dim).
    """

    model_type = "vmt"

    vocab_size: int | None = None
    input_dim: int | None = None
    latent_dim: int = 16
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    ffn_mult: int = 4
    hidden_dim: int = 128
    window: int = 64
    skip_length: int = 8
    loss_init_weight: float = 0.1
    loss_prior_weight: float = 0.1
    loss_skip_weight: float = 0.1
    posterior: str = "gaussian"
    residual_posterior: bool = True
    flow_layers: int = 4
    free_bits: float = 0.0
    dropout: float = 0.0
    generative_from_data: bool = False

    def __post_init__(self) -> None:
        def fail(field: str, message: str) -> NoReturn:
            raise ValueError(f"VMTConfig.{field}={getattr(self, field)!r}: {message}")

        if (self.vocab_size is None) == (self.input_dim is None):
            fail("vocab_size", f"give exactly one of vocab_size (token ids) and input_dim (real vectors); "
                 f"input_dim={self.input_dim!r}")  # fmt: skip
        for field in ("vocab_size", "input_dim"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                fail(field, "must be a positive integer")
        for field in ("latent_dim", "d_model", "n_layers", "n_heads", "ffn_mult", "hidden_dim", "window",
                      "skip_length", "flow_layers"):  # fmt: skip
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "must be a positive integer")
        if self.d_model % self.n_heads:
            fail("d_model", f"must be divisible by n_heads={self.n_heads}")
        if (self.d_model // self.n_heads) % 2:
            fail("n_heads", f"the encoder's rotary positions need an even head dimension; d_model/n_heads = "
                 f"{self.d_model // self.n_heads}")  # fmt: skip
        for field in ("loss_init_weight", "loss_prior_weight", "loss_skip_weight"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                fail(field, "must lie in [0, 1) (the text's ponderation c < 1)")
        if self.loss_skip_weight > 0 and self.skip_length < 2:
            fail("skip_length", f"Loss_skip needs skip lengths t >= 2; set skip_length >= 2 or loss_skip_weight=0 "
                 f"(it is {self.loss_skip_weight!r})")  # fmt: skip
        if not isinstance(self.residual_posterior, bool):
            fail("residual_posterior", "must be true or false")
        if self.posterior not in POSTERIORS:
            fail("posterior", f"must be one of {POSTERIORS}")
        if self.posterior == "flow" and self.latent_dim < 2:
            fail("latent_dim", "an affine-coupling flow posterior splits the latent in two halves: needs >= 2")
        if (isinstance(self.free_bits, bool) or not isinstance(self.free_bits, (int, float))
                or not 0 <= self.free_bits < math.inf):  # fmt: skip
            fail("free_bits", "must be a finite number >= 0 (nats per token)")
        if (isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float))
                or not 0.0 <= self.dropout < 1.0):  # fmt: skip
            fail("dropout", "must lie in [0, 1)")
        if not isinstance(self.generative_from_data, bool):
            fail("generative_from_data", "must be true or false")
        if self.generative_from_data and self.input_dim is None:
            fail("generative_from_data", "the data's generative parameters are linear-Gaussian: needs input_dim")
