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
    """

    def __init__(
        self,
        examples: Sequence[dict],
        batch_size: int,
        seed: int,
        collate: Callable[[list[dict]], dict],
        start: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__()
        self.examples, self.batch_size, self.seed, self.collate, self.start = examples, batch_size, seed, collate, start

    def _permutation(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        return torch.randperm(len(self.examples), generator=generator)

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
        epoch, permutation = -1, None
        while True:
            batch_epoch, position = divmod(step, per_epoch)
            if batch_epoch != epoch:
                epoch, permutation = batch_epoch, self._permutation(batch_epoch)
            first = position * global_batch + rank * self.batch_size
            yield self.collate([self.examples[i] for i in permutation[first : first + self.batch_size].tolist()])
            step += 1
