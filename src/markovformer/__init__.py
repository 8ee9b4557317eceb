"""markovformer: Markov-structured sequence models in PyTorch.

Every model family's config and model classes are importable from here. ``import markovformer.hf`` (the ``hf``
extra) registers them with the Hugging Face ``transformers`` Auto classes.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# Each name and the module it comes from: imported on first use (PEP 562), so that the command line's --help and a
# mistyped option, which import this package, answer without loading torch and the models.
_EXPORTS = {
    "BinaryTransformer": "markovformer.models.binary_transformer",
    "BinaryTransformerConfig": "markovformer.models.binary_transformer",
    "MarkovTranslatorConfig": "markovformer.models.markov_translator",
    "MarkovTranslatorForConditionalGeneration": "markovformer.models.markov_translator",
    "MarkovianTransformerConfig": "markovformer.models.markovian_transformer",
    "MarkovianTransformerForCTC": "markovformer.models.markovian_transformer",
    "MarkovianTransformerForCausalLM": "markovformer.models.markovian_transformer",
    "MarkovianTransformerForSequenceClassification": "markovformer.models.markovian_transformer",
    "MarkovianTransformerForTokenClassification": "markovformer.models.markovian_transformer",
    "MarkovianTransformerModel": "markovformer.models.markovian_transformer",
    "PreTrainedModel": "markovformer.models.pretrained",
    "ScanMarkovConfig": "markovformer.models.scan_markov",
    "ScanMarkovForCausalLM": "markovformer.models.scan_markov",
    "VMTConfig": "markovformer.models.vmt",
    "VariationalMarkovTransformer": "markovformer.models.vmt",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'markovformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

