"""What the registry declares about each attention kind, held to the kinds themselves: every option has its help
line (`markovformer kind show`), the causality a kind declares is the one its layer accepts, refused by the
model config before any layer is built, and a causal layer of every kind never reads the future while a non-causal
one does."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from markovformer import MarkovianTransformerConfig
from markovformer.layers.attention import AttentionOutput, SelfAttention
from markovformer.layers.options import interval, option, option_help
from markovformer.layers.registry import ATTENTION_KINDS, AttentionKind, attention_option_names, build_attention
from markovformer.layers.softmax_attention import SoftmaxCore, SoftmaxOptions
from markovformer.ops.segments import Segments

NEEDED = {"linformer": {"max_positions": 8}}  # options a kind cannot be built without


def test_every_option_of_every_kind_has_one_help_line():
    for kind, entry in ATTENTION_KINDS.items():
        for field in dataclasses.fields(entry.options):
            text = option_help(entry.options, field.name)
            assert len(text) > 10 and "\n" not in text and "``" not in text, (kind, field.name, text)


def test_an_undescribed_option_is_named_with_where_to_describe_it():
    @dataclasses.dataclass(frozen=True)
    class NewOptions:
        described: int = option(1, interval(1), help="an option a contributor described")
        width: int = option(2, interval(1))

    assert option_help(NewOptions, "described") == "an option a contributor described"
    with pytest.raises(KeyError, match=r"option 'width' of NewOptions has no help line: declare it as "
                                       r"option\(default, rule, help=\.\.\.\) in " + __name__):  # fmt: skip
        option_help(NewOptions, "width")
    with pytest.raises(KeyError, match="NewOptions has no option 'height'"):
        option_help(NewOptions, "height")


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_a_kinds_declared_causality_is_what_its_layer_accepts(kind):
    """Built both ways from the registry, a kind's layer raises exactly for the value of causal it declares it
    refuses (stick-breaking, CoPE and selective refuse causal=False; Linformer causal=True)."""
    entry = ATTENTION_KINDS[kind]
    for causal in (True, False):
        try:
            build_attention(kind, d_model=8, n_heads=2, causal=causal, rotary=False, **NEEDED.get(kind, {}))
            built = True
        except ValueError:
            built = False
        assert built == entry.accepts_causal(causal), (kind, causal, entry.causality)


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_the_model_config_refuses_the_causality_a_kind_declares_it_cannot_take(kind):
    """`MarkovianTransformerConfig(attention='stick_breaking', causal=False)` was accepted; only building the model
    failed. Now the config refuses it, naming the kind, as a single kind and as one layer of a list."""
    entry = ATTENTION_KINDS[kind]
    options = dict(vocab_size=8, d_model=8, n_heads=2, n_layers=2, **NEEDED.get(kind, {}))
    for causal in (True, False):
        for attention in (kind, ["softmax", kind] if kind != "linformer" else [kind, kind]):
            if entry.accepts_causal(causal):
                MarkovianTransformerConfig(attention=attention, causal=causal, **options)
                continue
            refusal = "Linformer is non-causal" if kind == "linformer" else f"{kind}.* is {entry.causality}"
            with pytest.raises(ValueError, match=refusal) as error:
                MarkovianTransformerConfig(attention=attention, causal=causal, **options)
            assert "\n" not in str(error.value)
            if kind != "linformer":  # Linformer's own message explains the projections
                layer = "attention=" if isinstance(attention, str) else "layer 1's kind "
                assert str(error.value).startswith(f"MarkovianTransformerConfig.causal={causal}: {layer}{kind!r} is "
                                                   f"{entry.causality}: its layer refuses causal={causal}"), error.value



@pytest.mark.parametrize("kind, name, value", [("retnet", "chunk_size", 0), ("s4d", "ssm_state_size", 3),
                                               ("linformer", "linformer_k", 0), ("linformer", "dropout", 1.5)])
def test_a_bad_per_layer_option_of_a_baseline_is_refused_by_the_config(kind, name, value):
    """`attention: [{kind: retnet, chunk_size: 0}]` was accepted (the flat `chunk_size` is checked, these options'
    dataclasses had no rules) and failed only when the model was built."""
    causal = ATTENTION_KINDS[kind].accepts_causal(True)
    with pytest.raises(ValueError, match=rf"^MarkovianTransformerConfig\.attention\[0\]\.{name}={value}: must be"):
        MarkovianTransformerConfig(vocab_size=8, d_model=8, n_heads=2, n_layers=1, causal=causal,
                                   attention=[{"kind": kind, name: value}], **NEEDED.get(kind, {}))  # fmt: skip


ALL_OPTIONS = sorted(set().union(*map(attention_option_names, ATTENTION_KINDS)))


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_build_attention_takes_its_kinds_own_options_and_refuses_any_other(kind):
    """`build_attention("softmax", ..., max_order=5)` built plain softmax attention: an option only other kinds
    read was dropped without a word (so was a misspelt one). Each kind takes every one of its own options (given
    explicitly, at its default) and refuses each option of the other kinds, naming it, its value and its kinds."""
    entry = ATTENTION_KINDS[kind]
    shared = dict(d_model=8, n_heads=2, causal=entry.accepts_causal(True), rotary=False)
    own = {field.name: field.default for field in dataclasses.fields(entry.options)} | NEEDED.get(kind, {})
    build_attention(kind, **shared, **own)
    for name in sorted(set(ALL_OPTIONS) - attention_option_names(kind)):
        readers = [other for other in ATTENTION_KINDS if name in attention_option_names(other)]
        value = next(field.default for field in dataclasses.fields(ATTENTION_KINDS[readers[0]].options)
                     if field.name == name)  # fmt: skip
        with pytest.raises(ValueError) as error:
            build_attention(kind, **shared, **own, **{name: value})
        assert str(error.value) == (f"build_attention({kind!r}): {name}={value!r}: kind {kind!r} has no such "
                                    f"option (it is read by {readers}); its options: "
                                    f"{', '.join(sorted(own)) or 'none'}"), error.value


def test_build_attention_names_a_misspelt_option():
    with pytest.raises(ValueError, match=r"^build_attention\('markov'\): windw=8: no attention kind has such an "
                                         r"option \(did you mean 'window'\?\); its options: .*window"):
        build_attention("markov", d_model=8, n_heads=2, causal=True, rotary=False, windw=8)


# --- every kind: what a position may read ---------------------------------------------------------------------------

LENGTH = 13
SMALL = dict(max_positions=32, linformer_k=5, chunk_size=4, ssm_state_size=8, shift_taps=3, head_dim=2, num_features=8,
             max_order=2, npos_max=4)  # small sizes, given to the kinds that have them; chunks of 4 split the sequence
SCOPED = sorted(kind for kind in ATTENTION_KINDS if "scope" in attention_option_names(kind))
# every kind once at its own default scope, and each scoped kind in both scopes (a leak may hide in one path)
# kinds whose long convolution runs through an FFT: its rounding reaches every position, so their past outputs move by
# float64 rounding (~1e-17 here), not by nothing; a leak moves them by orders more
FFT_ROUNDED = {"s4d", "h3", "hyena"}
READS = [(kind, None) for kind in sorted(ATTENTION_KINDS)] + [(kind, scope) for kind in SCOPED
                                                              for scope in ("local", "global")]  # fmt: skip


def _layer(kind: str, scope: str | None, causal: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    options = dict(SMALL, **({} if scope is None else {"scope": scope, "window": 3 if scope == "local" else None}))
    options = {name: value for name, value in options.items() if name in attention_option_names(kind)}
    layer = build_attention(kind, d_model=16, n_heads=4, causal=causal, rotary=True, **options)
    return layer.double().eval()


def _output(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        out = layer(x)
    return out.output if isinstance(out, AttentionOutput) else out


def _perturbed_after(x: torch.Tensor, t: int) -> torch.Tensor:
    """x with every position after t moved (by noise of x's own scale)."""
    moved = x.clone()
    noise = torch.randn(x.shape[0], x.shape[1] - t - 1, x.shape[2], generator=torch.Generator().manual_seed(t + 10),
                        dtype=x.dtype)  # fmt: skip
    moved[:, t + 1 :] += noise
    return moved


@pytest.mark.parametrize("kind, scope", READS, ids=[f"{k}-{s or 'default'}" for k, s in READS])
def test_a_causal_layer_never_reads_the_future_and_a_non_causal_one_does(kind, scope):
    """Moving the inputs after position t leaves a causal layer's outputs at 0..t exactly as they were (bit for bit:
    a future key masked out contributes an exact zero) and changes some later output; a non-causal layer's output
    at some position <= t does change. Every kind of the registry, each scoped kind in both scopes."""
    x = torch.randn(2, LENGTH, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    entry = ATTENTION_KINDS[kind]
    if entry.accepts_causal(True):
        layer = _layer(kind, scope, causal=True)
        base = _output(layer, x)
        for t in range(LENGTH - 1):
            moved = _output(layer, _perturbed_after(x, t))
            leaked = (moved[:, : t + 1] - base[:, : t + 1]).abs().amax().item()
            allowed = 1e-13 * base.abs().amax().item() if kind in FFT_ROUNDED else 0.0
            assert leaked <= allowed, (f"{kind}: moving x[t+1:] moved out[:t+1] by {leaked:.1e} at t={t} (an op "
                                       f"that rounds every position, as an FFT does, belongs in FFT_ROUNDED)")
            assert not torch.equal(moved[:, t + 1 :], base[:, t + 1 :]), f"{kind}: out[t+1:] ignores x[t+1:], t={t}"
    if entry.accepts_causal(False):
        layer = _layer(kind, scope, causal=False)
        base = _output(layer, x)
        for t in range(LENGTH - 1):
            moved = _output(layer, _perturbed_after(x, t))
            reach = (moved[:, : t + 1] - base[:, : t + 1]).abs().amax().item()
            assert reach > 1e-8 * base.abs().amax().item(), f"{kind} (non-causal): out[:t+1] never reads x[t+1:], t={t}"


@pytest.mark.parametrize("kind", sorted(kind for kind in ATTENTION_KINDS if ATTENTION_KINDS[kind].accepts_causal(False)
                                        and kind != "linformer"))  # fmt: skip
def test_a_bidirectional_layer_refuses_a_decoding_state(kind):
    """Each reads the whole sequence: given a state (a decoding call) it says so instead of decoding wrongly."""
    layer = build_attention(kind, d_model=8, n_heads=2, causal=False, rotary=False)
    with pytest.raises(ValueError, match="cannot decode incrementally"):
        layer(torch.randn(2, 5, 8), None, state={})


def test_build_attention_names_a_misspelt_kind_and_the_near_one():
    with pytest.raises(ValueError, match=r"^unknown attention kind 'softmaxx' \(did you mean 'softmax'\?\); expected "
                                         r"one of \("):
        build_attention("softmaxx", d_model=8, n_heads=2, causal=True, rotary=False)


def test_bad_layer_arguments_are_named():
    with pytest.raises(ValueError, match="d_model=10 must be divisible by n_heads=3"):
        build_attention("softmax", d_model=10, n_heads=3, causal=True, rotary=False)
    with pytest.raises(ValueError, match=r"heads_per_core \[1\] must assign all 2 heads to the cores"):
        SelfAttention(d_model=8, n_heads=2, cores=[SoftmaxCore(causal=True)], heads_per_core=[1], rotary=False)
    with pytest.raises(ValueError, match="Linformer needs max_position"):
        build_attention("linformer", d_model=8, n_heads=2, causal=False, rotary=False)
    with pytest.raises(ValueError, match="causality='past': must be one of"):
        AttentionKind(options=SoftmaxOptions, build=lambda *_: None, summary="", causality="past")
    with pytest.raises(ValueError, match="SelectiveAttention cannot keep packed documents apart itself"):
        layer = build_attention("selective", d_model=8, n_heads=2, causal=True, rotary=False)
        layer(torch.randn(1, 4, 8), None, segments=Segments.from_positions(torch.tensor([[0, 1, 0, 1]])))


# --- SPEC 1: a query that sees no real key -------------------------------------------------------------------------

SPEC_KINDS = [("markov", "local"), ("markov", "global"), ("softmax", "local"), ("softmax", "global"), ("rff", None),
              ("hybrid_split", "local"), ("hybrid_parallel", "global")]  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("kind, scope", SPEC_KINDS, ids=[f"{k}-{s or 'default'}" for k, s in SPEC_KINDS])
def test_a_query_whose_every_key_is_masked_returns_zeros_and_finite_gradients(kind, scope, dtype):
    """SPEC 1: zeros, never NaN, in fp32, fp16 and bf16. Row 1 is left-padded by 5: its causal queries 0..4 see
    padding only; the other outputs stay finite and nonzero."""
    layer = _layer(kind, scope, causal=True).to(dtype)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    mask[1, :5] = 0
    x = torch.randn(2, LENGTH, 16, generator=torch.Generator().manual_seed(2)).to(dtype).requires_grad_(True)
    out = layer(x, mask)
    out = out.output if isinstance(out, AttentionOutput) else out
    assert torch.equal(out[1, :5], torch.zeros_like(out[1, :5]))
    assert torch.isfinite(out).all() and (out[1, 5:].abs().amax(-1) > 0).all() and (out[0].abs().amax(-1) > 0).all()
    out.float().square().sum().backward()
    assert torch.isfinite(x.grad).all()
