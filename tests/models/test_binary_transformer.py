"""The canonical binary model against a loop-by-loop transcription of the talk's equations."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from markovformer.models.binary_transformer import BinaryTransformer, BinaryTransformerConfig


def _random_model(tied: bool, n_layers: int = 1) -> BinaryTransformer:
    torch.manual_seed(0)
    model = BinaryTransformer(BinaryTransformerConfig(d_model=4, n_layers=n_layers, tie_weights=tied, max_positions=16))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.7)  # large enough that attention is far from uniform
    return model.double()


def _talk_logits(model: BinaryTransformer, x: torch.Tensor) -> torch.Tensor:
    """x_n = x_n e + p_n; y_n = x_n + W_O Σ_{i<=n} att_{n,i} W_V x_i; z_n = y_n + W_2 ReLU(W_1 y_n); <a, z_n> + b."""
    e, a, b = model.embedding, model.readout_vector, model.readout_bias
    logits = torch.empty(x.shape, dtype=torch.float64)
    for row in range(x.shape[0]):
        hidden = [x[row, n].double() * e + model.positions[n] for n in range(x.shape[1])]
        for layer in model.layers:
            queries = [layer.query.weight @ h for h in hidden]
            keys = [layer.key.weight @ h for h in hidden]
            values = [layer.value.weight @ h for h in hidden]
            updated = []
            for n in range(len(hidden)):
                scores = torch.stack([queries[n] @ keys[i] / math.sqrt(len(e)) for i in range(n + 1)])
                weights = torch.softmax(scores, dim=0)
                y = hidden[n] + layer.out.weight @ sum(weights[i] * values[i] for i in range(n + 1))
                updated.append(y + layer.down.weight @ torch.relu(layer.up.weight @ y))
            hidden = updated
        for n in range(x.shape[1]):
            logits[row, n] = a @ hidden[n] + b
    return logits


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("n_layers", [1, 2])
def test_forward_matches_the_talks_equations(tied, n_layers):
    model = _random_model(tied, n_layers)
    x = torch.randint(0, 2, (3, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits, _talk_logits(model, x), rtol=1e-10, atol=1e-10)


def test_tied_readout_is_the_embedding_and_untied_is_not():
    tied, untied = _random_model(True), _random_model(False)
    assert tied.readout_vector.data_ptr() == tied.embedding.data_ptr()
    assert untied.readout_vector.data_ptr() != untied.embedding.data_ptr()
    assert sum(p.numel() for p in untied.parameters()) == sum(p.numel() for p in tied.parameters()) + 4


def test_a_tied_embedding_learns_from_its_read_out_too():
    """Tied, e is also the read-out a, so the gradient of e is the untied model's gradients of e and of a summed
    (at a = e); a read-out that stood for e without passing its gradient to e trained only the embedding's use."""
    tied, untied = _random_model(True), _random_model(False)
    with torch.no_grad():
        untied.load_state_dict(tied.state_dict(), strict=False)
        untied.readout.copy_(tied.embedding)
    x = torch.randint(0, 2, (3, 8), generator=torch.Generator().manual_seed(2))
    for model in (tied, untied):
        model(x, labels=x).loss.backward()
    torch.testing.assert_close(tied.embedding.grad, untied.embedding.grad + untied.readout.grad)


def test_loss_is_next_symbol_bce_and_log_probs_normalise():
    model = _random_model(False)
    x = torch.randint(0, 2, (4, 12), generator=torch.Generator().manual_seed(2))
    output = model(x, labels=x)
    expected = F.binary_cross_entropy(torch.sigmoid(output.logits[:, :-1]), x[:, 1:].double())
    torch.testing.assert_close(output.loss, expected)
    log_probs = model.next_symbol_log_probs(x)
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(4, 12, dtype=torch.float64))
    torch.testing.assert_close(log_probs[..., 1].exp(), torch.sigmoid(output.logits))


def test_prediction_at_n_ignores_later_symbols():
    model = _random_model(True, n_layers=2)
    x = torch.randint(0, 2, (2, 10), generator=torch.Generator().manual_seed(3))
    changed = x.clone()
    changed[:, 6:] = 1 - changed[:, 6:]
    with torch.no_grad():
        torch.testing.assert_close(model(x).logits[:, :6], model(changed).logits[:, :6], rtol=0, atol=1e-12)
        assert not torch.allclose(model(x).logits[:, 6:], model(changed).logits[:, 6:])


@pytest.mark.parametrize("std", [0.02, 0.5])
def test_every_weight_starts_at_the_configured_scale_and_the_readout_bias_at_zero(std):
    """initializer_range is the std of e, p_n, a and every projection (the other tests redraw them all)."""
    torch.manual_seed(0)
    config = BinaryTransformerConfig(d_model=32, n_layers=2, tie_weights=False, max_positions=64,
                                     initializer_range=std)  # fmt: skip
    model = BinaryTransformer(config)
    weights = {"embedding": model.embedding, "positions": model.positions, "readout": model.readout}
    for index, layer in enumerate(model.layers):
        for name in ("query", "key", "value", "out", "up", "down"):
            weights[f"layers.{index}.{name}"] = getattr(layer, name).weight
    for name, weight in weights.items():
        assert float(weight.detach().std()) == pytest.approx(std, rel=0.35), name  # 32 to 4096 draws each
    assert model.readout_bias.item() == 0.0


def test_the_longest_input_is_the_learned_positions():
    """What the trainer and the HF cache read to refuse (or window) a longer sequence: 16 tokens, not 17."""
    model = _random_model(True)
    assert model.longest_input == model.config.max_positions == 16
    model(torch.zeros(1, model.longest_input, dtype=torch.long))


def test_mlp_width_defaults_to_four_times_the_embedding():
    for d in (4, 8):
        config = BinaryTransformerConfig(d_model=d)
        assert config.d_ff == 4 * d
        layer = BinaryTransformer(config).layers[0]
        assert layer.up.weight.shape == (4 * d, d) and layer.down.weight.shape == (d, 4 * d)
    assert BinaryTransformerConfig(d_model=4, d_ff=6).d_ff == 6


def test_bad_inputs_and_configs_are_named():
    model = _random_model(True)
    with pytest.raises(ValueError, match="input_ids must hold only the symbols 0 and 1; got 2"):
        model(torch.tensor([[0, 2, 1]]))
    symbols = torch.tensor([[0, 1, 1, 0]])
    for labels in ([[0, 2, 1, 5]], [[0, -1, 1, 0]]):  # binary cross-entropy scored them as soft targets
        with pytest.raises(ValueError, match=f"labels must hold only the symbols 0 and 1; got {labels[0][1]}"):
            model(symbols, labels=torch.tensor(labels))
    with pytest.raises(ValueError, match=r"labels must be \(B, T\) = \(1, 4\); got \(1, 3\)"):
        model(symbols, labels=symbols[:, :3])
    with pytest.raises(ValueError, match="max_positions=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="BinaryTransformerConfig.n_heads=3"):
        BinaryTransformerConfig(d_model=4, n_heads=3)
    with pytest.raises(ValueError, match="BinaryTransformerConfig.d_model=0"):
        BinaryTransformerConfig(d_model=0)
    with pytest.raises(ValueError, match=r"input_ids must be \(B, T\); got shape \(4,\)"):
        model(symbols[0])
    for d_ff in (0, 2.5, True):
        with pytest.raises(ValueError, match=f"BinaryTransformerConfig.d_ff={d_ff!r}: must be an integer >= 1 or None"):
            BinaryTransformerConfig(d_ff=d_ff)
    with pytest.raises(ValueError, match="BinaryTransformerConfig.tie_weights='yes': must be true or false"):
        BinaryTransformerConfig(tie_weights="yes")


def test_save_and_load_round_trip(tmp_path):
    model = _random_model(False).float()
    model.save_pretrained(tmp_path)
    loaded = BinaryTransformer.from_pretrained(tmp_path)
    x = torch.randint(0, 2, (2, 8), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        torch.testing.assert_close(loaded(x).logits, model(x).logits, rtol=0, atol=0)
    assert loaded.config == model.config
