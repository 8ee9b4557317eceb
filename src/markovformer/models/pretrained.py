"""The base every model family derives from, and the on-disk model format in one place: ``config.json`` +
``model.safetensors`` (no pickle), written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

import torch
from torch import nn

from markovformer.atomic import atomic_write
from markovformer.models.config_base import ModelConfig

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
# class names a config.json may carry from before the Hugging Face naming: old -> new
RENAMED_ARCHITECTURES = {
    "ScanMarkovLM": "ScanMarkovForCausalLM",
    "MarkovTranslator": "MarkovTranslatorForConditionalGeneration",
}
ModelT = TypeVar("ModelT", bound="PreTrainedModel")


class PreTrainedModel(nn.Module):
    """A model built from one config: weight init, ``save_pretrained`` / ``from_pretrained``, ``num_parameters``,
    ``device`` and ``dtype``.

    Subclasses build their modules and then call ``self.init_weights()``: every ``nn.Linear`` and ``nn.Embedding``
    gets N(0, ``config.initializer_range``²) weights and zero biases (modules a family initialises its own way are
    left alone by giving them their own types).
    """

    config_class: type[ModelConfig] = ModelConfig

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def init_weights(self, module: nn.Module | None = None) -> None:
        """Initialise ``module`` (default: the whole model) and its children with ``_init_weights``."""
        (self if module is None else module).apply(self._init_weights)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(p for p in self.parameters() if p.is_floating_point()).dtype

    def num_parameters(self, trainable_only: bool = True) -> int:
        """Parameters counted once each (tied weights once), trainable only by default."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def transition_strengths(self) -> list[dict[str, torch.Tensor | None]]:
        """Per Markov layer, its per-lag transition strengths ``{"past": (H, K), "future": (H, K) or None}``;
        empty for a family without Markov layers."""
        return []

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` (the config, its ``model_type`` and this class's name) and ``model.safetensors``."""
        from safetensors.torch import save_model

        directory = Path(directory)
        values = {**self.config.to_dict(), "architecture": type(self).__name__}
        atomic_write(directory / CONFIG_NAME, lambda p: p.write_text(json.dumps(values, indent=2) + "\n"))
        atomic_write(directory / WEIGHTS_NAME, lambda p: save_model(self, str(p)))

    @classmethod
    def from_pretrained(cls: type[ModelT], directory: str | Path, map_location: str = "cpu") -> ModelT:
        """Load what ``save_pretrained`` wrote (also under the old class and field names)."""
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
        architecture = RENAMED_ARCHITECTURES.get(architecture, architecture)
        if architecture != cls.__name__:
            raise ValueError(f"{directory} holds a {architecture}, not a {cls.__name__}")
        values.pop("transformers_version", None)  # written when the model was saved through Hugging Face
        model = cls(cls.config_class.from_dict(values))
        try:
            load_model(model, str(directory / WEIGHTS_NAME), strict=True, device=map_location)
        except RuntimeError as error:
            raise ValueError(f"{directory / WEIGHTS_NAME} does not match {cls.__name__}: {error}") from error
        return model


__all__ = ["CONFIG_NAME", "RENAMED_ARCHITECTURES", "WEIGHTS_NAME", "PreTrainedModel"]
