"""The one ``generate`` of every family: greedy ids are the argmax of the teacher-forced logits at every step;
the Markovian Transformer's decoding through its layers' own states (key/value caches, running sums, recurrent
states) equals its full forward at every step, left-padded prompts included, for every causal kind, the hybrids
and the GRU/minGRU injections; local layers keep W + 1 cache entries and no state grows but a global cache (and
Hyena's, the inputs of its long convolutions)."""

from __future__ import annotations

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerModel,
    MarkovTranslatorConfig,
    MarkovTranslatorForConditionalGeneration,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
    VariationalMarkovTransformer,
    VMTConfig,
)
from markovformer.layers.baselines.hyena import ImplicitFilter
from markovformer.layers.kv_cache import KeyValueCache
from markovformer.layers.registry import ATTENTION_KINDS

VOCAB = 11
INCREMENTAL = {  # every causal kind carries a decoding state: generate feeds one token per step
    "markov_local": dict(attention="markov", max_order=2, window=3),
    "markov_global": dict(attention="markov", max_order=2, scope="global"),
    "markov_query_gate_sinusoidal": dict(attention="markov", max_order=3, gate_input="query", position="sinusoidal"),
    "softmax_local": dict(attention="softmax", scope="local", window=2),
    "softmax_global_learned": dict(attention="softmax", position="learned", max_positions=40),
    "mixed": dict(attention=["markov", "softmax"], max_order=2, window=4, gate="mlp"),
    "alibi_local": dict(attention="alibi", scope="local", window=3, position="none"),
    "alibi_global": dict(attention="alibi", position="none"),
    "forgetting_local": dict(attention="forgetting", scope="local", window=3, position="none"),
    "forgetting_global": dict(attention="forgetting", position="none"),
    "t5_dynamic_local": dict(attention=[{"kind": "t5_bias", "num_buckets": 8, "max_distance": 6}, "dynamic_bias"],
                             scope="local", window=3, position="none"),
    "t5_dynamic_global": dict(attention=[{"kind": "t5_bias", "num_buckets": 8, "max_distance": 6}, "dynamic_bias"],
                              position="none"),
    "stick_breaking_local": dict(attention="stick_breaking", scope="local", window=3, position="none"),
    "stick_breaking_global": dict(attention="stick_breaking", position="none"),
    "selective_local": dict(attention="selective", scope="local", window=3),
    "selective_global": dict(attention="selective"),
    "cope_local": dict(attention="cope", scope="local", window=3, position="none"),
    "cope_global": dict(attention=[{"kind": "cope", "npos_max": 4}, "cope"], position="none"),
    "rff": dict(attention="rff", num_features=8, chunk_size=4),
    "hybrid_split": dict(attention="hybrid_split", max_order=2, num_features=8),
    "hybrid_parallel": dict(attention="hybrid_parallel", max_order=2, num_features=8),
    "retnet": dict(attention="retnet", chunk_size=4),
    "rwkv": dict(attention="rwkv"),
    "s4d": dict(attention="s4d", ssm_state_size=8),
    "h3": dict(attention=[{"kind": "h3", "ssm_state_size": 8, "shift_taps": 3, "head_dim": 2}, "h3"],
               ssm_state_size=4),
    "hyena": dict(attention="hyena"),
    "scan": dict(attention="scan"),
    "gru": dict(attention="gru"),
    "gru_injection": dict(attention="markov", max_order=2, gru=True),
    "min_gru_injection": dict(attention="markov", max_order=2, gru=True, gru_kind="min_gru"),
}
GROWING = {"hyena", "markov_global", "markov_query_gate_sinusoidal", "softmax_global_learned", "alibi_global",
                    "forgetting_global", "t5_dynamic_global", "stick_breaking_global", "cope_global",
                    "selective_global"}  # fmt: skip


def _kinds(options: dict) -> set[str]:
    attention = options["attention"]
    return {attention} if isinstance(attention, str) else {e["kind"] if isinstance(e, dict) else e for e in attention}


# GPT-2's query/key/value and output biases (attention_bias) on a case of each kind that takes them
WITH_ATTENTION_BIAS = {f"{name}_attention_bias": dict(INCREMENTAL[name], attention_bias=True) for name in (
    "markov_global", "softmax_global_learned", "mixed", "alibi_local", "forgetting_global", "t5_dynamic_local",
    "stick_breaking_global", "selective_local", "cope_global", "rff", "hybrid_split", "hybrid_parallel", "retnet")}


def test_every_kind_that_decodes_incrementally_is_in_incremental():
    """docs/extending.md's "An attention kind" asks for a line in INCREMENTAL: without it no test decodes the kind (and
    one in WITH_ATTENTION_BIAS when it takes attention_bias)."""
    covered = set().union(*map(_kinds, INCREMENTAL.values()))
    for kind in set(ATTENTION_KINDS) - covered:
        try:
            config = MarkovianTransformerConfig(vocab_size=VOCAB, d_model=16, n_layers=1, n_heads=2, attention=kind)
        except ValueError:  # a kind a causal model refuses (linformer)
            continue
        assert not MarkovianTransformerForCausalLM(config).model.decodes_incrementally, f"add {kind!r} to INCREMENTAL"
    with_bias = set().union(*map(_kinds, WITH_ATTENTION_BIAS.values()))
    assert with_bias == covered & {kind for kind, entry in ATTENTION_KINDS.items() if entry.projection_biases}


def _perturbed(model: torch.nn.Module, seed: int = 0, scale: float = 0.25) -> torch.nn.Module:
    """Weights far from the 0.02 init, so that every path (biases, gates, positions) matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator).to(parameter.dtype))
    return model.eval()


def _markovian(options: dict, seed: int = 0) -> MarkovianTransformerForCausalLM:
    torch.manual_seed(seed)
    config = MarkovianTransformerConfig(**{"vocab_size": VOCAB, "d_model": 16, "n_layers": 2, "n_heads": 2, **options})
    return _perturbed(MarkovianTransformerForCausalLM(config), seed)


def _left_padded(batch: int = 3, length: int = 6, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    mask[2, :4] = 0
    return ids, mask


def _assert_greedy_is_teacher_forced_argmax(model, prompt, mask, new):
    generated = model.generate(prompt, mask, max_new_tokens=new)
    assert generated.shape == (prompt.shape[0], prompt.shape[1] + new) and torch.equal(generated[:, :prompt.shape[1]],
                                                                                       prompt)  # fmt: skip
    full_mask = None if mask is None else torch.cat([mask, torch.ones_like(generated[:, prompt.shape[1] :])], dim=1)
    with torch.no_grad():
        logits = model(generated, attention_mask=full_mask).logits
    assert torch.equal(logits[:, prompt.shape[1] - 1 : -1].argmax(-1), generated[:, prompt.shape[1] :])


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_markovian_greedy_generation_is_the_teacher_forced_argmax(name, padded):
    model = _markovian(INCREMENTAL[name])
    assert model.model.decodes_incrementally
    prompt, mask = _left_padded()
    _assert_greedy_is_teacher_forced_argmax(model, prompt, mask if padded else None, new=9)


@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_a_left_padded_row_scores_and_decodes_as_it_does_alone(name):
    """Padding on the left changes nothing for a row's real tokens: their logits equal the row's run alone, in the
    full forward and in generate (learned and sinusoidal positions count each row's real tokens, as rotary and the
    relative kinds do by construction)."""
    model = _markovian(INCREMENTAL[name])
    ids, mask = _left_padded()
    with torch.no_grad():
        padded = model(ids, attention_mask=mask).logits
        generated = model.generate(ids, mask, max_new_tokens=5)
        for row in range(ids.shape[0]):
            real = mask[row].bool()
            alone = ids[row : row + 1, real]
            torch.testing.assert_close(padded[row, real], model(alone).logits[0], rtol=0, atol=1e-5)
            assert torch.equal(generated[row, ids.shape[1] :], model.generate(alone, max_new_tokens=5)[0, -5:])


@pytest.mark.parametrize("prompt_length", [6, 10])
def test_past_its_learned_positions_each_token_is_the_argmax_over_the_last_max_positions_tokens(prompt_length):
    """Learned positions stop at max_positions (8): a prompt of 6 (or 10) tokens and 6 new ones run past them, so
    generation re-runs the last 8 tokens at each step. Every new token is the argmax of the full forward over the 8
    tokens before it; over the last 7 some are not (the check has power)."""
    model = _markovian(dict(attention="softmax", position="learned", max_positions=8))
    prompt = torch.randint(0, VOCAB, (3, prompt_length), generator=torch.Generator().manual_seed(2))
    generated = model.generate(prompt, max_new_tokens=6)
    assert generated.shape == (3, prompt_length + 6) and torch.equal(generated[:, :prompt_length], prompt)
    shorter = []
    with torch.no_grad():
        for t in range(prompt_length, prompt_length + 6):
            assert torch.equal(model(generated[:, max(t - 8, 0) : t]).logits[:, -1].argmax(-1), generated[:, t])
            shorter.append(model(generated[:, max(t - 7, 0) : t]).logits[:, -1].argmax(-1))
    assert not torch.equal(torch.stack(shorter, dim=1), generated[:, prompt_length:])


def test_past_its_learned_positions_a_left_padded_row_generates_as_it_does_alone():
    """The re-run path with left padding (6 + 6 tokens > max_positions 8): the windows it re-runs hold a row's
    padding at first, and learned positions count each row's real tokens, so a padded row generates what it does
    alone."""
    model = _markovian(dict(attention="softmax", position="learned", max_positions=8))
    ids, mask = _left_padded()
    generated = model.generate(ids, mask, max_new_tokens=6)
    for row in range(ids.shape[0]):
        alone = ids[row : row + 1, mask[row].bool()]
        assert torch.equal(generated[row, ids.shape[1] :], model.generate(alone, max_new_tokens=6)[0, -6:]), row


def _state_tensors(state) -> list[torch.Tensor]:
    if isinstance(state, torch.Tensor):
        return [state]
    if isinstance(state, KeyValueCache):
        return [state.keys, state.values]
    items = state.values() if isinstance(state, dict) else state if isinstance(state, list | tuple) else []
    return [tensor for item in items for tensor in _state_tensors(item)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("name", list(INCREMENTAL) + list(WITH_ATTENTION_BIAS))
def test_prefill_then_steps_equal_the_full_forward_at_every_step(name, padded, dtype):
    model = _markovian({**INCREMENTAL, **WITH_ATTENTION_BIAS}[name]).to(dtype)
    ids, mask = _left_padded(length=17)
    if not padded:
        mask = torch.ones_like(mask)
    prompt = 3  # row 2's padding outlasts the prompt: a prefill of padding only, then padded steps
    with torch.no_grad():
        full = model(ids, attention_mask=mask if padded else None).logits
        state: dict = {}
        steps = [model(ids[:, :prompt], attention_mask=mask[:, :prompt], state=state).logits]
        for t in range(prompt, ids.shape[1]):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, t : t + 1], state=state).logits)
    assert state["length"] == ids.shape[1]
    real = mask.bool()[..., None]  # padded positions carry no prediction
    torch.testing.assert_close(torch.cat(steps, dim=1) * real, full * real, rtol=0,
                               atol=1e-5 if dtype == torch.float32 else 1e-10)  # fmt: skip


@pytest.mark.parametrize("name", ["markov_query_gate_sinusoidal", "softmax_global_learned", "rff", "hybrid_split"])
def test_a_first_call_whose_padded_rows_are_padding_only_still_counts_their_real_tokens(name):
    """A prefill of 2 positions in which every padded row is padding only (rows 1 and 2 begin with 2 and 4 pads):
    such a mask reads as right-padded, so the state did not start counting real tokens and the steps after it put
    each row's tokens at the state's length, counting its padding (2.6 in logits off the full forward for learned
    positions). Positions that move are those of additive embeddings and of rotary under random features."""
    model = _markovian(INCREMENTAL[name]).to(torch.float64)
    ids, mask = _left_padded(length=9)
    with torch.no_grad():
        full = model(ids, attention_mask=mask).logits
        state: dict = {}
        steps = [model(ids[:, :2], attention_mask=mask[:, :2], state=state).logits]
        for t in range(2, ids.shape[1]):
            steps.append(model(ids[:, t : t + 1], attention_mask=mask[:, t : t + 1], state=state).logits)
    real = mask.bool()[..., None]
    torch.testing.assert_close(torch.cat(steps, dim=1) * real, full * real, rtol=0, atol=1e-10)


@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
@pytest.mark.parametrize("name", list(INCREMENTAL))
def test_a_state_continued_several_tokens_at_a_time_equals_the_full_forward(name, padded):
    """Chunks longer than one token after the prefill (speculative decoding, a prompt fed in parts): a local cache
    of W + 1 slots must still show each new query its W previous keys (it lost the oldest ones when all the chunk's
    keys were written before attending)."""
    model = _markovian(INCREMENTAL[name]).to(torch.float64)
    ids, mask = _left_padded(length=17)
    if not padded:
        mask = torch.ones_like(mask)
    with torch.no_grad():
        full = model(ids, attention_mask=mask if padded else None).logits
        state: dict = {}
        pieces, start = [], 0
        for size in (3, 2, 5, 1, 4, 2):
            piece = slice(start, start + size)
            pieces.append(model(ids[:, piece], attention_mask=mask[:, piece], state=state).logits)
            start += size
    real = mask.bool()[..., None]
    torch.testing.assert_close(torch.cat(pieces, dim=1) * real, full * real, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", sorted(set(INCREMENTAL) - GROWING))
def test_the_decoding_state_of_a_local_or_recurrent_layer_never_grows(name):
    model = _markovian(INCREMENTAL[name])
    state: dict = {}
    sizes = []
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(2)), state=state)
        for t in range(60):
            model(torch.full((2, 1), t % VOCAB), state=state)
            sizes.append(sum(tensor.numel() for tensor in _state_tensors(state)))
    assert len(set(sizes)) == 1, sizes


def test_local_caches_keep_the_last_window_plus_one_positions_and_global_ones_grow_by_doubling():
    local = _markovian(INCREMENTAL["mixed"])  # window 4 in both layers
    global_model = _markovian(INCREMENTAL["markov_global"])
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(2))
    local_state, global_state, capacities = {}, {}, set()
    with torch.no_grad():
        local(prompt, state=local_state)
        global_model(prompt, state=global_state)
        for t in range(100):
            token = torch.full((2, 1), t % VOCAB)
            local(token, state=local_state)
            global_model(token, state=global_state)
            capacities.add(global_state["layers"][0]["mixer"]["cores"][0]["cache"].capacity)
    for layer in local_state["layers"]:
        cache = layer["mixer"]["cores"][0]["cache"]
        assert cache.capacity == 5 and cache.keys.shape[2] == 10  # W + 1 (stored twice), however long the generation
        assert cache.visible()[2].tolist() == list(range(98, 103))  # the last W + 1 positions, in order
    assert capacities == {16, 32, 64, 128}  # amortised O(1) appends, never a copy per token


def test_hyena_keeps_its_convolutions_inputs_in_storage_that_doubles_and_computes_its_filters_per_doubling(
    monkeypatch,
):  # fmt: skip
    lengths, original = [], ImplicitFilter.forward
    monkeypatch.setattr(ImplicitFilter, "forward", lambda self, size: lengths.append(size) or original(self, size))
    model = _markovian(INCREMENTAL["hyena"])  # two layers
    state, capacities = {}, set()
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(2)), state=state)
        for t in range(100):
            model(torch.full((2, 1), t % VOCAB), state=state)
            capacities.add(state["layers"][0]["mixer"]["cache"].capacity)
    assert capacities == {16, 32, 64, 128}  # amortised O(1) appends, never a copy per token
    assert lengths == [64, 64, 130, 130]  # each layer's taps for 64 lags, then for twice the 65 the 62nd step needs
    lengths.clear()
    state = {}
    for t in range(3):  # with gradients on, every call computes its taps (a kept table could outlive the weights)
        model(torch.full((2, 1), t), state=state)
    assert lengths == [1, 1, 2, 2, 3, 3]


def test_a_model_that_carries_no_state_says_so_when_given_one():
    """Every causal kind decodes incrementally; a bidirectional model reads the whole sequence."""
    model = MarkovianTransformerModel(MarkovianTransformerConfig(vocab_size=VOCAB, d_model=16, n_layers=2, n_heads=2,
                                                                 attention="hyena", causal=False))  # fmt: skip
    with pytest.raises(ValueError, match=r"\['hyena'\] layers, causal=False\) cannot decode incrementally"):
        model(torch.zeros(1, 2, dtype=torch.long), state={})


def test_eos_ends_a_row_and_generation_stops_once_every_row_has():
    model = _markovian(INCREMENTAL["markov_local"])
    prompt, _ = _left_padded()
    free = model.generate(prompt, max_new_tokens=12)
    eos = int(free[0, prompt.shape[1] + 1])  # the token row 0 emits second
    stopped = model.generate(prompt, max_new_tokens=12, eos_token_id=eos)
    for row, continuation in zip(free[:, 6:], stopped[:, 6:], strict=True):
        hits = (continuation == eos).nonzero()
        first = int(hits[0]) if len(hits) else len(continuation)
        assert torch.equal(continuation[: first + 1], row[: first + 1])  # the same tokens up to its eos
        assert (continuation[first:] == eos).all()  # then eos only
    ends = [(row == eos).nonzero() for row in stopped[:, 6:]]
    if all(len(hit) for hit in ends):
        assert stopped.shape[1] == 6 + max(int(hit[0]) for hit in ends) + 1


def test_zero_new_tokens_give_the_prompt_back_without_reading_it():
    model = _markovian(INCREMENTAL["markov_local"]).eval()
    prompt, mask = _left_padded()
    forwards = []
    model.model.register_forward_hook(lambda *_: forwards.append(1))
    assert torch.equal(model.generate(prompt, attention_mask=mask, max_new_tokens=0), prompt)
    assert not forwards  # no prefill of a prompt nothing is generated after
    assert model.generate(prompt, attention_mask=mask, max_new_tokens=1).shape == (3, 7) and forwards


def test_sampling_follows_the_generator_and_top_k_one_is_greedy():
    model = _markovian(INCREMENTAL["markov_global"])
    prompt, mask = _left_padded()
    options = dict(max_new_tokens=8, do_sample=True, temperature=1.3, top_p=0.9)
    first = model.generate(prompt, mask, **options, generator=torch.Generator().manual_seed(3))
    assert torch.equal(first, model.generate(prompt, mask, **options, generator=torch.Generator().manual_seed(3)))
    greedy = model.generate(prompt, mask, max_new_tokens=8)
    assert torch.equal(model.generate(prompt, mask, max_new_tokens=8, do_sample=True, top_k=1), greedy)
    with pytest.raises(ValueError, match="top_p=1.5"):
        model.generate(prompt, max_new_tokens=2, do_sample=True, top_p=1.5)


def test_generate_runs_in_eval_mode_and_gives_a_training_model_back_in_train_mode():
    """Documented: generate runs in eval mode and restores the model's mode. A model in train mode with dropout 0.5
    generates what it does in eval mode, and is handed back in train mode (without the switch dropout changed the
    tokens)."""
    model = _markovian(dict(INCREMENTAL["markov_local"], dropout=0.5))
    prompt, mask = _left_padded()
    expected = model.generate(prompt, mask, max_new_tokens=8)
    model.train()
    assert torch.equal(model.generate(prompt, mask, max_new_tokens=8), expected)
    assert all(module.training for module in model.modules())


@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_scan_markov_greedy_generation_is_the_teacher_forced_argmax(mode):
    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=VOCAB, d_model=16, context_mode=mode, max_positions=32,
                              order=4 if mode == "markov" else None)  # fmt: skip
    model = _perturbed(ScanMarkovForCausalLM(config), scale=1.0)
    prompt, _ = _left_padded()
    _assert_greedy_is_teacher_forced_argmax(model, prompt, None, new=9)
    with pytest.raises(ValueError, match="unpadded"):
        model.generate(prompt, _left_padded()[1], max_new_tokens=2)


@pytest.mark.parametrize("order, transparent", [(None, False), (3, True), (2, False)])
def test_translator_greedy_generation_is_the_teacher_forced_argmax(order, transparent):
    torch.manual_seed(0)
    config = MarkovTranslatorConfig(vocab_size=VOCAB, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2,
                                    order=order, transparent=transparent, dropout=0.0, max_positions=32)  # fmt: skip
    model = _perturbed(MarkovTranslatorForConditionalGeneration(config), scale=1.0)
    source = torch.randint(3, VOCAB, (3, 5), generator=torch.Generator().manual_seed(4))
    source_mask = torch.ones_like(source)
    source_mask[1, 3:] = 0
    target = model.generate(source, source_mask, max_new_tokens=10)
    decoder_input = torch.cat([torch.full_like(target[:, :1], config.bos_token_id), target[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(source, decoder_input, src_mask=source_mask).logits
    logits[..., config.pad_token_id] = float("-inf")  # padding is never generated
    chosen = logits.argmax(-1)
    for row in range(3):  # up to and including each row's eos; padding after it
        ended = (target[row] == config.eos_token_id).nonzero()
        length = int(ended[0]) + 1 if len(ended) else target.shape[1]
        assert torch.equal(chosen[row, :length], target[row, :length])
        assert (target[row, length:] == config.pad_token_id).all()
    sampled = model.generate(source, source_mask, max_new_tokens=10, do_sample=True, top_k=1)
    assert torch.equal(sampled, target)  # top-k 1 sampling is greedy
    beams = model.generate(source, source_mask, max_new_tokens=10, num_beams=1)
    assert torch.equal(beams, target)


def test_vmt_greedy_generation_is_the_argmax_of_its_mean_latent_path():
    torch.manual_seed(0)
    config = VMTConfig(vocab_size=VOCAB, latent_dim=3, d_model=8, n_layers=1, n_heads=2, hidden_dim=16, window=4)
    model = _perturbed(VariationalMarkovTransformer(config), scale=1.0)
    prompt = torch.randint(0, VOCAB, (2, 6), generator=torch.Generator().manual_seed(5))
    generated = model.generate(prompt, max_new_tokens=7, generator=torch.Generator().manual_seed(6))
    generator = torch.Generator().manual_seed(6)  # the prompt's reading draws the same posterior samples
    with torch.no_grad():
        state = None
        for start in range(0, 6, 4):
            state = model.elbo(prompt[:, start : start + 4], carry=state, generator=generator).carry
        expected = []
        for _ in range(7):
            state = model.transition(state, model.transition.prepare())[0]  # the transition's mean
            expected.append(model.emission.logits(state).argmax(-1))
    assert torch.equal(generated[:, 6:], torch.stack(expected, dim=1))


# each family's greedy test above (README: "tested for every family"); a family new in models/registry.py adds its own
GREEDY_TESTS = {
    "markovian_transformer": test_markovian_greedy_generation_is_the_teacher_forced_argmax,
    "scan_markov": test_scan_markov_greedy_generation_is_the_teacher_forced_argmax,
    "markov_translator": test_translator_greedy_generation_is_the_teacher_forced_argmax,
    "vmt": test_vmt_greedy_generation_is_the_argmax_of_its_mean_latent_path,
}


def test_every_family_has_its_greedy_test():
    from markovformer.models.registry import MODEL_FAMILIES

    untested = sorted(set(MODEL_FAMILIES) - set(GREEDY_TESTS))
    assert not untested, f"model families without a greedy test: {untested}; add one to {__file__} and GREEDY_TESTS"


@pytest.mark.slow  # two compiles of the step, ~10-30 s on a CPU
@pytest.mark.parametrize("padded", [False, True], ids=["unpadded", "left_padded"])
def test_a_compiled_decoding_step_generates_what_the_eager_one_does(padded):
    """``compile_step=True``: the same greedy tokens and, step by step, the same logits (to float32 rounding) as
    eager decoding, past the point where the rolling cache has dropped the prompt's padding."""
    model = _markovian(dict(attention="markov", max_order=2, window=3)).eval()
    prompt, mask = _left_padded()
    mask = mask if padded else None
    eager = model.generate(prompt, attention_mask=mask, max_new_tokens=12)
    compiled = model.generate(prompt, attention_mask=mask, max_new_tokens=12, compile_step=True)
    assert torch.equal(compiled, eager)
    full = model(eager, attention_mask=None if mask is None else
                 torch.cat([mask, torch.ones_like(eager[:, prompt.shape[1]:])], dim=1)).logits  # fmt: skip
    _, step = model.start_decoding(prompt, mask, 12)
    step = torch.compile(step)
    with torch.no_grad():
        for t in range(prompt.shape[1], eager.shape[1] - 1):
            torch.testing.assert_close(step(eager[:, t]), full[:, t], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_a_right_padded_an_all_padding_or_a_gapped_row_is_refused_naming_the_row(family):
    """generate reads each row's next token at its last position: a right-padded row was continued from its padding
    (markov_local continued [2, 10, 2] + padding [0, 7] as [5, 7, 4, 10, 4]; alone it continues [5, 5, 5, 4, 4]), an
    all-padding row from nothing, and padding between real tokens moved Hyena's and RWKV's continuations. Each is
    refused, naming the row; the left-padded row still continues as it does alone."""
    model = _markovian(INCREMENTAL["markov_local"]) if family == "markovian_transformer" else _perturbed(
        ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=VOCAB, d_model=16, order=3, max_positions=32)))  # fmt: skip
    ids = torch.tensor([[2, 10, 2, 5, 5], [2, 10, 2, 0, 7]])
    for mask, message in [
        ([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], r"^attention_mask row 1 = \[1, 1, 1, 0, 0\] is right-padded"),
        ([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], r"^attention_mask row 1 is all padding"),
        ([[1, 1, 0, 1, 1], [1, 1, 1, 1, 1]], r"^attention_mask row 0 = \[1, 1, 0, 1, 1\] has padding between real"),
    ]:
        with pytest.raises(ValueError, match=message):
            model.generate(ids, torch.tensor(mask), max_new_tokens=5)
    if family == "markovian_transformer":
        left = torch.tensor([[2, 10, 2, 5, 5], [0, 7, 2, 10, 2]])
        generated = model.generate(left, torch.tensor([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1]]), max_new_tokens=5)
        assert torch.equal(generated[1, 5:], model.generate(ids[1:, :3], max_new_tokens=5)[0, 3:])


@pytest.mark.parametrize("options", [dict(attention="markov", max_order=2), dict(attention="softmax",
                         position="learned", max_positions=8)], ids=["incremental", "re-run"])  # fmt: skip
def test_the_head_projects_only_the_position_each_step_reads(options):
    """generate reads the logits of each row's last position: the head (B x V per position: at V = 50k, 200 KB a
    token) projected every position of the prompt, and of the whole re-run prefix at every step past learned
    positions. Every call now projects one position per row; forward's logits_to_keep keeps the last n."""
    model = _markovian(options)
    prompt = torch.randint(0, VOCAB, (3, 10), generator=torch.Generator().manual_seed(2))
    rows = []
    hook = model.lm_head.register_forward_hook(lambda module, args, output: rows.append(output.shape[:-1].numel()))
    try:
        model.generate(prompt, max_new_tokens=4)
    finally:
        hook.remove()
    assert rows == [3] * 4  # the prompt's step, then one per new token but the last
    ids = prompt[:, -6:]  # within learned positions
    with torch.no_grad():
        every = model(ids, labels=ids)
        kept = model(ids, labels=ids, logits_to_keep=2)
        torch.testing.assert_close(model(ids, logits_to_keep=2).logits, every.logits[:, -2:])
    assert torch.equal(kept.logits, every.logits[:, -2:]) and torch.equal(kept.loss, every.loss)
