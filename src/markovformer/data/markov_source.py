"""Sequences from a Markov chain, as an endless training stream and a fixed evaluation set."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import IterableDataset

from markovformer.markov import MarkovChain


def chain_batch(chain: MarkovChain, batch: int, length: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """One batch for next-token training. The first ``order`` targets have no full context, so their labels are
    -100 (ignored): the loss is then directly comparable with the chain's entropy rate."""
    input_ids = chain.sample(batch, length, generator=generator)
    labels = input_ids.clone()
    labels[:, : chain.order] = -100
    return {"input_ids": input_ids, "labels": labels}


class ChainStream(IterableDataset):
    """Endless batches sampled afresh from ``chain``; reproducible from ``seed`` (each worker gets its own stream)."""

    def __init__(self, chain: MarkovChain, batch_size: int, seq_len: int, seed: int) -> None:
        super().__init__()
        self.chain, self.batch_size, self.seq_len, self.seed = chain, batch_size, seq_len, seed

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        info = torch.utils.data.get_worker_info()
        generator = torch.Generator().manual_seed(self.seed * 1009 + (info.id if info else 0))
        while True:
            yield chain_batch(self.chain, self.batch_size, self.seq_len, generator)


def chain_eval_batches(
    chain: MarkovChain, num_sequences: int, seq_len: int, seed: int, batch_size: int = 64
) -> list[dict[str, torch.Tensor]]:
    """A fixed evaluation set drawn with its own seed (never the training stream's)."""
    generator = torch.Generator().manual_seed(seed)
    sizes = [min(batch_size, num_sequences - start) for start in range(0, num_sequences, batch_size)]
    return [chain_batch(chain, size, seq_len, generator) for size in sizes]
