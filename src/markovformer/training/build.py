"""Build a run's data, task and model from its RunConfig."""

from __future__ import annotations

import dataclasses
import glob
import inspect
from pathlib import Path
from typing import Any

import torch

from markovformer.advice import suggest
from markovformer.data.bundle import DataBundle
from markovformer.data.readers.text_stream import resolve_text_paths
from markovformer.data.readers.tokenizer import TOKENIZER_FILE, load_tokenizer
from markovformer.data.recipes.registry import find_prepared_file
from markovformer.data.sources import DATA_SOURCES, source_tasks
from markovformer.models.registry import MODEL_FAMILIES, head_class
from markovformer.training.environment import check_accelerator, check_cores, check_nodes, check_precision
from markovformer.training.run_config import FILE_OPTIONS, RunConfig, build_dataclass, other_section_hint
from markovformer.training.tasks import TASKS, Task, build_task
from markovformer.training.trainer_config import ConfigError, check_logger, check_warmup, check_weight_decay

# The precisions under which Lightning trains every weight in another dtype than float32 (its precision plugin casts
# the module): a run's checkpoints and model/ hold that dtype, so its model is built in it.
# The dtype of a run's weights under each trainer.precision (mixed precision keeps float32 weights): whatever torch's
# default dtype in the process that builds the model.
WEIGHT_DTYPES = {"32-true": torch.float32, "64-true": torch.float64, "bf16-true": torch.bfloat16,
                 "bf16-mixed": torch.float32, "16-mixed": torch.float32}  # fmt: skip


def build_data(config: RunConfig, run_dir: str | Path | None = None) -> DataBundle:
    """The run's data. ``run_dir``: the trained (or resumed) run it belongs to, or the run or saved model a
    fine-tuning run starts from; when it holds a tokenizer (``saved_tokenizer``), sources that fit one encode with
    the saved one instead (the data's text may have changed since training, and the weights are for its ids)."""
    tokenizer = None
    saved = None if run_dir is None else saved_tokenizer(run_dir)
    if saved is not None:
        tokenizer = load_tokenizer(saved)
    source = data_source(config)
    if tokenizer is not None and "tokenizer" in inspect.signature(source.build).parameters:
        bundle = source.build(seed=config.trainer.seed, tokenizer=tokenizer)
    else:
        bundle = source.build(seed=config.trainer.seed)
    return dataclasses.replace(bundle, files=list(dict.fromkeys([*data_files(config.data), *bundle.files])))


def data_source(config: RunConfig) -> Any:
    """The run's data source, its options checked (ConfigError naming a bad one) but nothing read or built yet."""
    values = dict(config.data)
    name = values.pop("source")
    if name not in DATA_SOURCES:
        raise ConfigError(f"data.source={name!r} is not a data source{suggest(name, DATA_SOURCES)}; "
                          f"see `markovformer data list`")  # fmt: skip
    if config.task not in source_tasks(name):
        raise ConfigError(f"data.source={name!r} feeds {source_tasks(name)}, not task={config.task!r}")
    source_class = DATA_SOURCES[name]
    if "task" in {field.name for field in dataclasses.fields(source_class)}:  # a source that can feed several tasks
        if values.setdefault("task", config.task) != config.task:
            raise ConfigError(f"data.task={values['task']!r} disagrees with task={config.task!r}")
    return build_dataclass(source_class, values, "data", lambda key: other_section_hint(key, "data", *run(config)))


def run(config: RunConfig) -> tuple[str, str, str]:
    """The task, model family and data source of ``config``: what ``other_section_hint`` reads."""
    return config.task, config.model_type, config.data.get("source")


def data_files(data: dict) -> list[Path]:
    """The files the ``FILE_OPTIONS`` of a data section name, resolved as the sources resolve them (``data/NAME``
    in the data directory; a directory's or a glob's files, hidden ones skipped), each once, in order. Files named
    inside a file (an audio manifest's recordings) are not among them: the source puts those in its bundle's
    ``files``, and ``build_data`` adds them."""
    files = []
    for key in FILE_OPTIONS:
        value = data.get(key)
        for entry in (value if isinstance(value, (list, tuple)) else [value]) if value else []:
            entry = str(entry)
            if Path(entry).is_dir() or glob.has_magic(entry):
                files += resolve_text_paths(entry)
            else:
                files.append(find_prepared_file(entry, f"data.{key}"))
    return list(dict.fromkeys(file.resolve() for file in files))


def check_run_outside_data(run_dir: Path, data: dict) -> None:
    """ConfigError when a new run's directory lies inside a folder a data option names: every file of that folder is
    data, so the run's own files (checkpoints, config.yaml) would be read as data when its eval, inspect or
    ``--resume`` rebuilds it (a run in data.path=docs trained, then every one of them failed on
    'docs/run/checkpoints/last.ckpt: byte 0xd0 at offset 0 is not valid UTF-8')."""
    for key in FILE_OPTIONS:
        value = data.get(key)
        for entry in (value if isinstance(value, (list, tuple)) else [value]) if value else []:
            folder = Path(str(entry))
            if folder.is_dir() and run_dir.resolve().is_relative_to(folder.resolve()):
                raise ConfigError(f"output_dir={str(run_dir)!r} is inside data.{key}={str(entry)!r}, a folder whose "
                                  f"every file is read as data: the run's own files would be read as data when it "
                                  f"is evaluated or resumed; choose an output_dir outside it")  # fmt: skip


def saved_tokenizer(directory: str | Path) -> Path | None:
    """The folder of the tokenizer a run directory (its tokenizer/) or a saved model directory (its tokenizer.json,
    as a run's model/ holds it) keeps; None when it keeps none."""
    directory = Path(directory)
    if (directory / "tokenizer").is_dir():
        return directory / "tokenizer"
    return directory if (directory / TOKENIZER_FILE).is_file() else None


def build_run_task(config: RunConfig, bundle: DataBundle) -> Task:
    """The run's task object, its data checked against it (e.g. overlapping windows for a mixture of orders)."""
    task = build_task(config.task, config.trainer, bundle.info, bundle.tokenizer, config.task_options)
    task.check_data(bundle)
    return task


def check_new_run(config: RunConfig) -> None:
    """Refuse a new run's config before anything is written: its trainer against this machine (accelerator,
    precision, logger, nodes, cores) and its schedule, the task's own checks, an output_dir inside a data folder, then
    its model and data sections (``check_model_before_data``, ``data_source``). ``train`` starts with it; the
    command line calls it before it imports the runner, so that none of these waits for Lightning's import."""
    tc = config.trainer
    check_accelerator(tc.accelerator)
    check_precision(tc.precision, tc.accelerator)
    check_warmup(tc)
    check_weight_decay(tc)
    TASKS[config.task].check_new_run(config.task_options, tc)
    check_logger(tc.logger)
    check_nodes(tc.num_nodes)
    check_cores(tc.num_workers, tc.threads)
    check_run_outside_data(Path(config.output_dir), config.data)
    check_model_before_data(config)
    data_source(config)


def check_model_before_data(config: RunConfig) -> None:
    """Refuse a model section that no data could make valid before the data is built (fitting a tokenizer on a large
    corpus takes minutes, and a typo in model.attention was reported after it): the model's config is built with a
    stand-in vocabulary where the data would give one. An error naming a size the data fills (the vocabulary, the
    input width, the labels, the special ids) is left to ``build_model``, which knows them."""
    config_class, values = _model_values(config)
    fields = {field.name for field in dataclasses.fields(config_class)}
    if "vocab_size" in fields and values.get("vocab_size") is None and values.get("input_dim") is None:
        values["vocab_size"] = 256
    try:
        build_dataclass(config_class, values, "model", lambda key: other_section_hint(key, "model", *run(config)))
    except ConfigError as error:
        # an unknown key is wrong whatever the data gives (its hint may list every key, vocab_size among them)
        unknown = str(error).startswith("unknown key ")
        if unknown or not any(key in str(error) for key in TASKS[config.task].sizes_from_data):
            raise


def _model_values(config: RunConfig) -> tuple[type, dict]:
    """The model family's config class and the run's model section in its current keys."""
    config_class = MODEL_FAMILIES[config.model_type].config_class
    try:
        return config_class, config_class.upgrade_keys(dict(config.model))  # runs written before a field was renamed
    except ValueError as error:
        raise ConfigError(f"model: {error}") from error


def build_model(config: RunConfig, info: dict) -> torch.nn.Module:
    """The task's head, with input and label sizes taken from the data (a conflicting explicit value is an error), in
    the dtype its run trains its weights in (``WEIGHT_DTYPES``)."""
    head = head_class(config.model_type, config.task)
    config_class, values = _model_values(config)
    fields = {field.name for field in dataclasses.fields(config_class)}
    for key in TASKS[config.task].sizes_from_data:
        if key not in info or key not in fields:
            continue
        if values.get(key) not in (None, info[key]):
            raise ConfigError(f"model.{key}={values[key]!r} disagrees with the data, which has {key}={info[key]}")
        values[key] = info[key]
    model_config = build_dataclass(config_class, values, "model",
                                   lambda key: other_section_hint(key, "model", *run(config)))  # fmt: skip
    try:
        model = head(model_config)
    except ValueError as error:
        raise ConfigError(f"model: {error}") from error
    except (RuntimeError, MemoryError) as error:  # torch reports a failed allocation as a RuntimeError
        if not isinstance(error, MemoryError) and "allocate" not in str(error):
            raise
        raise ConfigError(f"model: not enough memory to build it ({str(error).splitlines()[0][:160]}); lower "
                          f"model.d_model, model.n_layers or the vocabulary") from None  # fmt: skip
    if config.trainer.activation_checkpointing:
        if not hasattr(getattr(model, "model", None), "gradient_checkpointing"):
            raise ConfigError(f"trainer.activation_checkpointing: model_type={config.model_type!r} does not support it")
        model.model.gradient_checkpointing = True
    return model.to(WEIGHT_DTYPES[config.trainer.precision])
