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


def test_the_model_line_counts_every_parameter_once_and_names_the_frozen_apart(capsys):
    """A VMT run with the data's true generative part frozen printed 33,128 parameters at training (trainable only)
    and 33,918 in its report (its model loaded again, nothing frozen): one run, two sizes. The line now gives every
    parameter, counted as the tensors hold them (a tied embedding once), the trainable ones beside when they differ."""
    from types import SimpleNamespace

    from markovformer.training.run_report import describe_run

    tied = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                                                      tie_word_embeddings=True))  # fmt: skip
    total = sum({id(p): p.numel() for p in tied.parameters()}.values())
    tied.model.blocks[0].requires_grad_(False)
    frozen = sum(p.numel() for p in tied.model.blocks[0].parameters())
    bundle = SimpleNamespace(train=[], val=[], test=[], info={})
    describe_run(SimpleNamespace(data={"source": "text"}), bundle, tied)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("model:"))
    assert f" {total:,} parameters ({total - frozen:,} trainable)," in line
