"""A run directory: the files written when a run starts, and loading a trained run back (final model or checkpoint).

A run directory holds::

    config.yaml        the resolved config (what `--resume` and `eval` rebuild from)
    environment.json   versions, machine, command line, git commit
    data.json          the data's info and the record of its splits (what went where)
    tokenizer/         when the data has one
    checkpoints/       step-NNNNNN.ckpt and last.ckpt (safetensors, atomic; model + optimizer + schedule + loops)
    logs/metrics.csv   CSV log; tensorboard/ the same for TensorBoard
    model/             the final model (save_pretrained format)
    metrics.json       final validation metrics (and the data's reference values)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from markovformer.atomic import atomic_write
from markovformer.data.bundle import DataBundle
from markovformer.models.pretrained import WEIGHTS_NAME
from markovformer.models.registry import head_class
from markovformer.training.build import build_model
from markovformer.training.checkpoint import load_checkpoint_file
from markovformer.training.environment import environment_record
from markovformer.training.fingerprint import check_checkpoint_fingerprint, check_model_fingerprint, run_fingerprint
from markovformer.training.run_checks import check_tensors_match, read_data_info
from markovformer.training.run_config import RunConfig, load_yaml, plain_values, resolve_run_config
from markovformer.training.trainer_config import ConfigError

RESOLVED_CONFIG = "config.yaml"
LAST_CHECKPOINT = "last.ckpt"


def write_json(path: Path, values: dict) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(values, indent=2, default=str) + "\n"))


def write_run_files(run_dir: Path, config: RunConfig, bundle: DataBundle) -> None:
    write_resolved_config(run_dir, config)
    write_json(run_dir / "environment.json", environment_record())
    sizes = {split: len(getattr(bundle, split)) for split in ("train", "val", "test")}
    write_json(run_dir / "data.json", {"info": bundle.info, "splits": bundle.splits, "sizes": sizes})
    if bundle.tokenizer is not None:
        bundle.tokenizer.save(run_dir / "tokenizer")


def write_resolved_config(run_dir: Path, config: RunConfig) -> None:
    text = yaml.safe_dump(plain_values(config.to_dict()), sort_keys=False)
    atomic_write(run_dir / RESOLVED_CONFIG, lambda path: path.write_text(text))


def load_run(target: str | Path) -> tuple[RunConfig, torch.nn.Module, Path]:
    """A trained run's config and model, from a run directory (its final model/, else its last checkpoint) or from
    one checkpoint file inside a run's checkpoints/ folder. The weights must belong to the run (their fingerprint,
    ``training.fingerprint``) and match the model's tensor names, shapes and dtypes; takes no lock (reads only)."""
    target = Path(target)
    if not target.exists():
        raise ConfigError(f"{target}: no such run directory or checkpoint")
    run_dir = target if target.is_dir() else target.parent.parent
    if not (run_dir / RESOLVED_CONFIG).is_file():
        raise ConfigError(f"{run_dir}: not a run directory (no {RESOLVED_CONFIG})")
    config = resolve_run_config(load_yaml(run_dir / RESOLVED_CONFIG))
    data_info = read_data_info(run_dir)
    fingerprint = run_fingerprint(config, run_dir)
    if target.is_dir() and (run_dir / "model").is_dir():
        return config, load_final_model(config, data_info, run_dir / "model", fingerprint), run_dir
    checkpoint = target if target.is_file() else run_dir / "checkpoints" / LAST_CHECKPOINT
    if not checkpoint.is_file():
        raise ConfigError(f"{run_dir}: holds neither a final model/ nor checkpoints/{LAST_CHECKPOINT}")
    try:
        loaded = load_checkpoint_file(checkpoint)
    except (ValueError, OSError) as error:
        raise ConfigError(f"{checkpoint}: cannot read it ({error})") from None
    check_checkpoint_fingerprint(loaded, fingerprint, checkpoint)
    state = loaded.get("state_dict")
    if not isinstance(state, dict):
        raise ConfigError(f"{checkpoint}: not a training checkpoint (no state_dict)")
    model = build_model(config, data_info)
    prefix = "model."
    check_tensors_match(model, state, checkpoint, prefix=prefix)
    model.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
    return config, model, run_dir


def load_final_model(config: RunConfig, data_info: dict, model_dir: Path, fingerprint: str) -> torch.nn.Module:
    """The run's saved model/: its fingerprint checked, then its tensors' names, shapes and dtypes, then loaded."""
    weights = model_dir / WEIGHTS_NAME
    if not weights.is_file():
        raise ConfigError(f"{model_dir}: no {WEIGHTS_NAME} here")
    check_model_fingerprint(model_dir, fingerprint, weights)
    try:
        stored = load_file(str(weights))
    except Exception as error:  # safetensors raises its own error types, and OSError, for damaged files
        raise ConfigError(f"{weights}: not a readable safetensors file ({type(error).__name__}: {error})") from None
    model = build_model(config, data_info)
    check_tensors_match(model, stored, weights, partial=True)
    try:
        return head_class(config.model_type, config.task).from_pretrained(model_dir)
    except (ValueError, RuntimeError, OSError) as error:
        raise ConfigError(f"{model_dir}: cannot load it ({error})") from None


def check_same_tokenizer(run_dir: Path, bundle: DataBundle) -> None:
    """ConfigError unless the rebuilt data's tokenizer is the one saved with the run: a tokenizer fitted on other
    text (say, after ``--data path=...``) would give the model ids that mean other tokens."""
    saved = run_dir / "tokenizer"
    if not saved.is_dir() and bundle.tokenizer is None:
        return
    if not saved.is_dir() or bundle.tokenizer is None:
        raise ConfigError(f"{run_dir}: the run {'has' if saved.is_dir() else 'has no'} saved tokenizer but the "
                          f"rebuilt data {'has none' if bundle.tokenizer is None else 'has one'}")  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        bundle.tokenizer.save(Path(folder))
        rebuilt = {p.name: p.read_bytes() for p in Path(folder).iterdir()}
    if rebuilt != {p.name: p.read_bytes() for p in saved.iterdir()}:
        raise ConfigError(f"the data rebuilt with these options has another tokenizer than the one saved in {saved} "
                          "(it was fitted on other text): its ids would mean other tokens to this model")  # fmt: skip
