"""``--set key=value`` for experiments: a module's settings dataclass with the user's changes, checked by the same
coercion as run configs (so a misspelt key gets a suggestion and a wrong type names the key)."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from markovformer.training.run_config import build_dataclass

SettingsT = TypeVar("SettingsT")


def configure(base: SettingsT, overrides: dict[str, Any] | None, name: str) -> SettingsT:
    """``base`` with ``overrides`` applied; errors name ``name.key``."""
    if not overrides:
        return base
    return build_dataclass(type(base), {**dataclasses.asdict(base), **overrides}, name)
