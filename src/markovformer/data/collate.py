"""Padding a list of examples into one batch (right padding, Hugging Face ``attention_mask`` semantics), and
grouping examples of similar length into batches."""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

PAD_ID = 0  # token id 0 is padding for every tokenizer and vocabulary in markovformer.data
IGNORE_INDEX = -100  # label value the losses skip (PyTorch's cross-entropy default)

_INPUT_KEYS = ("input_ids", "input_features")


def collate(examples: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Pad examples to the longest one, on the right.

    Each example has ``input_ids`` (T_i,) long or ``input_features`` (T_i, F), and optionally ``labels``: a 0-dim
    tensor (one label per example) or (L_i,) (one per position; L_i may differ from T_i, e.g. for CTC).

    Packed text examples may also carry ``position_ids`` (T_i,) long, padded with 0.

    Returns ``input_ids`` (B, T) long padded with 0, or ``input_features`` (B, T, F) padded with 0.0;
    ``attention_mask`` (B, T) long, 1 = real position, 0 = padding; ``labels`` (B,) or (B, L) long padded with -100.
    The batch owns fresh tensors: editing it never changes the examples.
    """
    if not examples:
        raise ValueError("collate got an empty list of examples")
    keys = set(examples[0])
    inputs = [key for key in _INPUT_KEYS if key in keys]
    unknown = sorted(keys - {*_INPUT_KEYS, "labels", "position_ids"})
    if len(inputs) != 1 or unknown:
        raise ValueError(
            f"an example needs exactly one of input_ids / input_features and optionally labels; got keys {sorted(keys)}"
        )
    for index, example in enumerate(examples):
        if set(example) != keys:
            raise ValueError(f"example {index} has keys {sorted(example)} but example 0 has {sorted(keys)}")

    input_key = inputs[0]
    sequences = [example[input_key] for example in examples]
    expected_dim = 1 if input_key == "input_ids" else 2
    for index, sequence in enumerate(sequences):
        if sequence.dim() != expected_dim or sequence.shape[0] == 0:
            raise ValueError(
                f"example {index}: {input_key} has shape {tuple(sequence.shape)}; expected a non-empty "
                f"{'(T,)' if expected_dim == 1 else '(T, F)'} tensor"
            )
        if sequence.shape[1:] != sequences[0].shape[1:]:
            raise ValueError(
                f"example {index}: {input_key} has shape {tuple(sequence.shape)}, example 0 has "
                f"{tuple(sequences[0].shape)}; the feature sizes differ"
            )
    padding, dtype = (PAD_ID, torch.long) if input_key == "input_ids" else (0.0, None)
    batch = {input_key: pad_right(sequences, padding, dtype)}
    lengths = torch.tensor([sequence.shape[0] for sequence in sequences])
    batch["attention_mask"] = (torch.arange(int(lengths.max()))[None, :] < lengths[:, None]).long()

    if "position_ids" in keys:  # packed documents: positions restart at each one (padded with 0)
        batch["position_ids"] = pad_right([example["position_ids"] for example in examples], 0, torch.long)
    if "labels" in keys:
        batch["labels"] = _collate_labels([example["labels"] for example in examples])
    return batch


def pad_right(sequences: list[Tensor], value: float, dtype: torch.dtype | None = None) -> Tensor:
    """(B, T, ...) from B tensors (T_i, ...) of one trailing shape, each padded on the right with ``value`` to the
    longest, in ``dtype`` (each tensor cast to it first: padded in a uint8 first one's dtype, an int64 id 300 was 44
    and a -100 failed) or else the first's: ``pad_sequence``'s batch. Tensors of one shape and dtype are stacked
    instead, which gives the same tensor: ``pad_sequence`` copies them one at a time (260 us for 64 windows of 257
    tokens, against 10 us stacked)."""
    shape, first = sequences[0].shape, sequences[0].dtype
    if all(sequence.shape == shape and sequence.dtype == first for sequence in sequences):  # stops at the first other
        return torch.stack(sequences).to(dtype or first)
    if dtype is not None:
        sequences = [sequence.to(dtype) for sequence in sequences]
    return pad_sequence(sequences, batch_first=True, padding_value=value)


def _collate_labels(labels: list[Tensor]) -> Tensor:
    """(B,) from 0-dim labels, or (B, L) padded with -100 from (L_i,) labels; mixing the two is an error."""
    dims = {label.dim() for label in labels}
    if dims == {0}:
        return torch.stack(labels).long()
    if dims == {1}:
        return pad_right(labels, IGNORE_INDEX, torch.long)
    raise ValueError(f"labels must be all 0-dim (per example) or all 1-dim (per position); got dims {sorted(dims)}")


def bucket_by_length(
    permutation: Tensor, lengths: Tensor, batch_size: int, pool_batches: int, generator: torch.Generator
) -> list[list[int]]:
    """Length-grouped batches from a random ``permutation`` of example indices: cut it into pools of
    ``pool_batches * batch_size``, sort each pool by ``lengths`` (stable, so ties keep their random order), cut the
    pools into batches of ``batch_size`` (the last of a pool may be short) and shuffle the batch order with
    ``generator``. Every index appears exactly once."""
    batches = []
    for pool in permutation.split(pool_batches * batch_size):
        by_length = pool[torch.sort(lengths[pool], stable=True).indices]
        batches += [chunk.tolist() for chunk in by_length.split(batch_size)]
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]
