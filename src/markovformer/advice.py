"""Whom a refusal's advice is for: the command line's user is told its flags (``--resume RUN``), a caller of the
library the Python call (``resume('RUN')``). The library does not know who called it, so the command line says so
once (``command_line``, around the command it runs) and a message asks ``said_as``."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_ON_THE_COMMAND_LINE = contextvars.ContextVar("on_the_command_line", default=False)


@contextlib.contextmanager
def command_line() -> Iterator[None]:
    """Within the block, advice is for the command line's user (``markovformer ...``)."""
    token = _ON_THE_COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _ON_THE_COMMAND_LINE.reset(token)


def said_as(flags: str, call: str) -> str:
    """``flags`` (the command line's words) to the command line's user, else ``call`` (the Python call)."""
    return flags if _ON_THE_COMMAND_LINE.get() else call
