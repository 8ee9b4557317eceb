"""The scan Markov model: pinned to its recurrence written out token by token, the markov window's exact receptive
field and window-relative positions, causality under right padding, incremental decoding equal to the full forward,
tied weights, the checkpoint round trip and config validation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM

VOCAB = 11
WINDOW = 3


def _config(**overrides) -> ScanMarkovConfig:
    values = dict(vocab_size=VOCAB, d_model=8, ffn_mult=2, max_positions=24, order=WINDOW)
    values.update(overrides)
    if values.get("context_mode") == "recurrent":
        values.pop("order", None)
    return ScanMarkovConfig(**values)


@torch.no_grad()
def _build(seed: int = 0, **overrides) -> ScanMarkovForCausalLM:
    """A float64 model in eval mode with every parameter re-drawn at unit scale (the 0.02 init is nearly linear)."""
    torch.manual_seed(seed)
    model = ScanMarkovForCausalLM(_config(**overrides)).double().eval()
    g = torch.Generator().manual_seed(seed)
    for name, parameter in model.named_parameters():
        noise = torch.randn(parameter.shape, generator=g, dtype=torch.float64)
        if name.startswith("norm."):
            parameter.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
        elif "embed" in name or parameter.dim() == 1:
            parameter.copy_(noise)
        else:
            parameter.copy_(noise / parameter.shape[1] ** 0.5)
    return model


def _tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def _changed(ids: torch.Tensor, position: int) -> torch.Tensor:
    changed = ids.clone()
    changed[:, position] = (changed[:, position] + 1 + position % (VOCAB - 1)) % VOCAB
    return changed


def _spec_logits(
    model: ScanMarkovForCausalLM, tokens: list[int], positions: list[int], skipped: list[bool] | None = None
) -> torch.Tensor:
    """The recurrence written out for one sequence: h_{-1} = 0, h = A h + B e, logits = decode(LN(h)) Eᵀ -> (V,); the
    tokens marked ``skipped`` leave h as it was."""
    state = torch.zeros(model.config.d_model, dtype=model.embed.weight.dtype)
    for index, (token, position) in enumerate(zip(tokens, positions, strict=True)):
        if skipped is not None and skipped[index]:
            continue
        e = model.embed.weight[token] + model.position_embedding.weight[position]
        gate_a, gate_b = torch.sigmoid(model.gate_proj(e)).chunk(2)
        state = gate_a * state + gate_b * e
    return model.decoder(model.norm(state)) @ model.embed.weight.T


@torch.no_grad()
@pytest.mark.parametrize("mode, window_positions", [("markov", "start"), ("markov", "end"), ("recurrent", "start")])
def test_logits_follow_the_spec_formula(mode, window_positions):
    """Positions 0.. from the window start, or with ``window_positions="end"`` counted back from the
    window's last token (which sits at 0), also in windows cut short by the sequence start."""
    model = _build(context_mode=mode, window_positions=window_positions)
    ids = _tokens(2, 7)
    logits = model(ids).logits
    for row in range(2):
        for t in range(7):
            start = max(0, t - WINDOW + 1) if mode == "markov" else 0
            tokens = ids[row, start : t + 1].tolist()
            positions = list(range(len(tokens)))
            expected = _spec_logits(model, tokens, positions[::-1] if window_positions == "end" else positions)
            torch.testing.assert_close(logits[row, t], expected, rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_positions_from_the_end_make_the_n_state_the_shorter_state_plus_the_oldest_token():
    """With positions counted from the end, the state over n tokens is the state over the last n - 1 plus the oldest
    token's input carried through the later decays: h_n = h_{n-1} + (Π A) ⊙ B ⊙ e, the shape of a backoff."""
    model = _build(window_positions="end")
    ids = _tokens(2, WINDOW)
    longer = model(ids, order=WINDOW).hidden_states[:, -1]
    shorter = model(ids[:, 1:], order=WINDOW - 1).hidden_states[:, -1]
    e = model.embed(ids) + model.position_embedding.weight[WINDOW - 1 - torch.arange(WINDOW)]
    decay, inject = model.gated_inputs(e)
    torch.testing.assert_close(longer - shorter, decay[:, 1:].prod(1) * inject[:, 0], rtol=1e-10, atol=1e-12)


@torch.no_grad()
def test_markov_logits_depend_on_exactly_the_last_n_tokens():
    model = _build()
    ids = _tokens(2, 9)
    logits = model(ids).logits
    for position in range(9):
        changed = model(_changed(ids, position)).logits
        for t in range(9):
            inside = t - WINDOW + 1 <= position <= t
            difference = (changed[:, t] - logits[:, t]).abs().max().item()
            if inside:
                assert difference > 1e-6, (position, t)
            else:
                assert difference < 1e-10, (position, t)


@torch.no_grad()
def test_markov_window_is_the_same_wherever_it_sits():
    """Positions count from the window start, so a window's logits equal those of the window fed alone."""
    model = _build()
    ids = _tokens(2, 8)
    logits = model(ids).logits
    for t in range(8):
        alone = model(ids[:, max(0, t - WINDOW + 1) : t + 1]).logits[:, -1]
        torch.testing.assert_close(logits[:, t], alone, rtol=1e-10, atol=1e-10)


def test_gate_table_lookup_gives_the_direct_values_and_gradients():
    """Without dropout, markov mode gates the (token, position) table once and gathers when the table (V × n) is
    smaller than the batch's (t, offset) pairs; one short row is below that and takes the direct path."""
    model = _build()
    ids = _tokens(6, 9)
    assert 9 < VOCAB <= ids.numel()  # the table pays off for the batch, not for one row
    batch_loss = model(ids, labels=ids).loss
    batch_grads = torch.autograd.grad(batch_loss, list(model.parameters()))
    row_losses = torch.stack([model(row[None], labels=row[None]).loss for row in ids])
    row_grads = torch.autograd.grad(row_losses.mean(), list(model.parameters()))
    torch.testing.assert_close(batch_loss, row_losses.mean(), rtol=1e-12, atol=1e-12)
    for batch_grad, row_grad in zip(batch_grads, row_grads, strict=True):
        torch.testing.assert_close(batch_grad, row_grad, rtol=1e-10, atol=1e-12)


@torch.no_grad()
def test_decoder_dropout_leaves_the_states_and_drops_in_the_decoder_only():
    model = _build(decoder_dropout=0.5)
    ids = _tokens(4, 9)
    reference = model(ids)
    model.train()
    first, second = model(ids), model(ids)
    torch.testing.assert_close(first.hidden_states, reference.hidden_states, rtol=0, atol=0)  # no embedding dropout
    assert not torch.allclose(first.logits, second.logits)  # the decoder drops
    assert _build(dropout=0.3).decoder[2].p == 0.3 and _build(dropout=0.3, decoder_dropout=0.0).decoder[2].p == 0.0


@torch.no_grad()
@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_context_dropout_skips_exactly_the_drawn_steps_of_each_context(mode):
    """In training each (context, token) step is skipped (h passes through) where the model's one uniform draw falls
    below ``context_dropout``: per window in markov mode, (B, T, n), per token in recurrent mode, (B, T). Replayed
    from the same seed, the recurrence without the skipped tokens gives the same logits; eval mode skips nothing."""
    model = _build(context_mode=mode, context_dropout=0.4)
    ids = _tokens(3, 8)
    reference = _build(context_mode=mode)(ids).logits
    torch.testing.assert_close(model(ids).logits, reference, rtol=0, atol=0)
    model.train()
    torch.manual_seed(5)
    logits = model(ids).logits
    torch.manual_seed(5)
    skipped = torch.rand((3, 8, WINDOW) if mode == "markov" else (3, 8)) < 0.4
    assert 0 < skipped.sum() < skipped.numel()
    for row in range(3):
        for t in range(8):
            start = max(0, t - WINDOW + 1) if mode == "markov" else 0
            drawn = skipped[row, t, start - t + WINDOW - 1 :] if mode == "markov" else skipped[row, : t + 1]
            tokens = ids[row, start : t + 1].tolist()
            expected = _spec_logits(model, tokens, list(range(len(tokens))), drawn.tolist())
            torch.testing.assert_close(logits[row, t], expected, rtol=1e-10, atol=1e-10)


@torch.no_grad()
def test_order_override_equals_a_model_built_with_it():
    model = _build()
    other = ScanMarkovForCausalLM(_config(order=5)).double().eval()
    other.load_state_dict(model.state_dict())
    ids = _tokens(2, 9)
    torch.testing.assert_close(model(ids, order=5).logits, other(ids).logits, rtol=0, atol=0)
    with pytest.raises(ValueError, match="order=0"):
        model(ids, order=0)
    with pytest.raises(ValueError, match="order=25"):
        model(ids, order=25)


@torch.no_grad()
def test_recurrent_logits_are_causal_and_see_the_whole_prefix():
    model = _build(context_mode="recurrent")
    ids = _tokens(2, 10)
    logits = model(ids).logits
    assert (model(_changed(ids, 0)).logits[:, -1] - logits[:, -1]).abs().max() > 1e-6
    torch.testing.assert_close(model(_changed(ids, 6)).logits[:, :6], logits[:, :6], rtol=0, atol=0)
    with pytest.raises(ValueError, match="order"):
        model(ids, order=3)
    with pytest.raises(ValueError, match="max_positions=24"):
        model(_tokens(1, 25))


@torch.no_grad()
@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_right_padding_never_reaches_real_positions(mode):
    model = _build(context_mode=mode)
    ids = _tokens(2, 8)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    padded = ids.clone()
    padded[1, 5:] = 0
    logits = model(padded, attention_mask=mask).logits
    torch.testing.assert_close(logits[1, :5], model(ids[1:, :5]).logits[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(logits[0], model(ids[:1]).logits[0], rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="right-padded"):
        model(padded, attention_mask=mask.flip(-1))


@torch.no_grad()
@pytest.mark.parametrize("backend", ["naive", "sequential", "chunked"])
@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_scan_backends_give_the_same_logits(backend, mode):
    reference = _build(context_mode=mode, backend="auto")
    model = ScanMarkovForCausalLM(_config(context_mode=mode, backend=backend)).double().eval()
    model.load_state_dict(reference.state_dict())
    ids = _tokens(2, 11)
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=1e-10, atol=1e-10)


def test_loss_is_shifted_cross_entropy_with_ignore_and_smoothing():
    model = _build()
    ids = _tokens(2, 7)
    labels = ids.clone()
    labels[0, 3] = -100
    output = model(ids, labels=labels, label_smoothing=0.1)
    expected = F.cross_entropy(
        output.logits[:, :-1].reshape(-1, VOCAB), labels[:, 1:].reshape(-1), ignore_index=-100, label_smoothing=0.1
    )
    torch.testing.assert_close(output.loss, expected)
    by_hand = -output.logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    keep = labels[:, 1:] != -100
    torch.testing.assert_close(model(ids, labels=labels).loss, by_hand[keep].mean())
    output.loss.backward()
    assert model.gate_proj[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="label_smoothing=1.5"):
        model(ids, labels=labels, label_smoothing=1.5)


@torch.no_grad()
@pytest.mark.parametrize("mode, order, window_positions",
                         [("markov", None, "start"), ("markov", 2, "start"), ("markov", None, "end"),
                          ("recurrent", None, "start")])  # fmt: skip
@pytest.mark.parametrize("chunks", [(1,) * 9, (4, 1, 1, 3)], ids=["token_by_token", "prefill_then_chunks"])
def test_a_decoding_state_continues_the_full_forward(mode, order, window_positions, chunks):
    """forward(..., state=) over the sequence piece by piece gives the full forward's logits at every position;
    the state keeps h (recurrent) or the last n - 1 tokens (markov), never more."""
    model = _build(context_mode=mode, window_positions=window_positions)
    ids = _tokens(3, 9)
    full = model(ids, order=order).logits
    state: dict = {}
    pieces, start = [], 0
    for size in chunks:
        pieces.append(model(ids[:, start : start + size], order=order, state=state).logits)
        start += size
        kept = state["hidden"].shape if mode == "recurrent" else state["tokens"].shape
        n = order or model.config.order
        assert kept == ((3, model.config.d_model) if mode == "recurrent" else (3, min(start, n - 1)))
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-10, atol=1e-10)
    assert state["length"] == 9


def test_a_decoding_state_scores_its_labels_and_refuses_padding_packing_and_a_change_of_order():
    model = _build(context_mode="markov")
    ids = _tokens(2, 7)
    state: dict = {}
    model(ids[:, :3], state=state)
    continued = model(ids[:, 3:], labels=ids[:, 3:], state=state)  # the chunk's own shifted loss
    full = model(ids).logits[:, 3:]
    torch.testing.assert_close(continued.loss, F.cross_entropy(full[:, :-1].reshape(-1, VOCAB),
                                                               ids[:, 4:].reshape(-1)))  # fmt: skip
    with pytest.raises(ValueError, match="position_ids .* cannot be combined with a decoding state"):
        model(ids[:, :2], position_ids=torch.arange(2).expand(2, 2), state=state)
    with pytest.raises(ValueError, match=r"position_ids must be \(B, T\) = \(2, 7\); got \(2, 6\)"):
        model(ids, position_ids=torch.arange(6).expand(2, 6))
    with pytest.raises(ValueError, match="order=2: this decoding state was started with order 3"):
        model(_tokens(2, 1), order=2, state=state)
    with pytest.raises(ValueError, match="decodes unpadded sequences"):
        model(_tokens(2, 2), torch.tensor([[1, 1], [1, 0]]), state=state)


@torch.no_grad()
@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_greedy_generation_follows_the_full_forward(mode):
    model = _build(context_mode=mode)
    prompt = _tokens(2, 3)
    generated = model.generate(prompt, max_new_tokens=6)
    assert generated.shape == (2, 9) and torch.equal(generated[:, :3], prompt)
    for t in range(3, 9):
        assert torch.equal(generated[:, t], model(generated[:, :t]).logits[:, -1].argmax(-1))
    assert torch.equal(model.generate(prompt, max_new_tokens=6, do_sample=True, top_p=1e-9), generated)


@torch.no_grad()
def test_sampling_is_reproducible_from_the_generator():
    model = _build()
    prompt = _tokens(2, 2)
    options = dict(max_new_tokens=12, do_sample=True, temperature=1.5, top_p=0.9)
    first = model.generate(prompt, **options, generator=torch.Generator().manual_seed(3))
    again = model.generate(prompt, **options, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, again)
    assert ((first[:, 2:] >= 0) & (first[:, 2:] < VOCAB)).all()


def test_recurrent_generation_refuses_to_run_past_max_positions():
    model = _build(context_mode="recurrent")
    with pytest.raises(ValueError, match="max_positions=24"):
        model.generate(_tokens(1, 20), max_new_tokens=6)
    assert model.generate(_tokens(1, 20), max_new_tokens=5).shape == (1, 25)
    with pytest.raises(ValueError, match="max_new_tokens=-1"):
        model.generate(_tokens(1, 2), max_new_tokens=-1)


def test_output_weights_are_tied_to_the_embedding(tmp_path):
    model = _build()
    assert model.lm_head.weight is model.embed.weight
    model(_tokens(2, 5), labels=_tokens(2, 5)).loss.backward()
    assert model.embed.weight.grad is model.lm_head.weight.grad
    model.save_pretrained(tmp_path)
    loaded = ScanMarkovForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight.data_ptr() == loaded.embed.weight.data_ptr()


@torch.no_grad()
@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_save_and_load_give_identical_logits(tmp_path, mode):
    model = _build(context_mode=mode).float()  # checkpoints load into a float32 model
    model.save_pretrained(tmp_path)
    loaded = ScanMarkovForCausalLM.from_pretrained(tmp_path).eval()
    assert loaded.config == model.config
    ids = _tokens(2, 9)
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_seed_architecture_size():
    """Tiny Shakespeare, d = 128, n <= 5: embedding, positions, 128-512-256 gates, LayerNorm, 128-512-128 decoder."""
    model = ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=65, d_model=128, max_positions=5, order=5))
    expected = 65 * 128 + 5 * 128 + (128 * 512 + 512 + 512 * 256 + 256) + 2 * 128 + (128 * 512 + 512 + 512 * 128 + 128)
    assert model.num_parameters() == expected


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(vocab_size=None), "vocab_size"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(d_model=0), "d_model"),
        (dict(max_positions=-1), "max_positions"),
        (dict(ffn_mult=0), "ffn_mult"),
        (dict(context_mode="window"), "context_mode"),
        (dict(order=None), "order"),
        (dict(order=0), "order"),
        (dict(order=25), "order"),
        (dict(order=2.5), "order"),
        (dict(dropout=1.0), "dropout"),
        (dict(decoder_dropout=-0.1), "decoder_dropout"),
        (dict(context_dropout=1.0), "context_dropout"),
        (dict(window_positions="middle"), "window_positions"),
        (dict(context_mode="recurrent", order=None, window_positions="end"), "window_positions"),
        (dict(initializer_range=0.0), "initializer_range"),
        (dict(backend="fast"), "backend"),
    ],
)
def test_config_errors_name_the_field(overrides, field):
    values = dict(vocab_size=VOCAB, order=WINDOW, max_positions=24)
    values.update(overrides)
    with pytest.raises(ValueError, match=f"ScanMarkovConfig.{field}="):
        ScanMarkovConfig(**values)


def test_config_round_trip_and_mode_combinations():
    config = _config()
    assert ScanMarkovConfig.from_dict(config.to_dict()) == config
    assert config.to_dict()["model_type"] == "scan_markov"
    with pytest.raises(ValueError, match="ScanMarkovConfig.order=3: is only meaningful"):
        ScanMarkovConfig(vocab_size=VOCAB, context_mode="recurrent", order=3)
    with pytest.raises(ValueError, match="did you mean 'order'"):
        ScanMarkovConfig.from_dict({**config.to_dict(), "ordr": 2})


def test_input_ids_are_checked():
    model = _build()
    with pytest.raises(ValueError, match=f"token id {VOCAB}"):
        model(torch.tensor([[1, VOCAB]]))
    with pytest.raises(ValueError, match="input_ids must be integer token ids"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="attention_mask must be"):
        model(_tokens(1, 3), attention_mask=torch.ones(1, 4))
