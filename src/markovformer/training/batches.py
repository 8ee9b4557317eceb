"""Training batches as a pure function of (seed, step, rank): a resumed run continues exactly where it stopped."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import IterableDataset

from markovformer.data.collate import bucket_by_length


def world() -> tuple[int, int]:
    """(rank, world size) of the current process group, or (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class EpochBatches(IterableDataset):
    """Endless training batches. Epoch e visits the examples in a permutation seeded by (seed, e); global batch i
    takes the i-th slice of ``batch_size * world_size`` examples and each rank its own part. ``start()`` gives the
    step to begin at (the restored global step when resuming). A last partial global batch of an epoch is dropped.

    With ``lengths`` (one per example), each epoch's global batches group similar lengths instead: the permutation
    is cut into pools of ``pool_batches`` global batches, each pool sorted by length and cut into batches, and the
    batch order shuffled (``data.collate.bucket_by_length``); short batches at the pools' ends are dropped.

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
        lengths: Sequence[int] | None = None,
        pool_batches: int = 50,
    ) -> None:
        super().__init__()
        self.examples, self.batch_size, self.seed, self.collate, self.start = examples, batch_size, seed, collate, start
        self.context_lengths = tuple(context_lengths)
        if lengths is not None and len(lengths) != len(examples):
            raise ValueError(f"lengths has {len(lengths)} entries for {len(examples)} examples")
        self.lengths = None if lengths is None else torch.as_tensor(list(lengths), dtype=torch.long)
        self.pool_batches = pool_batches

    def _epoch_batches(self, epoch: int, global_batch: int) -> tuple[list[list[int]], list[int] | None]:
        """The epoch's global batches (lists of example indices) and, with context lengths, the n of each."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        permutation = torch.randperm(len(self.examples), generator=generator)
        if self.lengths is None:
            full = len(self.examples) // global_batch * global_batch
            batches = [chunk.tolist() for chunk in permutation[:full].split(global_batch)]
        else:
            batches = bucket_by_length(permutation, self.lengths, global_batch, self.pool_batches, generator)
            batches = [batch for batch in batches if len(batch) == global_batch]
        if not self.context_lengths:
            return batches, None
        choices = torch.randint(len(self.context_lengths), (len(batches),), generator=generator).tolist()
        return batches, [self.context_lengths[choice] for choice in choices]

    def __iter__(self) -> Iterator[dict]:
        rank, world_size = world()
        global_batch = self.batch_size * world_size
        per_epoch = len(self._epoch_batches(0, global_batch)[0])
        if per_epoch == 0:
            raise ValueError(
                f"the training split has {len(self.examples)} examples, fewer than one global batch "
                f"({self.batch_size} x {world_size} processes); lower trainer.batch_size"
            )
        step = self.start()
        epoch, batches, lengths = -1, None, None
        while True:
            batch_epoch, position = divmod(step, per_epoch)
            if batch_epoch != epoch:
                epoch, (batches, lengths) = batch_epoch, self._epoch_batches(batch_epoch, global_batch)
            part = batches[position][rank * self.batch_size : (rank + 1) * self.batch_size]
            batch = self.collate([self.examples[i] for i in part])
            if lengths is not None:
                batch["context_length"] = lengths[position]
            yield batch
            step += 1
