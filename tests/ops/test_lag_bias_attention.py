"""Markov-biased attention: the naive reference pinned to a double loop over the bias definition, ``dense_lag_bias``
pinned element by element, and the banded path and the dispatcher pinned to the naive reference on outputs and all
gradients."""

from __future__ import annotations

import math

import pytest
import torch
from padding_masks import mixed_mask, padded_segments
from saved_memory import bytes_saved_for_backward

from markovformer.ops import dense_lag_bias, lag_bias_attention, lag_matrix
from markovformer.ops.lag_bias_attention import (
    lag_bias_attention_banded,
    lag_bias_attention_chunked,
    lag_bias_attention_naive,
)

HEADS, HEAD_DIM, VALUE_DIM = 2, 4, 3


def _inputs(length: int, order: int | None, dtype=torch.float64, seed: int = 0, batch: int = 4):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, length, HEAD_DIM, generator=g, dtype=torch.float64)
    k = torch.randn(batch, HEADS, length, HEAD_DIM, generator=g, dtype=torch.float64)
    v = torch.randn(batch, HEADS, length, VALUE_DIM, generator=g, dtype=torch.float64)
    past = future = None
    if order is not None:
        past = torch.randn(batch, HEADS, length, order, generator=g, dtype=torch.float64)
        future = torch.randn(batch, HEADS, length, order, generator=g, dtype=torch.float64)
    cast = [None if t is None else t.to(dtype) for t in (q, k, v, past, future)]
    return cast


def _run_with_grads(attention, tensors, grad_seed: int = 1):
    """Output and the gradients of every given input (zeros for an input the path never used)."""
    leaves = [None if t is None else t.detach().clone().requires_grad_(True) for t in tensors]
    out = attention(*leaves)
    g = torch.Generator().manual_seed(grad_seed)
    grad_out = torch.randn(out.shape, generator=g, dtype=torch.float64).to(out.dtype)
    used = [t for t in leaves if t is not None]
    grads = torch.autograd.grad((out * grad_out).sum(), used, allow_unused=True)
    return out.detach(), [torch.zeros_like(t) if g is None else g for t, g in zip(used, grads, strict=True)]


def _assert_banded_matches_naive(length, window, order, causal, mask, block, dtype, tol):
    tensors = _inputs(length, order, dtype=dtype)
    options = dict(window=window, causal=causal, attention_mask=mask)

    def naive(q, k, v, past, future):
        return lag_bias_attention_naive(q, k, v, past, future, **options)[0]

    def banded(q, k, v, past, future):
        return lag_bias_attention_banded(q, k, v, past, future, block_size=block, **options)

    expected, expected_grads = _run_with_grads(naive, tensors)
    got, got_grads = _run_with_grads(banded, tensors)
    names = ["q", "k", "v", "past_bias", "future_bias"][: len(got_grads)]
    context = f"T={length} W={window} K={order} causal={causal} block={block} mask={mask is not None}"
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, msg=lambda m: f"output, {context}: {m}")
    for name, got_grad, expected_grad in zip(names, got_grads, expected_grads, strict=True):
        torch.testing.assert_close(
            got_grad, expected_grad, rtol=tol, atol=tol, msg=lambda m, n=name: f"grad {n}, {context}: {m}"
        )


@pytest.mark.parametrize("block", [1, 4, 16, None, "longer_than_T"])
@pytest.mark.parametrize("window", [1, 3, 8])
@pytest.mark.parametrize("length", [1, 2, 5, 17, 40])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_banded_matches_naive_float64(causal, length, window, block):
    block = length + 3 if block == "longer_than_T" else block
    # K < W, K == W and K > W (lags beyond the window are never visible, so their bias must not matter).
    orders = [None] + sorted({max(1, window // 2), window, window + 2})
    for order in orders:
        for mask in (None, mixed_mask(length)):
            _assert_banded_matches_naive(length, window, order, causal, mask, block, torch.float64, 1e-10)


@pytest.mark.parametrize("block", [4, None])
@pytest.mark.parametrize("window", [3, 8])
@pytest.mark.parametrize("length", [17, 40])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_banded_matches_naive_float32(causal, length, window, block):
    for order in (None, window):
        _assert_banded_matches_naive(length, window, order, causal, mixed_mask(length), block, torch.float32, 1e-5)


def _loop_reference(q, k, v, past, future, window, causal, mask):
    """The window rule and the bias written out: one score per (t, j), softmax over the visible keys, zeros if none."""
    batch, heads, length, head_dim = q.shape
    order = max([0] + [bias.shape[-1] for bias in (past, future) if bias is not None])
    out = torch.zeros(batch, heads, length, v.shape[-1], dtype=v.dtype)
    probs = torch.zeros(batch, heads, length, length, dtype=q.dtype)
    for b in range(batch):
        for h in range(heads):
            for t in range(length):
                scores = {}
                for j in range(length):
                    if causal and j > t:
                        continue
                    if window is not None and abs(t - j) > window:
                        continue
                    if mask is not None and mask[b, j] == 0:
                        continue
                    score = float(q[b, h, t] @ k[b, h, j]) / math.sqrt(head_dim)
                    for lag in range(1, order + 1):
                        if past is not None and j == t - lag:
                            score += float(past[b, h, t, lag - 1])
                        if future is not None and j == t + lag:
                            score += float(future[b, h, t, lag - 1])
                    scores[j] = score
                if not scores:
                    continue
                top = max(scores.values())
                total = sum(math.exp(s - top) for s in scores.values())
                for j, s in scores.items():
                    probs[b, h, t, j] = math.exp(s - top) / total
                    out[b, h, t] += probs[b, h, t, j] * v[b, h, j]
    return out, probs


@pytest.mark.parametrize("biases", ["none", "past", "future", "both"])
@pytest.mark.parametrize("masked", [False, True], ids=["no_mask", "mask"])
@pytest.mark.parametrize("window", [None, 0, 1, 3, 10])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_naive_matches_double_loop(causal, window, masked, biases):
    length = 7
    q, k, v, past, future = _inputs(length, order=3, seed=3)
    past = past if biases in ("past", "both") else None
    future = future if biases in ("future", "both") else None
    mask = mixed_mask(length) if masked else None
    out, probs = lag_bias_attention_naive(q, k, v, past, future, window=window, causal=causal, attention_mask=mask)
    expected_out, expected_probs = _loop_reference(q, k, v, past, future, window, causal, mask)
    torch.testing.assert_close(probs, expected_probs, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, expected_out, rtol=1e-12, atol=1e-12)


def test_naive_matches_double_loop_order_beyond_length():
    """K > T: lags past the sequence ends have no key, and the loop never places them."""
    q, k, v, past, future = _inputs(4, order=9, seed=4, batch=2)
    for causal in (True, False):
        out, probs = lag_bias_attention_naive(q, k, v, past, future, window=None, causal=causal)
        expected_out, expected_probs = _loop_reference(q, k, v, past, future, None, causal, None)
        torch.testing.assert_close(probs, expected_probs, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(out, expected_out, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("directions", ["past", "future", "both"])
@pytest.mark.parametrize("order", [1, 3, 8])
@pytest.mark.parametrize(
    "query_positions, key_positions",
    [(range(1), range(1)), (range(4), range(4)), (range(6), range(6)), (range(3, 6), range(8))],
    ids=["T1", "T4", "T6", "rectangular"],
)
def test_dense_lag_bias_elementwise(query_positions, key_positions, order, directions):
    qpos, kpos = torch.tensor(list(query_positions)), torch.tensor(list(key_positions))
    g = torch.Generator().manual_seed(5)
    past = torch.randn(2, 3, len(qpos), order, generator=g, dtype=torch.float64)
    future = torch.randn(2, 3, len(qpos), order, generator=g, dtype=torch.float64)
    past = past if directions in ("past", "both") else None
    future = future if directions in ("future", "both") else None
    dense = dense_lag_bias(lag_matrix(qpos, kpos), past, future)
    assert dense.shape == (2, 3, len(qpos), len(kpos))
    expected = torch.zeros_like(dense)
    for ti, t in enumerate(qpos.tolist()):
        for ji, j in enumerate(kpos.tolist()):
            for lag in range(1, order + 1):
                if past is not None and j == t - lag:
                    expected[..., ti, ji] += past[..., ti, lag - 1]
                if future is not None and j == t + lag:
                    expected[..., ti, ji] += future[..., ti, lag - 1]
    assert torch.equal(dense, expected)


def test_dense_lag_bias_none_without_biases():
    positions = torch.arange(5)
    assert dense_lag_bias(lag_matrix(positions, positions), None, None) is None


def test_lag_slot_refuses_a_direction_other_than_past_or_future():
    """Any direction but "past" read as "future": a misspelt "Past" put lag -k's bias where lag k's belongs."""
    from markovformer.ops import lag_slot

    positions = torch.arange(4)
    lags = lag_matrix(positions, positions)
    assert torch.equal(lag_slot(lags, 2, "future"), lag_slot(-lags, 2, "past"))
    with pytest.raises(ValueError, match="direction must be 'past' or 'future'; got 'Past'"):
        lag_slot(lags, 2, "Past")


def _no_visible_key(mask: torch.Tensor, window: int | None, causal: bool) -> torch.Tensor:
    """(B, T) True where a query sees no real key, from the window rule directly."""
    batch, length = mask.shape
    empty = torch.ones(batch, length, dtype=torch.bool)
    for b in range(batch):
        for t in range(length):
            for j in range(length):
                in_window = window is None or abs(t - j) <= window
                if in_window and not (causal and j > t) and mask[b, j]:
                    empty[b, t] = False
    return empty


@pytest.mark.parametrize("backend", ["naive", "banded"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_all_masked_queries_give_zeros_and_finite_grads(dtype, causal, backend):
    length, window = 12, 2
    mask = torch.ones(3, length, dtype=torch.long)
    mask[0, :6] = 0  # left padding longer than the window: early queries see nothing
    mask[1] = 0
    q, k, v, past, future = _inputs(length, order=2, dtype=dtype, batch=3)
    empty = _no_visible_key(mask, window, causal)
    assert empty[0].any() and empty[1].all() and not empty[2].any()
    leaves = [t.requires_grad_(True) for t in (q, k, v, past, future)]
    out = lag_bias_attention(*leaves, window=window, causal=causal, attention_mask=mask, backend=backend)
    assert out.dtype == dtype
    assert torch.isfinite(out).all()
    empty_rows = empty[:, None, :, None].expand_as(out)
    assert (out[empty_rows] == 0).all()
    assert (out[~empty_rows] != 0).any()
    out.float().square().sum().backward()
    for name, leaf in zip(("q", "k", "v", "past_bias", "future_bias"), leaves, strict=True):
        assert leaf.grad is not None or (name == "future_bias" and causal and backend == "banded")
        if leaf.grad is not None:
            assert torch.isfinite(leaf.grad).all(), name


@pytest.mark.parametrize("path", ["banded", "chunked"])
def test_float32_paths_ignore_an_active_autocast(path):
    """Lightning's bf16-mixed runs the model under autocast; the banded and chunked paths compute in float32 by
    design (their out= buffers and saved tensors are float32), so under autocast they return what they return
    without it, forward and backward, instead of failing on a bfloat16 product (the band runs autocast-off; the
    chunked path writes every product with out= or in place, which autocast leaves alone)."""
    mask = mixed_mask(19)
    if path == "banded":

        def attention(q, k, v, past, future):
            return lag_bias_attention_banded(q, k, v, past, future, window=5, causal=True, attention_mask=mask)
    else:

        def attention(q, k, v, past, future):
            return lag_bias_attention_chunked(q, k, v, past, future, causal=True, attention_mask=mask, chunk_size=8)

    tensors = _inputs(19, order=3, dtype=torch.float32)
    expected, expected_grads = _run_with_grads(attention, tensors)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, got_grads = _run_with_grads(attention, tensors)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    for got_grad, expected_grad in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(got_grad, expected_grad, rtol=0, atol=0)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_dispatcher_backends(causal):
    length, window = 11, 3
    q, k, v, past, future = _inputs(length, order=3, seed=7)
    mask = mixed_mask(length)
    local = dict(window=window, causal=causal, attention_mask=mask)
    expected_local = lag_bias_attention_naive(q, k, v, past, future, **local)[0]
    for backend in ("auto", "naive", "banded"):  # the local-scope backends that run on CPU (the rest: fast-path tests)
        got = lag_bias_attention(q, k, v, past, future, backend=backend, **local)
        torch.testing.assert_close(got, expected_local, rtol=1e-10, atol=1e-10)
    # auto picks the banded path for local scope: bit-identical to calling it directly.
    assert torch.equal(
        lag_bias_attention(q, k, v, past, future, backend="auto", **local),
        lag_bias_attention_banded(q, k, v, past, future, **local),
    )
    global_scope = dict(window=None, causal=causal, attention_mask=mask)
    expected_global = lag_bias_attention_naive(q, k, v, past, future, **global_scope)[0]
    for backend in ("auto", "naive"):
        assert torch.equal(lag_bias_attention(q, k, v, past, future, backend=backend, **global_scope), expected_global)
    # Global scope really differs from the local window here, so the comparisons above pin the scope.
    assert not torch.allclose(expected_global, expected_local)


def test_dispatcher_errors():
    q, k, v, past, future = _inputs(5, order=2, batch=2)
    options = dict(window=2, causal=True)
    with pytest.raises(ValueError, match="unknown attention backend 'flash'"):
        lag_bias_attention(q, k, v, backend="flash", **options)
    with pytest.raises(ValueError, match="window=None"):
        lag_bias_attention(q, k, v, window=None, causal=True, backend="banded")
    with pytest.raises(ValueError, match=r"q \(2, 5, 4\)"):
        lag_bias_attention(q[0], k[0], v[0], **options)
    with pytest.raises(ValueError, match=r"k \(2, 2, 4, 4\)"):
        lag_bias_attention(q, k[:, :, :4], v, **options)
    with pytest.raises(ValueError, match=r"v \(2, 2, 4, 3\)"):
        lag_bias_attention(q, k, v[:, :, :4], **options)
    with pytest.raises(ValueError, match="past_bias"):
        lag_bias_attention(q, k, v, past[:, :1], future, **options)
    with pytest.raises(ValueError, match="future_bias"):
        lag_bias_attention(q, k, v, past, future[:, :, :4], **options)
    with pytest.raises(ValueError, match="attention_mask"):
        lag_bias_attention(q, k, v, attention_mask=torch.ones(2, 4), **options)
    with pytest.raises(ValueError, match="window"):
        lag_bias_attention(q, k, v, window=-1, causal=True)
    with pytest.raises(ValueError, match="got True"):  # bool is an int to isinstance, not a window
        lag_bias_attention(q, k, v, window=True, causal=True, backend="banded")
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(ValueError, match=rf"dropout_p must lie in \[0, 1\]; got {bad}"):
            lag_bias_attention(q, k, v, dropout_p=bad, backend="naive", **options)


@pytest.mark.parametrize("window", [None, 2])
def test_mask_and_segment_ids_together_hide_both(window):
    """A key that segment_ids call real but attention_mask hides stays hidden: the query whose only keys it and
    another document's are returns zeros, on every path, as in the naive reference."""
    q, k, v, past, future = _inputs(8, order=2, batch=2)
    segments = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, -1, -1, -1]])
    mask = torch.tensor([[1, 1, 1, 0, 1, 1, 1, 1], [1, 1, 0, 1, 1, 0, 0, 0]])
    options = dict(window=window, causal=True, attention_mask=mask, segment_ids=segments)
    expected = lag_bias_attention_naive(q, k, v, past, future, **options)[0]
    assert not expected[0, :, 3].any() and not expected[1, :, 2].any()  # masked first tokens see nothing
    got = lag_bias_attention(q, k, v, past, future, backend="chunked" if window is None else "banded", **options)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("window", [None, 2, 5])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_padding_segment_id_hides_padded_keys_without_a_mask(causal, window):
    """Segment id -1 (padding) matches no key, not even another padded one, on outputs and all gradients as in the
    naive reference: a padding query gives zeros (the band once let it see the padded keys, its own segment)."""
    length = 11
    segments = padded_segments(length)
    options = dict(window=window, causal=causal, segment_ids=segments)
    backend = "chunked" if window is None else "banded"
    tensors = _inputs(length, order=3)
    expected, expected_grads = _run_with_grads(lambda *t: lag_bias_attention_naive(*t, **options)[0], tensors)
    got, got_grads = _run_with_grads(lambda *t: lag_bias_attention(*t, backend=backend, **options), tensors)
    assert not expected.masked_select((segments < 0)[:, None, :, None]).any()
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for got_grad, expected_grad in zip(got_grads, expected_grads, strict=True):
        torch.testing.assert_close(got_grad, expected_grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("backend", ["naive", "banded", "chunked"])
def test_dropout_of_one_drops_everything(backend):
    q, k, v, past, future = _inputs(6, order=2, batch=1)
    window = None if backend in ("naive", "chunked") else 2
    leaves = [x.requires_grad_() for x in (q, k, v, past, future)]
    out = lag_bias_attention(*leaves, window=window, causal=True, dropout_p=1.0, backend=backend)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in leaves)


@pytest.mark.parametrize("window", [None, 2])
def test_naive_casts_mixed_dtypes_as_the_fast_paths(window):
    """bfloat16 queries with float32 biases (gates kept in float32): every path runs in q's dtype's computation."""
    q, k, v, past, future = _inputs(6, order=2, batch=1)
    half = [x.bfloat16() for x in (q, k, v)]
    fast = lag_bias_attention(*half, past.float(), future.float(), window=window, causal=False,
                              backend="banded" if window else "chunked")  # fmt: skip
    naive = lag_bias_attention(*half, past.float(), future.float(), window=window, causal=False, backend="naive")
    assert naive.dtype == fast.dtype == torch.bfloat16
    torch.testing.assert_close(naive.double(), fast.double(), rtol=0.05, atol=0.05)


def test_prediction_lags_place_a_source_lag_where_the_predicting_query_sees_it():
    from markovformer.ops.lags import lag_matrix, prediction_lags

    positions = torch.arange(10)
    lags = lag_matrix(positions, positions)
    t = 7  # the query at t predicts the symbol at t + 1
    for source_lag in (1, 2, 4):
        symbol = t + 1 - source_lag  # x_{t+1} depends on x_{t+1-l}
        assert prediction_lags((source_lag,)) == (int(lags[t, symbol]),)


@pytest.mark.parametrize("backend", ["auto", "banded"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_window_past_the_sequence_is_global_scope_in_global_memory(backend, causal):
    """A window of T - 1 or more sees every key: the global result, outputs and gradients, and no more memory for
    the backward pass than a window of T - 1 (the band used to be as wide as the window asked for, O(T·W))."""
    length = 40
    tensors = _inputs(length, order=3, batch=2)
    mask = mixed_mask(length)[:2]

    def attention(window):
        return lambda q, k, v, past, future: lag_bias_attention(
            q, k, v, past, future, window=window, causal=causal, attention_mask=mask, backend=backend)

    expected, expected_grads = _run_with_grads(
        lambda q, k, v, past, future: lag_bias_attention_naive(q, k, v, past, future, window=None, causal=causal,
                                                               attention_mask=mask)[0], tensors)  # fmt: skip
    for window in (length - 1, length, 50 * length):
        got, got_grads = _run_with_grads(attention(window), tensors)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
        for got_grad, expected_grad in zip(got_grads, expected_grads, strict=True):
            torch.testing.assert_close(got_grad, expected_grad, rtol=1e-10, atol=1e-10)
    leaves = [t.detach().requires_grad_(True) for t in tensors]
    assert bytes_saved_for_backward(lambda: attention(50 * length)(*leaves)) <= bytes_saved_for_backward(
        lambda: attention(length - 1)(*leaves))


@pytest.mark.parametrize("path", ["banded", "chunked", "naive"])
def test_backward_memory_is_linear_in_t_and_holds_no_t_by_t_bias_outside_the_naive_reference(path):
    """SPEC 1 and 2.4: local scope costs O(T·W) memory (banded), the global-scope fast path O(T) (chunked), and no
    (T, T) tensor is kept outside the naive reference; the naive one is quadratic, which shows the check has power."""
    window = {"banded": 4, "chunked": None, "naive": 4}[path]

    def attention(q, k, v, past):
        if path == "banded":
            return lag_bias_attention_banded(q, k, v, past, None, window=window, causal=True)
        if path == "chunked":
            return lag_bias_attention_chunked(q, k, v, past, None, causal=True)
        return lag_bias_attention_naive(q, k, v, past, None, window=window, causal=True)[0]

    def saved(length):
        leaves = [t.float().requires_grad_(True) for t in _inputs(length, order=3, batch=1)[:4]]
        largest = []

        def pack(tensor):
            largest.append(tensor.numel())
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            attention(*leaves)
        return bytes_saved_for_backward(lambda: attention(*leaves)), max(largest)

    (small, _), (large, largest) = saved(512), saved(1024)
    if path == "naive":
        assert large > 3.5 * small and largest >= HEADS * 1024 * 1024
    else:
        assert large < 2.2 * small and largest < 1024 * 1024 / 8
