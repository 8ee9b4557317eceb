"""Model families by name and the head class each task uses. A new system registers its config and heads here."""

from __future__ import annotations

from dataclasses import dataclass

from markovformer.models.config_base import ModelConfig
from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
)
from markovformer.models.pretrained import PreTrainedModel
from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig


@dataclass(frozen=True)
class ModelFamily:
    config_class: type[ModelConfig]
    heads: dict[str, type[PreTrainedModel]]  # task -> head class


MODEL_FAMILIES: dict[str, ModelFamily] = {
    "markovian_transformer": ModelFamily(
        MarkovianTransformerConfig,
        {
            "causal_lm": MarkovianTransformerForCausalLM,
            "sequence_classification": MarkovianTransformerForSequenceClassification,
            "token_classification": MarkovianTransformerForTokenClassification,
            "ctc": MarkovianTransformerForCTC,
        },
    ),
    "scan_markov": ModelFamily(ScanMarkovConfig, {"causal_lm": ScanMarkovForCausalLM}),
    "markov_translator": ModelFamily(MarkovTranslatorConfig, {"translation": MarkovTranslatorForConditionalGeneration}),
    "vmt": ModelFamily(VMTConfig, {"vmt": VariationalMarkovTransformer}),
}


def head_class(model_type: str, task: str) -> type[PreTrainedModel]:
    if model_type not in MODEL_FAMILIES:
        raise ValueError(f"model_type={model_type!r} must be one of {tuple(MODEL_FAMILIES)}")
    heads = MODEL_FAMILIES[model_type].heads
    if task not in heads:
        raise ValueError(f"model_type={model_type!r} has no head for task={task!r}; it supports {tuple(heads)}")
    return heads[task]
