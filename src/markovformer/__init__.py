"""markovformer: Markov-structured sequence models in PyTorch.

Every model family's config and model classes are importable from here. ``import markovformer.hf`` (the ``hf``
extra) registers them with the Hugging Face ``transformers`` Auto classes.
"""

from markovformer.models.binary_transformer import BinaryTransformer, BinaryTransformerConfig
from markovformer.models.markov_translator import (
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
)
from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    MarkovianTransformerModel,
)
from markovformer.models.pretrained import PreTrainedModel
from markovformer.models.scan_markov import ScanMarkovConfig, ScanMarkovForCausalLM
from markovformer.models.vmt import VariationalMarkovTransformer, VMTConfig

__version__ = "0.1.0"
__all__ = [
    "BinaryTransformer",
    "BinaryTransformerConfig",
    "MarkovTranslatorConfig",
    "MarkovTranslatorForConditionalGeneration",
    "MarkovianTransformerConfig",
    "MarkovianTransformerForCTC",
    "MarkovianTransformerForCausalLM",
    "MarkovianTransformerForSequenceClassification",
    "MarkovianTransformerForTokenClassification",
    "MarkovianTransformerModel",
    "PreTrainedModel",
    "ScanMarkovConfig",
    "ScanMarkovForCausalLM",
    "VMTConfig",
    "VariationalMarkovTransformer",
]
