from markovformer.models.markov_translator.config import MarkovTranslatorConfig
from markovformer.models.markov_translator.generation import (
    DecodingState,
    GenerationOutput,
    beam_search,
    decode_step,
    generate,
    greedy_search,
    start_decoding,
)
from markovformer.models.markov_translator.modeling import (
    MarkovTranslatorForConditionalGeneration,
    MarkovTranslatorOutput,
)

__all__ = [
    "DecodingState",
    "GenerationOutput",
    "MarkovTranslatorForConditionalGeneration",
    "MarkovTranslatorConfig",
    "MarkovTranslatorOutput",
    "beam_search",
    "decode_step",
    "generate",
    "greedy_search",
    "start_decoding",
]
