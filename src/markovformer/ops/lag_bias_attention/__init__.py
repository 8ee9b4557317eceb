"""Softmax attention with per-lag additive (Markov) biases ("lag biases"), local (window W) or global scope.

``lag_bias_attention`` validates its inputs once and dispatches to a backend:

- ``"naive"``: dense (T, T) masks and bias, obviously correct; the reference every other path is tested against,
  and the path that returns attention weights for inspection.
- ``"banded"``: local scope only (``window`` not None), look-around blocks, O(T·W) time and memory; CPU and GPU.
- ``"chunked"``: global scope only (``window=None``), exact softmax over query chunks, O(T) memory; CPU and GPU.
- ``"flex"``: FlexAttention with a bias ``score_mod`` and a band ``BlockMask`` (one per batch row with key padding
  or packed documents), local or global; CUDA only, no dropout.
- ``"auto"``: ``flex`` on CUDA (without dropout, heads of at least ``FLEX_MIN_HEAD_DIM``, sequences of at least
  ``FLEX_MIN_LENGTH``), packed or not; otherwise ``banded`` for local scope, and for global scope ``naive`` below
  ``CHUNKED_MIN_LENGTH`` positions (where its few large products win) and ``chunked`` from there. A window of at
  least T - 1 sees every key, so it is global scope here (``banded`` asked for explicitly takes a band of T - 1).

Asking for a backend that cannot run these inputs raises ValueError naming it and the reason.
"""

from __future__ import annotations

import torch
from torch import Tensor

from markovformer.ops.attention_inputs import check_segment_ids
from markovformer.ops.lag_bias_attention.banded import lag_bias_attention_banded
from markovformer.ops.lag_bias_attention.chunked import lag_bias_attention_chunked
from markovformer.ops.lag_bias_attention.flex import (
    FLEX_MIN_HEAD_DIM,
    FLEX_MIN_LENGTH,
    flex_available,
    flex_supports,
    lag_bias_attention_flex,
)
from markovformer.ops.lag_bias_attention.naive import lag_bias_attention_naive

BACKENDS = ("auto", "naive", "banded", "chunked", "flex")
CHUNKED_MIN_LENGTH = 256  # global scope: naive and chunked cross near here on CPU (forward+backward, 1 thread)


def _check_inputs(q, k, v, past_bias, future_bias, window, attention_mask, segment_ids=None,
                  dropout_p: float = 0.0) -> None:  # fmt: skip
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q, k, v must be (B, H, T, Dh) with matching B, H, T and q/k Dh; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    for name, bias in (("past_bias", past_bias), ("future_bias", future_bias)):
        if bias is not None and (bias.dim() != 4 or bias.shape[:3] != q.shape[:3]):
            raise ValueError(f"{name} must be (B, H, T, K) matching q {tuple(q.shape[:3])}; got {tuple(bias.shape)}")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ValueError(f"window must be a non-negative int or None (global scope); got {window!r}")
    if attention_mask is not None and tuple(attention_mask.shape) != (q.shape[0], q.shape[2]):
        raise ValueError(
            f"attention_mask must be (B, T) = {(q.shape[0], q.shape[2])}; got {tuple(attention_mask.shape)}"
        )
    check_segment_ids(segment_ids, batch=q.shape[0], seq_len=q.shape[2])
    if not 0.0 <= dropout_p <= 1.0:  # also refuses NaN
        raise ValueError(f"dropout_p must lie in [0, 1]; got {dropout_p!r}")


def resolve_backend(backend: str, q: Tensor, window: int | None, dropout_p: float = 0.0,
                    value_dim: int | None = None) -> str:  # fmt: skip
    """The backend that ``lag_bias_attention`` runs for these inputs (``value_dim``: v's last dimension, q's when
    None); ValueError if ``backend`` cannot run them. Every backend masks by segment ids (packed documents), so
    they do not enter the choice."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown attention backend {backend!r}; expected one of {BACKENDS}")
    head_dim = q.shape[-1]
    value_dim = head_dim if value_dim is None else value_dim
    if backend == "auto":
        long_enough = q.shape[-2] >= FLEX_MIN_LENGTH
        if flex_available(q.device) and dropout_p == 0 and flex_supports(head_dim, value_dim) and long_enough:
            return "flex"
        if window is not None:
            return "banded"
        return "chunked" if q.shape[-2] >= CHUNKED_MIN_LENGTH else "naive"
    if backend == "banded" and window is None:
        raise ValueError("backend 'banded' needs a local window (scope='local'); got window=None")
    if backend == "chunked" and window is not None:
        raise ValueError(f"backend 'chunked' is the global-scope path (window=None); got window={window}")
    if backend == "flex":
        if not flex_available(q.device):
            raise ValueError(
                f"backend 'flex' is not available on device {q.device.type!r}: it needs CUDA and "
                "torch.nn.attention.flex_attention (FlexAttention has no backward on CPU)"
            )
        if dropout_p > 0:
            raise ValueError(f"backend 'flex' has no attention dropout; got dropout_p={dropout_p}")
        if not flex_supports(head_dim, value_dim):
            raise ValueError(f"backend 'flex' needs head dimensions of at least {FLEX_MIN_HEAD_DIM} (powers of two "
                             f"with torch 2.6); got {head_dim} (query/key) and {value_dim} (value) with torch "
                             f"{torch.__version__}: use 'banded' or 'naive'")  # fmt: skip
    return backend


def lag_bias_attention(
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
    segment_ids: Tensor | None = None,
) -> Tensor:
    """Markov-biased softmax attention.

    Args:
        q, k: (B, H, T, Dh); v: (B, H, T, Dv).
        past_bias: (B, H, T, K) or None; slot k-1 is added to the score of query t on key t-k.
        future_bias: (B, H, T, K) or None; slot k-1 is added to the score of query t on key t+k.
        window: W, the query at t sees keys t-W..t (causal, |t-j| <= W bidirectional), or None for global scope.
        causal: hide keys after the query.
        attention_mask: (B, T), 1 = real token, 0 = padding (as a key). Queries with no visible key output 0.
        dropout_p: dropout on the attention probabilities, in [0, 1] (pass 0 at evaluation; 1 gives zeros).
        backend: one of ``BACKENDS`` (see the module docstring). ``banded`` and ``chunked`` have a first derivative
            only: a backward under ``create_graph=True`` (a gradient penalty) raises; ``naive`` has every order.
        segment_ids: (B, T) long, packed documents (``ops.segments``): a query sees keys of its own segment only
            (-1 = padding, no segment). Masked inside the band, the chunk or flex's ``BlockMask``: no (T, T) tensor
            outside ``naive``.

    Returns:
        (B, H, T, Dv).
    """
    _check_inputs(q, k, v, past_bias, future_bias, window, attention_mask, segment_ids, dropout_p)
    if window is not None and window >= q.shape[-2] - 1 and backend in ("auto", "banded"):
        # The band then holds every key: global scope's result. The banded path's memory is O(T·W) in the W asked
        # for (a 65,536 window at T = 1,024 took 21x the memory of W = T - 1), so "auto" takes the global path
        # (O(T) memory) and "banded" the band of T - 1.
        window = None if backend == "auto" else max(q.shape[-2] - 1, 0)
    backend = resolve_backend(backend, q, window, dropout_p, v.shape[-1])
    options = dict(causal=causal, attention_mask=attention_mask, segment_ids=segment_ids)
    if backend == "flex":
        return lag_bias_attention_flex(q, k, v, past_bias, future_bias, window=window, **options)
    if backend == "banded":
        return lag_bias_attention_banded(q, k, v, past_bias, future_bias, window=window, dropout_p=dropout_p, **options)
    if backend == "chunked":
        return lag_bias_attention_chunked(q, k, v, past_bias, future_bias, dropout_p=dropout_p, **options)
    return lag_bias_attention_naive(q, k, v, past_bias, future_bias, window=window, dropout_p=dropout_p, **options)[0]


__all__ = [
    "BACKENDS",
    "CHUNKED_MIN_LENGTH",
    "lag_bias_attention",
    "lag_bias_attention_banded",
    "lag_bias_attention_chunked",
    "lag_bias_attention_flex",
    "lag_bias_attention_naive",
    "flex_available",
    "resolve_backend",
]
