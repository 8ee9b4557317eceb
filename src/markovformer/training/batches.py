"""Training batches as a pure function of (seed, step, rank): a resumed run continues exactly where it stopped.

With W DataLoader workers, worker w builds only the steps start + w, start + w + W, ...: the DataLoader takes one
batch from each worker in turn, so the main process sees every step exactly once and in order, for any W."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import IterableDataset, Sampler

from markovformer.data.bundle import example_lengths, examples_at
from markovformer.data.collate import bucket_by_length
from markovformer.training.worker_copy import Packed


def worker_share() -> tuple[int, int]:
    """(this DataLoader worker's index, the number of workers), or (0, 1) in the main process."""
    info = torch.utils.data.get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)


def world() -> tuple[int, int]:
    """(rank, world size) of the current process group, or (0, 1)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class RankShare(Sampler[int]):
    """The indices 0..size-1 this process scores in a validation or evaluation pass: rank r of W takes r, r + W, ...
    Unlike ``DistributedSampler`` nothing is padded, so every example is scored exactly once across the processes
    (ranks may hold one example fewer) and summed metrics are exact. The process group is read when iterated."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Iterator[int]:
        rank, world_size = world()
        return iter(range(rank, self.size, world_size))

    def __len__(self) -> int:
        rank, world_size = world()
        return len(range(rank, self.size, world_size))


class StartAt:
    """A training stream's ``start`` fixed to one step: what a DataLoader worker started by pickling (the spawn or
    forkserver start method) receives, as a forked worker reads the step from its copy of the trainer."""

    def __init__(self, step: int) -> None:
        self.step = step

    def __call__(self) -> int:
        return self.step


class StartedStream(IterableDataset):
    """A training stream whose ``start()`` is read when a worker starts: pickled for a worker, when the DataLoader
    starts it, ``start`` (a lambda reading the trainer's step, which does not pickle) becomes the step it gives, and
    the rest (the examples' tensors) travels ``Packed``, packed once for all its workers."""

    start: Callable[[], int]
    packed: Packed | None = None

    def __getstate__(self) -> dict:
        if self.packed is None:
            self.packed = Packed({key: value for key, value in self.__dict__.items() if key != "start"})
        return {"start": StartAt(int(self.start())), "packed": self.packed}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state["packed"], start=state["start"])


class EpochBatches(StartedStream):
    """Endless training batches. Epoch e visits the examples in a permutation seeded by (seed, e); global batch i
    takes the i-th slice of ``batch_size * world_size`` examples and each rank its own part. ``start()`` gives the
    step to begin at (the restored global step when resuming). A last partial global batch of an epoch is dropped.
    Examples are read by index only (``examples[i]``), as each batch is built: any ``data.bundle.Split`` works.

    With ``lengths`` (one per example), each epoch's global batches group similar lengths instead: the permutation
    is cut into pools of ``pool_batches`` global batches, each pool sorted by length and cut into batches, and the
    batch order shuffled (``data.collate.bucket_by_length``); the remainder is dropped from the permutation first,
    so it is a random one each epoch (dropping the pools' short last batches left out their longest examples).

    With ``sampling="uniform"`` there are no epochs: global batch s is drawn uniformly with replacement from a
    generator seeded by (seed, s) (nanoGPT's random window starts when the examples are every window start).

    With ``orders``, every batch also carries ``"order"``: one of them drawn uniformly per global
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
        orders: Sequence[int] = (),
        lengths: Sequence[int] | None = None,
        pool_batches: int = 50,
        sampling: str = "epochs",
    ) -> None:
        super().__init__()
        self.examples, self.batch_size, self.seed, self.collate, self.start = examples, batch_size, seed, collate, start
        self.orders = tuple(orders)
        if lengths is not None and len(lengths) != len(examples):
            raise ValueError(f"lengths has {len(lengths)} entries for {len(examples)} examples")
        if sampling not in ("epochs", "uniform") or (sampling == "uniform" and lengths is not None):
            raise ValueError(f"sampling={sampling!r} must be 'epochs', or 'uniform' without lengths")
        self.lengths = None if lengths is None else torch.as_tensor(list(lengths), dtype=torch.long)
        self.pool_batches, self.sampling = pool_batches, sampling

    def _epoch_batches(self, epoch: int, global_batch: int) -> tuple[Sequence, list[int] | None]:
        """The epoch's global batches (rows of example indices: a (batches, global_batch) tensor, or lists when
        grouped by length) and, with orders, the n of each."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        if self.sampling == "uniform":  # one "epoch" per step: the batch drawn for (seed, step)
            batches = torch.randint(len(self.examples), (1, global_batch), generator=generator)
        else:  # a random remainder left out, before any grouping by length: the same examples' chance each epoch
            full = len(self.examples) // global_batch
            permutation = torch.randperm(len(self.examples), generator=generator)[: full * global_batch]
            if self.lengths is None:
                batches = permutation.view(full, global_batch)
            else:  # (grouping first left out the short batch it made of the longest examples: never trained on)
                batches = bucket_by_length(permutation, self.lengths, global_batch, self.pool_batches, generator)
        if not self.orders:
            return batches, None
        choices = torch.randint(len(self.orders), (len(batches),), generator=generator).tolist()
        return batches, [self.orders[choice] for choice in choices]

    def batches_per_epoch(self, global_batch: int) -> int:
        """Global batches per epoch (1 with uniform sampling, whose every step is an epoch of its own)."""
        if self.sampling == "uniform":
            return 1 if len(self.examples) else 0
        return len(self.examples) // global_batch

    def check_fills(self, world_size: int) -> int:
        """Global batches per epoch across ``world_size`` processes; ValueError when not even one fills."""
        per_epoch = self.batches_per_epoch(self.batch_size * world_size)
        if per_epoch == 0:
            raise ValueError(
                f"the training split has {len(self.examples)} examples, fewer than one global batch "
                f"({self.batch_size} x {world_size} processes); lower trainer.batch_size or give it more data"
            )
        return per_epoch

    def __iter__(self) -> Iterator[dict]:
        rank, world_size = world()
        global_batch = self.batch_size * world_size
        per_epoch = self.check_fills(world_size)
        worker, workers = worker_share()
        step = self.start() + worker
        epoch, batches, lengths = -1, None, None
        while True:
            batch_epoch, position = divmod(step, per_epoch)
            if batch_epoch != epoch:
                epoch, (batches, lengths) = batch_epoch, self._epoch_batches(batch_epoch, global_batch)
            part = batches[position][rank * self.batch_size : (rank + 1) * self.batch_size]
            batch = self.collate(examples_at(self.examples, part.tolist() if isinstance(part, Tensor) else part))
            if lengths is not None:
                batch["order"] = lengths[position]
            yield batch
            step += workers


def window_stride(window: int, overlap: bool) -> int:
    """How far a document walker advances per step: a whole window, or half of one (at least 1) with overlap."""
    return max(1, window // 2) if overlap else window


def windows_in_document(length: int, window: int, stride: int) -> int:
    """The number of windows [k·stride, k·stride + window) that walk a document of ``length`` tokens: up to the
    first that reaches its end (which may be shorter than ``window``)."""
    return 1 if length <= window else -(-(length - window) // stride) + 1


class DocumentWindows(StartedStream):
    """Endless training batches of windows walked along long documents (truncated BPTT, the VMT's Algorithm 1).

    ``batch_size * world_size`` lanes each walk one document, ``window`` tokens at a time, advancing by ``stride``;
    rank r takes lanes r·batch_size onwards. At step 0 every lane takes a document and a window in it at random
    (so that the lanes do not all reach their ends together); a lane that has walked past its document's last window
    takes a new document, from its first window, drawn from a generator seeded by (seed, step). Each batch is
    ``collate`` of the windows (right-padded: a document's last window may be short) plus ``carry_mask`` (B,) bool:
    True where the row continues the lane's document from the row before, so the previous step's carry applies.

    The lanes' state is replayed from step 0 to ``start()`` (integer bookkeeping only), so a resumed run sees exactly
    the batches an uninterrupted one does; every DataLoader worker replays all of it and yields its own share.
    """

    def __init__(
        self,
        documents: Sequence[dict],
        batch_size: int,
        seed: int,
        collate: Callable[[list[dict]], dict],
        window: int,
        stride: int,
        start: Callable[[], int] = lambda: 0,
    ) -> None:
        super().__init__()
        if not len(documents):
            raise ValueError("the training split has no documents")
        if not 1 <= stride <= window:
            raise ValueError(f"stride={stride} must lie in [1, window={window}]")
        self.key = "input_ids" if "input_ids" in documents[0] else "input_features"
        self.documents, self.batch_size, self.seed, self.collate = documents, batch_size, seed, collate
        self.window, self.stride, self.start = window, stride, start
        lengths = example_lengths(documents, self.key)
        if min(lengths) == 0:
            raise ValueError(f"training document {lengths.index(0)} is empty")
        self.counts = [windows_in_document(length, window, stride) for length in lengths]

    def _generator(self, step: int) -> torch.Generator:
        return torch.Generator().manual_seed(self.seed * 1_000_003 + step)

    def _first_lanes(self, lanes: int) -> tuple[list[int], list[int]]:
        """Step 0: each lane's document and window index."""
        generator = self._generator(0)
        documents = torch.randint(len(self.documents), (lanes,), generator=generator).tolist()
        fractions = torch.rand(lanes, generator=generator).tolist()
        return documents, [int(f * self.counts[d]) for d, f in zip(documents, fractions, strict=True)]

    def _advance(self, step: int, documents: list[int], windows: list[int]) -> list[bool]:
        """Move every lane on to ``step`` in place; returns the carry mask (the lanes that kept their document)."""
        finished = []
        for lane, document in enumerate(documents):
            windows[lane] += 1
            finished.append(windows[lane] >= self.counts[document])
        if any(finished):
            drawn = torch.randint(len(self.documents), (len(documents),), generator=self._generator(step)).tolist()
            for lane in (lane for lane, done in enumerate(finished) if done):
                documents[lane], windows[lane] = drawn[lane], 0
        return [not done for done in finished]

    def __iter__(self) -> Iterator[dict]:
        rank, world_size = world()
        lanes = range(rank * self.batch_size, (rank + 1) * self.batch_size)
        documents, windows = self._first_lanes(self.batch_size * world_size)
        carry_mask = [False] * len(documents)
        worker, workers = worker_share()
        step, first = 0, self.start()
        while True:
            if step >= first and (step - first) % workers == worker:
                pieces = [self.documents[documents[lane]][self.key][windows[lane] * self.stride :][: self.window]
                          for lane in lanes]  # fmt: skip
                batch = self.collate([{self.key: piece} for piece in pieces])
                batch["carry_mask"] = torch.tensor([carry_mask[lane] for lane in lanes])
                yield batch
            step += 1
            carry_mask = self._advance(step, documents, windows)
