"""MAT's order k -> causal window: position i sees exactly positions i-k+1..i (k keys, itself included)."""

from __future__ import annotations

import pytest
import torch

from markovformer.ops.lags import lag_matrix, order_to_window, visible


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_order_k_shows_the_last_k_positions(order):
    positions = torch.arange(9)
    allowed = visible(lag_matrix(positions, positions), window=order_to_window(order), causal=True)
    expected = torch.tensor([[i - order < j <= i for j in range(9)] for i in range(9)])
    assert torch.equal(allowed, expected)
    assert order_to_window(order) == order - 1


def test_unbounded_order_is_an_unbounded_window():
    assert order_to_window(None) is None


@pytest.mark.parametrize("order", [0, -2, 1.5, True, "3"])
def test_bad_order_names_the_value(order):
    with pytest.raises(ValueError, match=f"order={order!r}"):
        order_to_window(order)
