"""Markov chains, estimators and the exact quantities of the theory (SPEC 6); imports only torch and numpy."""

from markovformer.markov.chains import MarkovChain, lagged_chain, random_chain, switching_chain

__all__ = ["MarkovChain", "lagged_chain", "random_chain", "switching_chain"]
