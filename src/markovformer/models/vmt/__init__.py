"""The Variational Markov Transformer: config, the model (ELBO, importance-weighted bound, generation)."""

from markovformer.models.vmt.config import POSTERIORS, VMTConfig
from markovformer.models.vmt.modeling import VariationalMarkovTransformer, reverse_within_lengths
from markovformer.models.vmt.outputs import VMTBound, VMTElbo, VMTOutput

__all__ = ["POSTERIORS", "VMTBound", "VMTConfig", "VMTElbo", "VMTOutput", "VariationalMarkovTransformer",
           "reverse_within_lengths"]  # fmt: skip
