"""What a run directory must satisfy before it is continued or read: which settings ``--resume`` may change, a
checkpoint that can be resumed from, and weights whose tensors are the model's."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from markovformer.layers.decay_attention import alibi_slopes_of
from markovformer.strict_json import parse_json
from markovformer.training.checkpoint import TensorInfo, read_checkpoint_skeleton, step_checkpoints
from markovformer.training.fingerprint import CHECKPOINT_KEY, SETTINGS_KEY
from markovformer.training.run_config import (
    ConfigError,
    RunConfig,
    apply_overrides,
    plain_values,
    resolve_run_config,
)
from markovformer.training.trainer_config import check_decay, check_weight_decay, shown

# What `--resume RUN key=value` may change: how long the run goes on and how it is watched, never what it computes;
# and, after a divergence, the step size (the learning rate and gradient clipping from the resumed step on).
RESUMABLE_KEYS = ("trainer.max_steps", "trainer.decay_steps", "trainer.eval_every", "trainer.checkpoint_every",
                  "trainer.log_every", "trainer.keep_checkpoints", "trainer.num_workers",
                  "trainer.eval_batch_size", "trainer.lr", "trainer.gradient_clip")  # fmt: skip


# What checkpoints record of the config (trained_settings): all but the keys a resume may change, where the run's
# files go, where it started from, and how its steps are run (devices' kind, threads, logging, compilation).
UNRECORDED_KEYS = ("output_dir", "init_from", "init_from_skip", "trainer.accelerator", "trainer.strategy",
                   "trainer.threads", "trainer.logger", "trainer.compile", "trainer.activation_checkpointing",
                   "trainer.deterministic", *RESUMABLE_KEYS)  # fmt: skip


# Recorded beside them: the values of RESUMABLE_KEYS the checkpoint was trained with, for a config.yaml whose
# resumable keys were edited by hand (resume_edits).
RESUMABLE_RECORD = "resumable"


def trained_settings(config: RunConfig) -> str:
    """The settings a run's steps are trained with, as checkpoints record them (JSON): every key of ``config``
    (``section.key``) but ``UNRECORDED_KEYS``; under ``RESUMABLE_RECORD``, those of ``RESUMABLE_KEYS``."""
    values = {}
    resumable = {}
    for section, value in plain_values(config.to_dict()).items():
        items = value.items() if isinstance(value, dict) else [(None, value)]
        for key, item in items:
            name = section if key is None else f"{section}.{key}"
            if name not in UNRECORDED_KEYS:
                values[name] = item
            elif name in RESUMABLE_KEYS:
                resumable[name] = item
    return json.dumps({**values, RESUMABLE_RECORD: resumable}, sort_keys=True, default=str)


def check_trained_settings(checkpoint: dict, config: RunConfig, path: Path, config_file: Path) -> None:
    """ConfigError naming the key when ``config`` (read from ``config_file``, the run's config.yaml) is not the config
    the checkpoint at ``path`` was trained with: config.yaml edited by hand, which ``resumed_config`` (the overrides'
    check) does not see, or another run's checkpoint put there. Checkpoints written before the record pass."""
    saved = checkpoint.get(SETTINGS_KEY)
    if not isinstance(saved, str):
        return
    try:
        then = parse_json(saved)
    except ValueError:
        raise ConfigError(f"{path}: its record of the run's settings is not JSON; the checkpoint is damaged") from None
    now = json.loads(trained_settings(config))
    for name in sorted((then.keys() | now.keys()) - {RESUMABLE_RECORD}):  # edited resumable keys: resume_edits
        if then.get(name) != now.get(name):
            raise ConfigError(f"{path} does not match {config_file}: {path.name} was trained with {name}="
                              f"{shown(then.get(name))}, {config_file.name} says {name}={shown(now.get(name))}; either "
                              f"{config_file.name} was edited since (a resume cannot change {name}, or the run would "
                              f"no longer be the one its checkpoints record: restore it) or {path.name} is another "
                              f"run's")  # fmt: skip


def resume_edits(checkpoint: dict, config: RunConfig) -> tuple[RunConfig, list[str]]:
    """(the config the checkpoint was trained with, overrides): resumable keys edited in config.yaml by hand are
    taken as the ``--resume`` overrides of them (``resumed_config``), so that a max_steps raised there keeps the
    decay the run's steps followed, as the override does (the decay stretched over the new length, and the learning
    rate jumped), and a finished run so extended is extended. ``config`` and no overrides when the checkpoint holds
    no record (written before it) or nothing was edited."""
    saved = checkpoint.get(SETTINGS_KEY)
    try:
        record = parse_json(saved).get(RESUMABLE_RECORD) if isinstance(saved, str) else None
    except (ValueError, AttributeError):
        record = None  # (check_trained_settings names the damage)
    if not isinstance(record, dict):
        return config, []
    now = json.loads(trained_settings(config))[RESUMABLE_RECORD]
    edited = sorted(name for name in RESUMABLE_KEYS if name in record and record[name] != now.get(name))
    if not edited:
        return config, []
    restored = [f"{name}={json.dumps(record[name])}" for name in edited]
    trained = resolve_run_config(apply_overrides(plain_values(config.to_dict()), restored))
    return trained, [f"{name}={json.dumps(now.get(name))}" for name in edited]


def resumed_config(config: RunConfig, overrides: list[str] | tuple[str, ...], done_steps: int) -> RunConfig:
    """``config`` with the ``--resume`` overrides applied: only ``RESUMABLE_KEYS`` may change; a larger max_steps
    keeps the old decay (``trainer.decay_steps`` set to the old max_steps), so the learning rate does not jump. A run
    that ended inside its warm-up had no decay to keep: its decay spans the new length (set to the old max_steps,
    the decay had no steps, and the rate fell from its peak to the floor in one step)."""
    if not overrides:
        return config
    values = apply_overrides(plain_values(config.to_dict()), list(overrides))
    changed = resolve_run_config(values)
    before, after = plain_values(config.to_dict()), plain_values(changed.to_dict())
    for section in before:
        keys = before[section].keys() | after[section].keys() if isinstance(before[section], dict) else [None]
        for key in keys:
            old, new = (before[section], after[section]) if key is None else (before[section].get(key),
                                                                               after[section].get(key))  # fmt: skip
            name = section if key is None else f"{section}.{key}"
            if old != new and name not in RESUMABLE_KEYS:
                allowed = ", ".join(RESUMABLE_KEYS)
                raise ConfigError(f"{name} cannot change when resuming (the run would no longer be the one its "
                                  f"checkpoints record); --resume may change {allowed}")  # fmt: skip
    trainer = changed.trainer
    if trainer.max_steps < done_steps:
        raise ConfigError(f"trainer.max_steps={trainer.max_steps} is below the {done_steps} steps the run has "
                          f"already done")  # fmt: skip
    if trainer.decay_steps != config.trainer.decay_steps:
        check_decay(trainer)
    if trainer.lr != config.trainer.lr:
        check_weight_decay(trainer)
    decaying = config.trainer.max_steps > config.trainer.warmup_steps
    if trainer.max_steps != config.trainer.max_steps and trainer.decay_steps is None and decaying:
        # longer or shorter, the run keeps the schedule its steps so far followed (and config.yaml records it)
        trainer = dataclasses.replace(trainer, decay_steps=config.trainer.max_steps)
    return dataclasses.replace(changed, trainer=trainer)


def resumable_checkpoint(path: Path) -> dict:
    """The header of the checkpoint a run resumes from (tensors as ``TensorInfo``), checked for the entries resuming
    reads; ConfigError naming the file (and the intact checkpoint to copy over it) otherwise."""
    try:
        return checked_header(path)
    except PermissionError:  # not a damaged file, which an earlier one replaces: one this user may not read
        raise
    except (ValueError, OSError) as error:
        raise damaged_checkpoint(path, error, f"copy that over {path.name} to resume from it") from None


def checked_header(path: Path) -> dict:
    """The header of the checkpoint at ``path`` (``read_checkpoint_skeleton``) if it holds the entries resuming
    reads; ValueError (or the reader's OSError) otherwise."""
    skeleton = read_checkpoint_skeleton(path)
    step, state = skeleton.get("global_step"), skeleton.get("state_dict")
    if type(step) is not int or step < 0 or not isinstance(state, dict) or not isinstance(skeleton.get("loops"), dict):
        raise ValueError("global_step, state_dict or loops missing or of the wrong type")
    if not all(isinstance(info, TensorInfo) for info in state.values()):
        raise ValueError("its state_dict holds values that are not tensors")
    return skeleton


def resume_point(last: Path) -> Path:
    """The checkpoint a run resumes from: ``last`` (its ``last.ckpt``), unless the newest step checkpoint beside it
    is of a later step of the same run: a kill or Ctrl-C while ``last.ckpt`` was being written after it (the stop's
    line names that step checkpoint), or ``last.ckpt`` deleted, which restarted the run from step 0. Both are written
    whole (atomically) from the same checkpoint. An unreadable ``last.ckpt``, or one of another run, is kept, so that
    resuming refuses it."""
    steps = step_checkpoints(last.parent) if last.parent.is_dir() else []
    if not steps:
        return last
    newest = steps[-1]
    if not last.is_file():
        return newest
    try:
        ours, theirs = (read_checkpoint_skeleton(path) for path in (last, newest))
    except (ValueError, OSError):
        return last
    step, newest_step = ours.get("global_step"), theirs.get("global_step")
    same_run = ours.get(CHECKPOINT_KEY) == theirs.get(CHECKPOINT_KEY)  # not a last.ckpt of another run put there
    return newest if same_run and type(step) is int and type(newest_step) is int and newest_step > step else last


def intact_step_checkpoint(folder: Path, besides: Path) -> tuple[Path, int] | None:
    """The newest step checkpoint in ``folder`` other than ``besides`` whose header reads whole (as resuming checks
    it: ``checked_header``), and its step: where a run whose ``besides`` is damaged can still be read from; None
    when there is none."""
    for path in reversed(step_checkpoints(folder)):  # none in a folder that is not there
        if path.resolve() == besides.resolve():
            continue
        try:
            return path, checked_header(path)["global_step"]
        except (ValueError, OSError):
            continue
    return None


def damaged_checkpoint(path: Path, error: Exception, advice: str) -> ConfigError:
    """The refusal of the checkpoint at ``path``, which cannot be read (``error``), as resuming, init_from and eval
    word it: naming the newest intact step checkpoint beside it (``intact_step_checkpoint``) and, in ``advice``, what
    to do with that one."""
    intact = intact_step_checkpoint(path.parent, path)
    instead = f"; the run's newest intact checkpoint is {intact[0]} (step {intact[1]}): {advice}" if intact else ""
    return ConfigError(f"{path}: cannot read it ({error}){instead}")


def check_tensors_match(model: torch.nn.Module, stored: dict, path: Path, prefix: str = "",
                        partial: bool = False) -> None:  # fmt: skip
    """ConfigError naming ``path`` and the first mismatching names unless ``stored`` (name -> tensor or TensorInfo,
    names under ``prefix``) has exactly the model's tensors, with their shapes and dtypes, but for ALiBi's slopes,
    which older weights lack (``alibi_slopes_of``). ``partial``: names may be missing (safetensors leaves out
    the second of two tied weights)."""
    expected = {prefix + name: tensor for name, tensor in model.state_dict().items()}
    found = {name: TensorInfo(value.dtype, tuple(value.shape)) if isinstance(value, torch.Tensor) else value
             for name, value in stored.items() if name.startswith(prefix)}  # fmt: skip
    problems = []
    older = {prefix + name for name in alibi_slopes_of(model)}
    missing = [] if partial else sorted(expected.keys() - found.keys() - older)
    unexpected = sorted(found.keys() - expected.keys())
    if missing:
        problems.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    if unexpected:
        problems.append(f"unexpected {', '.join(unexpected[:3])}{' ...' if len(unexpected) > 3 else ''}")
    for name in sorted(expected.keys() & found.keys()):
        want, have = expected[name], found[name]
        if tuple(want.shape) != tuple(have.shape):
            problems.append(f"{name} has shape {list(have.shape)}, the model's is {list(want.shape)}")
        elif want.dtype != have.dtype:
            problems.append(f"{name} is stored as {have.dtype}, the model's is {want.dtype}")
        if len(problems) >= 4:
            break
    if problems:
        raise ConfigError(f"{path} does not match the run's model: {'; '.join(problems)}")


__all__ = ["RESUMABLE_KEYS", "check_tensors_match", "check_trained_settings", "checked_header",
           "damaged_checkpoint", "intact_step_checkpoint", "resumable_checkpoint", "resume_point", "resume_edits",
           "resumed_config", "trained_settings"]  # fmt: skip
