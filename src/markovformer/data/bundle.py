"""The common shape every file loader returns, and the label-name convention the classification loaders share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from torch import Tensor

from markovformer.data.collate import collate


@dataclass
class DataBundle:
    """Examples split three ways, plus what a model and a run need to know about them.

    ``train``/``val``/``test``: one dict per example, each holding ``input_ids`` (T,) long or ``input_features``
    (T, F) float32, and ``labels`` (a 0-dim long for sequence-level tasks, (L,) long for per-position ones).
    ``collate`` pads a list of them into a batch.

    ``info``: model-shaping facts: ``{"vocab_size": V}`` or ``{"input_dim": F}``, with ``{"num_labels": C,
    "label_names": [...]}`` for classification (label id ``i`` is ``label_names[i]``).

    ``splits``: a JSON-able record of what went where (index ranges, record ids or character offsets), saved next to
    a run so the split can be checked and reproduced.

    ``tokenizer``: for text, an object with ``encode``/``decode``/``vocab_size``/``save(directory)`` that
    ``markovformer.data.text.load_tokenizer`` reads back; None for other data.

    ``collate``: pads a list of these examples into a batch (``data.collate.collate`` unless the examples have
    other keys, as sentence pairs do). ``lengths``: None, or the padded length of each example of a list, for
    training batches that group similar lengths (``EpochBatches``).
    """

    train: list[dict[str, Tensor]]
    val: list[dict[str, Tensor]]
    test: list[dict[str, Tensor]]
    info: dict
    splits: dict = field(default_factory=dict)
    tokenizer: object | None = None
    collate: Callable[[list[dict[str, Tensor]]], dict[str, Tensor]] = collate
    lengths: Callable[[Sequence[dict[str, Tensor]]], list[int]] | None = None


def label_names_in_order(labels: Sequence[str]) -> list[str]:
    """The distinct label strings in id order: numeric order when every label is an integer ("2" before "10"),
    otherwise plain string order. Label id ``i`` is the ``i``-th name."""
    distinct = set(labels)
    try:
        return sorted(distinct, key=lambda name: (int(name), name))
    except ValueError:
        return sorted(distinct)
