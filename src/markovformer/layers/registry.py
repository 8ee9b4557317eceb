"""Attention kinds by name, as in Hugging Face's attention-implementation registry.

Each kind is one ``AttentionKind``: the dataclass of the options it accepts (the one source of truth for them:
the model config checks every option it is given against it) and a builder that receives the shared keyword
arguments (``d_model, n_heads, causal, rotary, attention_bias``) and an instance of that dataclass. Register a new
kind by adding one entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from markovformer.advice import suggest
from markovformer.layers.baselines import (
    GRUMixer,
    H3Mixer,
    HyenaMixer,
    LinformerAttention,
    RetNetAttention,
    RWKVTimeMix,
    S4DMixer,
    ScanMixer,
)
from markovformer.layers.baselines.h3 import H3Options
from markovformer.layers.cope_attention import CoPEAttention, CoPEOptions
from markovformer.layers.decay_attention import (
    PRO_PARTS,
    AlibiAttention,
    DecayOptions,
    ForgettingAttention,
    ForgettingOptions,
)
from markovformer.layers.hybrid_attention import (
    HybridParallelAttention,
    HybridParallelOptions,
    HybridSplitAttention,
    HybridSplitOptions,
    no_markov_head,
)
from markovformer.layers.markov_attention import MarkovAttention, MarkovOptions
from markovformer.layers.options import DROPOUT_HELP, check_fields, interval, option, scoped_window
from markovformer.layers.position_bias_attention import (
    DynamicBiasAttention,
    DynamicBiasOptions,
    T5BiasAttention,
    T5BiasOptions,
)
from markovformer.layers.random_feature_attention import RandomFeatureAttention, RandomFeatureOptions
from markovformer.layers.selective_attention import SelectiveAttention, SelectiveOptions
from markovformer.layers.softmax_attention import SoftmaxAttention, SoftmaxOptions
from markovformer.layers.stick_breaking_attention import StickBreakingAttention, StickBreakingOptions


@dataclasses.dataclass(frozen=True)
class NoOptions:
    """The options of a kind that takes none beyond the shared ones."""


@dataclasses.dataclass(frozen=True)
class LinformerOptions:
    max_positions: int | None = option(None, interval(1, integer=True, optional=True),
                                       help="the longest sequence its length projections cover (required)")
    linformer_k: int = option(64, interval(1, integer=True), help="k, the length keys and values are projected to")
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)

    def __post_init__(self) -> None:
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class RetNetOptions:
    chunk_size: int = option(64, interval(1, integer=True), help="positions per chunk of the chunkwise retention "
                             "(speed and memory only)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


@dataclasses.dataclass(frozen=True)
class S4DOptions:
    ssm_state_size: int = option(64, interval(2, integer=True), help="the SSM's state size N per channel (even: N/2 "
                                 "complex modes)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
        if self.ssm_state_size % 2:
            raise ValueError(f"ssm_state_size={self.ssm_state_size!r}: must be even (conjugate pairs of modes)")


CAUSALITIES = ("either", "causal only", "non-causal only")  # the values of ``causal`` a kind's layer accepts


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """A registered kind: ``options`` (a frozen dataclass whose fields carry their help) and
    ``build(shared, options) -> nn.Module``; ``summary``, its line in ``markovformer kind list``. Whether its layer
    decodes incrementally is the layer's own declared ``supports_state``.

    ``causality``: "causal only" for a layer that refuses ``causal=False`` (it reads only the past by construction),
    "non-causal only" for one that refuses ``causal=True``; the model config refuses the other value up front, and a
    test builds every kind both ways against this declaration.

    ``projection_biases``: whether its layer projects queries, keys, values and its output in the shared attention
    frame (``layers.attention``), where ``attention_bias`` gives those projections biases; False for a mixer whose
    projections are its paper's own, which the model config refuses ``attention_bias=True`` for.

    ``revision`` counts the fixes that changed what a model of this kind computes or learns from the same seed
    (raise it with every such fix, naming the commit): experiments key their cached cells on it, so rerunning one
    into an old folder recomputes the cells the fix made wrong instead of reusing them."""

    options: type
    build: Callable[[dict, Any], nn.Module]
    summary: str
    causality: str = "either"
    projection_biases: bool = True
    revision: int = 1

    def __post_init__(self) -> None:
        if self.causality not in CAUSALITIES:
            raise ValueError(f"causality={self.causality!r}: must be one of {CAUSALITIES}")

    def accepts_causal(self, causal: bool) -> bool:
        """Whether the kind's layer can be built with this ``causal``."""
        return self.causality == "either" or (self.causality == "causal only") == causal


def _mixer(mixer: type) -> Callable[[dict, Any], nn.Module]:
    """Builder of a sequence mixer that reads only d_model and causal (no heads, no rotary, no attention_bias)."""
    return lambda shared, options: mixer(d_model=shared["d_model"], causal=shared["causal"])


def _scoped(options: Any) -> dict:
    """A scoped kind's keyword arguments (decay and relative-bias kinds): its window only in local scope
    (``window=None`` is global scope)."""
    return dict(window=scoped_window(options.scope, options.window), dropout=options.dropout)


# the summary's tail of a kind whose paper's models have no other position (``position: none`` in the experiments'
# comparisons): the model's default rotary stacks on top of it
OWN_POSITION = "its paper's models: model.position: none; the default rotary stacks on top"

# 2205702: FAVOR+ keys carried a data-free e^-(Dh/2) that zeroed every row at head dim >= 64 (rff and both hybrids)
FAVOR_KEYS_FIX = 2

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "markov": AttentionKind(
        MarkovOptions, lambda shared, o: MarkovAttention(**shared, **dataclasses.asdict(o)),
        summary="softmax attention plus gated per-lag transition biases (the Markovian Transformer)",
    ),
    "softmax": AttentionKind(
        SoftmaxOptions, lambda shared, o: SoftmaxAttention(**shared, **dataclasses.asdict(o)),
        summary="vanilla softmax attention (the Transformer); sliding-window in local scope",
    ),
    "rff": AttentionKind(
        RandomFeatureOptions,
        lambda shared, o: RandomFeatureAttention(**shared, **dataclasses.asdict(o)),
        summary="random-feature linear attention (Performer's FAVOR+ or RFA), O(T)",
        revision=FAVOR_KEYS_FIX,
    ),
    "hybrid_split": AttentionKind(
        HybridSplitOptions,
        lambda shared, o: HybridSplitAttention(**shared, **dataclasses.asdict(o)),
        summary="some heads Markov attention, the rest random-feature attention, one shared QKV",
        revision=FAVOR_KEYS_FIX,
    ),
    "hybrid_parallel": AttentionKind(
        HybridParallelOptions,
        lambda shared, o: HybridParallelAttention(**shared, **dataclasses.asdict(o)),
        summary="Markov attention and random-feature attention over all heads, summed",
        revision=FAVOR_KEYS_FIX,
    ),
    # the mixer suite's nearest relatives of per-lag biases: fixed (ALiBi) and data-dependent (FoX) decays
    "alibi": AttentionKind(
        DecayOptions, lambda shared, o: AlibiAttention(**shared, **_scoped(o)),
        summary=f"ALiBi: softmax attention with fixed per-head linear distance penalties, in place of position "
                f"embeddings ({OWN_POSITION})",
        revision=2,  # a head count not a power of two took 2^(-8h/H), not the paper's slopes (now alibi_slopes)
    ),
    "forgetting": AttentionKind(
        ForgettingOptions,
        lambda shared, o: ForgettingAttention(**shared, **_scoped(o), **{p: getattr(o, p) for p in PRO_PARTS}),
        summary="Forgetting Transformer (FoX): a data-dependent forget gate decays the logits; optional Pro parts. "
                "FoX uses no position embedding (model.position: none); with the default rotary, qk_norm's scales "
                "and kv_shift act on rotated queries and keys",
        revision=2,  # 8988a4e: the model's init had zeroed the forget gate's biases (every gate started at 0.5)
    ),
    # learned biases of the lag alone (layers.position_bias_attention): T5's buckets, an MLP of the distance
    "t5_bias": AttentionKind(
        T5BiasOptions,
        lambda shared, o: T5BiasAttention(**shared, **_scoped(o), num_buckets=o.num_buckets,
                                          max_distance=o.max_distance),  # fmt: skip
        summary=f"T5's relative position bias: a learned scalar per head and log-spaced distance bucket "
                f"({OWN_POSITION})",
    ),
    "dynamic_bias": AttentionKind(
        DynamicBiasOptions,
        lambda shared, o: DynamicBiasAttention(**shared, **_scoped(o), bias_hidden=o.bias_hidden,
                                               bias_depth=o.bias_depth, log_distance=o.log_distance),  # fmt: skip
        summary=f"dynamic position bias: a small MLP maps the (log) distance to a bias per head "
                f"({OWN_POSITION})",
    ),
    "stick_breaking": AttentionKind(
        StickBreakingOptions,
        lambda shared, o: StickBreakingAttention(**shared, window=scoped_window(o.scope, o.window),
                                                 attend_current=o.attend_current),  # fmt: skip
        summary=f"stick-breaking attention: keys, nearest first, take sigmoid shares of what is left "
                f"({OWN_POSITION})",
        causality="causal only",
        revision=2,  # 3f049a7: the chunked op's gradients turned NaN on a hidden key's large logit
    ),
    "cope": AttentionKind(
        CoPEOptions,
        lambda shared, o: CoPEAttention(**shared, window=scoped_window(o.scope, o.window),
                                        npos_max=o.npos_max),  # fmt: skip
        summary=f"CoPE: contextual positions counted by the query's gates on the keys between "
                f"({OWN_POSITION})",
        causality="causal only",
    ),
    "selective": AttentionKind(
        SelectiveOptions,
        lambda shared, o: SelectiveAttention(**shared, window=scoped_window(o.scope, o.window),
                                             protect_first=o.protect_first),  # fmt: skip
        summary="selective attention: a token can mask earlier tokens for every later query",
        causality="causal only",
    ),
    # the baseline zoo (layers.baselines): sequence mixers in the same blocks; some ignore n_heads and rotary
    "linformer": AttentionKind(
        LinformerOptions,
        lambda shared, o: LinformerAttention(
            **shared, max_position=o.max_positions, linformer_k=o.linformer_k, dropout=o.dropout
        ),
        summary="Linformer: keys and values projected along the sequence to k rows, O(T·k)",
        causality="non-causal only",
    ),
    "retnet": AttentionKind(
        RetNetOptions, lambda shared, o: RetNetAttention(**shared, chunk_size=o.chunk_size),
        summary="RetNet's multi-scale retention: per-head exponential decay, no softmax",
    ),
    "s4d": AttentionKind(
        S4DOptions,
        lambda shared, o: S4DMixer(d_model=shared["d_model"], causal=shared["causal"], ssm_state_size=o.ssm_state_size),
        summary="S4D-Lin: a diagonal state-space model per channel (a long convolution)",
        projection_biases=False,
    ),
    "h3": AttentionKind(
        H3Options,
        lambda shared, o: H3Mixer(d_model=shared["d_model"], causal=shared["causal"], **dataclasses.asdict(o)),
        summary="H3: a shift filter on the keys, then a diagonal SSM over key-value products, read by the queries",
        projection_biases=False,
    ),
    "hyena": AttentionKind(NoOptions, _mixer(HyenaMixer), summary="order-2 Hyena: long implicit convolutions with "
                           "data-gated products", projection_biases=False),  # fmt: skip
    "rwkv": AttentionKind(NoOptions, _mixer(RWKVTimeMix), summary="RWKV-4 time mixing: a decaying weighted key-value "
                          "average with a token shift", projection_biases=False),  # fmt: skip
    "gru": AttentionKind(NoOptions, _mixer(GRUMixer), summary="a GRU over the sequence in place of attention",
                         projection_biases=False),  # fmt: skip
    "scan": AttentionKind(NoOptions, _mixer(ScanMixer), summary="the Scan Markov gated linear recurrence "
                          "h_t = A_t h_(t-1) + B_t x_t", projection_biases=False),  # fmt: skip
}


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    """One layer's resolved attention: its kind and its options, an instance of the kind's options dataclass (whose
    fields' rules and defaults were applied once, when it was made); ``build_layer`` builds the layer from it as
    is, with no second check."""

    kind: str
    settings: Any

    @property
    def options(self) -> dict:
        """Every option of the layer's kind, by name."""
        return dataclasses.asdict(self.settings)


def kind_revisions(attention: str | Sequence[str | dict]) -> dict[str, int]:
    """The revisions above 1 of the kinds a model's ``attention`` field names (one kind, or one entry per layer:
    a name or ``{"kind": ...}``), by kind. Kinds never revised are left out, so a cache keyed on this stays valid
    for cells stored before revisions were counted."""
    names = [attention] if isinstance(attention, str) else [e["kind"] if isinstance(e, dict) else e for e in attention]
    return {name: ATTENTION_KINDS[name].revision for name in sorted(set(names))
            if name in ATTENTION_KINDS and ATTENTION_KINDS[name].revision > 1}  # fmt: skip


def attention_option_names(kind: str) -> frozenset[str]:
    """The option names attention kind ``kind`` accepts (the fields of its options dataclass)."""
    return frozenset(field.name for field in dataclasses.fields(ATTENTION_KINDS[kind].options))


def kinds_reading(name: str) -> list[str]:
    """The attention kinds that have option ``name``, in registry order."""
    return [kind for kind in ATTENTION_KINDS if name in attention_option_names(kind)]


def decodes_incrementally(kind: str) -> bool:
    """Whether a causal layer of ``kind`` with its default options decodes one token at a time from its state (its
    own declared ``supports_state``, read from a small one built here); a non-causal-only kind never does."""
    if not ATTENTION_KINDS[kind].accepts_causal(True):
        return False
    layer = build_attention(kind, d_model=8, n_heads=2, causal=True, rotary=False)
    return bool(getattr(layer, "supports_state", False))


def build_layer(spec: LayerSpec, *, d_model: int, n_heads: int, causal: bool, rotary: bool,
                attention_bias: bool = False) -> nn.Module:  # fmt: skip
    """Build the attention layer of a resolved ``spec`` (a model config's ``layer_specs``, whose ``attention_bias``
    only a kind with ``projection_biases`` was given)."""
    shared = dict(d_model=d_model, n_heads=n_heads, causal=causal, rotary=rotary, attention_bias=attention_bias)
    return ATTENTION_KINDS[spec.kind].build(shared, spec.settings)


def projection_biases_refused(kind: str) -> str:
    """Why ``attention_bias=True`` is refused for ``kind``, a kind without ``projection_biases``."""
    return (f"attention kind {kind!r} has no query/key/value and output projections of the shared attention frame to "
            f"give biases (its projections are its paper's own); the kinds that have: "
            f"{', '.join(name for name, entry in ATTENTION_KINDS.items() if entry.projection_biases)}")


def build_attention(kind: str, *, d_model: int, n_heads: int, causal: bool, rotary: bool, attention_bias: bool = False,
                    **options) -> nn.Module:  # fmt: skip
    """Build the attention layer registered as ``kind`` from raw options (direct use): they are resolved by the
    kind's options dataclass (its rules and defaults) and built by ``build_layer``. An option that is not this
    kind's (another kind's, or no kind's) is a ValueError naming it, its value and the kinds that read it: it was
    dropped, and the layer built without it; so is one set that the layer reads only at other settings (a split
    hybrid's ``refuse_unread``). ``attention_bias=True``: ValueError for a kind without ``projection_biases``."""
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"unknown attention kind {kind!r}{suggest(kind, ATTENTION_KINDS)}; expected one of "
                         f"{tuple(ATTENTION_KINDS)}")  # fmt: skip
    if attention_bias and not ATTENTION_KINDS[kind].projection_biases:
        raise ValueError(f"attention_bias=True: {projection_biases_refused(kind)}")
    accepted = attention_option_names(kind)
    for name in sorted(set(options) - accepted):
        readers = kinds_reading(name)
        if readers:
            why = f"kind {kind!r} has no such option (it is read by {readers})"
        else:
            every_option = sorted(set().union(*map(attention_option_names, ATTENTION_KINDS)))
            why = f"no attention kind has such an option{suggest(name, every_option)}"
        raise ValueError(f"build_attention({kind!r}): {name}={options[name]!r}: {why}; its options: "
                         f"{', '.join(sorted(accepted)) or 'none'}")  # fmt: skip
    settings = ATTENTION_KINDS[kind].options(**options)
    if hasattr(settings, "refuse_unread"):  # options its layer reads only at some of its settings
        try:
            settings.refuse_unread(options)
        except ValueError as error:
            raise ValueError(f"build_attention({kind!r}): {error}") from None
    if kind == "hybrid_split" and (why := no_markov_head(n_heads, settings.markov_head_ratio)):
        raise ValueError(f"build_attention({kind!r}): {why}")  # as the model config refuses it
    return build_layer(LayerSpec(kind, settings), d_model=d_model, n_heads=n_heads, causal=causal, rotary=rotary,
                       attention_bias=attention_bias)  # fmt: skip
