"""Hybrids of Markov and random-feature attention: "hybrid_split" (⌊H·markov_head_ratio⌋ Markov heads, the rest
random-feature heads, one shared QKV, concatenated then W_O) and "hybrid_parallel" (both over all heads, each with its
own projections, outputs summed)."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from markovformer.layers.attention import AttentionOutput, SelfAttention
from markovformer.layers.markov_attention import MarkovAttention, MarkovCore, MarkovOptions
from markovformer.layers.options import SCOPE_HELP, SCOPES, interval, one_of, option
from markovformer.layers.random_feature_attention import (
    RandomFeatureAttention,
    RandomFeatureCore,
    RandomFeatureOptions,
)
from markovformer.ops.attention_inputs import check_layer_input

HYBRID_MODES = ("split", "parallel")
# the options each part reads: the fields of its kind's options dataclass, never re-listed
MARKOV_OPTIONS = tuple(field.name for field in dataclasses.fields(MarkovOptions))
RANDOM_FEATURE_OPTIONS = tuple(field.name for field in dataclasses.fields(RandomFeatureOptions))


@dataclasses.dataclass(frozen=True)
class HybridParallelOptions(MarkovOptions, RandomFeatureOptions):
    """The options of attention kind "hybrid_parallel": those of "markov" and "rff"."""

    # a window is the Markov attention's: the random-feature heads read every key whatever the scope
    scope: str = option("local", one_of(SCOPES), help=f"the Markov attention's scope ({SCOPE_HELP}); the "
                        "random-feature attention sees every key")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class HybridSplitOptions(HybridParallelOptions):
    """The options of attention kind "hybrid_split": those of "markov" and "rff", and the Markov heads' share."""

    markov_head_ratio: float = option(0.5, interval(0.0, 1.0), help="the share of heads that are Markov heads "
                                      "(floor(n_heads * ratio)); the rest are random-feature heads")  # fmt: skip

    def refuse_unread(self, given: dict) -> None:
        """ValueError naming the options of ``given`` (those set explicitly, by name) that differ from their defaults
        and that no head reads at this ``markov_head_ratio`` (``unread_at_ratio``): the ablations 0 and 1 are built,
        their missing part's options left at the defaults."""
        defaults = {field.name: field.default for field in dataclasses.fields(self)}
        unread = {name: given[name] for name in unread_at_ratio(self.markov_head_ratio)
                  if name in given and given[name] != defaults[name]}  # fmt: skip
        if unread:
            raise ValueError(unread_refusal(unread, self.markov_head_ratio))


def unread_at_ratio(markov_head_ratio: float) -> tuple[str, ...]:
    """The options a split hybrid at ``markov_head_ratio`` does not read: at 0 it has no Markov head (the Markov
    options: its placeholder Markov core is built, frozen), at 1 no random-feature head."""
    if markov_head_ratio == 0:
        return MARKOV_OPTIONS
    return RANDOM_FEATURE_OPTIONS if markov_head_ratio == 1 else ()


def unread_refusal(unread: dict, markov_head_ratio: float) -> str:
    """Why options set to ``unread`` (by name) are refused by a split hybrid at ``markov_head_ratio`` 0 or 1."""
    missing = ("no Markov head (every head is random-feature)" if markov_head_ratio == 0
               else "no random-feature head (every head is Markov)")  # fmt: skip
    settings = ", ".join(f"{name}={value!r}" for name, value in sorted(unread.items()))
    return (f"{settings}: never read: markov_head_ratio={markov_head_ratio!r} builds {missing}; leave "
            f"{'it' if len(unread) == 1 else 'them'} unset")


def markov_head_count(n_heads: int, markov_head_ratio: float) -> int:
    """How many of the split hybrid's ``n_heads`` heads are Markov (the first ones); the rest are random-feature."""
    return math.floor(n_heads * markov_head_ratio)


def no_markov_head(n_heads: int, markov_head_ratio: float) -> str | None:
    """Why a split hybrid's ratio in (0, 1] that leaves it no Markov head is refused (floor(n_heads * ratio) = 0:
    random-feature heads alone, its Markov options unread), or None; ratio 0 is the ablation, built as asked."""
    if not markov_head_ratio or markov_head_count(n_heads, markov_head_ratio):
        return None
    return (f"markov_head_ratio={markov_head_ratio!r}: with n_heads={n_heads} it gives floor("
            f"{n_heads * markov_head_ratio:.4g}) = 0 Markov heads, random-feature heads alone; set it to at least "
            f"1/{n_heads} for one (0 for none)")


def pick_options(options: dict, names: tuple[str, ...]) -> dict:
    return {name: options[name] for name in names if name in options}


def refuse_unread(layer: str, options: dict, read: type) -> None:
    """TypeError naming an option of ``options`` that no part of hybrid ``layer`` reads, and those it reads (the
    fields of its options dataclass ``read``): each part picks its own, so another name was dropped without a word
    where each part alone refuses it."""
    names = sorted(field.name for field in dataclasses.fields(read))
    unread = [name for name in options if name not in names]
    if unread:
        raise TypeError(f"{layer}() got an unexpected keyword argument {unread[0]!r} (it reads {', '.join(names)})")


class HybridSplitAttention(SelfAttention):
    """``floor(n_heads * markov_head_ratio)`` Markov heads and the rest random-feature heads, sharing one QKV
    projection; the heads are concatenated and mixed by the output projection. The other keyword arguments are
    ``MarkovAttention``'s (``window`` and ``max_order`` required) and ``RandomFeatureAttention``'s; each part reads
    its own, and a name neither reads is a TypeError (``HybridSplitOptions`` holds the defaults and rules)."""

    def __init__(
        self, *, d_model: int, n_heads: int, markov_head_ratio: float = 0.5, causal: bool = True,
        rotary: bool = True, attention_bias: bool = False, **options,
    ) -> None:  # fmt: skip
        refuse_unread(type(self).__name__, options, HybridSplitOptions)
        n_markov = markov_head_count(n_heads, markov_head_ratio)
        head_dim = d_model // n_heads
        markov_options = pick_options(options, MARKOV_OPTIONS)
        if markov_options.get("bidirectional") is None:
            markov_options["bidirectional"] = not causal
        markov = MarkovCore(
            d_model=d_model, n_heads=max(n_markov, 1), head_dim=head_dim, causal=causal, **markov_options
        )
        features = RandomFeatureCore(head_dim=head_dim, causal=causal, **pick_options(options, RANDOM_FEATURE_OPTIONS))
        super().__init__(
            d_model=d_model, n_heads=n_heads, cores=[markov, features],
            heads_per_core=[n_markov, n_heads - n_markov], rotary=rotary, attention_bias=attention_bias,
        )  # fmt: skip
        if n_markov == 0:  # no Markov head: keep the unused core out of the optimiser and out of the reports
            self.cores[0].requires_grad_(False)
            self.cores[0].markov_bias.unused = True

    @property
    def markov_bias(self):
        """The Markov heads' ``MarkovBias`` (transition strengths and order gates)."""
        return self.cores[0].markov_bias


class HybridParallelAttention(nn.Module):
    """Markov attention and random-feature attention over all heads, each with its own projections; summed. Its
    decoding state holds its parts' states (``state["markov"]``, ``state["random_features"]``). The other keyword
    arguments are ``MarkovAttention``'s (``window`` and ``max_order`` required) and ``RandomFeatureAttention``'s;
    each part reads its own, and a name neither reads is a TypeError (``HybridParallelOptions`` holds the defaults
    and rules)."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = True,
                 attention_bias: bool = False, **options) -> None:  # fmt: skip
        refuse_unread(type(self).__name__, options, HybridParallelOptions)
        super().__init__()
        shared = dict(d_model=d_model, n_heads=n_heads, causal=causal, rotary=rotary, attention_bias=attention_bias)
        self.markov = MarkovAttention(**shared, **pick_options(options, MARKOV_OPTIONS))
        self.random_features = RandomFeatureAttention(**shared, **pick_options(options, RANDOM_FEATURE_OPTIONS))
        self.supports_state = self.markov.supports_state and self.random_features.supports_state

    @property
    def markov_bias(self):
        """The Markov part's ``MarkovBias`` (transition strengths and order gates)."""
        return self.markov.markov_bias

    @property
    def honours_segments(self) -> bool:
        """Whether it keeps packed documents apart itself: both parts do (see ``SelfAttention.honours_segments``)."""
        return self.markov.honours_segments and self.random_features.honours_segments

    def forward(
        self, x: Tensor, attention_mask: Tensor | None = None, return_gates: bool = False, return_weights: bool = False,
        state: dict | None = None, segments=None, position_ids: Tensor | None = None,
    ) -> Tensor | AttentionOutput:  # fmt: skip
        """``segments``: packed documents (``ops.segments``), and ``position_ids`` (B, T), the rotary positions of a
        padded batch: passed to both parts."""
        check_layer_input(type(self).__name__, x, self.markov.d_model, attention_mask)  # named as this layer
        if segments is not None:
            markov = self.markov(x, attention_mask, return_gates, return_weights, segments=segments)
            features = self.random_features(x, attention_mask, return_gates, return_weights, segments=segments)
            if not (return_gates or return_weights):
                return markov + features
            weights = torch.cat([markov.weights, features.weights], dim=1) if return_weights else None
            return AttentionOutput(markov.output + features.output, markov.gates, weights)
        markov_state = features_state = None
        if state is not None:
            markov_state, features_state = state.setdefault("markov", {}), state.setdefault("random_features", {})
        markov = self.markov(x, attention_mask, return_gates, return_weights, state=markov_state,
                             position_ids=position_ids)  # fmt: skip
        features = self.random_features(x, attention_mask, return_gates, return_weights, state=features_state,
                                        position_ids=position_ids)  # fmt: skip
        if not (return_gates or return_weights):
            return markov + features
        weights = None
        if return_weights:  # (B, 2H, T, T): the Markov heads' weights, then the random-feature heads'
            weights = torch.cat([markov.weights, features.weights], dim=1)
        return AttentionOutput(markov.output + features.output, markov.gates, weights)


def HybridAttention(*, mode: str = "split", **options) -> nn.Module:  # noqa: N802 - a factory named like the layers
    """Build a hybrid attention layer: ``mode="split"`` (``HybridSplitAttention``) or ``"parallel"``
    (``HybridParallelAttention``), given ``options``, that layer's keyword arguments."""
    if mode == "split":
        return HybridSplitAttention(**options)
    if mode == "parallel":
        return HybridParallelAttention(**options)
    raise ValueError(f"hybrid mode must be one of {HYBRID_MODES}; got {mode!r}")
