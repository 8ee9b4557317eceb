"""GRU injection: right padding never reaches the real tokens; left padding is refused."""

from __future__ import annotations

import pytest
import torch

from markovformer.layers import GRUInjection

D_MODEL, LENGTH = 8, 9


@pytest.mark.parametrize("bidirectional", [False, True])
def test_right_padding_leaves_real_positions_unchanged(bidirectional):
    torch.manual_seed(0)
    gru = GRUInjection(D_MODEL, bidirectional=bidirectional).double()
    x = torch.randn(3, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 1:] = 0
    out = gru(x, mask)
    for row, length in enumerate((LENGTH, 5, 1)):
        alone = gru(x[row : row + 1, :length])
        torch.testing.assert_close(out[row, :length], alone[0], rtol=1e-12, atol=1e-12)
        assert torch.equal(out[row, length:], torch.zeros_like(out[row, length:]))
    # Unpadded, the padded frames would reach the last real token of a bidirectional GRU (and never a forward one).
    full = gru(x)
    assert torch.allclose(full[1, :5], out[1, :5]) != bidirectional


def test_left_padding_raises():
    gru = GRUInjection(D_MODEL).double()
    x = torch.randn(2, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, :2] = 0
    with pytest.raises(ValueError, match="right-padded"):
        gru(x, mask)
