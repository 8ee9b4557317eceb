"""The rules of an option, declared on the option's own dataclass field (as transformers' newer configs declare
``interval(min=..., max=...)``): ``option(default, rule, help=...)`` makes the field, ``check_fields`` applies every
rule once, raising ``ValueError("name=value: why")``. Owners add where the value came from (a config, a layer). The
field's ``help`` is its one line in ``markovformer kind show`` (``option_help``); a test keeps every option of every
attention kind described."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Rule = Callable[[Any], "str | None"]  # the value -> why it is wrong, or None
SCOPES = ("local", "global")  # attention over keys t-window..t, or over every key
# the help of the options that several kinds share with one meaning (option names are one namespace across kinds)
SCOPE_HELP = ("local: each query sees the keys at most window positions from it (t-window..t when causal, both "
              "sides when not; needs window); global: every key")
WINDOW_HELP = ("how far a query sees in local scope (keys t-window..t when causal, |t - j| <= window when not); "
               "null in global scope")
DROPOUT_HELP = "dropout on the attention weights while training"


def scoped_window(scope: str, window: int | None) -> int | None:
    """The window a layer attends within: ``window`` in local scope, None (every key) in global scope. Local scope
    without a window is refused: a layer built so (``SoftmaxAttention(scope="local")``) attended to every key."""
    if scope == "local" and window is None:
        raise ValueError("scope='local' needs a window (keys t-window..t); got window=None")
    return window if scope == "local" else None


def interval(low: float | None = None, high: float | None = None, *, integer: bool = False, optional: bool = False,
             high_open: bool = False) -> Rule:  # fmt: skip
    """Values in [low, high] (or [low, high) with ``high_open``); ``integer``: ints only; ``optional``: None too."""
    def rule(value: Any) -> str | None:
        if value is None and optional:
            return None
        kind = "an integer" if integer else "a number"
        if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)):
            return f"must be {kind}{' or None' if optional else ''}"
        too_high = high is not None and (value >= high if high_open else value > high)
        if (low is not None and value < low) or too_high or value != value:  # nan compares False with every bound
            bounds = f"[{'-inf' if low is None else low}, {'inf' if high is None else high}{')' if high_open else ']'}"
            return f"must be {kind} in {bounds}"
        return None

    return rule


def one_of(choices: tuple) -> Rule:
    """Values equal to one of ``choices``, a bool only to a bool: True == 1 and False == 0 in Python, so ``in``
    took 1, 0 and 1.0 for switches."""

    def rule(value: Any) -> str | None:
        if any(value == choice and isinstance(value, bool) == isinstance(choice, bool) for choice in choices):
            return None
        return f"must be one of {choices}"

    return rule


def option(default: Any, rule: Rule | None = None, *, help: str | None = None) -> Any:
    """A dataclass field with ``default`` whose values obey ``rule`` (None: any value), described by ``help`` (one
    line: what the option does, for ``markovformer kind show``)."""
    return dataclasses.field(default=default, metadata={"rule": rule, "help": help})


def option_help(options: type, name: str) -> str:
    """The help line of field ``name`` of the options dataclass ``options``; KeyError saying where to add it when
    the field has none."""
    field = next((field for field in dataclasses.fields(options) if field.name == name), None)
    if field is None:
        raise KeyError(f"{options.__name__} has no option {name!r}")
    text = field.metadata.get("help")
    if not text:
        raise KeyError(f"option {name!r} of {options.__name__} has no help line: declare it as "
                       f"option(default, rule, help=...) in {options.__module__}")  # fmt: skip
    return text


def check_fields(instance: Any) -> None:
    """Apply the rule of every field of a dataclass instance; ValueError ``"name=value: why"`` for the first broken."""
    for field in dataclasses.fields(instance):
        rule = field.metadata.get("rule")
        value = getattr(instance, field.name)
        message = rule(value) if rule is not None else None
        if message:
            raise ValueError(f"{field.name}={value!r}: {message}")


__all__ = ["DROPOUT_HELP", "SCOPES", "SCOPE_HELP", "WINDOW_HELP", "check_fields", "interval", "one_of", "option",
           "option_help", "scoped_window"]
