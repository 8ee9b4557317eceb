"""T5's relative-position buckets (Raffel et al., JMLR 2020, section 2.1; mesh-tensorflow's
``_relative_position_bucket``): exact buckets for small distances, log-spaced ones up to ``max_distance``, one
bucket for everything beyond; bidirectional attention gives each sign half of the buckets."""

from __future__ import annotations

import math

import torch
from torch import Tensor


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


__all__ = ["t5_buckets"]
