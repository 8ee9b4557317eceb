"""Relative-bias attention (T5 buckets, dynamic position bias): the dense bias against its definition, the chunked
O(T)-memory path against the dense reference on outputs and every gradient (q, k, v, per-lag biases), causal and
bidirectional, windowed and padded, and T5's buckets on hand-computed distances."""

from __future__ import annotations

import pytest
import torch
from padding_masks import mixed_mask, padded_segments
from saved_memory import bytes_saved_for_backward
from twins import assert_dropout_of_probabilities, assert_same_gradients, randn

from markovformer.layers.position_bias_attention import T5BiasAttention, T5BiasOptions
from markovformer.ops.relative_bias_attention import (
    dense_relative_bias,
    relative_bias_attention,
    relative_bias_attention_chunked,
    relative_bias_attention_naive,
)
from markovformer.ops.relative_bias_attention.buckets import t5_buckets

HEADS, HEAD_DIM, VALUE_DIM = 2, 4, 3


def _inputs(length, batch=4):
    q, k = randn(batch, HEADS, length, HEAD_DIM, seed=1), randn(batch, HEADS, length, HEAD_DIM, seed=2)
    v, lag_bias = randn(batch, HEADS, length, VALUE_DIM, seed=3), randn(HEADS, 2 * length - 1, seed=4)
    return [t.requires_grad_(True) for t in (q, k, v, lag_bias)]


def test_dense_bias_reads_the_column_of_each_lag():
    lag_bias = torch.arange(2 * 5 - 1, dtype=torch.float64)[None].repeat(2, 1)
    dense = dense_relative_bias(lag_bias, 5)
    assert dense[0, 4, 1] == 3 + 4 and dense[1, 1, 4] == -3 + 4 and dense[0, 2, 2] == 4


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 0, 3])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
@pytest.mark.parametrize("padded", [False, True])
def test_chunked_matches_naive_on_outputs_and_all_gradients(causal, window, chunk_size, padded):
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, causal=causal, attention_mask=mixed_mask(length) if padded else None)
    expected = relative_bias_attention_naive(*tensors, **options)[0]
    got = relative_bias_attention_chunked(*tensors, chunk_size=chunk_size, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)
    if padded:  # the fully padded row sees no key: zeros, not NaN
        assert torch.equal(got[3], torch.zeros_like(got[3]))


@pytest.mark.parametrize("causal", [True, False])
def test_dropout_drops_probabilities_and_the_recomputed_backward_drops_the_same(causal):
    q, k, _, lag_bias = (t.detach() for t in _inputs(12, batch=2))
    assert_dropout_of_probabilities(
        lambda v, p: relative_bias_attention_chunked(q, k, v, lag_bias, window=None, causal=causal, dropout_p=p,
                                                     chunk_size=4),  # fmt: skip
        batch=2, heads=HEADS, length=12, dropout_p=0.5,
    )


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 3])
def test_padding_segment_id_hides_padded_keys_without_a_mask(causal, window):
    """Segment id -1 (padding) matches no key, not even another padded one, as in the dense reference."""
    length = 11
    tensors = _inputs(length)
    options = dict(window=window, causal=causal, segment_ids=padded_segments(length))
    expected = relative_bias_attention_naive(*tensors, **options)[0]
    got = relative_bias_attention(*tensors, chunk_size=4, **options)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    assert_same_gradients(got, expected, tensors, rtol=1e-10, atol=1e-10)


def test_a_minus_infinity_bias_on_the_only_visible_key_gives_zeros_not_the_future():
    """Causal, lag 0 biased -inf: query 0's only key is hidden, so it sees nothing and outputs 0 (SPEC), not the
    mean of the future values (v = key position) that the masked keys would otherwise take."""
    length = 4
    q = k = torch.zeros(1, 1, length, 2, dtype=torch.float64)
    v = torch.arange(length, dtype=torch.float64).view(1, 1, length, 1).repeat(1, 1, 1, 2)
    lag_bias = torch.zeros(1, 2 * length - 1, dtype=torch.float64)
    lag_bias[0, length - 1] = -torch.inf  # column lag + T - 1: lag 0
    for got in (relative_bias_attention(q, k, v, lag_bias, window=None, causal=True),
                relative_bias_attention_naive(q, k, v, lag_bias, window=None, causal=True)[0]):  # fmt: skip
        assert torch.equal(got[0, 0, 0], torch.zeros(2, dtype=torch.float64))
        torch.testing.assert_close(got[0, 0, 1:, 0], torch.tensor([0.0, 0.5, 1.0], dtype=torch.float64))


def test_a_bias_that_grows_by_one_per_lag_is_alibi_with_slope_minus_one():
    """b(l) = -|l|: the dense softmax with a -distance penalty, written from the lag itself."""
    q, k, v, _ = (t.detach() for t in _inputs(7, batch=2))
    lags = torch.arange(-6, 7, dtype=torch.float64)
    positions = torch.arange(7)
    distance = (positions[:, None] - positions[None, :]).abs().to(torch.float64)
    scores = q @ k.transpose(-1, -2) / HEAD_DIM**0.5 - distance
    expected = torch.softmax(scores.masked_fill(positions[:, None] < positions[None, :], -torch.inf), -1) @ v
    got = relative_bias_attention(q, k, v, -lags.abs()[None].repeat(HEADS, 1), window=None, causal=True)
    torch.testing.assert_close(got, expected)


def test_t5_buckets_on_hand_computed_distances():
    """32 buckets, max distance 128: causal exact below 16, then 16 + floor(16·log(d/16)/log 8), last bucket 31;
    bidirectional: 16 per sign, exact below 8, the future offset by 16."""
    lags = torch.tensor([-5, 0, 1, 15, 16, 32, 64, 127, 128, 1000])
    causal = t5_buckets(lags, 32, 128, bidirectional=False)
    assert causal.tolist() == [0, 0, 1, 15, 16, 21, 26, 31, 31, 31]
    both = t5_buckets(torch.tensor([0, 3, -3, 7, 8, -8, 16, -16, 200, -200]), 32, 128, bidirectional=True)
    # 8 + floor(8·log(d/8)/log 16): d=8 -> 8, d=16 -> 10, beyond 128 -> 15
    assert both.tolist() == [0, 3, 19, 7, 8, 24, 10, 26, 15, 31]


def test_backward_keeps_nothing_of_size_t_by_t():
    length = 256
    q, k, v, lag_bias = (t.detach().float().requires_grad_(True) for t in _inputs(length, batch=1))
    largest = []

    def pack(saved):
        largest.append(saved.numel())
        return saved

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda saved: saved):
        out = relative_bias_attention(q, k, v, lag_bias, window=None, causal=True, chunk_size=16)
    out.sum().backward()
    assert max(largest) < HEADS * length * length / 4


@pytest.mark.parametrize("causal", [True, False])
def test_backward_memory_grows_linearly_with_t_in_global_scope(causal):
    """Each chunk builds its mask and bias columns inside its recomputed block: built outside, every chunk's were
    saved for the backward pass, 8.5 bytes per (query, key) pair in global scope (3.5x from T = 512 to 1024 when
    causal, against 2.0x)."""

    def saved(length):
        options = dict(window=None, causal=causal, attention_mask=mixed_mask(length),
                       segment_ids=padded_segments(length))  # fmt: skip
        return bytes_saved_for_backward(lambda: relative_bias_attention(*_inputs(length), **options, chunk_size=32))

    assert saved(1024) < 2.3 * saved(512)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"lag_bias": torch.zeros(2, 5)}, "lag_bias must be"),
        ({"window": -1}, "window must be"),
        ({"attention_mask": torch.ones(1, 4)}, "attention_mask must be"),
        ({"chunk_size": 0}, "chunk_size must be"),
        ({"segment_ids": torch.zeros(1, 8)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(1, 8\)"),
        ({"segment_ids": torch.zeros(6)}, r"segment_ids must be \(B, T\) = \(1, 6\); got \(6,\)"),
    ],
)
def test_bad_inputs_are_named(change, message):
    q, k, v, lag_bias = (t.detach() for t in _inputs(6, batch=1))
    arguments = dict(lag_bias=lag_bias, window=None, causal=True, attention_mask=None, chunk_size=4)
    arguments.update(change)
    with pytest.raises(ValueError, match=message):
        relative_bias_attention(q, k, v, arguments.pop("lag_bias"), **arguments)


@pytest.mark.parametrize("num_buckets", [2, 3])
def test_bidirectional_t5_bias_refuses_fewer_than_two_buckets_per_direction(num_buckets):
    """Bidirectional T5 buckets give each sign num_buckets // 2: with 1 there is no exact bucket (t5_buckets would
    divide by zero at the first forward). The options cannot tell (they do not know causal); the layer refuses."""
    T5BiasOptions(num_buckets=num_buckets, max_distance=8)  # fine when causal
    T5BiasAttention(d_model=8, n_heads=2, causal=True, num_buckets=num_buckets, max_distance=8)
    with pytest.raises(ValueError, match=f"num_buckets={num_buckets}: bidirectional .* num_buckets >= 4"):
        T5BiasAttention(d_model=8, n_heads=2, causal=False, num_buckets=num_buckets, max_distance=8)


def test_bidirectional_t5_bias_needs_max_distance_above_the_exact_buckets_of_one_direction():
    """num_buckets 8: 4 per direction of which 2 are exact, so max_distance 2 leaves log(max_distance / 2) = 0."""
    T5BiasAttention(d_model=8, n_heads=2, causal=True, num_buckets=8, max_distance=5)
    with pytest.raises(ValueError, match=r"max_distance=2: must exceed num_buckets // 2 // 2 .* = 2"):
        T5BiasAttention(d_model=8, n_heads=2, causal=False, num_buckets=8, max_distance=2)


@pytest.mark.parametrize("wrong", ["k", "v"])
def test_keys_or_values_of_another_length_are_named(wrong):
    q, k, v, lag_bias = (t.detach() for t in _inputs(6, batch=1))
    tensors = {"q": q, "k": k, "v": v} | {wrong: {"k": k, "v": v}[wrong][:, :, :5]}
    with pytest.raises(ValueError, match=r"q, k, v must be \(B, H, T, Dh\) with matching B, H, T"):
        relative_bias_attention(*tensors.values(), lag_bias, window=None, causal=True)
