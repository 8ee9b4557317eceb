"""The common shape every file loader returns, and the label-name convention the classification loaders share."""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch
from torch import Tensor

from markovformer.data.collate import collate


@runtime_checkable
class Split(Protocol):
    """What a split is to the engine: examples read one at a time by index. A list qualifies; a large source
    returns an object that builds each example on demand (``readers.store_windows.StoreWindows``), so nothing holds
    every example. The engine, the batchers and evaluation use only ``len(split)`` and ``split[i]``."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> dict[str, Tensor]: ...


def examples_at(split: Split, indices: Iterable[int]) -> list[dict[str, Tensor]]:
    """The examples of ``split`` at ``indices``, read one by one (never by slicing or iterating the split)."""
    return [split[int(index)] for index in indices]


def stacked(split: Split, key: str) -> Tensor:
    """Every example's ``key`` tensor of ``split`` stacked along a new first dimension (examples of one length)."""
    return torch.stack([example[key] for example in examples_at(split, range(len(split)))])


def example_lengths(split: Split, key: str) -> list[int]:
    """The length of every example's ``key`` tensor: from the split itself when it knows them without building the
    examples (``split.example_lengths()``; of joined splits, from each), else by reading each example once."""
    if isinstance(split, JoinedSplits):  # each part as it knows its lengths
        return [length for part in split.splits for length in example_lengths(part, key)]
    known = getattr(split, "example_lengths", None)
    if known is not None:
        return [int(length) for length in known()]
    return [len(split[index][key]) for index in range(len(split))]


@dataclass
class DataBundle:
    """Examples split three ways, plus what a model and a run need to know about them.

    ``train``/``val``/``test``: ``Split`` objects (a list, or anything with ``len`` and ``split[i]``), one dict per
    example, each holding ``input_ids`` (T,) long or ``input_features``
    (T, F) float32, and ``labels`` (a 0-dim long for sequence-level tasks, (L,) long for per-position ones).
    ``collate`` pads a list of them into a batch.

    ``info``: model-shaping facts: ``{"vocab_size": V}`` or ``{"input_dim": F}``, with ``{"num_labels": C,
    "label_names": [...]}`` for classification (label id ``i`` is ``label_names[i]``).

    ``splits``: a JSON-able record of what went where (index ranges, record ids or character offsets), saved next to
    a run so the split can be checked and reproduced.

    ``tokenizer``: for text, an object with ``encode``/``decode``/``vocab_size``/``save(directory)`` that
    ``markovformer.data.readers.tokenizer.load_tokenizer`` reads back; None for other data.

    ``collate``: pads a list of these examples into a batch (``data.collate.collate`` unless the examples have
    other keys, as sentence pairs do). ``lengths``: None, or a function giving the padded length of each example of a
    list, for training batches that group similar lengths (``EpochBatches``).

    ``files``: the data files the bundle was read from, resolved: those named inside a data file (an audio
    manifest's recordings) as the source sets them, and ``training.build`` adds those its options name; a run
    records their sha256 in its data.json, and a resumed or evaluated run checks them against it.

    ``train_sampling``: how training batches pick examples: ``"epochs"`` (each epoch a seeded permutation, every
    example once) or ``"uniform"`` (each global batch drawn uniformly with replacement, seeded by (seed, step): the
    random window starts of nanoGPT when the train split holds every start).

    ``scored_train``: the training split as ``eval`` scores it, where training reads its examples otherwise (a
    time series' overlapping windows label each row in every window for training, each row once for scoring);
    None: ``train`` itself.

    ``reference_of``: for data with its own scores (a true chain's loss, a Bayes predictor's, an exact
    log-likelihood), ``reference_of(name, split)`` gives them for the examples of ``split`` under keys naming ``name``;
    ``info["reference"]`` holds those of val and test, and ``eval`` asks it for other splits (train, all).
    """

    train: Split
    val: Split
    test: Split
    info: dict
    splits: dict = field(default_factory=dict)
    tokenizer: object | None = None
    collate: Callable[[list[dict[str, Tensor]]], dict[str, Tensor]] = collate
    lengths: Callable[[Sequence[dict[str, Tensor]]], list[int]] | None = None
    train_sampling: str = "epochs"
    reference_of: Callable[[str, Split], dict] | None = None
    scored_train: Split | None = None
    files: list[Path] = field(default_factory=list)

    def __repr__(self) -> str:
        # what a notebook shows of it: the dataclass's own repr listed every example's tensors (164 kB for 608 short
        # sequences); the splits' sizes, the info cut short, and the tokenizer's and files' kinds instead
        sizes = ", ".join(f"{name}={len(getattr(self, name))} examples" for name in ("train", "val", "test"))
        tokenizer = "" if self.tokenizer is None else f", tokenizer={type(self.tokenizer).__name__}"
        files = f", files={len(self.files)}" if self.files else ""
        return (f"DataBundle({sizes}, info={_SHOWN.repr(self.info)}{tokenizer}, "
                f"train_sampling={self.train_sampling!r}{files})")  # fmt: skip


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 80
_SHOWN.maxlist = _SHOWN.maxdict = 8
_SHOWN.maxlevel = 3


class JoinedSplits:
    """Several splits read as one, in order (``eval --split all``: every example of a file scored by a run)."""

    def __init__(self, *splits: Split) -> None:
        self.splits = splits

    def __len__(self) -> int:
        return sum(len(split) for split in self.splits)

    @property
    def tail_tokens(self) -> int:
        """The splits' tokens in no example (``StoreWindows.tail_tokens``), summed."""
        return sum(getattr(split, "tail_tokens", 0) for split in self.splits)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"example {index} of {len(self)}")
        index %= len(self)
        for split in self.splits[:-1]:
            if index < len(split):
                return split[index]
            index -= len(split)
        return self.splits[-1][index]  # in range: the splits' lengths sum to len(self)


class Renormalised:
    """The examples of ``split``, whose ``input_features`` were normalised with ``fitted`` (``{"mean", "std"}`` per
    feature, as a source records it in ``info["normalisation"]``; tiled over frames stacked side by side),
    normalised with ``wanted`` instead: data a run scores (``eval --data``) read with the statistics of the run's
    own training rows, which belong to the model, not with those of the new file's."""

    def __init__(self, split: Split, fitted: dict, wanted: dict) -> None:
        self.split = split
        self.stats = [torch.tensor(stats[key], dtype=torch.float64) for stats in (fitted, wanted)
                      for key in ("mean", "std")]  # fmt: skip

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        example = dict(self.split[index])
        features = example["input_features"]
        stacked = features.shape[-1] // len(self.stats[0])
        fitted_mean, fitted_std, mean, std = (stats.repeat(stacked) for stats in self.stats)
        raw = features.double() * fitted_std + fitted_mean
        renormalised = ((raw - mean) / std).to(features.dtype)
        if stacked > 1:  # the last input's frames past the end are zeros after normalisation (stack_frames): kept so
            padding = (features[-1].reshape(stacked, -1) == 0).all(-1).repeat_interleave(len(self.stats[0]))
            renormalised[-1, padding] = 0
        example["input_features"] = renormalised
        return example


def label_names_in_order(labels: Sequence[str], source: str) -> list[str]:
    """The distinct label strings in id order: numeric order when every label is an integer ("2" before "10"),
    otherwise plain string order. Label id ``i`` is the ``i``-th name. ValueError naming ``source`` when there are
    fewer than two: a classifier of one class scores a loss of 0 and an accuracy of 1 whatever it learns."""
    distinct = set(labels)
    if len(distinct) < 2:
        raise ValueError(f"{source}: every label is {next(iter(distinct), None)!r}: classification needs at least two "
                         f"classes")  # fmt: skip
    try:
        return sorted(distinct, key=lambda name: (int(name), name))
    except ValueError:
        return sorted(distinct)
