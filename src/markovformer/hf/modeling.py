"""``transformers`` configs and models wrapping each markovformer family (see ``markovformer.hf``).

A wrapper config is a ``transformers.PretrainedConfig`` that carries the markovformer config's fields and rebuilds
it (``to_markovformer``). A wrapper model builds the markovformer model and adopts its child modules as its own, so
its state-dict keys are the markovformer ones and a ``save_pretrained`` directory loads unchanged; ``forward``
calls the markovformer model and returns ``transformers`` output classes.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    GenerationMixin,
    PretrainedConfig,
    PreTrainedModel,
)
from transformers.modeling_outputs import (
    BaseModelOutput,
    CausalLMOutput,
    Seq2SeqLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput

from markovformer.models.config_base import ModelConfig
from markovformer.models.markovian_transformer import MarkovianTransformerModel
from markovformer.models.pretrained import HF_WRAPPER_PREFIX
from markovformer.models.pretrained import PreTrainedModel as MarkovformerModel
from markovformer.models.registry import MODEL_FAMILIES


def _config_class(family: str) -> type[PretrainedConfig]:
    """A ``PretrainedConfig`` subclass for model family ``family`` (its ``model_type``), holding the markovformer
    config's fields as attributes (old field names accepted, as by ``from_dict``)."""
    markovformer_class = MODEL_FAMILIES[family].config_class
    fields = [field.name for field in dataclasses.fields(markovformer_class)]

    def __init__(self, **values):  # noqa: N807 - becomes the class's __init__
        values = markovformer_class.upgrade_keys(values)
        rest = {key: value for key, value in values.items() if key not in fields and key != "architecture"}
        if "architecture" in values:  # markovformer's own save: the class that wrote it, named as transformers does
            rest.setdefault("architectures", [HF_WRAPPER_PREFIX + values["architecture"]])
        rest.setdefault("use_cache", False)  # the wrappers keep no transformers cache: generate re-runs the prefix
        PretrainedConfig.__init__(self, **rest)
        for key in fields:  # set after PretrainedConfig, which treats some of these names its own way
            if key not in values:
                continue
            if key == "num_labels":  # a property of PretrainedConfig (it builds id2label)
                if values[key] is not None:
                    self.num_labels = values[key]
            else:
                object.__setattr__(self, key, values[key])

    def to_markovformer(self) -> ModelConfig:
        """The markovformer config these values describe (validated)."""
        return markovformer_class(**{key: getattr(self, key) for key in fields if hasattr(self, key)})

    name = "".join(part.title() for part in family.split("_")) + "HFConfig"
    return type(name, (PretrainedConfig,), {"model_type": markovformer_class.model_type, "__init__": __init__,
                                            "to_markovformer": to_markovformer, "__module__": __name__})  # fmt: skip


HF_CONFIGS: dict[str, type[PretrainedConfig]] = {family: _config_class(family) for family in MODEL_FAMILIES}


class _Wrapper(PreTrainedModel):
    """Holds one markovformer model, whose child modules it adopts (same parameters, same state-dict keys)."""

    markovformer_class: type[MarkovformerModel]
    base_model_prefix = "markovformer_base"  # no markovformer key starts with it: never stripped or added
    _supports_cache_class = False

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        with torch.device("cpu"):  # real tensors even inside from_pretrained's meta-device context: some
            inner = self.markovformer_class(config.to_markovformer())  # families check values as they build
        for name, child in inner.named_children():
            self.add_module(name, child)
        for name, parameter in inner.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        self._markovformer = [inner]  # a list, so the module is not registered twice
        tied = self._shared_parameter_names(inner)  # e.g. an output layer tied to the embedding
        self._tied_weights_keys = tied or None
        config.tie_word_embeddings = bool(tied)  # transformers ties (and loads) them only when this says so
        self.post_init()

    @staticmethod
    def _shared_parameter_names(inner: torch.nn.Module) -> dict[str, str]:
        """Parameter name -> the first name of the same tensor (tied weights, saved once by safetensors)."""
        first: dict[int, str] = {}
        tied = {}
        for name, parameter in inner.named_parameters(remove_duplicate=False):
            if id(parameter) in first:
                tied[name] = first[id(parameter)]
            else:
                first[id(parameter)] = name
        return tied

    def _in_backbone(self, name: str) -> bool:
        """Whether state-dict key ``name`` (of this model or of a checkpoint loaded into it) is a backbone tensor:
        under ``base_model_prefix`` in a head, or under one of the backbone's own modules (a backbone checkpoint's
        key that found no place here)."""
        backbone = getattr(self, self.base_model_prefix, self)
        return name.startswith(self.base_model_prefix + ".") or name.split(".")[0] in backbone._modules

    @property
    def markovformer(self) -> MarkovformerModel:
        """The wrapped markovformer model (sharing this wrapper's modules and parameters)."""
        inner = self._markovformer[0]
        for name in inner._parameters:  # loading may have replaced a direct parameter on the wrapper
            inner._parameters[name] = self._parameters[name]
        return inner

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Nothing: the markovformer model initialised its weights when it was built."""

    @classmethod
    def from_pretrained(cls, *args, strict: bool = True, **kwargs):
        """``transformers``' loading, then what it leaves unset taken from a freshly built markovformer model: the
        buffers that are derived rather than saved (rotary frequencies, position tables) and the parameters the
        checkpoint lacks or holds at another size (``ignore_mismatched_sizes=True``), which ``transformers`` would
        leave uninitialised here. ``strict`` (the default) first raises ValueError naming the first parameters the
        checkpoint lacks or holds but the model does not (a config with more layers than the weights, say);
        ``strict=False`` loads such a directory anyway. A checkpoint of another task of the same family loads
        strictly too, its backbone into this model's backbone (``base_model_prefix``): only the head tensors may
        differ, the new ones initialised and listed as missing, the dropped ones as unexpected.
        ``output_loading_info=True`` works as in ``transformers``."""
        wants_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        order = {name: index for index, name in enumerate(model.state_dict())}
        missing = sorted(info["missing_keys"], key=lambda name: order.get(name, len(order)))
        unexpected = sorted(info["unexpected_keys"])
        if strict:
            other_task = cls.__name__ not in (model.config.architectures or [cls.__name__])
            wrong = [names if not other_task else [name for name in names if model._in_backbone(name)]
                     for names in (missing, unexpected)]  # fmt: skip
            if wrong[0] or wrong[1]:
                raise ValueError(_mismatch_message(args[0] if args else kwargs.get("pretrained_model_name_or_path"),
                                                   *wrong))  # fmt: skip
        with torch.device("cpu"):
            fresh = cls.markovformer_class(model.config.to_markovformer())
        fresh_state, state = fresh.state_dict(), model.state_dict(keep_vars=True)
        with torch.no_grad():
            for name in [*missing, *(key[0] for key in info["mismatched_keys"])]:
                state[name].copy_(fresh_state[name])
        fresh_modules = dict(fresh.named_modules())
        for name, module in model.markovformer.named_modules():
            for buffer_name in module._non_persistent_buffers_set:
                module._buffers[buffer_name] = fresh_modules[name]._buffers[buffer_name].to(model.device)
        return (model, info) if wants_info else model

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the wrapper keeps no transformers cache

    def get_input_embeddings(self):
        return getattr(self.markovformer, "embed", None) or getattr(getattr(self.markovformer, "model", None),
                                                                      "embed", None)  # fmt: skip

    def train(self, mode: bool = True):
        super().train(mode)
        self.markovformer.train(mode)
        return self


def _mismatch_message(directory, missing: list[str], unexpected: list[str]) -> str:
    """What a strict load found: the first few names of each kind and how many there are."""

    def first(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f", ... ({len(names)} in all)" if len(names) > 3 else "")

    problems = ([f"the model's {first(missing)} are missing from the checkpoint"] if missing else []) + (
        [f"the checkpoint's {first(unexpected)} are not in the model"] if unexpected else [])  # fmt: skip
    return (
        f"{directory}: the weights do not fit the config: {'; '.join(problems)}. Pass strict=False to load it "
        "anyway (missing parameters then get markovformer's initialisation, unexpected ones are dropped)"
    )


class _CausalLMWrapper(_Wrapper, GenerationMixin):
    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, **unused) -> CausalLMOutput:  # fmt: skip
        """Every position's next-token logits; ``labels`` are the inputs (shifted inside), -100 ignored."""
        if attention_mask is not None and bool(attention_mask.bool().all()):
            attention_mask = None
        output = self.markovformer(input_ids, attention_mask=attention_mask, labels=labels)
        return CausalLMOutput(loss=output.loss, logits=output.logits)

    def prepare_inputs_for_generation(self, input_ids: Tensor, attention_mask: Tensor | None = None, **unused):
        """The whole sequence every step: the wrapper keeps no ``transformers`` cache (markovformer's own
        ``generate`` decodes from key/value caches)."""
        return {"input_ids": input_ids, "attention_mask": attention_mask}


class _SequenceClassificationWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, **unused):
        """The loss follows ``config.problem_type`` as ``transformers``' heads do (see ``problem_type``):
        cross-entropy over integer class labels, mean squared error for "regression", binary cross-entropy with
        logits over multi-hot float labels (B, num_labels) for "multi_label_classification"."""
        problem = None if labels is None else problem_type(self.config, labels)
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask,
                                   labels=labels if problem == "single_label_classification" else None)  # fmt: skip
        loss = output.loss
        if problem == "regression":
            logits, target = output.logits.float(), labels.to(torch.float32)
            if logits.shape[-1] == 1:
                logits, target = logits.squeeze(-1), target.reshape(logits.shape[0])
            loss = torch.nn.functional.mse_loss(logits, target)
        elif problem == "multi_label_classification":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(output.logits.float(), labels.float())
        return SequenceClassifierOutput(loss=loss, logits=output.logits)


def problem_type(config: PretrainedConfig, labels: Tensor) -> str:
    """``config.problem_type``, or when unset the one ``transformers`` infers: "regression" for one label,
    "single_label_classification" for integer labels, "multi_label_classification" otherwise."""
    if config.problem_type is not None:
        return config.problem_type
    if config.num_labels == 1:
        return "regression"
    if labels.dtype in (torch.long, torch.int):
        return "single_label_classification"
    return "multi_label_classification"


class _TokenClassificationWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, **unused):
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask,
                                   labels=labels)  # fmt: skip
        return TokenClassifierOutput(loss=output.loss, logits=output.logits)


class _BackboneWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, **unused):
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask)
        return BaseModelOutput(last_hidden_state=output.last_hidden_state)


@dataclasses.dataclass
class VMTOutput(ModelOutput):
    loss: Tensor | None = None  # the training objective per token (negative ELBO plus the extra terms)
    elbo: Tensor | None = None  # per token


class _VMTWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, **unused) -> VMTOutput:
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask)
        return VMTOutput(loss=output.loss, elbo=output.elbo)


class _Seq2SeqWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                labels=None, **unused) -> Seq2SeqLMOutput:  # fmt: skip
        output = self.markovformer(input_ids, decoder_input_ids, attention_mask, decoder_attention_mask, labels)
        return Seq2SeqLMOutput(loss=output.loss, logits=output.logits,
                               encoder_last_hidden_state=output.encoder_last_hidden_state)  # fmt: skip


# the attribute holding a family's backbone in its heads (the Markovian Transformer's ``model``); a family without
# a separate backbone model names no attribute, so nothing is stripped or added when it loads
BACKBONE_ATTRIBUTES = {"markovian_transformer": "model"}


def _wrapper(family: str, task: str, base: type[_Wrapper], markovformer_class: type) -> type[_Wrapper]:
    return type(f"{HF_WRAPPER_PREFIX}{markovformer_class.__name__}", (base,), {
        "config_class": HF_CONFIGS[family], "markovformer_class": markovformer_class, "__module__": __name__,
        "base_model_prefix": BACKBONE_ATTRIBUTES.get(family, _Wrapper.base_model_prefix),
    })  # fmt: skip


def _build_classes() -> dict[tuple[str, str], tuple[type, type[_Wrapper]]]:
    """(family, task) -> (the Auto class it registers with, the wrapper class)."""
    bases = {"causal_lm": (AutoModelForCausalLM, _CausalLMWrapper),
             "sequence_classification": (AutoModelForSequenceClassification, _SequenceClassificationWrapper),
             "token_classification": (AutoModelForTokenClassification, _TokenClassificationWrapper),
             "translation": (AutoModelForSeq2SeqLM, _Seq2SeqWrapper), "vmt": (AutoModel, _VMTWrapper)}  # fmt: skip
    classes = {}
    for family, entry in MODEL_FAMILIES.items():
        for task, head in entry.heads.items():
            if task in bases:
                auto, base = bases[task]
                classes[family, task] = (auto, _wrapper(family, task, base, head))
    classes["markovian_transformer", "backbone"] = (
        AutoModel, _wrapper("markovian_transformer", "backbone", _BackboneWrapper, MarkovianTransformerModel)
    )
    return classes


HF_CLASSES = _build_classes()


def register() -> None:
    """Register every config with AutoConfig and every wrapper with its Auto class (idempotent)."""
    for config_class in HF_CONFIGS.values():
        AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for auto, wrapper in HF_CLASSES.values():
        auto.register(wrapper.config_class, wrapper, exist_ok=True)


__all__ = ["HF_CLASSES", "HF_CONFIGS", "register"]
