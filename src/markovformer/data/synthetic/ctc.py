"""A synthetic frame-labelling task for CTC: symbol strings rendered as noisy feature frames of random duration."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from markovformer.data.bundle import DataBundle
from markovformer.data.splits import generated_splits


@dataclasses.dataclass
class SyntheticCTCSource:
    """Strings of ``num_symbols`` symbols, each rendered as 2-5 frames of its own random prototype vector plus noise,
    with silent (noise-only) frames between some symbols: a stand-in for speech that needs no download. Labels are
    the symbol strings (ids 1..num_symbols; 0 is the CTC blank); symbol 1 is named " " (a space) and the others a, b,
    c, ..., so WER counts words split at symbol 1. The prototypes are drawn from trainer.seed, as the examples are:
    another seed is another task (no option keeps it, as markov_chain's chain_seed keeps its chain)."""

    feeds: ClassVar[tuple[str, ...]] = ("ctc",)

    num_symbols: int = 8
    input_dim: int = 16
    min_symbols: int = 3
    max_symbols: int = 8
    noise: float = 0.5
    train_examples: int = 2000
    val_examples: int = 200
    test_examples: int = 200

    def __post_init__(self) -> None:
        for name in ("num_symbols", "input_dim", "min_symbols", "train_examples", "val_examples", "test_examples"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.{name}={getattr(self, name)!r} must be >= 1")
        if self.max_symbols < self.min_symbols:
            raise ValueError(f"data.max_symbols={self.max_symbols} must be >= min_symbols={self.min_symbols}")

    def _example(self, prototypes: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        length = int(torch.randint(self.min_symbols, self.max_symbols + 1, (), generator=generator))
        symbols = torch.randint(1, self.num_symbols + 1, (length,), generator=generator)
        frames = []
        for symbol in symbols.tolist():
            if bool(torch.rand((), generator=generator) < 0.3):  # a silent gap
                frames.append(torch.zeros(int(torch.randint(1, 3, (), generator=generator)), self.input_dim))
            duration = int(torch.randint(2, 6, (), generator=generator))
            frames.append(prototypes[symbol].expand(duration, -1))
        clean = torch.cat(frames)
        noisy = clean + self.noise * torch.randn(clean.shape, generator=generator)
        return {"input_features": noisy.float(), "labels": symbols}

    def build(self, seed: int) -> DataBundle:
        prototypes = torch.randn(self.num_symbols + 1, self.input_dim, generator=torch.Generator().manual_seed(seed))
        counts = {"train": self.train_examples, "val": self.val_examples, "test": self.test_examples}
        splits, seeds = generated_splits(
            counts, seed + 1, lambda count, generator: [self._example(prototypes, generator) for _ in range(count)]
        )
        names = ["<blank>", " "] + [chr(ord("a") + i) for i in range(self.num_symbols - 1)]
        return DataBundle(
            train=splits["train"], val=splits["val"], test=splits["test"],
            info={"input_dim": self.input_dim, "num_labels": self.num_symbols + 1, "label_names": names},
            splits={"generator_seeds": seeds},
        )  # fmt: skip
