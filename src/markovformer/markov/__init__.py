"""Markov chains, estimators and the exact quantities of the theory; imports only torch and numpy."""

from markovformer.markov.chains import MarkovChain, dirichlet_kernels, lagged_chain, random_chain, switching_chain
from markovformer.markov.estimators import add_beta_loss, add_beta_predict
from markovformer.markov.fitting import OrderSelection, fit_chain, select_order
from markovformer.markov.icl import RandomChainSampler, sample_from_kernels
from markovformer.markov.icl import oracle_loss as icl_oracle_loss
from markovformer.markov.reduced_model import (
    basin_boundary,
    energy,
    gradient_flow,
    optimal_bias,
    reaches_global_minimum,
    reduced_gradient,
    reduced_loss,
    saddle_energy,
    saddle_point,
    unigram_bias,
)

__all__ = [
    "MarkovChain",
    "OrderSelection",
    "RandomChainSampler",
    "add_beta_loss",
    "add_beta_predict",
    "basin_boundary",
    "energy",
    "fit_chain",
    "dirichlet_kernels",
    "gradient_flow",
    "icl_oracle_loss",
    "lagged_chain",
    "optimal_bias",
    "random_chain",
    "reaches_global_minimum",
    "reduced_gradient",
    "reduced_loss",
    "saddle_energy",
    "saddle_point",
    "select_order",
    "sample_from_kernels",
    "switching_chain",
    "unigram_bias",
]
