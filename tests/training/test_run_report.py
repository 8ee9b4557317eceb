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


def test_the_end_of_run_mean_gate_of_a_cls_pooled_classifier_counts_each_example_as_alone(capsys):
    """pooling='cls' puts a [CLS] vector before each row, so the gates cover T + 1 positions: the report weighed them
    by the batch's (B, T) mask and failed after training ('The size of tensor a (28) must match the size of tensor b
    (27)'). The mean gate printed is each example's gates run alone, [CLS] included, over all their positions."""
    import torch

    from markovformer import MarkovianTransformerForSequenceClassification
    from markovformer.data.bundle import DataBundle
    from markovformer.training.run_report import report_results

    config = MarkovianTransformerConfig(vocab_size=6, d_model=8, n_layers=1, n_heads=2, max_order=2, causal=False,
                                        pooling="cls", num_labels=2)  # fmt: skip
    torch.manual_seed(0)
    classifier = MarkovianTransformerForSequenceClassification(config).eval()
    with torch.no_grad():  # gates that differ from token to token
        for parameter in classifier.parameters():
            parameter.normal_()
    generator = torch.Generator().manual_seed(1)
    val = [{"input_ids": torch.randint(1, 6, (n,), generator=generator), "labels": torch.tensor(n % 2)}
           for n in (7, 3, 5)]  # fmt: skip
    report_results({"val": {"loss": 1.0}, "reference": {}}, classifier, DataBundle(val, val, val, {"vocab_size": 6}))
    with torch.no_grad():
        alone = [classifier(example["input_ids"][None], return_gates=True).gates[0]["past"][0] for example in val]
    expected = torch.cat(alone, dim=1).mean(1)  # (H, slots) over the 7 + 3 + 5 tokens and 3 [CLS] vectors
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  head ")][:2]
    for head, line in enumerate(printed):
        assert line.split("|")[1].split() == [f"{value:.3f}" for value in expected[head].tolist()]
