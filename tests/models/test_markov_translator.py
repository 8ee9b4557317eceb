"""MAT: the exact Markov property and the n-gram leak, all four decoder rows against a naive reference,
incremental decoding against the teacher-forced forward, greedy and beam search (exhaustively checked), padding,
the loss, config validation and the save/load round trip."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from markovformer.models.markov_translator import (
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    beam_search,
    decode_step,
    generate,
    greedy_search,
    start_decoding,
)

PAD, BOS, EOS = 0, 1, 2
ROWS = {"at": (None, False), "transparent_at": (None, True), "ngram": (3, False), "mat": (3, True)}


def _config(**overrides) -> MarkovTranslatorConfig:
    values = dict(vocab_size=9, d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=3, d_ff=24, dropout=0.0,
                  max_positions=32)  # fmt: skip
    values.update(overrides)
    return MarkovTranslatorConfig(**values)


@torch.no_grad()
def _build(seed: int = 0, scale: float = 1.0, **overrides) -> MarkovTranslatorForConditionalGeneration:
    """A float64 model with every parameter re-drawn at unit scale (the 0.02 init makes every path nearly linear)."""
    torch.manual_seed(seed)
    model = MarkovTranslatorForConditionalGeneration(_config(**overrides)).double().eval()
    g = torch.Generator().manual_seed(seed)
    for name, parameter in model.named_parameters():
        noise = torch.randn(parameter.shape, generator=g, dtype=torch.float64)
        if "norm" in name:
            parameter.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
        elif parameter.dim() == 2:
            parameter.copy_(scale * noise / parameter.shape[1] ** 0.5)
        else:
            parameter.copy_(0.1 * noise)
    return model


def _generation_model(row: str) -> MarkovTranslatorForConditionalGeneration:
    """A random model whose greedy outputs vary with the source and often end with eos, eos often ranking second
    (most random tied-embedding models just copy their input token)."""
    order, transparent = ROWS[row]
    model = _build(seed=1, scale=2.0, order=order, transparent=transparent)
    with torch.no_grad():
        model.embed.weight.mul_(0.5)
    return model


def _tokens(batch: int, length: int, seed: int, vocab: int = 9) -> torch.Tensor:
    """Content tokens (never pad, bos or eos)."""
    return torch.randint(3, vocab, (batch, length), generator=torch.Generator().manual_seed(seed))


def _decoder_input(batch: int, length: int, seed: int) -> torch.Tensor:
    ids = _tokens(batch, length, seed)
    ids[:, 0] = BOS
    return ids


@torch.no_grad()
def _perturbation_effect(model: MarkovTranslatorForConditionalGeneration, length: int = 9) -> torch.Tensor:
    """effect[p, i]: largest change of the logits at position i when the decoder input at position p changes."""
    src, tgt = _tokens(1, 6, seed=1), _decoder_input(1, length, seed=2)
    base = model(src, tgt).logits[0]
    variants = tgt.repeat(length, 1)
    positions = torch.arange(length)
    variants[positions, positions] = (variants[positions, positions] - 2) % 6 + 3  # another content token
    logits = model(src.repeat(length, 1), variants).logits
    return (logits - base).abs().amax(-1)


def _lags(length: int) -> torch.Tensor:
    """lag[p, i] = i - p: how far back the perturbed input sits from the position read."""
    positions = torch.arange(length)
    return positions[None, :] - positions[:, None]


@pytest.mark.parametrize("order", [1, 2, 3])
def test_mat_is_exactly_kth_order_markov(order):
    effect = _perturbation_effect(_build(order=order, transparent=True))
    lag = _lags(effect.shape[0])
    in_window = (lag >= 0) & (lag < order)  # position i holds y_{i-1} and may read y_{i-k..i-1}
    assert effect[~in_window].max() < 1e-6
    assert effect[in_window].min() > 1e-4


@pytest.mark.parametrize("order", [1, 2, 3])
def test_ngram_mask_without_transparency_leaks_with_depth(order):
    model = _build(order=order, transparent=False)
    effect = _perturbation_effect(model)
    lag = _lags(effect.shape[0])
    reach = model.config.n_decoder_layers * (order - 1)  # n-gram masking: L·(k-1)+1 tokens reach position i
    seen = (lag >= 0) & (lag <= reach)
    assert effect[~seen].max() < 1e-6
    assert effect[seen].min() > 1e-4
    if order > 1:
        assert effect[lag >= order].max() > 1e-4  # the Markov property fails


def _layer_norm(x, norm):
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias)


def _naive_attention(x_query, x_key_value, attention, allowed):
    """Per-head loops and a dense (Tq, Tk) mask, from the module's raw weights."""
    d_model, heads = x_query.shape[-1], attention.n_heads
    head_dim = d_model // heads
    query = x_query @ attention.query.weight.T + attention.query.bias
    key_value = x_key_value @ attention.key_value.weight.T + attention.key_value.bias
    keys, values = key_value[..., :d_model], key_value[..., d_model:]
    outputs = []
    for h in range(heads):
        part = slice(h * head_dim, (h + 1) * head_dim)
        scores = query[..., part] @ keys[..., part].transpose(-1, -2) / math.sqrt(head_dim)
        outputs.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1) @ values[..., part])
    return torch.cat(outputs, dim=-1) @ attention.out.weight.T + attention.out.bias


def _naive_ffn(x, ffn):
    return torch.relu(x @ ffn.up.weight.T + ffn.up.bias) @ ffn.down.weight.T + ffn.down.bias


def _naive_logits(model, src, tgt):
    config, d_model = model.config, model.config.d_model
    length = max(src.shape[1], tgt.shape[1])
    angle = torch.arange(length, dtype=torch.float64)[:, None] / 10000 ** (
        torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    )
    position = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(-2)  # pe[t, 2i] = sin, pe[t, 2i+1] = cos
    # the library's table is computed in float32: check it at that precision, then use it so the rest is exact
    assert torch.allclose(model.position_table[:length], position, atol=1e-6, rtol=0)
    position = model.position_table[:length]
    hidden = model.embed.weight[src] * d_model**0.5 + position[: src.shape[1]]
    everything = torch.ones(src.shape[1], src.shape[1], dtype=torch.bool)
    for layer in model.encoder_layers:
        normed = _layer_norm(hidden, layer.self_norm)
        hidden = hidden + _naive_attention(normed, normed, layer.self_attention, everything)
        hidden = hidden + _naive_ffn(_layer_norm(hidden, layer.ffn_norm), layer.ffn)
    memory = _layer_norm(hidden, model.encoder_norm)
    embedded = model.embed.weight[tgt] * d_model**0.5 + position[: tgt.shape[1]]
    steps = range(tgt.shape[1])
    band = torch.tensor([[j <= i and (config.order is None or j > i - config.order) for j in steps] for i in steps])
    cross = torch.ones(tgt.shape[1], src.shape[1], dtype=torch.bool)
    hidden = embedded
    for layer in model.decoder_layers:
        normed = _layer_norm(hidden, layer.self_norm)
        source = _layer_norm(embedded, layer.embedding_norm) if config.transparent else normed
        hidden = hidden + _naive_attention(normed, source, layer.self_attention, band)
        hidden = hidden + _naive_attention(_layer_norm(hidden, layer.cross_norm), memory, layer.cross_attention, cross)
        hidden = hidden + _naive_ffn(_layer_norm(hidden, layer.ffn_norm), layer.ffn)
    return _layer_norm(hidden, model.decoder_norm) @ model.embed.weight.T


@pytest.mark.parametrize("row", list(ROWS))
def test_every_row_matches_a_naive_reference(row):
    order, transparent = ROWS[row]
    model = _build(order=order, transparent=transparent)
    src, tgt = _tokens(2, 5, seed=3), _decoder_input(2, 7, seed=4)
    with torch.no_grad():
        assert torch.allclose(model(src, tgt).logits, _naive_logits(model, src, tgt), atol=1e-10, rtol=0)


def _padded_batch():
    """Two sources and decoder inputs, the first right-padded with junk tokens that the masks must hide."""
    src, tgt = _tokens(2, 6, seed=5), _decoder_input(2, 7, seed=6)
    src_mask, tgt_mask = torch.ones_like(src), torch.ones_like(tgt)
    src_mask[0, 4:], tgt_mask[0, 5:] = 0, 0
    return src, tgt, src_mask, tgt_mask, (4, 5)


@pytest.mark.parametrize("row", list(ROWS))
def test_padding_changes_nothing_for_real_tokens(row):
    order, transparent = ROWS[row]
    model = _build(order=order, transparent=transparent)
    src, tgt, src_mask, tgt_mask, (src_len, tgt_len) = _padded_batch()
    with torch.no_grad():
        logits = model(src, tgt, src_mask, tgt_mask).logits
        alone = model(src[:1, :src_len], tgt[:1, :tgt_len]).logits
        assert torch.isfinite(logits).all()
        assert torch.allclose(logits[0, :tgt_len], alone[0], atol=1e-12, rtol=0)
        assert torch.allclose(logits[1], model(src[1:], tgt[1:]).logits[0], atol=1e-12, rtol=0)
    model = _generation_model(row)
    for beam_size in (1, 3):
        batched = generate(model, src, src_mask, beam_size=beam_size, max_length=6)
        single = generate(model, src[:1, :src_len], beam_size=beam_size, max_length=6)
        width = single.sequences.shape[1]
        assert torch.equal(batched.sequences[0, :width], single.sequences[0])
        assert (batched.sequences[0, width:] == PAD).all()
        assert torch.allclose(batched.scores[0], single.scores[0], atol=1e-12, rtol=0)


@pytest.mark.parametrize("row", list(ROWS))
def test_a_source_padded_on_the_left_translates_as_it_does_alone_and_a_left_padded_target_is_refused(row):
    """Source positions count the source's real tokens (a tokenizer padding on the left shifted them, and the
    translation changed); the decoder's band counts from the target's first column, so its padding must be on
    the right."""
    order, transparent = ROWS[row]
    model = _build(order=order, transparent=transparent)
    src, tgt = _tokens(2, 6, seed=5), _decoder_input(2, 7, seed=6)
    src_mask = torch.ones_like(src)
    src_mask[0, :2] = 0
    with torch.no_grad():
        logits = model(src, tgt, src_mask).logits
        assert torch.allclose(logits[0], model(src[:1, 2:], tgt[:1]).logits[0], atol=1e-12, rtol=0)
    model = _generation_model(row)
    for beam_size in (1, 3):
        batched = generate(model, src, src_mask, beam_size=beam_size, max_length=6)
        single = generate(model, src[:1, 2:], beam_size=beam_size, max_length=6)
        width = single.sequences.shape[1]
        assert torch.equal(batched.sequences[0, :width], single.sequences[0])
        assert torch.allclose(batched.scores[0], single.scores[0], atol=1e-12, rtol=0)
    tgt_mask = torch.ones_like(tgt)
    tgt_mask[0, :2] = 0
    with pytest.raises(ValueError, match="tgt_mask needs a right-padded attention_mask"):
        model(src, tgt, src_mask, tgt_mask)


@pytest.mark.parametrize("row", list(ROWS))
def test_incremental_decoding_reproduces_the_full_forward(row):
    order, transparent = ROWS[row]
    model = _build(order=order, transparent=transparent)
    src, tgt, src_mask, _, _ = _padded_batch()
    with torch.no_grad():
        full = model(src, tgt, src_mask).logits
        state = start_decoding(model, src, src_mask)
        for step in range(tgt.shape[1]):
            logits = decode_step(model, tgt[:, step], state)
            assert torch.allclose(logits, full[:, step], atol=1e-10, rtol=0), step
            held = step + 1 if order is None else min(step + 1, order)
            if row == "mat":  # the last k layer-0 inputs, no key/value cache
                assert state.cache is None and state.inputs.shape == (2, held, model.config.d_model)
            else:
                assert state.inputs is None
                assert all(keys.shape[2] == held and values.shape[2] == held for keys, values in state.cache)


def _rescore(model, src, src_mask, sequences, length_penalty):
    """Teacher-forced penalised scores of generated (B, L) sequences, padding excluded as in generation."""
    tgt = torch.cat([torch.full_like(sequences[:, :1], BOS), sequences[:, :-1]], dim=1)
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, tgt, src_mask).logits, dim=-1)
    real = sequences != PAD
    picked = log_probs.gather(-1, sequences[..., None])[..., 0] * real
    return picked.sum(-1) / real.sum(-1).double() ** length_penalty


@pytest.mark.parametrize("row", list(ROWS))
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_greedy_and_beam_of_one_agree_with_a_full_forward_greedy(row, length_penalty):
    model = _generation_model(row)
    src = _tokens(12, 6, seed=9)  # many sources, so that eos often ranks second (beam search must not end there)
    src_mask = (torch.arange(6) < torch.randint(2, 7, (12, 1), generator=torch.Generator().manual_seed(10))).long()
    greedy = greedy_search(model, src, src_mask, max_length=8, length_penalty=length_penalty)
    beam = beam_search(model, src, src_mask, beam_size=1, max_length=8, length_penalty=length_penalty)
    assert torch.equal(greedy.sequences, beam.sequences)
    assert torch.allclose(greedy.scores, beam.scores, atol=1e-12, rtol=0)
    with torch.no_grad():  # the reference re-runs the whole prefix at every step: no cache, no state
        prefix = torch.full((12, 1), BOS)
        for _ in range(8):
            logits = model(src, prefix, src_mask).logits[:, -1]
            logits[:, PAD] = float("-inf")
            prefix = torch.cat([prefix, logits.argmax(-1, keepdim=True)], dim=1)
    for b in range(12):
        ids = greedy.sequences[b][greedy.sequences[b] != PAD]
        assert torch.equal(ids, prefix[b, 1 : len(ids) + 1])
        assert ids[-1] == EOS or len(ids) == 8
    assert torch.allclose(greedy.scores, _rescore(model, src, src_mask, greedy.sequences, length_penalty), atol=1e-10)


@pytest.mark.parametrize("row", list(ROWS))
def test_beam_scores_match_a_teacher_forced_rescoring(row):
    model = _generation_model(row)
    src, _, src_mask, _, _ = _padded_batch()
    result = generate(model, src, src_mask, beam_size=3, max_length=8, length_penalty=0.6)
    rescored = _rescore(model, src, src_mask, result.sequences, 0.6)
    assert torch.allclose(result.scores, rescored, atol=1e-10, rtol=0)


def _all_hypotheses(max_length: int) -> list[list[int]]:
    """Every sequence generation can end with: content tokens (bos counts as one) then eos, or max_length tokens."""
    content = [BOS, 3, 4]
    ended = [list(body) + [EOS] for n in range(max_length) for body in itertools.product(content, repeat=n)]
    return ended + [list(body) for body in itertools.product(content, repeat=max_length)]


def test_wide_beam_finds_the_best_penalised_hypothesis():
    model = _build(seed=11, scale=3.0, vocab_size=5, order=2, transparent=True)
    src = torch.tensor([[3, 4, 4, 3, 0], [4, 4, 3, 3, 3]])
    src_mask = (torch.arange(5) < torch.tensor([[4], [5]])).long()
    hypotheses = _all_hypotheses(max_length=4)
    best_by_penalty = []
    for length_penalty in (0.0, 1.0, 3.0):
        result = beam_search(model, src, src_mask, beam_size=128, max_length=4, length_penalty=length_penalty)
        for b in range(2):
            scores = []
            for ids in hypotheses:
                sequence = torch.tensor([ids])
                scores.append(float(_rescore(model, src[b : b + 1], src_mask[b : b + 1], sequence, length_penalty)))
            best = max(range(len(hypotheses)), key=scores.__getitem__)
            found = result.sequences[b][result.sequences[b] != PAD].tolist()
            assert found == hypotheses[best]
            assert math.isclose(float(result.scores[b]), scores[best], abs_tol=1e-10)
            best_by_penalty.append((b, tuple(found)))
    assert len(set(best_by_penalty)) > 2  # the penalty changes the winner: the example discriminates


def test_loss_is_the_mean_token_cross_entropy_with_smoothing():
    model = _build()
    src, tgt = _tokens(2, 5, seed=12), _decoder_input(2, 6, seed=13)
    labels = torch.cat([tgt[:, 1:], torch.full((2, 1), EOS)], dim=1)
    labels[0, 4:] = -100
    output = model(src, tgt, labels=labels, label_smoothing=0.1)
    log_probs = torch.log_softmax(output.logits, dim=-1)
    keep = labels != -100
    nll = -log_probs.gather(-1, labels.clamp_min(0)[..., None])[..., 0]
    expected = (0.9 * nll - 0.1 * log_probs.mean(-1))[keep].mean()
    assert torch.allclose(output.loss, expected, atol=1e-12, rtol=0)
    assert torch.equal(output.encoder_last_hidden_state, model.encode(src))


@pytest.mark.parametrize(
    ("field", "value"),
    [("vocab_size", 0), ("d_model", 15), ("n_heads", 0), ("n_decoder_layers", -1), ("d_ff", 0), ("order", 0),
     ("order", 2.5), ("order", -1), ("order", True), ("order", 33), ("transparent", "yes"), ("dropout", 1.0),
     ("max_positions", 0), ("bos_token_id", 9), ("eos_token_id", 0), ("initializer_range", 0.0)],
)  # fmt: skip
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"MarkovTranslatorConfig.{field}="):
        _config(**{field: value})


def test_label_smoothing_is_a_forward_option_not_a_config_field():
    model = _build()
    src, tgt = _tokens(1, 3, seed=0), _decoder_input(1, 3, seed=0)
    with pytest.raises(ValueError, match="label_smoothing=-0.1"):
        model(src, tgt, labels=tgt, label_smoothing=-0.1)
    with torch.no_grad():  # the default is the plain cross-entropy
        plain = F.cross_entropy(model(src, tgt).logits.flatten(0, 1), tgt.flatten())
        assert torch.allclose(model(src, tgt, labels=tgt).loss, plain, atol=1e-12, rtol=0)
    saved = _config().to_dict()
    assert "label_smoothing" not in saved
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an old file at the old default loads quietly
        assert MarkovTranslatorConfig.from_dict({**saved, "label_smoothing": 0.0}) == _config()
    with pytest.warns(UserWarning, match=r"label_smoothing=0.1 .*trainer.label_smoothing"):
        assert MarkovTranslatorConfig.from_dict({**saved, "label_smoothing": 0.1}) == _config()


def test_config_defaults_and_bad_inputs():
    assert _config(d_ff=None).d_ff == 64
    with pytest.raises(ValueError, match="has no field 'ordr'"):
        MarkovTranslatorConfig.from_dict({**_config().to_dict(), "ordr": 3})
    model = _build()
    with pytest.raises(ValueError, match="token id 9"):
        model(torch.tensor([[3, 9]]), torch.tensor([[BOS]]))
    with pytest.raises(ValueError, match="max_positions=32"):
        model.encode(_tokens(1, 33, seed=0))
    with pytest.raises(ValueError, match="tgt_mask"):
        model(_tokens(1, 3, seed=0), _decoder_input(1, 3, seed=0), tgt_mask=torch.ones(1, 4))
    with pytest.raises(ValueError, match="max_length=33"):
        generate(model, _tokens(1, 3, seed=0), max_length=33)
    with pytest.raises(ValueError, match="beam_size=0"):
        beam_search(model, _tokens(1, 3, seed=0), beam_size=0)


def test_save_and_load_round_trip(tmp_path):
    model = _build(order=2, transparent=True).float()  # float32 weights load back exactly
    model.save_pretrained(tmp_path)
    loaded = MarkovTranslatorForConditionalGeneration.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    src, tgt = _tokens(2, 5, seed=14), _decoder_input(2, 6, seed=15)
    with torch.no_grad():
        assert torch.equal(loaded(src, tgt).logits, model(src, tgt).logits)
    assert torch.equal(generate(loaded, src, beam_size=2, max_length=5).sequences,
                       generate(model, src, beam_size=2, max_length=5).sequences)  # fmt: skip
