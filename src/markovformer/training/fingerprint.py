"""Which run a set of weights belongs to: a fingerprint of the run's config and tokenizer, saved with the weights.

The fingerprint is the SHA-256 of the task, the model type and model section, the data section, the seed (which
draws the data) and the bytes of every file of the run's saved tokenizer: everything that fixes what the model's
inputs and outputs mean. Schedule settings (steps, learning rate, ...) are left out, so extending a run keeps it.

Checkpoints carry it under ``"run_fingerprint"``; the final ``model/`` carries it in ``model/fingerprint.json``
together with the SHA-256 of ``model.safetensors`` and of ``config.json``, so neither a ``model/`` copied from another
run nor weights or a model config swapped or edited under it pass. The record also holds the digest of the tensors
themselves (``saved_weights.tensors_sha256``), which shows the same weights split into transformers' shards to be the
run's. A run directory of this version must have the record; only runs written before fingerprints existed
(``required=False``) are checked by names, shapes and dtypes alone.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from torch import Tensor

from markovformer.atomic import atomic_write_text
from markovformer.file_digest import file_sha256
from markovformer.models.saved_weights import WEIGHTS_NAME, read_weights_folder, tensors_sha256, weights_file
from markovformer.strict_json import parse_json
from markovformer.training.run_config import ConfigError, RunConfig

CHECKPOINT_KEY = "run_fingerprint"
SETTINGS_KEY = "run_settings"  # checkpoints also record the settings they were trained with (run_checks)
FINGERPRINT_FILE = "fingerprint.json"


def run_fingerprint(config: RunConfig, run_dir: Path) -> str:
    """The fingerprint of the run in ``run_dir`` built from ``config`` (its tokenizer read from ``run_dir``)."""
    tokenizer = run_dir / "tokenizer"
    files = sorted(tokenizer.iterdir()) if tokenizer.is_dir() else []
    identity = {
        "task": config.task,
        "model_type": config.model_type,
        "model": config.model,
        "data": config.data,
        "seed": config.trainer.seed,
        "tokenizer": {path.name: file_sha256(path) for path in files if path.is_file()},
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()


# The files of a saved model/ that its fingerprint record covers, by the record's key.
MODEL_FILES = {"weights_sha256": WEIGHTS_NAME, "config_sha256": "config.json"}
# The record's digest of the saved tensors, whichever files hold them: the one a sharded model/ is checked by.
TENSORS_KEY = "tensors_sha256"


def write_model_fingerprint(model_dir: Path, fingerprint: str) -> None:
    """The record of ``model_dir``, just saved by the run with ``fingerprint``: its tensors under the names our save
    keeps, a tied weight under the first of its names (``tensors_sha256``'s own for it)."""
    record = {"run": fingerprint, **{key: file_sha256(model_dir / name) for key, name in MODEL_FILES.items()},
              TENSORS_KEY: tensors_sha256(read_weights_folder(model_dir))}  # fmt: skip
    atomic_write_text(model_dir / FINGERPRINT_FILE, json.dumps(record, indent=2) + "\n")


def check_model_fingerprint(model_dir: Path, fingerprint: str, tied: Mapping[str, str], required: bool = True,
                            read: Callable[[], dict[str, Tensor]] | None = None) -> None:  # fmt: skip
    """ConfigError unless ``model_dir`` was saved by the run with ``fingerprint`` and its weights and config are the
    ones saved (``tied``: its model's ``tied_names``, whose weights shards may hold under another of their names).
    ``required=False`` (a run written before fingerprints existed) lets a missing record pass. ``read``: what reads
    the folder's tensors, which the shards are checked by (default ``read_weights_folder``; a caller that loads them
    next passes one that reads them once)."""
    path = model_dir / FINGERPRINT_FILE
    if not path.is_file():
        if not required:
            return
        raise ConfigError(
            f"{path} is missing: without it the weights in {model_dir} cannot be shown to be this "
            f"run's; restore the file, or evaluate a checkpoint: {model_dir.parent}/checkpoints/..."
        )
    try:
        record = parse_json(path.read_text(encoding="utf-8"))
        saved = record["run"]
        digests = {key: record[key] for key in MODEL_FILES if key in record or required}
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not a fingerprint record ({type(error).__name__}: {error})") from None
    if saved != fingerprint:
        raise ConfigError(f"{model_dir} does not match the run's model: it was saved by another run (its config or "
                          f"tokenizer differ from this run's config.yaml and tokenizer/)")  # fmt: skip
    index = weights_file(model_dir)
    sharded = index is not None and index.name != WEIGHTS_NAME
    for key, digest in digests.items():
        file = model_dir / MODEL_FILES[key]
        if sharded and file.name == WEIGHTS_NAME:  # the whole file's bytes are gone: its tensors are checked below
            continue
        if not file.is_file() or digest != file_sha256(file):
            raise ConfigError(f"{file} does not match the run's model: the file is not the one this run saved "
                              f"(it is missing or its SHA-256 differs from {path})")  # fmt: skip
    if sharded:
        _check_shards(index, record, path, tied, read or (lambda: read_weights_folder(model_dir)))


def _check_shards(index: Path, record: dict, path: Path, tied: Mapping[str, str],
                  read: Callable[[], dict[str, Tensor]]) -> None:  # fmt: skip
    """ConfigError unless the tensors of the shards ``index`` names are those the fingerprint ``record`` (read from
    ``path``) says the run saved: its ``TENSORS_KEY``, which a record written before it lacks."""
    if not isinstance(record.get(TENSORS_KEY), str):
        raise ConfigError(f"{index}: these shards cannot be shown to be this run's weights ({path} holds the digest "
                          f"of {WEIGHTS_NAME} alone, written before it held its tensors' digest); restore "
                          f"{WEIGHTS_NAME}")  # fmt: skip
    try:
        tensors = read()
    except ValueError as error:
        raise ConfigError(str(error)) from None
    if tensors_sha256(tensors, tied) != record[TENSORS_KEY]:
        raise ConfigError(f"{index} does not match the run's model: its shards hold other tensors than this run saved "
                          f"(their {TENSORS_KEY} differs from {path})")  # fmt: skip


def check_checkpoint_fingerprint(checkpoint: dict, fingerprint: str, path: Path) -> None:
    saved = checkpoint.get(CHECKPOINT_KEY)
    if saved is not None and saved != fingerprint:
        raise ConfigError(f"{path} does not match the run's model: it was written by another run (its config or "
                          f"tokenizer differ from this run's)")  # fmt: skip


__all__ = ["CHECKPOINT_KEY", "MODEL_FILES", "check_checkpoint_fingerprint", "check_model_fingerprint",
           "run_fingerprint", "write_model_fingerprint"]  # fmt: skip
