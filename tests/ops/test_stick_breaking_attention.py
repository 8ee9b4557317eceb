"""Stick-breaking attention: the dense reference on a hand-computed case, the chunked log-space path against it on
outputs and every gradient (windows, attend_current, padding), the cache path against the full one, causality, and
no T×T tensor kept for the backward pass."""

from __future__ import annotations

import math

import pytest
import torch
from padding_masks import mixed_mask, padded_segments
from saved_memory import bytes_saved_for_backward
from twins import assert_same_gradients, randn

from markovformer.ops.stick_breaking_attention import (
    stick_breaking_attention,
    stick_breaking_attention_chunked,
    stick_breaking_attention_naive,
    stick_breaking_over_cache,
)

HEADS, HEAD_DIM, VALUE_DIM = 2, 4, 3


def _inputs(length, batch=4):
    tensors = (randn(batch, HEADS, length, HEAD_DIM, seed=1), randn(batch, HEADS, length, HEAD_DIM, seed=2),
               randn(batch, HEADS, length, VALUE_DIM, seed=3))  # fmt: skip
    return [t.requires_grad_(True) for t in tensors]


def test_weights_on_three_keys_by_hand():
    """Query 3 over keys 2, 1, 0 with shares 1/2, 1/2, 1/5: A = (1/5·1/2·1/2, 1/2·1/2, 1/2) = (0.05, 0.25, 0.5); the
    remaining 0.2 is dropped. The one-dimensional key k_j = logit(β_j) makes β_j = sigmoid(q·k_j) with q = 1."""
    shares = torch.tensor([0.2, 0.5, 0.5, 0.9], dtype=torch.float64)
    k = torch.logit(shares).view(1, 1, 4, 1)
    q = torch.ones(1, 1, 4, 1, dtype=torch.float64)
    v = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    expected = torch.tensor([0.05, 0.25, 0.5, 0.0], dtype=torch.float64)
    _, weights = stick_breaking_attention_naive(q, k, v, window=None)
    torch.testing.assert_close(weights[0, 0, 3], expected)
    torch.testing.assert_close(stick_breaking_attention(q, k, v, window=None)[0, 0, 3], expected)
    # attending to itself, query 3 first takes 0.9 and leaves the others a tenth of what they had
    with_current = stick_breaking_attention(q, k, v, window=None, attend_current=True)[0, 0, 3]
    torch.testing.assert_close(with_current, torch.cat([expected[:3] * 0.1, torch.tensor([0.9], dtype=torch.float64)]))
    # a window of 2 keys (t-2..t-1): key 0 is cut off and its share dropped with the rest
    torch.testing.assert_close(stick_breaking_attention(q, k, v, window=2)[0, 0, 3], expected * torch.tensor(
        [0.0, 1.0, 1.0, 1.0], dtype=torch.float64))  # fmt: skip


@pytest.mark.parametrize("window", [None, 0, 3])
@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_matches_naive_on_outputs_and_all_gradients(window, attend_current, chunk_size, padded):
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, attend_current=attend_current, attention_mask=mixed_mask(length) if padded else None)
    expected = stick_breaking_attention_naive(*tensors, **options)[0]
    got = stick_breaking_attention_chunked(*tensors, chunk_size=chunk_size, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)
    if padded:
        assert torch.equal(got[3], torch.zeros_like(got[3]))


@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("attend_current", [False, True])
def test_padding_segment_id_hides_padded_keys_without_a_mask(window, attend_current):
    """Segment id -1 (padding) matches no key, not even another padded one, as in the dense reference."""
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, attend_current=attend_current, segment_ids=padded_segments(length))
    expected = stick_breaking_attention_naive(*tensors, **options)[0]
    got = stick_breaking_attention(*tensors, chunk_size=4, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)


def test_weights_sum_to_at_most_one_and_the_first_query_sees_nothing():
    _, weights = stick_breaking_attention_naive(*(t.detach() for t in _inputs(9)), window=None)
    assert torch.all(weights.sum(-1) <= 1 + 1e-12) and torch.all(weights >= 0)
    assert torch.equal(weights[..., 0, :], torch.zeros_like(weights[..., 0, :]))


def test_output_does_not_read_the_future():
    q, k, v = (t.detach() for t in _inputs(9, batch=1))
    before = stick_breaking_attention(q, k, v, window=None, attend_current=True)
    k2, v2 = k.clone(), v.clone()
    k2[..., 6:, :] += 3.0
    v2[..., 6:, :] -= 2.0
    after = stick_breaking_attention(q, k2, v2, window=None, attend_current=True)
    torch.testing.assert_close(after[..., :6, :], before[..., :6, :], rtol=0, atol=0)


@pytest.mark.parametrize("window", [None, 3])
def test_cache_path_over_slots_in_position_order_matches_the_full_path(window):
    """Keys in position order after two empty slots (position -1), as a cache's visible slots hold them, give the
    full path's last rows. The empty slots hold junk and are called real: their position alone must hide them
    (with zeros in them, dropping that rule passed)."""
    q, k, v = (t.detach() for t in _inputs(8))
    mask = mixed_mask(8)
    full = stick_breaking_attention(q, k, v, window=window, attention_mask=mask)
    positions = torch.cat([torch.full((2,), -1), torch.arange(8)])
    real = torch.cat([torch.ones(mask.shape[0], 2, dtype=torch.bool), mask.bool()], dim=1)  # empty: by position
    keys = torch.cat([randn(4, HEADS, 2, HEAD_DIM, seed=4), k], dim=2)
    values = torch.cat([randn(4, HEADS, 2, VALUE_DIM, seed=5), v], dim=2)
    got = stick_breaking_over_cache(q[:, :, 6:], keys, values, torch.arange(6, 8), positions, real, window=window)
    torch.testing.assert_close(got, full[:, :, 6:])


def test_backward_keeps_nothing_of_size_t_by_t():
    length = 256
    q, k, v = (t.detach().float().requires_grad_(True) for t in _inputs(length, batch=1))
    largest = []

    def pack(saved):
        largest.append(saved.numel())
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        out = stick_breaking_attention(q, k, v, window=None, chunk_size=16)
    out.sum().backward()
    assert max(largest) < HEADS * length * length / 4


def test_backward_memory_grows_linearly_with_t_in_global_scope():
    """Each chunk builds its mask inside its recomputed block: built outside, every chunk's mask was saved for the
    backward pass, T²/2 bytes per batch row in global scope (3.1x from T = 512 to 1024, against 2.0x)."""

    def saved(length):
        options = dict(window=None, attention_mask=mixed_mask(length), segment_ids=padded_segments(length))
        return bytes_saved_for_backward(lambda: stick_breaking_attention(*_inputs(length), **options, chunk_size=32))

    assert saved(1024) < 2.3 * saved(512)


def test_half_precision_follows_float32():
    q, k, v = (t.detach().float() for t in _inputs(40, batch=1))
    reference = stick_breaking_attention(q, k, v, window=None)
    half = stick_breaking_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), window=None)
    assert torch.isfinite(half).all()
    torch.testing.assert_close(half.float(), reference, rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"window": -1}, "window must be"),
        ({"attention_mask": torch.ones(1, 4)}, "attention_mask must be"),
        ({"chunk_size": 0}, "chunk_size must be"),
        ({"segment_ids": torch.zeros(1, 8)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(1, 8\)"),
        ({"segment_ids": torch.zeros(6)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(6,\)"),
    ],
)
def test_bad_inputs_are_named(change, message):
    q, k, v = (t.detach() for t in _inputs(6, batch=1))
    arguments = dict(window=None, attention_mask=None, chunk_size=4)
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        stick_breaking_attention(q, k, v, **arguments)


def test_large_logits_on_hidden_keys_leave_the_gradients_finite():
    """Float32 logits above ~88 overflow exp: on keys a query may not see (the future), the forward's masked exp was
    discarded but its backward gave 0 * inf = NaN (a zoology-64 stick-breaking run went NaN this way, presumably)."""
    q = torch.full((1, 1, 6, 4), 10.0, requires_grad=True)  # every logit q·k/√4 = 200
    k = torch.full((1, 1, 6, 4), 10.0, requires_grad=True)
    v = torch.randn(1, 1, 6, 3, generator=torch.Generator().manual_seed(0)).requires_grad_(True)
    got = stick_breaking_attention_chunked(q, k, v, window=None)
    expected = stick_breaking_attention_naive(q, k, v, window=None)[0]
    torch.testing.assert_close(got, expected)
    (got * torch.arange(3.0)).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_float64_shares_near_one_are_exact():
    """Shares σ(z) with z just above 20: F.softplus (linear above z = 20) dropped e^{-z} from -log(1 - β), so a share
    of 1 - 7.6e-10 came out as 1 and the next key's weight lost 1e-9 relative: float64 results off at 1e-9. Here the
    weights against the closed form σ(z_j) Π_{l>j} σ(-z_l) (``math``, not torch) to float64's rounding."""
    z = [21.0, 22.5, 20.5]  # keys 0, 1, 2 of query 3 (key 2 nearest); k_j = z_j with q = 1
    k = torch.tensor(z + [0.0], dtype=torch.float64).view(1, 1, 4, 1)
    q = torch.ones(1, 1, 4, 1, dtype=torch.float64)
    v = torch.eye(4, dtype=torch.float64).view(1, 1, 4, 4)
    sigmoid = lambda x: 1.0 / (1.0 + math.exp(-x))  # noqa: E731
    expected = [sigmoid(z[0]) * sigmoid(-z[1]) * sigmoid(-z[2]), sigmoid(z[1]) * sigmoid(-z[2]), sigmoid(z[2]), 0.0]
    got = stick_breaking_attention(q, k, v, window=None)[0, 0, 3]
    torch.testing.assert_close(got, torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=1e-20)
