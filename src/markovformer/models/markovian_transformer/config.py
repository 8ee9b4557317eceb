"""MarkovianTransformerConfig: every option of the Markovian Transformer, validated on construction."""

from __future__ import annotations

import dataclasses
import difflib
from typing import NoReturn

from markovformer.advice import suggest
from markovformer.layers.ffn import FFNS
from markovformer.layers.gru import INJECTION_KINDS
from markovformer.layers.hybrid_attention import (
    HybridSplitOptions,
    markov_head_count,
    no_markov_head,
    unread_at_ratio,
    unread_refusal,
)
from markovformer.layers.markov_attention import MarkovOptions
from markovformer.layers.norm import NORMS
from markovformer.layers.options import SCOPES
from markovformer.layers.position import POSITIONS
from markovformer.layers.registry import (
    ATTENTION_KINDS,
    LayerSpec,
    attention_option_names,
    kinds_reading,
    projection_biases_refused,
)
from markovformer.models.config_base import ModelConfig, with_field_names
from markovformer.ops.linear_attention import FEATURE_MAPS
from markovformer.ops.relative_bias_attention.buckets import check_t5_buckets

POOLINGS = ("mean", "last", "cls")
INIT_SCHEMES = ("normal", "gpt2")
# options some attention kinds read that also configure the rest of the model, so never unused
MODEL_WIDE_OPTIONS = frozenset({"dropout", "bidirectional", "max_positions"})
# the Markov attention options whose defaults and per-value rules ``MarkovOptions`` owns
MARKOV_DEFAULTS = MarkovOptions()
# the order gate's options: a layer with gate "none" has no gate to take them
GATE_OPTIONS = ("gate_input", "gate_null", "gate_gumbel_tau")
MARKOV_VALUE_OPTIONS = ("max_order", "gate", "gate_input", "gate_null", "transition", "backend", "gate_gumbel_tau",
                        "dropout")


@dataclasses.dataclass
class MarkovianTransformerConfig(ModelConfig):
    """Configuration of the Markovian Transformer and its heads.

    Inputs: ``vocab_size`` (token ids) or ``input_dim`` (continuous feature frames), not both.
    ``attention`` is one kind for every layer or a list with one kind per layer; "softmax" everywhere is the vanilla
    Transformer and "rff" everywhere the Performer/RFA baseline; the other baselines ("linformer", "s4d", "retnet",
    "h3", "hyena", "rwkv", "gru", "scan") are listed in ``layers.baselines``. Each kind accepts the options of its
    dataclass in ``layers.registry`` (``attention_option_names``); setting an option that no layer's kind reads is
    an error naming it and the kinds, and so is a flat option that every layer reading it sets in its own entry.
    ``scope`` defaults to "local" for a layer with Markov biases and to "global" for the others (softmax, ALiBi,
    ...), layer by layer in a mixed list; ``scope="local"`` with ``attention="softmax"`` is sliding-window softmax
    (needs ``window``).
    ``window`` defaults to ``max_order``. Linformer layers need ``causal=False`` and ``max_positions`` (the length
    their projections cover; k is ``linformer_k``); ``ssm_state_size`` is S4D's and H3's state size N. "alibi"
    (fixed per-head distance penalties) and "forgetting" (FoX's data-dependent forget gate) follow
    ``scope``/``window`` and want ``position='none'``.
    ``bidirectional`` (future lag biases, bidirectional GRU) defaults to ``not causal``; False in a non-causal model
    with neither is refused (nothing reads it).
    The default position encoding is rotary: local attention only ever sees offsets within its window, so a
    local-scope model runs unchanged on sequences longer than those it was trained on.
    The fields that are no attention option: ``position`` one of ``POSITIONS`` ("rotary", "sinusoidal", "learned":
    needs ``max_positions``, "none"); ``ffn`` "swiglu" or "gelu", hidden width from ``ffn_mult``; ``gru`` adds a
    recurrent injection to every block, of ``gru_kind`` "gru" or "min_gru"; ``num_labels`` and ``pooling`` ("mean",
    "last", "cls": needs ``causal=False``) are the classification heads'; ``tie_word_embeddings`` ties the causal
    LM's output projection to the token embedding; ``gate_entropy_weight`` and ``transition_penalty`` (>= 0) weigh
    the regularisers ``regularization_loss`` adds (the gate entropy, Σ θ²); ``init_scheme`` "normal" or "gpt2"
    (residual projections at std initializer_range / sqrt(2 n_layers)); ``norm`` the blocks' two norms and the final
    norm, "layernorm" or "rmsnorm" (Llama's, the "Transformer++" baseline's; eps 1e-5 both, ``layers.norm``);
    ``bias=False`` drops the LayerNorms' and the GELU MLP's biases. An RMSNorm has no bias, so with "rmsnorm"
    ``bias`` switches the GELU MLP's alone (as it does nothing to SwiGLU's, which has none): refusing the default
    ``bias=True`` would make ``norm="rmsnorm"`` an error unless ``bias=False`` were typed too. ``attention_bias``
    adds biases to the query/key/value and output projections of every kind in the shared attention frame (GPT-2
    has them; nanoGPT's ``bias=False`` is ``bias=False`` with the default ``attention_bias=False``); a mixer kind
    with projections of its own (``projection_biases=False`` in ``layers.registry``) refuses it.
    Renamed fields (old configs still load): ``max_position`` -> ``max_positions``.
    """

    model_type = "markovian_transformer"
    renamed_fields = {"max_position": "max_positions"}

    vocab_size: int | None = None
    input_dim: int | None = None
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    num_labels: int = 2
    max_order: int = MARKOV_DEFAULTS.max_order
    attention: str | list[str | dict] = "markov"
    scope: str | None = None
    window: int | None = None
    causal: bool = True
    bidirectional: bool | None = None
    gate: str = MARKOV_DEFAULTS.gate
    gate_input: str = MARKOV_DEFAULTS.gate_input
    gate_null: bool = MARKOV_DEFAULTS.gate_null
    gate_gumbel_tau: float | None = MARKOV_DEFAULTS.gate_gumbel_tau
    transition: str = MARKOV_DEFAULTS.transition
    head_specific: bool = MARKOV_DEFAULTS.head_specific
    markov_head_ratio: float = 0.5
    feature_map: str = "positive"
    num_features: int = 64
    redraw_interval: int = 0
    chunk_size: int = 64
    linformer_k: int = 64
    ssm_state_size: int = 64
    ffn: str = "swiglu"
    ffn_mult: int = 4
    gru: bool = False
    gru_kind: str = "gru"  # the injection's recurrence when gru=True: "gru" (nn.GRU) or "min_gru" (parallel scan)
    position: str = "rotary"
    max_positions: int | None = None
    dropout: float = MARKOV_DEFAULTS.dropout
    backend: str = MARKOV_DEFAULTS.backend
    pooling: str = "mean"
    tie_word_embeddings: bool = False
    gate_entropy_weight: float = 0.0
    transition_penalty: float = 0.0
    initializer_range: float = 0.02
    init_scheme: str = "normal"  # or "gpt2": residual projections at std initializer_range / sqrt(2 n_layers)
    norm: str = "layernorm"  # or "rmsnorm": the blocks' and the final norm (NORMS)
    bias: bool = True  # biases of the LayerNorms and the GELU MLP
    attention_bias: bool = False  # biases of the query/key/value and output projections (GPT-2's)

    def __post_init__(self) -> None:
        def fail(field: str, message: str) -> NoReturn:
            raise ValueError(f"MarkovianTransformerConfig.{field}={getattr(self, field)!r}: {message}")

        def choice(field: str, options: tuple) -> None:
            if getattr(self, field) not in options:
                fail(field, f"must be one of {options}{suggest(getattr(self, field), options)}")

        def positive_int(field: str, allow_none: bool = False) -> None:
            value = getattr(self, field)
            if value is None and allow_none:
                return
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                fail(field, "must be a positive integer")

        if (self.vocab_size is None) == (self.input_dim is None):
            fail("vocab_size", f"give exactly one of vocab_size (token ids) and input_dim (features); input_dim="
                 f"{self.input_dim!r}")  # fmt: skip
        for field in ("vocab_size", "input_dim", "max_positions", "window"):
            positive_int(field, allow_none=True)
        for field in ("d_model", "n_layers", "n_heads", "num_labels", "num_features", "chunk_size", "ffn_mult",
                      "linformer_k", "ssm_state_size"):  # fmt: skip
            positive_int(field)
        for field in ("causal", "gate_null", "head_specific", "gru", "tie_word_embeddings", "bias",
                      "attention_bias"):  # fmt: skip
            if not isinstance(getattr(self, field), bool):  # causal="false" is truthy: it built a causal model
                fail(field, "must be True or False")
        if self.bidirectional is not None and not isinstance(self.bidirectional, bool):
            fail("bidirectional", "must be True, False or None (not causal)")
        MarkovOptions.check_values(type(self).__name__, {field: getattr(self, field) for field in MARKOV_VALUE_OPTIONS})
        if self.ssm_state_size % 2:
            fail("ssm_state_size", "must be even (S4D's complex modes come in conjugate pairs)")
        if self.d_model % self.n_heads:
            fail("d_model", f"must be divisible by n_heads={self.n_heads}")
        if isinstance(self.attention, str):
            choice("attention", tuple(ATTENTION_KINDS))
        elif not isinstance(self.attention, (list, tuple)):  # a number is no iterable, a dict would give its keys
            fail("attention", f"must be a kind's name (a string, one of {tuple(ATTENTION_KINDS)}) or a list with one "
                              f"entry per layer")  # fmt: skip
        else:
            self.attention = list(self.attention)
            if len(self.attention) != self.n_layers:
                fail("attention", f"a per-layer list needs n_layers={self.n_layers} entries")
            for index, entry in enumerate(self.attention):
                kind = entry.get("kind") if isinstance(entry, dict) else entry
                if not isinstance(kind, str):  # a list is unhashable (no dict lookup), a number no near miss
                    fail("attention", f"layer {index}: kind {kind!r} must be a string naming a kind, one of "
                                      f"{tuple(ATTENTION_KINDS)}")  # fmt: skip
                if kind not in ATTENTION_KINDS:
                    fail("attention", f"layer {index}: unknown kind {kind!r}; expected one of "
                                      f"{tuple(ATTENTION_KINDS)}{suggest(kind, ATTENTION_KINDS)}")  # fmt: skip
                if isinstance(entry, dict):
                    for name in sorted(set(entry) - {"kind"} - attention_option_names(kind), key=str):
                        options = sorted(attention_option_names(kind))
                        fail("attention", f"layer {index}: kind {kind!r} has no option {name!r} (its options: "
                                          f"{', '.join(options) or 'none'}){suggest(name, options)}")  # fmt: skip
        kinds = set(self.layer_kinds())
        flat_scope_given = self.scope is not None or self.window is not None  # a flat window: every layer local
        if not flat_scope_given and not isinstance(self.attention, str) and "max_order" in self._options_read():
            self.attention = [self._scoped_entry(entry) for entry in self.attention]
        if self.scope is None and "scope" in self._options_read():
            self.scope = "local" if "max_order" in self._options_read(kinds - {"softmax"}) else "global"
        for field, options in (("feature_map", FEATURE_MAPS), ("ffn", FFNS), ("position", POSITIONS),
                               ("pooling", POOLINGS), ("gru_kind", INJECTION_KINDS), ("norm", NORMS)):  # fmt: skip
            choice(field, options)
        if not self.gru and self.gru_kind != FIELD_DEFAULTS["gru_kind"]:
            fail("gru_kind", "the recurrent injection's kind, and gru=False builds none; set gru=True")
        if self.scope is not None:
            choice("scope", SCOPES)
        if "linformer" in kinds:
            if self.causal:
                fail("attention", "Linformer is non-causal: its length projections mix the whole sequence, so every "
                     "output reads the future; set causal=False or use a causal kind ('retnet', 'rwkv', 'hyena', "
                     "'s4d', ...)")  # fmt: skip
            for index, entry in enumerate(self.attention if isinstance(self.attention, list) else []):
                own = entry.get("max_positions") if isinstance(entry, dict) else None
                # the model's length bound is one number; a layer's larger one (projection columns never read) was
                # accepted by earlier versions and is kept, so that the models saved so load
                if own is not None and (self.max_positions is None or own < self.max_positions):
                    raise ValueError(f"MarkovianTransformerConfig.attention[{index}].max_positions={own!r}: "
                                     "max_positions is model-wide (the longest sequence the model reads, which every "
                                     "Linformer layer's projections cover); set MarkovianTransformerConfig."
                                     f"max_positions (it is {self.max_positions!r}) instead")  # fmt: skip
            if self.max_positions is None:
                fail("max_positions", "attention='linformer' needs max_positions, the longest sequence its length "
                     "projections cover")  # fmt: skip
        for index, kind in enumerate(self.layer_kinds()):  # the causality each kind declares (layers.registry)
            if not ATTENTION_KINDS[kind].accepts_causal(self.causal):
                where = f"attention={kind!r}" if isinstance(self.attention, str) else f"layer {index}'s kind {kind!r}"
                fail("causal", f"{where} is {ATTENTION_KINDS[kind].causality}: its layer refuses causal={self.causal}; "
                     f"set causal={not self.causal} or choose another kind (`markovformer kind list` marks "
                     f"them)")  # fmt: skip
            if self.attention_bias and not ATTENTION_KINDS[kind].projection_biases:
                fail("attention_bias", f"layer {index}'s {projection_biases_refused(kind)}")
        self._check_options_are_used()
        if self.bidirectional is None:
            self.bidirectional = not self.causal
        if self.causal and self.bidirectional:
            fail("bidirectional", "a causal model cannot attend to the future; set causal=False")
        if not self.causal and not self.bidirectional and not self.gru and "bidirectional" not in self._options_read():
            fail("bidirectional", f"no part of this model reads it (the future lag biases of "
                                  f"{' / '.join(kinds_reading('bidirectional'))} layers, the GRU injection: gru=True); "
                                  f"its non-causal {' / '.join(sorted(kinds))} layers read both sides")  # fmt: skip
        MarkovOptions.check_values(type(self).__name__, {"gate_input": self.gate_input,
                                                          "bidirectional": self.bidirectional})  # fmt: skip
        if self.scope == "local":
            if self.window is None and "max_order" not in self._options_read(kinds - {"softmax"}):
                fail("window", f"scope='local' {'/'.join(sorted(kinds))} attention needs a window (keys t-window..t "
                     "are visible)")  # fmt: skip
            if self.window is None:  # MarkovOptions' default, asked rather than written again
                self.window = MarkovOptions(max_order=self.max_order, scope="local").window
            if self.window < self.max_order and "max_order" in self._options_read():
                fail("window", f"is smaller than max_order={self.max_order}: lags beyond the window are never seen")
        elif self.window is not None:
            fail("window", "is only meaningful with scope='local'")
        if self.scope == "global" and self.backend == "banded":
            fail("backend", "the banded backend needs scope='local'")
        if self.scope == "local" and self.backend == "chunked":
            fail("backend", "the chunked backend is the global-scope path; use 'banded' (or 'auto') with scope='local'")
        if not 0.0 <= self.markov_head_ratio <= 1.0:
            fail("markov_head_ratio", "must lie in [0, 1]")
        choice("init_scheme", INIT_SCHEMES)
        if not 0 < self.initializer_range < float("inf"):  # inf draws inf weights: a nan loss at the first step
            fail("initializer_range", "must be a finite positive number")
        if self.redraw_interval < 0:
            fail("redraw_interval", "must be >= 0 (0 never redraws)")
        if self.position == "rotary" and (self.d_model // self.n_heads) % 2:
            fail("position", f"rotary needs an even head dimension; d_model/n_heads = {self.d_model // self.n_heads}")
        if self.position == "learned" and self.max_positions is None:
            fail("max_positions", "position='learned' needs max_positions")
        if self.tie_word_embeddings and self.vocab_size is None:
            fail("tie_word_embeddings", "needs token inputs (vocab_size)")
        for field in ("gate_entropy_weight", "transition_penalty"):
            if not 0 <= getattr(self, field) < float("inf"):  # nan or inf: a nan regularisation, a nan loss
                fail(field, "must be a finite number >= 0")

        self._layer_specs = self._resolve_layer_specs()
        self._check_regularisers_apply()

    def _check_regularisers_apply(self) -> None:
        """ValueError for a loss term weighted above 0 that no layer has: the gate entropy needs an order gate, the
        transition penalty a Markov bias (the term was silently 0)."""
        # a split hybrid whose markov_head_ratio leaves it no Markov head has no gate and no bias either
        settings = [spec.settings for spec in self._layer_specs
                    if markov_head_count(self.n_heads, getattr(spec.settings, "markov_head_ratio", 1.0))]
        needs = {"gate_entropy_weight": ("an order gate (a markov or hybrid layer with gate != 'none' and a Markov "
                                         "head)",
                                         any(getattr(s, "gate", "none") != "none" for s in settings)),
                 "transition_penalty": ("a Markov bias (a markov or hybrid layer with a Markov head)",
                                        any(hasattr(s, "transition") for s in settings))}  # fmt: skip
        for field, (what, present) in needs.items():
            if getattr(self, field) > 0 and not present:
                raise ValueError(f"{type(self).__name__}.{field}={getattr(self, field)!r}: no layer has {what}; the "
                                 "term would be 0")  # fmt: skip

    @classmethod
    def unknown_key_hint(cls, key: str) -> str:
        """An option that only some attention kinds read (``attend_current``, ``num_buckets``, ...) is set in the
        layers' own entries, not as a flat field: say so, with the entry to write (also for a near miss)."""
        fields = [field.name for field in dataclasses.fields(cls)]
        per_layer = sorted({name for kind in ATTENTION_KINDS for name in attention_option_names(kind)} - set(fields))
        close = difflib.get_close_matches(str(key), fields + per_layer, n=1)
        option = key if key in per_layer else (close[0] if close and close[0] in per_layer else None)
        if option is None:
            return super().unknown_key_hint(key)
        kinds = kinds_reading(option)
        where = (f"{option!r} is an option of attention kind {' / '.join(map(repr, kinds))}, set per layer: "
                 f"attention: [{{kind: {kinds[0]}, {option}: ...}}, ...] (one entry per layer)")  # fmt: skip
        return f": {where}" if option == key else f" (did you mean {option!r}? {where})"

    @staticmethod
    def _scoped_entry(entry: str | dict) -> str | dict:
        """A per-layer entry of a list given without a flat ``scope`` or ``window``, with the scope its kind takes by
        default: a kind with Markov biases is local (the flat scope), a scoped kind without them (softmax, ALiBi,
        ...) global unless its entry sets ``scope`` or ``window``. Written into the entry, so that the config's dict,
        whose flat scope is then set, rebuilds the same layers."""
        kind, own = (entry, {}) if isinstance(entry, str) else (entry.get("kind"), entry)
        names = attention_option_names(kind)
        if "scope" not in names or "max_order" in names or "scope" in own or own.get("window") is not None:
            return entry
        return {**own, "kind": kind, "scope": "global"}

    @property
    def positions_end(self) -> int | None:
        """The longest sequence one forward reads: ``max_positions`` with learned positions or a Linformer layer;
        None for positions without an end (``max_positions`` is unread by the others)."""
        if self.position != "learned" and "linformer" not in self.layer_kinds():
            return None
        return self.max_positions

    def layer_kinds(self) -> list[str]:
        """The attention kind of each layer."""
        if isinstance(self.attention, str):
            return [self.attention] * self.n_layers
        return [entry["kind"] if isinstance(entry, dict) else entry for entry in self.attention]

    def layer_specs(self) -> list[LayerSpec]:
        """One resolved spec per layer (kind and every option of that kind): what the model's layers are built from."""
        return list(self._layer_specs)

    def _resolve_layer_specs(self) -> list[LayerSpec]:
        """The flat options, overridden by a layer's own entry (``attention: [{kind: markov, window: 8}, ...]``); a
        layer that sets ``window`` alone is local, one that sets ``scope: global`` alone has no window. Each layer's
        values obey its kind's option rules, reported once as ``attention[i].option=value: why``."""
        entries = [self.attention] * self.n_layers if isinstance(self.attention, str) else self.attention
        flat = self.attention_options()
        specs = []
        taken: set[str] = set()  # the flat options some layer inherits
        overrides: dict[str, list[str]] = {}  # a flat option -> the layers that read it and set their own
        for index, entry in enumerate(entries):
            kind, own = (entry, {}) if isinstance(entry, str) else (entry["kind"], {k: v for k, v in entry.items()
                                                                                    if k != "kind"})  # fmt: skip
            names = attention_option_names(kind)
            values = {name: flat[name] for name in names if name in flat}
            for name in values:
                if name in own:
                    overrides.setdefault(name, []).append(f"attention[{index}].{name}={own[name]!r}")
                elif own.get("gate") == "none" and name in GATE_OPTIONS:  # not inherited (below)
                    overrides.setdefault(name, []).append(f"attention[{index}].gate='none'")
                else:
                    taken.add(name)
            if own and "scope" in names:
                scope = own.get("scope", "local" if own.get("window") is not None else values.get("scope"))
                window = own.get("window")
                if window is None and scope == "local" and scope == self.scope and "max_order" not in own:
                    window = self.window  # the flat window, when the layer keeps the flat scope and order
                values.update(scope=scope, window=window if scope == "local" else own.get("window"))
            values.update(own)
            if own.get("gate") == "none":  # a gate-less layer does not inherit the flat gate's options
                for name in GATE_OPTIONS:
                    if name not in own:
                        values.pop(name, None)
            where = f"{type(self).__name__}.attention[{index}]"
            try:
                settings = ATTENTION_KINDS[kind].options(**values)  # the kind's rules and defaults, applied once
                if hasattr(settings, "refuse_unread"):  # the entry's own options, which it reads only at some values
                    settings.refuse_unread(own)
            except ValueError as error:
                raise ValueError(f"{where}.{error}") from None
            ratio = getattr(settings, "markov_head_ratio", None)  # a split hybrid's: floor(n_heads * ratio) heads
            if kind == "hybrid_split" and (why := no_markov_head(self.n_heads, ratio)):
                named = type(self).__name__ if isinstance(self.attention, str) else where  # flat: the flat field
                raise ValueError(f"{named}.{why}")
            head_dim = getattr(settings, "head_dim", None)  # a kind whose heads are sized by channels, not n_heads
            if head_dim is not None and self.d_model % head_dim:
                raise ValueError(f"{where}.head_dim={head_dim}: must divide d_model={self.d_model}")
            if self.causal and getattr(settings, "bidirectional", None):
                raise ValueError(f"{where}.bidirectional=True: a causal model cannot attend to the future; set "
                                 "causal=False")  # fmt: skip
            if not self.causal and getattr(settings, "kv_shift", False):
                raise ValueError(f"{where}.kv_shift=True: the shift mixes in the previous token's key and value, "
                                 "which only a causal model reads; set causal=True or kv_shift=False")  # fmt: skip
            if kind == "t5_bias":  # the buckets' rule depends on causal (split by sign when not), known here
                try:
                    check_t5_buckets(settings.num_buckets, settings.max_distance, bidirectional=not self.causal)
                except ValueError as error:
                    raise ValueError(f"{where}.{error}") from None
            if "scope" in names and own:
                if settings.scope == "local" and settings.window is None:
                    raise ValueError(f"{where}.window=None: scope='local' {kind} attention needs a window")
                if settings.scope == "global" and settings.window is not None:
                    raise ValueError(f"{where}.window={settings.window!r}: only meaningful with scope='local'")
            backend = getattr(settings, "backend", None)  # the flat fields' rule (above), for the layer's own scope
            if backend == "banded" and getattr(settings, "scope", None) == "global":
                raise ValueError(f"{where}.backend='banded': the banded backend needs scope='local'")
            if backend == "chunked" and getattr(settings, "scope", None) == "local":
                raise ValueError(f"{where}.backend='chunked': the chunked backend is the global-scope path; use "
                                 "'banded' (or 'auto') with scope='local'")  # fmt: skip
            specs.append(LayerSpec(kind, settings))
        for name, layers in overrides.items():  # scope and window: resolved and written back, in a saved config too
            value = getattr(self, name)
            if name not in taken | MODEL_WIDE_OPTIONS | {"scope", "window"} and value != FIELD_DEFAULTS[name]:
                raise ValueError(f"{type(self).__name__}.{name}={value!r}: no layer takes it (the layers whose kind "
                                 f"reads it set their own: {', '.join(layers)}); set it in those entries, or leave "
                                 "it out")  # fmt: skip
        return specs

    def _options_read(self, kinds: set[str] | None = None) -> set[str]:
        """The attention options read by the given kinds (default: every layer's)."""
        return set().union(*(attention_option_names(kind) for kind in (self.layer_kinds() if kinds is None else kinds)))

    def _check_options_are_used(self) -> None:
        """ValueError naming an attention option set to a non-default value that no layer's kind reads, or that only
        split hybrids read, at a ``markov_head_ratio`` (0 or 1) that builds no head of the part reading it. Before
        the window is resolved: a window given is one set."""
        read = self._options_read() | MODEL_WIDE_OPTIONS
        entries = [self.attention] * self.n_layers if isinstance(self.attention, str) else self.attention
        ratios = [entry.get("markov_head_ratio", self.markov_head_ratio) if isinstance(entry, dict)
                  else self.markov_head_ratio for entry in entries]  # fmt: skip
        for name in ATTENTION_OPTION_FIELDS:
            value = getattr(self, name)
            readers = [(kind, ratio) for kind, ratio in zip(self.layer_kinds(), ratios, strict=True)
                       if name in attention_option_names(kind)]  # fmt: skip
            # the model-wide ones are read elsewhere; scope is resolved by now (to the default when no head reads it),
            # and a saved config holds the window resolved (max_order's)
            unset = (FIELD_DEFAULTS[name], SPLIT_DEFAULTS.get(name), *((self.max_order,) if name == "window" else ()))
            if name not in MODEL_WIDE_OPTIONS and readers and value not in unset and all(
                    kind == "hybrid_split" and name in unread_at_ratio(ratio) for kind, ratio in readers):
                raise ValueError(f"{type(self).__name__}.{unread_refusal({name: value}, readers[0][1])}")
            if name not in read and value != FIELD_DEFAULTS[name]:
                kinds = sorted(set(self.layer_kinds()))
                raise ValueError(
                    f"MarkovianTransformerConfig.{name}={getattr(self, name)!r}: attention kind "
                    f"{' / '.join(map(repr, kinds))} has no option {name!r}; it is read by "
                    f"{sorted(kinds_reading(name))}"
                )

    def attention_options(self) -> dict:
        """Every attention option, named as the layer keyword arguments (each kind keeps its own)."""
        return {name: getattr(self, name) for name in ATTENTION_OPTION_FIELDS}

    @classmethod
    def upgrade_keys(cls, values: dict) -> dict:
        """Also: a config written before options were checked per kind (it has ``max_position``) may hold options
        its kinds ignored then (softmax read only ``dropout``); they are dropped, as they were at the time."""
        old_format = "max_position" in values and "max_positions" not in values
        values = super().upgrade_keys(values)
        if old_format:
            attention = values.get("attention", "markov")
            kinds = {attention} if isinstance(attention, str) else set(attention)
            read = set(MODEL_WIDE_OPTIONS) | {"dropout"}
            for kind in kinds - {"softmax"}:
                if kind in ATTENTION_KINDS:
                    read |= attention_option_names(kind)
            for name in set(ATTENTION_OPTION_FIELDS) - read:
                values.pop(name, None)
        return values


FIELD_DEFAULTS = {field.name: field.default for field in dataclasses.fields(MarkovianTransformerConfig)}
SPLIT_DEFAULTS = {field.name: field.default for field in dataclasses.fields(HybridSplitOptions)}
ATTENTION_OPTION_FIELDS = tuple(sorted(
    {name for kind in ATTENTION_KINDS for name in attention_option_names(kind)}
    & {field.name for field in dataclasses.fields(MarkovianTransformerConfig)}
))  # fmt: skip


def gpt2_style_config(
    vocab_size: int, d_model: int, n_layers: int, n_heads: int, max_positions: int, **overrides
) -> MarkovianTransformerConfig:
    """GPT-2 (the model of the Markov-chain papers) as a Markovian Transformer configuration: softmax attention over
    the whole prefix, learned absolute positions, a GELU MLP, tied input/output embeddings, biases in every
    projection and LayerNorm and GPT-2's init. ``bias=False`` is nanoGPT's switch: no bias anywhere (the attention
    projections' go too, unless ``attention_bias`` is given)."""
    values = dict(vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads, attention="softmax",
                  scope="global", position="learned", max_positions=max_positions, ffn="gelu",
                  tie_word_embeddings=True, bias=True, attention_bias=overrides.get("bias", True),
                  init_scheme="gpt2")  # fmt: skip
    return MarkovianTransformerConfig(**{**values, **overrides})


def saved_alibi_blocks(values: dict) -> set[int]:
    """The blocks that ``values``, a saved model's config.json, makes ALiBi layers (its ``attention``; one kind for
    every layer counts ``n_layers`` of them, or transformers' ``num_hidden_layers``, the default where the file has
    neither, as loading it builds): where its weights lack their slopes, they were saved before ALiBi's slopes were,
    and computed with ``alibi_slopes_of(model, old=True)``. ValueError where both names give the count, with two values.
    No blocks for a model of another kind or family, whose weights hold no slopes to keep: an ALiBi layer taking
    them starts with fresh ones (the paper's, as a model built from its config)."""
    values = with_field_names(values, FIELD_DEFAULTS)
    attention, layers = values.get("attention"), values.get("n_layers", MarkovianTransformerConfig.n_layers)
    entries = [attention] * layers if isinstance(attention, str) and isinstance(layers, int) else attention
    if not isinstance(entries, list):  # another family's config
        return set()
    kinds = [entry.get("kind") if isinstance(entry, dict) else entry for entry in entries]
    return {block for block, kind in enumerate(kinds) if kind == "alibi"}
