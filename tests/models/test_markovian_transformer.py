"""The Markovian Transformer end to end: causality, the local receptive field through depth, padding, the heads'
losses against hand computations, and the gate-entropy and transition regularisers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import markovformer
from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    MarkovianTransformerModel,
)
from markovformer.layers.markov_bias import MarkovBias
from markovformer.layers.registry import attention_option_names
from markovformer.models.markovian_transformer.config import gpt2_style_config

VOCAB = 13


def _config(**overrides) -> MarkovianTransformerConfig:
    values = {**dict(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2), **overrides}
    kinds = values.get("attention", "markov")
    read = set().union(*(attention_option_names(kind) for kind in ([kinds] if isinstance(kinds, str) else kinds)))
    for name, value in dict(max_order=2, num_features=16, chunk_size=4).items():  # small sizes, where read
        if name in read:
            values.setdefault(name, value)
    return MarkovianTransformerConfig(**values)


@torch.no_grad()
def _randomise(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Re-draw every parameter at unit scale (the default 0.02 init makes every path nearly linear)."""
    g = torch.Generator().manual_seed(seed)
    for name, parameter in model.named_parameters():
        noise = torch.randn(parameter.shape, generator=g, dtype=torch.float64).to(parameter.dtype)
        if "norm" in name:
            parameter.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * noise)
        elif "theta" in name or "embed.weight" in name or "static_gate_logits" in name:
            parameter.copy_(noise)
        elif parameter.dim() >= 2:
            parameter.copy_(noise / parameter.shape[1] ** 0.5)
        else:
            parameter.copy_(0.1 * noise)
    return model


def _build(model_class, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return _randomise(model_class(_config(**overrides)).double().eval(), seed)


def _tokens(batch: int, length: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


KINDS = ("markov", "softmax", "rff", "hybrid_split", "hybrid_parallel")


def _other_token(ids: torch.Tensor, position: int) -> torch.Tensor:
    changed = ids.clone()
    changed[:, position] = (changed[:, position] + 1 + position % (VOCAB - 1)) % VOCAB
    return changed


@pytest.mark.parametrize("kind", KINDS)
def test_causal_lm_never_reads_the_future(kind):
    length = 9
    model = _build(MarkovianTransformerForCausalLM, attention=kind, gru=True, n_layers=2)
    ids = _tokens(1, length)
    base = model(ids).logits
    for position in range(length):
        moved = (model(_other_token(ids, position)).logits - base).abs().amax(-1)[0]
        assert (moved[:position] < 1e-10).all(), (position, moved)
        assert moved[position] > 1e-6  # the change itself is visible where it is allowed to be


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("n_layers, window", [(1, 2), (2, 2), (3, 1)])
def test_local_receptive_field_grows_by_window_per_layer(n_layers, window, causal):
    length = 16
    model_class = MarkovianTransformerForCausalLM if causal else MarkovianTransformerForTokenClassification
    model = _build(model_class, n_layers=n_layers, max_order=window, window=window, causal=causal)
    ids = _tokens(1, length)
    base = model(ids).logits
    reach = n_layers * window
    for position in (0, 3, 7):
        moved = (model(_other_token(ids, position)).logits - base).abs().amax(-1)[0]
        for t in range(length):
            inside = 0 <= t - position <= reach if causal else abs(t - position) <= reach
            if not inside:
                assert moved[t] < 1e-12, (position, t)
        # The bound is tight: the farthest position inside the field does change.
        assert moved[position + reach] > 1e-8
        if not causal and position - reach >= 0:
            assert moved[position - reach] > 1e-8


def _right_padded(lengths: list[int], total: int, seed: int = 2):
    ids = _tokens(len(lengths), total, seed=seed)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for row, length in enumerate(lengths):
        mask[row, :length] = 1
    return ids, mask


@pytest.mark.parametrize(
    "kind, pooling, gate_input",
    [
        ("markov", "mean", "token"),
        ("markov", "mean", "sequence"),
        ("markov", "last", "query"),
        ("markov", "cls", "sequence"),
        ("softmax", "mean", "token"),
        ("rff", "mean", "token"),
        ("hybrid_split", "last", "token"),
        ("hybrid_parallel", "cls", "token"),
    ],
)
def test_right_padding_leaves_sequence_classification_unchanged(kind, pooling, gate_input):
    model = _build(
        MarkovianTransformerForSequenceClassification, attention=kind, causal=False, gru=True, pooling=pooling,
        gate_input=gate_input, num_labels=3,
    )  # fmt: skip
    assert model.config.bidirectional
    lengths = [9, 6, 2]
    ids, mask = _right_padded(lengths, 9)
    padded = model(ids, attention_mask=mask).logits
    for row, length in enumerate(lengths):
        alone = model(ids[row : row + 1, :length]).logits
        torch.testing.assert_close(padded[row], alone[0], rtol=1e-9, atol=1e-9)
    # The padded slots really hold other tokens that would change the answer if read.
    assert not torch.allclose(model(ids[1:2]).logits, padded[1:2], atol=1e-6)


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
@pytest.mark.parametrize("kind, position", [("softmax", "learned"), ("markov", "sinusoidal"), ("rff", "rotary"),
                                            ("hybrid_parallel", "rotary")])  # fmt: skip
def test_left_padding_leaves_sequence_classification_unchanged(kind, position, pooling):
    """Each row's real tokens take the positions they have alone: learned and sinusoidal embeddings, and rotary
    ones (random features' estimate of the softmax kernel is not relative: it sees where its tokens are)."""
    model = _build(MarkovianTransformerForSequenceClassification, attention=kind, causal=False, position=position,
                   pooling=pooling, num_labels=3, max_positions=16)  # fmt: skip
    ids = _tokens(3, 9)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    mask[2, :7] = 0
    padded = model(ids, attention_mask=mask).logits
    for row in range(3):
        alone = model(ids[row : row + 1, mask[row].bool()]).logits
        torch.testing.assert_close(padded[row], alone[0], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("pooling", ["mean", "last", "cls"])
def test_sequence_pooling_by_hand(pooling):
    model = _build(MarkovianTransformerForSequenceClassification, causal=False, pooling=pooling, num_labels=3)
    ids, mask = _right_padded([7, 4], 7)
    output = model(ids, attention_mask=mask)
    states = output.last_hidden_state
    offset = 1 if pooling == "cls" else 0
    assert states.shape == (2, 7 + offset, model.config.d_model)
    pooled = []
    for row, length in enumerate((7, 4)):
        real = states[row, offset : offset + length]
        pooled.append({"mean": real.mean(0), "last": real[-1], "cls": states[row, 0]}[pooling])
    expected = model.classifier(torch.stack(pooled))
    torch.testing.assert_close(output.logits, expected, rtol=1e-12, atol=1e-12)


def test_sequence_classification_loss_by_hand_with_int32_and_ignored_labels():
    """Class ids as int32 (accepted by the label check) and -100 (not scored), as the token heads take them: int32
    failed inside torch's cross-entropy, and a batch of -100 only had loss nan."""
    model = _build(MarkovianTransformerForSequenceClassification, causal=False, num_labels=3)
    ids = _tokens(3, 6)
    logits = model(ids).logits
    labels = torch.tensor([2, -100, 0], dtype=torch.int32)
    expected = (F.cross_entropy(logits[0:1], torch.tensor([2])) + F.cross_entropy(logits[2:3], torch.tensor([0]))) / 2
    torch.testing.assert_close(model(ids, labels=labels).loss, expected, rtol=1e-12, atol=1e-12)
    loss = model(ids, labels=torch.full((3,), -100)).loss
    loss.backward()
    assert loss.item() == 0.0
    assert all(not p.grad.any() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_last_pooling_reads_the_last_real_token_under_left_padding(causal):
    # position="none" and no GRU: left padding then leaves the real tokens' states exactly unchanged.
    model = _build(
        MarkovianTransformerForSequenceClassification, causal=causal, pooling="last", position="none", num_labels=3
    )
    ids = _tokens(2, 7)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :3] = 0
    padded = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(padded[0], model(ids[:1]).logits[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(padded[1], model(ids[1:, 3:]).logits[0], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("position", ["none", "rotary"])
def test_cls_pooling_refuses_a_mask_it_would_misread(position):
    """The [CLS] vector is put in by reading the mask, before the blocks check it: a 0.5 was read as padding and,
    with no positions to check it, a mask shorter than the inputs dropped their last tokens, both without a word."""
    model = _build(MarkovianTransformerForSequenceClassification, causal=False, pooling="cls", position=position)
    ids = _tokens(2, 6)
    half = torch.tensor([[1.0, 1.0, 1.0, 1.0, 0.5, 0.0]] * 2)
    with pytest.raises(ValueError, match=r"^attention_mask must hold only 0 \(padding\) and 1 .*; got 0\.5$"):
        model(ids, attention_mask=half)
    with pytest.raises(ValueError, match=r"^attention_mask must be \(B, T\) = \(2, 6\); got \(2, 5\)$"):
        model(ids, attention_mask=torch.ones(2, 5, dtype=torch.long))


@pytest.mark.parametrize(("pooling", "causal"), [("last", True), ("mean", False), ("cls", False)])
def test_sequence_classification_refuses_a_row_of_padding_only(pooling, causal):
    """A row with no real token has nothing to classify: 'last' pooled a padding token's output (its logits moved
    with the padding ids) and every pooling's label counted in the loss."""
    model = _build(MarkovianTransformerForSequenceClassification, causal=causal, pooling=pooling, num_labels=3)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [0, 0, 0, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"^attention_mask row 1 is all padding; every row needs a real token$"):
        model(_tokens(2, 6), attention_mask=mask, labels=torch.tensor([0, 2]))


@pytest.mark.parametrize("model_class", [MarkovianTransformerForCausalLM, MarkovianTransformerForSequenceClassification,
                                         MarkovianTransformerForTokenClassification])  # fmt: skip
def test_a_mask_that_is_no_tensor_is_refused_by_name(model_class):
    """A list (a tokenizer's output without return_tensors="pt") failed as "'list' object has no attribute 'shape'"."""
    model = _build(model_class, position="none")
    with pytest.raises(TypeError, match=r"^attention_mask must be a tensor of 0 \(padding\) and 1 \(real token\); "
                                        r"got list$"):  # fmt: skip
        model(_tokens(2, 4), attention_mask=[[1, 1, 1, 1], [1, 1, 0, 0]])


def test_causal_lm_loss_is_shifted_cross_entropy():
    model = _build(MarkovianTransformerForCausalLM)
    ids = _tokens(2, 8)
    labels = ids.clone()
    labels[1, 5:] = -100
    output = model(ids, labels=labels)
    logits = output.logits
    terms = [
        F.cross_entropy(logits[b, t - 1 : t], labels[b, t : t + 1], reduction="sum")
        for b in range(2)
        for t in range(1, 8)
        if labels[b, t] != -100
    ]
    torch.testing.assert_close(output.loss, torch.stack(terms).mean(), rtol=1e-12, atol=1e-12)


def test_token_classification_ignores_minus_100():
    model = _build(MarkovianTransformerForTokenClassification, causal=False, num_labels=4)
    ids = _tokens(2, 7)
    labels = torch.randint(0, 4, (2, 7), generator=torch.Generator().manual_seed(3))
    labels[0, 2] = labels[1, 4:] = -100
    output = model(ids, labels=labels)
    keep = labels != -100
    log_probs = output.logits.log_softmax(-1)
    expected = -log_probs[keep].gather(-1, labels[keep][:, None]).mean()
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)


def test_ctc_loss_matches_functional_ctc_with_lengths():
    model = _build(MarkovianTransformerForCTC, vocab_size=None, input_dim=5, causal=False, num_labels=4)
    features = torch.randn(2, 10, 5, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    mask = torch.ones(2, 10, dtype=torch.long)
    mask[1, 7:] = 0
    labels = torch.tensor([[1, 2, 2, 3], [3, 1, -100, -100]])
    output = model(input_features=features, attention_mask=mask, labels=labels)
    log_probs = output.logits.log_softmax(-1)
    per_sequence = [
        F.ctc_loss(log_probs[0, :10], labels[0, :4], [10], [4], blank=0, reduction="sum"),
        F.ctc_loss(log_probs[1, :7], labels[1, :2], [7], [2], blank=0, reduction="sum"),
    ]
    expected = (per_sequence[0] / 4 + per_sequence[1] / 2) / 2  # 'mean': per-target-length, then over the batch
    torch.testing.assert_close(output.loss, expected, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="blank"):
        model(input_features=features, attention_mask=mask, labels=torch.tensor([[1, 0], [2, 2]]))



def test_an_utterance_too_short_for_its_labels_is_skipped_in_training_and_infinite_when_scored():
    """Labels "1 1" need three frames (1, blank, 1); with two there is no alignment. Evaluation counted it as 0
    nats (zero_infinity everywhere), which lowered the validation loss: (1.19 + 0) / 2 for (1.19 + inf) / 2."""
    model = _build(MarkovianTransformerForCTC, vocab_size=None, input_dim=4, causal=False, num_labels=3)
    features = torch.randn(2, 6, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    mask = torch.tensor([[1] * 6, [1] * 2 + [0] * 4])
    labels = torch.tensor([[1, 2], [1, 1]])
    assert model.eval()(input_features=features, attention_mask=mask, labels=labels).loss == math.inf
    trained = model.train()(input_features=features, attention_mask=mask, labels=labels).loss
    feasible = model.eval()(input_features=features[:1], attention_mask=mask[:1], labels=labels[:1]).loss
    torch.testing.assert_close(trained, feasible / 2, rtol=1e-12, atol=1e-12)  # the batch mean with it as 0


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("attention", ["markov", ["markov", "softmax", "hybrid_split"]])
def test_regularization_loss_by_hand(attention, causal):
    """Mean gate entropy per layer (and per direction when bidirectional), summed, plus the squared thetas."""
    weights = dict(gate_entropy_weight=0.3, transition_penalty=0.05)
    model_class = MarkovianTransformerForCausalLM if causal else MarkovianTransformerForTokenClassification
    model = _build(model_class, attention=attention, n_layers=3, causal=causal, **weights)
    ids = _tokens(2, 8)
    gates = model(ids, return_gates=True).gates
    assert len(gates) == 3
    directions = 1 if causal else 2
    assert [len(layer) for layer in gates if layer is not None] == [directions] * (3 if attention == "markov" else 2)
    entropy = sum(
        -(alpha * alpha.log()).sum(-1).mean() for layer in gates if layer is not None for alpha in layer.values()
    )
    thetas = [p for name, p in model.named_parameters() if ".theta." in name]
    assert len(thetas) == (3 if attention == "markov" else 2) * directions
    penalty = sum((theta**2).sum() for theta in thetas)
    expected = weights["gate_entropy_weight"] * entropy + weights["transition_penalty"] * penalty
    torch.testing.assert_close(model.regularization_loss(), expected, rtol=1e-12, atol=1e-12)
    # Minimising it is possible: it carries gradients to the gates and the strengths.
    model.regularization_loss().backward()
    assert all(theta.grad is not None and theta.grad.abs().sum() > 0 for theta in thetas)

    unregularised = _build(model_class, attention=attention, n_layers=3, causal=causal)
    unregularised(ids, return_gates=True)
    assert unregularised.regularization_loss().item() == 0.0


def test_regularization_entropy_averages_over_real_tokens_only():
    model = _build(MarkovianTransformerForSequenceClassification, causal=False, gate_entropy_weight=1.0, n_layers=1)
    ids, mask = _right_padded([7, 4], 7)
    gates = model(ids, attention_mask=mask, return_gates=True).gates[0]
    real = mask.bool()[:, None, :].expand(-1, model.config.n_heads, -1)
    expected = sum(-(alpha * alpha.log()).sum(-1)[real].mean() for alpha in gates.values())
    torch.testing.assert_close(model.regularization_loss(), expected, rtol=1e-12, atol=1e-12)


def test_a_hybrid_layer_without_markov_heads_is_neither_reported_nor_penalised():
    """hybrid_split with markov_head_ratio=0 keeps a placeholder Markov core with no head: its strengths are not
    reported and its θ, which never trains, is not in the penalty λ_T Σ θ_T²."""
    model = _build(MarkovianTransformerForCausalLM, attention=["markov", "hybrid_split"], markov_head_ratio=0.0,
                   transition_penalty=0.1)  # fmt: skip
    thetas = {name: theta for name, theta in model.named_parameters() if ".theta." in name}
    assert any(".blocks.1." in name for name in thetas)  # the placeholder's θ, redrawn far from 0 by _build
    used = next(module for module in model.model.blocks[0].modules() if isinstance(module, MarkovBias))
    strengths = model.transition_strengths()
    assert len(strengths) == 1
    torch.testing.assert_close(strengths[0]["past"], used.transitions()["past"])
    expected = 0.1 * sum((theta**2).sum() for name, theta in thetas.items() if ".blocks.0." in name)
    torch.testing.assert_close(model.regularization_loss(), expected)


@pytest.mark.parametrize("n_layers", [2, 4])
def test_gpt2_init_scales_exactly_the_residual_projections(n_layers):
    """init_scheme="gpt2" (nanoGPT's): each block's attention output and FFN down projections at std
    initializer_range / sqrt(2 n_layers), every other weight matrix at initializer_range."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(_config(d_model=64, n_layers=n_layers, n_heads=4, attention="softmax",
                                                    ffn="gelu", init_scheme="gpt2", initializer_range=0.1))  # fmt: skip
    residual = 0.1 / math.sqrt(2 * n_layers)
    scaled = 0
    for name, weight in model.named_parameters():
        if weight.dim() == 2:
            expected = residual if name.endswith(("attention.out_proj.weight", "ffn.down.weight")) else 0.1
            scaled += expected == residual
            assert float(weight.detach().std()) == pytest.approx(expected, rel=0.1), name  # >= 704 draws each
    assert scaled == 2 * n_layers


def test_gpt2_style_config_is_the_markov_chain_papers_gpt2():
    """Softmax attention over the whole prefix, learned absolute positions, a GELU MLP, tied input and output
    embeddings, GPT-2's biases (its attention projections' too) and init; an override wins, and nanoGPT's
    ``bias=False`` drops the attention biases with the others."""
    config = gpt2_style_config(vocab_size=2, d_model=16, n_layers=2, n_heads=2, max_positions=32)
    assert config.layer_kinds() == ["softmax", "softmax"] and config.scope == "global" and config.window is None
    assert (config.position, config.max_positions, config.ffn) == ("learned", 32, "gelu")
    assert config.tie_word_embeddings and config.bias and config.attention_bias and config.init_scheme == "gpt2"
    nano = gpt2_style_config(2, 16, 2, 2, 32, bias=False)
    assert (nano.bias, nano.attention_bias, nano.init_scheme) == (False, False, "gpt2")
    model = MarkovianTransformerForCausalLM(config)
    assert model.lm_head.weight is model.model.embed.weight
    assert model.model.position_embedding.weight.shape == (32, 16)
    assert not gpt2_style_config(2, 16, 2, 2, 32, tie_word_embeddings=False).tie_word_embeddings


@pytest.mark.parametrize(
    "model_class, options",
    [
        (MarkovianTransformerForCausalLM, {}),
        (MarkovianTransformerForSequenceClassification, dict(causal=False)),
        (MarkovianTransformerForTokenClassification, dict(causal=False)),
        (MarkovianTransformerForCTC, dict(causal=False)),
    ],
    ids=["causal_lm", "sequence", "token", "ctc"],
)
def test_float64_model_loss_stays_float64(model_class, options):
    model = _build(model_class, **options)
    ids = _tokens(2, 6)
    labels = {
        MarkovianTransformerForCausalLM: ids,
        MarkovianTransformerForSequenceClassification: ids[:, 0] % 2,
        MarkovianTransformerForTokenClassification: ids % 2,
        MarkovianTransformerForCTC: torch.ones(2, 3, dtype=torch.long),
    }[model_class]
    loss = model(ids, labels=labels).loss
    assert torch.isfinite(loss)
    assert loss.dtype == torch.float64


def test_bad_inputs_name_the_value():
    model = _build(MarkovianTransformerForCausalLM)
    ids = _tokens(1, 5)
    ids[0, 3] = VOCAB + 4
    with pytest.raises(ValueError, match=str(VOCAB + 4)):
        model(ids)
    ids[0, 3] = -2
    with pytest.raises(ValueError, match="-2"):
        model(ids)
    features_model = _build(MarkovianTransformerModel, vocab_size=None, input_dim=3, causal=False)
    features = torch.zeros(1, 4, 3, dtype=torch.float64)
    features[0, 2, 1] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        features_model(input_features=features)
    with pytest.raises(ValueError, match="input_features"):
        features_model(input_features=torch.zeros(1, 4, 2, dtype=torch.float64))


def test_top_level_exports_are_the_model_classes():
    assert markovformer.MarkovianTransformerForCausalLM is MarkovianTransformerForCausalLM
    assert set(markovformer.__all__) >= {
        "MarkovianTransformerConfig", "MarkovianTransformerForCausalLM", "MarkovianTransformerForCTC",
        "MarkovianTransformerForSequenceClassification", "MarkovianTransformerForTokenClassification",
    }  # fmt: skip


def test_learned_positions_past_max_positions_name_the_length_padded_or_not():
    """A padded batch's positions are the model's own, counted from the mask: one too long for learned positions is
    refused as an unpadded one is, by its length and max_positions (it said 'position_ids reach 8', an argument
    the caller never gave); a padded row whose positions fit runs, and position_ids given are still named."""
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, attention="softmax", position="learned",
        max_positions=8)).eval()  # fmt: skip
    ids = torch.zeros(2, 9, dtype=torch.long)
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    for attention_mask in (None, mask):
        with pytest.raises(ValueError, match=r"^sequence length 9 exceeds max_positions=8$"):
            model(ids, attention_mask=attention_mask)
    assert model(ids[:, :8], attention_mask=mask[:, :8]).logits.isfinite().all()
    with pytest.raises(ValueError, match=r"^position_ids reach 8 but max_positions=8$"):
        model(ids[:, :2], position_ids=torch.tensor([[0, 8], [0, 1]]))


@pytest.mark.parametrize("attention", ["rff", "hybrid_split", "hybrid_parallel"])
def test_activation_checkpointing_leaves_random_feature_redraws_and_gradients_as_without_it(attention):
    """A checkpointed block is run again in backward: the random-feature layer counted that pass too, so W was
    redrawn twice as often, and a redraw could fall between a forward and its recomputation (gradients of another W
    than the loss's). The memory option must not change the numbers."""

    def train_steps(checkpointed: bool) -> tuple[list[torch.Tensor], list[int]]:
        torch.manual_seed(0)
        config = MarkovianTransformerConfig(vocab_size=8, d_model=16, n_layers=2, n_heads=2, attention=attention,
                                            redraw_interval=3)  # fmt: skip
        model = MarkovianTransformerForCausalLM(config).train()
        model.model.gradient_checkpointing = checkpointed
        x = torch.randint(0, 8, (2, 12), generator=torch.Generator().manual_seed(1))
        gradients = []
        for _ in range(5):  # W redrawn at step 3; counted twice: at steps 2 and 5, and inside step 3's recomputation
            model.zero_grad()
            model(x, labels=x).loss.backward()
            gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        counts = [int(buffer) for name, buffer in model.named_buffers() if name.endswith("forward_count")]
        return gradients, counts

    (plain, plain_counts), (checkpointed, counts) = train_steps(False), train_steps(True)
    assert counts == plain_counts == [5, 5]
    for step, (expected, got) in enumerate(zip(plain, checkpointed, strict=True), start=1):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-6, msg=f"step {step}")


@pytest.mark.parametrize("kind", ["rff", "softmax", "hybrid_split"])
def test_a_continued_decoding_step_gives_no_weights_and_a_prefill_the_full_forwards(kind):
    """A decoding state holds running sums or a cache, no weights over the positions it stands for: a step after
    them gives None for each layer's weights, as the README and output_attentions say (random features returned the
    new tokens' weights over themselves alone, rows summing to 1 over 2 of 8 keys; softmax and Markov cores failed
    in torch.cat with a TypeError), and the same logits. The prefill, which sees every position, gives the full
    forward's weights."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(_config(attention=kind, n_layers=1)).eval()
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    state: dict = {}
    with torch.no_grad():
        full = model(input_ids=ids, return_weights=True)
        prefill = model(input_ids=ids[:, :6], state=state, return_weights=True).attentions[0]
        torch.testing.assert_close(prefill, full.attentions[0][:, :, :6, :6], rtol=1e-5, atol=1e-6)
        step = model(input_ids=ids[:, 6:], state=state, return_weights=True)
    assert step.attentions == [None]
    torch.testing.assert_close(step.logits, full.logits[:, 6:], rtol=1e-5, atol=1e-6)
