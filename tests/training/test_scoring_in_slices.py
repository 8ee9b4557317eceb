"""Validation and ``eval`` score a causal LM from its final states, the head applied to slices of rows: the
numbers are its forward's, bit for bit on the CPU, for every way a batch can come (padding, packed documents,
several orders, an accuracy)."""

from types import SimpleNamespace

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)
from markovformer.ops import losses
from markovformer.training.tasks import CausalLMOptions, build_task

VOCAB = 64


def tiny_model(family: str):
    torch.manual_seed(0)
    if family == "markovian_transformer":
        return MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=VOCAB, d_model=8, n_layers=1,
                                                                          n_heads=2)).eval()  # fmt: skip
    return ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=8, order=3)).eval()


def batches(packed: bool) -> list[dict]:
    """Two batches of unequal lengths: a right-padded row (its padding labelled -100) or, ``packed``, rows of
    documents (position_ids restarting) with the document starts labelled."""
    g = torch.Generator().manual_seed(1)
    made = []
    for rows, length in ((3, 11), (2, 7)):
        ids = torch.randint(1, VOCAB, (rows, length), generator=g)
        batch = {"input_ids": ids, "labels": ids.clone(), "attention_mask": torch.ones_like(ids)}
        batch["attention_mask"][-1, length - 3 :] = 0
        batch["labels"][-1, length - 3 :] = -100
        if packed:
            batch["position_ids"] = torch.cat([torch.arange(4), torch.arange(length - 4)]).expand(rows, -1).clone()
        made.append(batch)
    return made


@pytest.mark.parametrize(("family", "packed", "orders", "answers"), [
    ("markovian_transformer", False, (), True), ("markovian_transformer", True, (), False),
    ("scan_markov", False, (2, 3), False), ("scan_markov", True, (), True),
])  # fmt: skip
def test_scoring_gives_the_numbers_of_the_models_forward(monkeypatch, family, packed, orders, answers):
    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 5 * VOCAB)  # slices of 5 rows: several per batch, one cut short
    model = tiny_model(family)
    info = {"reference": {"chance_accuracy": 1 / VOCAB}} if answers else {}
    task = build_task("causal_lm", info=info, options=CausalLMOptions(orders) if orders else None)
    scored, expected = task.new_metrics(), task.new_metrics()
    with torch.no_grad():
        for batch in batches(packed):
            task.score(model, batch, scored)
            for order in orders or (None,):
                output = model(**batch, **({} if order is None else {"order": order}))
                expected.update(SimpleNamespace(loss=output.loss, most_likely=output.logits.argmax(-1)), batch, order)
    results = scored.compute()
    assert results == expected.compute()
    assert ("accuracy" in results) == answers and all(f"loss_n{n}" in results for n in orders)


def test_a_translations_score_is_its_forwards_loss(monkeypatch):
    """The translator's teacher-forced loss, scored from its decoder states in slices of 5 rows, on padded sources
    and targets: its forward's, bit for bit."""
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

    monkeypatch.setattr(losses, "CHUNK_ELEMENTS", 5 * VOCAB)
    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=VOCAB, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, d_ff=8, max_positions=32,
        order=2)).eval()  # fmt: skip
    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, VOCAB, (3, 6), generator=g), torch.randint(3, VOCAB, (3, 8), generator=g)
    src_mask, tgt_mask = torch.ones_like(src), torch.ones_like(tgt)
    src_mask[0, 4:] = tgt_mask[1, 5:] = 0
    labels = tgt.masked_fill(tgt_mask == 0, -100)
    inputs = {"src_ids": src, "tgt_ids": tgt, "src_mask": src_mask, "tgt_mask": tgt_mask, "labels": labels}
    with torch.no_grad():
        assert torch.equal(model.target_score(**inputs).loss, model(**inputs).loss)


class CountingBackend:
    """A ``torch.compile`` backend that runs each graph as captured, counting the graphs compiled and their calls."""

    def __init__(self) -> None:
        self.graphs = self.calls = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list):
        self.graphs += 1

        def run(*args):
            self.calls += 1
            return graph.forward(*args)

        return run


def compiled_like_a_plain_module(build, inputs: dict):
    """(model, its CountingBackend): ``build()`` compiled by its own ``compile()``, after one training step on
    ``inputs`` checked to compile exactly the graphs ``nn.Module.compile`` alone makes of another ``build()``."""
    model, reference = build(), build()
    ours, alone = CountingBackend(), CountingBackend()
    model.compile(backend=ours)
    torch.nn.Module.compile(reference, backend=alone)
    for trained in (model, reference):
        trained(**inputs).loss.backward()
    assert ours.graphs == alone.graphs > 0
    return model, ours


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_a_compiled_causal_lm_scores_through_compiled_graphs_and_trains_through_the_same_ones(family):
    """trainer.compile (``model.compile()``) compiled the top-level forward only: validation and eval, which score
    through ``final_states``, ran eagerly (task.score called no compiled graph, counted). Compiling a causal LM now
    compiles its scoring too: task.score runs compiled graphs, with the eager numbers, compiled once; a training step
    compiles exactly the graphs ``nn.Module.compile`` alone makes, none twice."""
    task = build_task("causal_lm", info={})
    batch = batches(False)[0]
    eager, compiled = task.new_metrics(), task.new_metrics()
    task.score(tiny_model(family), batch, eager)
    model, ours = compiled_like_a_plain_module(lambda: tiny_model(family).train(), batch)
    model.eval()
    for _ in range(2):
        graphs, calls = ours.graphs, ours.calls
        task.score(model, batch, compiled)
        assert ours.calls > calls
    assert ours.graphs == graphs  # the second scoring compiled nothing
    assert compiled.compute() == eager.compute()


def test_a_compiled_translator_scores_through_compiled_graphs():
    """The translator's validation loss (target_score: its encoder and decoder states, outside forward) ran eagerly
    under trainer.compile, as the causal LM's did: it calls compiled graphs now, with the eager loss; a training
    step compiles exactly the graphs ``nn.Module.compile`` alone makes."""
    from markovformer.models.markov_translator import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

    def built():
        torch.manual_seed(0)
        return MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
            vocab_size=VOCAB, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=8, max_positions=32,
            order=2))  # fmt: skip

    g = torch.Generator().manual_seed(1)
    src, tgt = torch.randint(3, VOCAB, (3, 6), generator=g), torch.randint(3, VOCAB, (3, 8), generator=g)
    inputs = {"src_ids": src, "tgt_ids": tgt, "src_mask": torch.ones_like(src), "tgt_mask": torch.ones_like(tgt),
              "labels": tgt}  # fmt: skip
    eager = built().eval().target_score(**inputs).loss
    model, ours = compiled_like_a_plain_module(built, inputs)
    calls = ours.calls
    assert torch.equal(model.eval().target_score(**inputs).loss, eager)
    assert ours.calls > calls
