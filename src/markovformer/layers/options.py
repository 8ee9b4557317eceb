"""The rules of an option, declared on the option's own dataclass field (as transformers' newer configs declare
``interval(min=..., max=...)``): ``option(default, rule)`` makes the field, ``check_fields`` applies every rule
once, raising ``ValueError("name=value: why")``. Owners add where the value came from (a config, a layer)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Rule = Callable[[Any], "str | None"]  # the value -> why it is wrong, or None
SCOPES = ("local", "global")  # attention over keys t-window..t, or over every key


def scoped_window(scope: str, window: int | None) -> int | None:
    """The window a layer attends within: ``window`` in local scope, None (every key) in global scope."""
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
    return lambda value: None if value in choices else f"must be one of {choices}"


def option(default: Any, rule: Rule) -> Any:
    """A dataclass field with ``default`` whose values obey ``rule``."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def check_fields(instance: Any) -> None:
    """Apply the rule of every field of a dataclass instance; ValueError ``"name=value: why"`` for the first broken."""
    for field in dataclasses.fields(instance):
        rule = field.metadata.get("rule")
        value = getattr(instance, field.name)
        message = rule(value) if rule is not None else None
        if message:
            raise ValueError(f"{field.name}={value!r}: {message}")


__all__ = ["SCOPES", "check_fields", "interval", "one_of", "option", "scoped_window"]
