"""Train/validation/test splits: how many items each part gets, and which ones (random or in order)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def split_sizes(n: int, fractions: Sequence[float]) -> tuple[int, int, int]:
    """Sizes (train, val, test) summing to ``n``: val and test get ``round(n * fraction)``, train the rest.

    ``fractions``: three non-negative numbers summing to 1 (within 1e-6)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"split size n must be a non-negative int, got {n!r}")
    fractions = tuple(fractions)
    if len(fractions) != 3 or any(not isinstance(f, (int, float)) or not 0 <= f <= 1 for f in fractions):
        raise ValueError(f"data.fractions must be three numbers in [0, 1] (train, val, test), got {fractions!r}")
    if abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"data.fractions must sum to 1, got {fractions!r} (sum {sum(fractions)})")
    n_val, n_test = round(n * fractions[1]), round(n * fractions[2])
    if n_val + n_test > n:  # both rounded up on a tiny n
        n_test = n - n_val
    return n - n_val - n_test, n_val, n_test


def split_indices(
    n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1), seed: int = 0
) -> tuple[list[int], list[int], list[int]]:
    """A seeded random split of ``range(n)`` into (train, val, test) index lists: disjoint, covering, and the same
    for the same ``(n, fractions, seed)``. Sizes follow ``split_sizes``; each list is sorted (shuffling the
    examples for training is the data loader's job)."""
    n_train, n_val, _ = split_sizes(n, fractions)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    parts = order[:n_train], order[n_train : n_train + n_val], order[n_train + n_val :]
    return sorted(parts[0]), sorted(parts[1]), sorted(parts[2])


def contiguous_split(n: int, fractions: Sequence[float] = (0.8, 0.1, 0.1)) -> tuple[range, range, range]:
    """An in-order split of ``range(n)``: train first, then val, then test, as three adjacent ranges covering it.
    Used where order carries information (text, time series) so that no later item leaks into training."""
    n_train, n_val, _ = split_sizes(n, fractions)
    return range(0, n_train), range(n_train, n_train + n_val), range(n_train + n_val, n)


def generated_splits(counts: dict[str, int], seed: int, make_split) -> tuple[dict[str, list], dict[str, int]]:
    """Generated data's splits, each from its own generator seeded from ``seed``, so no two share a stream.

    ``make_split(count, generator)`` returns that many examples. Returns the splits by name and the seed of each
    (for the run's record of what went where).
    """
    seeds = {name: seed * 7 + offset for offset, name in enumerate(counts)}
    splits = {name: make_split(count, torch.Generator().manual_seed(seeds[name])) for name, count in counts.items()}
    return splits, seeds
