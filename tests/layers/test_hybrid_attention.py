"""Hybrid attention reduces to its parts: ratio 1 is Markov attention, ratio 0 random-feature attention,
and the parallel hybrid is the sum of a Markov and a random-feature layer."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from markovformer.layers import HybridAttention, MarkovAttention, RandomFeatureAttention
from markovformer.ops.segments import Segments

D_MODEL, HEADS, LENGTH = 16, 4, 10
MARKOV = dict(max_order=2, scope="local", window=3, gate="mlp", gate_input="token")
FEATURES = dict(feature_map="positive", num_features=16, chunk_size=4)


def _input() -> torch.Tensor:
    return torch.randn(2, LENGTH, D_MODEL, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def _mask() -> torch.Tensor:
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, 7:] = 0
    return mask


def _randomise_markov(module) -> None:
    with torch.no_grad():
        for theta in module.markov_bias.theta.values():
            theta.normal_(0.0, 1.0)


def _load_renamed(target: torch.nn.Module, source: torch.nn.Module, rename: dict[str, str]) -> None:
    """Copy the source entries the target has (after renaming prefixes); strict, so nothing is left unset."""
    renamed = {}
    for key, value in source.state_dict().items():
        for old, new in rename.items():
            if key.startswith(old):
                key = new + key[len(old) :]
        renamed[key] = value
    target.load_state_dict({key: value for key, value in renamed.items() if key in target.state_dict()})


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_split_ratio_one_is_markov_attention(causal):
    torch.manual_seed(0)
    hybrid = (
        HybridAttention(
            mode="split", d_model=D_MODEL, n_heads=HEADS, markov_head_ratio=1.0, causal=causal, **MARKOV, **FEATURES
        )
        .double()
        .eval()
    )
    _randomise_markov(hybrid)
    torch.manual_seed(1)
    markov = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, **MARKOV).double().eval()
    _load_renamed(markov, hybrid, {})
    x, mask = _input(), _mask()
    expected = markov(x, mask, return_gates=True)
    got = hybrid(x, mask, return_gates=True)
    torch.testing.assert_close(got.output, expected.output, rtol=1e-12, atol=1e-12)
    assert set(got.gates) == set(expected.gates) == ({"past"} if causal else {"past", "future"})
    for direction in got.gates:
        torch.testing.assert_close(got.gates[direction], expected.gates[direction], rtol=0, atol=0)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_split_ratio_zero_is_random_feature_attention(causal):
    torch.manual_seed(0)
    hybrid = (
        HybridAttention(
            mode="split", d_model=D_MODEL, n_heads=HEADS, markov_head_ratio=0.0, causal=causal, **MARKOV, **FEATURES
        )
        .double()
        .eval()
    )
    torch.manual_seed(1)
    features = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, **FEATURES).double().eval()
    assert not torch.equal(features.cores[0].projection, hybrid.cores[1].projection)
    _load_renamed(features, hybrid, {"cores.1.": "cores.0."})
    assert torch.equal(features.cores[0].projection, hybrid.cores[1].projection)
    x, mask = _input(), _mask()
    torch.testing.assert_close(hybrid(x, mask), features(x, mask), rtol=1e-12, atol=1e-12)
    # No Markov head: its core is frozen out of the optimiser.
    assert not any(p.requires_grad for p in hybrid.cores[0].parameters())


@pytest.mark.parametrize("ratio, n_markov", [(0.25, 1), (0.5, 2), (0.74, 2), (0.75, 3)])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_split_gives_floor_ratio_markov_heads_first(causal, ratio, n_markov):
    torch.manual_seed(0)
    hybrid = (
        HybridAttention(
            mode="split", d_model=D_MODEL, n_heads=HEADS, markov_head_ratio=ratio, causal=causal, **MARKOV, **FEATURES
        )
        .double()
        .eval()
    )
    _randomise_markov(hybrid)
    assert hybrid.markov_bias.n_heads == n_markov
    x, mask = _input(), _mask()
    weights = hybrid(x, mask, return_weights=True).weights
    assert weights.shape == (2, HEADS, LENGTH, LENGTH)
    # The first n_markov heads are local Markov heads (window 3), the others global random-feature heads.
    lag = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]
    outside = lag.abs() > MARKOV["window"]
    assert (weights[:, :n_markov, outside] == 0).all()
    assert (weights[0, n_markov:, outside & (lag >= 0)] != 0).all()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_split_output_places_feature_heads_after_markov_heads(causal):
    """With W_O's Markov-head columns zeroed, the split hybrid is random-feature attention with the same weights
    and the same columns zeroed: the feature heads sit in the last columns of the concatenation."""
    torch.manual_seed(0)
    hybrid = (
        HybridAttention(
            mode="split", d_model=D_MODEL, n_heads=HEADS, markov_head_ratio=0.5, causal=causal, **MARKOV, **FEATURES
        )
        .double()
        .eval()
    )
    torch.manual_seed(1)
    features = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, **FEATURES).double().eval()
    _load_renamed(features, hybrid, {"cores.1.": "cores.0."})
    markov_columns = slice(0, 2 * D_MODEL // HEADS)
    with torch.no_grad():
        for layer in (hybrid, features):
            layer.out_proj.weight[:, markov_columns] = 0.0
    x, mask = _input(), _mask()
    expected = features(x, mask)
    assert expected.abs().amax() > 1e-3
    torch.testing.assert_close(hybrid(x, mask), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidirectional"])
def test_parallel_is_the_sum_of_both_layers(causal):
    torch.manual_seed(0)
    hybrid = (
        HybridAttention(mode="parallel", d_model=D_MODEL, n_heads=HEADS, causal=causal, **MARKOV, **FEATURES)
        .double()
        .eval()
    )
    _randomise_markov(hybrid)
    torch.manual_seed(1)
    markov = MarkovAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, **MARKOV).double().eval()
    features = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS, causal=causal, **FEATURES).double().eval()
    _load_renamed(markov, hybrid, {"markov.": ""})
    _load_renamed(features, hybrid, {"random_features.": ""})
    x, mask = _input(), _mask()
    expected = markov(x, mask) + features(x, mask)
    torch.testing.assert_close(hybrid(x, mask), expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hybrid(x, mask, return_gates=True).output, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("packed", [False, True], ids=["padded", "packed"])
def test_parallel_weights_are_the_markov_heads_then_the_feature_heads(packed):
    torch.manual_seed(0)
    hybrid = HybridAttention(mode="parallel", d_model=D_MODEL, n_heads=HEADS, **MARKOV, **FEATURES).double().eval()
    _randomise_markov(hybrid)
    x, mask = _input(), _mask()
    parts = {}
    if packed:  # row 0 holds two documents (positions restart at 4)
        position_ids = torch.cat([torch.arange(4), torch.arange(LENGTH - 4)])[None].repeat(2, 1)
        parts["segments"] = Segments.from_positions(position_ids, mask)
    markov = hybrid.markov(x, mask, return_weights=True, **parts)
    features = hybrid.random_features(x, mask, return_weights=True, **parts)
    got = hybrid(x, mask, return_weights=True, **parts)
    assert got.weights.shape == (2, 2 * HEADS, LENGTH, LENGTH)
    torch.testing.assert_close(got.weights, torch.cat([markov.weights, features.weights], dim=1), rtol=0, atol=0)
    torch.testing.assert_close(got.output, markov.output + features.output, rtol=0, atol=0)
    if packed:  # no weight crosses from the second document back into the first
        assert (got.weights[0, :, 4:, :4] == 0).all()


def test_unknown_hybrid_mode_raises():
    with pytest.raises(ValueError, match="'series'"):
        HybridAttention(mode="series", d_model=D_MODEL, n_heads=HEADS)


@pytest.mark.parametrize("mode", ["split", "parallel"])
def test_an_option_neither_part_reads_is_refused_naming_what_the_hybrid_reads(mode):
    """``num_fetures=8`` (and the split's ``markov_head_ratio`` given to the parallel hybrid) built a layer without a
    word: each part picked its own options and the rest were dropped; each part alone refuses an unknown one."""
    from markovformer.layers.hybrid_attention import HybridParallelOptions, HybridSplitOptions

    options = HybridSplitOptions if mode == "split" else HybridParallelOptions
    read = ", ".join(sorted(field.name for field in dataclasses.fields(options)))
    with pytest.raises(TypeError, match=rf"got an unexpected keyword argument 'num_fetures' \(it reads {read}\)$"):
        HybridAttention(mode=mode, d_model=D_MODEL, n_heads=HEADS, **MARKOV, num_fetures=8)
    if mode == "parallel":
        with pytest.raises(TypeError, match=r"unexpected keyword argument 'markov_head_ratio'"):
            HybridAttention(mode=mode, d_model=D_MODEL, n_heads=HEADS, **MARKOV, markov_head_ratio=0.5)
    HybridAttention(mode=mode, d_model=D_MODEL, n_heads=HEADS, **MARKOV, **FEATURES)  # every part's own: taken


def test_random_features_are_redrawn_every_interval_in_training_only_and_saved_with_the_model():
    """SPEC 2.5: W is a buffer; ``redraw_interval`` redraws it during training and stores it, so evaluation (and a
    model loaded from the state dict) uses the latest draw; evaluation itself never redraws."""
    torch.manual_seed(0)
    layer = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS, **{**FEATURES, "redraw_interval": 3}).double()
    core = layer.cores[0]
    x = _input()
    draws = [core.projection.clone()]
    for _ in range(7):
        layer.train()(x)
        draws.append(core.projection.clone())
    changed = [step for step in range(1, 8) if not torch.equal(draws[step], draws[step - 1])]
    assert changed == [3, 6]
    assert "cores.0.projection" in layer.state_dict()
    evaluated = layer.eval()(x)
    assert torch.equal(layer(x), evaluated) and torch.equal(core.projection, draws[-1])
    torch.manual_seed(1)
    loaded = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS, **{**FEATURES, "redraw_interval": 3}).double()
    assert not torch.equal(loaded.cores[0].projection, draws[-1])
    loaded.load_state_dict(layer.state_dict())
    torch.testing.assert_close(loaded.eval()(x), evaluated, rtol=0, atol=0)


def test_the_default_feature_map_is_favor_plus_positive_features():
    """SPEC 2.5: feature_map="positive" (FAVOR+) is the default, for the layer and the model config alike: the
    default layer's weights are a convex combination (positive features) wherever a key is visible."""
    from markovformer import MarkovianTransformerConfig
    from markovformer.layers.random_feature_attention import RandomFeatureOptions

    assert RandomFeatureOptions().feature_map == "positive"
    assert MarkovianTransformerConfig(vocab_size=5, attention="rff").feature_map == "positive"
    torch.manual_seed(0)
    layer = RandomFeatureAttention(d_model=D_MODEL, n_heads=HEADS).double().eval()
    weights = layer(_input(), return_weights=True).weights
    visible = torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()  # causal by default
    assert (weights[..., visible] > 0).all() and (weights[..., ~visible] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones_like(weights.sum(-1)), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("ratio", "unread", "why"), [
    (0.0, dict(max_order=3, gate="mlp"), "gate='mlp', max_order=3: never read: markov_head_ratio=0.0 builds no Markov "
                                         "head (every head is random-feature); leave them unset"),
    (1.0, dict(num_features=16), "num_features=16: never read: markov_head_ratio=1.0 builds no random-feature head "
                                 "(every head is Markov); leave it unset"),
])  # fmt: skip
def test_a_split_without_one_part_refuses_that_parts_options_when_set(ratio, unread, why):
    """Ratio 0 (every head random-feature) and 1 (every head Markov) are ablations, and the part with no head reads
    none of its options: ``max_order=3`` at ratio 0 built a layer without a word, where every other kind refuses an
    option it does not read. Left at their defaults (unset, or given as the default), they are accepted."""
    from markovformer.layers.hybrid_attention import HybridSplitOptions
    from markovformer.layers.registry import build_attention

    shared = dict(d_model=D_MODEL, n_heads=HEADS, causal=True, rotary=False, markov_head_ratio=ratio)
    with pytest.raises(ValueError) as error:
        build_attention("hybrid_split", **shared, **unread)
    assert str(error.value) == f"build_attention('hybrid_split'): {why}"
    defaults = {name: getattr(HybridSplitOptions(), name) for name in unread}
    read = MARKOV if ratio else FEATURES  # the part that has heads takes its own options
    for given in ({}, defaults, read):
        layer = build_attention("hybrid_split", **shared, **given)
        assert layer.heads_per_core == ([0, HEADS] if ratio == 0 else [HEADS, 0])


def test_build_attention_refuses_a_split_ratio_that_leaves_no_markov_head_as_the_model_config_does():
    """floor(n_heads * ratio) = 0 for 0 < ratio < 1/n_heads: random-feature heads alone, the Markov options unread;
    build_attention built it without a word (0.2 with 4 heads) where the model config refuses it, naming the ratio."""
    from markovformer.layers.registry import build_attention

    shared = dict(d_model=16, n_heads=4, causal=True, rotary=False)
    with pytest.raises(ValueError, match=r"markov_head_ratio=0.2: with n_heads=4 it gives floor\(0.8\) = 0 Markov"):
        build_attention("hybrid_split", **shared, markov_head_ratio=0.2, max_order=3)
    assert build_attention("hybrid_split", **shared, markov_head_ratio=0.25).heads_per_core == [1, 3]
    assert build_attention("hybrid_split", **shared, markov_head_ratio=0.0).heads_per_core == [0, 4]  # the ablation
