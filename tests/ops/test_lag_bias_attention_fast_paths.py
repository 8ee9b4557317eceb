"""The fast Markov-attention paths pinned to the naive reference on outputs and every gradient (q, k, v, past_bias,
future_bias): the block layouts of ``banded``, the chunked global path, FlexAttention (its eager reference on CPU,
compiled on CUDA when present), attention dropout, and the dispatcher's choice of a path that exists."""

from __future__ import annotations

import importlib
import warnings

import pytest
import torch
from padding_masks import mixed_mask

from markovformer.ops.lag_bias_attention import (
    CHUNKED_MIN_LENGTH,
    lag_bias_attention,
    lag_bias_attention_banded,
    lag_bias_attention_chunked,
    lag_bias_attention_flex,
    lag_bias_attention_naive,
    resolve_backend,
)
from markovformer.ops.lag_bias_attention.naive import dense_allowed
from markovformer.ops.segments import segment_ids

banded_module = importlib.import_module("markovformer.ops.lag_bias_attention.banded")
flex_module = importlib.import_module("markovformer.ops.lag_bias_attention.flex")

HEADS, HEAD_DIM, VALUE_DIM = 2, 4, 3
NAMES = ("q", "k", "v", "past_bias", "future_bias")


def _inputs(length, order, dtype=torch.float64, seed=0, batch=4, head_dim=HEAD_DIM, value_dim=VALUE_DIM):
    g = torch.Generator().manual_seed(seed)
    shapes = [(head_dim,), (head_dim,), (value_dim,), (order,), (order,)]
    return [torch.randn(batch, HEADS, length, *s, generator=g, dtype=torch.float64).to(dtype) for s in shapes]


def _output_and_grads(attention, tensors):
    """Output and the gradient of every input under a fixed random upstream gradient (zeros where unused)."""
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = attention(*leaves)
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64).to(out)
    grads = torch.autograd.grad((out * upstream).sum(), leaves, allow_unused=True)
    return out.detach(), [torch.zeros_like(t) if g is None else g for t, g in zip(leaves, grads, strict=True)]


def _assert_matches_naive(fast, tensors, window, causal, mask, tol, context):
    def naive(q, k, v, past, future):
        return lag_bias_attention_naive(q, k, v, past, future, window=window, causal=causal, attention_mask=mask)[0]

    expected, expected_grads = _output_and_grads(naive, tensors)
    got, got_grads = _output_and_grads(fast, tensors)
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got, expected, rtol=tol, atol=tol, msg=lambda m: f"output, {context}: {m}")
    for name, got_grad, expected_grad in zip(NAMES, got_grads, expected_grads, strict=True):
        torch.testing.assert_close(
            got_grad, expected_grad, rtol=tol, atol=tol, msg=lambda m, n=name: f"grad {n}, {context}: {m}"
        )


# --- banded: the default block layouts (16-multiple spans) for many windows --------------------------------------


@pytest.mark.parametrize("group_elements", [1, 700, banded_module.GROUP_ELEMENTS], ids=["group1", "groups", "default"])
@pytest.mark.parametrize("window", [0, 1, 2, 4, 7, 12, 16, 21])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_banded_default_layout_matches_naive(causal, window, group_elements, monkeypatch):
    """Default block sizes, and the blocks walked one per group, a few per group, or all in one group."""
    monkeypatch.setattr(banded_module, "GROUP_ELEMENTS", group_elements)
    length = 53  # not a multiple of any default block size
    block = banded_module.default_block_size(window, causal)
    span = banded_module._layout(torch.zeros(1, 1, length, 1), 1, window, causal, None).span
    assert block >= banded_module.MIN_BLOCK and block & (block - 1) == 0  # a power of two
    assert span % banded_module.SPAN_MULTIPLE == 0 and block + window * (1 if causal else 2) <= span
    for order in (1, max(1, window), window + 3):
        tensors = _inputs(length, order, seed=window)
        for mask in (None, mixed_mask(length)):

            def fast(q, k, v, past, future, mask=mask):
                options = dict(window=window, causal=causal, attention_mask=mask)
                return lag_bias_attention_banded(q, k, v, past, future, **options)

            context = f"W={window} K={order} causal={causal} mask={mask is not None}"
            _assert_matches_naive(fast, tensors, window, causal, mask, 1e-10, context)


@pytest.mark.parametrize("window", [128, 256, 300])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_banded_wide_window_layout_matches_naive(causal, window):
    """Wide windows switch to WIDE_BLOCK queries per block (from a reach of WIDE_REACH keys): still exact, with
    lengths shorter than, around and beyond the window."""
    reach = window if causal else 2 * window
    expected_block = banded_module.WIDE_BLOCK if reach >= banded_module.WIDE_REACH else None
    if expected_block is not None:
        assert banded_module.default_block_size(window, causal) == expected_block
    for length in (window // 2 + 3, window + 70):
        tensors = _inputs(length, 4, seed=window)
        mask = mixed_mask(length)

        def fast(q, k, v, past, future, mask=mask):
            return lag_bias_attention_banded(q, k, v, past, future, window=window, causal=causal, attention_mask=mask)

        _assert_matches_naive(fast, tensors, window, causal, mask, 1e-10, f"W={window} T={length} causal={causal}")


def test_banded_noncontiguous_inputs_and_batch_one():
    """Heads sliced out of a fused projection (strided views) and B=1, as the attention layers pass them."""
    fused = torch.randn(1, 37, 3, 2 * HEADS, HEAD_DIM, dtype=torch.float64)
    q, k, v = fused[:, :, :, :HEADS].permute(2, 0, 3, 1, 4)
    past, future = torch.randn(2, 1, HEADS, 37, 3, dtype=torch.float64)
    for causal in (True, False):

        def fast(q, k, v, past, future, causal=causal):
            return lag_bias_attention_banded(q, k, v, past, future, window=3, causal=causal)

        _assert_matches_naive(fast, [q, k, v, past, future], 3, causal, None, 1e-10, f"causal={causal}")


# --- chunked: global scope in O(T) memory --------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [1, 5, 16, None])
@pytest.mark.parametrize("length", [1, 2, 7, 40])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_chunked_matches_naive_float64(causal, length, chunk):
    for order in (1, 3, length + 2):  # K > T: lags past the sequence ends have no key
        tensors = _inputs(length, order, seed=order)
        for mask in (None, mixed_mask(length)):

            def fast(q, k, v, past, future, mask=mask):
                return lag_bias_attention_chunked(
                    q, k, v, past, future, causal=causal, attention_mask=mask, chunk_size=chunk
                )

            context = f"T={length} K={order} chunk={chunk} causal={causal} mask={mask is not None}"
            _assert_matches_naive(fast, tensors, None, causal, mask, 1e-10, context)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_chunked_matches_naive_float32(causal):
    length = 70
    tensors = _inputs(length, 4, dtype=torch.float32, head_dim=8, value_dim=8)
    mask = mixed_mask(length)

    def fast(q, k, v, past, future):
        return lag_bias_attention_chunked(q, k, v, past, future, causal=causal, attention_mask=mask, chunk_size=16)

    _assert_matches_naive(fast, tensors, None, causal, mask, 2e-5, f"float32 causal={causal}")


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_chunked_all_masked_queries_give_zeros(dtype, causal):
    length = 12
    mask = torch.ones(3, length, dtype=torch.long)
    mask[0, :6] = 0
    mask[1] = 0
    leaves = [t.requires_grad_(True) for t in _inputs(length, 2, dtype=dtype, batch=3)]
    out = lag_bias_attention_chunked(*leaves, causal=causal, attention_mask=mask, chunk_size=5)
    assert out.dtype == dtype and torch.isfinite(out).all()
    empty = torch.zeros(3, length, dtype=torch.bool)
    empty[1] = True
    if causal:
        empty[0, :6] = True
    assert (out[empty[:, None, :, None].expand_as(out)] == 0).all()
    assert (out[~empty[:, None, :, None].expand_as(out)] != 0).any()
    out.float().square().sum().backward()
    for name, leaf in zip(NAMES, leaves, strict=True):
        assert torch.isfinite(leaf.grad).all(), name


def test_default_chunk_size_bounds_the_workspace():
    chunked = importlib.import_module("markovformer.ops.lag_bias_attention.chunked")
    assert chunked.default_chunk_size(8, 1024) == chunked.MAX_CHUNK
    for batch_heads, length in ((8, 65536), (64, 16384), (1, 2**22)):
        rows = chunked.default_chunk_size(batch_heads, length)
        assert chunked.MIN_CHUNK <= rows <= chunked.MAX_CHUNK
        assert rows == chunked.MIN_CHUNK or rows * batch_heads * length <= chunked.CHUNK_ELEMENTS


def test_chunked_through_the_dispatcher_and_a_layer():
    """auto takes the chunked path for long global-scope inputs, and a global-scope layer gives the naive output."""
    from markovformer.layers import MarkovAttention

    length = CHUNKED_MIN_LENGTH
    q = torch.randn(1, HEADS, length, HEAD_DIM, dtype=torch.float64)
    assert resolve_backend("auto", q, None) == "chunked"
    assert resolve_backend("auto", q[:, :, :-1], None) == "naive"
    torch.manual_seed(0)
    layer = MarkovAttention(d_model=8, n_heads=2, max_order=3, scope="global", window=None).double()
    x = torch.randn(2, length, 8, dtype=torch.float64)
    fast = layer(x)
    layer.cores[0].backend = "naive"
    torch.testing.assert_close(fast, layer(x), rtol=1e-10, atol=1e-10)


# --- dropout: the same mask in forward and backward ---------------------------------------------------------------


@pytest.mark.parametrize("path", ["banded", "chunked"])
def test_dropout_backward_is_the_gradient_of_the_forward(path):
    q, k, v, past, future = (t[:1, :1, :6] for t in _inputs(6, 2))

    def attention(q, k, v, past, future):
        torch.manual_seed(0)  # the same dropout mask on every call gradcheck makes
        if path == "banded":
            return lag_bias_attention_banded(q, k, v, past, future, window=2, causal=False, dropout_p=0.4)
        return lag_bias_attention_chunked(q, k, v, past, future, causal=False, dropout_p=0.4, chunk_size=4)

    leaves = [t.clone().requires_grad_(True) for t in (q, k, v, past, future)]
    assert torch.autograd.gradcheck(attention, leaves)


@pytest.mark.parametrize("p", [0.2, 0.7])
@pytest.mark.parametrize("path", ["banded", "chunked"])
def test_dropout_is_unbiased_and_drops_the_fraction_p(path, p):
    """v = the identity: each output row is the query's attention probabilities as dropout left them, so their mean
    over draws is the naive path's probabilities and their share of zeros among the visible keys is p. (At p = 0.5,
    the one rate tested before, a mask kept with probability p instead of 1 - p is the same mask, and passed.)"""
    q, k, _, past, future = _inputs(9, 2, batch=1)
    v = torch.eye(9, dtype=torch.float64).expand(1, HEADS, 9, 9)
    options = dict(window=2 if path == "banded" else None, causal=True)
    expected = lag_bias_attention_naive(q, k, v, past, future, **options)[1]  # the probabilities (0: hidden)
    torch.manual_seed(0)
    draws = torch.stack([lag_bias_attention(q, k, v, past, future, dropout_p=p, backend=path, **options)
                         for _ in range(400)])  # fmt: skip
    dropped = (draws[:, expected > 0] == 0).double().mean().item()
    assert abs(dropped - p) < 0.02, dropped
    standard_error = draws.std(0) / len(draws) ** 0.5
    assert ((draws.mean(0) - expected).abs() <= 5 * standard_error + 1e-12).all()


# --- FlexAttention ------------------------------------------------------------------------------------------------

needs_flex = pytest.mark.skipif(not flex_module.flex_importable(), reason="torch without FlexAttention")
FLEX_VALUE_DIM = 8  # unlike the query/key dimension, as VALUE_DIM; a power of two, which torch 2.6 needs
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture
def eager_flex_backward(monkeypatch):
    """FlexAttention's eager reference has a backward on CPU, but the public function refuses CPU gradients; lift
    that guard so this file's score_mod and block mask can be checked on outputs and gradients without a GPU (torch
    2.5 has no such guard)."""
    flex_attention = importlib.import_module("torch.nn.attention.flex_attention")
    monkeypatch.setattr(flex_attention, "_validate_device", lambda *args: None, raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@needs_flex
@pytest.mark.parametrize("window", [None, 0, 2, 5])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_flex_score_and_mask_functions_match_naive(eager_flex_backward, causal, window):
    length = 11
    for order in (2, 7):  # K = 7 reaches past every window tried (those lags are never visible)
        tensors = _inputs(length, order, seed=order, value_dim=FLEX_VALUE_DIM)
        for mask in (None, mixed_mask(length)):

            def fast(q, k, v, past, future, mask=mask):
                return lag_bias_attention_flex(
                    q, k, v, past, future, window=window, causal=causal, attention_mask=mask, compiled=False
                )

            context = f"W={window} K={order} causal={causal} mask={mask is not None}"
            _assert_matches_naive(fast, tensors, window, causal, mask, 1e-10, context)


@needs_flex
def test_flex_supports_the_head_dimensions_this_torchs_flex_attention_takes():
    """``flex_supports`` agrees with FlexAttention itself on head dimensions of at least 16: with torch 2.6 it
    takes powers of two only (24 raised ValueError deep inside a model on a GPU), with 2.13 any."""
    from torch.nn.attention.flex_attention import flex_attention

    for dim in (16, 24, 32, 48):
        q = torch.randn(1, 1, 8, dim)
        try:
            flex_attention(q, q, q)
            taken = True
        except ValueError as refused:
            assert "embedding dimension" in str(refused)
            taken = False
        assert flex_module.flex_supports(dim, dim) == taken, (dim, torch.__version__)
        assert flex_module.flex_supports(16, dim) == taken


@needs_flex
def test_flex_takes_the_mixed_dtypes_autocast_leaves(eager_flex_backward):
    """Under autocast a model hands attention rotated float32 queries and keys beside bfloat16 values (FlexAttention
    refuses mixed dtypes): flex runs them in their common dtype with autocast off, as the same call made outside
    autocast on inputs cast to that dtype."""
    q, k, v, past, future = _inputs(11, 3, seed=2, value_dim=FLEX_VALUE_DIM)
    q, k, v, past, future = q.float(), k.float(), v.bfloat16(), past.float(), future.float()
    options = dict(window=None, causal=True, attention_mask=mixed_mask(11), compiled=False)
    expected = lag_bias_attention_flex(q, k, v.float(), past, future, **options)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = lag_bias_attention_flex(q, k, v, past, future, **options)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def _packed_rows(length: int = 11):
    """attention_mask, segment_ids (4, T) and the documents (row, start, size) of four packed rows: three documents
    and right padding; one document; one token, a document and right padding; left padding, then two documents."""
    rows = [(0, [4, 3, 2]), (0, [length]), (0, [1, 6]), (3, [5, 3])]  # (left padding, document lengths)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    positions = torch.zeros_like(mask)
    documents = []
    for row, (start, sizes) in enumerate(rows):
        for size in sizes:
            mask[row, start : start + size] = 1
            positions[row, start : start + size] = torch.arange(size)
            documents.append((row, start, size))
            start += size
    return mask, segment_ids(positions, mask), documents


@needs_flex
@pytest.mark.parametrize("window", [None, 0, 2, 20])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_flex_mask_function_on_index_grids_equals_naive_allowed_pairs(causal, window):
    """The mask_mod FlexAttention builds its BlockMask from, evaluated on (B, T, T) index grids, against the naive
    path's allowed pairs: window, causality, key padding and same document."""
    mask, segments, _ = _packed_rows()
    batch, length = mask.shape
    b, q_idx, kv_idx = torch.arange(batch)[:, None, None], torch.arange(length)[:, None], torch.arange(length)
    expected = dense_allowed(length, window, causal, mask, mask.device, segments)[:, 0]
    for present in (mask.bool(), None):  # segment id -1 alone hides padded keys
        got = flex_module._mask_mod(window, causal, present, segments)(b, 0, q_idx, kv_idx)
        assert torch.equal(got.expand(batch, length, length), expected)
    if window != 0:  # a band that reaches across a document boundary: without the segments documents would mix
        assert not torch.equal(flex_module._mask_mod(window, causal, mask.bool())(b, 0, q_idx, kv_idx), expected)


# The segments enter the mask alone, beside the window and causality rule that every pairing of
# test_flex_score_and_mask_functions_match_naive pins: a global causal and a local bidirectional case take each of
# the rule's branches (each eager flex call of a new kind is a Dynamo trace of ~0.4 s on a CPU)
@needs_flex
@pytest.mark.parametrize(("causal", "window"), [(True, None), (False, 2)], ids=["causal-None", "bidirectional-2"])
def test_flex_packed_rows_equal_naive_and_each_document_alone(eager_flex_backward, causal, window):
    """Packed documents through FlexAttention's eager reference: outputs and every gradient equal the naive path's
    with the same segment ids, and each document's slice equals that document run alone through flex."""
    mask, segments, documents = _packed_rows()
    length = mask.shape[1]
    tensors = _inputs(length, 3, seed=5, value_dim=FLEX_VALUE_DIM)
    options = dict(window=window, causal=causal, attention_mask=mask, segment_ids=segments)

    def naive(q, k, v, past, future):
        return lag_bias_attention_naive(q, k, v, past, future, **options)[0]

    def flex(q, k, v, past, future, **chosen):
        return lag_bias_attention_flex(q, k, v, past, future, compiled=False, **(chosen or options))

    expected, expected_grads = _output_and_grads(naive, tensors)
    got, got_grads = _output_and_grads(flex, tensors)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    for name, got_grad, expected_grad in zip(NAMES, got_grads, expected_grads, strict=True):
        torch.testing.assert_close(got_grad, expected_grad, rtol=1e-10, atol=1e-10, msg=lambda m, n=name: f"{n}: {m}")
    mixed = flex(*tensors, window=window, causal=causal, attention_mask=mask)
    assert not torch.allclose(mixed, got)  # without the segment ids the documents would mix
    upstream = torch.randn(got.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for row, start, size in documents:
        part = slice(start, start + size)
        pieces = [t[row : row + 1, :, part].detach().requires_grad_() for t in tensors]
        alone = flex(*pieces, window=window, causal=causal)
        torch.testing.assert_close(got[row : row + 1, :, part], alone.detach(), rtol=1e-10, atol=1e-10)
        alone_grads = torch.autograd.grad((alone * upstream[row : row + 1, :, part]).sum(), pieces, allow_unused=True)
        for name, packed_grad, alone_grad, piece in zip(NAMES, got_grads, alone_grads, pieces, strict=True):
            alone_grad = torch.zeros_like(piece) if alone_grad is None else alone_grad
            torch.testing.assert_close(packed_grad[row : row + 1, :, part], alone_grad, rtol=1e-10, atol=1e-10,
                                       msg=lambda m, n=f"{name}, row {row} at {start}": f"{n}: {m}")  # fmt: skip


@needs_cuda
@needs_flex
@pytest.mark.parametrize("length", [256, 300, 1000])  # FlexAttention's blocks are 128: whole and partial tails
@pytest.mark.parametrize("window", [None, 4, 64])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_flex_compiled_on_cuda_matches_naive(causal, window, length):
    """Outputs and all gradients (compared with assert_close, which fails on any NaN) on the compiled kernel."""
    tensors = [t.cuda() for t in _inputs(length, 4, dtype=torch.float32, head_dim=16, value_dim=16, batch=2)]
    mask = mixed_mask(length)[1:3].cuda()
    for attention_mask in (None, mask):

        def fast(q, k, v, past, future, attention_mask=attention_mask):
            return lag_bias_attention(q, k, v, past, future, window=window, causal=causal,
                                    attention_mask=attention_mask, backend="flex")  # fmt: skip

        context = f"cuda W={window} causal={causal} mask={attention_mask is not None}"
        _assert_matches_naive(fast, tensors, window, causal, attention_mask, 1e-3, context)


# --- the dispatcher -----------------------------------------------------------------------------------------------


def test_auto_picks_a_path_that_exists_here():
    q = torch.randn(1, 1, 8, 4)
    for window in (None, 3):
        for dropout_p in (0.0, 0.1):
            chosen = resolve_backend("auto", q, window, dropout_p)
            assert chosen != "flex" or (q.is_cuda and dropout_p == 0)
            out = lag_bias_attention(q, q, q, window=window, causal=True, dropout_p=dropout_p, backend="auto")
            assert out.shape == q.shape and torch.isfinite(out).all()
    assert resolve_backend("auto", q, 3) == "banded"  # a CPU tensor: never flex


@needs_cuda
@needs_flex
def test_auto_picks_flex_on_cuda_for_head_dims_its_kernel_takes():
    wide, narrow = (torch.randn(1, 1, flex_module.FLEX_MIN_LENGTH, d, device="cuda") for d in (16, 8))
    assert resolve_backend("auto", wide, 3) == resolve_backend("auto", wide, None) == "flex"
    assert resolve_backend("auto", narrow, 3) == "banded" and resolve_backend("auto", wide, 3, value_dim=8) == "banded"
    assert resolve_backend("auto", wide, 3, dropout_p=0.1) == "banded"


def test_auto_picks_flex_where_it_exists(monkeypatch):
    dispatcher = importlib.import_module("markovformer.ops.lag_bias_attention")  # the package, not the function
    monkeypatch.setattr(dispatcher, "flex_available", lambda device: True)
    q = torch.randn(1, 1, flex_module.FLEX_MIN_LENGTH, 16)
    assert resolve_backend("auto", q, 3) == "flex"
    assert resolve_backend("auto", q, None) == "flex"
    assert resolve_backend("auto", q, 3, dropout_p=0.1) == "banded"  # FlexAttention has no dropout
    with pytest.raises(ValueError, match="'flex' has no attention dropout"):
        resolve_backend("flex", q, 3, dropout_p=0.1)
    # its kernel takes head dimensions of 16 and more: smaller ones go to the band, and asking for flex says why
    assert resolve_backend("auto", q[..., :8], 3) == "banded" and resolve_backend("auto", q, 3, value_dim=3) == "banded"
    # a sequence shorter than one of its blocks: a dense path, not a compilation per new length
    assert (
        resolve_backend("auto", q[:, :, :-1], 3) == "banded" and resolve_backend("auto", q[:, :, :-1], None) == "naive"
    )
    refused = r"at least 16 \(powers of two with torch 2\.6\); got 16 \(query/key\) and 3 \(value\)"
    with pytest.raises(ValueError, match=refused):
        resolve_backend("flex", q, 3, value_dim=3)


@needs_flex
def test_auto_picks_flex_for_packed_documents_where_it_exists(monkeypatch):
    """Where flex exists, a packed call goes to flex too, with its segment ids: the result (FlexAttention's eager
    forward standing in for the CUDA kernel) equals the naive path's."""
    dispatcher = importlib.import_module("markovformer.ops.lag_bias_attention")
    calls = []

    def eager_flex(*args, **options):
        calls.append(options["segment_ids"])
        return lag_bias_attention_flex(*args, compiled=False, **options)

    monkeypatch.setattr(dispatcher, "flex_available", lambda device: True)
    monkeypatch.setattr(dispatcher, "lag_bias_attention_flex", eager_flex)
    mask, segments, _ = _packed_rows(flex_module.FLEX_MIN_LENGTH)
    q, k, v, past, future = _inputs(mask.shape[1], 2, seed=7, head_dim=16, value_dim=16)
    for window in (None, 3):
        options = dict(window=window, causal=True, attention_mask=mask, segment_ids=segments)
        got = lag_bias_attention(q, k, v, past, future, backend="auto", **options)
        assert calls and calls.pop() is segments
        expected = lag_bias_attention_naive(q, k, v, past, future, **options)[0]
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_unavailable_backend_raises_naming_it():
    q = torch.randn(1, 1, 8, 4)
    with pytest.raises(ValueError, match="backend 'flex' is not available on device 'cpu'"):
        lag_bias_attention(q, q, q, window=2, causal=True, backend="flex")
    with pytest.raises(ValueError, match="backend 'chunked' is the global-scope path"):
        lag_bias_attention(q, q, q, window=2, causal=True, backend="chunked")
    with pytest.raises(ValueError, match="backend 'banded' needs a local window"):
        lag_bias_attention(q, q, q, window=None, causal=True, backend="banded")
    with pytest.raises(ValueError, match="unknown attention backend 'triton'"):
        lag_bias_attention(q, q, q, window=None, causal=True, backend="triton")
