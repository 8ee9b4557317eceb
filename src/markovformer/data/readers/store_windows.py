"""Next-token examples cut from a token store by index arithmetic: each example is read from the memory map when it
is asked for, so a split costs a few integers however large the corpus."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from markovformer.data.collate import IGNORE_INDEX
from markovformer.data.readers.token_store import TokenStore


class StoreWindows:
    """The windows of tokens [start, stop) of ``store``, as ``text_windows`` cuts a token stream: ``seq_len + 1``
    tokens each, ``overlap`` tokens of unscored context carried from the window before (labels -100), a last shorter
    window kept only with overlap. ``position_ids``: each example also carries (L,) positions restarting at 0 at
    every document start of the store (packed documents, the Hugging Face convention)."""

    def __init__(self, store: TokenStore, start: int, stop: int, seq_len: int, overlap: int = 0,
                 position_ids: bool = False) -> None:  # fmt: skip
        self.store, self.start, self.stop, self.overlap = store, int(start), int(stop), overlap
        self.length, self.position_ids = seq_len + 1, position_ids
        self.stride = self.length - overlap
        size = self.stop - self.start
        if overlap == 0:
            self.count = size // self.length
        else:
            self.count = len(range(0, max(size - overlap, 0), self.stride))

    def __len__(self) -> int:
        return self.count

    @property
    def tail_tokens(self) -> int:
        """The tokens after the last window, in no example: without overlap, the tail shorter than a window."""
        return max(self.stop - self.start - self.count * self.length, 0) if self.overlap == 0 else 0

    def window(self, index: int) -> tuple[int, int]:
        """Token offsets [begin, end) of example ``index`` in the store."""
        if not -self.count <= index < self.count:
            raise IndexError(f"window {index} of {self.count}")
        begin = self.start + (index % self.count) * self.stride
        return begin, min(begin + self.length, self.stop)

    def example_lengths(self) -> np.ndarray:
        """Every example's length, without reading any."""
        begins = self.start + np.arange(self.count, dtype=np.int64) * self.stride
        return np.minimum(begins + self.length, self.stop) - begins

    def __getitem__(self, index: int) -> dict[str, Tensor]:
        begin, end = self.window(int(index))
        return store_example(self.store, begin, end, self.overlap, self.position_ids)


class RandomStarts(StoreWindows):
    """Every window of ``seq_len + 1`` tokens inside [start, stop), one per start token: drawn uniformly per
    (seed, step) by the training batches (``train_sampling="uniform"``), as nanoGPT draws its windows."""

    def __init__(self, store: TokenStore, start: int, stop: int, seq_len: int, position_ids: bool = False) -> None:
        super().__init__(store, start, stop, seq_len, 0, position_ids)
        self.stride = 1
        self.count = max(self.stop - self.start - self.length + 1, 0)


def store_example(store: TokenStore, begin: int, end: int, overlap: int = 0, position_ids: bool = False) -> dict:
    """The example of tokens [begin, end): ``input_ids`` and ``labels`` (the first ``overlap`` -100), and with
    ``position_ids`` each token's offset from the start of its document in the window (packed documents: the first
    token of each document then has label -100, since predicting it would read the previous document). A document
    begun before the window counts from the window's start, as an unpacked window does: positions stay below its
    length, where offsets from the document's own start reach the length of the file (one document) and pass what
    learned positions hold, or sinusoidal ones saw in training, or float32 rotary angles tell apart."""
    window = torch.from_numpy(store.read(begin, end).astype(np.int64))
    labels = window
    if overlap:
        labels = window.clone()
        labels[:overlap] = IGNORE_INDEX
    example = {"input_ids": window, "labels": labels}
    if position_ids:
        # the documents that start after the window's first token (found by two scalar searches: a search per token
        # and torch's ops on the (L,) positions took 4/5 of a packed window's time)
        starts = store.document_starts
        opens = starts[np.searchsorted(starts, begin, "right") : np.searchsorted(starts, end)] - begin
        positions = np.arange(end - begin, dtype=np.int64)
        if len(opens):
            first = np.zeros_like(positions)
            first[opens] = opens
            positions -= np.maximum.accumulate(first)
            example["labels"] = labels = labels.clone() if labels is window else labels
            labels[torch.from_numpy(opens)] = IGNORE_INDEX
        example["position_ids"] = torch.from_numpy(positions)
    return example
