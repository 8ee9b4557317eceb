"""ALiBi weights saved before the layers saved their slopes, when a head count that is not a power of two took
2^(-8h/H) rather than the paper's slopes: every route that loads weights gives them the logits they gave then, bit
for bit, while a new model takes the paper's slopes and saves them."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from markovformer import MarkovianTransformerConfig, MarkovianTransformerForCausalLM
from markovformer.layers.decay_attention import alibi_slopes, alibi_slopes_of, geometric_slopes
from markovformer.models.markovian_transformer.config import saved_alibi_blocks
from markovformer.training.init_from import initialise_from
from markovformer.training.run_checks import check_tensors_match

HEADS = 6
CONFIG = MarkovianTransformerConfig(vocab_size=11, d_model=12, n_layers=2, n_heads=HEADS, attention="alibi",
                                    position="none")  # fmt: skip
IDS = torch.randint(0, 11, (2, 9), generator=torch.Generator().manual_seed(1))


def _old_model(config: MarkovianTransformerConfig = CONFIG) -> MarkovianTransformerForCausalLM:
    """A 6-head ALiBi model as the old code ran it: slopes 2^(-8h/H), h = 1..H (that code's formula)."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(config).eval()
    with torch.no_grad():
        for block in model.model.blocks:
            block.attention.cores[0].slopes.copy_(2.0 ** (-8.0 * torch.arange(1, HEADS + 1) / HEADS))
    return model


def _old_state(source: torch.nn.Module | dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict the old code saved of a model (or of its state dict): no slopes (a buffer it did not save)."""
    state = source if isinstance(source, dict) else source.state_dict()
    return {name: tensor for name, tensor in state.items() if not name.endswith(".slopes")}


def _saved_by_the_old_code(directory: Path, config: MarkovianTransformerConfig = CONFIG) -> torch.Tensor:
    """``directory`` as the old code's save_pretrained wrote it; returns the logits that code computed."""
    old = _old_model(config)
    old.save_pretrained(directory)
    save_file(_old_state(old), str(directory / "model.safetensors"))
    with torch.no_grad():
        return old(IDS).logits


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(input_ids=IDS).logits


def test_old_weights_keep_their_slopes_and_new_models_take_the_papers():
    old = _old_model()
    torch.manual_seed(0)
    new = MarkovianTransformerForCausalLM(CONFIG)  # the same weights, the paper's slopes
    assert torch.equal(new.model.blocks[0].attention.cores[0].slopes, alibi_slopes(HEADS))
    assert not torch.allclose(_logits(new), _logits(old), atol=1e-3)  # the fix does change a 6-head model
    torch.manual_seed(1)
    loaded = MarkovianTransformerForCausalLM(CONFIG)
    loaded.load_state_dict({**alibi_slopes_of(loaded, old=True), **_old_state(old)})
    assert torch.equal(_logits(loaded), _logits(old))


def _softmax_weights(heads: int = HEADS) -> dict[str, torch.Tensor]:
    """The state dict of a softmax model (no slopes), away from the init so that the logits show any slope."""
    torch.manual_seed(0)
    source = MarkovianTransformerForCausalLM(CONFIG.replace(attention="softmax", n_heads=heads))
    with torch.no_grad():
        for parameter in source.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
    return source.state_dict()


def _given(config: MarkovianTransformerConfig, weights: dict[str, torch.Tensor]) -> MarkovianTransformerForCausalLM:
    """A model built from ``config``, its tensors that ``weights`` names copied from there one by one."""
    model = MarkovianTransformerForCausalLM(config)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if name in weights:
                tensor.copy_(weights[name])
    return model


def test_load_state_dict_of_weights_without_slopes_names_them_where_the_head_count_is_no_power_of_two():
    """load_state_dict cannot tell ALiBi weights saved before slopes were (2^(-8h/H)) from another kind's (which
    take the paper's, as a model built from the config): it gave a softmax model's weights the old sequence, the
    logits 0.61 away from those of the ALiBi config's model given the same weights, and said all keys matched. It
    now names the slopes; either set given with the weights loads, and computes what it should."""
    weights = _softmax_weights()
    model = MarkovianTransformerForCausalLM(CONFIG)
    with pytest.raises(RuntimeError, match=r"lack the ALiBi slopes model\.blocks\.0\.attention\.cores\.0\.slopes"
                                           r".*alibi_slopes_of\(model\).*alibi_slopes_of\(model, old=True\)"):
        model.load_state_dict(weights)
    model.load_state_dict({**alibi_slopes_of(model), **weights})
    assert torch.equal(_logits(model), _logits(_given(CONFIG, weights)))
    old = _old_model()
    model.load_state_dict({**alibi_slopes_of(model, old=True), **_old_state(old)})
    assert torch.equal(_logits(model), _logits(old))


def test_load_state_dict_of_weights_without_slopes_loads_where_the_head_count_is_a_power_of_two():
    """4 heads: the old sequence is the paper's, so either source computes with the slopes a new model has."""
    config = CONFIG.replace(n_heads=4)
    weights = _softmax_weights(4)
    model = MarkovianTransformerForCausalLM(config)
    model.load_state_dict(weights)
    assert torch.equal(model.model.blocks[1].attention.cores[0].slopes, alibi_slopes(4))
    assert torch.equal(_logits(model), _logits(_given(config, weights)))


def test_a_run_of_the_old_code_loads_and_resumes_with_its_slopes(tmp_path):
    """A 6-head ALiBi run whose checkpoint holds no slopes (saved before they were): loaded from that checkpoint
    and resumed, its layers compute with 2^(-8h/H)."""
    import copy

    from conftest import TINY_RUN

    from markovformer.training.checkpoint import load_checkpoint_file, save_checkpoint_file
    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.run_dir import load_trained_run
    from markovformer.training.runner import resume, train

    values = copy.deepcopy(TINY_RUN)
    del values["model"]["max_order"]
    values["model"].update(attention="alibi", n_heads=HEADS, d_model=12, n_layers=2, position="none")
    values["trainer"].update(max_steps=1, warmup_steps=0, eval_every=1, checkpoint_every=1, log_every=1)
    train(resolve_run_config({**values, "output_dir": str(tmp_path)}))
    last = tmp_path / "checkpoints" / "last.ckpt"
    checkpoint = load_checkpoint_file(last)
    checkpoint["state_dict"] = _old_state(checkpoint["state_dict"])
    save_checkpoint_file(checkpoint, last)
    loaded = load_trained_run(last).model
    assert all(torch.equal(block.attention.cores[0].slopes, geometric_slopes(HEADS)) for block in loaded.model.blocks)
    resume(tmp_path, ["trainer.max_steps=2"])
    saved = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert torch.equal(saved["model.blocks.1.attention.cores.0.slopes"], geometric_slopes(HEADS))



def test_a_model_directory_of_the_old_code_loads_with_its_logits(tmp_path):
    expected = _saved_by_the_old_code(tmp_path / "old")
    model = MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "old")
    assert torch.equal(_logits(model), expected)
    model.save_pretrained(tmp_path / "new")  # saved again, the slopes go with the weights
    stored = load_file(str(tmp_path / "new" / "model.safetensors"))
    assert torch.equal(stored["model.blocks.1.attention.cores.0.slopes"], 2.0 ** (-8.0 * torch.arange(1, 7) / 6))
    assert torch.equal(_logits(MarkovianTransformerForCausalLM.from_pretrained(tmp_path / "new")), expected)


def test_transformers_loads_a_model_directory_of_the_old_code_with_its_logits(tmp_path):
    """... and says nothing is missing: the slopes the weights lack are their model's own, not newly initialised
    (its load report listed them as MISSING, "newly initialized", and its loading info as missing keys)."""
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from markovformer.hf import HF_CLASSES

    expected = _saved_by_the_old_code(tmp_path)
    wrapper = HF_CLASSES["markovian_transformer", "causal_lm"][1]
    reports = _Records()
    logger = logging.getLogger("transformers")  # transformers' loggers do not propagate to pytest's
    logger.addHandler(reports)
    try:
        model, info = wrapper.from_pretrained(tmp_path, output_loading_info=True)
    finally:
        logger.removeHandler(reports)
    assert not [message for message in reports.messages if "slopes" in message or "MISSING" in message]
    assert not info["missing_keys"]
    assert torch.equal(_logits(model), expected)


class _Records(logging.Handler):
    """The messages logged through it."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_a_run_checkpoint_and_init_from_of_the_old_code_keep_their_slopes(tmp_path):
    expected = _saved_by_the_old_code(tmp_path)
    old_state = load_file(str(tmp_path / "model.safetensors"))
    model = MarkovianTransformerForCausalLM(CONFIG)
    check_tensors_match(model, {f"model.{name}": tensor for name, tensor in old_state.items()}, tmp_path / "last.ckpt",
                        prefix="model.")  # fmt: skip
    initialise_from(model, tmp_path, [])
    assert torch.equal(_logits(model), expected)


def _without_n_layers(directory: Path) -> tuple[MarkovianTransformerConfig, torch.Tensor]:
    """An old ALiBi folder whose config.json lacks n_layers (written by hand, or trimmed of its defaults): loaded,
    it is a model of the default count of layers. Its config and the logits the old code computed."""
    config = CONFIG.replace(n_layers=MarkovianTransformerConfig.n_layers)
    expected = _saved_by_the_old_code(directory, config)
    values = json.loads((directory / "config.json").read_text())
    del values["n_layers"]
    (directory / "config.json").write_text(json.dumps(values))
    assert torch.equal(_logits(MarkovianTransformerForCausalLM.from_pretrained(directory)), expected)
    return config, expected


def test_init_from_an_old_folder_whose_config_lacks_n_layers_keeps_its_slopes(tmp_path):
    """Its layers took the paper's slopes (no ALiBi blocks read from an ``attention: alibi`` without n_layers),
    though from_pretrained of the same folder keeps the old ones."""
    config, expected = _without_n_layers(tmp_path)
    model = MarkovianTransformerForCausalLM(config)
    initialise_from(model, tmp_path, [])
    assert torch.equal(_logits(model), expected)


def test_transformers_loads_an_old_folder_whose_config_lacks_n_layers_with_its_logits(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from markovformer.hf import HF_CLASSES

    _, expected = _without_n_layers(tmp_path)
    assert torch.equal(_logits(HF_CLASSES["markovian_transformer", "causal_lm"][1].from_pretrained(tmp_path)), expected)


def test_an_old_folder_whose_config_counts_num_hidden_layers_keeps_its_slopes_in_every_layer(tmp_path):
    """transformers' name of the layer count (a config.json written by hand or by other tooling may carry only
    it) counts the ALiBi layers whose old slopes stay: 6 layers read as the default 4, so that init_from and
    transformers' loading gave layers 4 and 5 the paper's slopes (logits 0.0057 away from the old model's)."""
    config = CONFIG.replace(n_layers=6)
    expected = _saved_by_the_old_code(tmp_path, config)
    values = json.loads((tmp_path / "config.json").read_text())
    values["num_hidden_layers"] = values.pop("n_layers")
    (tmp_path / "config.json").write_text(json.dumps(values))
    assert saved_alibi_blocks(values) == set(range(6))
    with pytest.raises(ValueError, match=r"num_hidden_layers=6 and n_layers=5 name one setting"):
        saved_alibi_blocks({**values, "n_layers": 5})
    model = MarkovianTransformerForCausalLM(config)
    initialise_from(model, tmp_path, [])
    assert torch.equal(_logits(model), expected)
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from markovformer.hf import HF_CLASSES

    loaded = HF_CLASSES["markovian_transformer", "causal_lm"][1].from_pretrained(tmp_path)
    assert loaded.config.to_markovformer() == config  # the model that config.json builds
    assert torch.equal(_logits(loaded), expected)


def test_init_from_a_model_of_another_kind_leaves_the_alibi_slopes_fresh(tmp_path):
    """An ALiBi model fine-tuned from a softmax model (the same tensor names, no slopes: ALiBi's only own tensor)
    starts with the paper's slopes, as a fresh ALiBi model does: the source computed with no slopes to keep, so it
    is no ALiBi model of the old code. From a run as from a save_pretrained folder; an old ALiBi folder keeps its
    own (test_a_run_checkpoint_and_init_from_of_the_old_code_keep_their_slopes)."""
    import copy

    from conftest import TINY_RUN

    from markovformer.training.run_config import resolve_run_config
    from markovformer.training.runner import train

    values = copy.deepcopy(TINY_RUN)
    del values["model"]["max_order"]
    values["model"].update(attention="softmax", n_heads=HEADS, d_model=12, n_layers=2, position="none")
    values["trainer"].update(max_steps=1, warmup_steps=0, eval_every=1, checkpoint_every=1, log_every=1)
    train(resolve_run_config({**values, "output_dir": str(tmp_path / "run")}))
    alibi = CONFIG.replace(vocab_size=4)
    for source in (tmp_path / "run", tmp_path / "run" / "model"):
        model = MarkovianTransformerForCausalLM(alibi)
        initialise_from(model, source, [])
        assert all(torch.equal(block.attention.cores[0].slopes, alibi_slopes(HEADS)) for block in model.model.blocks)


def test_a_partial_load_leaves_the_slopes_of_a_new_model_alone():
    """A state dict that holds some tensors only (load_state_dict(strict=False): an adapter's, a new head's) is no
    ALiBi layer saved without its slopes: the model's own slopes, the paper's, stay (they became the old sequence,
    and the logits moved by 0.0076)."""
    torch.manual_seed(0)
    model = MarkovianTransformerForCausalLM(CONFIG).eval()
    expected = _logits(model)
    model.load_state_dict({"lm_head.weight": model.lm_head.weight.detach().clone()}, strict=False)
    assert all(torch.equal(block.attention.cores[0].slopes, alibi_slopes(HEADS)) for block in model.model.blocks)
    assert torch.equal(_logits(model), expected)


@pytest.mark.parametrize("source_kinds", [["softmax", "softmax"], ["alibi", "softmax"]], ids=["softmax", "mixed"])
@pytest.mark.parametrize("asked_by", ["config", "keyword"])
def test_transformers_loads_other_kinds_weights_into_alibi_layers_with_the_papers_slopes(tmp_path, source_kinds,
                                                                                         asked_by):  # fmt: skip
    """Weights of softmax layers, saved without slopes, loaded through transformers into ALiBi layers (``config=``
    an ALiBi config, or ``attention="alibi"``) compute what a model built from that config and given those weights
    does: the paper's slopes, as init_from gives them. They took 2^(-8h/H), as if the source were an ALiBi model of
    the old code (the logits 0.6 away, nothing reported); a layer that was one of those keeps it."""
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from markovformer.hf import HF_CLASSES, HF_CONFIGS

    old = "alibi" in source_kinds  # its block 0 an ALiBi layer of the old code, which computed with 2^(-8h/H)
    torch.manual_seed(0)
    source = MarkovianTransformerForCausalLM(CONFIG.replace(attention=source_kinds))
    with torch.no_grad():  # away from the init, so that the logits show any slope
        for parameter in source.parameters():
            parameter.add_(0.2 * torch.randn_like(parameter))
        if old:
            source.model.blocks[0].attention.cores[0].slopes.copy_(geometric_slopes(HEADS))
    source.save_pretrained(tmp_path)
    save_file(_old_state(source), str(tmp_path / "model.safetensors"))
    kept = {"model.blocks.0.attention.cores.0.slopes": geometric_slopes(HEADS)} if old else {}
    expected = MarkovianTransformerForCausalLM(CONFIG)  # the config asked for, given the same weights
    with torch.no_grad():
        for name, tensor in expected.state_dict().items():
            tensor.copy_({**_old_state(source), **kept}.get(name, tensor))
    wrapper = HF_CLASSES["markovian_transformer", "causal_lm"][1]
    asked = ({"config": HF_CONFIGS["markovian_transformer"](**dataclasses.asdict(CONFIG))} if asked_by == "config"
             else {"attention": "alibi"})  # fmt: skip
    model, info = wrapper.from_pretrained(tmp_path, output_loading_info=True, **asked)
    slopes = [block.attention.cores[0].slopes for block in model.markovformer.model.blocks]
    assert torch.equal(slopes[1], alibi_slopes(HEADS))
    assert torch.equal(slopes[0], geometric_slopes(HEADS) if old else alibi_slopes(HEADS))
    assert not info["missing_keys"]
    assert torch.allclose(_logits(model), _logits(expected), atol=1e-6)


def test_transformers_refuses_alibi_layers_without_slopes_from_a_checkpoint_without_its_config(tmp_path):
    """Without the checkpoint's config.json (a config given instead), nothing tells ALiBi weights of the old code
    (2^(-8h/H)) from another kind's (the paper's slopes): the load names the slopes rather than pick one."""
    pytest.importorskip("transformers")
    pytest.importorskip("markovformer.hf", exc_type=ImportError)
    from markovformer import MarkovianTransformerForTokenClassification
    from markovformer.hf import HF_CLASSES, HF_CONFIGS

    labelled = CONFIG.replace(num_labels=3)  # a causal LM's transformers reads its generation config beside it
    MarkovianTransformerForTokenClassification(labelled.replace(attention="softmax")).save_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    wrapper = HF_CLASSES["markovian_transformer", "token_classification"][1]
    with pytest.raises(ValueError, match=r"lack the ALiBi slopes model\.blocks\.0\.attention\.cores\.0\.slopes, "
                                         r"model\.blocks\.1\..*no config\.json"):  # fmt: skip
        wrapper.from_pretrained(tmp_path, config=HF_CONFIGS["markovian_transformer"](**dataclasses.asdict(labelled)))
