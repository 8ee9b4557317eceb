"""Sliding-window softmax attention: plain multi-head attention over the keys within ``window`` only (the local
Transformer baseline; no Markov bias), on the banded attention op's local paths (O(T·W))."""

from __future__ import annotations

from torch import nn

from markovformer.layers.attention import CoreOutput, SelfAttention
from markovformer.ops.banded_attention import banded_attention, banded_attention_naive


class SlidingWindowCore(nn.Module):
    def __init__(self, *, causal: bool, window: int, dropout: float = 0.0, backend: str = "auto") -> None:
        super().__init__()
        self.causal, self.window, self.dropout, self.backend = causal, window, dropout, backend

    def forward(self, x, q, k, v, attention_mask=None, return_weights=False, q_raw=None) -> CoreOutput:
        options = dict(window=self.window, causal=self.causal, attention_mask=attention_mask,
                       dropout_p=self.dropout if self.training else 0.0)  # fmt: skip
        if return_weights:
            heads, weights = banded_attention_naive(q, k, v, **options)
            return CoreOutput(heads, {}, weights)
        return CoreOutput(banded_attention(q, k, v, backend=self.backend, **options), {}, None)


class SlidingWindowAttention(SelfAttention):
    """Softmax attention in which the query at t sees keys t-W..t (causal) or |t-j| <= W (SPEC 1's window)."""

    def __init__(self, *, d_model: int, n_heads: int, window: int | None, causal: bool = True, dropout: float = 0.0,
                 backend: str = "auto", rotary: bool = True) -> None:  # fmt: skip
        if window is None:
            raise ValueError("attention 'sliding_window' needs a window: set scope='local' (window defaults to "
                             "max_order) or use 'softmax' for global attention")  # fmt: skip
        core = SlidingWindowCore(causal=causal, window=window, dropout=dropout, backend=backend)
        super().__init__(d_model=d_model, n_heads=n_heads, cores=[core], heads_per_core=[n_heads], rotary=rotary)


__all__ = ["SlidingWindowAttention", "SlidingWindowCore"]
