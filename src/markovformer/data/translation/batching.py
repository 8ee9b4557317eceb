"""Batches of sentence pairs: a seeded length-bucketed batch sampler, and the collate that adds ``<bos>``/``<eos>``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Sampler

from markovformer.data.collate import IGNORE_INDEX, bucket_by_length, pad_right
from markovformer.data.translation.special_tokens import BOS_TOKEN_ID, EOS_TOKEN_ID, PAD_TOKEN_ID


def translation_lengths(examples: Sequence[dict[str, Tensor]]) -> list[int]:
    """The padded length each example costs: max(source tokens, target tokens + 1), the +1 for ``<bos>``/``<eos>``."""
    return [max(len(example["src_ids"]), len(example["tgt_ids"]) + 1) for example in examples]


class LengthBucketSampler(Sampler[list[int]]):
    """Batches of indices that group examples of similar length, covering every index exactly once per epoch.

    Shuffled (the default): each epoch draws a permutation from ``(seed, epoch)``, cuts it into pools of
    ``pool_batches * batch_size`` indices, sorts each pool by length (ties stay in random order), cuts the pools into
    batches of ``batch_size`` and shuffles the order of all batches. A larger pool groups lengths more tightly and
    mixes them less. Not shuffled: one global sort by length (index order within equal lengths), in order, for
    evaluation. Call ``set_epoch`` before each epoch for a new order (Lightning does, as for DistributedSampler).
    Pass it to a DataLoader as ``batch_sampler``.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        *,
        seed: int = 0,
        shuffle: bool = True,
        pool_batches: int = 50,
    ) -> None:
        for name, value in (("batch_size", batch_size), ("pool_batches", pool_batches)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if len(lengths) == 0:
            raise ValueError("a length-bucketed sampler needs at least one example")
        self.lengths = torch.as_tensor(list(lengths), dtype=torch.long)
        self.batch_size, self.seed, self.shuffle, self.pool_batches = batch_size, seed, shuffle, pool_batches
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if not self.shuffle:
            return -(-len(self.lengths) // self.batch_size)
        full_pools, rest = divmod(len(self.lengths), self.pool_batches * self.batch_size)
        return full_pools * self.pool_batches + -(-rest // self.batch_size)

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._batches())

    def _batches(self) -> list[list[int]]:
        if not self.shuffle:
            order = torch.sort(self.lengths, stable=True).indices
            return [chunk.tolist() for chunk in order.split(self.batch_size)]
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        permutation = torch.randperm(len(self.lengths), generator=generator)
        return bucket_by_length(permutation, self.lengths, self.batch_size, self.pool_batches, generator)


def collate_translation(examples: Sequence[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Pad sentence pairs ``{"src_ids": (S_i,), "tgt_ids": (T_i,)}`` (plain ids, no specials) into a batch for
    ``MarkovTranslatorForConditionalGeneration.forward(**batch)``, padding on the right:

    - ``src_ids`` (B, S) padded with ``<pad>``; ``src_mask`` (B, S) long, 1 = real token;
    - ``tgt_ids`` (B, T + 1): the decoder input ``<bos> y``; ``tgt_mask`` (B, T + 1) long;
    - ``labels`` (B, T + 1): ``y <eos>``, padding as -100 (ignored by the loss).
    """
    if not examples:
        raise ValueError("collate_translation got an empty list of examples")
    sources, targets = [], []
    for index, example in enumerate(examples):
        if set(example) != {"src_ids", "tgt_ids"}:
            raise ValueError(f"example {index} has keys {sorted(example)}; expected ['src_ids', 'tgt_ids']")
        source, target = example["src_ids"], example["tgt_ids"]
        if source.dim() != 1 or target.dim() != 1 or len(source) == 0:
            raise ValueError(
                f"example {index}: src_ids {tuple(source.shape)} and tgt_ids {tuple(target.shape)} must be 1-D, "
                "with at least one source token"
            )
        sources.append(source.long())
        targets.append(target.long())
    # <bos> and <eos> are added to the padded batch, not to each example (two concatenations per pair were
    # half of this function's time)
    padded = torch.cat([pad_right(targets, PAD_TOKEN_ID), torch.full((len(targets), 1), PAD_TOKEN_ID)], dim=1)
    target_lengths = torch.tensor([len(target) for target in targets])
    decoder_inputs = torch.cat([torch.full((len(targets), 1), BOS_TOKEN_ID), padded[:, :-1]], dim=1)
    labels = padded.index_put((torch.arange(len(targets)), target_lengths), torch.tensor(EOS_TOKEN_ID))
    after_eos = torch.arange(labels.shape[1])[None, :] > target_lengths[:, None]
    return {
        "src_ids": pad_right(sources, PAD_TOKEN_ID),
        "src_mask": _mask([len(s) for s in sources]),
        "tgt_ids": decoder_inputs,
        "tgt_mask": _mask((target_lengths + 1).tolist()),
        "labels": labels.masked_fill(after_eos, IGNORE_INDEX),
    }


def _mask(lengths: list[int]) -> Tensor:
    lengths_tensor = torch.tensor(lengths)
    return (torch.arange(max(lengths))[None, :] < lengths_tensor[:, None]).long()
