"""Softmax attention with per-lag additive (Markov) biases, local or global scope.

``banded_attention`` validates its inputs once and dispatches to a backend:

- ``"naive"``: dense (T, T) masks and bias, obviously correct; the reference every other path is tested against,
  and the path that returns attention weights for inspection. Also the global-scope path for now (O(T²)).
- ``"banded"``: local scope only (``window`` not None), look-around blocks, O(T·W).
- ``"auto"``: ``banded`` for local scope, ``naive`` for global scope.
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.banded_attention.banded import banded_attention_banded
from markovformer.ops.banded_attention.naive import banded_attention_naive

BACKENDS = ("auto", "naive", "banded")


def _check_inputs(q, k, v, past_bias, future_bias, window, attention_mask) -> None:
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q, k, v must be (B, H, T, Dh) with matching B, H, T and q/k Dh; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    for name, bias in (("past_bias", past_bias), ("future_bias", future_bias)):
        if bias is not None and (bias.dim() != 4 or bias.shape[:3] != q.shape[:3]):
            raise ValueError(f"{name} must be (B, H, T, K) matching q {tuple(q.shape[:3])}; got {tuple(bias.shape)}")
    if window is not None and (not isinstance(window, int) or window < 0):
        raise ValueError(f"window must be a non-negative int or None (global scope); got {window!r}")
    if attention_mask is not None and tuple(attention_mask.shape) != (q.shape[0], q.shape[2]):
        raise ValueError(
            f"attention_mask must be (B, T) = {(q.shape[0], q.shape[2])}; got {tuple(attention_mask.shape)}"
        )


def banded_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past_bias: Tensor | None = None,
    future_bias: Tensor | None = None,
    *,
    window: int | None,
    causal: bool,
    attention_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    backend: str = "auto",
) -> Tensor:
    """Markov-biased softmax attention.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        past_bias: (B, H, T, K) or None; slot k-1 is added to the score of query t on key t-k.
        future_bias: (B, H, T, K) or None; slot k-1 is added to the score of query t on key t+k.
        window: W of SPEC 1 (keys t-W..t causal, |t-j| <= W bidirectional), or None for global scope.
        causal: hide keys after the query.
        attention_mask: (B, T), 1 = real token, 0 = padding (as a key). Queries with no visible key output 0.
        dropout_p: dropout on the attention probabilities (pass 0 at evaluation).
        backend: one of ``BACKENDS``.

    Returns:
        (B, H, T, Dv).
    """
    _check_inputs(q, k, v, past_bias, future_bias, window, attention_mask)
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; expected one of {BACKENDS}")
    if backend == "auto":
        backend = "naive" if window is None else "banded"
    kwargs = dict(window=window, causal=causal, attention_mask=attention_mask, dropout_p=dropout_p)
    if backend == "banded":
        if window is None:
            raise ValueError("backend 'banded' needs a local window (scope='local'); got window=None")
        return banded_attention_banded(q, k, v, past_bias, future_bias, **kwargs)
    return banded_attention_naive(q, k, v, past_bias, future_bias, **kwargs)[0]


__all__ = ["BACKENDS", "banded_attention", "banded_attention_banded", "banded_attention_naive"]
