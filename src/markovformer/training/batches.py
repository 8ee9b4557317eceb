"""Training batches as a pure function of (seed, step, rank): a resumed run continues exactly where it stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import IterableDataset


def world() -> tuple[int, int]:
    """(rank, world size) of the current process group, or (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class EpochBatches(IterableDataset):
    """Endless training batches. Epoch e visits the examples in a permutation seeded by (seed, e); global batch i
    takes the i-th slice of ``batch_size * world_size`` examples and each rank its own part. ``start()`` gives the
    step to begin at (the restored global step when resuming). A last partial global batch of an epoch is dropped.

    With ``context_lengths``, every batch also carries ``"context_length"``: one of them drawn uniformly per global
    batch from the same (seed, e) generator, after the permutation (so the permutation does not depend on it), and
    the same on every rank.
    """

    def __init__(
        self,
        examples: Sequence[dict],
        batch_size: int,
        seed: int,
        collate: Callable[[list[dict]], dict],
        start: Callable[[], int] = lambda: 0,
        context_lengths: Sequence[int] = (),
    ) -> None:
        super().__init__()
        self.examples, self.batch_size, self.seed, self.collate, self.start = examples, batch_size, seed, collate, start
        self.context_lengths = tuple(context_lengths)

    def _epoch_order(self, epoch: int, per_epoch: int) -> tuple[torch.Tensor, list[int] | None]:
        """The epoch's permutation of the examples and, with context lengths, the n of each of its batches."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        permutation = torch.randperm(len(self.examples), generator=generator)
        if not self.context_lengths:
            return permutation, None
        choices = torch.randint(len(self.context_lengths), (per_epoch,), generator=generator).tolist()
        return permutation, [self.context_lengths[choice] for choice in choices]

    def __iter__(self) -> Iterator[dict]:
        rank, world_size = world()
        global_batch = self.batch_size * world_size
        per_epoch = len(self.examples) // global_batch
        if per_epoch == 0:
            raise ValueError(
                f"the training split has {len(self.examples)} examples, fewer than one global batch "
                f"({self.batch_size} x {world_size} processes); lower trainer.batch_size"
            )
        step = self.start()
        epoch, permutation, lengths = -1, None, None
        while True:
            batch_epoch, position = divmod(step, per_epoch)
            if batch_epoch != epoch:
                epoch, (permutation, lengths) = batch_epoch, self._epoch_order(batch_epoch, per_epoch)
            first = position * global_batch + rank * self.batch_size
            batch = self.collate([self.examples[i] for i in permutation[first : first + self.batch_size].tolist()])
            if lengths is not None:
                batch["context_length"] = lengths[position]
            yield batch
            step += 1
