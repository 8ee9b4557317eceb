"""Packed documents (issue 29): a packed batch (several documents per row, told apart by ``position_ids`` that
restart at 0 at each, plus right padding) gives every document the logits and the gradients it gets run alone, for
every attention kind of the registry and both recurrent injections, whether the kind keeps documents apart itself
(``honours_segments``) or the block runs each document alone for it; rotary positions restart."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from markovformer.layers.block import honours_segments
from markovformer.layers.position import RotaryEmbedding
from markovformer.layers.registry import ATTENTION_KINDS, attention_option_names
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForTokenClassification,
)
from markovformer.ops.segments import SegmentBatch, segment_ids

VOCAB, D_MODEL, HEADS = 11, 16, 2
# documents (lengths) of each packed row, then the row's right padding
ROWS = ([5, 7, 4], [9, 6], [3, 8, 2])
PADDING = (2, 3, 5)
SMALL = dict(max_positions=32, chunk_size=4, ssm_state_size=8, linformer_k=8, num_features=8, max_order=2)
# the kinds that keep documents apart themselves; the block runs each document alone for the rest
NATIVE = {"softmax", "markov", "scan", "rff", "hybrid_split", "hybrid_parallel", "alibi", "forgetting", "t5_bias",
          "dynamic_bias", "stick_breaking", "cope", "retnet", "rwkv"}
# kind -> config overrides; extra cases exercise each native path (banded, global, dense masks, pooled gates)
CASES = {kind: {} for kind in ATTENTION_KINDS}
CASES.update({
    "softmax": dict(scope="local", window=3),  # the banded op
    "softmax-global": dict(attention="softmax", scope="global"),
    "markov-global": dict(attention="markov", scope="global"),  # naive below 256 positions
    "markov-global-chunked": dict(attention="markov", scope="global", backend="chunked"),
    "softmax-global-chunked": dict(attention="softmax", scope="global", backend="chunked"),
    "markov-sequence-gates": dict(attention="markov", gate_input="sequence", gru=True),  # bidirectional
    "markov-learned": dict(attention="markov", position="learned"),
    "markov-sinusoidal-min-gru": dict(attention="markov", position="sinusoidal", gru=True, gru_kind="min_gru"),
    "softmax-gru": dict(attention="softmax", scope="global", gru=True),
    "scan-bidirectional": dict(attention="scan"),
    "forgetting-local": dict(attention="forgetting", scope="local", window=3),
    "alibi-bidirectional": dict(attention="alibi"),
    "t5-bias-bidirectional": dict(attention="t5_bias"),
    "stick-breaking-local": dict(attention="stick_breaking", scope="local", window=3),
    "cope-local": dict(attention="cope", scope="local", window=3),
    "retnet-bidirectional": dict(attention="retnet"),
    "rwkv-bidirectional": dict(attention="rwkv"),
    "rff-bidirectional": dict(attention="rff"),
    "rff-trig": dict(attention="rff", feature_map="trig"),
    "softmax-min-gru-bidirectional": dict(attention="softmax", scope="global", gru=True, gru_kind="min_gru"),
})  # fmt: skip
# compared on token classification, causal=False: these cases and every kind a causal model refuses (linformer)
BIDIRECTIONAL = ("markov-sequence-gates", "scan-bidirectional", "softmax-min-gru-bidirectional",
                 "rff-bidirectional", "alibi-bidirectional", "t5-bias-bidirectional", "retnet-bidirectional",
                 "rwkv-bidirectional") + tuple(kind for kind, entry in ATTENTION_KINDS.items()
                                               if not entry.accepts_causal(True))  # fmt: skip


def _config(case: str, causal: bool) -> MarkovianTransformerConfig:
    overrides = dict(CASES[case])
    kind = overrides.pop("attention", case)
    values = dict(vocab_size=VOCAB, d_model=D_MODEL, n_layers=2, n_heads=HEADS, attention=kind, causal=causal,
                  dropout=0.0, num_labels=5)  # fmt: skip
    read = attention_option_names(kind) | {"max_positions"}
    values.update({name: value for name, value in SMALL.items() if name in read})
    return MarkovianTransformerConfig(**{**values, **overrides})


def _packed_batch(generator: torch.Generator):
    """input_ids, attention_mask, position_ids (B, T) and the documents as (row, start, ids)."""
    length = max(sum(row) + pad for row, pad in zip(ROWS, PADDING, strict=True))
    ids = torch.zeros(len(ROWS), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    positions = torch.zeros_like(ids)
    documents = []
    for row, lengths in enumerate(ROWS):
        start = 0
        for size in lengths:
            tokens = torch.randint(1, VOCAB, (size,), generator=generator)
            ids[row, start : start + size] = tokens
            positions[row, start : start + size] = torch.arange(size)
            documents.append((row, start, tokens))
            start += size
        mask[row, :start] = 1
    return ids, mask, positions, documents


def _document_loss(logits: torch.Tensor, tokens: torch.Tensor, causal: bool) -> torch.Tensor:
    """Summed next-token (causal) or same-token (bidirectional) cross-entropy of one document's logits (L, V)."""
    if causal:
        return F.cross_entropy(logits[:-1], tokens[1:], reduction="sum")
    return F.cross_entropy(logits, tokens % 5, reduction="sum")


def _model(case: str, causal: bool):
    torch.manual_seed(0)
    head = MarkovianTransformerForCausalLM if causal else MarkovianTransformerForTokenClassification
    return head(_config(case, causal)).double().train()


@pytest.mark.parametrize("case", list(CASES))
def test_packed_batch_equals_each_document_alone(case):
    causal = case not in BIDIRECTIONAL
    model = _model(case, causal)
    ids, mask, positions, documents = _packed_batch(torch.Generator().manual_seed(1))
    packed = model(ids, attention_mask=mask, position_ids=positions).logits
    packed_loss = sum(_document_loss(packed[row, start : start + len(t)], t, causal) for row, start, t in documents)
    packed_grads = torch.autograd.grad(packed_loss, list(model.parameters()), allow_unused=True)
    alone_loss = 0.0
    for row, start, tokens in documents:
        alone = model(tokens[None]).logits[0]
        torch.testing.assert_close(packed[row, start : start + len(tokens)], alone, atol=1e-9, rtol=1e-7)
        alone_loss = alone_loss + _document_loss(alone, tokens, causal)
    alone_grads = torch.autograd.grad(alone_loss, list(model.parameters()), allow_unused=True)
    for (name, _), got, want in zip(model.named_parameters(), packed_grads, alone_grads, strict=True):
        if want is None:
            assert got is None or not got.any(), name
            continue
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-7, msg=f"gradient of {name}")
    if causal:  # the head's own loss skips each document's first token: the mean of the documents' losses
        count = sum(len(tokens) - 1 for _, _, tokens in documents)
        loss = model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100), position_ids=positions).loss
        torch.testing.assert_close(loss, packed_loss.detach() / count)


def test_which_kinds_keep_documents_apart_natively():
    """The declared capability: the kinds with native segment masks, and a default of False for the rest."""
    native = {kind for kind in ATTENTION_KINDS if honours_segments(_model(kind, kind not in BIDIRECTIONAL).model
                                                                      .blocks[0].attention)}  # fmt: skip
    assert native == NATIVE
    assert honours_segments(_model("markov-sinusoidal-min-gru", True).model.blocks[0].gru)
    assert not honours_segments(_model("softmax-gru", True).model.blocks[0].gru)


def test_rotary_positions_restart_at_each_document():
    rotary = RotaryEmbedding(8).double()
    x = torch.randn(1, 2, 9, 8, dtype=torch.float64)
    positions = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3, 4]])
    rotated = rotary(x, position_ids=positions)
    torch.testing.assert_close(rotated[..., :4, :], rotary(x[..., :4, :]))
    torch.testing.assert_close(rotated[..., 4:, :], rotary(x[..., 4:, :]))
    assert not torch.allclose(rotated[..., 4:, :], rotary(x)[..., 4:, :])


def test_segment_ids_and_rebatching_round_trip():
    positions = torch.tensor([[0, 1, 2, 0, 1, 0, 0], [5, 6, 7, 8, 0, 1, 2]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1]])
    ids = segment_ids(positions, mask)
    assert ids.tolist() == [[0, 0, 0, 1, 1, -1, -1], [0, 0, 0, 0, 1, 1, 1]]
    layout = SegmentBatch.of(ids)
    assert layout.mask.sum(-1).tolist() == [3, 2, 4, 3]
    x = torch.randn(2, 7, 3)
    back = layout.unpack(layout.pack(x))
    torch.testing.assert_close(back, x * mask[..., None])
    with pytest.raises(ValueError, match="position_ids must be >= 0"):
        segment_ids(-positions)
    with pytest.raises(ValueError, match=r"position_ids must be \(B, T\); got shape \(7,\)"):
        segment_ids(positions[0])
    with pytest.raises(ValueError, match=r"position_ids \(2, 7\) and attention_mask \(2, 6\) must have the same"):
        segment_ids(positions, mask[:, :6])


@pytest.mark.parametrize("kind", ["s4d", "hyena", "gru"])
def test_unpadded_rows_stay_apart_where_a_row_ends_and_the_next_begins_with_the_same_segment(kind):
    """Crops of long documents (positions 57.., one segment per row, no padding): a row's last token and the next
    row's first are flat neighbours with the same segment id, and the kinds run per document read them as one
    document of 2T (row 1 read row 0: 0.1 in logits for S4D and the GRU)."""
    assert SegmentBatch.of(torch.zeros(2, 4, dtype=torch.long)).mask.sum(-1).tolist() == [4, 4]
    model = _model(kind, causal=True)
    ids = torch.randint(1, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(57, 69).expand(2, -1)
    packed = model(ids, position_ids=positions).logits
    for row in range(2):
        torch.testing.assert_close(packed[row], model(ids[row : row + 1]).logits[0], atol=1e-9, rtol=1e-7)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("backend", "window"), [("naive", 3), ("naive", None), ("banded", 3), ("chunked", None)])
def test_lag_bias_op_masks_by_segment_like_each_document_alone(backend, window, causal):
    """The op itself (no model): outputs and q/k/v/bias gradients of a packed call equal those of each document's
    slice run alone, on every CPU path; without the segment ids they differ (the documents would mix)."""
    from markovformer.ops.lag_bias_attention import lag_bias_attention

    generator = torch.Generator().manual_seed(3)
    ids, mask, positions, documents = _packed_batch(generator)
    batch, length = ids.shape
    q, k, v = (torch.randn(batch, 2, length, 4, generator=generator, dtype=torch.float64, requires_grad=True)
               for _ in range(3))  # fmt: skip
    past, future = (torch.randn(batch, 2, length, 2, generator=generator, dtype=torch.float64, requires_grad=True)
                    for _ in range(2))  # fmt: skip
    options = dict(window=window, causal=causal, backend=backend)
    segments = segment_ids(positions, mask)
    out = lag_bias_attention(q, k, v, past, future, attention_mask=mask, segment_ids=segments, **options)
    weights = torch.randn(out.shape, generator=generator, dtype=torch.float64) * mask[:, None, :, None]
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v, past, future))
    mixed = lag_bias_attention(q, k, v, past, future, attention_mask=mask, **options)
    assert not torch.allclose(mixed * mask[:, None, :, None], out)
    for row, start, tokens in documents:
        part = slice(start, start + len(tokens))
        pieces = [t[row : row + 1, :, part].detach().requires_grad_() for t in (q, k, v, past, future)]
        alone = lag_bias_attention(*pieces, **options)
        torch.testing.assert_close(out[row : row + 1, :, part], alone)
        alone_grads = torch.autograd.grad((alone * weights[row : row + 1, :, part]).sum(), pieces)
        for got, want in zip(grads, alone_grads, strict=True):
            torch.testing.assert_close(got[row : row + 1, :, part], want)


@pytest.mark.parametrize("context_mode", ["recurrent", "markov"])
def test_scan_markov_packed_batch_equals_each_document_alone(context_mode):
    from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

    torch.manual_seed(0)
    values = dict(vocab_size=VOCAB, d_model=8, ffn_mult=2, max_positions=24, context_mode=context_mode)
    model = ScanMarkovForCausalLM(ScanMarkovConfig(**values, **({"order": 3} if context_mode == "markov" else {})))
    model = model.double().train()
    ids, mask, positions, documents = _packed_batch(torch.Generator().manual_seed(1))
    packed = model(ids, attention_mask=mask, position_ids=positions).logits
    for row, start, tokens in documents:
        torch.testing.assert_close(packed[row, start : start + len(tokens)], model(tokens[None]).logits[0])
    count = sum(len(tokens) - 1 for _, _, tokens in documents)
    total = sum(_document_loss(model(t[None]).logits[0], t, True) for _, _, t in documents)
    loss = model(ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100), position_ids=positions).loss
    torch.testing.assert_close(loss, total / count)


@torch.no_grad()
def test_scan_markov_packed_documents_are_read_with_the_calls_order():
    """``order`` overrides the markov window for one call (training on a mixture of n): each packed document is read
    with that window too, as it is alone, not with the configured one."""
    from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

    torch.manual_seed(0)
    model = ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=8, ffn_mult=2, max_positions=24, order=4))
    model = model.double().eval()
    for parameter in model.parameters():  # unit scale: at the 0.02 init the two windows differ by only ~4e-4
        parameter.normal_()
    ids, mask, positions, documents = _packed_batch(torch.Generator().manual_seed(1))
    for order in (2, 4):
        packed = model(ids, attention_mask=mask, position_ids=positions, order=order).logits
        for row, start, tokens in documents:
            alone = model(tokens[None], order=order).logits[0]
            torch.testing.assert_close(packed[row, start : start + len(tokens)], alone, rtol=1e-10, atol=1e-10)
    assert not torch.allclose(model(ids, attention_mask=mask, position_ids=positions, order=2).logits,
                              model(ids, attention_mask=mask, position_ids=positions).logits)  # fmt: skip


def test_training_passes_position_ids_and_refuses_a_model_that_cannot_take_them(tmp_path):
    """A packed text run: the task's model inputs carry position_ids, so a document inside a training window gets
    the logits it gets alone; a model whose forward has no position_ids is refused up front, naming the option."""
    from markovformer.data.collate import collate
    from markovformer.data.readers.text import load_text_lm
    from markovformer.training.tasks import build_task, model_inputs
    from markovformer.training.trainer_config import ConfigError

    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(20):
        (folder / f"{i}.txt").write_text("doc: " + "ab ba " * (2 + i % 3), encoding="utf-8")
    bundle = load_text_lm(folder, seq_len=24, fractions=(0.6, 0.2, 0.2), packing=True, cache_dir=tmp_path / "c")
    task = build_task("causal_lm", info=bundle.info, tokenizer=bundle.tokenizer)
    task.check_data(bundle)
    config = MarkovianTransformerConfig(vocab_size=bundle.info["vocab_size"], d_model=16, n_layers=1, n_heads=2,
                                        dropout=0.0, max_order=2)  # fmt: skip
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(config).double()
    task.check_model(model)
    batch = collate([bundle.train[0], bundle.train[1]])
    inputs = model_inputs(batch)
    assert torch.equal(inputs["position_ids"], batch["position_ids"])
    logits = model(**inputs).logits
    row, positions = 0, batch["position_ids"][0].tolist()
    start = positions.index(0, 1)  # the second document of the first window: it starts inside the window
    end = positions.index(0, start + 1) if 0 in positions[start + 1 :] else len(positions)
    alone = model(batch["input_ids"][row : row + 1, start:end]).logits[0]
    torch.testing.assert_close(logits[row, start:end], alone)

    class NoPositions(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, labels=None):
            raise AssertionError("never called")

    with pytest.raises(ConfigError, match="data.packing is set but NoPositions takes no position_ids"):
        task.check_model(NoPositions())


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("backend", "chunk_size"), [("naive", 4), ("chunked", 4), ("chunked", 3), ("chunked", 64)])
def test_linear_attention_keeps_documents_apart_like_each_document_alone(backend, chunk_size, causal):
    """Random-feature (linear) attention: prefix sums that restart at each document across and inside chunks."""
    from markovformer.ops.linear_attention import linear_attention

    generator = torch.Generator().manual_seed(4)
    ids, mask, positions, documents = _packed_batch(generator)
    batch, length = ids.shape
    q, k = (torch.rand(batch, 2, length, 5, generator=generator, dtype=torch.float64, requires_grad=True)
            for _ in range(2))  # fmt: skip
    v = torch.randn(batch, 2, length, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    options = dict(causal=causal, backend=backend, chunk_size=chunk_size)
    out = linear_attention(q, k, v, attention_mask=mask, segment_ids=segment_ids(positions, mask), **options)
    weights = torch.randn(out.shape, generator=generator, dtype=torch.float64) * mask[:, None, :, None]
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    for row, start, tokens in documents:
        part = slice(start, start + len(tokens))
        pieces = [t[row : row + 1, :, part].detach().requires_grad_() for t in (q, k, v)]
        alone = linear_attention(*pieces, **options)
        torch.testing.assert_close(out[row : row + 1, :, part], alone)
        alone_grads = torch.autograd.grad((alone * weights[row : row + 1, :, part]).sum(), pieces)
        for got, want in zip(grads, alone_grads, strict=True):
            torch.testing.assert_close(got[row : row + 1, :, part], want)


@pytest.mark.parametrize("case", ["markov", "softmax-global", "rff", "alibi", "t5_bias", "stick_breaking", "cope",
                                  "retnet", "linformer"])  # the last: weights of the documents alone, scattered back
def test_attention_weights_of_a_packed_batch_are_each_documents_own(case):
    """The inspection path (dense weights: the naive twins, or the per-document path) keeps documents apart too: each
    document's block of the (T, T) weights equals its weights alone, and nothing outside the blocks."""
    model = _model(case, case not in BIDIRECTIONAL).eval()
    ids, mask, positions, documents = _packed_batch(torch.Generator().manual_seed(1))
    with torch.no_grad():
        packed = model(ids, attention_mask=mask, position_ids=positions, return_weights=True).attentions
        inside = torch.zeros_like(packed[0][:, :1], dtype=torch.bool)
        for row, start, tokens in documents:
            part = slice(start, start + len(tokens))
            inside[row, :, part, part] = True
            alone = model(tokens[None], return_weights=True).attentions
            for got, want in zip(packed, alone, strict=True):
                torch.testing.assert_close(got[row, :, part, part], want[0])
    for weights in packed:
        assert not weights.masked_fill(inside, 0).any()


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("form", "chunk_size"),
                         [("parallel", 4), ("chunkwise", 4), ("chunkwise", 3), ("recurrent", 64)])
def test_retention_keeps_documents_apart_like_each_document_alone(form, chunk_size, causal):
    """Retention: the decay matrix masked by document inside a chunk, the chunk state restarting at each one."""
    from markovformer.ops.retention import retention

    generator = torch.Generator().manual_seed(5)
    ids, mask, positions, documents = _packed_batch(generator)
    batch, length = ids.shape
    q, k, v = (torch.randn(batch, 2, length, 3, generator=generator, dtype=torch.float64, requires_grad=True)
               for _ in range(3))  # fmt: skip
    gamma = torch.tensor([0.9, 0.6], dtype=torch.float64)
    real = mask[:, None, :, None].to(torch.float64)
    options = dict(gamma=gamma, causal=causal, form=form, chunk_size=chunk_size)
    out = retention(q, k * real, v * real, segment_ids=segment_ids(positions, mask), **options)
    weights = torch.randn(out.shape, generator=generator, dtype=torch.float64) * real
    grads = torch.autograd.grad((out * weights).sum(), (q, k, v))
    for row, start, tokens in documents:
        part = slice(start, start + len(tokens))
        pieces = [t[row : row + 1, :, part].detach().requires_grad_() for t in (q, k, v)]
        alone = retention(*pieces, **options)
        torch.testing.assert_close(out[row : row + 1, :, part], alone)
        alone_grads = torch.autograd.grad((alone * weights[row : row + 1, :, part]).sum(), pieces)
        for got, want in zip(grads, alone_grads, strict=True):
            torch.testing.assert_close(got[row : row + 1, :, part], want)


@pytest.mark.parametrize("causal", [True, False])
def test_wkv_keeps_documents_apart_like_each_document_alone(causal):
    """RWKV's WKV sums restart at each document, their stabilising maximum too: keys of one document far larger
    than the next one's (by 1000) must not drown it."""
    from markovformer.ops.wkv import wkv_scan

    generator = torch.Generator().manual_seed(6)
    ids, mask, positions, documents = _packed_batch(generator)
    batch, length = ids.shape
    k = torch.randn(batch, length, 4, generator=generator, dtype=torch.float64)
    k[0, :5] += 1000.0  # the first document of row 0 towers over the next (e^-1000 underflows)
    k, v = k.requires_grad_(), torch.randn(batch, length, 4, generator=generator, dtype=torch.float64).requires_grad_()
    w, u = torch.rand(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    out = wkv_scan(w, u, k, v, causal, mask, segment_ids=segment_ids(positions, mask))
    weights = torch.randn(out.shape, generator=generator, dtype=torch.float64) * mask[..., None]
    grads = torch.autograd.grad((out * weights).sum(), (k, v))
    for row, start, tokens in documents:
        part = slice(start, start + len(tokens))
        pieces = [t[row : row + 1, part].detach().requires_grad_() for t in (k, v)]
        alone = wkv_scan(w, u, *pieces, causal)
        torch.testing.assert_close(out[row : row + 1, part], alone)
        alone_grads = torch.autograd.grad((alone * weights[row : row + 1, part]).sum(), pieces)
        for got, want in zip(grads, alone_grads, strict=True):
            torch.testing.assert_close(got[row : row + 1, part], want)
