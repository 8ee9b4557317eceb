"""collate pads to a hand-built batch; split_indices / contiguous_split are disjoint, covering and seeded."""

from __future__ import annotations

import pytest
import torch

from markovformer.data.collate import collate
from markovformer.data.splits import contiguous_split, split_indices, split_sizes


def test_collate_token_ids_with_sequence_labels_of_another_length():
    examples = [
        {"input_ids": torch.tensor([5, 6, 7]), "labels": torch.tensor([1, 2])},
        {"input_ids": torch.tensor([8]), "labels": torch.tensor([3, 4, 5, 6])},
        {"input_ids": torch.tensor([9, 10]), "labels": torch.tensor([7])},
    ]
    batch = collate(examples)
    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert torch.equal(batch["input_ids"], torch.tensor([[5, 6, 7], [8, 0, 0], [9, 10, 0]]))
    assert torch.equal(batch["attention_mask"], torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0]]))
    assert torch.equal(batch["labels"], torch.tensor([[1, 2, -100, -100], [3, 4, 5, 6], [7, -100, -100, -100]]))
    assert batch["input_ids"].dtype == batch["labels"].dtype == batch["attention_mask"].dtype == torch.long


def test_collate_features_with_scalar_labels():
    first, second = torch.arange(6.0).view(3, 2), torch.tensor([[10.0, 11.0]])
    examples = [
        {"input_features": first, "labels": torch.tensor(2)},
        {"input_features": second, "labels": torch.tensor(0)},
    ]
    batch = collate(examples)
    expected = torch.tensor([[[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], [[10.0, 11.0], [0.0, 0.0], [0.0, 0.0]]])
    assert torch.equal(batch["input_features"], expected)
    assert torch.equal(batch["attention_mask"], torch.tensor([[1, 1, 1], [1, 0, 0]]))
    assert torch.equal(batch["labels"], torch.tensor([2, 0]))


def test_collate_keeps_every_id_and_label_whatever_the_examples_integer_dtypes():
    """Ids, positions and labels are padded as long, not in the first example's dtype: a uint8 example before an
    int64 one wrapped the id 300 to 44, and uint8 labels of unequal lengths failed inside torch ("value cannot be
    converted to type uint8_t without overflow": the padding -100) where equal lengths collated."""
    examples = [
        {"input_ids": torch.tensor([1, 2], dtype=torch.uint8), "labels": torch.tensor([3], dtype=torch.uint8),
         "position_ids": torch.tensor([0, 1], dtype=torch.uint8)},
        {"input_ids": torch.tensor([300, 5, 6]), "labels": torch.tensor([200, 4], dtype=torch.uint8),
         "position_ids": torch.tensor([0, 1, 300])},
    ]  # fmt: skip
    batch = collate(examples)
    assert torch.equal(batch["input_ids"], torch.tensor([[1, 2, 0], [300, 5, 6]]))
    assert torch.equal(batch["position_ids"], torch.tensor([[0, 1, 0], [0, 1, 300]]))
    assert torch.equal(batch["labels"], torch.tensor([[3, -100], [200, 4]]))
    assert batch["input_ids"].dtype == batch["position_ids"].dtype == batch["labels"].dtype == torch.long


def test_collate_pads_position_ids_with_zero():
    """The docstring: 0, a valid index of any position table (-1, the padding of nothing else, would not be)."""
    tokens, positions = [torch.tensor([5, 6, 7]), torch.tensor([8])], [torch.tensor([3, 0, 1]), torch.tensor([0])]
    examples = [{"input_ids": t, "labels": t, "position_ids": p} for t, p in zip(tokens, positions, strict=True)]
    batch = collate(examples)
    assert torch.equal(batch["position_ids"], torch.tensor([[3, 0, 1], [0, 0, 0]]))
    assert batch["position_ids"].dtype == torch.long


def test_collate_examples_without_labels_gives_a_batch_without_labels():
    """Labels are optional (examples to score or generate from): the batch then holds only the padded inputs."""
    batch = collate([{"input_ids": torch.tensor([4, 5])}, {"input_ids": torch.tensor([6])}])
    assert sorted(batch) == ["attention_mask", "input_ids"]
    assert torch.equal(batch["input_ids"], torch.tensor([[4, 5], [6, 0]]))
    assert torch.equal(batch["attention_mask"], torch.tensor([[1, 1], [1, 0]]))


def test_collate_copies_so_editing_the_batch_leaves_examples_alone():
    shared = torch.tensor([1, 2, 3])
    batch = collate([{"input_ids": shared, "labels": shared}])
    batch["labels"][0, 0] = -100
    assert torch.equal(shared, torch.tensor([1, 2, 3]))
    assert torch.equal(batch["input_ids"], torch.tensor([[1, 2, 3]]))


@pytest.mark.parametrize(
    "examples, message",
    [
        ([], "empty"),
        (
            [
                {"input_ids": torch.tensor([1]), "labels": torch.tensor(0)},
                {"input_ids": torch.tensor([1]), "labels": torch.tensor([0])},
            ],
            "dims",
        ),
        ([{"input_features": torch.zeros(2, 3)}, {"input_features": torch.zeros(2, 4)}], "example 1"),
        ([{"input_ids": torch.tensor([1])}, {"input_ids": torch.tensor([], dtype=torch.long)}], "example 1"),
        ([{"input_ids": torch.tensor([1]), "mask": torch.tensor([1])}], "keys"),
        ([{"input_ids": torch.tensor([1]), "labels": torch.tensor(0)}, {"input_ids": torch.tensor([1])}],
         r"^example 1 has keys \['input_ids'\] but example 0 has \['input_ids', 'labels'\]$"),
    ],
)
def test_collate_rejects_bad_examples(examples, message):
    with pytest.raises(ValueError, match=message):
        collate(examples)


@pytest.mark.parametrize("n", [0, 1, 7, 10, 101])
def test_split_indices_disjoint_covering_and_sized(n):
    train, val, test = split_indices(n, (0.8, 0.1, 0.1), seed=3)
    assert sorted(train + val + test) == list(range(n))
    assert (len(train), len(val), len(test)) == split_sizes(n, (0.8, 0.1, 0.1))
    assert all(part == sorted(part) for part in (train, val, test))


def test_split_indices_is_seeded():
    assert split_indices(50, seed=1) == split_indices(50, seed=1)
    assert split_indices(50, seed=1) != split_indices(50, seed=2)


def test_split_sizes_closed_form_and_bad_fractions():
    assert split_sizes(10, (0.8, 0.1, 0.1)) == (8, 1, 1)
    assert split_sizes(100, (0.7, 0.15, 0.15)) == (70, 15, 15)
    assert split_sizes(2, (0.0, 0.5, 0.5)) == (0, 1, 1)
    for bad_n in [-1, 2.0, True]:
        with pytest.raises(ValueError, match=rf"^split size n must be a non-negative int, got {bad_n!r}$"):
            split_sizes(bad_n, (0.8, 0.1, 0.1))
    for bad in [(0.5, 0.5), (0.8, 0.3, 0.1), (1.2, -0.1, -0.1), (0.8, 0.1, 0.105)]:  # named as the config's option
        with pytest.raises(ValueError, match=r"^data\.fractions must "):
            split_sizes(10, bad)


@pytest.mark.parametrize("n", range(12))
@pytest.mark.parametrize("fractions", [(0.0, 0.5, 0.5), (0.8, 0.1, 0.1), (0.2, 0.5, 0.3), (0.0, 0.75, 0.25)])
def test_split_sizes_give_val_its_rounded_share_and_test_the_rest(n, fractions):
    """When val and test both round up past n (n = 3 at halves: 2 + 2), the docstring keeps val's round(n * f)
    and cuts test; cutting val instead gives (0, 1, 2)."""
    train, val, test = split_sizes(n, fractions)
    assert train + val + test == n and min(train, val, test) >= 0
    assert val == min(round(n * fractions[1]), n)


def test_contiguous_split_is_in_order_and_adjacent():
    train, val, test = contiguous_split(20, (0.7, 0.2, 0.1))
    assert (train, val, test) == (range(0, 14), range(14, 18), range(18, 20))

