"""The base every model family derives from, and the on-disk model format in one place: ``config.json`` +
``model.safetensors`` (no pickle), written atomically; read also from transformers' shards of it
(``saved_weights``)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import warnings
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from markovformer.atomic import atomic_write, atomic_write_text
from markovformer.layers.decay_attention import own_weights_with_slopes
from markovformer.layers.markov_bias import TransitionStrengths
from markovformer.models.config_base import ModelConfig
from markovformer.models.saved_weights import WEIGHTS_NAME, read_weights_folder, tied_names, weights_file
from markovformer.strict_json import read_json_object

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # Python 3.10: torch's own dependency
    from typing_extensions import dataclass_transform

CONFIG_NAME = "config.json"
# class names a config.json may carry from before the Hugging Face naming: old -> new
RENAMED_ARCHITECTURES = {
    "ScanMarkovLM": "ScanMarkovForCausalLM",
    "MarkovTranslator": "MarkovTranslatorForConditionalGeneration",
}
# markovformer.hf names the transformers wrapper of class X "HFX"; its save_pretrained writes that name
HF_WRAPPER_PREFIX = "HF"
# The keys transformers' PretrainedConfig (v4 and v5) writes into config.json beside a model's own fields: its
# bookkeeping (versions, names, dtype, output switches, label names, special tokens, encoder-decoder flags). None
# describes a markovformer model, so loading ignores them; a key that is also a field of the config is that field
# (the translator's pad/bos/eos ids), and any other key is still refused.
TRANSFORMERS_CONFIG_KEYS = frozenset({
    "_attn_implementation_autoset", "_commit_hash", "_name_or_path", "add_cross_attention", "architectures",
    "bos_token_id", "chunk_size_feed_forward", "cross_attention_hidden_size", "decoder_start_token_id", "dtype",
    "eos_token_id", "finetuning_task", "id2label", "is_decoder", "is_encoder_decoder", "label2id",
    "output_attentions", "output_hidden_states", "pad_token_id", "prefix", "problem_type", "pruned_heads",
    "return_dict", "sep_token_id", "task_specific_params", "tf_legacy_loss", "tie_encoder_decoder",
    "tie_word_embeddings", "tokenizer_class", "torch_dtype", "torchscript", "transformers_version", "use_bfloat16",
    "use_cache",
})  # fmt: skip
# Of those, the ones that describe the writer rather than the model: a save here writes its own, not these.
WRITER_KEYS = frozenset({"_attn_implementation_autoset", "_commit_hash", "_name_or_path", "architectures", "dtype",
                         "torch_dtype", "transformers_version"})  # fmt: skip
ModelT = TypeVar("ModelT", bound="PreTrainedModel")


def _stored_float_dtype(stored: dict[str, torch.Tensor]) -> torch.dtype | None:
    """The floating dtype of a model moved whole with ``.to(dtype)`` that saved the tensors ``stored``: their one
    floating dtype, or the narrowest of several (a half-precision model keeps its ``KeepsFloat32`` tensors in
    float32, which the same cast keeps again); None when there is none, or two of one width (each tensor then takes
    the model's own)."""
    floats = {tensor.dtype for tensor in stored.values() if tensor.is_floating_point()}
    if not floats:
        return None
    narrowest = min(torch.finfo(dtype).bits for dtype in floats)
    of_that_width = [dtype for dtype in floats if torch.finfo(dtype).bits == narrowest]
    return of_that_width[0] if len(of_that_width) == 1 else None


OutputT = TypeVar("OutputT")


@dataclass_transform()  # a type checker sees the class it decorates as the dataclass it becomes
def model_output(cls: type[OutputT]) -> type[OutputT]:
    """A model's forward output: a dataclass, registered as a pytree node (as transformers' ``ModelOutput`` is), so
    that ``torch.export`` can return it (it refused any other type: "Found <class ...Output> in output, which is
    not a known type")."""
    cls = dataclasses.dataclass(cls)
    torch.export.register_dataclass(cls, serialized_type_name=f"{cls.__module__}.{cls.__qualname__}")
    return cls


class PreTrainedModel(nn.Module):
    """A model built from one config: weight init, ``save_pretrained`` / ``from_pretrained``, ``num_parameters``,
    ``device`` and ``dtype``.

    Subclasses build their modules and then call ``self.init_weights()``: every ``nn.Linear`` and ``nn.Embedding``
    gets N(0, ``config.initializer_range``²) weights and zero biases (modules a family initialises its own way are
    left alone by giving them their own types).
    """

    config_class: type[ModelConfig] = ModelConfig

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        # what a config.json written through transformers said beside the model's fields (label names, special
        # token ids, ...; not WRITER_KEYS): ignored by the model, written back by save_pretrained
        self.transformers_settings: dict = {}

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def init_weights(self, module: nn.Module | None = None) -> None:
        """Initialise ``module`` (default: the whole model) and its children with ``_init_weights``."""
        (self if module is None else module).apply(self._init_weights)

    @property
    def device(self) -> torch.device:
        """Where the parameters are (the first one's device)."""
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point parameters' dtype (the first one's)."""
        return next(p for p in self.parameters() if p.is_floating_point()).dtype

    def num_parameters(self, trainable_only: bool = True) -> int:
        """Parameters counted once each (tied weights once), trainable only by default."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad or not trainable_only)

    def check_input_values(self, inputs: dict[str, Any]) -> None:
        """The checks of forward's ``inputs`` (by argument name) that read their values (``inputs.check_input_values``
        with the family's vocabulary, classes and positions), which ``compile`` runs eagerly before each compiled
        call; none by default (the VMT and the binary transformer name none)."""

    def compile(self, *args, **kwargs) -> None:
        """``nn.Module.compile``, with ``check_input_values`` run before each call of the compiled forward: a bad
        value is refused with forward's own ValueError naming it, not a RuntimeError of the graph's without it."""
        super().compile(*args, **kwargs)
        # the arguments by name (TypeError as the call would); the signature read once: 29 us of each call's 34
        graph, signature = self._compiled_call_impl, inspect.signature(self.forward)

        def checked(*call_args, **call_kwargs):
            if not torch.compiler.is_compiling():  # (a call inside a graph, as a packed batch's forward on its
                # documents, would break it to read the values: the outer call's checks cover it)
                self.check_input_values(signature.bind_partial(*call_args, **call_kwargs).arguments)
            return graph(*call_args, **call_kwargs)

        self._compiled_call_impl = checked

    def vocabulary_modules(self) -> tuple[str, ...]:
        """The modules (names as ``named_modules`` gives them) with a row per token id: the token embedding and every
        output over the vocabulary, which a new tokenizer renumbers (``init_from_skip: [embeddings]`` starts their
        tensors fresh); none for a model that reads no token ids."""
        return ()

    def transition_strengths(self) -> list[TransitionStrengths]:
        """Per Markov layer, its per-lag transition strengths ``{"past": (H, K), "future": (H, K) or None}``;
        empty for a family without Markov layers."""
        return []

    def save_pretrained(self, directory: str | Path) -> None:
        """Write ``config.json`` (the config, its ``model_type`` and this class's name, and the
        ``transformers_settings`` it was loaded with) and ``model.safetensors``."""
        from safetensors.torch import save_model

        directory = Path(directory)
        values = {**self._settings_that_hold(), **self.config.to_dict(), "architecture": type(self).__name__}
        atomic_write_text(directory / CONFIG_NAME, json.dumps(values, indent=2) + "\n")
        atomic_write(directory / WEIGHTS_NAME, lambda p: save_model(self, str(p)))

    def _settings_that_hold(self) -> dict:
        """``transformers_settings`` without those the config now contradicts, each dropped with a warning: label
        names of another count than ``num_labels`` (transformers would name the classes LABEL_n), a decoder start
        token other than the config's bos (transformers' generate would start there)."""
        settings, config = dict(self.transformers_settings), self.config
        labels = getattr(config, "num_labels", None)
        stale = [key for key in ("id2label", "label2id") if isinstance(settings.get(key), dict) and labels is not None
                 and len(settings[key]) != labels]  # fmt: skip
        bos = getattr(config, "bos_token_id", settings.get("bos_token_id"))  # the config's, where it has one
        if settings.get("decoder_start_token_id") not in (None, bos):
            stale.append("decoder_start_token_id")
        for key in stale:
            warnings.warn(f"{type(self).__name__}.save_pretrained: {key}={settings.pop(key)!r} (read with the model) "
                          f"no longer fits its config and is not written", UserWarning, stacklevel=3)  # fmt: skip
        return settings

    @classmethod
    def from_pretrained(cls: type[ModelT], directory: str | Path, map_location: str = "cpu") -> ModelT:
        """Load what ``save_pretrained`` wrote, in eval mode (as ``transformers`` loads: dropout off; ``.train()``
        to train it), on the device ``map_location`` and in the dtype its tensors were saved in (a model saved in
        bfloat16 loads in bfloat16), also under the old class and field names, here or through
        ``markovformer.hf`` (``transformers``' ``save_pretrained`` / ``Trainer.save_model``, whose bookkeeping keys,
        ``TRANSFORMERS_CONFIG_KEYS``, the model ignores; those that are not ``WRITER_KEYS``, such as label names and
        special token ids, are kept in ``transformers_settings`` and written back by ``save_pretrained``)."""
        directory = Path(directory)
        weights = weights_file(directory)
        for name, missing in ((CONFIG_NAME, not (directory / CONFIG_NAME).is_file()),
                              (f"{WEIGHTS_NAME} (nor its shards)", weights is None)):  # fmt: skip
            if missing:
                raise ValueError(f"{directory}: no {name} here; not a saved {cls.__name__}")
        values = read_json_object(directory / CONFIG_NAME, f"a saved {cls.__name__}'s config")
        fields = {field.name for field in dataclasses.fields(cls.config_class)}
        settings = {key: value for key, value in values.items()
                    if key in TRANSFORMERS_CONFIG_KEYS and key not in fields and key not in WRITER_KEYS}  # fmt: skip
        model = cls(cls.config_class.from_dict(cls._config_values(values, directory)))
        model.transformers_settings = settings
        return model.load_saved(read_weights_folder(directory), weights, map_location)

    def load_saved(self: ModelT, stored: dict[str, torch.Tensor], source: Path, map_location: str = "cpu") -> ModelT:
        """This model, built from the config its weights ``stored`` (read from ``source``) were saved with, holding
        them, in eval mode, on ``map_location`` and in their dtype (``from_pretrained``'s load); ValueError naming
        ``source`` where their names or shapes differ from the model's."""
        # loading copies into the model's own tensors: built on the CPU in float32, it would stay there and upcast
        # bfloat16 weights, so that the loaded model computed other logits than the saved one
        self.to(device=map_location, dtype=_stored_float_dtype(stored))
        # a tied weight is saved under one of its names (safetensors keeps one): its other names read it there
        tied = tied_names(self)
        saved = {tied[name]: tensor for name, tensor in stored.items() if name in tied}
        shared = {name: saved[first] for name, first in tied.items() if name not in stored and first in saved}
        try:  # ALiBi layers (as its config says) whose weights lack their slopes were saved before slopes were
            self.load_state_dict(own_weights_with_slopes(self, {**shared, **stored}), strict=True)
        except RuntimeError as error:  # names or shapes that differ, in torch's lines
            lines = " ".join(str(error).split())
            raise ValueError(f"{source} does not match {type(self).__name__}: {lines}") from error
        return self.eval()

    @classmethod
    def _config_values(cls, values: dict, directory: Path) -> dict:
        """The config fields of a config.json written by ``save_pretrained`` here or through ``markovformer.hf``
        (``transformers``): the class name checked, ``transformers``' own keys dropped and the label count that
        ``transformers`` keeps as ``id2label`` read back as ``num_labels``."""
        fields = {field.name for field in dataclasses.fields(cls.config_class)}
        names = [values.pop("architecture")] if "architecture" in values else []
        if not names and isinstance(values.get("architectures"), list):
            names = [name.removeprefix(HF_WRAPPER_PREFIX) for name in values["architectures"]]
        names = [RENAMED_ARCHITECTURES.get(name, name) for name in names]
        if names and cls.__name__ not in names:
            raise ValueError(f"{directory} holds a {names[0]}, not a {cls.__name__}")
        if "num_labels" in fields and "num_labels" not in values and isinstance(values.get("id2label"), dict):
            values["num_labels"] = len(values["id2label"])
        return {key: value for key, value in values.items() if key in fields or key not in TRANSFORMERS_CONFIG_KEYS}


__all__ = [
    "CONFIG_NAME",
    "HF_WRAPPER_PREFIX",
    "RENAMED_ARCHITECTURES",
    "TRANSFORMERS_CONFIG_KEYS",
    "WEIGHTS_NAME",
    "WRITER_KEYS",
    "PreTrainedModel",
]
