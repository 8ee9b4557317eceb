"""JSON as its standard has it: a non-finite float (nan, inf), which Python's json writes as ``NaN`` / ``Infinity``
and strict parsers (JavaScript, jq, most languages' libraries) refuse, is written as null."""

from __future__ import annotations

import json
import math
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``, JSON nested too deeply for Python's parser included: that raises RecursionError, which
    no ``except ValueError`` around a read catches (a crafted file ended a command in a traceback); here it is a
    ValueError like any other damage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


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


def strict_dumps(value, **options: Any) -> str:
    """``json.dumps`` of ``strict_json(value)`` with ``options`` (indent, default, ...), refusing a non-finite float
    that ``default`` might still make (``allow_nan=False``)."""
    return json.dumps(strict_json(value), allow_nan=False, **options)
