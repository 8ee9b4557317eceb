"""What every model config shares: dict/JSON round trips that reject unknown keys with a suggestion."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

ConfigT = TypeVar("ConfigT", bound="ModelConfig")


def suggest(key: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest known name, or an empty string: the one spelling hint of the CLI."""
    close = difflib.get_close_matches(str(key), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_key_message(owner: str, key: str, known: list[str]) -> str:
    return f"{owner} has no field {key!r}{suggest(key, known)}"


@dataclasses.dataclass
class ModelConfig:
    """Base for model configs: subclasses are dataclasses that validate themselves in ``__post_init__``."""

    model_type: ClassVar[str] = "base"

    def to_dict(self) -> dict[str, Any]:
        return {"model_type": self.model_type, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls: type[ConfigT], values: dict[str, Any]) -> ConfigT:
        values = dict(values)
        model_type = values.pop("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise ValueError(f"config is for model_type {model_type!r}, not {cls.model_type!r}")
        known = [field.name for field in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise ValueError(unknown_key_message(cls.__name__, key, known))
        return cls(**values)

    def replace(self: ConfigT, **changes: Any) -> ConfigT:
        return dataclasses.replace(self, **changes)
