"""The sequence-mixer tasks (``synthetic.tasks``) as data sources for causal-LM runs: ``mqar``, ``induction``,
``selective_copy`` and ``icl_markov``. Each split is generated from its own seeded stream (``generated_splits``);
the bundle's ``info["reference"]`` holds the chance accuracy (and, for ``icl_markov``, the Bayes loss of the
validation and test sequences)."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import torch

from markovformer.data.bundle import DataBundle, Split, stacked
from markovformer.data.splits import generated_splits
from markovformer.data.synthetic import tasks
from markovformer.markov import add_beta_loss
from markovformer.markov.chains import check_chain_arguments


def _check_counts(source) -> None:
    for name in ("train_examples", "val_examples", "test_examples"):
        value = getattr(source, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"data.{name}={value!r} must be an integer >= 1")


def _bundle(source, seed: int, vocab_size: int, reference: dict) -> DataBundle:
    def make_split(count: int, generator: torch.Generator) -> list[dict[str, torch.Tensor]]:
        inputs, labels = source.examples(count, generator)
        return [{"input_ids": x, "labels": y} for x, y in zip(inputs, labels, strict=True)]

    counts = {"train": source.train_examples, "val": source.val_examples, "test": source.test_examples}
    splits, seeds = generated_splits(counts, seed, make_split)
    return DataBundle(train=splits["train"], val=splits["val"], test=splits["test"],
                      info={"vocab_size": vocab_size, "reference": reference},
                      splits={"generator_seeds": seeds})  # fmt: skip


@dataclasses.dataclass
class MQARSource:
    """Zoology's multi-query associative recall: ``num_pairs`` key-value pairs, then each key queried once."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    seq_len: int = 64
    num_pairs: int = 4
    vocab_size: int = 128
    power_a: float = tasks.MQAR_POWER_A
    train_examples: int = 20_000
    val_examples: int = 500
    test_examples: int = 1_000

    def __post_init__(self) -> None:
        tasks.check_mqar(self.seq_len, self.num_pairs, self.vocab_size, self.power_a)
        _check_counts(self)

    def examples(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return tasks.mqar_examples(count, self.seq_len, self.num_pairs, self.vocab_size, generator, self.power_a)

    def build(self, seed: int) -> DataBundle:
        return _bundle(self, seed, self.vocab_size, {"chance_accuracy": tasks.chance_accuracy("mqar", self.vocab_size)})


@dataclasses.dataclass
class InductionSource:
    """Induction heads: predict the token that followed the trigger's first occurrence at its second."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    seq_len: int = 64
    vocab_size: int = 16
    train_examples: int = 20_000
    val_examples: int = 500
    test_examples: int = 1_000

    def __post_init__(self) -> None:
        tasks.check_induction(self.seq_len, self.vocab_size)
        _check_counts(self)

    def examples(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return tasks.induction_examples(count, self.seq_len, self.vocab_size, generator)

    def build(self, seed: int) -> DataBundle:
        chance = tasks.chance_accuracy("induction", self.vocab_size)
        return _bundle(self, seed, self.vocab_size, {"chance_accuracy": chance})


@dataclasses.dataclass
class SelectiveCopySource:
    """Selective copying: reproduce the data tokens scattered among noise, in order, after the marker."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    seq_len: int = 64
    num_tokens: int = 8
    vocab_size: int = 16
    train_examples: int = 20_000
    val_examples: int = 500
    test_examples: int = 1_000

    def __post_init__(self) -> None:
        tasks.check_selective_copy(self.seq_len, self.num_tokens, self.vocab_size)
        _check_counts(self)

    def examples(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return tasks.selective_copy_examples(count, self.seq_len, self.num_tokens, self.vocab_size, generator)

    def build(self, seed: int) -> DataBundle:
        chance = tasks.chance_accuracy("selective_copy", self.vocab_size)
        return _bundle(self, seed, self.vocab_size, {"chance_accuracy": chance})


@dataclasses.dataclass
class ICLMarkovSource:
    """In-context Markov chains: order ``order`` over ``num_symbols`` symbols, a kernel with rows ~
    Dirichlet(``beta``) redrawn per sequence; the references are the chance accuracy and the Bayes losses of the
    validation and test sequences (``bayes_val_loss``, ``bayes_test_loss``): the add-``beta`` estimator's, the
    posterior predictive under that prior (add-1 only when ``beta`` is 1)."""

    feeds: ClassVar[tuple[str, ...]] = ("causal_lm",)

    seq_len: int = 128
    order: int = 1
    num_symbols: int = 2
    beta: float = 1.0
    train_examples: int = 20_000
    val_examples: int = 500
    test_examples: int = 1_000

    def __post_init__(self) -> None:
        check_chain_arguments(self.order, self.num_symbols, self.beta)
        if self.seq_len <= self.order:
            raise ValueError(f"icl_markov: seq_len={self.seq_len!r} must exceed order={self.order}")
        _check_counts(self)

    def examples(self, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        return tasks.icl_markov_examples(count, self.seq_len, self.order, self.num_symbols, generator, self.beta)

    def build(self, seed: int) -> DataBundle:
        bundle = _bundle(self, seed, self.num_symbols,
                         {"chance_accuracy": tasks.chance_accuracy("icl_markov", self.num_symbols)})  # fmt: skip
        def bayes_loss(name: str, split: Split) -> dict:
            return {f"bayes_{name}_loss": add_beta_loss(stacked(split, "input_ids"), self.order, self.num_symbols,
                                                        self.beta)}  # fmt: skip

        for name in ("val", "test"):
            bundle.info["reference"].update(bayes_loss(name, getattr(bundle, name)))
        return dataclasses.replace(bundle, reference_of=bayes_loss)


TASK_SOURCES = {"mqar": MQARSource, "induction": InductionSource, "selective_copy": SelectiveCopySource,
                "icl_markov": ICLMarkovSource}  # fmt: skip

__all__ = ["ICLMarkovSource", "InductionSource", "MQARSource", "SelectiveCopySource", "TASK_SOURCES"]
