"""Run configuration: a YAML file plus dotted ``key=value`` overrides, validated with errors that name the key.

A run config has four sections and two scalars::

    task: causal_lm            # causal_lm | sequence_classification | token_classification | ctc | translation | vmt
    output_dir: runs/example
    model:   {...}             # the model config's fields (input sizes are filled in from the data)
    data:    {source: ..., ...}  # a data source from markovformer.data.sources and its options
    trainer: {...}             # the engine's options: training.trainer_config.TrainerConfig
    task_options: {...}        # the task's own options: its Options dataclass (training.tasks), e.g. vmt's carry

Values are checked against the dataclass field types; an unknown key gets a "did you mean" suggestion.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import typing
from pathlib import Path
from typing import Any

from markovformer.advice import said_as, suggest
from markovformer.training.tasks import TASKS
from markovformer.training.trainer_config import ConfigError, TrainerConfig, coerce, shown

# The data options that name the files a source reads (a file; a directory or a glob where the source takes one; or
# a list of them): whatever the source, a run records their contents (data.json) and checks them on resume and eval.
FILE_OPTIONS = ("path", "labels", "reference", "target_path", "data_files")


@dataclasses.dataclass
class RunConfig:
    task: str
    model: dict[str, Any]
    data: dict[str, Any]
    trainer: TrainerConfig  # from Python also a mapping of its options
    output_dir: str = "runs/run"
    model_type: str = "markovian_transformer"
    # Fine-tuning (training.init_from): start from the weights of a run, a run's checkpoint file or a saved model
    # directory; the tensors init_from_skip names (head, embeddings or name prefixes) start fresh instead.
    init_from: str | None = None
    init_from_skip: list[str] = dataclasses.field(default_factory=list)
    # The task's own options: an instance of ``TASKS[task].Options`` (a mapping is checked into one; None: defaults).
    task_options: Any = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ConfigError(f"task={shown(self.task)} must be one of {tuple(TASKS)}{suggest(self.task, TASKS)}")
        options = TASKS[self.task].Options
        if self.task_options is None:
            self.task_options = options()
        elif isinstance(self.task_options, dict):
            self.task_options = task_options(self.task, self.task_options, self.model_type, self.data.get("source"))
        elif not isinstance(self.task_options, options):
            raise ConfigError(f"task_options: task {self.task} takes {options.__name__}, not "
                              f"{type(self.task_options).__name__}")  # fmt: skip
        if isinstance(self.trainer, dict):  # as task_options: from Python, a mapping of its options
            self.trainer = build_dataclass(TrainerConfig, self.trainer, "trainer")
        elif not isinstance(self.trainer, TrainerConfig):
            raise ConfigError(f"trainer: expected a TrainerConfig or a mapping of its options, not "
                              f"{type(self.trainer).__name__}")  # fmt: skip
        self.output_dir, self.init_from = path_text(self.output_dir), path_text(self.init_from)
        coerce(self.output_dir, str, "output_dir")
        self.init_from = coerce(self.init_from, str | None, "init_from")
        if not self.output_dir.strip():  # an empty path is the working directory: the run would land there
            raise ConfigError(f"output_dir={shown(self.output_dir)} is empty; name the run directory")
        # Lightning expands ~ in the paths of checkpoints/ and tensorboard/: the run's other files go there too
        self.output_dir = os.path.expanduser(self.output_dir)
        # as a shell would: a data file or init_from given as ~/... names the home folder's (it was 'no such file')
        self.data = {key: _home_expanded(value) if key in FILE_OPTIONS else value for key, value in self.data.items()}
        self.init_from = _home_expanded(self.init_from)
        if self.init_from is not None and _own_weights(Path(self.init_from), Path(self.output_dir)):
            raise ConfigError(f"init_from={self.init_from!r} is inside this run's own output_dir={self.output_dir!r}: "
                              f"a run cannot start from itself; to train a run longer, extend it with "
                              f"{said_as(f'--resume {self.output_dir}', f'resume({self.output_dir!r})')}")  # fmt: skip
        if self.init_from_skip and self.init_from is None:
            raise ConfigError("init_from_skip is set but init_from is not: name the run or model directory to start "
                              "from")  # fmt: skip
        if "source" not in self.data:
            raise ConfigError("data.source is missing: name a data source (see `markovformer data list`)")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def path_text(value: Any) -> Any:
    """A path given from Python as a ``pathlib.Path`` (any ``os.PathLike``) as config.yaml holds it, a str; anything
    else as it is, for the type check that reads it."""
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _own_weights(init_from: Path, output_dir: Path) -> bool:
    """Whether ``init_from`` names the weights of the run ``output_dir`` itself: the run, its model/ or a checkpoint
    file of it (a run directory beside others in ``output_dir``, runs/parent for output_dir=runs, is not)."""
    start, run = init_from.resolve(), output_dir.resolve()
    return start in (run, run / "model") or start.parent == run / "checkpoints"


def _home_expanded(value: Any) -> Any:
    """A path (or each path of a list), a str or from Python a ``pathlib.Path`` (``path_text``), with a leading ``~``
    made the home folder's; anything else as it is."""
    value = path_text(value)
    if isinstance(value, str) and value.startswith("~"):
        return os.path.expanduser(value)
    if isinstance(value, list):
        return [_home_expanded(item) for item in value]
    return value


def build_dataclass(cls: type, values: dict[str, Any], prefix: str, elsewhere: Any = None) -> Any:
    """Instantiate ``cls`` from ``values``, naming ``prefix.key`` in every error; ``elsewhere(key)``: the hint for an
    unknown key that another section takes (``other_section_hint``), then ``cls.unknown_key_hint(key)`` (what the
    class says of a key it does not take), ahead of a spelling suggestion."""
    if not isinstance(values, dict):
        raise ConfigError(f"{prefix} must be a mapping; got {shown(values)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in values.items():
        if key not in fields:
            hint = elsewhere(key) if elsewhere is not None else ""
            hint = hint or (cls.unknown_key_hint(key) if hasattr(cls, "unknown_key_hint") else "")
            hint = hint or suggest(key, fields)
            hint = hint or f"; the keys of {prefix}: {', '.join(fields)}"  # nothing close: what may be typed
            raise ConfigError(f"unknown key {prefix}.{str(key)[:200]}{hint}")
        kwargs[key] = coerce(value, hints[key], f"{prefix}.{key}")
    missing = [name for name, f in fields.items() if name not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # fmt: skip
    if missing:
        raise ConfigError(f"{prefix}.{missing[0]} is required")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as error:  # a message naming its key as `prefix.key=...` needs no second prefix
        named = str(error).startswith(f"{prefix}.")
        raise ConfigError(str(error) if named else f"{prefix}: {error}") from error


def plain_values(value: Any) -> Any:
    """Tuples to lists, recursively, for YAML."""
    if isinstance(value, dict):
        return {k: plain_values(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_values(v) for v in value]
    return value


MAX_DEPTH = 32  # nesting levels a config may have; far beyond any real one, far below Python's recursion limit


@functools.cache
def _loader() -> type:
    """PyYAML's safe loader made strict for run configs: numbers are YAML 1.2's, exponent numbers without a dot
    (``2e-3``, ``1E5``) floats and integers decimal unless ``0b``/``0o``/``0x`` says otherwise (YAML 1.1 read a
    zero-padded ``010`` as octal 8 and ``1:30`` as 90, base 60; 1.2 reads ten and the text); a repeated key, an
    alias (``*name``: a few hundred bytes of aliases expand into gigabytes) and nesting deeper than ``MAX_DEPTH``
    are ConfigErrors naming the line."""
    import yaml
    from yaml.events import AliasEvent, MappingStartEvent, SequenceStartEvent

    class RunConfigLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            event = self.peek_event()
            line = event.start_mark.line + 1
            if isinstance(event, AliasEvent):
                raise ConfigError(f"line {line}: the alias *{event.anchor[:100]} is refused: a run config "
                                  f"has no anchors or aliases (&name, *name); write the value out")  # fmt: skip
            if not isinstance(event, (SequenceStartEvent, MappingStartEvent)):
                return super().compose_node(parent, index)
            if self.depth == MAX_DEPTH:
                raise ConfigError(f"line {line}: lists and mappings nested deeper than {MAX_DEPTH} levels are refused")
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            first_lines = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node, deep=deep), key_node.start_mark.line + 1
                try:
                    first = first_lines.get(key)
                except TypeError:  # an unhashable key: PyYAML's own error names it
                    continue
                if first is not None:
                    raise ConfigError(f"line {line}: duplicate key {shown(key)} (first given on line {first}); give "
                                      f"each key once")  # fmt: skip
                first_lines[key] = line
            return super().construct_mapping(node, deep)

    def construct_int(loader: RunConfigLoader, node: Any) -> int:
        text = loader.construct_scalar(node).replace("_", "")
        digits = text.lstrip("+-")
        base = {"0b": 2, "0o": 8, "0x": 16}.get(digits[:2], 10)
        return (-1 if text.startswith("-") else 1) * int(digits if base == 10 else digits[2:], base)

    int_tag = "tag:yaml.org,2002:int"
    RunConfigLoader.yaml_implicit_resolvers = {first: [(tag, regexp) for tag, regexp in resolvers if tag != int_tag]
                                               for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    integer = re.compile(r"^[-+]?(?:0b[01][01_]*|0o[0-7][0-7_]*|0x[0-9a-fA-F][0-9a-fA-F_]*|[0-9][0-9_]*)$")
    RunConfigLoader.add_implicit_resolver(int_tag, integer, list("-+0123456789"))
    RunConfigLoader.add_constructor(int_tag, construct_int)
    exponent = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")
    RunConfigLoader.add_implicit_resolver("tag:yaml.org,2002:float", exponent, list("-+0123456789."))
    return RunConfigLoader


def read_yaml(text: str) -> Any:
    """YAML as PyYAML's safe loader reads it, except that exponent numbers without a dot are floats and that
    repeated keys, aliases and deep nesting are refused (ConfigError naming the line; see ``_loader``)."""
    import yaml

    return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass


def write_yaml(values: Any) -> str:
    """``values`` as YAML that ``read_yaml`` reads back as they are: a string it would read as another type (the
    text ``1e5`` or ``010``, a float or an int to it) is quoted, as PyYAML quotes what its own loader would. Text
    stays text (``Grüße``, not PyYAML's default ``"Gr\\xFC\\xDFe"``): the file is UTF-8 and read by people."""
    import yaml

    class RunConfigDumper(yaml.SafeDumper):
        yaml_implicit_resolvers = _loader().yaml_implicit_resolvers

    return yaml.dump(values, Dumper=RunConfigDumper, sort_keys=False, allow_unicode=True)


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"model.max_order=3"`` -> (["model", "max_order"], 3); the value is read as YAML (numbers, lists, ...)."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override {shown(text)} must look like key.path=value")
    key, raw = text.split("=", 1)
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {shown(text)} has an empty key")
    if key.count(".") >= MAX_DEPTH:
        raise ConfigError(f"override {shown(text)}: keys nested deeper than {MAX_DEPTH} levels are refused")
    try:
        value = read_yaml(raw) if raw != "" else ""
    except yaml.YAMLError as error:
        raise ConfigError(f"override {shown(text)}: value is not valid YAML ({error})") from error
    except ConfigError as error:
        raise ConfigError(f"override {shown(text)}: {error}") from None
    return key.split("."), value


def apply_overrides(values: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Set each dotted override in a nested dict (sections are created when absent or null, as a run's config.yaml
    writes an unset mapping such as ``trainer.early_stopping``); returns the same dict."""
    for text in overrides:
        path, value = parse_override(text)
        node = values
        for part in path[:-1]:
            if node.get(part) is None:
                node[part] = {}
            node = node[part]
            if not isinstance(node, dict):
                raise ConfigError(f"override {shown(text)}: {shown(part)} is not a section")
        node[path[-1]] = value
    return values


def check_each_key_once(overrides: list[str]) -> None:
    """ConfigError naming a key that two of ``overrides`` set to different values: applied in order, the last won
    and the first was dropped without a word (``model.d_model=32 model.d_model=64`` trained 64; ``data.path=a.txt``
    then ``data={source: text}``, which replaces the section, drops the path). The same value twice, or a section
    given whole and one of its keys changed after, loses nothing said and is taken."""
    typed = [(text, *parse_override(text)) for text in overrides]
    for index, (later, path, value) in enumerate(typed):
        for earlier, earlier_path, earlier_value in typed[:index]:
            for leaf, said in _settings(tuple(earlier_path), earlier_value):
                if list(leaf[: len(path)]) != path:
                    continue
                kept = _value_at(value, leaf[len(path) :])
                if kept is _MISSING or kept != said or isinstance(kept, bool) != isinstance(said, bool):
                    raise ConfigError(f"{'.'.join(map(str, leaf))} is set twice, to different values: "
                                      f"{shown(earlier)}, then {shown(later)}; give it once")  # fmt: skip


_MISSING = object()


def _settings(path: tuple, value: Any) -> list[tuple[tuple, Any]]:
    """(key path, value) of each setting an override makes: a non-empty section's keys, one by one."""
    if isinstance(value, dict) and value:
        return [setting for key, inner in value.items() for setting in _settings((*path, key), inner)]
    return [(path, value)]


def _value_at(value: Any, path: tuple) -> Any:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return _MISSING
        value = value[key]
    return value


def load_yaml(path: str | Path) -> dict[str, Any]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        values = read_yaml(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not a UTF-8 text file ({error.reason} at byte {error.start})") from None
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}:{where} malformed YAML ({getattr(error, 'problem', error)})") from error
    if values is None:
        raise ConfigError(f"{path}: the config file is empty")
    if not isinstance(values, dict):
        raise ConfigError(f"{path}: a config must be a mapping of sections, got {type(values).__name__}")
    return values


SECTIONS = ("task", "output_dir", "model_type", "model", "data", "trainer", "task_options", "init_from",
            "init_from_skip")  # fmt: skip
# Task options that were trainer options (old trainer key -> the task option it is now, and the default it had
# there): an old ``trainer.KEY`` moves to ``task_options`` when the run's task takes it, and is dropped at that
# default when it does not (old resolved configs wrote every trainer option). ``context_lengths`` was renamed
# ``trainer.orders`` before the move: a run's config.yaml written under either name still loads.
MOVED_TRAINER_KEYS = {"context_lengths": ("orders", []), "orders": ("orders", []),
                      "kl_warmup_steps": ("kl_warmup_steps", 0), "carry": ("carry", True),
                      "window_overlap": ("window_overlap", False)}  # fmt: skip


def section_keys(task: Any, model_type: Any, source: Any) -> dict[str, list[str]]:
    """The keys each section of a run config takes: trainer, task_options (the task's), model (the family's config
    fields), data (the source's options); a section whose task, family or source is not known is left out."""
    from markovformer.data.sources import DATA_SOURCES
    from markovformer.models.registry import MODEL_FAMILIES

    classes = {"trainer": TrainerConfig,
               "task_options": TASKS[task].Options if isinstance(task, str) and task in TASKS else None,
               "model": MODEL_FAMILIES[model_type].config_class
               if isinstance(model_type, str) and model_type in MODEL_FAMILIES else None,
               "data": DATA_SOURCES.get(source) if isinstance(source, str) else None}  # fmt: skip
    return {name: [f.name for f in dataclasses.fields(cls) if f.init] for name, cls in classes.items() if cls}


def other_section_hint(key: Any, section: str, task: Any, model_type: Any, source: Any) -> str:
    """`` (did you mean 'trainer.batch_size'? ...)`` when ``key``, unknown in ``section`` (or at the top level: ""), is
    a key of another section of the run (task ``task``, family ``model_type``, data source ``source``); else "".
    A key typed in the wrong section got a spelling suggestion of its own section (model.batch_size: 'chunk_size';
    data.max_order: the chain's 'order'), or none."""
    found = [f"{other}.{key}" for other, keys in section_keys(task, model_type, source).items()
             if other != section and key in keys]  # fmt: skip
    if not found:
        return ""
    not_here = f" {str(key)[:200]!r} is not a {section} key" if section else ""
    return f" (did you mean {' or '.join(map(repr, found))}?{not_here})"


def task_options(task: str, values: Any, model_type: Any = None, source: Any = None) -> Any:
    """``TASKS[task].Options`` from the ``task_options:`` mapping, errors naming ``task_options.KEY`` (and the section
    of the run, family ``model_type``, data ``source``, that takes an unknown key)."""
    options = TASKS[task].Options
    if isinstance(values, dict):
        unknown = [key for key in values if key not in {f.name for f in dataclasses.fields(options)}]
        if unknown:
            names = tuple(f.name for f in dataclasses.fields(options))
            hint = other_section_hint(unknown[0], "task_options", task, model_type, source)
            raise ConfigError(f"task_options.{str(unknown[0])[:200]} is not an option of task {task} (its options: "
                              f"{names or 'none'}){hint or suggest(unknown[0], names)}")  # fmt: skip
    return build_dataclass(options, values, "task_options")


def move_task_options(task: str, trainer: dict[str, Any], options: dict[str, Any]) -> tuple[dict, dict]:
    """(trainer, task_options) with each old trainer key of ``MOVED_TRAINER_KEYS`` moved to the task's options; an
    error names the key as the config spells it."""
    trainer, options = dict(trainer), dict(options)
    takes = {f.name for f in dataclasses.fields(TASKS[task].Options)}
    moved: dict[str, str] = {}  # task option -> the old trainer key it came from
    for old, (key, old_default) in MOVED_TRAINER_KEYS.items():
        if old not in trainer:
            continue
        value = trainer.pop(old)
        if key in moved:
            raise ConfigError(f"trainer.{moved[key]} and trainer.{old} are both old places of task_options.{key}; "
                              f"give only task_options.{key}")  # fmt: skip
        if key in options:
            raise ConfigError(f"trainer.{old} is the old place of task_options.{key}; give only task_options.{key}")
        moved[key] = old
        if key in takes:
            options[key] = value
        elif plain_values(value) != old_default:
            raise ConfigError(f"trainer.{old}={shown(value)} is set but task {task} does not use it")
    return trainer, options


def resolve_run_config(values: dict[str, Any]) -> RunConfig:
    """Validate the raw nested dict (after overrides) into a RunConfig. Model and data sections are checked by their
    own classes when the run is built (they need the data's vocabulary size)."""
    data = values.get("data")
    run = (values.get("task"), values.get("model_type", "markovian_transformer"),
           data.get("source") if isinstance(data, dict) else None)  # fmt: skip
    for key in values:
        if key not in SECTIONS:
            hint = other_section_hint(key, "", *run) or suggest(key, SECTIONS)
            hint = hint or f"; the top-level keys: {', '.join(SECTIONS)}"
            raise ConfigError(f"unknown top-level key {shown(key)}{hint}")
    if "task" not in values:
        raise ConfigError(f"task is missing: one of {tuple(TASKS)}")
    for section in ("model", "data"):
        if not isinstance(values.get(section, {}), dict):
            raise ConfigError(f"{section} must be a mapping; got {shown(values[section])}")
    trainer, options = values.get("trainer") or {}, values.get("task_options") or {}
    if not isinstance(options, dict):
        raise ConfigError(f"task_options must be a mapping; got {shown(options)}")
    if isinstance(trainer, dict):  # build_dataclass names any other type
        if isinstance(values["task"], str) and values["task"] in TASKS:  # RunConfig names any other task
            trainer, options = move_task_options(values["task"], trainer, options)
    trainer = build_dataclass(TrainerConfig, trainer, "trainer", lambda key: other_section_hint(key, "trainer", *run))
    values = {**values, **{key: path_text(values[key]) for key in ("output_dir", "init_from") if key in values}}
    for key in ("task", "model_type"):
        if key in values:
            coerce(values[key], str, key)
    init_from_skip = coerce(values.get("init_from_skip") or [], list[str], "init_from_skip")
    return RunConfig(
        task=values["task"],
        model=dict(values.get("model") or {}),
        data=dict(values.get("data") or {}),
        trainer=trainer,
        output_dir=values.get("output_dir", "runs/run"),
        model_type=values.get("model_type", "markovian_transformer"),
        init_from=values.get("init_from"),
        init_from_skip=init_from_skip,
        task_options=options,
    )
