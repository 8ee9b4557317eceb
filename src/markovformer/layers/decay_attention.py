"""Softmax attention with a decay on the logits: ALiBi's fixed per-head distance penalty (Press et al., ICLR 2022)
and the Forgetting Transformer's data-dependent forget gate (FoX, Lin et al., ICLR 2025), both on the
``forgetting_attention`` op (O(T) memory, no T×T bias): ALiBi is FoX with a constant gate log f = -m per head.
Local scope (``window`` W) sees keys t-W..t; ``window=None`` is global scope.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import SCOPES, check_fields, interval, one_of, option
from markovformer.ops.forgetting_attention import forgetting_attention, forgetting_attention_naive


@dataclasses.dataclass(frozen=True)
class DecayOptions:
    """The options of attention kinds "alibi" and "forgetting": ``scope="local"`` sees keys t-window..t (needs
    ``window``), ``scope="global"`` every allowed key."""

    scope: str = option("global", one_of(SCOPES))
    window: int | None = option(None, interval(1, integer=True, optional=True))
    dropout: float = option(0.0, interval(0.0, 1.0, high_open=True))

    def __post_init__(self) -> None:
        check_fields(self)


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's geometric slopes m_h = 2^(-8h/H), h = 1..H (the paper's sequence for a power-of-two H; used as is
    for any H). (H,) float32."""
    return 2.0 ** (-8.0 * torch.arange(1, n_heads + 1, dtype=torch.float32) / n_heads)


class DecayCore(nn.Module):
    """Attention over ``n_heads`` heads whose score of query t on key j is lowered by sum_{l=j+1..t} -log f_l.

    ``forget_gate`` None: the fixed ALiBi gates log f = -m_h. Otherwise a Linear(d_model -> n_heads) read from the
    layer input x_t: f_t = sigmoid(w·x_t + b) (FoX). Its biases start at 1..5 across heads (f from 0.73 to 0.99),
    so heads begin with short and long memories alike; FoX's own initialisation is not fixed by the paper.
    Decodes from a key/value cache (``state["cache"]``) that also holds each key's cumulative log forget gate.
    """

    supports_state = True
    honours_segments = True  # packed documents: masked per query chunk (the op's segment_ids)

    def __init__(self, *, d_model: int, n_heads: int, causal: bool, window: int | None, dropout: float,
                 data_dependent: bool) -> None:  # fmt: skip
        super().__init__()
        self.causal, self.window, self.dropout = causal, window, dropout
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)
        self.forget_gate = nn.Linear(d_model, n_heads) if data_dependent else None
        if self.forget_gate is not None:
            nn.init.normal_(self.forget_gate.weight, std=0.02)
            with torch.no_grad():
                self.forget_gate.bias.copy_(torch.linspace(1.0, 5.0, n_heads))

    def log_forget(self, x: Tensor, heads: int) -> Tensor:
        """(B, T, D) layer input -> (B, H, T) log forget gates (<= 0)."""
        if self.forget_gate is None:
            return (-self.slopes.to(x.dtype))[None, :, None].expand(x.shape[0], heads, x.shape[1])
        return F.logsigmoid(self.forget_gate(x)).transpose(1, 2)

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        log_forget = self.log_forget(x, q.shape[1])
        if state is not None:
            cumulative = log_forget.cumsum(-1)  # G_t from the newest position before x; D_{t,j} = G_t - G_j
            if "cache" in state:
                heads = state["cache"].attend(q, k, v, real_mask(attention_mask, x), log_decay=cumulative)
                return CoreOutput(heads, {}, None)
            keep_in_cache(state, self.window, k, v, attention_mask, cumulative)
        options = dict(window=self.window, causal=self.causal, attention_mask=attention_mask,
                       dropout_p=self.dropout if self.training else 0.0)  # fmt: skip
        if segment_ids is not None:
            options["segment_ids"] = segment_ids
        if return_weights:
            heads, weights = forgetting_attention_naive(q, k, v, log_forget, **options)
            return CoreOutput(heads, {}, weights)
        return CoreOutput(forgetting_attention(q, k, v, log_forget, **options), {}, None)


class AlibiAttention(SelfAttention):
    """Multi-head attention with ALiBi's fixed linear distance penalties, local (``window``) or global scope.
    ALiBi replaces position embeddings: use it with ``position='none'`` (rotary stacks on top otherwise)."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, window: int | None = None,
                 dropout: float = 0.0, rotary: bool = False) -> None:  # fmt: skip
        core = DecayCore(d_model=d_model, n_heads=n_heads, causal=causal, window=window, dropout=dropout,
                         data_dependent=False)  # fmt: skip
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary)


class ForgettingAttention(SelfAttention):
    """The Forgetting Transformer's attention: a data-dependent forget gate per head and position whose cumulative
    log sums are added to the logits. FoX needs no position embedding (``position='none'``)."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, window: int | None = None,
                 dropout: float = 0.0, rotary: bool = False) -> None:  # fmt: skip
        core = DecayCore(d_model=d_model, n_heads=n_heads, causal=causal, window=window, dropout=dropout,
                         data_dependent=True)  # fmt: skip
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary)


__all__ = ["AlibiAttention", "DecayCore", "DecayOptions", "ForgettingAttention", "alibi_slopes"]
