"""Synthetic Markov sources as run data: a fixed chain to learn, with its exact entropy rate for reference."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from markovformer.data.bundle import DataBundle, Split, stacked
from markovformer.data.splits import generated_splits
from markovformer.markov import MarkovChain, lagged_chain, random_chain, switching_chain
from markovformer.markov.chains import check_chain_arguments, check_switching_rates

CHAIN_KINDS = ("lagged", "random", "switching")
MAX_CONTEXTS = 2**22  # rows of a chain's transition table: 16^5 = 1M rows of 16 float64s is 134 MB; 16^6, 2 GB


@dataclasses.dataclass
class MarkovChainSource:
    """Sequences from one fixed Markov chain (a kernel to learn), for causal LM.

    kind: "lagged" (log-linear: the next symbol depends on the symbols at ``lags`` only, with ``strength``),
    "random" (order ``order``, rows ~ Dirichlet(``beta``)) or "switching" (binary, ``p``, ``q``; order 1). The labels
    of the first k tokens of each sequence, k the chain's order (max(``lags``), ``order`` or 1), are -100: the first
    k - 1 targets lack full context (the first token is never a target), so the validation loss is directly
    comparable with the chain's entropy rate, reported as a reference line.
    """

    # the tasks it feeds (every source declares them; `data list` shows them, train refuses another)
    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    kind: str = "lagged"
    num_symbols: int = 16
    lags: tuple[int, ...] = (1, 2, 3)
    strength: float = 1.0
    order: int = 3
    beta: float = 1.0
    p: float = 0.2
    q: float = 0.3
    chain_seed: int = 0
    seq_len: int = 128
    train_sequences: int = 40_000
    val_sequences: int = 256
    test_sequences: int = 256

    def __post_init__(self) -> None:
        if self.kind not in CHAIN_KINDS:
            raise ValueError(f"data.kind={self.kind!r} must be one of {CHAIN_KINDS}")
        for name in ("num_symbols", "seq_len", "train_sequences", "val_sequences", "test_sequences", "order"):
            if getattr(self, name) < 1:
                raise ValueError(f"data.{name}={getattr(self, name)!r} must be >= 1")
        if not self.lags or min(self.lags) < 1:
            raise ValueError(f"data.lags={self.lags!r} must be positive integers")
        # the chain's own checks, here so that a bad value is refused as the option it is (data.beta, ...)
        if self.kind == "switching":
            check_switching_rates(self.p, self.q, prefix="data.")
        else:
            check_chain_arguments(1, self.num_symbols, self.beta if self.kind == "random" else None, prefix="data.")
            if self.kind == "lagged" and len(set(self.lags)) != len(self.lags):
                raise ValueError(f"data.lags must not repeat, got {list(self.lags)!r}")
        order, key = (max(self.lags), f"data.lags={list(self.lags)!r}") if self.kind == "lagged" else (
            self.order, f"data.order={self.order}")  # fmt: skip
        if self.kind != "switching" and self.num_symbols**order > MAX_CONTEXTS:
            raise ValueError(f"{key} with data.num_symbols={self.num_symbols}: the chain's table has "
                             f"{self.num_symbols}^{order} contexts, above {MAX_CONTEXTS:,} (a table of "
                             f"num_symbols^order rows); lower the order or the symbols")  # fmt: skip

    def chain(self) -> MarkovChain:
        generator = torch.Generator().manual_seed(self.chain_seed)
        if self.kind == "lagged":
            return lagged_chain(self.num_symbols, tuple(self.lags), strength=self.strength, generator=generator)
        if self.kind == "random":
            return random_chain(self.order, self.num_symbols, self.beta, generator=generator)
        return switching_chain(self.p, self.q)

    def build(self, seed: int) -> DataBundle:
        chain = self.chain()
        if self.seq_len <= chain.order:
            raise ValueError(f"data.seq_len={self.seq_len} must exceed the chain order {chain.order}")

        def make_split(count: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
            sequences = chain.sample(count, self.seq_len, generator=generator)
            labels = sequences.clone()
            labels[:, : chain.order] = -100
            return [{"input_ids": x, "labels": y} for x, y in zip(sequences, labels, strict=True)]

        counts = {"train": self.train_sequences, "val": self.val_sequences, "test": self.test_sequences}
        splits, seeds = generated_splits(counts, seed, make_split)
        def true_chain_loss(name: str, split: Split) -> dict:
            return {f"oracle_{name}_loss": chain.oracle_loss(stacked(split, "input_ids"))}

        reference = {"entropy_rate": chain.entropy_rate(), "unigram_entropy": chain.marginal_entropy(),
                     **true_chain_loss("val", splits["val"]), **true_chain_loss("test", splits["test"])}
        return DataBundle(
            train=splits["train"],
            val=splits["val"],
            test=splits["test"],
            info={"vocab_size": chain.num_symbols, "true_lags": list(chain.true_lags), "reference": reference},
            splits={"generator_seeds": seeds},
            reference_of=true_chain_loss,
        )


@dataclasses.dataclass
class HiddenOrderSource(MarkovChainSource):
    """A log-linear chain of order 4 whose next symbol depends only on lags 1 and 4: the true lags are known, so
    one can check whether the learned order gates and transition strengths find them."""

    kind: str = "lagged"
    lags: tuple[int, ...] = (1, 4)
    strength: float = 1.5
