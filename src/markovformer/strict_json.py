"""JSON as its standard has it: a non-finite float (nan, inf), which Python's json writes as ``NaN`` / ``Infinity``
and strict parsers (JavaScript, jq, most languages' libraries) refuse, is written as null."""

from __future__ import annotations

import math


def strict_json(value):
    """``value`` with every non-finite float replaced by None, recursively through dicts, lists and tuples (tuples
    become lists), so that it dumps as strict JSON (``json.dumps(..., allow_nan=False)``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value
