import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.models import generation
from markovformer.models.generation import GenerationConfig, decoding_loop, sample_next_token


def test_top_k_and_top_p_restrict_the_support_exactly():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, -3.0]]).expand(4000, -1)
    generator = torch.Generator().manual_seed(0)
    top2 = sample_next_token(logits, top_k=2, generator=generator)
    assert set(top2.tolist()) == {0, 1}
    probs = logits[0].softmax(-1)
    # the nucleus is the smallest prefix of the sorted tokens whose mass reaches top_p
    nucleus_p = float(probs[:2].sum()) + 1e-3
    nucleus = sample_next_token(logits, top_p=nucleus_p, generator=generator)
    assert set(nucleus.tolist()) == {0, 1, 2}
    # within the support, frequencies follow the renormalised probabilities
    expected = probs[:2] / probs[:2].sum()
    observed = torch.bincount(top2, minlength=2)[:2].float() / len(top2)
    torch.testing.assert_close(observed, expected, atol=0.03, rtol=0)


def test_a_nucleus_whose_mass_reaches_top_p_exactly_keeps_no_further_token():
    """"The smallest prefix whose mass reaches top_p": with probabilities 1/2, 1/4, 1/8, 1/8 (exact in float64) a
    top_p of 0.5 is met by the first token alone and 0.75 by the first two; keeping a token whose preceding mass
    equals top_p drew the second (and the tied pair) as well."""
    logits = torch.tensor([4.0, 2.0, 1.0, 1.0], dtype=torch.float64).log().expand(2000, -1)
    for top_p, support in ((0.5, {0}), (0.75, {0, 1})):
        drawn = sample_next_token(logits, top_p=top_p, generator=torch.Generator().manual_seed(0))
        assert set(drawn.tolist()) == support


def test_top_p_keeps_every_token_tied_with_the_last_it_keeps_whatever_their_ids():
    """With probabilities 0.4, 0.3, 0.3 the nucleus of mass 0.5 ends inside a tie: both tied tokens stay (as top_k
    keeps ties), with equal chances, in either order of ids (the sorted prefix alone kept the one of lower id)."""
    for probs in ([0.4, 0.3, 0.3, 1e-4], [0.3, 0.3, 0.4, 1e-4]):
        logits = torch.tensor(probs).log().expand(20000, -1)
        counts = torch.bincount(sample_next_token(logits, top_p=0.5, generator=torch.Generator().manual_seed(0)),
                                minlength=4)  # fmt: skip
        tied = [i for i, p in enumerate(probs) if p == 0.3]
        assert counts[3] == 0 and all(counts[i] > 5000 for i in tied)
        assert abs(int(counts[tied[0]]) - int(counts[tied[1]])) < 550  # 5 standard deviations of the difference


def test_greedy_and_degenerate_settings_take_the_argmax():
    logits = torch.randn(16, 9, generator=torch.Generator().manual_seed(1))
    best = logits.argmax(-1)
    assert torch.equal(sample_next_token(logits, temperature=0.0), best)
    assert torch.equal(sample_next_token(logits, top_k=1), best)
    assert torch.equal(sample_next_token(logits, top_p=1e-6), best)


@pytest.mark.parametrize("bad", [{"temperature": -1.0}, {"top_k": 0}, {"top_p": 0.0}, {"top_p": 1.5}])
def test_bad_sampling_settings_name_the_argument(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        sample_next_token(torch.zeros(1, 3), **bad)


def test_greedy_generation_extends_with_the_models_own_argmax():
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=7, d_model=16, n_heads=2, n_layers=1))
    prompt = torch.tensor([[1, 2, 3]])
    out = model.generate(prompt, max_new_tokens=5)
    assert torch.equal(out[:, :3], prompt) and out.shape == (1, 8)
    for step in range(3, 8):
        assert int(out[0, step]) == int(model(out[:, :step]).logits[0, -1].argmax())


def test_activation_checkpointing_gives_the_same_loss_and_gradients():
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=7, d_model=16, n_heads=2, n_layers=2, gru=True)
    model = MarkovianTransformerForCausalLM(config).double()
    ids = torch.randint(0, 7, (2, 12))
    plain = model(ids, labels=ids).loss
    plain_grads = torch.autograd.grad(plain, list(model.parameters()), allow_unused=True)
    model.model.gradient_checkpointing = True
    checkpointed = model(ids, labels=ids).loss
    grads = torch.autograd.grad(checkpointed, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(checkpointed, plain)
    for a, b in zip(grads, plain_grads, strict=True):
        if a is not None:
            torch.testing.assert_close(a, b)


def test_a_banned_token_is_never_drawn_even_when_it_is_the_most_likely():
    from markovformer.models.generation import sample_next_token

    logits = torch.tensor([[5.0, 1.0, 0.5, 0.0]]).repeat(2000, 1)
    generator = torch.Generator().manual_seed(0)
    assert int(sample_next_token(logits[:1], temperature=0.0, banned_token_id=0)) == 1
    drawn = sample_next_token(logits, temperature=1.0, generator=generator, banned_token_id=0)
    assert 0 not in drawn.tolist()
    counts = torch.bincount(drawn, minlength=4)[1:].double() / len(drawn)
    expected = torch.tensor([1.0, 0.5, 0.0]).exp() / torch.tensor([1.0, 0.5, 0.0]).exp().sum()
    assert torch.allclose(counts, expected.double(), atol=0.04)  # the rest keep their relative probabilities
    plain = sample_next_token(logits[:1], temperature=0.0)
    assert int(plain) == 0


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_sampling_frequencies_follow_the_softmax_of_the_logits_over_the_temperature(temperature):
    """20,000 draws from fixed logits: each token's frequency is softmax(logits / T) within 5 standard errors."""
    logits = torch.tensor([1.5, 0.5, 0.0, -1.0, -2.0])
    draws = 20000
    drawn = sample_next_token(logits.expand(draws, -1), temperature=temperature,
                              generator=torch.Generator().manual_seed(0))  # fmt: skip
    observed = torch.bincount(drawn, minlength=5).double() / draws
    expected = (logits.double() / temperature).softmax(-1)
    standard_error = (expected * (1 - expected) / draws).sqrt()
    assert torch.all((observed - expected).abs() < 5 * standard_error), (observed, expected)
    # the check has power: the other temperature (logits * T, where this one is 1/T) lies far outside it
    wrong = (logits.double() * temperature).softmax(-1)
    assert torch.any((wrong - expected).abs() > 20 * standard_error)


@pytest.mark.parametrize(("pad_token_id", "fill"), [(0, 0), (None, 2)], ids=["pad_token_id", "no_pad_token_id"])
def test_a_row_that_has_emitted_eos_holds_padding_while_the_others_decode(pad_token_id, fill):
    """A stub step whose argmax is row 0: eos (2) then 4, 4; row 1: 3, 3, eos. Row 0 ends first and holds
    pad_token_id (eos when None) while row 1 decodes, whatever the logits prefer for it, and that is what is fed
    back; the loop stops once row 1 ends, before max_new_tokens. Unfilled, row 0 would read 2, 4, 4; filled with
    eos whatever pad_token_id is, 2, 2, 2."""
    argmax = torch.tensor([[2, 4, 4], [3, 3, 2]])
    fed = []

    def step(tokens):
        fed.append(tokens.tolist())
        return torch.nn.functional.one_hot(argmax[:, len(fed)], 6).float()

    config = GenerationConfig(max_new_tokens=6, eos_token_id=2, pad_token_id=pad_token_id)
    out = decoding_loop(torch.tensor([[1], [5]]), torch.nn.functional.one_hot(argmax[:, 0], 6).float(), step, config)
    assert out.tolist() == [[1, 2, fill, fill], [5, 3, 3, 2]]
    assert fed == [[2, 3], [fill, 3]]


def test_top_p_stops_at_the_first_token_whose_prefix_reaches_it_exactly():
    """Probabilities 1/2, 1/4, 1/8, 1/8 (exact in float32): the prefix {0} already holds top_p = 0.5, so the nucleus
    is token 0 alone (the smallest prefix whose mass reaches top_p); at 0.75, tokens 0 and 1."""
    logits = torch.tensor([[2.0, 1.0, 0.0, 0.0]]) * torch.tensor(2.0).log()
    probs = logits.softmax(-1)
    assert torch.equal(probs.cumsum(-1) - probs, torch.tensor([[0.0, 0.5, 0.75, 0.875]]))  # the boundary is exact
    for top_p, support in ((0.5, {0}), (0.75, {0, 1})):
        drawn = sample_next_token(logits.expand(400, -1), top_p=top_p, generator=torch.Generator().manual_seed(0))
        assert set(drawn.tolist()) == support, top_p


def test_the_loop_feeds_back_every_token_but_the_last():
    """max_new_tokens tokens take max_new_tokens - 1 steps (a model forward each): the logits after the last token
    are never read."""
    fed = []

    def step(tokens):
        fed.append(tokens.tolist())
        return torch.nn.functional.one_hot(tokens + 1, 10).float()

    out = decoding_loop(torch.tensor([[0]]), torch.nn.functional.one_hot(torch.tensor([1]), 10).float(), step,
                        GenerationConfig(max_new_tokens=4))  # fmt: skip
    assert out.tolist() == [[0, 1, 2, 3, 4]] and fed == [[1], [2], [3]]


@pytest.mark.parametrize("temperature", [1e-40, 1e-300, 5e-324])
def test_a_tiny_temperature_samples_among_the_tied_maxima_as_its_limit_says(temperature):
    """As T -> 0 the softmax of logits / T puts all mass on the maxima, evenly on tied ones. Divided in float32,
    1e-40 made the maximum inf and, shifted by softmax, nan: torch's sampler raised. The suppressed token (-inf) and
    the lower ones never come; the two tied maxima come about equally often."""
    logits = torch.tensor([[1.0, 0.999, 1.0, float("-inf"), -5.0]]).expand(4000, -1)
    drawn = sample_next_token(logits, temperature=temperature, generator=torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn, minlength=5)
    assert counts[1] == counts[3] == counts[4] == 0
    assert counts[0] + counts[2] == 4000 and abs(counts[0].item() - 2000) < 5 * (4000 * 0.25) ** 0.5


def _nucleus_by_sorting_all(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """The nucleus as its definition reads (the reference): sort every token, keep the smallest prefix whose mass
    reaches top_p and every token tied with its last; the others at -inf."""
    sorted_logits = logits.sort(dim=-1, descending=True).values
    probs = sorted_logits.softmax(-1)
    kept = ((probs.cumsum(-1) - probs) < top_p).sum(-1, keepdim=True)
    return logits.masked_fill(logits < sorted_logits.gather(-1, kept - 1), float("-inf"))


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.9, 0.999])
def test_a_nucleus_among_the_likeliest_tokens_is_the_one_sorting_every_token_finds(top_p):
    """At V = 3000 the nucleus is looked for among the likeliest tokens first: rows peaked (a nucleus of a few
    tokens), flat (one past them: every token sorted), with ties at its edge, and with tokens at -inf (top_k); each
    alone and together."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 3000, generator=g, dtype=torch.float64)
    logits[0] *= 8  # peaked
    logits[2] = (4 * logits[2]).round()  # many ties
    logits[3, 1000:] = float("-inf")
    for rows in (slice(None), *(slice(row, row + 1) for row in range(4))):  # a flat row sorts the whole batch
        assert torch.equal(generation.nucleus(logits[rows], top_p), _nucleus_by_sorting_all(logits[rows], top_p))


def test_a_small_nucleus_of_a_large_vocabulary_sorts_no_whole_row():
    """Sorting every token to find a nucleus of a few cost 3.5 ms a step at V = 50,257 (the model's head: 0.3 ms at
    d_model 64); the likeliest tokens are taken first (topk), and a row is sorted only when its nucleus reaches
    past them."""
    logits = 8 * torch.randn(2, 50_257, generator=torch.Generator().manual_seed(0))
    called = []

    class Calls(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            called.append(func.__name__.split(".")[0])
            return func(*args, **(kwargs or {}))

    with Calls():
        sample_next_token(logits, top_p=0.9, generator=torch.Generator().manual_seed(0))
    assert "sort" not in called and "topk" in called
