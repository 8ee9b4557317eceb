"""GRU and minGRU injection: right padding never reaches the real tokens; a left-padded row is the unpadded one
shifted, padding between tokens is refused; minGRU's scan is pinned to its loop reference (outputs and all
gradients); the config picks the kind."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from markovformer.layers import GRUInjection, MinGRUInjection, build_injection
from markovformer.layers.baselines.recurrent import GRUMixer
from markovformer.models.markovian_transformer import MarkovianTransformerConfig, MarkovianTransformerModel
from markovformer.ops.scan import min_gru_naive

D_MODEL, LENGTH = 8, 9


@pytest.mark.parametrize("bidirectional", [False, True])
def test_right_padding_leaves_real_positions_unchanged(bidirectional):
    torch.manual_seed(0)
    gru = GRUInjection(D_MODEL, bidirectional=bidirectional).double()
    x = torch.randn(3, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 1:] = 0
    out = gru(x, mask)
    for row, length in enumerate((LENGTH, 5, 1)):
        alone = gru(x[row : row + 1, :length])
        torch.testing.assert_close(out[row, :length], alone[0], rtol=1e-12, atol=1e-12)
        assert torch.equal(out[row, length:], torch.zeros_like(out[row, length:]))
    # Unpadded, the padded frames would reach the last real token of a bidirectional GRU (and never a forward one).
    full = gru(x)
    assert torch.allclose(full[1, :5], out[1, :5]) != bidirectional


@pytest.mark.parametrize("bidirectional", [False, True])
def test_left_padding_is_the_unpadded_row_shifted_and_padding_between_tokens_raises(bidirectional):
    gru = GRUInjection(D_MODEL, bidirectional=bidirectional).double()
    x = torch.randn(2, LENGTH, D_MODEL, dtype=torch.float64)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, :2] = 0
    out = gru(x, mask)
    torch.testing.assert_close(out[1, 2:], gru(x[1:, 2:])[0])
    assert torch.equal(out[1, :2], torch.zeros_like(out[1, :2]))
    mask[0, 3] = 0
    with pytest.raises(ValueError, match="left or right padding"):
        gru(x, mask)


def _min_gru_by_loop(layer: MinGRUInjection, x, mask):
    """The layer written out with the loop reference: same parameters, no scan."""
    chunks = layer.gates_and_candidates(x).chunk(4 if layer.bidirectional else 2, dim=-1)
    states = [min_gru_naive(chunks[0], chunks[1], mask)]
    if layer.bidirectional:
        states.append(min_gru_naive(chunks[2], chunks[3], mask, reverse=True))
    out = layer.proj(torch.cat(states, dim=-1))
    return out if mask is None else out * mask[..., None].to(out.dtype)


@pytest.mark.parametrize("backend", ["sequential", "chunked"])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_min_gru_layer_matches_loop_outputs_and_all_gradients(backend, padded, bidirectional):
    torch.manual_seed(0)
    layer = MinGRUInjection(D_MODEL, bidirectional=bidirectional, backend=backend).double()
    x = torch.randn(3, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    x.requires_grad_()
    mask = None
    if padded:
        mask = torch.ones(3, LENGTH, dtype=torch.long)
        mask[1, 5:] = 0
    upstream = torch.randn(3, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    leaves = [x, *layer.parameters()]
    results = []
    for fn in (layer, lambda x, mask: _min_gru_by_loop(layer, x, mask)):
        out = fn(x, mask)
        results.append((out.detach(), *torch.autograd.grad((out * upstream).sum(), leaves)))
    names = ["output", "grad_x", *(name for name, _ in layer.named_parameters())]
    for name, got, expected in zip(names, *results, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("bidirectional", [False, True])
def test_min_gru_right_padding_leaves_real_positions_unchanged(bidirectional):
    torch.manual_seed(0)
    layer = MinGRUInjection(D_MODEL, bidirectional=bidirectional).double()
    x = torch.randn(3, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(3, LENGTH, dtype=torch.long)
    mask[1, 5:] = 0
    mask[2, 1:] = 0
    out = layer(x, mask)
    for row, length in enumerate((LENGTH, 5, 1)):
        alone = layer(x[row : row + 1, :length])
        torch.testing.assert_close(out[row, :length], alone[0], rtol=1e-12, atol=1e-12)
        assert torch.equal(out[row, length:], torch.zeros_like(out[row, length:]))
    # Unmasked, the padded frames would reach the last real token backwards (and never forwards).
    assert torch.allclose(layer(x)[1, :5], out[1, :5]) != bidirectional


@pytest.mark.parametrize("kind, layer_type", [("gru", GRUInjection), ("min_gru", MinGRUInjection)])
def test_config_gru_kind_picks_the_injection(kind, layer_type):
    config = MarkovianTransformerConfig(vocab_size=5, d_model=8, n_layers=2, n_heads=2, max_order=2, gru=True,
                                        gru_kind=kind, causal=False)  # fmt: skip
    injections = [block.gru for block in MarkovianTransformerModel(config).blocks]
    assert len(injections) == 2 and all(type(module) is layer_type for module in injections)
    assert all(module.proj.in_features == 2 * 8 for module in injections)  # bidirectional, as the model is
    with pytest.raises(ValueError, match="gru_kind"):
        MarkovianTransformerConfig(vocab_size=5, gru=True, gru_kind="lstm")


def test_a_gru_kind_without_the_injection_is_refused():
    """`gru_kind: min_gru` without `gru: true` built no injection at all, without a word."""
    with pytest.raises(ValueError, match=r"^MarkovianTransformerConfig\.gru_kind='min_gru': the recurrent "
                                         r"injection's kind, and gru=False builds none; set gru=True$"):
        MarkovianTransformerConfig(vocab_size=5, gru_kind="min_gru")


def test_min_gru_keeps_the_gru_init_inside_the_model():
    """The model's N(0, 0.02²) init for linear layers would shrink minGRU's gates and candidates; they keep
    nn.GRU's uniform(±1/√d) init instead, as nn.GRU's own weights do inside the same model."""
    d_model = 64
    config = MarkovianTransformerConfig(vocab_size=11, d_model=d_model, n_layers=1, n_heads=4, gru=True,
                                        gru_kind="min_gru")  # fmt: skip
    injection = MarkovianTransformerModel(config).blocks[0].gru
    bound = d_model**-0.5
    assert injection.weight.abs().max() <= bound and injection.bias.abs().max() <= bound
    # uniform(±b) has standard deviation b/√3 = 0.072 here, far from the model's 0.02
    assert abs(injection.weight.std().item() - bound / 3**0.5) < 0.005
    gru = MarkovianTransformerModel(dataclasses.replace(config, gru_kind="gru")).blocks[0].gru.gru
    assert abs(gru.weight_ih_l0.std().item() - bound / 3**0.5) < 0.005


def test_min_gru_loads_checkpoints_from_when_its_inputs_were_a_linear():
    layer = MinGRUInjection(D_MODEL, bidirectional=True)
    old = {f"gates_and_candidates.{name}": value for name, value in (("weight", layer.weight), ("bias", layer.bias))}
    old["proj.weight"] = layer.proj.weight
    fresh = MinGRUInjection(D_MODEL, bidirectional=True)
    fresh.load_state_dict({name: value.detach().clone() for name, value in old.items()})
    for name, value in layer.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], value), name


@pytest.mark.parametrize("make", [lambda: GRUInjection(D_MODEL), lambda: GRUMixer(d_model=D_MODEL),
                                  lambda: MinGRUInjection(D_MODEL)], ids=["gru", "gru_mixer", "min_gru"])
def test_a_decoding_call_of_padding_only_leaves_the_rows_state_as_it_was(make):
    """Row 0 gets two padded positions between its real tokens 0-2 and 5: its next real token reads the state its
    real prefix left (as if the padded call had not happened); row 1, all real, decodes as its full forward."""
    torch.manual_seed(0)
    layer = make().double().eval()
    x = torch.randn(2, 6, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        state: dict = {}
        layer(x[:, :3], state=state)
        layer(x[:, 3:5], attention_mask=torch.tensor([[0, 0], [1, 1]]), state=state)
        got = layer(x[:, 5:6], state=state)
        alone: dict = {}
        layer(x[:1, :3], state=alone)
        torch.testing.assert_close(got[:1], layer(x[:1, 5:6], state=alone), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got[1:], layer(x[1:2])[:, 5:6], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("make", [lambda: GRUInjection(D_MODEL), lambda: MinGRUInjection(D_MODEL)],
                         ids=["gru", "min_gru"])  # fmt: skip
def test_decoded_outputs_at_padded_positions_are_zero_after_real_tokens_too(make):
    """Padded positions' outputs are zero also in decoding steps after real tokens, where the carried state is not
    (minGRU, which takes padding anywhere: the decoded steps equal its full forward)."""
    torch.manual_seed(0)
    layer = make().double().eval()
    x = torch.randn(2, 6, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[0, 3:5] = 0  # row 0: real, real, real, pad, pad, real
    with torch.no_grad():
        state: dict = {}
        steps = [layer(x[:, :3], attention_mask=mask[:, :3], state=state)]
        steps += [layer(x[:, t : t + 1], attention_mask=mask[:, t : t + 1], state=state) for t in range(3, 6)]
        decoded = torch.cat(steps, dim=1)
        if isinstance(layer, MinGRUInjection):
            torch.testing.assert_close(decoded, layer(x, attention_mask=mask), rtol=1e-12, atol=1e-12)
    assert torch.equal(decoded[0, 3:5], torch.zeros_like(decoded[0, 3:5]))


def test_bad_injection_arguments_are_named():
    with pytest.raises(ValueError, match="injection kind 'lstm': expected one of"):
        build_injection("lstm", D_MODEL)
    with pytest.raises(ValueError, match="backend='cuda': expected one of"):
        MinGRUInjection(D_MODEL, backend="cuda")
    x = torch.randn(1, 3, D_MODEL)
    for layer in (GRUInjection(D_MODEL, bidirectional=True), MinGRUInjection(D_MODEL, bidirectional=True)):
        with pytest.raises(ValueError, match="reads the whole sequence: it cannot decode incrementally"):
            layer(x, state={})


def test_min_gru_state_dict_round_trips():
    layer, fresh = MinGRUInjection(D_MODEL), MinGRUInjection(D_MODEL)
    fresh.load_state_dict(layer.state_dict())
    x = torch.randn(2, 5, D_MODEL)
    assert torch.equal(fresh(x), layer(x))
