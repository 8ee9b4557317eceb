"""The ``hf`` extra: markovformer models through ``transformers``' Auto classes, ``generate`` and ``Trainer``.

Skipped when ``transformers`` is not installed (``pip install "markovformer[hf]"``); the core's independence from
it is tested in a subprocess that blocks the import."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
    ScanMarkovConfig,
    ScanMarkovForCausalLM,
)
from markovformer.markov import lagged_chain

SMALL = dict(vocab_size=11, d_model=16, n_layers=2, n_heads=2, max_order=2)


def _transformers():
    reason = "the hf extra is not installed (pip install 'markovformer[hf]')"
    transformers = pytest.importorskip("transformers", reason=reason)
    # skipped with its one-line reason where transformers cannot run this torch
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    return transformers


def _saved(model: torch.nn.Module, directory) -> torch.nn.Module:
    with torch.no_grad():  # weights away from the init, so that a parameter left unloaded would show
        for parameter in model.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    model.eval().save_pretrained(directory)
    return model


def test_the_core_imports_and_runs_without_transformers():
    code = (
        "import sys; sys.modules['transformers'] = None\n"  # any import of transformers now fails
        "import torch, markovformer\n"
        "from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM\n"
        "model = MarkovianTransformerForCausalLM(MarkovianTransformerConfig(vocab_size=5, d_model=8, n_heads=2))\n"
        "print(model.generate(torch.tensor([[1, 2]]), max_new_tokens=3).shape)\n"
        "try:\n    import markovformer.hf\nexcept ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    expected_error = 'markovformer.hf needs transformers: pip install "markovformer[hf]"'
    assert result.stdout.splitlines() == ["torch.Size([1, 5])", expected_error]


@pytest.mark.parametrize(
    "auto_name, model",
    [
        ("AutoModelForCausalLM", lambda: MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
            **SMALL, tie_word_embeddings=True))),
        ("AutoModelForCausalLM", lambda: ScanMarkovForCausalLM(ScanMarkovConfig(vocab_size=11, d_model=16,
                                                                                 order=3))),
        ("AutoModelForSequenceClassification", lambda: MarkovianTransformerForSequenceClassification(
            MarkovianTransformerConfig(**SMALL, causal=False, pooling="cls", num_labels=3))),
        ("AutoModelForTokenClassification", lambda: MarkovianTransformerForTokenClassification(
            MarkovianTransformerConfig(**SMALL, num_labels=4))),
    ],
    ids=["markovian_causal_lm", "scan_markov_causal_lm", "sequence_classification", "token_classification"],
)  # fmt: skip
def test_auto_classes_load_a_saved_model_with_identical_logits(auto_name, model, tmp_path):
    transformers = _transformers()
    import markovformer.hf  # noqa: F401 - registers the Auto classes

    torch.manual_seed(0)
    ours = _saved(model(), tmp_path)
    config = transformers.AutoConfig.from_pretrained(tmp_path)
    assert config.to_markovformer() == ours.config
    loaded = getattr(transformers, auto_name).from_pretrained(tmp_path)
    assert type(loaded.markovformer) is type(ours)
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, ours(ids).logits)


def test_a_ctc_model_loads_through_auto_model_for_ctc_with_its_logits_and_loss(tmp_path):
    transformers = _transformers()
    import markovformer.hf  # noqa: F401
    from markovformer import MarkovianTransformerForCTC

    torch.manual_seed(0)
    config = MarkovianTransformerConfig(input_dim=6, num_labels=5, d_model=16, n_layers=2, n_heads=2, max_order=2,
                                        causal=False)  # fmt: skip
    ours = _saved(MarkovianTransformerForCTC(config), tmp_path)
    loaded = transformers.AutoModelForCTC.from_pretrained(tmp_path)
    assert type(loaded.markovformer) is MarkovianTransformerForCTC
    features = torch.randn(3, 10, 6, generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[1] * 10, [1] * 7 + [0] * 3, [1] * 9 + [0]])
    labels = torch.tensor([[1, 2, 3], [4, -100, -100], [2, 2, -100]])
    with torch.no_grad():
        theirs = loaded(input_features=features, attention_mask=mask, labels=labels)
        expected = ours(input_features=features, attention_mask=mask, labels=labels)
        plain = loaded(input_features=features, attention_mask=mask, labels=labels, return_dict=False)
    assert isinstance(theirs, transformers.modeling_outputs.CausalLMOutput)
    assert torch.equal(theirs.logits, expected.logits) and torch.equal(theirs.loss, expected.loss)
    assert len(plain) == 2 and torch.equal(plain[0], expected.loss) and torch.equal(plain[1], expected.logits)


def test_seq2seq_and_vmt_load_through_their_auto_classes(tmp_path):
    transformers = _transformers()
    import markovformer.hf  # noqa: F401
    from markovformer import (
        MarkovTranslatorConfig,
        MarkovTranslatorForConditionalGeneration,
        VariationalMarkovTransformer,
        VMTConfig,
    )

    torch.manual_seed(0)
    mat = _saved(MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=2, order=2, dropout=0.0,
        max_positions=32)), tmp_path / "mat")  # fmt: skip
    loaded = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "mat")
    source = torch.randint(3, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    target = torch.randint(3, 11, (2, 4), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=source, decoder_input_ids=target).logits, mat(source, target).logits)
    vmt = _saved(VariationalMarkovTransformer(VMTConfig(vocab_size=11, latent_dim=2, d_model=8, n_layers=1,
                                                        n_heads=2, hidden_dim=8)), tmp_path / "vmt")  # fmt: skip
    loaded = transformers.AutoModel.from_pretrained(tmp_path / "vmt")
    with torch.no_grad():
        torch.manual_seed(3)  # the ELBO draws latent samples from the global generator
        theirs = loaded(input_ids=source).elbo
        torch.manual_seed(3)
        assert torch.equal(theirs, vmt(input_ids=source).elbo)


@pytest.mark.parametrize("name", ["output_attentions", "output_hidden_states"])
def test_the_translator_and_vmt_wrappers_refuse_hidden_states_and_attentions_by_name(name, tmp_path):
    """Only the Markovian Transformer's wrappers hand out hidden states and attentions; a translator's or a VMT's
    forward dropped the request and returned None in their place (the translator has attention maps: None read
    as if it had none)."""
    transformers = _transformers()
    import markovformer.hf  # noqa: F401
    from markovformer import VariationalMarkovTransformer, VMTConfig

    _translator().save_pretrained(tmp_path / "mat")
    VariationalMarkovTransformer(VMTConfig(vocab_size=11, latent_dim=2, d_model=8, n_layers=1, n_heads=2,
                                           hidden_dim=8)).save_pretrained(tmp_path / "vmt")  # fmt: skip
    translator = transformers.AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "mat").eval()
    vmt = transformers.AutoModel.from_pretrained(tmp_path / "vmt").eval()
    source = torch.randint(4, 11, (2, 6), generator=torch.Generator().manual_seed(1))
    for model, inputs in ((translator, dict(input_ids=source, decoder_input_ids=source[:, :4])),
                          (vmt, dict(input_ids=source))):  # fmt: skip
        with torch.no_grad():
            assert model(**inputs, **{name: False}) is not None  # not asked: runs
            with pytest.raises(ValueError, match=rf"^{type(model.markovformer).__name__} returns no hidden states "
                                                 rf"or attentions .*: leave {name} unset$"):  # fmt: skip
                model(**inputs, **{name: True})


def _translator():
    from markovformer import MarkovTranslatorConfig, MarkovTranslatorForConditionalGeneration

    return MarkovTranslatorForConditionalGeneration(MarkovTranslatorConfig(
        vocab_size=11, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, order=2, dropout=0.0,
        max_positions=32, pad_token_id=1, bos_token_id=2, eos_token_id=3))  # fmt: skip


def _wrapper_class(model: torch.nn.Module):
    from markovformer.hf import HF_CLASSES

    return next(wrapper for _, wrapper in HF_CLASSES.values() if wrapper.markovformer_class is type(model))


@pytest.mark.parametrize(
    "model",
    [lambda: MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, tie_word_embeddings=True)),
     lambda: MarkovianTransformerForSequenceClassification(MarkovianTransformerConfig(
         **SMALL, causal=False, pooling="cls", num_labels=3)),
     _translator],
    ids=["causal_lm_tied", "sequence_classification_3_labels", "translator_token_ids"],
)  # fmt: skip
@pytest.mark.parametrize("shard_size", [None, "4KB"], ids=["whole", "sharded"])
def test_a_directory_saved_by_transformers_loads_natively_with_identical_logits(model, shard_size, tmp_path):
    """transformers writes its own keys (architectures, dtype, ...) and keeps the label count as id2label only; with
    a max_shard_size below the weights' size, shards and their index, no model.safetensors (refused natively: "no
    model.safetensors here")."""
    _transformers()
    torch.manual_seed(0)
    ours = _saved(model(), tmp_path / "ours")
    sharding = {} if shard_size is None else {"max_shard_size": shard_size}
    _wrapper_class(ours).from_pretrained(tmp_path / "ours").save_pretrained(tmp_path / "theirs", **sharding)
    assert (tmp_path / "theirs" / "model.safetensors").exists() == (shard_size is None)
    written = json.loads((tmp_path / "theirs" / "config.json").read_text())
    assert {"architectures", "dtype", "transformers_version"} <= written.keys() and "architecture" not in written
    native = type(ours).from_pretrained(tmp_path / "theirs")
    assert native.config == ours.config
    ids = torch.randint(4, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    inputs = (ids, ids[:, :5]) if ours.config.model_type == "markov_translator" else (ids,)
    with torch.no_grad():
        assert torch.equal(native(*inputs).logits, ours(*inputs).logits)


def test_init_from_a_sharded_transformers_directory_takes_the_weights_of_the_whole_one(tmp_path):
    """transformers' save_pretrained with a small max_shard_size writes model.safetensors.index.json and its shards,
    no model.safetensors: init_from refused such a folder as "neither a run directory nor a saved model directory".
    It reads the shards the index names: every tensor, as from the same model saved whole. Its record's digest is
    that of our own save, whose tied embedding is lm_head.weight where transformers keeps model.embed.weight (the
    records differed)."""
    _transformers()
    from markovformer.training.init_from import initialise_from

    torch.manual_seed(0)
    source = _saved(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL, tie_word_embeddings=True)),
                    tmp_path / "ours")  # fmt: skip
    wrapper = _wrapper_class(source).from_pretrained(tmp_path / "ours")
    wrapper.save_pretrained(tmp_path / "whole")
    wrapper.save_pretrained(tmp_path / "sharded", max_shard_size="4KB")
    assert not (tmp_path / "sharded" / "model.safetensors").exists()
    assert len(list((tmp_path / "sharded").glob("model-*-of-*.safetensors"))) > 2
    records, states = [], []
    for folder in ("whole", "sharded", "ours"):
        model = MarkovianTransformerForCausalLM(source.config)
        records.append(initialise_from(model, tmp_path / folder, []))
        states.append(model.state_dict())
    assert records[0]["tensors_sha256"] == records[1]["tensors_sha256"] == records[2]["tensors_sha256"]
    assert records[1]["file"] == str((tmp_path / "sharded" / "model.safetensors.index.json").resolve())
    for name, tensor in source.state_dict().items():
        assert torch.equal(states[1][name], tensor) and torch.equal(states[0][name], tensor), name


def test_a_native_save_of_a_transformers_directory_keeps_its_label_names_and_token_ids(tmp_path):
    """Label names and special token ids that transformers wrote survive a markovformer load and save (they were
    dropped: the pipeline then named the classes LABEL_0..2 and generate had no pad id); its writer's keys do not."""
    transformers = _transformers()
    from markovformer.hf import HF_CONFIGS

    torch.manual_seed(0)
    config = HF_CONFIGS["markovian_transformer"](**SMALL, causal=False, pooling="mean", pad_token_id=0,
                                                 id2label={0: "pos", 1: "neg", 2: "q"})  # fmt: skip
    wrapper = transformers.AutoModelForSequenceClassification.from_config(config)
    wrapper.save_pretrained(tmp_path / "theirs")
    native = MarkovianTransformerForSequenceClassification.from_pretrained(tmp_path / "theirs")
    native.save_pretrained(tmp_path / "ours")
    written = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert written["id2label"] == {"0": "pos", "1": "neg", "2": "q"} and written["pad_token_id"] == 0
    assert not {"architectures", "dtype", "transformers_version"} & written.keys()
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "ours")
    assert loaded.config.id2label == {0: "pos", 1: "neg", 2: "q"} and loaded.config.pad_token_id == 0
    assert MarkovianTransformerForSequenceClassification.from_pretrained(tmp_path / "ours").config == native.config
    # a head of another label count with the settings read: its label names no longer fit and are not written
    other = MarkovianTransformerForSequenceClassification(native.config.replace(num_labels=5))
    other.transformers_settings = native.transformers_settings
    with pytest.warns(UserWarning, match="id2label=.* no longer fits its config and is not written"):
        other.save_pretrained(tmp_path / "five")
    written = json.loads((tmp_path / "five" / "config.json").read_text())
    assert "id2label" not in written and written.get("label2id") is None and written["pad_token_id"] == 0


@pytest.mark.parametrize("task", ["sequence_classification", "token_classification"])
def test_a_trained_classifier_names_its_classes_as_its_data_does(tmp_path, task):
    """A classification run's model/ held no label names: transformers' Auto classes and pipelines named the
    classes LABEL_0, LABEL_1 and only the run's data.json knew them. The data's names (in label_names' order, the
    order of the ids) are the config's id2label and label2id."""
    transformers = _transformers()
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    names = ["up", "down", "flat"]  # numbered in label_names_in_order's order (data.json)
    generator = torch.Generator().manual_seed(0)
    rows = "".join(f"{float(torch.randn(1, generator=generator)):.5f},{names[i % 3]}\n" for i in range(40))
    (tmp_path / "series.csv").write_text("x,move\n" + rows)
    values = {"task": task, "output_dir": str(tmp_path / "run"),
              "model": {"d_model": 8, "n_layers": 1, "n_heads": 2, "max_order": 2, "causal": True},
              "data": {"source": "csv_series", "path": str(tmp_path / "series.csv"), "window": 4,
                       "label_column": "move"},
              "trainer": {"max_steps": 2, "batch_size": 4, "eval_every": 2, "checkpoint_every": 2, "log_every": 2}}
    train(resolve_run_config(values))
    numbered = json.loads((tmp_path / "run" / "data.json").read_text())["info"]["label_names"]
    assert sorted(numbered) == sorted(names)
    auto = getattr(transformers, f"AutoModelFor{''.join(word.title() for word in task.split('_'))}")
    loaded = auto.from_pretrained(tmp_path / "run" / "model")
    assert loaded.config.id2label == dict(enumerate(numbered))
    assert loaded.config.label2id == {name: index for index, name in enumerate(numbered)}


def test_loading_a_transformers_directory_natively_still_refuses_unknown_keys_and_other_heads(tmp_path):
    _transformers()
    torch.manual_seed(0)
    ours = _saved(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL)), tmp_path / "ours")
    _wrapper_class(ours).from_pretrained(tmp_path / "ours").save_pretrained(tmp_path / "theirs")
    with pytest.raises(ValueError, match="holds a MarkovianTransformerForCausalLM, not a MarkovianTransformerFor"):
        MarkovianTransformerForSequenceClassification.from_pretrained(tmp_path / "theirs")
    config = tmp_path / "theirs" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "n_layer": 2}))
    with pytest.raises(ValueError, match="has no field 'n_layer' \\(did you mean 'n_layers'\\?\\)"):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "theirs")


def test_weights_that_do_not_fit_the_config_raise_unless_strict_is_off(tmp_path):
    """transformers itself loads a config with more layers than the weights, leaving the extra layer's parameters
    uninitialised (here: whatever memory held, NaN included), and only logs it."""
    transformers = _transformers()
    import markovformer.hf  # noqa: F401

    torch.manual_seed(0)
    ours = _saved(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL)), tmp_path / "two")
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    loaded, info = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "two", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).logits, ours(ids).logits)

    for layers, kind in ((3, "missing from the checkpoint"), (1, "are not in the model")):
        shutil.copytree(tmp_path / "two", tmp_path / str(layers))
        config = tmp_path / str(layers) / "config.json"
        config.write_text(json.dumps({**json.loads(config.read_text()), "n_layers": layers}))
        with pytest.raises(ValueError, match=f"'s model\\.blocks\\.{min(layers, 2)}\\.[^ ]+, .* {kind}"):
            transformers.AutoModelForCausalLM.from_pretrained(tmp_path / str(layers))
    three = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "3", strict=False).markovformer
    assert not hasattr(three.config, "strict")
    extra = dict(three.model.blocks[2].named_parameters())
    assert torch.equal(extra["attention_norm.weight"], torch.ones(16))  # markovformer's initialisation
    assert 0.01 < float(extra["attention.qkv.weight"].detach().std()) < 0.03  # N(0, initializer_range = 0.02²)
    for kept, saved in zip(three.model.blocks[:2].parameters(), ours.model.blocks.parameters(), strict=True):
        assert torch.equal(kept, saved)


def test_auto_model_loads_the_backbone(tmp_path):
    transformers = _transformers()
    import markovformer.hf  # noqa: F401

    torch.manual_seed(0)
    ours = _saved(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(**SMALL)).model, tmp_path)
    loaded = transformers.AutoModel.from_pretrained(tmp_path)
    ids = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=ids).last_hidden_state, ours(ids).last_hidden_state)


@pytest.mark.parametrize("options", [dict(scope="local", window=3), dict(attention="softmax")], ids=["local", "global"])
def test_transformers_greedy_generate_gives_our_ids(options, tmp_path):
    transformers = _transformers()
    import markovformer.hf  # noqa: F401

    torch.manual_seed(0)
    ours = _saved(MarkovianTransformerForCausalLM(MarkovianTransformerConfig(
        **{**SMALL, **options, **({"max_order": 4} if "attention" in options else {})})), tmp_path)  # fmt: skip
    loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path)
    prompt = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(2))
    theirs = loaded.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=12,
                             pad_token_id=0)  # fmt: skip
    assert torch.equal(theirs, ours.generate(prompt, max_new_tokens=12))


def test_transformers_trainer_lowers_the_loss_on_a_markov_chain(tmp_path):
    transformers = _transformers()
    pytest.importorskip("accelerate", reason="transformers' Trainer needs accelerate (the hf extra installs it)")
    import markovformer.hf  # noqa: F401
    from markovformer.hf import HF_CLASSES, HF_CONFIGS

    chain = lagged_chain(num_symbols=6, lags=(1, 2), generator=torch.Generator().manual_seed(0))
    sequences = chain.sample(512, 32, generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row} for row in sequences]
    config = HF_CONFIGS["markovian_transformer"](vocab_size=6, d_model=32, n_layers=1, n_heads=2, max_order=2)
    model = HF_CLASSES["markovian_transformer", "causal_lm"][1](config)
    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path), max_steps=300, per_device_train_batch_size=16, learning_rate=3e-3,
        logging_steps=50, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True, seed=0,
        gradient_checkpointing=True,  # blocks recomputed in the backward pass (same gradients: test_hf_native_models)
    )  # fmt: skip
    held_out = chain.sample(256, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = float(model.eval()(input_ids=held_out, labels=held_out).loss)
    trainer = transformers.Trainer(model=model, args=arguments, train_dataset=data)
    trainer.train()
    assert model.model.gradient_checkpointing
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    with torch.no_grad():
        after = float(model.eval()(input_ids=held_out, labels=held_out).loss)
    assert len(losses) == 6 and losses == sorted(losses, reverse=True), losses  # falling at every logging step
    floor = float(chain.entropy_rate())  # the lowest loss any model can reach
    assert before > floor + 0.5 and after < floor + 0.1, (before, after, floor)
    trainer.save_model(str(tmp_path / "saved"))  # transformers' config.json, no markovformer class name in it
    native = MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "saved")
    with torch.no_grad():
        assert torch.equal(native(held_out).logits, model(input_ids=held_out).logits)


def test_a_packed_batchs_loss_over_num_items_in_batch_counts_only_the_scored_tokens():
    """Gradient accumulation (the Trainer's num_items_in_batch) over packed documents: the model scores no
    document's first token, so the loss it returns is the documents' summed losses over num_items_in_batch even
    where the labels hold a real token there (counting those labels passed: the other packed test takes
    DataCollatorWithFlattening's labels, -100 there, and no num_items_in_batch)."""
    _transformers()
    from hf_small import random_ids, small_hf

    model = small_hf("causal_lm", dropout=0.0).eval()
    documents = [random_ids(1, length, seed=seed) for length, seed in ((5, 1), (7, 2), (3, 3))]
    input_ids = torch.cat(documents, dim=1)  # labels = the inputs, with no -100 at the document starts
    position_ids = torch.cat([torch.arange(d.shape[1]) for d in documents])[None]
    summed = sum(model(input_ids=d, labels=d, use_cache=False).loss * (d.shape[1] - 1) for d in documents)
    num_items = 40  # the whole accumulated batch's scored tokens; this micro-batch scores 4 + 6 + 2 = 12
    got = model(input_ids=input_ids, labels=input_ids, position_ids=position_ids, num_items_in_batch=num_items)
    torch.testing.assert_close(got.loss, summed / num_items, rtol=1e-5, atol=1e-6)


def test_a_transformers_release_outside_the_supported_range_is_refused_in_one_line():
    """The wrappers follow transformers' Cache and loading APIs, which change between majors: another major fails
    at import, naming the range, instead of deep inside generate."""
    _transformers()
    from markovformer.hf import SUPPORTED_TRANSFORMERS, check_transformers_version

    low, high = SUPPORTED_TRANSFORMERS
    check_transformers_version(f"{low}.0.0")
    check_transformers_version(f"{high - 1}.99.1.dev0")
    for version in (f"{low - 1}.57.1", f"{high}.0.0", "nightly"):
        with pytest.raises(ImportError, match=rf"supports transformers >={low}\.0,<{high} but {version} is installed"):
            check_transformers_version(version)
    assert f"transformers>={low}.0,<{high}" in (Path(__file__).parents[2] / "pyproject.toml").read_text()


def test_a_transformers_that_turned_its_models_off_for_this_torch_is_refused_in_one_line():
    """transformers turns its models off, with a log line and no error, where torch is older than its floor
    (transformers 5.24 needs torch 2.6; with torch 2.5.1 the wrappers failed later with a bare ImportError). The
    refusal names both releases and the floor, read from transformers' own requirements."""
    transformers = _transformers()
    code = (
        "import transformers.utils\n"
        "transformers.utils.is_torch_available = lambda: False\n"  # what transformers says below its torch floor
        "try:\n    import markovformer.hf\nexcept ImportError as error:\n    print(error)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    floor = next(requirement.split(";")[0] for requirement in importlib.metadata.requires("transformers")
                 if requirement.startswith("torch>="))  # fmt: skip
    assert result.stdout.splitlines() == [
        f"markovformer.hf needs transformers' models, but transformers {transformers.__version__} needs {floor} and "
        f"torch {torch.__version__} is installed: upgrade torch, or install an older transformers release that runs it"
    ]
