"""The task kinds the engine trains, by name. Adding one: a ``Task`` subclass in its own file here, one line below;
its metrics in ``training.metrics``."""

from __future__ import annotations

from markovformer.advice import suggest
from markovformer.training.tasks.base import GenerationRequest, Task, TaskOptions, model_inputs
from markovformer.training.tasks.causal_lm import CausalLM, CausalLMOptions
from markovformer.training.tasks.classification import SequenceClassification, TokenClassification
from markovformer.training.tasks.ctc import CTC
from markovformer.training.tasks.translation import Translation
from markovformer.training.tasks.vmt import VMT, VMTOptions
from markovformer.training.trainer_config import ConfigError, TrainerConfig

TASKS: dict[str, type[Task]] = {task.name: task for task in (
    CausalLM, SequenceClassification, TokenClassification, CTC, Translation, VMT)}  # fmt: skip


def build_task(name: str, trainer: TrainerConfig | None = None, info: dict | None = None, tokenizer=None,
               options: object | None = None) -> Task:  # fmt: skip
    """The task ``name`` of a run with these trainer options, data info, tokenizer and task options (its
    ``Options``; None: their defaults)."""
    if name not in TASKS:
        raise ConfigError(f"task={name!r} must be one of {tuple(TASKS)}{suggest(name, TASKS)}")
    return TASKS[name](trainer, info, tokenizer, options)


__all__ = [
    "TASKS",
    "CausalLMOptions",
    "GenerationRequest",
    "Task",
    "TaskOptions",
    "VMTOptions",
    "build_task",
    "model_inputs",
]
