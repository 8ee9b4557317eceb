"""A synthetic translation task of known Markov order: no download, and word order matters.

Source: ``x_1..x_n``, symbols drawn uniformly from ``source_symbols``. Target, of the same length:

    y_i = table[x_i, y_{i-1}, ..., y_{i-order}]        (y_j for j < 1 is a start symbol)

for one fixed random ``table`` drawn from ``table_seed``. So the true order is ``order``: predicting y_i needs the
aligned source word and exactly the ``order`` previous target words (a decoder of order k < ``order`` must guess);
nothing earlier helps. The symbols are written as words of letters (source symbol 3 is ``sd``, target symbol 27 is
``tab``: a side prefix, then the index in base 26), so the pairs are plain text and go through the same joint BPE as
real data; ``build`` checks that every word is one token, so the order holds in tokens too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import torch

from markovformer.data.bundle import DataBundle
from markovformer.data.splits import generated_splits
from markovformer.data.translation.parallel import check_vocab_size, train_translation_tokenizer, translation_bundle

_MAX_TABLE_ENTRIES = 10_000_000


@dataclasses.dataclass
class SyntheticTranslationSource:
    """Synthetic sentence pairs of known Markov order: target word i is a fixed random table's entry for source word
    i and the ``order`` target words before it; lengths uniform in [min_length, max_length].

    The target is still a function of the source alone (y_i depends on x_1..x_i through the recurrence), as in real
    translation. What the order decides is how hard it is to compute: with k >= ``order`` previous targets in view,
    y_i is one table lookup; with fewer, the decoder must re-run the recurrence over the source prefix, which a
    shallow model does poorly beyond a few words. The defaults (4 source and 6 target symbols, order 2, 6-16 words)
    make that gap large: a small MAT of order 2 reaches BLEU ≈ 95 where order 1 stays near 25 (see
    ``markovformer experiment mat-order``).
    """

    feeds: ClassVar[tuple[str, ...]] = ("translation",)

    source_symbols: int = 4
    target_symbols: int = 6
    order: int = 2
    min_length: int = 6
    max_length: int = 16
    table_seed: int = 0
    vocab_size: int = 512
    train_examples: int = 4000
    val_examples: int = 200
    test_examples: int = 200

    def __post_init__(self) -> None:
        for name in ("source_symbols", "target_symbols", "order", "min_length", "train_examples", "val_examples",
                     "test_examples"):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"data.{name}={value!r} must be an int >= 1")
        if self.max_length < self.min_length:
            raise ValueError(f"data.max_length={self.max_length} must be >= min_length={self.min_length}")
        check_vocab_size(self.vocab_size)
        entries = self.source_symbols * (self.target_symbols + 1) ** self.order
        if entries > _MAX_TABLE_ENTRIES:
            raise ValueError(
                f"data.order={self.order} with {self.source_symbols} source and {self.target_symbols} target symbols "
                f"needs a table of {entries} entries (at most {_MAX_TABLE_ENTRIES})"
            )

    @property
    def start_symbol(self) -> int:
        """The table index standing for y_j with j < 1."""
        return self.target_symbols

    def table(self) -> torch.Tensor:
        """The rule, (source_symbols, target_symbols + 1, ... order times) long in [0, target_symbols)."""
        shape = (self.source_symbols,) + (self.target_symbols + 1,) * self.order
        generator = torch.Generator().manual_seed(self.table_seed)
        return torch.randint(self.target_symbols, shape, generator=generator)

    def translate(self, source: Sequence[int], table: torch.Tensor) -> list[int]:
        """The target symbols of ``source`` symbols under ``table`` (left to right, by the rule above)."""
        context = [self.start_symbol] * self.order  # y_{i-order}, ..., y_{i-1}
        target = []
        for symbol in source:
            word = int(table[(int(symbol), *reversed(context))])
            target.append(word)
            context = context[1:] + [word]
        return target

    def sample_symbols(self, count: int, table: torch.Tensor, generator: torch.Generator) -> list[tuple[list, list]]:
        """``count`` pairs of symbol lists (source, target)."""
        pairs = []
        for _ in range(count):
            length = int(torch.randint(self.min_length, self.max_length + 1, (), generator=generator))
            source = torch.randint(self.source_symbols, (length,), generator=generator).tolist()
            pairs.append((source, self.translate(source, table)))
        return pairs

    @staticmethod
    def source_text(symbols: Sequence[int]) -> str:
        return " ".join(_word("s", symbol) for symbol in symbols)

    @staticmethod
    def target_text(symbols: Sequence[int]) -> str:
        return " ".join(_word("t", symbol) for symbol in symbols)

    def text_pairs(self, seed: int) -> tuple[dict[str, list[tuple[str, str]]], dict[str, int]]:
        """Text pairs per split (each split from its own generator derived from ``seed``) and those seeds."""
        table = self.table()
        counts = {"train": self.train_examples, "val": self.val_examples, "test": self.test_examples}

        def make_split(count: int, generator: torch.Generator) -> list[tuple[str, str]]:
            return [(self.source_text(x), self.target_text(y)) for x, y in self.sample_symbols(count, table, generator)]

        return generated_splits(counts, seed, make_split)

    def build(self, seed: int) -> DataBundle:
        """Text pairs encoded with a joint BPE fitted on the training pairs plus a lexicon of every word (the
        vocabulary is known by construction), so no word form of val or test is left unmerged."""
        pairs, seeds = self.text_pairs(seed)
        sources = [self.source_text([i]) for i in range(self.source_symbols)]
        targets = [self.target_text([i]) for i in range(self.target_symbols)]
        lexicon = [(word, word) for word in sources + targets] + [(" ".join(sources), " ".join(targets))]
        tokenizer = train_translation_tokenizer(pairs["train"] + lexicon, self.vocab_size)
        record = {"kind": "synthetic_translation", "generator_seeds": seeds, "table_seed": self.table_seed,
                  "true_order": self.order}  # fmt: skip
        bundle = translation_bundle(pairs, tokenizer, splits=record)
        _check_one_token_per_word(pairs, bundle, self.vocab_size)
        bundle.info["true_order"] = self.order
        return bundle


def _word(prefix: str, symbol: int) -> str:
    """``prefix`` then ``symbol`` in base 26 (a, b, ..., z, ba, bb, ...): letters only, since the byte-level
    pre-tokenizer splits letters from digits and a word like ``s3`` could never become one token."""
    letters = ""
    while True:
        symbol, digit = divmod(symbol, 26)
        letters = chr(ord("a") + digit) + letters
        if symbol == 0:
            return prefix + letters


def _check_one_token_per_word(pairs: dict[str, list[tuple[str, str]]], bundle: DataBundle, vocab_size: int) -> None:
    """Raise unless every sentence of every split encoded to one token per word."""
    for name, split_pairs in pairs.items():
        for index, (pair, example) in enumerate(zip(split_pairs, getattr(bundle, name), strict=True)):
            for text, ids in zip(pair, (example["src_ids"], example["tgt_ids"]), strict=True):
                if len(ids) != len(text.split()):
                    raise ValueError(
                        f"data.vocab_size={vocab_size} splits a word of {name} pair {index} ({text[:40]!r}) into "
                        "several BPE tokens, so the task's order would not hold in tokens; use a larger vocab_size"
                    )
