from markovformer.models.markovian_transformer.classifiers import (
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
)
from markovformer.models.markovian_transformer.config import MarkovianTransformerConfig, gpt2_style_config
from markovformer.models.markovian_transformer.modeling import (
    MarkovianTransformerForCausalLM,
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
