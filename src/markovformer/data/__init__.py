"""Datasets and loaders (torch and numpy only)."""

from markovformer.data.markov_source import ChainStream, chain_batch, chain_eval_batches

__all__ = ["ChainStream", "chain_batch", "chain_eval_batches"]
