"""transformers' ``generate`` on the wrappers (issue 30): decoding from the cache one token per step, sampling and
beam search equal to re-running the prefix, Scan Markov's state, the translator through AutoModelForSeq2SeqLM, the
cache's name across transformers versions and the generate benchmark. Skipped when the ``hf`` extra is absent."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
# registers the Auto classes; skipped with its one-line reason where transformers cannot run this torch
pytest.importorskip("markovformer.hf", exc_type=ImportError)
from hf_small import SMALL, perturbed, random_ids, small_hf  # noqa: E402

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM  # noqa: E402
from markovformer.hf import HF_CLASSES, HF_CONFIGS  # noqa: E402
from markovformer.hf.cache import CACHE_NAME, MarkovformerCache  # noqa: E402


def fed_lengths(model) -> list[int]:
    """The lengths of the input_ids ``model``'s forward is given, call after call (a list that fills up)."""
    fed = []
    model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(kwargs["input_ids"].shape[1]),
                                    with_kwargs=True)  # fmt: skip
    return fed


def left_padded_prompt(row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Three prompts of 5 tokens and their attention mask, with ``row`` left-padded by 2."""
    prompt = random_ids(3, 5, seed=2)
    mask = torch.ones_like(prompt)
    mask[row, :2] = 0
    return prompt, mask


@pytest.mark.parametrize("options", [
    dict(scope="local", window=3), dict(attention="softmax", max_order=4),
    dict(attention="rff", position="none", max_order=4),
], ids=["local", "global", "rff"])  # fmt: skip
def test_transformers_generate_decodes_from_the_cache_one_token_per_step(options):
    model = perturbed(small_hf("causal_lm", **options))
    fed = fed_lengths(model)
    prompt, mask = left_padded_prompt(row=0)
    theirs = model.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=10, pad_token_id=0)
    assert fed == [5] + [1] * 9
    assert torch.equal(theirs, model.markovformer.generate(prompt, mask, max_new_tokens=10))
    uncached = model.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=10, pad_token_id=0,
                              use_cache=False)  # fmt: skip
    assert torch.equal(uncached, theirs) and fed[10:] == list(range(5, 15))
    beams = dict(num_beams=3, do_sample=False, max_new_tokens=6, pad_token_id=0, attention_mask=mask)
    torch.testing.assert_close(model.generate(prompt, **beams, output_scores=True, return_dict_in_generate=True)
                               .sequences_scores, model.generate(prompt, **beams, use_cache=False, output_scores=True,
                               return_dict_in_generate=True).sequences_scores)  # fmt: skip


@pytest.mark.parametrize("use_cache", [True, False])
def test_transformers_generate_re_runs_the_last_max_positions_tokens_past_learned_positions_end(use_cache):
    """Learned positions end at max_positions (8): markovformer's generate re-runs the last 8 tokens past them, and
    transformers' generate does the same (it raised at the ninth position), a left-padded row included."""
    model = perturbed(small_hf("causal_lm", attention="softmax", max_order=4, position="learned",
                               max_positions=8))  # fmt: skip
    fed = fed_lengths(model)
    prompt, mask = left_padded_prompt(row=1)
    theirs = model.generate(prompt, attention_mask=mask, do_sample=False, max_new_tokens=7, pad_token_id=0,
                            use_cache=use_cache)  # fmt: skip
    assert torch.equal(theirs, model.markovformer.generate(prompt, mask, max_new_tokens=7))
    # the prompt, the 6th to 8th tokens (from the cache, or the whole sequence), then the last 8 of 9, 10 and 11
    assert fed == ([5, 1, 1, 1] if use_cache else [5, 6, 7, 8]) + [8] * 3


@pytest.mark.parametrize("options", [
    dict(scope="local", window=3), dict(attention="retnet", position="none", max_order=4),
    dict(attention="scan", position="none", max_order=4),
    dict(attention="h3", position="none", max_order=4),  # its state holds the SSM's tables, which are not per row
    dict(attention="hyena", position="none", max_order=4),  # a growing cache of its convolutions' inputs
    dict(attention="forgetting", position="none", max_order=4),  # the key cache's log forget gates are per row too
    dict(attention="forgetting", position="none", max_order=4, scope="local", window=3),
], ids=["local_markov", "retnet", "scan", "h3", "hyena", "forgetting", "local_forgetting"])  # fmt: skip
def test_sampling_and_beam_search_from_the_cache_equal_the_uncached_ones(options):
    """do_sample with a fixed seed, and beam search (whose beams reorder the cache's rows each step), give the same
    tokens (and beam scores) with the cache as when transformers re-runs the whole prefix (use_cache=False)."""
    model = perturbed(small_hf("causal_lm", **options))
    fed = fed_lengths(model)
    prompt, mask = left_padded_prompt(row=1)
    common = dict(attention_mask=mask, max_new_tokens=10, pad_token_id=0)

    def sampled(use_cache: bool) -> torch.Tensor:
        torch.manual_seed(7)
        return model.generate(prompt, do_sample=True, temperature=1.5, top_k=0, use_cache=use_cache, **common)

    cached = sampled(True)
    assert fed == [5] + [1] * 9  # decoded from the cache
    assert torch.equal(cached, sampled(False))
    first = cached[:, 5:]
    torch.manual_seed(8)
    assert not torch.equal(model.generate(prompt, do_sample=True, temperature=1.5, top_k=0, **common)[:, 5:], first)
    beams = dict(num_beams=4, num_return_sequences=2, do_sample=False, output_scores=True,
                 return_dict_in_generate=True, **common)  # fmt: skip
    fed.clear()
    with_cache = model.generate(prompt, **beams)
    assert fed == [5] + [1] * 9
    without = model.generate(prompt, **beams, use_cache=False)
    assert torch.equal(with_cache.sequences, without.sequences)
    torch.testing.assert_close(with_cache.sequences_scores, without.sequences_scores)


@pytest.mark.parametrize("mode", ["markov", "recurrent"])
def test_scan_markov_generate_decodes_from_its_state_as_without_it(mode):
    """transformers' generate on Scan Markov feeds one token per step after the prompt (h or the last n - 1 tokens in
    the cache) and gives the tokens and beam scores of re-running the prefix (use_cache=False), and ours."""
    from markovformer import ScanMarkovConfig

    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=11, d_model=16, order=3 if mode == "markov" else None, context_mode=mode,
                              max_positions=32)  # fmt: skip
    model = perturbed(HF_CLASSES["scan_markov", "causal_lm"][1](HF_CONFIGS["scan_markov"](**config.to_dict())))
    fed = fed_lengths(model)
    prompt = random_ids(3, 5, seed=2)
    common = dict(max_new_tokens=10, pad_token_id=0, do_sample=False, attention_mask=torch.ones_like(prompt))
    greedy = model.generate(prompt, **common)
    assert fed == [5] + [1] * 9
    assert torch.equal(greedy, model.generate(prompt, **common, use_cache=False))
    assert torch.equal(greedy, model.markovformer.generate(prompt, max_new_tokens=10))
    beams = dict(num_beams=4, num_return_sequences=2, output_scores=True, return_dict_in_generate=True, **common)
    with_cache, without = model.generate(prompt, **beams), model.generate(prompt, **beams, use_cache=False)
    assert torch.equal(with_cache.sequences, without.sequences)
    torch.testing.assert_close(with_cache.sequences_scores, without.sequences_scores)
    padded = torch.ones_like(prompt)
    padded[1, 3:] = 0  # a right-padded batch in eval mode: the whole forward, no cache
    output = model(input_ids=prompt, attention_mask=padded)
    assert getattr(output, CACHE_NAME) is None
    torch.testing.assert_close(output.logits, model.markovformer(prompt, attention_mask=padded).logits)


@pytest.mark.parametrize("side", ["left", "right"])
def test_scan_markov_generate_refuses_a_padded_prompt_as_padding_on_either_side(side):
    """A recurrence has no padding steps and generate reads each row's next token at its last position: a padded
    batch is refused saying so, whichever the side. A left-padded one was refused by the forward as needing a
    right-padded attention_mask, which generate then refused as right-padded, asking for left padding."""
    from markovformer import ScanMarkovConfig

    config = ScanMarkovConfig(vocab_size=11, d_model=16, context_mode="recurrent", max_positions=32)
    model = HF_CLASSES["scan_markov", "causal_lm"][1](HF_CONFIGS["scan_markov"](**config.to_dict())).eval()
    prompt, mask = random_ids(2, 5, seed=2), torch.ones(2, 5, dtype=torch.long)
    mask[1, slice(0, 2) if side == "left" else slice(3, None)] = 0
    with pytest.raises(ValueError, match=r"^ScanMarkovForCausalLM generates from unpadded prompts only .*one at a "
                                         r"time \(a pipeline's batch_size=1\)$"):  # fmt: skip
        model.generate(prompt, attention_mask=mask, max_new_tokens=3, pad_token_id=0, do_sample=False)


@pytest.mark.parametrize("asked", [dict(output_hidden_states=True), dict(output_attentions=True),
                                   dict(output_attentions=True, use_cache=False)])  # fmt: skip
def test_scan_markov_refuses_hidden_states_and_attentions_by_name(asked):
    """Scan Markov has no layers of blocks to report on: asking for their hidden states or attentions is refused,
    in generate and in a forward. They were dropped (None, or a tuple of Nones from generate(use_cache=False), to
    which the refusal of attentions from the cache had sent the caller)."""
    from markovformer import ScanMarkovConfig

    config = ScanMarkovConfig(vocab_size=11, d_model=16, context_mode="recurrent", max_positions=32)
    model = HF_CLASSES["scan_markov", "causal_lm"][1](HF_CONFIGS["scan_markov"](**config.to_dict())).eval()
    prompt, (name,) = random_ids(1, 5, seed=2), [key for key in asked if key.startswith("output")]
    message = rf"^ScanMarkovForCausalLM returns no hidden states or attentions .*: leave {name} unset$"
    with pytest.raises(ValueError, match=message):
        model.generate(prompt, max_new_tokens=2, do_sample=False, return_dict_in_generate=True, **asked)
    with pytest.raises(ValueError, match=message):
        model(prompt, **{name: True})


def test_transformers_default_length_ends_only_where_the_positions_end():
    """transformers' generate ends a default-length generation at the config's max_position_embeddings: Scan Markov's
    markov mode (max_positions numbering each window of order tokens, as the shipped scan_shakespeare.yaml's 5) and
    a rotary model that keeps a max_positions have no end there, and generate 20 new tokens as ours do; a prompt of
    5 tokens under a markov-mode max_positions=3 was refused ('max_length is set to 3')."""
    from markovformer import ScanMarkovConfig

    def config(family: str, **options):
        return HF_CONFIGS[family](**options)

    markov = ScanMarkovConfig(vocab_size=11, d_model=16, order=3, max_positions=3)
    scan = perturbed(HF_CLASSES["scan_markov", "causal_lm"][1](config("scan_markov", **markov.to_dict())))
    rotary = perturbed(small_hf("causal_lm", max_positions=3))
    prompt = random_ids(1, 5, seed=2)
    for model in (scan, rotary):
        assert model.config.max_position_embeddings is None
        assert torch.equal(model.generate(prompt, do_sample=False), model.markovformer.generate(prompt))
    recurrent = config("scan_markov", vocab_size=11, context_mode="recurrent", max_positions=32)
    learned = config("markovian_transformer", **SMALL, position="learned", max_positions=16)
    assert (recurrent.max_position_embeddings, learned.max_position_embeddings) == (32, 16)
    learned.max_position_embeddings = 24
    assert learned.max_positions == 24 == learned.to_markovformer().max_positions


def test_the_cache_counts_the_tokens_it_was_fed_whatever_the_models_state_records():
    """The cache's length is what generate skips: a family whose state keeps its length under another name (or none)
    still decodes one token per step. It was read from the state's "length", so such a family was fed the whole
    sequence again at every step, silently giving other tokens than its own generate."""
    from markovformer import ScanMarkovConfig

    torch.manual_seed(0)
    config = ScanMarkovConfig(vocab_size=11, d_model=16, context_mode="recurrent", max_positions=32)
    model = perturbed(HF_CLASSES["scan_markov", "causal_lm"][1](HF_CONFIGS["scan_markov"](**config.to_dict())))
    inner, forward = model.markovformer, model.markovformer.forward

    def forward_keeping_its_length_as_seen(input_ids, state=None, **options):
        if state is not None and "seen" in state:
            state["length"] = state.pop("seen")
        output = forward(input_ids, state=state, **options)
        if state is not None:
            state["seen"] = state.pop("length")
        return output

    prompt = random_ids(3, 5, seed=2)
    want = inner.generate(prompt, max_new_tokens=10)
    inner.forward = forward_keeping_its_length_as_seen
    fed = fed_lengths(model)
    greedy = model.generate(prompt, max_new_tokens=10, pad_token_id=0, do_sample=False,
                            attention_mask=torch.ones_like(prompt))  # fmt: skip
    assert fed == [5] + [1] * 9
    assert torch.equal(greedy, want)


def test_the_translator_generates_through_auto_model_for_seq2seq_lm(tmp_path):
    from markovformer import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

    torch.manual_seed(0)
    ours = perturbed(MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, order=2, dropout=0.0,
        max_positions=32)))  # fmt: skip
    ours.save_pretrained(tmp_path)
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path)
    source = torch.randint(3, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    for options in (dict(), dict(num_beams=3, length_penalty=0.6)):
        theirs = loaded.generate(source, max_new_tokens=8, **options)
        reference = ours.generate(source, max_new_tokens=8, **options)
        assert torch.equal(theirs[:, 0], torch.full((2,), ours.config.bos_token_id))
        assert torch.equal(theirs[:, 1:], reference)
    with pytest.raises(TypeError, match="does not support \\['repetition_penalty'\\]"):
        loaded.generate(source, max_new_tokens=8, repetition_penalty=1.2)
    # labels alone (DataCollatorForSeq2Seq's batch) make the decoder's inputs: bos, then the labels shifted right
    labels = torch.tensor([[5, 6, 7, 2], [8, 9, 2, -100]])
    shifted = torch.tensor([[ours.config.bos_token_id, 5, 6, 7], [ours.config.bos_token_id, 8, 9, 2]])
    assert torch.equal(loaded.prepare_decoder_input_ids_from_labels(labels), shifted)
    with torch.no_grad():
        alone = loaded(input_ids=source, labels=labels).loss
        given = loaded(input_ids=source, decoder_input_ids=shifted, labels=labels).loss
    assert torch.equal(alone, given)
    with pytest.raises(ValueError, match="needs decoder_input_ids"):
        loaded(input_ids=source)


def test_seq2seq_trainer_predicts_with_the_translators_generate(tmp_path):
    """Seq2SeqTrainer(predict_with_generate=True), the standard way to score a translator: it reads the model's
    generation_config, passes labels and synced_gpus to generate and, after its first batch, writes transformers'
    defaults into that config; its predictions are generate's rows (padded to its max_length)."""
    torch.manual_seed(0)
    config = HF_CONFIGS["markov_translator"](vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, order=2, dropout=0.0, max_positions=32)  # fmt: skip
    model = perturbed(HF_CLASSES["markov_translator", "translation"][1](config))
    assert model.config.is_encoder_decoder and model.config.decoder_start_token_id == config.bos_token_id
    assert model.can_generate() and model.generation_config.decoder_start_token_id == config.bos_token_id
    generator = torch.Generator().manual_seed(1)
    rows = [{"input_ids": torch.randint(3, 11, (6,), generator=generator),
             "labels": torch.cat([torch.randint(3, 11, (4,), generator=generator), torch.tensor([2])])}
            for _ in range(8)]  # fmt: skip
    arguments = transformers.Seq2SeqTrainingArguments(
        tmp_path, per_device_eval_batch_size=4, report_to=[], use_cpu=True, predict_with_generate=True,
        generation_max_length=7, generation_num_beams=2)  # fmt: skip
    sources = torch.stack([row["input_ids"] for row in rows])
    before = model.generate(sources)  # transformers' defaults: max_length 20, whatever the trainer writes later
    predicted = transformers.Seq2SeqTrainer(model=model, args=arguments).predict(rows).predictions
    assert before.shape[1] <= 20 and torch.equal(model.generate(sources), before)  # (it was 33, then 20)
    wanted = model.generate(sources, max_length=7, num_beams=2)
    assert predicted.shape[0] == 8 and torch.equal(torch.as_tensor(predicted[:, : wanted.shape[1]]), wanted)
    source = wanted.new_tensor([[3, 4, 5]])
    # an option generate takes is read from a generation config as it is, a transformers default value included
    model.generation_config.num_beams, model.generation_config.max_length = 2, 12
    assert torch.equal(model.generate(source), model.generate(source, num_beams=2, max_length=12))
    assert model.generate(source).shape[1] <= 12
    with pytest.raises(ValueError, match="synced_gpus=True"):
        model.generate(source, synced_gpus=True)
    with pytest.raises(TypeError, match="does not support \\['no_repeat_ngram_size'\\]"):
        model.generate(source, generation_config=transformers.GenerationConfig(no_repeat_ngram_size=2))


def test_the_translators_max_length_counts_the_decoder_start_token():
    """transformers' max_length bounds an encoder-decoder's whole output, decoder start token (bos) included:
    max_length=4 is bos and 3 generated tokens, as max_new_tokens=3 gives (this model emits no eos by then)."""
    torch.manual_seed(0)
    config = HF_CONFIGS["markov_translator"](vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, dropout=0.0, max_positions=32)  # fmt: skip
    model = perturbed(HF_CLASSES["markov_translator", "translation"][1](config))
    source = torch.randint(3, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    longer = model.generate(source, max_new_tokens=8)
    assert not (longer[:, 1:4] == config.eos_token_id).any()
    capped = model.generate(source, max_length=4)
    assert capped.shape == (2, 4) and torch.equal(capped, longer[:, :4])


def test_the_translators_greedy_generate_refuses_a_sampling_option_and_takes_transformers_defaults():
    """``generate(source, top_k=3)`` (greedy: transformers' default do_sample=False) decoded greedily and ignored
    top_k; transformers' own defaults (top_k 50, top_p 1, temperature 1) are no one's choice and stay quiet."""
    config = HF_CONFIGS["markov_translator"](vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1,
                                             n_decoder_layers=1, dropout=0.0, max_positions=32)  # fmt: skip
    model = HF_CLASSES["markov_translator", "translation"][1](config)
    source = torch.randint(3, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    with pytest.raises(ValueError, match=r"^top_k=3: decoding without sampling \(do_sample=False"):
        model.generate(source, max_new_tokens=3, top_k=3)
    greedy = model.generate(source, max_new_tokens=3)
    assert torch.equal(model.generate(source, max_new_tokens=3, top_k=50, top_p=1.0, temperature=1.0), greedy)


def test_the_generate_benchmark_times_every_token_of_both_generates_on_the_same_ids():
    from markovformer.hf.benchmark import MARK_STEPS, measure, token_times

    model = small_hf("causal_lm", scope="local", window=3).markovformer.eval()
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(1))
    times, ids = token_times(lambda: model.generate(random_ids(1, 4), max_new_tokens=6), model)
    assert len(calls) == 6 and ids.shape == (1, 10)  # the prompt's forward, then one per token after the first
    assert all(len(values) == 5 and min(values) >= 0 for values in times.values())
    result = measure({**SMALL, "scope": "local", "window": 3}, marks=(1, 2), repeats=1)
    assert result["same_greedy_ids"] and MARK_STEPS == 16
    assert all(row.keys() == {1, 2} and all(value["cpu"] > 0 for value in row.values())
               for row in result["ms_per_token"].values())  # fmt: skip
    # the calling thread's CPU time leaves the other threads' work out: with two, only the wall clock
    two = measure({**SMALL, "scope": "local", "window": 3}, marks=(1,), repeats=1, threads=2)
    assert all(value.keys() == {"wall"} for row in two["ms_per_token"].values() for value in row.values())
    for bad in ({"marks": (0, 4)}, {"marks": ()}, {"threads": 0}, {"repeats": 0}):  # marks 0 read from the end
        with pytest.raises(ValueError, match=next(iter(bad))):
            measure({**SMALL, "scope": "local", "window": 3}, **{"marks": (1,), "repeats": 1, **bad})


def test_past_key_values_is_the_cache_before_transformers_5_24_and_refused_from_it():
    """transformers 5.24 renamed the cache from past_key_values to cache: before it, past_key_values continues a
    decoding (the last tokens' logits equal the full forward's); from it, past_key_values is refused by name."""
    model = small_hf("causal_lm", dropout=0.0).eval()
    ids = random_ids(2, 7)
    full = model(input_ids=ids, use_cache=False).logits
    cache = getattr(model(input_ids=ids[:, :4]), CACHE_NAME)
    if CACHE_NAME == "cache":
        with pytest.raises(ValueError, match="does not take past_key_values"):
            model(input_ids=ids[:, 4:], past_key_values=cache)
    else:
        torch.testing.assert_close(model(input_ids=ids[:, 4:], past_key_values=cache).logits, full[:, 4:],
                                   rtol=1e-5, atol=1e-5)  # fmt: skip


def test_generate_returns_the_hidden_states_of_each_step_and_refuses_attentions_from_the_cache():
    """generate(output_hidden_states=True) gave a tuple of Nones: prepare_inputs_for_generation dropped the flag.
    Each step's hidden states are the full forward's at that position; attentions need use_cache=False."""
    model = perturbed(small_hf("causal_lm", dropout=0.0))
    prompt = random_ids(2, 5) % 10 + 1  # no pad id (0): generate would read it as padding
    with torch.no_grad():
        out = model.generate(prompt, do_sample=False, pad_token_id=0, max_new_tokens=3, return_dict_in_generate=True,
                             output_hidden_states=True)  # fmt: skip
        full = model(out.sequences[:, :-1], output_hidden_states=True).hidden_states
    assert len(out.hidden_states) == 3 and len(out.hidden_states[0]) == len(full)
    for layer, states in enumerate(full):
        torch.testing.assert_close(out.hidden_states[0][layer], states[:, :5])  # the prompt's step
        for step in (1, 2):  # one token each
            torch.testing.assert_close(out.hidden_states[step][layer][:, 0], states[:, 4 + step])
    with pytest.raises(ValueError, match="use_cache=False"):
        model.generate(prompt, pad_token_id=0, max_new_tokens=2, return_dict_in_generate=True, output_attentions=True)
    uncached = model.generate(prompt, do_sample=False, pad_token_id=0, max_new_tokens=2, use_cache=False,
                              return_dict_in_generate=True, output_attentions=True)  # fmt: skip
    assert uncached.attentions[1][0].shape == (2, 2, 6, 6)  # (batch, heads, the sequence so far twice)


@pytest.mark.parametrize("kind", ["s4d", "h3"])
def test_a_float64_s4d_continues_after_a_one_token_step_as_the_full_forward(kind, tmp_path):
    """Loaded with dtype=torch.float64 (S4D's poles kept in float32), a one-token step left a complex128 state that
    the next chunk's complex64 tables refused: prompt 4 tokens, then 1, then 4 failed."""
    torch.manual_seed(0)
    config = HF_CONFIGS["markovian_transformer"](vocab_size=11, d_model=16, n_layers=2, n_heads=2, attention=kind,
                                                 position="none", ssm_state_size=4)  # fmt: skip
    perturbed(HF_CLASSES["markovian_transformer", "causal_lm"][1](config)).save_pretrained(tmp_path)
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    ids = random_ids(1, 9) % 10 + 1
    with torch.no_grad():
        full = model(input_ids=ids, use_cache=False).logits
        prompt = model(input_ids=ids[:, :4])
        cache, pieces = getattr(prompt, CACHE_NAME), [prompt.logits]
        for start, stop in ((4, 5), (5, 9)):
            pieces.append(model(input_ids=ids[:, start:stop], **{CACHE_NAME: cache}).logits)
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("options", [dict(attention="softmax"), dict(attention="softmax", scope="local", window=2),
                                     dict(attention="gru"), dict(attention="markov", max_order=2, gru=True)],
                         ids=["softmax_global", "softmax_local", "gru", "gru_injection"])  # fmt: skip
def test_a_reordered_cache_continues_as_the_reordered_batch_from_the_start(options):
    """reorder_cache(rows) makes row rows[i] of every state row i: decoding on equals the full forward of the
    reordered batch, for rows of different left padding (the key/value cache's padding flags are per row; beam
    search alone cannot show them, its beams of one prompt share their padding) and for nn.GRU's hidden state,
    whose batch is its second dimension."""
    torch.manual_seed(0)
    config = MarkovianTransformerConfig(vocab_size=11, d_model=16, n_layers=2, n_heads=2, **options)
    model = perturbed(MarkovianTransformerForCausalLM(config).double())
    ids = random_ids(3, 8)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    mask[2, :4] = 0
    rows = torch.tensor([2, 0, 2])  # as beam search does: a row dropped, another kept twice
    cache = MarkovformerCache()
    with torch.no_grad():
        model(ids[:, :5], attention_mask=mask[:, :5], state=cache.state)
        cache.reorder_cache(rows)
        got = [model(ids[rows, t : t + 1], attention_mask=mask[rows, t : t + 1], state=cache.state).logits
               for t in range(5, 8)]  # fmt: skip
        want = model(ids[rows], attention_mask=mask[rows]).logits[:, 5:]
    torch.testing.assert_close(torch.cat(got, dim=1), want, rtol=0, atol=1e-10)


@pytest.mark.parametrize("use_cache", [True, False])
def test_transformers_generate_refuses_a_right_padded_or_all_padding_prompt_row(use_cache):
    """transformers only warns of right padding, then reads the next token at the padding (row 1, [2, 10, 9] +
    padding, continued [1, 1, 7, 10, 10] from the cache, [1, 6, 7, 10, 10] without; alone [10, 10, 10, 10, 2]):
    the wrappers refuse it, and a row of padding only, naming the row; a left-padded one continues as alone."""
    model = perturbed(small_hf("causal_lm", scope="local", window=3))
    prompt = random_ids(2, 5, seed=2)
    common = dict(do_sample=False, max_new_tokens=5, pad_token_id=0, use_cache=use_cache)
    for mask, message in [([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], r"row 1 = \[1, 1, 1, 0, 0\] is right-padded"),
                          ([[1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], "row 1 is all padding")]:  # fmt: skip
        with pytest.raises(ValueError, match=f"^attention_mask {message}"):
            model.generate(prompt, attention_mask=torch.tensor(mask), **common)
    left = torch.cat([prompt[1:, 3:], prompt[1:, :3]], dim=1)
    generated = model.generate(left, attention_mask=torch.tensor([[0, 0, 1, 1, 1]]), **common)
    assert torch.equal(generated[0, 5:], model.generate(prompt[1:, :3], **common)[0, 3:])


def test_a_prompt_holding_the_pad_id_as_a_real_token_is_refused_with_the_mask_to_pass():
    """Without a mask transformers marks every pad_token_id as padding: a prompt [3, 0, 5, 2] whose 0 is a real
    symbol read as padding between real tokens, and the refusal blamed the padding alone; it names the mask to pass,
    with which the prompt continues as it does with pad_token_id unset."""
    model = perturbed(small_hf("causal_lm", scope="local", window=3))
    prompt = torch.tensor([[3, 0, 5, 2]])
    common = dict(do_sample=False, max_new_tokens=4)
    with pytest.raises(ValueError, match=r"pass attention_mask=torch\.ones_like\(input_ids\)"):
        model.generate(prompt, pad_token_id=0, **common)
    given = model.generate(prompt, attention_mask=torch.ones_like(prompt), pad_token_id=0, **common)
    assert torch.equal(given, model.generate(prompt, attention_mask=torch.ones_like(prompt), **common))
