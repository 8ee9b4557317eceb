"""Random-feature (linear) attention: feature maps, a quadratic reference, and the chunked fast path.

``linear_attention`` validates shapes once and dispatches to a backend; tests pin ``chunked`` to ``naive``.
"""

from __future__ import annotations

from torch import Tensor

from markovformer.ops.attention_inputs import check_segment_ids
from markovformer.ops.linear_attention.chunked import linear_attention_chunked
from markovformer.ops.linear_attention.feature_maps import (
    FEATURE_MAPS,
    KEY_EXPONENT_CAP,
    draw_projection,
    feature_map,
    positive_features,
    trig_features,
)
from markovformer.ops.linear_attention.naive import (
    DENOMINATOR_EPS,
    NORMALISERS,
    linear_attention_naive,
    linear_attention_weights,
)

BACKENDS = ("auto", "naive", "chunked")


def _check_shapes(q_features: Tensor, k_features: Tensor, v: Tensor, attention_mask: Tensor | None) -> None:
    """Raise ValueError naming the first argument whose shape disagrees with (B, H, T, F) / (B, T)."""
    if q_features.dim() != 4:
        raise ValueError(f"q_features must be (B, H, T, F), got shape {tuple(q_features.shape)}")
    if k_features.shape != q_features.shape:
        raise ValueError(
            f"k_features must match q_features {tuple(q_features.shape)} (B, H, T, F), "
            f"got shape {tuple(k_features.shape)}"
        )
    if v.dim() != 4 or v.shape[:3] != q_features.shape[:3]:
        raise ValueError(
            f"v must be (B, H, T, Dv) with (B, H, T) = {tuple(q_features.shape[:3])}, got shape {tuple(v.shape)}"
        )
    batch, _, length, _ = q_features.shape
    if attention_mask is not None and tuple(attention_mask.shape) != (batch, length):
        raise ValueError(f"attention_mask must be (B, T) = {(batch, length)}, got shape {tuple(attention_mask.shape)}")


def linear_attention(
    q_features: Tensor,
    k_features: Tensor,
    v: Tensor,
    *,
    causal: bool,
    attention_mask: Tensor | None = None,
    chunk_size: int = 64,
    normaliser: str = "positive",
    backend: str = "auto",
    initial_state: Tensor | None = None,
    output_final_state: bool = False,
    segment_ids: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Linear attention over feature-mapped queries and keys.

    q_features, k_features (B, H, T, F); v (B, H, T, Dv); attention_mask (B, T), 1 = real, 0 = padding.
    Returns (B, H, T, Dv). ``normaliser``: ``"positive"`` (FAVOR+ features) or ``"signed"`` (trig features).
    ``backend``: ``"naive"`` (dense reference), ``"chunked"``, or ``"auto"`` (= chunked).
    State contract (causal, chunked): ``initial_state`` (B, H, F, Dv + 1) in, and with ``output_final_state`` the
    output and the running sums after the last key out (``linear_attention_chunked``).
    ``segment_ids`` (B, T): packed documents (``ops.segments``): each query reads the keys of its own document only.
    """
    check_segment_ids(segment_ids, batch=q_features.shape[0], seq_len=q_features.shape[2])
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    if normaliser not in NORMALISERS:
        raise ValueError(f"unknown normaliser {normaliser!r}; expected one of {NORMALISERS}")
    _check_shapes(q_features, k_features, v, attention_mask)
    if backend == "naive":
        if initial_state is not None or output_final_state:
            raise ValueError("the naive backend carries no state; use backend='chunked'")
        return linear_attention_naive(
            q_features, k_features, v, causal=causal, attention_mask=attention_mask, normaliser=normaliser,
            segment_ids=segment_ids,
        )  # fmt: skip
    return linear_attention_chunked(
        q_features,
        k_features,
        v,
        causal=causal,
        attention_mask=attention_mask,
        chunk_size=chunk_size,
        normaliser=normaliser,
        initial_state=initial_state,
        output_final_state=output_final_state,
        segment_ids=segment_ids,
    )


__all__ = [
    "BACKENDS",
    "DENOMINATOR_EPS",
    "KEY_EXPONENT_CAP",
    "FEATURE_MAPS",
    "NORMALISERS",
    "draw_projection",
    "feature_map",
    "linear_attention",
    "linear_attention_chunked",
    "linear_attention_naive",
    "linear_attention_weights",
    "positive_features",
    "trig_features",
]
