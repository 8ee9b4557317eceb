"""Selective attention: the dense reference on a hand-computed case, the chunked path (per-key running sum carried
between chunks) against it on outputs and every gradient (windows, padding, protect_first), the cache path against
the full one, causality, and no T×T tensor kept for the backward pass."""

from __future__ import annotations

import math

import pytest
import torch
from padding_masks import mixed_mask
from saved_memory import bytes_saved_for_backward
from twins import assert_same_gradients, randn

from markovformer.ops.selective_attention import (
    first_real_positions,
    selective_attention,
    selective_attention_chunked,
    selective_attention_naive,
    selective_over_cache,
)

HEADS, HEAD_DIM, VALUE_DIM = 2, 4, 3


def _inputs(length, batch=4):
    tensors = (randn(batch, HEADS, length, HEAD_DIM, seed=1), randn(batch, HEADS, length, HEAD_DIM, seed=2),
               randn(batch, HEADS, length, VALUE_DIM, seed=3))  # fmt: skip
    return [t.requires_grad_(True) for t in tensors]


@pytest.mark.parametrize("protect_first", [True, False])
def test_weights_by_hand(protect_first):
    """One-dimensional heads: z[m, j] = q_m k_j. With q = (1, 1, -2, 0) and k = (1, 1, 1, 1), query 3's own logits
    are all 0, and key j is lowered by F[3, j] = Σ_{j<m<3} relu(q_m k_j): F[3, 0] = relu(1) + relu(-2) = 1
    (0 when position 0 is protected), F[3, 1] = relu(-2) = 0, F[3, 2] = F[3, 3] = 0. Query 2 on key 0: F = 1."""
    q = torch.tensor([1.0, 1.0, -2.0, 0.0], dtype=torch.float64).view(1, 1, 4, 1)
    k = torch.ones(1, 1, 4, 1, dtype=torch.float64)
    v = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    masked = 0.0 if protect_first else 1.0
    row3 = torch.tensor([math.exp(-masked), 1.0, 1.0, 1.0], dtype=torch.float64)
    row2 = torch.tensor([-2.0 - masked, -2.0, -2.0, -math.inf], dtype=torch.float64).softmax(-1)
    _, weights = selective_attention_naive(q, k, v, window=None, protect_first=protect_first)
    torch.testing.assert_close(weights[0, 0, 3], row3 / row3.sum())
    torch.testing.assert_close(weights[0, 0, 2], row2)
    got = selective_attention(q, k, v, window=None, protect_first=protect_first, chunk_size=1)
    torch.testing.assert_close(got[0, 0, 2:], torch.stack([row2, row3 / row3.sum()]))


def test_only_the_first_head_selects():
    """Changing a later head's q and k leaves the first head's output as it was (the selection is head 0's)."""
    q, k, v = (t.detach() for t in _inputs(9))
    before = selective_attention(q, k, v, window=None)
    q2, k2 = q.clone(), k.clone()
    q2[:, 1:] += 1.0
    k2[:, 1:] -= 1.0
    after = selective_attention(q2, k2, v, window=None)
    torch.testing.assert_close(after[:, 0], before[:, 0], rtol=0, atol=0)
    assert not torch.allclose(after[:, 1], before[:, 1])


@pytest.mark.parametrize("window", [None, 0, 3])
@pytest.mark.parametrize("protect_first", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_matches_naive_on_outputs_and_all_gradients(window, protect_first, chunk_size, padded):
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, protect_first=protect_first, attention_mask=mixed_mask(length) if padded else None)
    expected = selective_attention_naive(*tensors, **options)[0]
    got, _ = selective_attention_chunked(*tensors, chunk_size=chunk_size, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)
    if padded:
        assert torch.equal(got[3], torch.zeros_like(got[3]))


def test_selection_lowers_the_logits_it_should():
    """The selection only ever removes mass: the dense weights equal softmax(z - F) with F >= 0 that grows with
    the query (a running sum), and the first two queries are untouched (nothing lies between them and a key)."""
    q, k, v = (t.detach() for t in _inputs(9))
    _, weights = selective_attention_naive(q, k, v, window=None, protect_first=False)
    logits = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    plain = logits.masked_fill(~causal, -math.inf).softmax(-1)
    torch.testing.assert_close(weights[..., :2, :], plain[..., :2, :])
    assert not torch.allclose(weights[..., 2:, :], plain[..., 2:, :])


def test_output_does_not_read_the_future():
    q, k, v = (t.detach() for t in _inputs(9, batch=1))
    before = selective_attention(q, k, v, window=None, chunk_size=4)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[..., 6:, :] += 3.0
    k2[..., 6:, :] += 3.0
    v2[..., 6:, :] -= 2.0
    after = selective_attention(q2, k2, v2, window=None, chunk_size=4)
    torch.testing.assert_close(after[..., :6, :], before[..., :6, :], rtol=0, atol=0)


@pytest.mark.parametrize("window", [None, 3])
def test_cache_path_in_any_slot_order_matches_the_full_path(window):
    """Keys in a shuffled slot order, carrying the selection of the tokens before the new queries, give the full
    path's last rows and each key's total selection."""
    q, k, v = (t.detach() for t in _inputs(8))
    mask = mixed_mask(8)
    full, totals = selective_attention(q, k, v, window=window, attention_mask=mask, return_selection=True)
    _, carried = selective_attention(q[:, :, :6], k[:, :, :6], v[:, :, :6], window=window,
                                     attention_mask=mask[:, :6], return_selection=True)  # fmt: skip
    order = torch.tensor([5, 0, 7, 2, 6, 1, 4, 3])
    carried = torch.cat([carried, carried.new_zeros(4, 2)], dim=1)[:, order]
    got, after = selective_over_cache(q[:, :, 6:], k[:, :, order], v[:, :, order], carried, torch.arange(6, 8),
                                      order, mask.bool()[:, order], mask.bool()[:, 6:], window=window,
                                      protected=first_real_positions(mask, 4, q.device))  # fmt: skip
    torch.testing.assert_close(got, full[:, :, 6:])
    torch.testing.assert_close(after, totals[:, order])


def test_backward_keeps_nothing_of_size_t_by_t():
    length = 256
    q, k, v = (t.detach().float().requires_grad_(True) for t in _inputs(length, batch=1))
    largest = []

    def pack(saved):
        largest.append(saved.numel())
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        out = selective_attention(q, k, v, window=None, chunk_size=16)
    out.sum().backward()
    assert max(largest) < HEADS * length * length / 4


def _bytes_saved_for_backward(length, batch=1, **options):
    """The bytes of the distinct storages autograd keeps for the backward pass of a float32 call."""
    q, k, v = (t.detach().float().requires_grad_(True) for t in _inputs(length, batch=batch))
    return bytes_saved_for_backward(lambda: selective_attention(q, k, v, **options))


def test_backward_memory_grows_linearly_with_t_in_local_scope():
    """Each chunk saves only its own keys' running sums: a view of a (B, T) tensor rebuilt every chunk kept that whole
    tensor alive per chunk, O(T²/chunk) in all (3.0x from T = 256 to 512, against 2.0x)."""
    options = dict(window=4, chunk_size=8)
    assert _bytes_saved_for_backward(512, **options) < 2.3 * _bytes_saved_for_backward(256, **options)


def test_backward_keeps_no_chunk_masks_in_global_scope():
    """Each chunk builds its two masks inside its recomputed block: built outside, every chunk's were saved for the
    backward pass, 2 bytes per (query, key) pair and batch row (3.4x from T = 512 to 1024, against 2.2x). What stays
    quadratic is the running sums handed from chunk to chunk, 4 bytes per key, chunk and row: O(B·T²/chunk), 1/64 of the
    masks at 128 queries per chunk."""

    def saved(length):
        return _bytes_saved_for_backward(length, batch=4, window=None, attention_mask=mixed_mask(length),
                                         chunk_size=128)  # fmt: skip

    assert saved(1024) < 2.3 * saved(512)


@pytest.mark.parametrize(
    ("change", "message"),
    [({"window": -1}, "window must be"), ({"attention_mask": torch.ones(1, 4)}, "attention_mask must be"),
     ({"chunk_size": 0}, "chunk_size must be")],  # fmt: skip
)
def test_bad_inputs_are_named(change, message):
    q, k, v = (t.detach() for t in _inputs(6, batch=1))
    arguments = dict(window=None, attention_mask=None, chunk_size=4)
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        selective_attention(q, k, v, **arguments)
