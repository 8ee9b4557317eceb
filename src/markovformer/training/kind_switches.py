"""Overrides that switch a kind: ``data.source=text`` on a chain config, ``model_type=scan_markov`` or
``model.attention=retnet`` on a Markov one; and ``trainer.max_steps=N`` below the config file's
``trainer.warmup_steps``, which warms up over the N steps.

The options the config file gave for the old kind are not the user's choice for the new one, so those the new kind
does not take are dropped, and each switch is reported in one line; an option the user typed in an override is
never dropped (the new kind's own check names it).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from markovformer.training.run_config import RunConfig, apply_overrides, check_each_key_once, parse_override


def _typed(overrides: list[str]) -> list[tuple[str, ...]]:
    return [tuple(parse_override(text)[0]) for text in overrides]


def _was_typed(key: tuple[str, ...], typed: list[tuple[str, ...]]) -> bool:
    """Whether an override set ``key`` or a section holding it (``data={...}`` sets every data key)."""
    return any(key[: len(path)] == path for path in typed)


def _data_source_options(name: str) -> set[str] | None:
    from markovformer.data.sources import DATA_SOURCES

    if name not in DATA_SOURCES:
        return None  # build_data names the unknown source
    return {field.name for field in dataclasses.fields(DATA_SOURCES[name])} | {"source"}


def _model_config_class(model_type: Any) -> type | None:
    """The config class of ``model_type``; None for an unknown one (the model's build names it)."""
    from markovformer.models.registry import MODEL_FAMILIES

    family = MODEL_FAMILIES.get(model_type) if isinstance(model_type, str) else None
    return None if family is None else family.config_class


def _attention_kinds(attention: Any) -> set[str] | None:
    from markovformer.layers.registry import ATTENTION_KINDS

    entries = [attention] if isinstance(attention, str) else attention if isinstance(attention, list) else None
    if entries is None:
        return None
    kinds = [entry.get("kind") if isinstance(entry, dict) else entry for entry in entries]
    # an unknown kind, or one that is no string (a list is unhashable): the model config names it
    return set(kinds) if all(isinstance(kind, str) and kind in ATTENTION_KINDS for kind in kinds) else None


def _attention_options_read(kinds: set[str]) -> tuple[set[str], set[str]]:
    """(the attention option fields of the model config, those that ``kinds`` or the whole model read)."""
    from markovformer.layers.registry import attention_option_names
    from markovformer.models.markovian_transformer.config import ATTENTION_OPTION_FIELDS, MODEL_WIDE_OPTIONS

    read = set(MODEL_WIDE_OPTIONS).union(*(attention_option_names(kind) for kind in kinds))
    return set(ATTENTION_OPTION_FIELDS), read


def _drop(section: dict, keep: set[str], prefix: str, typed: list[tuple[str, ...]]) -> list[str]:
    dropped = [key for key in section if key not in keep and not _was_typed((prefix, key), typed)]
    for key in dropped:
        del section[key]
    return [f"{prefix}.{key}" for key in dropped]


def apply_switching_overrides(values: dict[str, Any], overrides: list[str]) -> tuple[dict[str, Any], list[str]]:
    """``values`` with ``overrides`` applied (``apply_overrides``), minus the config's options of a data source,
    model family or attention kind that an override replaced and the new one does not take; and one line per switch
    saying so. A key two overrides set to different values is refused (``check_each_key_once``)."""
    check_each_key_once(overrides)
    before = copy.deepcopy(values)
    apply_overrides(values, overrides)
    typed = _typed(overrides)
    notes = []
    old_data, data = before.get("data"), values.get("data")
    if isinstance(old_data, dict) and isinstance(data, dict) and _was_typed(("data", "source"), typed):
        old, new = old_data.get("source"), data.get("source")
        keep = _data_source_options(new) if isinstance(new, str) and old != new else None
        dropped = _drop(data, keep, "data", typed) if keep is not None else []
        if dropped:
            notes.append(f"data.source changed from {old!r} to {new!r}: dropped the options of {old!r} that {new!r} "
                         f"does not take ({', '.join(dropped)})")  # fmt: skip
    old_model, model = before.get("model"), values.get("model")
    old_type, new_type = (section.get("model_type", RunConfig.model_type) for section in (before, values))
    if isinstance(model, dict) and _was_typed(("model_type",), typed) and isinstance(new_type, str) \
            and old_type != new_type:  # fmt: skip
        old_class, new_class = _model_config_class(old_type), _model_config_class(new_type)
        if old_class is not None:  # old field names as they are now, so that one the new family takes is kept
            upgraded = old_class.upgrade_keys(model)
            model.clear()
            model.update(upgraded)
        keep = None if new_class is None else {field.name for field in dataclasses.fields(new_class)}
        dropped = _drop(model, keep, "model", typed) if keep is not None else []
        if dropped:
            notes.append(f"model_type changed from {old_type!r} to {new_type!r}: dropped the options of {old_type!r} "
                         f"that {new_type!r} does not take ({', '.join(dropped)})")  # fmt: skip
    if (values.get("model_type", RunConfig.model_type) == "markovian_transformer" and isinstance(old_model, dict)
            and isinstance(model, dict) and _was_typed(("model", "attention"), typed)
            and old_model.get("attention") != model.get("attention")):  # fmt: skip
        kinds = _attention_kinds(model.get("attention"))
        if kinds is not None:
            fields, read = _attention_options_read(kinds)
            keep = (set(model) - fields) | read
            dropped = _drop(model, keep, "model", typed)
            if dropped:
                notes.append(f"model.attention changed to {model['attention']!r}: dropped the options its kinds do "
                             f"not read ({', '.join(dropped)})")  # fmt: skip
    if (values.get("model_type", RunConfig.model_type) == "markovian_transformer" and isinstance(old_model, dict)
            and isinstance(model, dict) and _was_typed(("model", "scope"), typed) and model.get("scope") == "global"
            and old_model.get("scope") != "global"):  # fmt: skip
        if _drop(model, set(model) - {"window"}, "model", typed):  # a typed window stays, for the config to refuse
            notes.append("model.scope changed to 'global': dropped model.window, which only scope='local' reads")
    notes += _shorten_warmup(values, before, typed)
    return values, notes


def _shorten_warmup(values: dict, before: dict, typed: list[tuple[str, ...]]) -> list[str]:
    """A typed ``trainer.max_steps`` below the file's warm-up: the warm-up, not typed, is cut to the run's length."""
    trainer, old = values.get("trainer"), before.get("trainer")
    if not (isinstance(trainer, dict) and isinstance(old, dict) and _was_typed(("trainer", "max_steps"), typed)):
        return []
    steps, warmup = trainer.get("max_steps"), trainer.get("warmup_steps")
    numbers = all(isinstance(n, int) and not isinstance(n, bool) for n in (steps, warmup))
    if not numbers or warmup <= steps or steps < 1 or _was_typed(("trainer", "warmup_steps"), typed):
        return []
    trainer["warmup_steps"] = steps
    return [f"trainer.max_steps={steps} is below the config's trainer.warmup_steps={warmup}: warming up over all "
            f"{steps} steps (set trainer.warmup_steps to choose)"]  # fmt: skip
