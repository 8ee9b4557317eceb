"""markovformer: Markov-structured sequence models in PyTorch."""

from markovformer.models.markovian_transformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    MarkovianTransformerModel,
)

__version__ = "0.1.0"
__all__ = [
    "MarkovianTransformerConfig",
    "MarkovianTransformerForCTC",
    "MarkovianTransformerForCausalLM",
    "MarkovianTransformerForSequenceClassification",
    "MarkovianTransformerForTokenClassification",
    "MarkovianTransformerModel",
]
