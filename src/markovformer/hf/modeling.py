"""``transformers`` models wrapping each markovformer family (see ``markovformer.hf``; their configs are in
``hf.configuration``).

A wrapper model builds the markovformer model and adopts its child modules as its own, so
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
    CausalLMOutputWithPast,
    Seq2SeqLMOutput,
    SequenceClassifierOutput,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput

from markovformer.hf.cache import CACHE_NAME, DecodesFromCache, MarkovformerCache
from markovformer.hf.configuration import HF_CONFIGS
from markovformer.models.markovian_transformer import MarkovianTransformerModel
from markovformer.models.pretrained import HF_WRAPPER_PREFIX
from markovformer.models.pretrained import PreTrainedModel as MarkovformerModel
from markovformer.models.registry import MODEL_FAMILIES
from markovformer.ops.segments import document_starts


class _Wrapper(PreTrainedModel):
    """Holds one markovformer model, whose child modules it adopts (same parameters, same state-dict keys)."""

    markovformer_class: type[MarkovformerModel]
    base_model_prefix = "markovformer_base"  # no markovformer key starts with it: never stripped or added
    _supports_cache_class = False
    # the loss is the mean over the batch's items, whatever ``num_items_in_batch`` says: transformers' Trainer must
    # divide it by the gradient-accumulation steps itself (it reads a forward with **kwargs as normalising it);
    # the causal LMs normalise it (``summed_over_items``)
    accepts_loss_kwargs = False
    honoured_inputs: tuple[str, ...] = ()  # of UNSUPPORTED_INPUTS, those this wrapper's forward reads

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
        normally built one (the same tensors for the same seed)."""
        with torch.device("cpu"):
            fresh = self.markovformer_class(self.config.to_markovformer())
        self._fresh = [dict(fresh.named_modules()), {id(module): name for name, module in self.named_modules()}]
        try:
            super().initialize_weights()
        finally:
            del self._fresh

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


# inputs of transformers models that these wrappers cannot honour: refused when given, not silently dropped
UNSUPPORTED_INPUTS = ("inputs_embeds", "decoder_inputs_embeds", "position_ids", "token_type_ids", "head_mask",
                      "past_key_values")  # fmt: skip


def _refuse_unsupported_inputs(module: _Wrapper, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
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
    return args, kwargs


def _as_asked(output: ModelOutput, return_dict: bool | None, config: PretrainedConfig):
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


class _ReportingWrapper(_Wrapper):
    """A wrapper whose markovformer model is built of ``blocks`` (the Markovian Transformer): its forward returns
    hidden states and attentions on request, as ``transformers`` models do.

    ``output_hidden_states``: a tuple of n_layers + 1 tensors (B, T, D): the blocks' input (embeddings, positions
    added, a sequence classifier's [CLS] vector before each row's first real token), each block's output but the
    last, and the last hidden state (the last block's output after the final LayerNorm), as in ``transformers``'
    decoders.
    ``output_attentions``: one tensor (B, H, T, T) per layer, the attention probabilities, computed by the
    kind's reference path whatever ``backend`` (flex, banded, ...) the config names, so exact but O(T²) in memory:
    softmax, Markov (its lag biases and gates included), hybrid, decay and random-feature attention give them; the
    kinds that have no attention matrix (S4D, RetNet, Hyena, RWKV, the scan and GRU baselines, ...) and a step
    decoded from the cache give None in their place. ``return_dict=False`` returns the output's tuple."""

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

    def _finish(self, output: ModelOutput, return_dict: bool | None):
        return _as_asked(output, return_dict, self.config)


def summed_over_items(loss: Tensor | None, labels: Tensor | None, num_items_in_batch, position_ids=None):
    """A causal LM's mean loss over its micro-batch's scored tokens as their sum over ``num_items_in_batch`` (the
    scored tokens of the whole accumulated batch, which transformers' Trainer counts and passes): then the
    accumulated step is the whole batch's mean, where the mean of micro-batch means weighed a token of a
    micro-batch with fewer scored tokens more. Without ``num_items_in_batch``, ``loss`` as it is."""
    if loss is None or labels is None or num_items_in_batch is None:
        return loss
    targets = labels[:, 1:]
    if position_ids is not None:  # as the model scores them: no document's first token
        targets = targets.masked_fill(document_starts(position_ids)[:, 1:], -100)
    scored = targets.ne(-100).sum()
    total = loss * scored if bool(scored) else loss.nan_to_num() * 0  # a micro-batch of no scored token adds 0
    return total / torch.as_tensor(num_items_in_batch, device=loss.device)


class _CausalLMWrapper(_ReportingWrapper, DecodesFromCache, GenerationMixin):
    honoured_inputs = ("position_ids",)
    accepts_loss_kwargs = True  # its loss is the whole accumulated batch's mean (summed_over_items)

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, cache: MarkovformerCache | None = None, use_cache: bool | None = None,
                output_attentions: bool | None = None, output_hidden_states: bool | None = None,
                return_dict: bool | None = None, position_ids: Tensor | None = None,
                **unused) -> CausalLMOutputWithPast:  # fmt: skip
        """Every position's next-token logits; ``labels`` are the inputs (shifted inside), -100 ignored.

        With ``use_cache`` (the config's default, outside training and without labels) and a model whose layers
        decode incrementally, the output carries a ``MarkovformerCache``: given back as ``cache``, the next call
        reads only the new tokens (``attention_mask`` may cover the whole sequence; its last columns are used), as
        ``transformers``' ``generate`` does.

        ``position_ids`` (B, T) restarting at 0 mark packed documents (as ``DataCollatorWithFlattening`` writes
        them): no position sees another document and no document's first token is scored. A forward with them
        makes no cache, and a cache given with them is refused (a decoding continues one sequence)."""
        inner = self.markovformer
        if position_ids is not None and cache is not None:
            raise ValueError(f"{type(self).__name__}: position_ids (packed documents) cannot continue a cache; call "
                             "without cache (or without position_ids when decoding)")  # fmt: skip
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if (cache is None and use_cache and labels is None and position_ids is None and not self.training
                and inner.model.decodes_incrementally):  # fmt: skip
            cache = MarkovformerCache()
        if attention_mask is not None:
            attention_mask = attention_mask[:, -input_ids.shape[1]:]
            if cache is None and bool(attention_mask.bool().all()):
                attention_mask = None
        packed = {} if position_ids is None else {"position_ids": position_ids}
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   attention_mask=attention_mask, labels=labels,
                                   state=None if cache is None else cache.state, **packed)  # fmt: skip
        loss = summed_over_items(output.loss, labels, unused.get("num_items_in_batch"), position_ids)
        return self._finish(CausalLMOutputWithPast(loss=loss, logits=output.logits, **{CACHE_NAME: cache},
                                                   hidden_states=hidden,
                                                   attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


class _ScanCausalLMWrapper(_Wrapper, DecodesFromCache, GenerationMixin):
    accepts_loss_kwargs = True  # its loss is the whole accumulated batch's mean (summed_over_items)
    """The Scan Markov causal LM: ``generate`` decodes from its state (``MarkovformerCache``: h after the last token
    in recurrent mode, the last n - 1 tokens in markov mode), one token per step after the prompt; it has no blocks,
    so no hidden states or attentions are returned. Its prompts are unpadded (the recurrence has no padding
    steps); a right-padded batch runs the whole forward and makes no cache."""

    def forward(self, input_ids: Tensor | None = None, attention_mask: Tensor | None = None,
                labels: Tensor | None = None, cache: MarkovformerCache | None = None, use_cache: bool | None = None,
                return_dict: bool | None = None, **unused) -> CausalLMOutputWithPast:  # fmt: skip
        if attention_mask is not None:
            attention_mask = attention_mask[:, -input_ids.shape[1]:]
            if bool(attention_mask.bool().all()):
                attention_mask = None
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if cache is None and use_cache and labels is None and attention_mask is None and not self.training:
            cache = MarkovformerCache()
        output = self.markovformer(input_ids, attention_mask=attention_mask, labels=labels,
                                   state=None if cache is None else cache.state)  # fmt: skip
        loss = summed_over_items(output.loss, labels, unused.get("num_items_in_batch"))
        return _as_asked(CausalLMOutputWithPast(loss=loss, logits=output.logits, **{CACHE_NAME: cache}),
                         return_dict, self.config)  # fmt: skip


class _SequenceClassificationWrapper(_ReportingWrapper):
    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        """The loss follows ``config.problem_type`` as ``transformers``' heads do (see ``problem_type``):
        cross-entropy over integer class labels, mean squared error for "regression", binary cross-entropy with
        logits over multi-hot float labels (B, num_labels) for "multi_label_classification"."""
        problem = None if labels is None else problem_type(self.config, labels)
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask,
                                   labels=labels if problem == "single_label_classification" else None)  # fmt: skip
        loss = output.loss
        if problem == "regression":
            logits, target = output.logits.float(), labels.to(torch.float32)
            if logits.shape[-1] == 1:
                logits, target = logits.squeeze(-1), target.reshape(logits.shape[0])
            loss = torch.nn.functional.mse_loss(logits, target)
        elif problem == "multi_label_classification":
            loss = torch.nn.functional.binary_cross_entropy_with_logits(output.logits.float(), labels.float())
        return self._finish(SequenceClassifierOutput(loss=loss, logits=output.logits, hidden_states=hidden,
                                                     attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


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


def _tuple(values: list | None) -> tuple | None:
    return None if values is None else tuple(values)


class _TokenClassificationWrapper(_ReportingWrapper):
    def forward(self, input_ids=None, attention_mask=None, labels=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask,
                                   labels=labels)  # fmt: skip
        return self._finish(TokenClassifierOutput(loss=output.loss, logits=output.logits, hidden_states=hidden,
                                                  attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


class _BackboneWrapper(_ReportingWrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **unused):  # fmt: skip
        output, hidden = self._run(output_attentions, output_hidden_states, input_ids=input_ids,
                                   input_features=input_features, attention_mask=attention_mask)  # fmt: skip
        return self._finish(BaseModelOutput(last_hidden_state=output.last_hidden_state, hidden_states=hidden,
                                            attentions=_tuple(output.attentions)), return_dict)  # fmt: skip


@dataclasses.dataclass
class VMTOutput(ModelOutput):
    loss: Tensor | None = None  # the training objective per token (negative ELBO plus the extra terms)
    elbo: Tensor | None = None  # per token


class _VMTWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, input_features=None, return_dict=None,
                **unused) -> VMTOutput:  # fmt: skip
        output = self.markovformer(input_ids=input_ids, input_features=input_features, attention_mask=attention_mask)
        return _as_asked(VMTOutput(loss=output.loss, elbo=output.elbo), return_dict, self.config)


class _Seq2SeqWrapper(_Wrapper):
    def forward(self, input_ids=None, attention_mask=None, decoder_input_ids=None, decoder_attention_mask=None,
                labels=None, return_dict=None, **unused) -> Seq2SeqLMOutput:  # fmt: skip
        """As ``transformers``' encoder-decoders: without ``decoder_input_ids``, the decoder reads ``labels`` shifted
        right (``prepare_decoder_input_ids_from_labels``), so a batch of ``DataCollatorForSeq2Seq`` trains as it is."""
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError(f"{type(self).__name__} needs decoder_input_ids (the target shifted right, starting "
                                 f"with bos) or labels (from which they are made)")  # fmt: skip
            decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        output = self.markovformer(input_ids, decoder_input_ids, attention_mask, decoder_attention_mask, labels)
        return _as_asked(Seq2SeqLMOutput(loss=output.loss, logits=output.logits,
                                         encoder_last_hidden_state=output.encoder_last_hidden_state),
                         return_dict, self.config)  # fmt: skip

    def prepare_decoder_input_ids_from_labels(self, labels: Tensor) -> Tensor:
        """The decoder's inputs for ``labels`` (B, T): bos, then the labels shifted right by one, -100 read as
        padding (``DataCollatorForSeq2Seq`` asks a model for them)."""
        config = self.markovformer.config
        shifted = labels.new_full(labels.shape, config.pad_token_id)
        shifted[:, 0] = config.bos_token_id
        shifted[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == -100, config.pad_token_id)
        return shifted

    # generate's options that markovformer's translator decoding takes, under transformers' names
    GENERATE_OPTIONS = ("max_new_tokens", "do_sample", "temperature", "top_k", "top_p", "eos_token_id", "num_beams",
                        "length_penalty")  # fmt: skip

    @torch.no_grad()
    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None, *, max_new_tokens: int | None = None,
                 max_length: int | None = None, **options) -> Tensor:  # fmt: skip
        """Translate ``input_ids`` (B, S) with markovformer's own decoding (its cached greedy, sampling or beam
        search), returned as ``transformers``' encoder-decoder ``generate`` does: each row starts with the decoder
        start token (bos), then the target up to eos, padded with ``pad_token_id``. Options: ``max_new_tokens`` (or
        ``max_length``, which counts the start token), ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
        ``eos_token_id``, ``num_beams``, ``length_penalty``; any other raises TypeError rather than be ignored."""
        options = {key: value for key, value in options.items() if value is not None}
        config = self.markovformer.config
        if options.pop("pad_token_id", config.pad_token_id) != config.pad_token_id:
            raise TypeError(f"this translator pads with pad_token_id={config.pad_token_id}")
        unknown = sorted(set(options) - set(self.GENERATE_OPTIONS))
        if unknown:
            raise TypeError(f"generate of {type(self).__name__} does not support {unknown}; it takes "
                            f"{list(self.GENERATE_OPTIONS)} and max_length")  # fmt: skip
        if max_new_tokens is None:
            max_new_tokens = max_length - 1 if max_length is not None else config.max_positions
        target = self.markovformer.generate(input_ids, attention_mask, max_new_tokens=max_new_tokens, **options)
        start = target.new_full((target.shape[0], 1), config.bos_token_id)
        return torch.cat([start, target], dim=1)


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
                if base is _CausalLMWrapper and family == "scan_markov":
                    base = _ScanCausalLMWrapper
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
