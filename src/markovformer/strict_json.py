"""JSON as its standard has it: a non-finite float (nan, inf), which Python's json writes as ``NaN`` / ``Infinity``
and strict parsers (JavaScript, jq, most languages' libraries) refuse, is written as null."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """``json.loads(text)``, JSON nested too deeply for Python's parser included: that raises RecursionError, which
    no ``except ValueError`` around a read catches (a crafted file ended a command in a traceback); here it is a
    ValueError like any other damage."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def read_json_object(path: str | Path, what: str) -> dict:
    """The JSON object in the file at ``path``. A file that is not UTF-8 JSON, or holds something other than an
    object, raises one ValueError naming the file and ``what`` it should be ("a saved model's config"); a caller's
    ``.get`` on a damaged file's list had ended a command in a traceback. A missing or unreadable file raises its
    OSError as it is."""
    try:
        value = parse_json(Path(path).read_text(encoding="utf-8"))
    except ValueError as error:  # not UTF-8 (UnicodeDecodeError), not JSON, or nested too deeply
        raise ValueError(f"{path}: not {what}: not valid JSON ({error})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: not {what}: it holds a JSON {type(value).__name__}, not an object")
    return value


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
