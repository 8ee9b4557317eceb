"""CoPE attention: contextual positions for given gates by hand, the chunked path against the dense reference on
outputs and every gradient (q, k, v, position embeddings; windows, padding), clamping at npos_max, the cache path in
any slot order, and no T×T tensor kept for the backward pass."""

from __future__ import annotations

import pytest
import torch
from padding_masks import mixed_mask, padded_segments
from saved_memory import bytes_saved_for_backward
from twins import assert_same_gradients, randn

from markovformer.ops.cope_attention import (
    cope_attention,
    cope_attention_chunked,
    cope_attention_naive,
    cope_over_cache,
    cope_positions_naive,
)

HEADS, HEAD_DIM, VALUE_DIM, NPOS = 2, 4, 3, 5


def _inputs(length, batch=4):
    tensors = (randn(batch, HEADS, length, HEAD_DIM, seed=1), randn(batch, HEADS, length, HEAD_DIM, seed=2),
               randn(batch, HEADS, length, VALUE_DIM, seed=3), randn(NPOS, HEAD_DIM, seed=4))  # fmt: skip
    return [t.requires_grad_(True) for t in tensors]


def _hand_case(npos):
    """Query 3 with q = 1 in one dimension, keys k_j = logit(g_j) for gates g = (1/2, 1/4, 3/4, 1/2), v = identity."""
    gates = torch.tensor([0.5, 0.25, 0.75, 0.5], dtype=torch.float64)
    q = torch.ones(1, 1, 4, 1, dtype=torch.float64)
    k = torch.logit(gates).view(1, 1, 4, 1)
    v = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    table = torch.tensor([0.0, 1.0, 4.0, 9.0], dtype=torch.float64)[:npos, None]
    return gates, q, k, v, table


def test_positions_and_weights_by_hand():
    """p_{3,j} = Σ_{l>=j} g_l = (2, 1.5, 1.25, 0.5); with e = (0, 1, 4, 9): e(p) = (4, 2.5, 1.75, 0.5), so the
    scores are logit(g) + e(p). With npos_max = 2, p clamps to 1 and e(p) = (1, 1, 1, 0.5)."""
    gates, q, k, v, table = _hand_case(4)
    torch.testing.assert_close(cope_positions_naive(gates[None]), torch.tensor([[2.0, 1.5, 1.25, 0.5]],
                                                                                 dtype=torch.float64))  # fmt: skip
    for npos, interpolated in ((4, [4.0, 2.5, 1.75, 0.5]), (2, [1.0, 1.0, 1.0, 0.5])):
        expected = torch.softmax(torch.logit(gates) + torch.tensor(interpolated, dtype=torch.float64), -1)
        torch.testing.assert_close(cope_attention_naive(q, k, v, table[:npos], window=None)[1][0, 0, 3], expected)
        torch.testing.assert_close(cope_attention(q, k, v, table[:npos], window=None)[0, 0, 3], expected)


@pytest.mark.parametrize("window", [None, 0, 3])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_matches_naive_on_outputs_and_all_gradients(window, chunk_size, padded):
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, attention_mask=mixed_mask(length) if padded else None)
    expected = cope_attention_naive(*tensors, **options)[0]
    got = cope_attention_chunked(*tensors, chunk_size=chunk_size, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)
    if padded:
        assert torch.equal(got[3], torch.zeros_like(got[3]))


@pytest.mark.parametrize("window", [None, 3])
def test_cache_path_over_slots_in_position_order_matches_the_full_path(window):
    """Keys in position order after two empty slots (position -1), as a cache's visible slots hold them, give the
    full path's last rows."""
    q, k, v, table = (t.detach() for t in _inputs(8))
    mask = mixed_mask(8)
    full = cope_attention(q, k, v, table, window=window, attention_mask=mask)
    empty = torch.zeros_like(k[:, :, :2])
    positions = torch.cat([torch.full((2,), -1), torch.arange(8)])
    real = torch.cat([torch.ones(mask.shape[0], 2, dtype=torch.bool), mask.bool()], dim=1)  # empty: by position
    keys, values = torch.cat([empty, k], dim=2), torch.cat([torch.zeros_like(v[:, :, :2]), v], dim=2)
    got = cope_over_cache(q[:, :, 6:], keys, values, table, torch.arange(6, 8), positions, real, window=window)
    torch.testing.assert_close(got, full[:, :, 6:])


@pytest.mark.parametrize("window", [None, 3])
def test_padding_segment_id_hides_padded_keys_without_a_mask(window):
    """Segment id -1 (padding) matches no key, not even another padded one, as in the dense reference."""
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, segment_ids=padded_segments(length))
    expected = cope_attention_naive(*tensors, **options)[0]
    got = cope_attention(*tensors, chunk_size=4, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)


def test_half_precision_follows_a_float64_reference():
    """bfloat16 inputs against float64 on the same (bfloat16-rounded) values: positions up to P - 1 = 63 counted in
    bfloat16 step by 0.25 near 32..63 (a relative error of 0.12 here); counted in float32, as the other ops, 0.007."""
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 256, 16, generator=generator).bfloat16() for _ in range(3))
    table = (torch.randn(64, 16, generator=generator) * 0.5).bfloat16()
    reference = cope_attention(*(t.double() for t in (q, k, v, table)), window=None)
    for got in (cope_attention(q, k, v, table, window=None), cope_attention_naive(q, k, v, table, window=None)[0]):
        assert got.dtype == torch.bfloat16
        assert ((got.double() - reference).norm() / reference.norm()).item() < 0.02


def test_backward_keeps_nothing_of_size_t_by_t():
    length = 256
    tensors = [t.detach().float().requires_grad_(True) for t in _inputs(length, batch=1)]
    largest = []

    def pack(saved):
        largest.append(saved.numel())
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        out = cope_attention(*tensors, window=None, chunk_size=16)
    out.sum().backward()
    assert max(largest) < HEADS * length * length / 4


def test_backward_memory_grows_linearly_with_t_in_global_scope():
    """Each chunk builds its mask inside its recomputed block: built outside, every chunk's mask was saved for the
    backward pass, T²/2 bytes per batch row in global scope (3.1x from T = 512 to 1024, against 2.0x)."""

    def saved(length):
        options = dict(window=None, attention_mask=mixed_mask(length), segment_ids=padded_segments(length))
        return bytes_saved_for_backward(lambda: cope_attention(*_inputs(length), **options, chunk_size=32))

    assert saved(1024) < 2.3 * saved(512)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"position_embeddings": torch.zeros(5, 3)}, "position_embeddings must be"),
        ({"window": -1}, "window must"),
        ({"position_embeddings": torch.zeros(0, HEAD_DIM)}, r"position_embeddings must be .* got \(0, 4\)"),
        ({"attention_mask": torch.ones(1, 4)}, "attention_mask must be"),
        ({"chunk_size": 0}, "chunk_size must be"),
        ({"segment_ids": torch.zeros(1, 8)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(1, 8\)"),
        ({"segment_ids": torch.zeros(6)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(6,\)"),
    ],
)
def test_bad_inputs_are_named(change, message):
    q, k, v, table = (t.detach() for t in _inputs(6, batch=1))
    arguments = dict(position_embeddings=table, window=None, attention_mask=None, chunk_size=4)
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        cope_attention(q, k, v, arguments.pop("position_embeddings"), **arguments)
