"""The chunked ops' shared query loop: chunks tile the queries in order, each with the keys its queries may see; in
causal global scope every chunk's (queries, keys) block is about the same size."""

from __future__ import annotations

import pytest

from markovformer.ops.query_chunks import query_chunks


@pytest.mark.parametrize(("length", "chunk_size"), [(1, 64), (64, 64), (65, 64), (1000, 16), (4096, 64), (777, 5)])
def test_causal_global_chunks_tile_the_queries_in_blocks_of_one_size(length, chunk_size):
    """Blocks of one size are what lets the allocator reuse a chunk's freed scores for the next. Chunks of
    chunk_size queries against every key before their end grew block by block, and each freed block was too small
    for the next: the resident heap grew by all of them, O(T²) (forgetting attention, 1 layer, d = 32: 3.9 GB at
    T = 16,384 against 0.24 GB at 4,096)."""
    chunks = list(query_chunks(length, chunk_size, window=None, causal=True))
    budget = chunk_size * length
    assert chunks[0].start == 0 and chunks[-1].end == length
    for before, after in zip(chunks[:-1], chunks[1:], strict=True):
        assert after.start == before.end  # in order, each query once
    for chunk in chunks:
        assert (chunk.low, chunk.high) == (0, chunk.end)  # every key up to the chunk's last query
        rows = chunk.end - chunk.start
        assert rows >= chunk_size or chunk.end == length
        assert rows * chunk.high <= max(budget, chunk_size * chunk.high)
    for chunk in chunks[:-1]:  # the last may be cut short by the sequence's end
        assert (chunk.end - chunk.start) * chunk.high > budget // 2


@pytest.mark.parametrize(("window", "causal"), [(8, True), (8, False), (None, False)])
def test_windowed_and_bidirectional_chunks_take_chunk_size_queries(window, causal):
    """There a chunk's keys do not grow with its position: chunk_size queries each, keys as the window allows."""
    length, chunk_size = 100, 16
    chunks = list(query_chunks(length, chunk_size, window=window, causal=causal))
    assert [chunk.start for chunk in chunks] == list(range(0, length, chunk_size))
    for chunk in chunks:
        assert chunk.end == min(chunk.start + chunk_size, length)
        low = 0 if window is None else max(0, chunk.start - window)
        high = chunk.end if causal else (length if window is None else min(length, chunk.end + window))
        assert (chunk.low, chunk.high) == (low, high)


@pytest.mark.parametrize("chunk_size", [0, -3])
@pytest.mark.parametrize(("window", "causal"), [(None, True), (8, True), (None, False)])
def test_a_chunk_size_below_one_is_refused_not_looped_on(chunk_size, window, causal):
    """A chunk of no queries never reaches the end: the loop yielded empty chunks for ever (the chunked ops' lists of
    outputs grew without bound), where the range it replaced refused a step of 0."""
    chunks = query_chunks(10, chunk_size, window=window, causal=causal)
    with pytest.raises(ValueError, match=f"chunk_size must be an integer >= 1, got {chunk_size}"):
        next(chunks)
