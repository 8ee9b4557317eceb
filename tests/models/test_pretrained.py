"""save_pretrained / from_pretrained: identical logits for every head, tied weights kept, wrong heads refused."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from conftest import shard_weights

import markovformer
from markovformer import (
    MarkovianTransformerConfig,
    MarkovianTransformerForCausalLM,
    MarkovianTransformerForCTC,
    MarkovianTransformerForSequenceClassification,
    MarkovianTransformerForTokenClassification,
)
from markovformer.layers.registry import ATTENTION_KINDS, build_attention

SMALL = dict(d_model=16, n_layers=2, n_heads=2, num_labels=3)
FEATURES = dict(num_features=16, chunk_size=4)  # the random-feature kinds' small sizes
HEADS = {
    "causal_lm": (
        MarkovianTransformerForCausalLM,
        dict(vocab_size=11, max_order=2, attention=["markov", "hybrid_split"], **FEATURES),
    ),
    "sequence": (
        MarkovianTransformerForSequenceClassification,
        dict(vocab_size=11, causal=False, pooling="cls", gru=True, attention=["rff", "hybrid_parallel"], **FEATURES),
    ),
    "token": (MarkovianTransformerForTokenClassification,
              dict(vocab_size=11, max_order=2, causal=False, gate_input="sequence")),
    "ctc": (MarkovianTransformerForCTC, dict(input_dim=5, causal=False, attention="softmax", gru=True)),
    # S4D's and H3's poles and steps keep float32 in a bfloat16 model (layers.precision): a file of two dtypes
    "causal_lm_ssm": (MarkovianTransformerForCausalLM, dict(vocab_size=11, attention=["s4d", "h3"],
                                                            ssm_state_size=4)),
}


def _model(name: str, seed: int = 0):
    model_class, options = HEADS[name]
    torch.manual_seed(seed)
    model = model_class(MarkovianTransformerConfig(**SMALL, **options)).eval()
    with torch.no_grad():  # non-default values everywhere, so a parameter left at its init would show
        for parameter in model.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def _inputs(model):
    if model.config.vocab_size is not None:
        return dict(input_ids=torch.randint(0, 11, (2, 7), generator=torch.Generator().manual_seed(1)))
    return dict(input_features=torch.randn(2, 7, 5, generator=torch.Generator().manual_seed(1)))


@pytest.mark.parametrize("sharded", [False, True], ids=["whole", "sharded"])
@pytest.mark.parametrize("name", list(HEADS))
def test_round_trip_gives_identical_logits(name, sharded, tmp_path):
    """Also from the weights in shards, as transformers' save_pretrained writes them with a small max_shard_size
    (they were refused: "no model.safetensors here")."""
    model = _model(name)
    model.save_pretrained(tmp_path)
    if sharded:
        shard_weights(tmp_path, parts=3)
    loaded = type(model).from_pretrained(tmp_path)
    assert loaded.config == model.config
    inputs = _inputs(model)
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)
    fresh = _model(name, seed=1)
    assert not torch.equal(fresh(**inputs).logits, model(**inputs).logits)  # logits do depend on the weights


@pytest.mark.parametrize("name", list(HEADS))
def test_a_loaded_model_is_in_eval_mode_and_gives_the_saved_models_logits(name, tmp_path):
    """from_pretrained returned a model in training mode, torch's default: with dropout 0.1 its logits moved by 0.08
    from the saved model's and by 0.18 between two calls. It loads in eval mode, as transformers' does."""
    model_class, options = HEADS[name]
    torch.manual_seed(0)
    model = model_class(MarkovianTransformerConfig(**SMALL, **options, dropout=0.1)).eval()
    model.save_pretrained(tmp_path)
    loaded = model_class.from_pretrained(tmp_path)
    assert not any(module.training for module in loaded.modules())
    inputs = _inputs(model)
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)


@pytest.mark.parametrize("sharded", [False, True], ids=["whole", "sharded"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["causal_lm", "sequence", "causal_lm_ssm"])
def test_a_model_loads_in_the_dtype_it_was_saved_in(name, dtype, sharded, tmp_path):
    """As transformers' own loader reads the same directory: a float32 copy of bfloat16 weights computes other
    logits than the model that was saved. A bfloat16 S4D model saves float32 poles beside its bfloat16 weights; it
    loaded whole in float32 (logits 2e-3 off). Shards (the poles in another than the weights) load as the whole file."""
    model = _model(name).to(dtype)
    model.save_pretrained(tmp_path)
    if sharded:
        shard_weights(tmp_path, parts=3)
    loaded = type(model).from_pretrained(tmp_path)
    assert loaded.dtype == dtype
    dtypes = {key: tensor.dtype for key, tensor in [*model.named_parameters(), *model.named_buffers()]}
    assert {key: tensor.dtype for key, tensor in [*loaded.named_parameters(), *loaded.named_buffers()]} == dtypes
    inputs = _inputs(model)
    assert torch.equal(loaded(**inputs).logits, model(**inputs).logits)


@pytest.mark.parametrize("saved, loaded_as", [("causal_lm", "token"), ("token", "sequence"), ("sequence", "ctc")])
def test_loading_another_head_class_raises(saved, loaded_as, tmp_path):
    _model(saved).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match=HEADS[saved][0].__name__):
        HEADS[loaded_as][0].from_pretrained(tmp_path)


@pytest.mark.parametrize("sharded", [False, True], ids=["whole", "sharded"])
def test_tied_embeddings_stay_tied(tmp_path, sharded):
    config = MarkovianTransformerConfig(**SMALL, vocab_size=11, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(config).eval()
    assert model.lm_head.weight is model.model.embed.weight
    with torch.no_grad():
        model.model.embed.weight.normal_()
    model.save_pretrained(tmp_path)
    if sharded:
        shard_weights(tmp_path)
    loaded = MarkovianTransformerForCausalLM.from_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.model.embed.weight
    assert torch.equal(loaded.lm_head.weight, model.model.embed.weight)
    ids = torch.randint(0, 11, (1, 6), generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded(ids).logits, model(ids).logits)


def test_missing_files_raise(tmp_path):
    with pytest.raises(ValueError, match="config.json"):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("change", ["missing", "unexpected"])
def test_weights_that_lack_a_tensor_or_hold_another_are_refused_naming_the_file(change, tmp_path):
    """A weights file must hold exactly the model's tensors: one left out would keep its random init (other logits
    than the saved model's), one unknown means another model's file; both raise naming model.safetensors."""
    from safetensors.torch import load_file, save_file

    _model("causal_lm").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    if change == "missing":
        tensors.pop(sorted(tensors)[0])
    else:
        tensors["extra.weight"] = torch.zeros(2)
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="model.safetensors does not match MarkovianTransformerForCausalLM"):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("damage", ["missing", "unexpected", "shard-gone"])
def test_shards_that_lack_a_tensor_or_hold_another_are_refused_naming_the_index(damage, tmp_path):
    """Shards read as one file: a tensor no shard holds keeps its random init, one the model lacks is another
    model's; both raise naming the index, as a shard the index names that is gone."""
    import json

    _model("causal_lm").save_pretrained(tmp_path)
    weight_map = shard_weights(tmp_path)
    index = tmp_path / "model.safetensors.index.json"
    if damage == "shard-gone":
        (tmp_path / "model-00002-of-00002.safetensors").unlink()
    else:
        from safetensors.torch import load_file, save_file

        shard = tmp_path / "model-00001-of-00002.safetensors"
        tensors = load_file(shard)
        if damage == "missing":
            weight_map.pop(tensors.popitem()[0])
        else:
            tensors["extra.weight"], weight_map["extra.weight"] = torch.zeros(2), shard.name
        save_file(tensors, shard)
        index.write_text(json.dumps({"weight_map": weight_map}))
    expected = ("'model-00002-of-00002.safetensors', which is no safetensors file" if damage == "shard-gone"
                else "model.safetensors.index.json does not match MarkovianTransformerForCausalLM")
    with pytest.raises(ValueError, match=expected):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("content", [b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header....", b"", b"\x00" * 3])
def test_a_damaged_weights_file_is_refused_naming_it(content, tmp_path):
    """It raised safetensors' SafetensorError ('Error while deserializing header: ...'), naming no file."""
    _model("causal_lm").save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(content)
    with pytest.raises(ValueError, match=r"model.safetensors is not a readable safetensors file: "):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path)


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000], ids=["not-json", "nested-too-deeply"])
def test_a_config_that_is_not_json_raises_naming_it(tmp_path, text):
    """A crafted config.json nested 100,000 deep raised RecursionError (a traceback at the command line) where
    '{not json' raises ValueError naming the file."""
    _model("causal_lm").save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match="config.json: not a saved MarkovianTransformerForCausalLM.s config: not "
                                         "valid JSON"):
        MarkovianTransformerForCausalLM.from_pretrained(tmp_path)


def test_num_parameters_device_and_dtype_of_the_base():
    config = MarkovianTransformerConfig(**SMALL, vocab_size=11, tie_word_embeddings=True)
    model = MarkovianTransformerForCausalLM(config)
    unique = {id(p): p.numel() for p in model.parameters()}  # the tied embedding counted once
    assert model.num_parameters() == sum(unique.values())
    untied = MarkovianTransformerForCausalLM(config.replace(tie_word_embeddings=False))
    assert untied.num_parameters() == model.num_parameters() + 11 * 16  # its own output matrix
    model.model.embed.weight.requires_grad_(False)
    assert model.num_parameters() == sum(unique.values()) - 11 * 16
    assert model.num_parameters(trainable_only=False) == sum(unique.values())
    assert model.dtype == torch.float32 and model.double().dtype == torch.float64
    assert model.device == torch.device("cpu")


# a family's config for the test below, or None for a family whose config has no initializer_range (the VMT's
# networks keep torch's defaults); a family new in models/registry.py adds its entry
INITIALISED_FAMILIES = {
    "markovian_transformer": dict(vocab_size=50, d_model=64, n_heads=2, n_layers=1, num_labels=32),
    "scan_markov": dict(vocab_size=50, d_model=64, order=3),
    "markov_translator": dict(vocab_size=50, d_model=64, n_heads=2, n_encoder_layers=1, n_decoder_layers=1),
    "vmt": None,
}
HEAD_OPTIONS = {"MarkovianTransformerForCTC": dict(vocab_size=None, input_dim=32)}  # features, not token ids


def test_every_family_has_its_initialisation_entry():
    from markovformer.models.registry import MODEL_FAMILIES

    assert set(INITIALISED_FAMILIES) == set(MODEL_FAMILIES), "a new family adds its entry to INITIALISED_FAMILIES"


@pytest.mark.parametrize("family", sorted(INITIALISED_FAMILIES))
def test_every_family_initialises_linear_and_embedding_weights_from_its_config(family):
    """Every Linear and Embedding weight of a head of the family (of 1,000 entries or more, for a standard deviation
    to read: the classification and CTC heads' layers included) is drawn with std ``initializer_range`` and every
    Linear bias is zero (the attention kinds' own parameters, checked below, may differ)."""
    from markovformer.models.registry import MODEL_FAMILIES

    entry = MODEL_FAMILIES[family]
    if INITIALISED_FAMILIES[family] is None:
        assert "initializer_range" not in {field.name for field in dataclasses.fields(entry.config_class)}
        return
    for head in entry.heads.values():
        torch.manual_seed(0)
        options = {**INITIALISED_FAMILIES[family], **HEAD_OPTIONS.get(head.__name__, {})}
        model = head(entry.config_class(**options, initializer_range=0.5))
        for name, module in model.named_modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and module.weight.numel() >= 1000:
                assert abs(float(module.weight.detach().std()) - 0.5) < 0.05, (
                    f"{head.__name__}.{name} is not drawn from initializer_range: does the head call "
                    "self.init_weights() after building its modules?")  # fmt: skip
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                assert float(module.bias.detach().abs().max()) == 0.0, (head.__name__, name)


def test_a_model_whose_config_has_no_initializer_range_reinitialises_as_a_fresh_build():
    """``init_weights()`` of a VMT (torch's initialisation of each module, no ``initializer_range``) raised
    AttributeError; the whole model, or one module of it, gets the tensors a fresh build draws from the same seed."""
    from markovformer import VariationalMarkovTransformer, VMTConfig

    config = VMTConfig(vocab_size=7, d_model=8, n_layers=1, n_heads=2, latent_dim=4, hidden_dim=8)
    torch.manual_seed(3)
    fresh = VariationalMarkovTransformer(config)
    model = VariationalMarkovTransformer(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.fill_(0.25)
    torch.manual_seed(3)
    model.init_weights()
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name
    with torch.no_grad():
        model.embed.weight.fill_(0.25)
        model.emission.linear.weight.fill_(0.25)
    torch.manual_seed(3)
    model.init_weights(model.embed)
    assert torch.equal(model.embed.weight, fresh.embed.weight)
    assert bool((model.emission.linear.weight == 0.25).all())  # another module is left alone
    with pytest.raises(ValueError, match="init_weights: Linear is not a module of this VMT"):
        model.init_weights(torch.nn.Linear(2, 2))


def _kind_model_section(kind: str) -> dict:
    """A one-layer model section of attention kind ``kind`` that builds (the options some kinds require)."""
    section = {"vocab_size": 11, "d_model": 16, "n_heads": 2, "n_layers": 1, "attention": kind, "position": "none"}
    if not ATTENTION_KINDS[kind].accepts_causal(True):
        section["causal"] = False
    if kind == "linformer":
        section["max_positions"] = 8
    return section


@pytest.mark.parametrize("kind", sorted(ATTENTION_KINDS))
def test_the_model_init_keeps_what_each_attention_kind_initialises_itself(kind):
    """A layer's deliberate start (FoX's forget-gate biases 1..5, a decay's fixed rates, ...) is what two builds with
    different seeds agree on; the model's init (normal weights, zero Linear biases) must leave it as the layer set it.
    It did not for FoX: its gate was an nn.Linear, and the model's init zeroed the biases (every gate at 0.5)."""
    section = _kind_model_section(kind)
    shared = {k: section.get(k, True) for k in ("d_model", "n_heads", "causal")} | {"rotary": False}
    layers = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        layers.append(build_attention(kind, **shared, **{k: v for k, v in section.items() if k == "max_positions"}))
    alone = dict(layers[0].named_parameters())
    chosen = {name: value for name, value in alone.items()
              if torch.equal(value, dict(layers[1].named_parameters())[name])}  # fmt: skip
    config = MarkovianTransformerConfig(**section)
    model = (MarkovianTransformerForCausalLM if config.causal else MarkovianTransformerForTokenClassification)(config)
    in_model = dict(model.model.blocks[0].attention.named_parameters())
    assert set(in_model) == set(alone)
    changed = [name for name, value in chosen.items() if not torch.equal(in_model[name], value)]
    assert not changed, f"{kind}: the model's init changed the layer's own start of {changed}"


def test_every_public_models_forward_says_what_it_takes_and_returns():
    """help(Model.forward) showed nn.Module's "Define the computation performed at every call. Should be overridden
    by all subclasses." for a forward without a docstring of its own."""
    placeholder = inspect.getdoc(torch.nn.Module.forward)
    models = [getattr(markovformer, name) for name in markovformer.__all__]
    models = [model for model in models if isinstance(model, type) and issubclass(model, torch.nn.Module)]
    undocumented = [model.__name__ for model in models
                    if model is not markovformer.PreTrainedModel and inspect.getdoc(model.forward) == placeholder]
    assert len(models) > 5 and not undocumented
