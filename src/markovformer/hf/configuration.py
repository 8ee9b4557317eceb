"""``transformers`` configs of each markovformer family (see ``markovformer.hf``): a ``PretrainedConfig`` that
carries the markovformer config's fields, answers to transformers' standard names (``attribute_map``) and rebuilds
the markovformer config (``to_markovformer``)."""

from __future__ import annotations

import dataclasses

from transformers import PretrainedConfig

from markovformer.models.config_base import STANDARD_NAMES, ModelConfig, with_field_names
from markovformer.models.pretrained import HF_WRAPPER_PREFIX
from markovformer.models.registry import MODEL_FAMILIES


def _config_class(family: str) -> type[PretrainedConfig]:
    """A ``PretrainedConfig`` subclass for model family ``family`` (its ``model_type``), holding the markovformer
    config's fields as attributes (old field names accepted, as by ``from_dict``)."""
    markovformer_class = MODEL_FAMILIES[family].config_class
    fields = [field.name for field in dataclasses.fields(markovformer_class)]
    defaults = {field.name: field.default for field in dataclasses.fields(markovformer_class)}
    encoder_decoder = "translation" in MODEL_FAMILIES[family].heads

    def __init__(self, **values):  # noqa: N807 - becomes the class's __init__
        # hidden_size=32 in a call or a config.json means d_model=32
        values = with_field_names(markovformer_class.upgrade_keys(values), fields)
        rest = {key: value for key, value in values.items() if key not in fields and key != "architecture"}
        if "architecture" in values:  # markovformer's own save: the class that wrote it, named as transformers does
            rest.setdefault("architectures", [HF_WRAPPER_PREFIX + values["architecture"]])
        # generate decodes from the layers' own states (``MarkovformerCache``); transformers' generation reads the
        # special token ids from the config (a family without such fields has them None unless given)
        generation = {"use_cache": rest.pop("use_cache", True),
                      **{token: rest.pop(token, None) for token in SPECIAL_TOKENS if token not in fields}}
        PretrainedConfig.__init__(self, **rest)
        for key, value in generation.items():
            setattr(self, key, value)
        for key in fields:  # set after PretrainedConfig, which treats some of these names its own way
            if key not in values:  # the default, so that the standard names (attribute_map) can read it
                if key == "num_labels" or defaults.get(key, dataclasses.MISSING) is dataclasses.MISSING:
                    continue  # (the label count: PretrainedConfig's, from id2label when given)
                values[key] = defaults[key]
            if key == "num_labels":  # a property of PretrainedConfig (it builds id2label)
                if values[key] is not None:
                    self.num_labels = values[key]
            else:
                object.__setattr__(self, key, values[key])
        if encoder_decoder:  # transformers' encoder-decoders start decoding with this token (the translator's bos)
            self.is_encoder_decoder = True
            if getattr(self, "decoder_start_token_id", None) is None:
                self.decoder_start_token_id = self.bos_token_id

    def to_markovformer(self) -> ModelConfig:
        """The markovformer config these values describe (validated)."""
        return markovformer_class(**{key: getattr(self, key) for key in fields if hasattr(self, key)})

    def max_position_embeddings(self) -> int | None:
        """transformers' longest sequence, where its generate ends one of default length (and warns past it): the
        markovformer config's ``positions_end`` where it has one, else ``max_positions``. Read as ``max_positions``
        itself, it ended Scan Markov's markov mode, whose ``max_positions`` numbers each window's positions only, at
        the window's length (a longer prompt refused), and a rotary model that kept a ``max_positions`` too."""
        config = self.to_markovformer()
        return getattr(config, "positions_end", config.max_positions)

    def set_max_position_embeddings(self, value: int | None) -> None:
        self.max_positions = value

    name = "".join(part.title() for part in family.split("_")) + "HFConfig"
    standard_names = {standard: ours for standard, ours in STANDARD_NAMES.items() if ours in fields}
    attribute_map = {standard: ours for standard, ours in standard_names.items()
                     if standard != "max_position_embeddings"}  # fmt: skip
    members = {"model_type": markovformer_class.model_type, "__init__": __init__, "to_markovformer": to_markovformer,
               "__module__": __name__, "attribute_map": attribute_map}  # fmt: skip
    if "max_positions" in fields:
        members["max_position_embeddings"] = property(max_position_embeddings, set_max_position_embeddings)
    return type(name, (PretrainedConfig,), members)


SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


HF_CONFIGS: dict[str, type[PretrainedConfig]] = {family: _config_class(family) for family in MODEL_FAMILIES}


__all__ = ["HF_CONFIGS", "SPECIAL_TOKENS", "STANDARD_NAMES"]
