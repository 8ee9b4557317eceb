"""What a run prints about its model: the attention kinds layer by layer, in order."""

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)
from markovformer.training.run_report import attention_summary


def model(attention) -> MarkovianTransformerForCausalLM:
    config = MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=len(attention),
                                        attention=attention)  # fmt: skip
    return MarkovianTransformerForCausalLM(config)


def test_the_model_line_lists_the_kinds_in_layer_order_with_repeats():
    # printed as a sorted set, [markov, hybrid_split] read as ['hybrid_split', 'markov']: the layers reversed
    assert attention_summary(model(["markov", "hybrid_split", "markov", "softmax"])) == (
        ", attention by layer [markov, hybrid_split, markov, softmax]")
    assert attention_summary(model(["softmax", "softmax"])) == ", attention softmax in every layer"


def test_a_family_without_attention_kinds_prints_none():
    assert attention_summary(ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=8, d_model=16, order=2))) == ""
