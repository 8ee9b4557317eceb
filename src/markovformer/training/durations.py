"""A time as a reader wants it: the one format of the durations the command prints (reports, estimates)."""

from __future__ import annotations

import math


def format_duration(seconds: float) -> str:
    """``0.31 s``, ``4.2 s``, ``42 s``, ``3.5 min`` or ``1.2 h``: a time as a reader wants it (a short run's
    seconds with the digits that tell them apart, not "0 s")."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
