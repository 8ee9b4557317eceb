from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig, gpt2_style_config
from markovformer.models.markovian_transformer.modeling import (
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    MarkovianTransformerModel,
    MarkovianTransformerOutput,
)

__all__ = [
    "MarkovianTransformerConfig",
    "MarkovianTransformerForCTC",
    "MarkovianTransformerForCausalLM",
    "MarkovianTransformerForSequenceClassification",
    "MarkovianTransformerForTokenClassification",
    "MarkovianTransformerModel",
    "MarkovianTransformerOutput",
    "gpt2_style_config",
]
