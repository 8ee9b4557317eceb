"""T5's relative-position buckets (Raffel et al., JMLR 2020, section 2.1; mesh-tensorflow's
``_relative_position_bucket``): exact buckets for small distances, log-spaced ones up to ``max_distance``, one
bucket for everything beyond; bidirectional attention gives each sign half of the buckets."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def check_t5_buckets(num_buckets: int, max_distance: int, bidirectional: bool) -> None:
    """ValueError unless each direction has at least 2 buckets and ``max_distance`` exceeds its exact buckets (else
    ``t5_buckets`` divides by log(max_distance / exact) = 0 or by exact = 0): bidirectional attention gives each sign
    num_buckets // 2 buckets, of which num_buckets // 2 // 2 are exact."""
    per_direction = num_buckets // 2 if bidirectional else num_buckets
    if per_direction < 2:
        raise ValueError(f"num_buckets={num_buckets!r}: bidirectional attention splits the buckets by sign and needs "
                         f"num_buckets >= 4 (2 per direction, num_buckets // 2 = {per_direction})")  # fmt: skip
    if max_distance <= per_direction // 2:
        split = "num_buckets // 2 // 2 (per direction, bidirectional)" if bidirectional else "num_buckets // 2"
        raise ValueError(f"max_distance={max_distance!r}: must exceed {split} = {per_direction // 2} (the exact "
                         f"buckets), or no bucket is log-spaced")  # fmt: skip


def t5_buckets(lags: Tensor, num_buckets: int, max_distance: int, bidirectional: bool) -> Tensor:
    """Bucket index (long, same shape) of each integer lag t - j (>= 1: key in the past, <= -1: in the future).

    Causal (``bidirectional=False``): future lags share bucket 0 with lag 0 (they are masked anyway); distances
    0..n/2-1 get their own bucket, then log-spaced buckets reach n-1 at ``max_distance``. Bidirectional: the past
    uses buckets 0..n/2-1 and the future n/2..n-1, each split the same way with n/2 buckets.
    """
    buckets = num_buckets
    offset = torch.zeros_like(lags)
    if bidirectional:
        buckets //= 2
        offset = (lags < 0).long() * buckets
        distance = lags.abs()
    else:
        distance = lags.clamp_min(0)
    exact = buckets // 2
    # log-spaced above ``exact``: the fraction of log(max_distance / exact) covered, times the remaining buckets
    scaled = torch.log(distance.clamp_min(1).double() / exact) / math.log(max_distance / exact) * (buckets - exact)
    large = (exact + scaled.long()).clamp_max(buckets - 1)
    return offset + torch.where(distance < exact, distance, large)


__all__ = ["check_t5_buckets", "t5_buckets"]
