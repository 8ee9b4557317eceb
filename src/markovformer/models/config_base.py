"""What every model config shares: dict/JSON round trips that reject unknown keys with a suggestion, and the map
of renamed fields that lets configs written before a rename still load."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any, ClassVar, TypeVar

from markovformer.advice import suggest

ConfigT = TypeVar("ConfigT", bound="ModelConfig")


# transformers' standard config names -> markovformer's field names (a config's ``attribute_map``, where it has them)
STANDARD_NAMES = {"hidden_size": "d_model", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                  "encoder_layers": "n_encoder_layers", "decoder_layers": "n_decoder_layers",
                  "max_position_embeddings": "max_positions"}  # fmt: skip


def with_field_names(values: dict[str, Any], fields: Iterable[str]) -> dict[str, Any]:
    """``values`` with each of transformers' standard names (``STANDARD_NAMES``) of one of ``fields`` given under
    that field's name (``hidden_size=32`` means ``d_model=32``); ValueError where both name one setting with two
    values."""
    values, fields = dict(values), set(fields)
    for standard, ours in STANDARD_NAMES.items():
        if standard in values and ours in fields:
            value = values.pop(standard)
            if ours in values and values[ours] != value:
                raise ValueError(f"{standard}={value!r} and {ours}={values[ours]!r} name one setting; give one")
            values[ours] = value
    return values


@dataclasses.dataclass
class ModelConfig:
    """Base for model configs: subclasses are dataclasses that validate themselves in ``__post_init__``.

    ``renamed_fields`` maps a field's old name to its new one; ``from_dict`` (config.json) and ``upgrade_keys``
    (a run config's ``model`` section) accept the old names, so files written before the rename still load.
    ``dropped_fields`` maps a removed field to (its old default, where the option lives now): both drop it on load,
    with a warning when the file set it away from that default.
    """

    model_type: ClassVar[str] = "base"
    renamed_fields: ClassVar[dict[str, str]] = {}
    dropped_fields: ClassVar[dict[str, tuple[Any, str]]] = {}

    @classmethod
    def unknown_key_hint(cls, key: str) -> str:
        """What an error about the unknown field ``key`` adds: a spelling suggestion; a family whose options also
        live elsewhere (per layer) says where."""
        return suggest(key, [field.name for field in dataclasses.fields(cls)])

    def layer_kinds(self) -> list[str]:
        """The attention kind of each layer; empty for a family not built from the registry's attention kinds."""
        return []

    def to_dict(self) -> dict[str, Any]:
        """Every field and the ``model_type``, as ``config.json`` holds them (``from_dict`` reads them back)."""
        return {"model_type": self.model_type, **dataclasses.asdict(self)}

    @classmethod
    def upgrade_keys(cls, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with every old field name replaced by its new one and every dropped field removed (a warning
        names one set away from its old default); ValueError if both spellings of a renamed field are given."""
        upgraded = dict(values)
        for dropped, (old_default, new_home) in cls.dropped_fields.items():
            if dropped in upgraded and upgraded.pop(dropped) != old_default:
                warnings.warn(f"{cls.__name__}.{dropped}={values[dropped]!r} is no longer a model option and was "
                              f"ignored; set {new_home} instead", UserWarning, stacklevel=2)  # fmt: skip
        for old, new in cls.renamed_fields.items():
            if old in upgraded:
                if new in upgraded:
                    raise ValueError(f"{cls.__name__}: {old!r} is the old name of {new!r}; give only {new!r}")
                upgraded[new] = upgraded.pop(old)
        return upgraded

    @classmethod
    def from_dict(cls: type[ConfigT], values: dict[str, Any]) -> ConfigT:
        """The config ``values`` (``to_dict``'s, or an older file's: ``upgrade_keys``) describe, checked; ValueError
        for another family's ``model_type`` or a key that is no field (with a spelling suggestion)."""
        values = cls.upgrade_keys(values)
        model_type = values.pop("model_type", cls.model_type)
        if model_type != cls.model_type:
            raise ValueError(f"config is for model_type {model_type!r}, not {cls.model_type!r}")
        known = [field.name for field in dataclasses.fields(cls)]
        for key in values:
            if key not in known:
                raise ValueError(f"{cls.__name__} has no field {key!r}{cls.unknown_key_hint(key)}")
        return cls(**values)

    def replace(self: ConfigT, **changes: Any) -> ConfigT:
        """A copy with the fields ``changes`` names set, checked as a new config is."""
        return dataclasses.replace(self, **changes)
