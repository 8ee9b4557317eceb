"""Stick-breaking attention as an attention kind ("stick_breaking"): keys, nearest first, take sigmoid shares of the
attention mass left by the nearer ones; what is left after the farthest is dropped (Tan et al., "Scaling
Stick-Breaking Attention", ICLR 2025, arXiv:2410.17980; reference: github.com/shawntan/stickbreaking-attention).
The op is ``ops.stick_breaking_attention``. It encodes order itself: use it with ``position='none'``. Causal only:
the stick is broken from the query backwards, and the paper defines no bidirectional form.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.layers.kv_cache import keep_in_cache, real_mask
from markovformer.layers.options import SCOPE_HELP, SCOPES, WINDOW_HELP, check_fields, interval, one_of, option
from markovformer.ops.stick_breaking_attention import (
    stick_breaking_attention,
    stick_breaking_attention_naive,
    stick_breaking_over_cache,
)


@dataclasses.dataclass(frozen=True)
class StickBreakingOptions:
    """The options of attention kind "stick_breaking": ``scope="local"`` breaks the stick over keys t-window..t
    (needs ``window``); ``attend_current``: the query's own key takes the first share (the paper: it does not)."""

    scope: str = option("global", one_of(SCOPES), help=SCOPE_HELP)
    window: int | None = option(None, interval(1, integer=True, optional=True), help=WINDOW_HELP)
    attend_current: bool = option(False, one_of((True, False)), help="the query's own key takes the first share "
                                  "of the stick (the paper's form: it takes none)")  # fmt: skip

    def __post_init__(self) -> None:
        check_fields(self)


class StickBreakingCore(nn.Module):
    """Stick-breaking attention of already-projected heads; decodes from a key/value cache (``state["cache"]``)."""

    supports_state = True
    honours_segments = True  # packed documents: other documents' keys take no share (the op's segment_ids)

    def __init__(self, *, causal: bool, window: int | None, attend_current: bool) -> None:
        super().__init__()
        if not causal:
            raise ValueError("stick-breaking attention is causal only (the stick is broken from the query "
                             "backwards); use causal=True")  # fmt: skip
        self.causal, self.window, self.attend_current = causal, window, attend_current

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None, state=None,
                segment_ids=None) -> CoreOutput:  # fmt: skip
        options = dict(window=self.window, attend_current=self.attend_current)
        if state is not None and "cache" in state:
            seen = state["cache"].extend(k, v, real_mask(attention_mask, x))
            heads = stick_breaking_over_cache(q, seen.keys, seen.values, seen.query_positions, seen.key_positions,
                                              seen.key_real, **options)  # fmt: skip
            return CoreOutput(heads, {}, None)
        keep_in_cache(state, self.window, k, v, attention_mask)
        if return_weights:
            heads, weights = stick_breaking_attention_naive(q, k, v, attention_mask=attention_mask,
                                                            segment_ids=segment_ids, **options)  # fmt: skip
            return CoreOutput(heads, {}, weights)
        return CoreOutput(stick_breaking_attention(q, k, v, attention_mask=attention_mask, segment_ids=segment_ids,
                                                   **options), {}, None)  # fmt: skip


class StickBreakingAttention(SelfAttention):
    """Multi-head stick-breaking attention, global or over a window of keys."""

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, rotary: bool = False,
                 attention_bias: bool = False, window: int | None = None,
                 attend_current: bool = False) -> None:  # fmt: skip
        core = StickBreakingCore(causal=causal, window=window, attend_current=attend_current)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary,
                         attention_bias=attention_bias)


__all__ = ["StickBreakingAttention", "StickBreakingCore", "StickBreakingOptions"]
