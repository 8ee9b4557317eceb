"""The key/value cache's layout: a rolling cache's visible slots are the last W + 1 positions in order, one new
query over them (the decoding step's fast path) attends as the general cached attention does, and the general one takes
a slot at a negative position for empty."""

import pytest
import torch

from markovformer.layers.kv_cache import KeyValueCache
from markovformer.ops.cached_attention import cached_attention, newest_query_attention


@pytest.mark.parametrize("window", [3, None])
def test_visible_slots_are_the_last_window_plus_one_positions_in_order_whatever_the_chunks(window):
    generator = torch.Generator().manual_seed(0)
    keys = torch.randn(2, 3, 20, 4, generator=generator)
    real = torch.rand(2, 20, generator=generator) > 0.3
    decay = -torch.rand(2, 3, 20, generator=generator)  # each position's own log forget gate
    cache, start = KeyValueCache(window), 0
    for count in (2, 1, 1, 5, 1, 3, 1, 1, 4, 1):
        end = start + count
        # cumulative log gates of the chunk relative to the newest position before it
        chunk_decay = decay[..., start:end].cumsum(-1)
        cache.write(keys[:, :, start:end], -keys[:, :, start:end], real[:, start:end], chunk_decay)
        start = end
        shown = slice(0, end) if window is None else slice(max(0, end - window - 1), end)
        got_keys, got_values, positions, got_real, got_decay = cache.visible()
        n = shown.stop - shown.start
        assert positions[:-n].eq(-1).all()  # empty slots (before the window fills) come first
        assert positions[-n:].tolist() == list(range(shown.start, shown.stop))
        torch.testing.assert_close(got_keys[:, :, -n:], keys[:, :, shown], rtol=0, atol=0)
        torch.testing.assert_close(got_values[:, :, -n:], -keys[:, :, shown], rtol=0, atol=0)
        assert torch.equal(got_real[:, -n:], real[:, shown]) and not got_real[:, : got_real.shape[1] - n].any()
        # each key's cumulative log decay relative to the newest position: minus the gates after it
        expected = -(decay[..., shown].flip(-1).cumsum(-1).flip(-1) - decay[..., shown])
        torch.testing.assert_close(got_decay[..., -n:], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("window", [4, None])
def test_one_new_query_attends_as_the_general_cached_attention(window):
    """Row 2 sees no real key, not even its own new one: zeros, as cached_attention gives (with no such row here,
    newest_query_attention passed returning the mean of the hidden values)."""
    generator = torch.Generator().manual_seed(1)
    cache = KeyValueCache(window)
    k, v = torch.randn(3, 3, 9, 4, generator=generator), torch.randn(3, 3, 9, 4, generator=generator)
    real = torch.ones(3, 9, dtype=torch.bool)
    real[1, :5] = False  # left padding in row 1
    real[2] = False
    cache.write(k[:, :, :8], v[:, :, :8], real[:, :8], -torch.rand(3, 3, 8, generator=generator).cumsum(-1))
    cache.write(k[:, :, 8:], v[:, :, 8:], real[:, 8:], -torch.rand(3, 3, 1, generator=generator))
    keys, values, positions, key_real, key_decay = cache.visible()
    q = torch.randn(3, 3, 1, 4, generator=generator)
    bias = torch.randn(3, 3, 1, 6, generator=generator)  # K = 6 > W: the lags past the window see nothing
    expected = cached_attention(q, keys, values, torch.tensor([8]), positions, key_real, window=window, past_bias=bias,
                                query_log_decay=torch.zeros(3, 3, 1), key_log_decay=key_decay)  # fmt: skip
    got = newest_query_attention(q, keys, values, key_real, past_bias=bias, key_log_decay=key_decay)
    assert torch.equal(expected[2], torch.zeros_like(expected[2]))
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("window", [3, None])
def test_a_slot_at_a_negative_position_is_empty_even_where_key_real_says_real(window):
    """cached_attention's contract: a slot with position < 0 is empty, whatever key_real says. The cache marks its
    empty slots unreal too, so only a direct call shows the position rule (dropping it passed every other test):
    two empty slots holding junk give the attention over the three written ones alone."""
    generator = torch.Generator().manual_seed(2)
    q = torch.randn(2, 3, 2, 4, generator=generator, dtype=torch.float64)
    keys, values = (torch.randn(2, 3, 5, 4, generator=generator, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(2, 3, 2, 4, generator=generator, dtype=torch.float64)
    positions, queries = torch.tensor([-1, -1, 0, 1, 2]), torch.tensor([1, 2])  # 5 slots, 3 written
    real = torch.ones(2, 5, dtype=torch.bool)
    got = cached_attention(q, keys, values, queries, positions, real, window=window, past_bias=bias)
    written = slice(2, None)
    expected = cached_attention(q, keys[:, :, written], values[:, :, written], queries, positions[written],
                                real[:, written], window=window, past_bias=bias)  # fmt: skip
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_a_rolling_cache_marks_every_key_written_after_a_padded_chunk_real():
    """After a chunk ending in padding, single positions written with real=None (no padding) skip their flag only
    once the slot they overwrite held a position known to be real (``real_from``); one step earlier the padded
    position's False stayed on the slot of the real key that replaced it, and a later chunk of queries (which reads
    the flags) lost that key. The flags and that chunk's attention against cached_attention over the true flags."""
    window = 2
    generator = torch.Generator().manual_seed(3)
    k, v, q = (torch.randn(1, 2, 9, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    real = torch.ones(1, 9, dtype=torch.bool)
    real[0, 2] = False  # the first chunk (positions 0..2) ends in padding
    cache = KeyValueCache(window)
    cache.write(k[:, :, :3], v[:, :, :3], real[:, :3])
    for position in range(3, 7):
        cache.attend(q[:, :, position : position + 1], k[:, :, position : position + 1],
                     v[:, :, position : position + 1], None)  # fmt: skip
        _, _, positions, got_real, _ = cache.visible()
        assert torch.equal(got_real, real[:, positions]), position
    got = cache.attend(q[:, :, 7:], k[:, :, 7:], v[:, :, 7:], None)
    expected = cached_attention(q[:, :, 7:], k, v, torch.arange(7, 9), torch.arange(9), real, window=window)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
