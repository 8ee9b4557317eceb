from markovformer.models.binary_transformer.config import BinaryTransformerConfig
from markovformer.models.binary_transformer.modeling import BinaryTransformer, BinaryTransformerOutput

__all__ = ["BinaryTransformer", "BinaryTransformerConfig", "BinaryTransformerOutput"]
