"""A run directory: the files written when a run starts, the files that finish it, and loading a trained run back
(final model or checkpoint).

A run directory holds::

    config.yaml        the resolved config (what `--resume` and `eval` rebuild from); written after the three below
    environment.json   versions, machine, command line, git commit, the run directory's format; under "resumes",
                       the same of each --resume and the step it continued from; for a fine-tuning run, under
                       "init_from", the weights it started from (``init_from.initialise_from``'s record)
    data.json          the data's info and the record of its splits (what went where)
    tokenizer/         when the data has one
    checkpoints/       step-NNNNNN.ckpt and last.ckpt (safetensors, atomic; model + optimizer + schedule + loops)
    logs/metrics.csv   CSV log; tensorboard/ the same for TensorBoard
    model/             the final model (save_pretrained format; read also as transformers shards it) and its
                       fingerprint.json; with a tokenizer, that tokenizer in the Hugging Face format too
                       (tokenizer.json, tokenizer_config.json)
    metrics.json       final validation metrics (and the data's reference values), strict JSON (null for nan/inf)
    finished.json      written last: the run is finished, and model/ and metrics.json are those of its last step

Finishing is one transaction: ``finished.json`` is removed before anything else changes (an extension by
``--resume`` removes it before it trains), then model/ and metrics.json are written, then ``finished.json``. A kill
at any moment leaves a finished run whose files agree, or an unfinished one that ``--resume`` completes; readers use
model/ only when ``finished.json`` is there, else the last checkpoint.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import torch

from markovformer.advice import said_as
from markovformer.atomic import atomic_write_text, remove_stale_temporaries
from markovformer.data.bundle import DataBundle
from markovformer.data.readers.tokenizer import TOKENIZER_FILE, load_tokenizer, save_hf_format
from markovformer.layers.decay_attention import own_weights_with_slopes
from markovformer.models.saved_weights import (
    WEIGHTS_INDEX_NAME,
    WEIGHTS_NAME,
    read_weights_folder,
    tied_names,
    weights_file,
)
from markovformer.strict_json import parse_json, strict_dumps
from markovformer.training.build import build_model
from markovformer.training.checkpoint import load_checkpoint_file, os_error_of_safetensors
from markovformer.training.data_record import DATA_RECORD, data_record, read_data_info
from markovformer.training.environment import environment_record
from markovformer.training.fingerprint import (
    check_checkpoint_fingerprint,
    check_model_fingerprint,
    run_fingerprint,
    write_model_fingerprint,
)
from markovformer.training.isolation import built_on_the_cpu
from markovformer.training.run_checks import check_tensors_match, damaged_checkpoint, resume_point
from markovformer.training.run_config import (
    RunConfig,
    check_each_key_once,
    load_yaml,
    plain_values,
    resolve_run_config,
    write_yaml,
)
from markovformer.training.run_lock import LOCK_FILE
from markovformer.training.trainer_config import ConfigError

RESOLVED_CONFIG = "config.yaml"
LAST_CHECKPOINT = "last.ckpt"
FINISHED = "finished.json"
INIT_FROM_RECORD = "init_from"  # environment.json's record of the weights a fine-tuning run started from
STARTED_FROM_KEYS = {"source", "resolved", "file", "step", "read", "tensors_sha256", "tensors_taken", "tensors_fresh",
                     "init_from_skip"}  # fmt: skip
# 2: finished.json marks a finished run and model/fingerprint.json is required. Runs without the field (written
# before it) count as finished when they hold metrics.json, and their model/ may lack a fingerprint.
RUN_FORMAT = 2
# The folders a killed writer may leave ``.NAME.*.tmp`` files in.
WRITTEN_FOLDERS = (".", "model", "logs", "checkpoints", "tokenizer")


def write_json(path: Path, values: dict) -> None:
    text = strict_dumps(values, indent=2, default=str) + "\n"
    atomic_write_text(path, text)


def write_run_files(run_dir: Path, config: RunConfig, bundle: DataBundle, started_from: dict | None = None) -> None:
    """The files of a new run, each written afresh (a start killed before config.yaml may have left another
    config's data.json and tokenizer/); config.yaml last, so a directory with it holds the others too (or
    ``--resume`` writes the missing ones again: ``write_start_files``). ``started_from``: what a fine-tuning run took
    from init_from, for environment.json."""
    write_start_files(run_dir, bundle, keep_existing=False, started_from=started_from)
    write_resolved_config(run_dir, config)


def write_start_files(run_dir: Path, bundle: DataBundle, keep_existing: bool, started_from: dict | None = None) -> None:
    """environment.json (with ``started_from`` under "init_from"), data.json and tokenizer/; with ``keep_existing`` (a
    resume) only those missing (a run killed as it started lacks some; the data is rebuilt from the same config and
    seed, so they come out the same)."""
    replace = not keep_existing
    if replace or not (run_dir / "environment.json").is_file():
        started = {INIT_FROM_RECORD: started_from} if started_from is not None else {}
        write_json(run_dir / "environment.json", {**environment_record(), "run_format": RUN_FORMAT, **started})
    if replace or not (run_dir / DATA_RECORD).is_file():
        write_json(run_dir / DATA_RECORD, data_record(bundle))
    if bundle.tokenizer is not None and (replace or not (run_dir / "tokenizer" / TOKENIZER_FILE).is_file()):
        bundle.tokenizer.save(run_dir / "tokenizer")  # one file, written atomically
    elif bundle.tokenizer is None and replace and (run_dir / "tokenizer" / TOKENIZER_FILE).is_file():
        (run_dir / "tokenizer" / TOKENIZER_FILE).unlink()  # another config's, which eval and generate would read
        if not any((run_dir / "tokenizer").iterdir()):
            (run_dir / "tokenizer").rmdir()


def record_resume(run_dir: Path, step: int, started_from: dict | None = None) -> None:
    """Add this process's environment (versions, machine, command line) and the ``step`` it continues from to
    environment.json's ``resumes``: the record written at the start described that process only, so a run extended
    or resumed with other code, versions or overrides did not say so. ``started_from``: what a fine-tuning run resumed
    before its first checkpoint took from its source again, which replaces the killed start's "init_from" record."""
    path = run_dir / "environment.json"
    try:
        record = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # damaged: left as it is (run_format reads it as this version's)
    if not isinstance(record, dict):
        return
    resumes = record.get("resumes") if isinstance(record.get("resumes"), list) else []
    started = {INIT_FROM_RECORD: started_from} if started_from is not None else {}
    write_json(path, {**record, **started, "resumes": [*resumes, {**environment_record(), "from_step": step}]})


def read_started_from(run_dir: Path) -> dict | None:
    """environment.json's record of the weights a fine-tuning run started from (``INIT_FROM_RECORD``); None for a
    run that started fresh, one from before the record, or a damaged record (not an object with every key that
    ``init_from.initialise_from`` writes)."""
    try:
        record = parse_json((run_dir / "environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    started = record.get(INIT_FROM_RECORD) if isinstance(record, dict) else None
    whole = isinstance(started, dict) and STARTED_FROM_KEYS <= started.keys()
    return started if whole else None


def remove_stale_files(run_dir: Path) -> None:
    """The temporary files that killed writers left. Only the run's writer calls it, under the lock."""
    for name in WRITTEN_FOLDERS:
        if (run_dir / name).is_dir():
            remove_stale_temporaries(run_dir / name)


def run_format(run_dir: Path) -> int:
    try:
        return int(parse_json((run_dir / "environment.json").read_text(encoding="utf-8")).get("run_format", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return RUN_FORMAT  # a run of this version killed before environment.json: treat it as one


def read_final_metrics(run_dir: Path) -> dict:
    """The run's metrics.json (its final metrics); ConfigError naming the file when it is not a JSON object."""
    path = run_dir / "metrics.json"
    try:
        results = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ConfigError(f"{path}: not a run's metrics record ({type(error).__name__}: {error})") from None
    if not isinstance(results, dict):
        raise ConfigError(f"{path}: not a run's metrics record (a JSON {type(results).__name__}, not an object)")
    return results


def finished_steps(run_dir: Path) -> int | None:
    """The step count of a finished run (None: not finished): its finished.json's, or for a run written before it
    existed, metrics.json's. The final files themselves are checked where they are read (the model's fingerprint)."""
    if run_format(run_dir) < RUN_FORMAT:
        if not (run_dir / "metrics.json").is_file():
            return None
        return read_final_metrics(run_dir).get("steps", 0)
    marker = run_dir / FINISHED
    try:
        steps = parse_json(marker.read_text(encoding="utf-8"))["steps"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{marker}: not a record of a finished run ({type(error).__name__}: {error}); delete it "
                          f"and write the final files again with {resume_advice(run_dir)}") from None  # fmt: skip
    if type(steps) is not int:
        raise ConfigError(f"{marker}: steps={steps!r} is not a step count; delete it and write the final files again "
                          f"with {resume_advice(run_dir)}")  # fmt: skip
    return steps


def mark_unfinished(run_dir: Path) -> None:
    """The first write of anything that changes a finished run: it is not finished until finished.json is back."""
    (run_dir / FINISHED).unlink(missing_ok=True)


def write_final_files(run_dir: Path, model: torch.nn.Module, fingerprint: str, results: dict) -> None:
    """model/ (with its fingerprint) and metrics.json, then finished.json naming them: the run's last writes. A
    failed write (a full disk) leaves the run unfinished and resumable, and says so."""
    mark_unfinished(run_dir)
    try:
        try:
            model.save_pretrained(run_dir / "model")
        except Exception as error:  # safetensors reports a failed write (disk full, ...) as its own error type
            raise os_error_of_safetensors(error, run_dir / "model") from error
        write_hf_tokenizer(run_dir)
        write_model_fingerprint(run_dir / "model", fingerprint)
        write_json(run_dir / "metrics.json", results)
        write_json(run_dir / FINISHED, {"steps": results["steps"]})
    except OSError as error:
        raise continue_with_resume(error, run_dir, "write its final files (the run is not finished)") from error


def continue_with_resume(error: OSError, run_dir: Path, what: str = "continue it") -> OSError:
    """``error`` (a write of the run that failed: a full disk, a folder made read-only) saying after "; " how to go on
    once the cause is gone: ``--resume`` does ``what``, from checkpoints that are whole (atomic writes). Only a run
    with a config.yaml can be resumed; before it, the command is to be run again, which the CLI's line says."""
    return OSError(error.errno, f"{error.strerror}; {what} with {resume_advice(run_dir, command=True)}", error.filename)


def resume_advice(run_dir: str | Path, *overrides: str, command: bool = False) -> str:
    """How to resume ``run_dir`` (changing ``overrides``, ``KEY=VALUE``) in its caller's words (``advice.said_as``):
    ``--resume RUN KEY=VALUE`` on the command line (with ``command``, the whole ``markovformer train --resume ...``),
    ``resume('RUN', ['KEY=VALUE'])`` from Python."""
    flags = " ".join((f"--resume {run_dir}", *overrides))
    arguments = ", ".join((repr(str(run_dir)), *([repr(list(overrides))] if overrides else ())))
    return said_as(f"markovformer train {flags}" if command else flags, f"resume({arguments})")


def write_hf_tokenizer(run_dir: Path) -> None:
    """The run's tokenizer/ also in model/, in the Hugging Face format (its special ids in model/config.json), so
    that ``transformers``' ``AutoTokenizer`` and ``pipeline("text-generation", model=run_dir / "model")`` read the
    directory as it is. Needs Hugging Face ``tokenizers`` (not ``transformers``); without it, one line says so."""
    saved = run_dir / "tokenizer"
    if not (saved / TOKENIZER_FILE).is_file():
        return
    try:
        save_hf_format(load_tokenizer(saved), run_dir / "model")
    except ImportError as error:
        print(f"model/ holds no Hugging Face tokenizer files: {error}", flush=True)


def write_resolved_config(run_dir: Path, config: RunConfig) -> None:
    """Write ``config`` as the run's config.yaml, ``init_from`` as an absolute path: a resume from another folder
    that has no checkpoint yet starts from it again, and a relative one would name that folder's run."""
    values = config.to_dict()
    if values["init_from"] is not None:
        values["init_from"] = os.path.abspath(values["init_from"])
    text = write_yaml(plain_values(values))
    atomic_write_text(run_dir / RESOLVED_CONFIG, text)


class LoadedRun(NamedTuple):
    """A trained run as ``load_trained_run`` read it. ``weights``: which weights ``model`` holds, from the very
    read that loaded them (a run still training replaces last.ckpt and may finish meanwhile): ``source`` ("model"
    or the checkpoint's path inside the run directory), ``step``, ``finished`` (the finished run's model/) and
    ``run_finished`` (whether the run was finished when it was read)."""

    config: RunConfig
    model: torch.nn.Module
    run_dir: Path
    weights: dict


def weights_described(weights: dict) -> str:
    """Which weights of a run were read (``LoadedRun.weights``), as eval, init_from and generate name them: "final
    model, step 40", or "checkpoints/last.ckpt at step 30: the run is unfinished"."""
    if weights["finished"]:
        return f"final model, step {weights['step']}"
    unfinished = "" if weights["run_finished"] else ": the run is unfinished"
    return f"{weights['source']} at step {weights['step']}{unfinished}"


def load_run(target: str | Path) -> tuple[RunConfig, torch.nn.Module, Path]:
    """A trained run's config, model and directory: ``load_trained_run`` without the record of its weights."""
    loaded = load_trained_run(target)
    return loaded.config, loaded.model, loaded.run_dir


def not_a_run_directory(directory: Path) -> ConfigError:
    """The error for a directory without config.yaml; inside a run (its model/ or checkpoints/), it names the run; a
    run's start stopped before config.yaml (its lock or environment.json are there) is to be started again."""
    run = directory.parent
    inside = f"; it is inside the run {run}: give that" if (run / RESOLVED_CONFIG).is_file() else ""
    if not inside and ((directory / LOCK_FILE).exists() or (directory / "environment.json").is_file()):
        inside = (f": a run started here stopped before it wrote its config, so there is nothing to resume; start "
                  f"it again with markovformer train CONFIG output_dir={directory}")  # fmt: skip
    return ConfigError(f"{directory}: not a run directory (no {RESOLVED_CONFIG}){inside}")


def config_to_resume(run_dir: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The config of the run in ``run_dir`` (its config.yaml; output_dir the directory as given, ``~`` expanded),
    once ``overrides`` are known to set each key once (before the run's own edits are put ahead of them); ConfigError
    (``not_a_run_directory``) when it holds no run. ``resume`` starts with it, and the command line calls it before
    it imports the runner: a mistyped folder need not wait for Lightning's import."""
    check_each_key_once(list(overrides))
    run_dir = Path(run_dir).expanduser()  # as RunConfig's output_dir
    if not (run_dir / RESOLVED_CONFIG).is_file():
        raise not_a_run_directory(run_dir)
    return dataclasses.replace(resolve_run_config(load_yaml(run_dir / RESOLVED_CONFIG)), output_dir=str(run_dir))


def run_of_checkpoint(checkpoint: Path) -> Path:
    """The run directory of a checkpoint file (RUN/checkpoints/NAME.ckpt): two folders up from the file, also when
    it is named from inside checkpoints/ ("NAME.ckpt", whose ``parent.parent`` is "." again)."""
    return Path(os.path.normpath(checkpoint.parent / ".."))


@built_on_the_cpu
def load_trained_run(target: str | Path) -> LoadedRun:
    """A trained run's config and model, in eval mode (as ``from_pretrained`` loads a model), from a run directory
    (its final model/, else its newest checkpoint, as ``resume_point`` finds it) or from one checkpoint file inside
    a run's checkpoints/ folder, with which weights were loaded (``LoadedRun``). The weights must belong to the run
    (their fingerprint, ``training.fingerprint``) and match the model's tensor names, shapes and dtypes; takes no
    lock (reads only)."""
    target = Path(target).expanduser()  # from Python, as RunConfig's output_dir: '~/runs/a' is the user's
    if not target.exists():
        raise ConfigError(f"{target}: no such run directory or checkpoint")
    if target.is_file() and target.suffix != ".ckpt":  # a run's model.safetensors or config.yaml, say
        run = next((folder for folder in (target.parent, run_of_checkpoint(target))
                    if (folder / RESOLVED_CONFIG).is_file()), None)  # fmt: skip
        inside = f"; it is a file of the run {run}: give that" if run is not None else ""
        raise ConfigError(f"{target}: not a run directory or checkpoint (a checkpoints/*.ckpt file){inside}")
    run_dir = target if target.is_dir() else run_of_checkpoint(target)
    if not (run_dir / RESOLVED_CONFIG).is_file():
        if target.is_dir():
            raise not_a_run_directory(run_dir)
        # a checkpoint is read with its run: the config.yaml two folders up
        raise ConfigError(f"{target}: not a checkpoint of a run directory (no {run_dir / RESOLVED_CONFIG})")
    config = resolve_run_config(load_yaml(run_dir / RESOLVED_CONFIG))
    data_info = read_data_info(run_dir)
    fingerprint = run_fingerprint(config, run_dir)
    finished = finished_steps(run_dir)
    if target.is_dir() and (run_dir / "model").is_dir() and finished is not None:
        model = load_final_model(config, data_info, run_dir / "model", fingerprint, run_format(run_dir) >= RUN_FORMAT)
        weights = {"source": "model", "step": finished, "finished": True, "run_finished": True}
        return LoadedRun(config, check_finite(model, run_dir / "model"), run_dir, weights)
    # the newest whole checkpoint, as --resume takes it (a stop while last.ckpt was written, or last.ckpt deleted)
    checkpoint = target if target.is_file() else resume_point(run_dir / "checkpoints" / LAST_CHECKPOINT)
    if not checkpoint.is_file():
        raise ConfigError(f"{run_dir}: holds neither a final model/ nor a checkpoint in checkpoints/")
    try:
        loaded = load_checkpoint_file(checkpoint)
    except PermissionError:  # not a damaged file: the command's line names it as one this user may not read
        raise
    except (ValueError, OSError) as error:
        raise damaged_checkpoint(checkpoint, error, "give that instead") from None
    check_checkpoint_fingerprint(loaded, fingerprint, checkpoint)
    state, step = loaded.get("state_dict"), loaded.get("global_step")
    if not isinstance(state, dict) or type(step) is not int:
        raise ConfigError(f"{checkpoint}: not a training checkpoint (no state_dict or global_step)")
    model = build_model(config, data_info)
    prefix = "model."
    check_tensors_match(model, state, checkpoint, prefix=prefix)
    model.load_state_dict(own_weights_with_slopes(model, {k[len(prefix) :]: v for k, v in state.items()
                                                          if k.startswith(prefix)}))  # fmt: skip
    weights = {"source": Path(os.path.relpath(checkpoint, run_dir)).as_posix(), "step": step, "finished": False,
               "run_finished": finished is not None}  # fmt: skip
    return LoadedRun(config, check_finite(model.eval(), checkpoint), run_dir, weights)


def check_finite(model: torch.nn.Module, source: Path) -> torch.nn.Module:
    """``model``, unless a weight is nan or inf (a diverged run): then a ConfigError naming the first such tensor."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise ConfigError(f"{source} holds non-finite weights ({name} has nan or inf values): the run diverged; "
                              f"resume it from an earlier checkpoint with a lower trainer.lr")  # fmt: skip
    return model


def load_final_model(config: RunConfig, data_info: dict, model_dir: Path, fingerprint: str,
                     fingerprint_required: bool = True) -> torch.nn.Module:  # fmt: skip
    """The run's saved model/ (its weights whole or in transformers' shards): its fingerprint checked (its
    config.json is the run's), then its tensors' names, shapes and dtypes, then loaded into the model built to check
    them, as ``from_pretrained`` loads."""
    weights = weights_file(model_dir)
    if weights is None:
        raise ConfigError(f"{model_dir}: no {WEIGHTS_NAME} here (nor {WEIGHTS_INDEX_NAME} and its shards)")
    model = build_model(config, data_info)
    read = functools.cache(lambda: read_weights_folder(model_dir))  # once: the shards' check, the tensors', the load
    check_model_fingerprint(model_dir, fingerprint, tied_names(model), fingerprint_required, read)
    try:
        stored = read()
    except ValueError as error:  # a damaged file or index, named
        raise ConfigError(str(error)) from None
    except OSError as error:
        raise ConfigError(f"{weights}: not a readable safetensors file ({type(error).__name__}: {error})") from None
    check_tensors_match(model, stored, weights, partial=True)
    try:
        return model.load_saved(stored, weights)
    except Exception as error:  # safetensors' own error types too, e.g. for a file replaced while it was read
        raise ConfigError(f"{model_dir}: cannot load it ({type(error).__name__}: {error})") from None


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
