"""The on-disk model format, in one place: ``config.json`` + ``model.safetensors`` (no pickle), written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from torch import nn

from markovformer.atomic import atomic_write
from markovformer.models.config_base import ModelConfig

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
ModelT = TypeVar("ModelT", bound="PreTrainedModel")


class PreTrainedModel(nn.Module):
    """``save_pretrained(directory)`` / ``from_pretrained(directory)`` for a model built from one config."""

    config_class: type[ModelConfig] = ModelConfig

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config

    def save_pretrained(self, directory: str | Path) -> None:
        from safetensors.torch import save_model

        directory = Path(directory)
        values = {**self.config.to_dict(), "architecture": type(self).__name__}
        atomic_write(directory / CONFIG_NAME, lambda p: p.write_text(json.dumps(values, indent=2) + "\n"))
        atomic_write(directory / WEIGHTS_NAME, lambda p: save_model(self, str(p)))

    @classmethod
    def from_pretrained(cls: type[ModelT], directory: str | Path, map_location: str = "cpu") -> ModelT:
        from safetensors.torch import load_model

        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (directory / name).is_file():
                raise ValueError(f"{directory}: no {name} here; not a saved {cls.__name__}")
        try:
            values = json.loads((directory / CONFIG_NAME).read_text())
        except json.JSONDecodeError as error:
            raise ValueError(f"{directory / CONFIG_NAME}: not valid JSON ({error})") from error
        architecture = values.pop("architecture", cls.__name__)
        if architecture != cls.__name__:
            raise ValueError(f"{directory} holds a {architecture}, not a {cls.__name__}")
        model = cls(cls.config_class.from_dict(values))
        try:
            load_model(model, str(directory / WEIGHTS_NAME), strict=True, device=map_location)
        except RuntimeError as error:
            raise ValueError(f"{directory / WEIGHTS_NAME} does not match {cls.__name__}: {error}") from error
        return model

    def num_parameters(self, trainable_only: bool = True) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)


__all__ = ["CONFIG_NAME", "WEIGHTS_NAME", "PreTrainedModel"]
