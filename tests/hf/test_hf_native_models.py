"""The Hugging Face behaviours of issue 30 of the wrapped models, through transformers' public API: problem types,
backbone <-> head loading, hidden states, attentions and the outputs tuple, embeddings, initialisation, config names,
checkpointing, logits_to_keep, the Trainer, packed documents and dtypes (``generate``: test_hf_generate.py).
Skipped when the ``hf`` extra is absent."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="the hf extra is absent: pip install 'markovformer[hf]'")
# registers the Auto classes; skipped with its one-line reason where transformers cannot run this torch
pytest.importorskip("markovformer.hf", exc_type=ImportError)
from hf_small import SMALL, perturbed, random_ids, small_hf  # noqa: E402

from markovformer.hf import HF_CLASSES, HF_CONFIGS  # noqa: E402
from markovformer.hf.cache import CACHE_NAME  # noqa: E402


@pytest.mark.parametrize("num_labels, problem, labels, loss_class", [
    (1, None, torch.tensor([0.5, -1.0, 2.0]), torch.nn.MSELoss),
    (3, "regression", torch.randn(3, 3), torch.nn.MSELoss),
    (3, None, torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]), torch.nn.BCEWithLogitsLoss),
    (3, "multi_label_classification", torch.tensor([[1, 0, 1], [0, 0, 0], [0, 1, 1]]), torch.nn.BCEWithLogitsLoss),
    (3, None, torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
    (3, "single_label_classification", torch.tensor([2, 0, 1]), torch.nn.CrossEntropyLoss),
], ids=["one_label_regression", "regression", "multi_label_inferred", "multi_label", "single_label_inferred",
        "single_label"])  # fmt: skip
def test_sequence_classification_losses_follow_problem_type(num_labels, problem, labels, loss_class):
    model = small_hf("sequence_classification", num_labels=num_labels, problem_type=problem).eval()
    output = model(input_ids=random_ids(), labels=labels)
    logits = output.logits.squeeze(-1) if num_labels == 1 else output.logits
    target = labels.float() if loss_class is not torch.nn.CrossEntropyLoss else labels
    torch.testing.assert_close(output.loss, loss_class()(logits, target))


@pytest.mark.parametrize("source", ["markovformer", "transformers"])
def test_a_backbone_checkpoint_loads_into_a_classifier_with_its_trained_backbone(source, tmp_path):
    backbone = perturbed(small_hf("backbone", num_labels=3))
    if source == "markovformer":
        backbone.markovformer.save_pretrained(tmp_path)
    else:
        backbone.save_pretrained(tmp_path)
    classifier, info = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path,
                                                                                        output_loading_info=True)
    assert info["missing_keys"] == {"classifier.weight", "classifier.bias"} and not info["unexpected_keys"]
    for name, tensor in backbone.state_dict().items():
        assert torch.equal(classifier.state_dict()["model." + name], tensor), name
    assert torch.equal(classifier.classifier.bias, torch.zeros(3))  # the head newly initialised
    assert 0.005 < float(classifier.classifier.weight.detach().std()) < 0.05
    ids = random_ids()
    with torch.no_grad():
        assert torch.equal(classifier.eval().model(ids).last_hidden_state,
                           backbone(input_ids=ids).last_hidden_state)  # fmt: skip


def test_a_head_checkpoint_loads_into_the_backbone_and_a_wrong_backbone_still_raises(tmp_path):
    causal = perturbed(small_hf("causal_lm"))
    causal.save_pretrained(tmp_path / "causal")
    backbone, info = transformers.AutoModel.from_pretrained(tmp_path / "causal", output_loading_info=True)
    assert info["unexpected_keys"] == {"lm_head.weight"} and not info["missing_keys"]
    ids = random_ids()
    with torch.no_grad():
        assert torch.equal(backbone(input_ids=ids).last_hidden_state, causal.model(ids).last_hidden_state)
    small_hf("backbone", n_layers=3).save_pretrained(tmp_path / "three")
    config = tmp_path / "three" / "config.json"
    config.write_text(config.read_text().replace('"n_layers": 3', '"n_layers": 2'))  # weights of one more layer
    with pytest.raises(ValueError, match="checkpoint's blocks\\.2\\.[^ ]+, .* are not in the model"):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "three")


@pytest.mark.parametrize("task", ["backbone", "causal_lm", "sequence_classification", "token_classification"])
def test_hidden_states_and_attentions_are_our_forwards_and_return_dict_false_gives_the_tuple(task):
    model = perturbed(small_hf(task, attention=["markov", "softmax"], scope="global"))
    inner, ids = model.markovformer, random_ids()
    with torch.no_grad():
        output = model(input_ids=ids, output_hidden_states=True, output_attentions=True)
        ours = inner(input_ids=ids, return_weights=True)
        backbone = inner if task == "backbone" else inner.model
        embedded = backbone.embed_inputs(ids)
        first = backbone.blocks[0](embedded).output
        plain = model(input_ids=ids, return_dict=False)
    assert len(output.hidden_states) == 3 and len(output.attentions) == 2
    # (exact where the same path ran; the weights come from the reference path, the plain blocks from the fast one)
    assert torch.equal(output.hidden_states[0], embedded) and torch.equal(output.hidden_states[2],
                                                                          ours.last_hidden_state)  # fmt: skip
    torch.testing.assert_close(output.hidden_states[1], first)
    for theirs, reference in zip(output.attentions, ours.attentions, strict=True):
        assert theirs.shape == (3, 2, 7, 7) and torch.equal(theirs, reference)
        torch.testing.assert_close(theirs.sum(-1), torch.ones(3, 2, 7))  # probabilities over the keys
    assert isinstance(plain, tuple)
    torch.testing.assert_close(plain[0], output.last_hidden_state if task == "backbone" else output.logits)
    assert model(input_ids=ids).hidden_states is None and model(input_ids=ids).attentions is None


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_resize_token_embeddings_keeps_old_outputs_and_tied_weights(tied):
    model = perturbed(small_hf("causal_lm", tie_word_embeddings=tied))
    ids = random_ids()
    with torch.no_grad():
        before = model(input_ids=ids).logits
    model.resize_token_embeddings(14)
    assert model.get_input_embeddings() is model.markovformer.model.embed
    assert model.get_output_embeddings() is model.markovformer.lm_head
    assert (model.lm_head.weight is model.model.embed.weight) == tied and model.lm_head.weight.shape == (14, 16)
    assert model.model.embed.weight.shape == (14, 16)
    assert model.config.vocab_size == 14 == model.markovformer.config.vocab_size
    with torch.no_grad():
        after = model(input_ids=torch.cat([ids, torch.full((3, 1), 13)], dim=1)).logits
    torch.testing.assert_close(after[:, :-1, :11], before)


def test_a_model_on_the_meta_device_once_initialised_is_a_normally_built_one():
    config = HF_CONFIGS["markovian_transformer"](**SMALL, num_labels=3, pooling="mean", causal=False)
    empty = transformers.AutoModelForSequenceClassification.from_config(config).to("meta")
    assert all(tensor.is_meta for tensor in [*empty.parameters(), *empty.buffers()])
    empty.to_empty(device="cpu")  # whatever memory held
    torch.manual_seed(5)
    empty.init_weights()
    torch.manual_seed(5)
    normal = HF_CLASSES["markovian_transformer", "sequence_classification"][1].markovformer_class(
        config.to_markovformer())  # fmt: skip
    theirs = dict(empty.named_buffers()) | dict(empty.named_parameters())
    ours = dict(normal.named_buffers()) | dict(normal.named_parameters())
    assert theirs.keys() == ours.keys()
    for name, tensor in ours.items():
        assert torch.equal(theirs[name], tensor), name


def test_configs_answer_to_the_standard_names_and_carry_special_token_ids(tmp_path):
    config = HF_CONFIGS["markovian_transformer"](**SMALL, pad_token_id=0, eos_token_id=3)
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (16, 2, 2)
    config.hidden_size = 32
    assert config.d_model == 32 and config.to_markovformer().d_model == 32
    assert (config.bos_token_id, config.eos_token_id, config.pad_token_id) == (None, 3, 0)
    config.save_pretrained(tmp_path)
    loaded = transformers.AutoConfig.from_pretrained(tmp_path)
    assert (loaded.eos_token_id, loaded.pad_token_id, loaded.hidden_size) == (3, 0, 32)
    translator = HF_CONFIGS["markov_translator"](vocab_size=11, d_model=16, n_heads=2, pad_token_id=4)
    assert translator.pad_token_id == 4 == translator.to_markovformer().pad_token_id
    assert (translator.encoder_layers, translator.decoder_layers) == (6, 6)
    # given at construction (a call, AutoConfig.for_model, a config.json of transformers' names): they were
    # overwritten by the defaults, and a default-size model was built without a word
    named = HF_CONFIGS["markovian_transformer"](vocab_size=11, hidden_size=32, num_hidden_layers=3,
                                                num_attention_heads=2, max_position_embeddings=64)  # fmt: skip
    assert (named.d_model, named.n_layers, named.n_heads, named.max_positions) == (32, 3, 2, 64)
    (tmp_path / "standard").mkdir()
    (tmp_path / "standard" / "config.json").write_text(json.dumps({"model_type": "markovian_transformer",
                                                                   "vocab_size": 11, "hidden_size": 24}))
    assert transformers.AutoConfig.from_pretrained(tmp_path / "standard").to_markovformer().d_model == 24
    with pytest.raises(ValueError, match="hidden_size=32 and d_model=64 name one setting"):
        HF_CONFIGS["markovian_transformer"](hidden_size=32, d_model=64)


def test_the_norm_is_exported_and_reloaded_and_a_config_without_it_loads_as_layernorm(tmp_path):
    """``norm`` goes through the hf config: saved by transformers, reloaded by its Auto classes and markovformer's
    own from_pretrained with the same norms and logits; a config.json written before the field builds LayerNorms."""
    causal = perturbed(small_hf("causal_lm", norm="rmsnorm"))
    causal.save_pretrained(tmp_path / "rms")
    assert json.loads((tmp_path / "rms" / "config.json").read_text())["norm"] == "rmsnorm"
    assert transformers.AutoConfig.from_pretrained(tmp_path / "rms").to_markovformer().norm == "rmsnorm"
    ids = random_ids()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "rms")
    native = HF_CLASSES["markovian_transformer", "causal_lm"][1].markovformer_class.from_pretrained(tmp_path / "rms")
    for model in (loaded.markovformer, native):
        assert model.config.norm == "rmsnorm" and type(model.model.final_norm) is torch.nn.RMSNorm
        with torch.no_grad():
            assert torch.equal(model(ids).logits, causal(input_ids=ids).logits)
    perturbed(small_hf("causal_lm")).save_pretrained(tmp_path / "old")
    values = json.loads((tmp_path / "old" / "config.json").read_text())
    del values["norm"]
    (tmp_path / "old" / "config.json").write_text(json.dumps(values))
    old = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "old").markovformer
    assert old.config.norm == "layernorm" and type(old.model.blocks[0].attention_norm) is torch.nn.LayerNorm


def test_attention_bias_is_exported_and_reloaded_with_its_biases(tmp_path):
    """``attention_bias`` goes through the hf config: transformers' save reloads, through its Auto classes and
    markovformer's own from_pretrained, with the projections' biases and the same logits."""
    causal = perturbed(small_hf("causal_lm", attention_bias=True))
    causal.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["attention_bias"] is True
    ids = random_ids()
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    native = HF_CLASSES["markovian_transformer", "causal_lm"][1].markovformer_class.from_pretrained(tmp_path)
    for model in (loaded.markovformer, native):
        assert model.config.attention_bias and model.model.blocks[1].attention.qkv.bias.abs().min() > 0
        with torch.no_grad():
            assert torch.equal(model(ids).logits, causal(input_ids=ids).logits)


@pytest.mark.parametrize("enable", ["gradient_checkpointing_enable", "activation_checkpointing_enable"])
def test_gradient_checkpointing_recomputes_the_blocks_with_the_same_gradients(enable):
    """Under either name: transformers 5.24 renamed gradient checkpointing activation checkpointing."""
    model = perturbed(small_hf("causal_lm")).train()
    if not hasattr(model, enable):
        pytest.skip(f"transformers {transformers.__version__} has no {enable}")
    ids = random_ids(4, 12)
    calls = []  # a pre-hook: the recomputation stops once it has what the backward pass needs
    model.model.blocks[0].register_forward_pre_hook(lambda *args: calls.append(1))

    def gradients():
        model.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        return [parameter.grad.clone() for parameter in model.parameters()]

    plain, plain_calls = gradients(), len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # 5.24's notice that the old name will go
        getattr(model, enable)()
        assert model.model.gradient_checkpointing and model.is_gradient_checkpointing
    checkpointed = gradients()
    assert len(calls) == 3 * plain_calls  # the block ran again in the backward pass
    for ours, theirs in zip(plain, checkpointed, strict=True):
        torch.testing.assert_close(theirs, ours)


def test_return_dict_false_gives_the_outputs_tuple_for_the_other_wrappers():
    """Scan Markov, the translator and the VMT, as the reporting wrappers above."""
    from markovformer import MarkovTranslatorConfig, ScanMarkovConfig, VMTConfig
    from markovformer.hf.modeling import BACKBONE_ATTRIBUTES
    from markovformer.models.registry import MODEL_FAMILIES

    ids = random_ids()
    torch.manual_seed(0)
    cases = [
        ("scan_markov", "causal_lm", ScanMarkovConfig(vocab_size=11, d_model=16, order=3), dict(input_ids=ids)),
        ("markov_translator", "translation", MarkovTranslatorConfig(vocab_size=11, d_model=16, n_heads=2,
         n_encoder_layers=1, n_decoder_layers=1, order=2, dropout=0.0, max_positions=32),
         dict(input_ids=ids, decoder_input_ids=ids[:, :4])),
        ("vmt", "vmt", VMTConfig(vocab_size=11, latent_dim=2, d_model=8, n_layers=1, n_heads=2, hidden_dim=8),
         dict(input_ids=ids)),
    ]  # fmt: skip
    others = {(family, task) for family, entry in MODEL_FAMILIES.items() for task in entry.heads
              if family not in BACKBONE_ATTRIBUTES}  # fmt: skip
    assert others == {(family, task) for family, task, _, _ in cases}, (
        f"add (family, task, Config(...), inputs) to this test's cases for {sorted(others - {c[:2] for c in cases})}")
    for family, task, config, inputs in cases:
        model = HF_CLASSES[family, task][1](HF_CONFIGS[family](**config.to_dict())).eval()
        with torch.no_grad():
            torch.manual_seed(1)  # (the VMT draws latent samples)
            output = model(**inputs)
            torch.manual_seed(1)
            plain = model(**inputs, return_dict=False)
        assert isinstance(plain, tuple) and len(plain) == len(output.to_tuple()), family
        for theirs, ours in zip(plain, output.to_tuple(), strict=True):  # tensors, and Scan Markov's cache
            assert torch.equal(theirs, ours) if isinstance(ours, torch.Tensor) else type(theirs) is type(ours), family


@pytest.mark.parametrize("family", ["markovian_transformer", "scan_markov"])
def test_logits_to_keep_keeps_the_last_positions_or_the_listed_ones(family):
    """transformers' logits_to_keep (it was ignored: every position's logits came back, silently)."""
    from markovformer import ScanMarkovConfig

    torch.manual_seed(0)
    scan = ScanMarkovConfig(vocab_size=11, d_model=16, order=3).to_dict()
    config = SMALL if family == "markovian_transformer" else scan
    model = HF_CLASSES[family, "causal_lm"][1](HF_CONFIGS[family](**config)).eval()
    ids, labels = random_ids(), random_ids(seed=2)
    with torch.no_grad():
        every = model(ids, labels=labels)
        assert torch.equal(model(ids, logits_to_keep=0).logits, every.logits)
        last = model(ids, labels=labels, logits_to_keep=1)
        assert torch.equal(last.logits, every.logits[:, -1:]) and torch.equal(last.loss, every.loss)
        listed = torch.tensor([0, 4])
        assert torch.equal(model(ids, logits_to_keep=listed).logits, every.logits[:, listed])
        if family == "markovian_transformer":  # its head projects only the kept positions (generate's prompt)
            rows = []
            head = model.markovformer.lm_head
            hook = head.register_forward_hook(lambda module, args, output: rows.append(output.shape[:-1].numel()))
            torch.testing.assert_close(model(ids, logits_to_keep=1).logits, every.logits[:, -1:])
            hook.remove()
            assert rows == [len(ids)]


@pytest.mark.parametrize("unequal", [False, True], ids=["equal label counts", "a row's tail ignored (-100)"])
def test_trainers_gradient_accumulation_gives_the_gradient_of_the_whole_batch(tmp_path, unequal):
    """2 x 4 accumulated sequences make the SGD step of one batch of 8. The causal LMs take num_items_in_batch (the
    accumulated batch's scored tokens, which the Trainer counts) and return their tokens' summed loss over it: with
    a row's labels ignored after its third token the two micro-batches score 35 and 44 tokens, and the mean of
    their means (the Trainer's division by the accumulation steps) was 8 % off the whole batch's step."""
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (the hf extra installs it)")
    data = [{"input_ids": row, "labels": row.clone()} for row in random_ids(8, 12, seed=3)]
    if unequal:
        data[1]["labels"][3:] = -100

    def trained(batch: int, accumulation: int) -> dict:
        model = small_hf("causal_lm", dropout=0.0)
        arguments = transformers.TrainingArguments(
            output_dir=str(tmp_path / str(batch)), max_steps=1, per_device_train_batch_size=batch,
            gradient_accumulation_steps=accumulation, learning_rate=0.5, optim="sgd", lr_scheduler_type="constant",
            max_grad_norm=0.0, weight_decay=0.0, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
            seed=0)  # fmt: skip
        transformers.Trainer(model=model, args=arguments, train_dataset=data).train()
        return {name: tensor.detach().clone() for name, tensor in model.named_parameters()}

    start = {name: tensor.detach().clone() for name, tensor in small_hf("causal_lm", dropout=0.0).named_parameters()}
    whole, accumulated = trained(8, 1), trained(4, 2)
    assert any(not torch.equal(whole[name], start[name]) for name in start)  # it stepped
    for name, tensor in whole.items():
        torch.testing.assert_close(accumulated[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("task, name, value", [
    ("causal_lm", "inputs_embeds", torch.zeros(3, 7, 16)), ("causal_lm", "token_type_ids", torch.zeros(3, 7,
    dtype=torch.long)), ("sequence_classification", "position_ids", torch.arange(7).expand(3, 7)),
])  # fmt: skip
def test_inputs_the_wrappers_cannot_honour_are_refused_by_name(task, name, value):
    """(they would be dropped: restarting position_ids of packed sequences would give the unpacked logits)"""
    model = small_hf(task)
    with pytest.raises(ValueError, match=f"does not take {name}: markovformer models read input_ids"):
        model(input_ids=random_ids(), **{name: value})
    model(input_ids=random_ids(), **{name: None})  # None, as transformers passes unused inputs, is fine


def test_the_causal_lm_reads_packed_documents_as_data_collator_with_flattening_writes_them():
    """position_ids restarting at each document (transformers' padding-free packing): each document's logits and
    loss are its own, as if it ran alone; no cache is made, and continuing one with position_ids is refused."""
    model = small_hf("causal_lm", dropout=0.0).eval()
    documents = [random_ids(1, length, seed=seed)[0].tolist() for length, seed in ((5, 1), (7, 2), (3, 3))]
    batch = transformers.DataCollatorWithFlattening(return_tensors="pt")([{"input_ids": d} for d in documents])
    assert batch["position_ids"].tolist() == [[*range(5), *range(7), *range(3)]]
    packed = model(**batch)
    alone = [model(input_ids=torch.tensor([d]), labels=torch.tensor([d]), use_cache=False) for d in documents]
    starts = [0, 5, 12, 15]
    for document, start, end in zip(alone, starts, starts[1:], strict=False):
        torch.testing.assert_close(packed.logits[:, start:end], document.logits, rtol=1e-5, atol=1e-5)
    expected = sum(document.loss * (len(d) - 1) for document, d in zip(alone, documents, strict=True)) / 12
    torch.testing.assert_close(packed.loss, expected, rtol=1e-5, atol=1e-6)
    assert getattr(packed, CACHE_NAME) is None
    with pytest.raises(ValueError, match="position_ids \\(packed documents\\) cannot continue a cache"):
        model(input_ids=batch["input_ids"], position_ids=batch["position_ids"],
              **{CACHE_NAME: getattr(model(random_ids(1, 2)), CACHE_NAME)})


def test_building_a_model_leaves_the_callers_tie_word_embeddings():
    """A classifier (no tied weights) wrote tie_word_embeddings=False into the config it was given, so a causal LM
    built next from the same config (or through AutoModelFor...from_config) came out untied."""
    config = HF_CONFIGS["markovian_transformer"](**SMALL, tie_word_embeddings=True)
    transformers.AutoModelForSequenceClassification.from_config(config)
    assert config.tie_word_embeddings is True
    lm = HF_CLASSES["markovian_transformer", "causal_lm"][1](config)
    assert lm.lm_head.weight is lm.model.embed.weight and config.to_markovformer().tie_word_embeddings


def test_the_translators_position_table_follows_the_wrapper_to_a_dtype():
    """The translator registers its position table on itself, not on a child: the wrapper adopted its children and
    parameters only, so .to(float64) (or Trainer's .to(device)) left the table behind in float32."""
    from markovformer import MarkovTranslatorConfig

    values = MarkovTranslatorConfig(vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                    order=2, dropout=0.0, max_positions=32).to_dict()  # fmt: skip
    model = HF_CLASSES["markov_translator", "translation"][1](HF_CONFIGS["markov_translator"](**values))
    assert "position_table" in dict(model.named_buffers())
    model.to(torch.float64)
    assert model.markovformer.position_table.dtype == torch.float64


def test_rwkv_loads_in_bfloat16_as_the_float32_model_cast_to_it():
    """RWKV built its decays and token-shift mixes in float32 whatever the default dtype, so a model built or loaded
    with dtype=torch.bfloat16 failed its first matrix product (float against bfloat16)."""
    values = {**{k: v for k, v in SMALL.items() if k != "max_order"}, "attention": "rwkv", "position": "none"}
    torch.manual_seed(0)
    built = transformers.AutoModelForCausalLM.from_config(HF_CONFIGS["markovian_transformer"](**values),
                                                          dtype=torch.bfloat16)  # fmt: skip
    torch.manual_seed(0)
    cast = transformers.AutoModelForCausalLM.from_config(HF_CONFIGS["markovian_transformer"](**values))
    cast = cast.to(torch.bfloat16)
    ids = random_ids(2, 9)
    with torch.no_grad():
        logits = [model.eval()(input_ids=ids).logits for model in (built, cast)]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)
