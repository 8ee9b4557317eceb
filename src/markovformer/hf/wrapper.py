"""The base of the ``transformers`` wrappers (``hf.modeling`` builds one per family and task): a ``PreTrainedModel``
that builds a markovformer model and adopts its child modules, parameters and buffers as its own, so that its
state-dict keys are the markovformer ones and a ``save_pretrained`` directory loads unchanged; the inputs it
refuses; and the wrapper of the Markovian Transformer, which reports hidden states and attentions."""

from __future__ import annotations

import re

import torch
from transformers import PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from markovformer.hf.cache import CACHE_NAME
from markovformer.layers.decay_attention import AlibiAttention, block_of
from markovformer.models.markovian_transformer.config import saved_alibi_blocks
from markovformer.models.pretrained import PreTrainedModel as MarkovformerModel


class Wrapper(PreTrainedModel):
    """Holds one markovformer model, whose child modules it adopts (same parameters, same state-dict keys)."""

    markovformer_class: type[MarkovformerModel]
    base_model_prefix = "markovformer_base"  # no markovformer key starts with it: never stripped or added
    _supports_cache_class = False
    # the loss is the mean over the batch's items, whatever ``num_items_in_batch`` says: transformers' Trainer must
    # divide it by the gradient-accumulation steps itself (it reads a forward with **kwargs as normalising it);
    # the causal LMs normalise it (``summed_over_items``)
    accepts_loss_kwargs = False
    honoured_inputs: tuple[str, ...] = ()  # of UNSUPPORTED_INPUTS, those this wrapper's forward reads
    reports = False  # whether forward returns hidden states and attentions (``ReportingWrapper``); else refused
    unreported_because = "only the Markovian Transformer's wrappers return them"

    def __init__(self, config: PretrainedConfig) -> None:
        super().__init__(config)
        with torch.device("cpu"):  # real tensors even inside from_pretrained's meta-device context: some
            inner = self.markovformer_class(config.to_markovformer())  # families check values as they build
        for name, child in inner.named_children():
            self.add_module(name, child)
        for name, parameter in inner.named_parameters(recurse=False):
            self.register_parameter(name, parameter)
        for name, buffer in inner.named_buffers(recurse=False):  # (the translator's position table)
            self.register_buffer(name, buffer, persistent=name not in inner._non_persistent_buffers_set)
        self._markovformer = [inner]  # a list, so the module is not registered twice
        tied = self._shared_parameter_names(inner)  # e.g. an output layer tied to the embedding
        self._tied_weights_keys = tied or None
        if tied:  # transformers ties (and loads) them only when this says so; an untied model (a classifier) leaves
            config.tie_word_embeddings = True  # the caller's value, which a causal LM built from it next reads
        self.supports_gradient_checkpointing = any(hasattr(module, "gradient_checkpointing")
                                                   for module in inner.modules())  # fmt: skip
        self.register_forward_pre_hook(_refuse_unsupported_inputs, with_kwargs=True)
        modules = list(self.modules())
        for module in modules:  # markovformer has just initialised them: post_init need not do it again
            module._is_hf_initialized = True
        self.post_init()
        for module in modules:  # ... but an explicit init_weights (after building on the meta device) does
            del module._is_hf_initialized

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

    def _refuse_reports(self, output_attentions: bool | None, output_hidden_states: bool | None) -> None:
        """ValueError for output_attentions or output_hidden_states (given, or the config's) unless the wrapper
        ``reports`` them. They were dropped: a translator's or a VMT's outputs held None, a Scan Markov's hidden
        states None and attentions a tuple of Nones, with nothing said."""
        if self.reports:
            return
        asked = [name for name, value in (("output_attentions", output_attentions),
                                          ("output_hidden_states", output_hidden_states))
                 if (value if value is not None else getattr(self.config, name, False))]  # fmt: skip
        if asked:
            raise ValueError(f"{type(self.markovformer).__name__} returns no hidden states or attentions "
                             f"({self.unreported_because}): leave {' and '.join(asked)} unset")  # fmt: skip

    @property
    def markovformer(self) -> MarkovformerModel:
        """The wrapped markovformer model (sharing this wrapper's modules and parameters)."""
        inner = self._markovformer[0]
        for name in inner._parameters:  # loading may have replaced a direct parameter on the wrapper
            inner._parameters[name] = self._parameters[name]
        for name in inner._buffers:  # and .to() a direct buffer (a new tensor, where parameters convert in place)
            inner._buffers[name] = self._buffers[name]
        return inner

    @torch.no_grad()
    def initialize_weights(self) -> None:
        """``transformers``' initialisation of every tensor not marked initialised, each taken from a freshly built
        markovformer model of this config (``_init_weights``): markovformer's own initialisation, its derived
        buffers (rotary frequencies, ...) exactly, so a model built on the meta device and then initialised is a
        normally built one (the same tensors for the same seed). Loading weights saved without ALiBi's slopes, it
        gives them those that ALiBi models saved before slopes were computed with (``AlibiAttention.unsaved_slopes``;
        ``from_pretrained`` then gives fresh ones to the layers of another kind in the checkpoint), which are then
        not missing: ``transformers``' load report said they were newly initialised."""
        with torch.device("cpu"):
            fresh = self.markovformer_class(self.config.to_markovformer())
        loaded = {name for name, tensor in self.state_dict(keep_vars=True).items()
                  if getattr(tensor, "_is_hf_initialized", False)}  # fmt: skip
        self._fresh = [dict(fresh.named_modules()), {id(module): name for name, module in self.named_modules()}]
        self._unsaved_slopes = []  # their names, for from_pretrained
        try:
            super().initialize_weights()
        finally:
            del self._fresh
        for prefix, module in self.named_modules():
            if isinstance(module, AlibiAttention):
                for name, slopes in module.unsaved_slopes(loaded, f"{prefix}.").items():
                    self.get_buffer(name).copy_(slopes)
                    self._unsaved_slopes.append(name)
                    self._keys_to_ignore_on_load_missing = {*(self._keys_to_ignore_on_load_missing or ()),
                                                            f"^{re.escape(name)}$"}  # fmt: skip

    def _init_weights(self, module: torch.nn.Module) -> None:
        """Copy the parameters and buffers of ``module`` (not its children's) from the fresh model that
        ``initialize_weights`` built; a tensor ``transformers`` marks initialised (loaded) is left alone."""
        from transformers import initialization

        fresh_modules, names = self._fresh
        fresh = fresh_modules.get(names.get(id(module)))
        if fresh is None:
            return
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            source = fresh._parameters.get(name, fresh._buffers.get(name))
            if tensor is not None and source is not None and tensor.shape == source.shape:
                initialization.copy_(tensor, source.to(tensor.device, tensor.dtype))

    @classmethod
    def from_pretrained(cls, *args, strict: bool = True, **kwargs):
        """``transformers``' loading, then what it leaves unset taken from a freshly built markovformer model: the
        buffers that are derived rather than saved (rotary frequencies, position tables) and the parameters the
        checkpoint lacks or holds at another size (``ignore_mismatched_sizes=True``), which ``transformers`` would
        leave uninitialised here. ``strict`` (the default) first raises ValueError naming the first parameters the
        checkpoint lacks or holds but the model does not (a config with more layers than the weights, say);
        ``strict=False`` loads such a directory anyway. A checkpoint of another task of the same family loads
        strictly too, its backbone into this model's backbone (``base_model_prefix``): only the head tensors may
        differ, the new ones initialised and listed as missing, the dropped ones as unexpected. ALiBi layers whose
        slopes the checkpoint lacks keep those it computed with where its config.json makes them ALiBi layers
        (saved before slopes were: ``saved_alibi_blocks``), and take the paper's where it does not (another kind's
        weights, with an ALiBi ``config=`` or ``attention="alibi"``), as a model built from the config does.
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
        unsaved = getattr(model, "_unsaved_slopes", [])
        source = _source_alibi_blocks(cls, args[0] if args else kwargs.get("pretrained_model_name_or_path"),
                                      kwargs, unsaved) if unsaved else set()  # fmt: skip
        with torch.no_grad():
            for name in [*missing, *(key[0] for key in info["mismatched_keys"]),
                         *(name for name in unsaved if block_of(name) not in source)]:  # fmt: skip
                state[name].copy_(fresh_state[name])
        fresh_modules = dict(fresh.named_modules())
        for name, module in model.markovformer.named_modules():
            for buffer_name in module._non_persistent_buffers_set:
                module._buffers[buffer_name] = fresh_modules[name]._buffers[buffer_name].to(model.device)
        return (model, info) if wants_info else model

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the wrapper keeps no transformers cache

    def _embedding_owner(self) -> torch.nn.Module:
        """The markovformer module whose ``embed`` reads the inputs (the backbone, or the model itself)."""
        inner = self.markovformer
        return inner.model if isinstance(getattr(inner, "model", None), torch.nn.Module) else inner

    def get_input_embeddings(self) -> torch.nn.Module | None:
        return getattr(self._embedding_owner(), "embed", None)

    def set_input_embeddings(self, value: torch.nn.Module) -> None:
        owner = self._embedding_owner()
        owner.embed = value
        if owner is self.markovformer:  # the wrapper holds the same child: replace it there too
            self.embed = value

    def get_output_embeddings(self) -> torch.nn.Module | None:
        return getattr(self.markovformer, "lm_head", None)

    def set_output_embeddings(self, value: torch.nn.Module) -> None:
        self.markovformer.lm_head = self.lm_head = value

    def resize_token_embeddings(self, *args, **kwargs):
        """``transformers``' resize, then the markovformer config told the new vocabulary size (it checks ids)."""
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        self.markovformer.config.vocab_size = embeddings.num_embeddings
        self.config.vocab_size = embeddings.num_embeddings
        return embeddings

    def train(self, mode: bool = True):
        super().train(mode)
        self.markovformer.train(mode)
        return self


# from_pretrained's keywords that say where its checkpoint's files are (transformers' hub options)
WHERE_KEYWORDS = ("cache_dir", "force_download", "proxies", "token", "local_files_only", "revision", "subfolder")


def _source_alibi_blocks(cls: type[Wrapper], source, kwargs: dict, unsaved: list[str]) -> set[int]:
    """The blocks that the config.json of checkpoint ``source`` makes ALiBi layers (``saved_alibi_blocks``), read
    where ``from_pretrained`` (called with ``kwargs``) read its weights. ValueError naming the ``unsaved`` slopes when
    it has none: its weights could be ALiBi weights of the old code or another kind's, which compute otherwise."""
    try:
        values, _ = cls.config_class.get_config_dict(source, **{key: kwargs[key] for key in WHERE_KEYWORDS
                                                                 if key in kwargs})  # fmt: skip
    except OSError:
        values = {}
    if not values:
        raise ValueError(f"{source}: its weights lack the ALiBi slopes {', '.join(unsaved[:3])}, and it has no "
                         f"config.json to tell whether they were ALiBi layers saved before slopes were (which keep "
                         f"2^(-8h/H)) or layers of another kind (which take the paper's slopes): put the config.json "
                         f"it was saved with beside its weights")  # fmt: skip
    return saved_alibi_blocks(values)


# inputs of transformers models that these wrappers cannot honour: refused when given, not silently dropped
UNSUPPORTED_INPUTS = ("inputs_embeds", "decoder_inputs_embeds", "position_ids", "token_type_ids", "head_mask",
                      "past_key_values")  # fmt: skip


def _refuse_unsupported_inputs(module: Wrapper, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """Refuse inputs the wrapper cannot honour by name; before transformers 5.24 ``past_key_values`` is the cache,
    given to the forward as ``cache``."""
    if CACHE_NAME != "cache" and CACHE_NAME in kwargs:
        kwargs["cache"] = kwargs.pop(CACHE_NAME)
    given = [name for name in UNSUPPORTED_INPUTS if kwargs.get(name) is not None and name not in
             module.honoured_inputs]  # fmt: skip
    if given:
        raise ValueError(f"{type(module).__name__} does not take {', '.join(given)}: markovformer models read "
                         "input_ids (and attention_mask); positions follow the unpadded tokens, and generate's "
                         "decoding state is the model's own (MarkovformerCache)")  # fmt: skip
    module._refuse_reports(kwargs.get("output_attentions"), kwargs.get("output_hidden_states"))
    return args, kwargs


def as_asked(output: ModelOutput, return_dict: bool | None, config: PretrainedConfig):
    """``output``, or its tuple when ``return_dict`` (else the config's) is False, as ``transformers`` models do."""
    return output if (return_dict if return_dict is not None else config.return_dict) else output.to_tuple()


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


class ReportingWrapper(Wrapper):
    """A wrapper whose markovformer model is built of ``blocks`` (the Markovian Transformer): its forward returns
    hidden states and attentions on request, as ``transformers`` models do (the other wrappers refuse them).

    ``output_hidden_states``: a tuple of n_layers + 1 tensors (B, T, D): the blocks' input (embeddings, positions
    added, a sequence classifier's [CLS] vector before each row's first real token), each block's output but the
    last, and the last hidden state (the last block's output after the final norm), as in ``transformers``'
    decoders.
    ``output_attentions``: one tensor (B, H, T, T) per layer, the weights with which each position mixes the values
    of the others (output = weights @ V), computed by the kind's reference path whatever ``backend`` (flex, banded,
    ...) the config names, so exact but O(T²) in memory: attention probabilities for softmax, Markov (its lag
    biases and gates included), hybrid, decay, random-feature and the position-bias kinds (with
    ``feature_map="trig"`` the random-feature heads' rows sum to 1 but are signed); rows summing to at most 1 for
    stick-breaking; and no probabilities for RetNet (its retention matrix Q Kᵀ ⊙ D, unnormalised and signed)
    and Linformer (its softmax carried back to the tokens through the sequence projection). The kinds that have no
    such matrix (S4D, Hyena, H3, RWKV, the scan and GRU baselines) and a step decoded from the cache give None in
    their place. ``return_dict=False`` returns the output's tuple."""

    reports = True

    def _run(self, output_attentions=None, output_hidden_states=None, **inputs):
        """The markovformer output and the hidden states (a tuple, or None when not asked)."""
        config = self.config
        attentions = output_attentions if output_attentions is not None else config.output_attentions
        wants_hidden = output_hidden_states if output_hidden_states is not None else config.output_hidden_states
        blocks = self._embedding_owner().blocks
        captured, hooks = [], []
        if wants_hidden:  # hooks, so that the markovformer forward (and its checkpointing) stays as it is
            hooks.append(blocks[0].register_forward_pre_hook(lambda module, args: captured.append(args[0])))
            hooks += [block.register_forward_hook(lambda module, args, result: captured.append(result.output))
                      for block in blocks[:-1]]  # fmt: skip
        try:
            output = self.markovformer(**inputs, return_weights=bool(attentions))
        finally:
            for hook in hooks:
                hook.remove()
        hidden = (*captured[: len(blocks)], output.last_hidden_state) if wants_hidden else None
        if not attentions:
            output.attentions = None
        return output, hidden

    def _regularized(self, loss):
        """``loss`` plus the model's regularisers (``regularization_loss``: λ_ent times the gate entropy of this
        forward, λ_T Σ θ²) in training mode, where the config weighs them (``gate_entropy_weight``,
        ``transition_penalty``), as markovformer's own training adds them to its loss; ``loss`` as it is in
        evaluation, as markovformer's validation scores it. transformers' Trainer has no other place for them:
        without this, a config's weights were silently not trained with."""
        config = self.markovformer.config
        if loss is None or not self.training or not (config.gate_entropy_weight or config.transition_penalty):
            return loss
        return loss + self.markovformer.regularization_loss()

    def _finish(self, output: ModelOutput, return_dict: bool | None):
        return as_asked(output, return_dict, self.config)


__all__ = ["UNSUPPORTED_INPUTS", "ReportingWrapper", "Wrapper", "as_asked"]
