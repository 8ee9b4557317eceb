"""What a refusal advises, and whom for. ``suggest``: the one spelling hint for a name that is not known. The command
line's user is told its flags (``--resume RUN``), a caller of the library the Python call (``resume('RUN')``): the
library does not know who called it, so the command line says so once (``command_line``, around the command it runs)
and a message asks ``said_as``. Standard library only: every layer, the core's included, imports it."""

from __future__ import annotations

import contextlib
import contextvars
import difflib
from collections.abc import Iterable, Iterator


def suggest(key: object, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or an empty string: the one spelling hint of the CLI and
    the library. A key that is not a string (a number, a list) is no misspelling of a name: no hint."""
    if not isinstance(key, str):
        return ""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


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
