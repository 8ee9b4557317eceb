"""Markovian attention: softmax attention whose logits carry gated per-lag transition biases,
S_{t,j} = q_t·k_j/√Dh + B_{t,j} with B_{t,t-k} = α_{t,k}·T_k (past) and B_{t,t+k} = α'_{t,k}·T'_k (future, when
bidirectional), k = 1..K."""

from __future__ import annotations

import dataclasses

from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.markov_bias import GATE_INPUTS, GATES, TRANSITIONS, MarkovBias
from markovformer.layers.options import (
    DROPOUT_HELP,
    SCOPE_HELP,
    SCOPES,
    check_fields,
    interval,
    one_of,
    option,
    scoped_window,
)
from markovformer.ops.lag_bias_attention import BACKENDS, lag_bias_attention, lag_bias_attention_naive


class MarkovCore(nn.Module):
    """Per-lag biased attention over ``n_heads`` heads; local scope sees keys within ``window`` only. Decodes from
    a key/value cache (``state["cache"]``; rolling, W + 1 slots, in local scope): the gates of a new token read
    only that token, so its biases need nothing else."""

    supports_state = True
    honours_segments = True  # packed documents: masked inside the band or chunk; gates pooled per document

    def __init__(
        self,
        *,
        d_model: int,
        n_heads: int,
        max_order: int,
        causal: bool,
        bidirectional: bool,
        scope: str = "local",
        window: int | None,
        dropout: float = 0.0,
        backend: str = "auto",
        head_dim: int,
        **bias_options,
    ) -> None:
        super().__init__()
        self.markov_bias = MarkovBias(
            d_model=d_model,
            n_heads=n_heads,
            head_dim=head_dim,
            max_order=max_order,
            bidirectional=bidirectional,
            **bias_options,
        )
        self.causal, self.dropout, self.backend = causal, dropout, backend
        self.window = scoped_window(scope, window)  # as resolved (MarkovOptions holds the default), no second rule

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        packed = {} if segment_ids is None else {"segment_ids": segment_ids}
        cache = None if state is None else state.get("cache")
        if cache is not None:  # a decoding step: the strengths are derived once per decoding
            strengths = cache.derived.get("strengths")
            if strengths is None:
                strengths = cache.derived["strengths"] = self.markov_bias.strengths_for(x.dtype)
            past, _, gates = self.markov_bias(x, q if q_raw is None else q_raw, attention_mask, strengths=strengths)
            real = real_mask(attention_mask, x, none_if_all=True)
            return CoreOutput(cache.attend(q, k, v, real, past_bias=past), gates, None)
        past, future, gates = self.markov_bias(x, q if q_raw is None else q_raw, attention_mask, **packed)
        keep_in_cache(state, self.window, k, v, attention_mask)
        dropout = self.dropout if self.training else 0.0
        options = dict(window=self.window, causal=self.causal, attention_mask=attention_mask, dropout_p=dropout,
                       **packed)  # fmt: skip
        if return_weights:
            heads, weights = lag_bias_attention_naive(q, k, v, past, future, **options)
            return CoreOutput(heads, gates, weights)
        return CoreOutput(lag_bias_attention(q, k, v, past, future, backend=self.backend, **options), gates, None)


class MarkovAttention(SelfAttention):
    """Self-attention with Markov transition biases and order gates on every head.

    Keyword arguments are named like the config fields: ``d_model, n_heads, max_order, causal, bidirectional,
    scope, window`` (``max_order`` and ``window`` required: the resolved values, as ``MarkovOptions`` gives them;
    window None in global scope), ``gate, gate_input, gate_null, gate_gumbel_tau, transition, head_specific, dropout,
    backend, rotary``.
    ``forward(x, attention_mask=None, return_gates=False, return_weights=False)``.
    """

    def __init__(self, *, d_model: int, n_heads: int, rotary: bool = True, attention_bias: bool = False,
                 **core_options) -> None:  # fmt: skip
        core_options.setdefault("causal", True)
        if core_options.get("bidirectional") is None:
            core_options["bidirectional"] = not core_options["causal"]
        core = MarkovCore(d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads, **core_options)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)

    @property
    def markov_bias(self) -> MarkovBias:
        """The layer's ``MarkovBias`` (transition strengths and order gates)."""
        return self.cores[0].markov_bias


@dataclasses.dataclass(frozen=True)
class MarkovOptions:
    """The options of attention kind "markov", named as the config fields: the one home of their defaults and of
    the rules on their values (``ValueError("field=value: why")``). Rules that tie an option to the model (causal,
    the scope and window of the other layers) are the model config's."""

    max_order: int = option(4, interval(1, integer=True), help="K, the lags 1..K that carry a learned transition bias")
    bidirectional: bool | None = option(None, one_of((True, False, None)), help="also biases and gates for the "
                                        "future lags (null: not causal; a causal model refuses true)")  # fmt: skip
    scope: str = option("local", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True),
                                help="how far a query sees in local scope (keys t-window..t when causal, |t - j| <= "
                                "window when not; null: max_order); null in global scope")  # fmt: skip
    gate: str = option("linear", one_of(GATES), help="the order gate's network over the lags (and a null slot): "
                       "linear, mlp, deep_mlp, or none (every lag's bias at full strength)")  # fmt: skip
    gate_input: str = option("token", one_of(GATE_INPUTS), help="what the gate reads: token (the normalised layer "
                             "input), query (the head's query), static (learned logits) or sequence (the masked mean "
                             "of the whole sequence; bidirectional only)")  # fmt: skip
    gate_null: bool = option(True, one_of((True, False)), help="add the gate's null slot, whose mass multiplies no "
                             "bias (the gate can switch the biases off)")  # fmt: skip
    gate_gumbel_tau: float | None = option(None, lambda tau: None if tau is None or (
        isinstance(tau, (int, float)) and not isinstance(tau, bool) and tau > 0) else "must be positive or None",
        help="temperature of a straight-through Gumbel-softmax gate while training (null: the plain softmax)")
    transition: str = option("softplus", one_of(TRANSITIONS), help="the transition strengths: softplus (positive, "
                             "softplus(theta) + eps) or signed (theta itself)")  # fmt: skip
    head_specific: bool = option(True, one_of((True, False)), help="one set of transition strengths per head "
                                 "(false: one shared by the heads)")  # fmt: skip
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True), help=DROPOUT_HELP)
    backend: str = option("auto", one_of(BACKENDS), help="the biased attention op's path: auto (by scope and "
                          "length), naive, banded (local), chunked (global) or flex (FlexAttention)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)
        if self.scope == "local" and self.window is None:  # the one home of this default: a window of max_order
            object.__setattr__(self, "window", self.max_order)
        if self.scope == "local" and self.window < self.max_order:
            raise ValueError(f"window={self.window!r}: smaller than max_order={self.max_order}: lags beyond the "
                             "window are never seen")  # fmt: skip
        if self.gate == "none":  # an option of a gate that is not built would be silently ignored
            for name, unset in (("gate_input", "token"), ("gate_null", True), ("gate_gumbel_tau", None)):
                if getattr(self, name) != unset:
                    raise ValueError(f"{name}={getattr(self, name)!r}: an option of the order gate, and gate='none' "
                                     "builds none")  # fmt: skip
        if self.gate_input == "sequence" and self.bidirectional is False:  # None: the model config resolves it
            raise ValueError("gate_input='sequence': the gate pools the whole sequence, the future included; it "
                             "needs bidirectional=True")  # fmt: skip

    @classmethod
    def check_values(cls, owner: str, values: dict) -> None:
        """Apply the per-value rules to ``values`` (some of the fields), naming the field as ``owner.field``."""
        try:
            cls(**values)
        except ValueError as error:
            raise ValueError(f"{owner}.{error}") from None
