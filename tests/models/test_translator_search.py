"""MAT's greedy and beam search against a decoder whose next-token probabilities are a table per prefix (as in
test_markov_translator's eos-rank test), so that the best hypotheses can be worked out by hand or by brute force:
an eos among the top candidates leaves 2·beam extensions ranked, greedy stops once every row has ended, max_length 0
is refused, generate with a beam above one searches, and generate hands the model back in its own mode."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from test_markov_translator import BOS, EOS, PAD, _all_hypotheses, _config  # beside this file

from markovformer.models.markov_translator import (
    MarkovTranslatorForConditionalGeneration,
    beam_search,
    generate,
    generation,
    greedy_search,
)

A, B = 3, 4
VOCAB = 5


def _table_model(monkeypatch, table: dict[tuple[int, ...], dict[int, float]]):
    """A model whose next-token probabilities after the generated prefix (bos excluded) are ``table[prefix]``, eos
    for a prefix not in the table."""

    class Prefixes:  # each hypothesis's tokens so far, reordered with the beams
        def __init__(self, rows: int) -> None:
            self.rows, self.started = [()] * rows, False

        def reorder(self, rows: torch.Tensor) -> None:
            self.rows = [self.rows[row] for row in rows.tolist()]

    def step(model, tokens, state):
        if state.started:
            state.rows = [prefix + (token,) for prefix, token in zip(state.rows, tokens.tolist(), strict=True)]
        state.started = True
        probs = torch.zeros(len(state.rows), VOCAB, dtype=torch.float64)
        for row, prefix in enumerate(state.rows):
            for token, p in table.get(prefix, {EOS: 1.0}).items():
                probs[row, token] = p
        return probs.log()

    monkeypatch.setattr(generation, "start_decoding",
                        lambda model, src, mask=None, repeats=1: Prefixes(src.shape[0] * repeats))  # fmt: skip
    monkeypatch.setattr(generation, "decode_step", step)
    return type("Stub", (), {"config": _config(vocab_size=VOCAB), "training": False, "eval": lambda self: self,
                             "train": lambda self, mode=True: self})()  # fmt: skip


def _table_score(table, ids: list[int], length_penalty: float) -> float:
    """A hypothesis's log-probability under the table over its length ** length_penalty, as the search scores it."""
    logp, prefix = 0.0, ()
    for token in ids:
        p = table.get(prefix, {EOS: 1.0}).get(token, 0.0)
        logp += math.log(p) if p > 0 else -math.inf
        prefix += (token,)
    return logp / len(ids) ** length_penalty


def test_an_eos_among_the_top_beam_candidates_leaves_the_next_best_extensions_alive(monkeypatch):
    """fairseq's rule: each step ranks 2·beam extensions, so an eos in the top ``beam`` still leaves ``beam`` live
    hypotheses. At beam 2 step one ranks [eos] .40, [a] .32, [b] .28: [eos] ends and both [a] and [b] stay alive;
    step two ranks [b, eos] .28, [a, a] .192, [a, b] .128: [b, eos] ends, the second ended hypothesis, and the
    source is done with [b, eos] (log .28 / 2 = -0.636 > log .4 = -0.916). Ranking only ``beam`` extensions keeps
    [a] alone after step one and returns [a, a, eos] instead."""
    table = {(): {EOS: 0.40, A: 0.32, B: 0.28}, (A,): {A: 0.6, B: 0.4}, (B,): {EOS: 1.0}}
    model = _table_model(monkeypatch, table)
    result = beam_search(model, torch.tensor([[3, 4, 3]]), beam_size=2, max_length=3, length_penalty=1.0)
    assert result.sequences.tolist() == [[B, EOS]]
    assert math.isclose(float(result.scores[0]), math.log(0.28) / 2, rel_tol=1e-9)


def test_an_eos_outside_the_top_beam_candidates_does_not_end_a_hypothesis(monkeypatch):
    """fairseq's rule: of the 2·beam best extensions, an eos ends a hypothesis only among the first ``beam``. The
    decoder is stubbed with the probabilities below (each hypothesis's next token given its tokens so far, then eos).
    At beam 2 the second step ranks [a, eos] .25, [a, a] .20, [b, eos] .175, [b, a] .16: [b, eos], third, ends
    nothing, the search goes on and returns [a, a, eos] (log .2 / 3 = -0.54). Ending [b, eos] too would make two
    ended hypotheses, finish the source there and return [a, eos] (log .25 / 2 = -0.69)."""
    table = {(): {A: 0.5, B: 0.5}, (A,): {EOS: 0.5, A: 0.4, B: 0.05, BOS: 0.05},
             (B,): {EOS: 0.35, A: 0.32, B: 0.03, BOS: 0.3}}  # fmt: skip
    model = _table_model(monkeypatch, table)
    result = beam_search(model, torch.tensor([[3, 4, 3]]), beam_size=2, max_length=5, length_penalty=1.0)
    assert result.sequences.tolist() == [[A, A, EOS]]
    assert math.isclose(float(result.scores[0]), math.log(0.2) / 3, rel_tol=1e-9)


def test_greedy_stops_once_every_row_has_ended_and_adds_no_padding_column(monkeypatch):
    """"stops when every row has emitted eos": rows ending after 2 tokens give 2 columns, not max_length 10, each
    scored log(.7 · .9) / 2 by hand; a row ending after 3 gives 3."""
    table = {(): {A: 0.7, B: 0.3}, (A,): {EOS: 0.9, A: 0.1}, (B,): {A: 1.0}}
    model = _table_model(monkeypatch, table)
    result = greedy_search(model, torch.tensor([[3], [4]]), max_length=10, length_penalty=1.0)
    assert result.sequences.tolist() == [[A, EOS], [A, EOS]]  # both rows see the same table
    for row in range(2):
        assert math.isclose(float(result.scores[row]), math.log(0.7 * 0.9) / 2, rel_tol=1e-9)
    table = {(): {A: 0.7, B: 0.3}, (A,): {A: 0.9, EOS: 0.1}, (A, A): {EOS: 1.0}}
    model = _table_model(monkeypatch, table)
    assert greedy_search(model, torch.tensor([[3]]), max_length=10).sequences.tolist() == [[A, A, EOS]]


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_max_length_zero_is_refused_naming_it(monkeypatch, search):
    """max_length counts generated tokens and must lie in [1, max_positions]: 0 is refused by name (a greedy search
    of no step failed in torch.stack instead)."""
    model = _table_model(monkeypatch, {})
    with pytest.raises(ValueError, match="max_length=0"):
        if search == "greedy":
            greedy_search(model, torch.tensor([[3]]), max_length=0)
        else:
            beam_search(model, torch.tensor([[3]]), beam_size=2, max_length=0)


@pytest.mark.parametrize("beam_size", [2, 3])
def test_generate_with_a_beam_above_one_searches_and_finds_what_greedy_misses(monkeypatch, beam_size):
    """generate(beam_size=2) is beam search, not greedy: greedy takes [a] (.55) and ends with [a, b, eos]
    (.55 · .5 · 1), while [b, eos] (.45) is the best hypothesis, found by scoring every hypothesis."""
    table = {(): {A: 0.55, B: 0.45}, (A,): {A: 0.5, B: 0.5}, (B,): {EOS: 1.0}}
    model = _table_model(monkeypatch, table)
    scores = {tuple(ids): _table_score(table, ids, 1.0) for ids in _all_hypotheses(max_length=4)}
    best = max(scores, key=scores.get)
    assert list(best) == [B, EOS] and PAD not in best
    result = generate(model, torch.tensor([[3]]), beam_size=beam_size, max_length=4, length_penalty=1.0)
    assert result.sequences.tolist() == [[B, EOS]]
    assert math.isclose(float(result.scores[0]), scores[best], rel_tol=1e-9)
    greedy = generate(model, torch.tensor([[3]]), beam_size=1, max_length=4, length_penalty=1.0)
    assert greedy.sequences[0, 0].item() == A  # so the check above tells the searches apart


@pytest.mark.parametrize("beam_size", [1, 2])
@pytest.mark.parametrize("training", [False, True])
def test_generate_runs_in_eval_mode_and_gives_the_model_back_in_its_own_mode(beam_size, training):
    """Documented: generate runs in eval mode and restores the model's mode afterwards (an eval model handed back
    in train mode would sample dropout in its next forward)."""
    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(_config(vocab_size=7, order=2, dropout=0.5)).train(training)
    src = torch.tensor([[3, 4, 5]])
    first = generate(model, src, beam_size=beam_size, max_length=4)
    assert model.training is training
    assert all(module.training is training for module in model.modules())
    assert torch.equal(generate(model, src, beam_size=beam_size, max_length=4).sequences, first.sequences)  # eval


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_each_source_stops_at_its_own_max_length_and_an_overlong_one_at_max_length(monkeypatch, search):
    """``max_lengths`` (B,) caps each source within ``max_length``: a decoder that never emits eos (a .6, b .4 after
    every prefix of a and b of up to 5 tokens) gives [a, a] under a cap of 2 and [a, a, a] under a cap of 50 cut to
    max_length 3, both scored log .6 (n · log .6 / n). A cap one step late gave the first row a third token; an
    overlong cap left uncut ran the second row on to the end of the table."""
    table = {prefix: {A: 0.6, B: 0.4} for n in range(6) for prefix in itertools.product((A, B), repeat=n)}
    model = _table_model(monkeypatch, table)
    src, caps = torch.tensor([[3], [4]]), torch.tensor([2, 50])
    if search == "greedy":
        result = greedy_search(model, src, max_length=3, length_penalty=1.0, max_lengths=caps)
    else:
        result = beam_search(model, src, beam_size=2, max_length=3, length_penalty=1.0, max_lengths=caps)
    assert result.sequences.tolist() == [[A, A, PAD], [A, A, A]]
    assert torch.allclose(result.scores, torch.full((2,), math.log(0.6), dtype=result.scores.dtype))


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_without_max_length_a_search_runs_to_max_positions(monkeypatch, search):
    """A decoder that never emits eos stops at the config's max_positions (32) when no max_length is given."""
    model = _table_model(monkeypatch, {(A,) * n: {A: 1.0} for n in range(40)})
    if search == "greedy":
        result = greedy_search(model, torch.tensor([[3]]))
    else:
        result = beam_search(model, torch.tensor([[3]]), beam_size=2)
    assert result.sequences.tolist() == [[A] * model.config.max_positions]


@pytest.mark.parametrize(
    ("caps", "message"),
    [
        (torch.tensor([[2, 3]]), r"max_lengths must be a \(B,\) = \(2,\) tensor of ints; got \(1, 2\)"),
        (torch.tensor([2]), r"max_lengths must be a \(B,\) = \(2,\) tensor of ints; got \(1,\)"),
        ([2, 3], r"max_lengths must be a \(B,\) = \(2,\) tensor of ints; got list"),
        (torch.tensor([2.0, 3.0]), r"max_lengths must hold integers >= 1; got \[2.0, 3.0\]"),
        (torch.tensor([2, 0]), r"max_lengths must hold integers >= 1; got \[2, 0\]"),
        (torch.tensor([True, True]), r"max_lengths must hold integers >= 1; got \[True, True\]"),
    ],
)
def test_bad_max_lengths_are_named(monkeypatch, caps, message):
    model = _table_model(monkeypatch, {})
    with pytest.raises(ValueError, match=message):
        greedy_search(model, torch.tensor([[3], [4]]), max_length=3, max_lengths=caps)


def test_generate_options_the_translator_cannot_follow_are_named_and_zero_new_tokens_give_none():
    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(_config(vocab_size=7, order=2)).eval()
    src = torch.tensor([[3, 4, 5], [5, 4, 3]])
    assert model.generate(src, max_new_tokens=0).shape == (2, 0)
    with pytest.raises(ValueError, match=f"eos_token_id=1: this model uses its config's eos_token_id={EOS}"):
        model.generate(src, max_new_tokens=3, eos_token_id=1)
    with pytest.raises(ValueError, match="suppress_tokens: beam search does not suppress tokens"):
        model.generate(src, max_new_tokens=3, num_beams=2, suppress_tokens=[3])
    with pytest.raises(ValueError, match=r"labels must have the shape of tgt_ids \(2, 3\); got \(2, 2\)"):
        model(src, tgt_ids=src, labels=src[:, :2])


@pytest.mark.parametrize("order, transparent", [(2, True), (None, False)])
@pytest.mark.parametrize("beam_size", [1, 3])
def test_a_search_encodes_each_source_and_its_cross_attention_keys_once(order, transparent, beam_size):
    """SPEC 3: the source memory's cross-attention keys and values are computed once per sentence: one encoder pass
    and one key/value projection per decoder layer over the B sources, whatever the steps and beams."""
    torch.manual_seed(0)
    model = MarkovTranslatorForConditionalGeneration(_config(vocab_size=7, order=order, transparent=transparent,
                                                             eos_token_id=6)).eval()  # fmt: skip
    calls = []

    def counted(name, function):
        def run(memory, *args, **kwargs):
            calls.append((name, memory.shape[0]))
            return function(memory, *args, **kwargs)

        return run

    model.encode = counted("encode", model.encode)
    for index, layer in enumerate(model.decoder_layers):
        layer.cross_attention.keys_values = counted(f"keys_values {index}", layer.cross_attention.keys_values)
    src = torch.randint(3, 6, (2, 5), generator=torch.Generator().manual_seed(1))
    output = generate(model, src, beam_size=beam_size, max_length=6)
    assert output.sequences.shape[1] > 2  # several decoding steps ran
    layers = len(model.decoder_layers)
    assert sorted(calls) == sorted([("encode", 2)] + [(f"keys_values {index}", 2) for index in range(layers)])
