"""The checkpoint format (``training.checkpoint``) plugged into a Lightning ``Trainer``: apart from the format, so
that the commands that only read runs (``eval``, ``generate``) import no Lightning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import CheckpointIO

from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file


class SafetensorsCheckpointIO(CheckpointIO):
    """Lightning checkpoint I/O in the markovformer format: ``Trainer(plugins=[SafetensorsCheckpointIO()])``.

    ``ModelCheckpoint`` files and ``trainer.fit(..., ckpt_path=...)`` then use ``save_checkpoint_file`` /
    ``load_checkpoint_file``. (``LightningModule.load_from_checkpoint`` bypasses plugins and calls ``torch.load``;
    use ``load_checkpoint_file(path)["state_dict"]`` instead.)
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        save_checkpoint_file(checkpoint, path)

    def load_checkpoint(
        self, path: str | Path, map_location: str | torch.device | int | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        # weights_only is a torch.load option; nothing here can run code, so every load is "weights only".
        return load_checkpoint_file(path, map_location=map_location)

    def remove_checkpoint(self, path: str | Path) -> None:
        Path(path).unlink(missing_ok=True)
