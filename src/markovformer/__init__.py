"""markovformer: Markov-structured sequence models in PyTorch.

Every model family's config and model classes are importable from here. ``import markovformer.hf`` (the ``hf``
extra) registers them with the Hugging Face ``transformers`` Auto classes.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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

# The same names for a type checker, to which a name __getattr__ gives is Any; `import X as X` re-exports X (mypy
# --strict, pyright). tests/test_typing.py keeps the two lists equal.
if TYPE_CHECKING:
    from markovformer.models.binary_transformer import BinaryTransformer as BinaryTransformer
    from markovformer.models.binary_transformer import BinaryTransformerConfig as BinaryTransformerConfig
    from markovformer.models.markov_translator import MarkovTranslatorConfig as MarkovTranslatorConfig
    from markovformer.models.markov_translator import (
        MarkovTranslatorForConditionalGeneration as MarkovTranslatorForConditionalGeneration,
    )
    from markovformer.models.markovian_transformer import MarkovianTransformerConfig as MarkovianTransformerConfig
    from markovformer.models.markovian_transformer import (
        MarkovianTransformerForCausalLM as MarkovianTransformerForCausalLM,
    )
    from markovformer.models.markovian_transformer import MarkovianTransformerForCTC as MarkovianTransformerForCTC
    from markovformer.models.markovian_transformer import (
        MarkovianTransformerForSequenceClassification as MarkovianTransformerForSequenceClassification,
    )
    from markovformer.models.markovian_transformer import (
        MarkovianTransformerForTokenClassification as MarkovianTransformerForTokenClassification,
    )
    from markovformer.models.markovian_transformer import MarkovianTransformerModel as MarkovianTransformerModel
    from markovformer.models.pretrained import PreTrainedModel as PreTrainedModel
    from markovformer.models.scan_markov import ScanMarkovConfig as ScanMarkovConfig
    from markovformer.models.scan_markov import ScanMarkovForCausalLM as ScanMarkovForCausalLM
    from markovformer.models.vmt import VariationalMarkovTransformer as VariationalMarkovTransformer
    from markovformer.models.vmt import VMTConfig as VMTConfig


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'markovformer' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

